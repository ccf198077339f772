use super::*;

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;

// ===== helpers =====

/// A wheel whose clock has been moved to `start` while empty, so every case can place entries
/// against an arbitrary `elapsed` without scheduling anything first.
#[track_caller]
fn wheel_at(slots: usize, start: u64) -> Wheel<u64> {
    let mut wheel = Wheel::new(slots);
    assert_eq!(wheel.poll(start), None);
    assert_eq!(wheel.elapsed(), start.min(MAX_TICK));
    wheel
}

/// Drives `wheel` as the driver does (sleep until `next_expiration`, poll until `None`) until
/// nothing is scheduled, freeing what fires. Returns `(now, value)` per fired entry.
///
/// Each stop either fires something or cascades a bucket, and a timer cascades at most once per
/// level, so more stops than `(len + 1) * levels` means the wheel is spinning.
#[track_caller]
fn drive(wheel: &mut Wheel<u64>) -> Vec<(u64, u64)> {
    let budget = (wheel.len() + 1) * (wheel.levels.len() + 1);
    let mut fired = Vec::new();
    let mut stops = 0;
    while let Some(next) = wheel.next_expiration() {
        stops += 1;
        assert!(stops <= budget, "no progress after {stops} stops at {next}");
        assert!(
            next >= wheel.elapsed(),
            "next_expiration {next} is in the past"
        );
        while let Some(key) = wheel.poll(next) {
            fired.push((next, wheel.try_remove(key).unwrap()));
        }
        assert_eq!(wheel.elapsed(), next);
    }
    assert_eq!(wheel.len(), 0);
    fired
}

/// Inserts one entry at `tick` into a wheel whose clock reads `start`, and checks it fires at
/// exactly `fires_at`: not one poll earlier, not skipped by a single long jump, and reached
/// by the driver's sleep-until-next-expiration loop without overshooting.
#[track_caller]
fn check(slots: usize, start: u64, tick: u64, fires_at: u64) {
    let saturated = tick.min(MAX_TICK);
    let clock = start.min(MAX_TICK);

    let mut wheel = wheel_at(slots, start);
    let key = wheel.insert(tick, tick);
    assert_eq!((wheel.len(), wheel.allocated()), (1, 1));
    assert_eq!(wheel.tick(key), Some(saturated));
    assert!(wheel.is_scheduled(key));
    let next = wheel.next_expiration().unwrap();
    assert!(
        (clock..=fires_at).contains(&next),
        "next_expiration {next} outside {clock}..={fires_at}"
    );
    if fires_at > clock {
        // The last tick before the deadline may cascade the entry but must not fire it, and
        // then the entry sits one tick ahead, so the next expiration is exact.
        assert_eq!(wheel.poll(fires_at - 1), None);
        assert_eq!(wheel.elapsed(), fires_at - 1);
        assert_eq!(wheel.next_expiration(), Some(fires_at));
        assert!(wheel.is_scheduled(key));
    }
    assert_eq!(wheel.poll(fires_at), Some(key));
    assert_eq!(wheel.poll(fires_at), None);
    assert_eq!(wheel.next_expiration(), None);
    assert_eq!((wheel.len(), wheel.allocated()), (0, 1));
    assert!(!wheel.is_scheduled(key));
    assert_eq!(wheel.try_remove(key), Some(tick));
    assert_eq!((wheel.len(), wheel.allocated()), (0, 0));

    let mut wheel = wheel_at(slots, start);
    wheel.insert(tick, tick);
    assert_eq!(drive(&mut wheel), [(fires_at, tick)]);

    // One jump to the end of time must cascade through every level within a single poll.
    let mut wheel = wheel_at(slots, start);
    let key = wheel.insert(tick, tick);
    assert_eq!(wheel.poll(u64::MAX), Some(key));
    assert_eq!(wheel.poll(u64::MAX), None);
    assert_eq!(wheel.elapsed(), MAX_TICK);
}

/// Checks that `tick`, inserted while the clock reads `elapsed`, is linked in `level`'s bucket
/// `slot`, and that the level's bitmap says so.
#[track_caller]
fn check_place(slots: usize, elapsed: u64, tick: u64, level: usize, slot: usize) {
    let mut wheel = wheel_at(slots, elapsed);
    assert_eq!(
        wheel.place(tick),
        (level, slot),
        "place({tick}) from {elapsed}"
    );
    let key = wheel.insert(tick, tick);
    assert_eq!(wheel.heads[wheel.bucket_index(level, slot)], key.index());
    assert_eq!(wheel.level_next_set(level, 0), Some(slot));
    assert_eq!(
        wheel.bucket_position(wheel.bucket_index(level, slot)),
        (level, slot)
    );
}

/// The first tick of every level above 0, for a level 0 of `slots` buckets.
fn level_starts(slots: usize) -> impl Iterator<Item = u64> {
    let bits0 = slots.trailing_zeros();
    (0..)
        .map(move |k| bits0 + UPPER_BITS * k)
        .take_while(|&bit| bit <= 61)
        .map(|bit| 1u64 << bit)
}

// ===== wheel math =====

#[test]
fn entry_fits_in_forty_bytes() {
    // The driver stores a `Waker` per timer. 40 bytes is what the arena layout was chosen for
    // (links, generation, tick, waker): any field added here costs every timer.
    assert!(std::mem::size_of::<arena::Entry<std::task::Waker>>() <= 40);
}

#[test]
fn bitmap_next_set() {
    // Around word and summary-word edges, where an off-by-one in a mask hides.
    let marks = [
        0, 1, 62, 63, 64, 65, 127, 128, 4095, 4096, 4097, 4159, 4160, 8191,
    ];
    for len in [1, 2, 63, 64, 65, 4096, 4097, 1 << 13, 1 << 20] {
        let mut bitmap = Bitmap::new(len);
        let mut set: Vec<usize> = marks.iter().copied().filter(|&b| b < len).collect();
        set.push(len - 1);
        set.sort();
        set.dedup();
        let froms: Vec<usize> = set
            .iter()
            .flat_map(|&b| [b.saturating_sub(1), b, b + 1, b + 64])
            .chain([0, len / 2, len])
            .collect();
        let expect = |set: &[usize], from: usize| set.iter().copied().find(|&b| b >= from);

        for &from in &froms {
            assert_eq!(bitmap.next_set(from), None, "len {len}: empty from {from}");
        }
        // Setting one bit at a time checks every lookup against each partial set, including
        // lone bits below `from` that must not be found.
        for (i, &bit) in set.iter().enumerate() {
            bitmap.set(bit);
            for &from in &froms {
                assert_eq!(
                    bitmap.next_set(from),
                    expect(&set[..=i], from),
                    "len {len}, from {from}"
                );
            }
        }
        // Clearing every other bit first leaves gaps where a lookup has to step from a word
        // with bits only below `from` to the next word; the rest then empties words and
        // summary words one by one.
        let order = (1..set.len()).step_by(2).chain((0..set.len()).step_by(2));
        let mut live = set.clone();
        for i in order {
            bitmap.clear(set[i]);
            live.retain(|&b| b != set[i]);
            for &from in &froms {
                assert_eq!(
                    bitmap.next_set(from),
                    expect(&live, from),
                    "len {len}, from {from}"
                );
            }
        }
    }
}

#[test]
fn level_count_covers_max_tick() {
    for (slots, levels) in [
        (1, 12),
        (2, 12),
        (4, 11),
        (64, 11),
        (1024, 10),
        (1 << 20, 8),
    ] {
        let wheel: Wheel<u64> = Wheel::new(slots);
        assert_eq!(wheel.levels.len(), levels, "slots {slots}");
        let top = wheel.levels.len() - 1;
        assert!(
            wheel.shift(top) + wheel.level_bits(top) > 61,
            "slots {slots}"
        );
        assert!(
            wheel.shift(top) <= 61,
            "slots {slots}: top level unreachable"
        );
    }
}

#[test]
fn placement() {
    // (slots, elapsed, tick, level, slot)
    let table: &[(usize, u64, u64, usize, usize)] = &[
        (64, 0, 1, 0, 1),
        (64, 0, 63, 0, 63),
        (64, 0, 64, 1, 1),
        (64, 0, 4095, 1, 63),
        (64, 0, 4096, 2, 1),
        (64, 0, 1 << 18, 3, 1),
        (64, 0, MAX_TICK, 10, 3),
        // Within level 0's rotation, then one tick past it: the level is set by the highest
        // bit that differs from `elapsed`, not by the distance.
        (64, 100, 101, 0, 37),
        (64, 100, 127, 0, 63),
        (64, 100, 128, 1, 2),
        (64, 4095, 4096, 2, 1),
        (64, (1 << 18) - 1, 1 << 18, 3, 1),
        // Level 0 has a single one-tick bucket that nothing later than `elapsed` maps to, so
        // level 1 takes the lowest six bits.
        (1, 0, 1, 1, 1),
        (1, 0, 63, 1, 63),
        (1, 0, 64, 2, 1),
        (1, 63, 64, 2, 1),
        (1, 0, MAX_TICK, 11, 3),
        (2, 0, 1, 0, 1),
        (2, 0, 2, 1, 1),
        (2, 0, 127, 1, 63),
        (2, 0, 128, 2, 1),
        (2, 1, 2, 1, 1),
        (1024, 0, 1023, 0, 1023),
        (1024, 0, 1024, 1, 1),
        (1024, 0, (1 << 16) - 1, 1, 63),
        (1024, 0, 1 << 16, 2, 1),
        (1024, 0, MAX_TICK, 9, 15),
        (1 << 20, 0, (1 << 20) - 1, 0, (1 << 20) - 1),
        (1 << 20, 0, 1 << 20, 1, 1),
        (1 << 20, 0, 1 << 26, 2, 1),
        (1 << 20, 0, MAX_TICK, 7, 63),
        (1 << 20, MAX_TICK - 1, MAX_TICK, 0, (1 << 20) - 1),
    ];
    for &(slots, elapsed, tick, level, slot) in table {
        check_place(slots, elapsed, tick, level, slot);
    }
}

#[test]
fn placement_at_every_level_boundary() {
    for slots in [1, 2, 64, 1024, 1 << 20] {
        for (k, start) in level_starts(slots).enumerate() {
            let level = k + 1;
            check_place(slots, 0, start, level, 1);
            // A single tick's distance still lands a level up when it carries into that digit.
            check_place(slots, start - 1, start, level, 1);
            // The tick before a boundary is the last bucket of the level below.
            if start > 1 {
                let (below, last) = if level == 1 {
                    (0, slots - 1)
                } else {
                    (level - 1, 63)
                };
                check_place(slots, 0, start - 1, below, last);
            }
        }
    }
}

#[test]
fn fires_on_time() {
    // (slots, start, tick, fires at)
    let table: &[(usize, u64, u64, u64)] = &[
        // Due at once: at or before `elapsed`.
        (64, 0, 0, 0),
        (64, 100, 100, 100),
        (64, 100, 5, 100),
        (1, 0, 0, 0),
        (1, 7, 0, 7),
        // Level 0 and its edges.
        (64, 0, 1, 1),
        (64, 0, 63, 63),
        (64, 0, 64, 64),
        (64, 0, 65, 65),
        (64, 63, 64, 64),
        (64, 100, 101, 101),
        (64, 100, 163, 163),
        (64, 0, 4095, 4095),
        (64, 0, 4096, 4096),
        (64, 4095, 4096, 4096),
        (64, 4095, 4097, 4097),
        (64, 1, 1 << 40, 1 << 40),
        (64, 12345, (1 << 40) + 777, (1 << 40) + 777),
        (1, 0, 1, 1),
        (1, 0, 63, 63),
        (1, 0, 64, 64),
        (1, 0, 1 << 40, 1 << 40),
        (2, 0, 1, 1),
        (2, 1, 2, 2),
        (2, 0, 129, 129),
        (1024, 1023, 1024, 1024),
        (1024, 0, 1 << 16, 1 << 16),
        (1024, 5, (1 << 16) + 5, (1 << 16) + 5),
        (1 << 20, (1 << 20) - 1, 1 << 20, 1 << 20),
        (1 << 20, 0, 1 << 26, 1 << 26),
        (1 << 20, 5, (1 << 40) + 3, (1 << 40) + 3),
        // Saturation: nothing is kept beyond MAX_TICK, and it still fires.
        (64, 0, MAX_TICK - 1, MAX_TICK - 1),
        (64, 0, MAX_TICK, MAX_TICK),
        (64, 0, MAX_TICK + 1, MAX_TICK),
        (64, 0, u64::MAX, MAX_TICK),
        (1, 0, u64::MAX, MAX_TICK),
        (1024, 0, u64::MAX, MAX_TICK),
        (1 << 20, 0, u64::MAX, MAX_TICK),
        (1, MAX_TICK - 1, MAX_TICK, MAX_TICK),
        (64, MAX_TICK - 1, u64::MAX, MAX_TICK),
        (64, MAX_TICK, u64::MAX, MAX_TICK),
        (64, u64::MAX, 3, MAX_TICK),
    ];
    for &(slots, start, tick, fires_at) in table {
        check(slots, start, tick, fires_at);
    }
}

#[test]
fn fires_on_time_at_every_level_boundary() {
    for slots in [1, 2, 64, 1024, 1 << 20] {
        for start in level_starts(slots) {
            check(slots, 0, start - 1, start - 1);
            check(slots, 0, start, start);
            check(slots, 0, start + 1, start + 1);
            check(slots, start - 1, start, start);
            check(slots, start - 1, start + 1, start + 1);
            // The last tick of this level's first bucket, crossing every lower level's wrap.
            check(slots, 1, 2 * start - 1, 2 * start - 1);
        }
    }
}

// ===== reschedule, remove, stale keys =====

#[test]
fn reschedule() {
    // (first tick, poll to, reschedule to, fires at). Polling to or past `first` fires the
    // entry, so the reschedule has to schedule a detached entry again.
    let table: &[(u64, u64, u64, u64)] = &[
        (10, 0, 5000, 5000),
        (5000, 0, 10, 10),
        (5000, 0, 5000, 5000),
        (5000, 0, u64::MAX, MAX_TICK),
        // Into the past: due at the clock, not at the tick asked for.
        (5000, 100, 50, 100),
        (5000, 100, 0, 100),
        // Polling to 4096 has already cascaded the entry out of its first bucket.
        (5000, 4096, 4100, 4100),
        (5000, 4999, 4999, 4999),
        (5000, 4999, 1 << 30, 1 << 30),
        // After `poll` handed it out.
        (10, 20, 30, 30),
        (10, 20, 0, 20),
        (10, 20, 20, 20),
        (10, 1 << 40, (1 << 40) + 64, (1 << 40) + 64),
    ];
    for slots in [1, 64, 1024] {
        for &(first, poll_to, to, fires_at) in table {
            let mut wheel = wheel_at(slots, 0);
            let key = wheel.insert(first, 1);
            let other = wheel.insert(first, 2);
            let mut fired = Vec::new();
            while let Some(k) = wheel.poll(poll_to) {
                fired.push(k);
            }
            assert_eq!(fired.len(), if first <= poll_to { 2 } else { 0 });
            assert!(wheel.reschedule(key, to));
            assert_eq!(wheel.tick(key), Some(to.min(MAX_TICK)));
            assert!(wheel.is_scheduled(key));
            if first <= poll_to {
                assert!(wheel.try_remove(other).is_some());
                assert_eq!(
                    drive(&mut wheel),
                    [(fires_at, 1)],
                    "slots {slots}: {first} -> {to}"
                );
            } else {
                // The untouched neighbour in the old bucket must keep its own time.
                let mut got = drive(&mut wheel);
                got.sort();
                let mut want = vec![(fires_at, 1), (first, 2)];
                want.sort();
                assert_eq!(got, want, "slots {slots}: {first} -> {to}");
            }
        }
    }
}

#[test]
fn unschedule_and_detached_entries() {
    let mut wheel = wheel_at(64, 0);
    let detached = wheel.insert_detached(10, 1);
    let key = wheel.insert(20, 2);
    assert_eq!((wheel.len(), wheel.allocated()), (1, 2));
    assert!(!wheel.is_scheduled(detached));
    assert_eq!(wheel.tick(detached), Some(10));

    assert!(wheel.unschedule(key));
    assert!(
        wheel.unschedule(key),
        "unscheduling a detached entry is a no-op"
    );
    assert_eq!((wheel.len(), wheel.allocated()), (0, 2));
    assert_eq!(wheel.next_expiration(), None);
    assert_eq!(wheel.poll(100), None);
    assert_eq!(wheel.get(key), Some(&2));

    // A detached entry keeps its old tick, which is now in the past.
    assert!(wheel.reschedule(detached, 150));
    assert!(wheel.reschedule(key, 0));
    assert_eq!(wheel.len(), 2);
    assert_eq!(wheel.next_expiration(), Some(100));
    assert_eq!(wheel.poll(100), Some(key));
    assert_eq!(wheel.poll(149), None);
    assert_eq!(wheel.poll(150), Some(detached));
    assert_eq!((wheel.len(), wheel.allocated()), (0, 2));

    let far = wheel.insert_detached(u64::MAX, 3);
    assert_eq!(wheel.tick(far), Some(MAX_TICK));
    assert_eq!(wheel.poll(u64::MAX), None, "a detached entry never fires");
    assert_eq!(wheel.get(far), Some(&3));
}

#[test]
fn stale_keys_never_match() {
    let mut wheel = wheel_at(64, 0);
    let old = wheel.insert(10, 1);
    assert_eq!(wheel.try_remove(old), Some(1));
    assert_eq!(wheel.try_remove(old), None);

    // The freed slot is reused; only the generation tells the two keys apart.
    let new = wheel.insert(20, 2);
    assert_eq!(new.index(), old.index());
    assert_ne!(new, old);
    for stale in [old, Key::DANGLING] {
        assert_eq!(wheel.try_remove(stale), None);
        assert!(!wheel.reschedule(stale, 5));
        assert!(!wheel.unschedule(stale));
        assert_eq!(wheel.get(stale), None);
        assert_eq!(wheel.get_mut(stale), None);
        assert_eq!(wheel.tick(stale), None);
        assert!(!wheel.is_scheduled(stale));
    }
    assert_eq!((wheel.len(), wheel.allocated()), (1, 1));
    assert_eq!(wheel.tick(new), Some(20));
    assert_eq!(drive(&mut wheel), [(20, 2)]);

    // A key freed after `poll` handed it out goes stale the same way.
    let fired = wheel.insert(30, 3);
    assert_eq!(wheel.poll(30), Some(fired));
    assert_eq!(wheel.try_remove(fired), Some(3));
    assert!(!wheel.reschedule(fired, 40));
    assert_eq!(wheel.poll(u64::MAX), None);
}

#[test]
fn remove_from_due_list() {
    let mut wheel = wheel_at(64, 100);
    let keys: Vec<Key> = (0..3).map(|i| wheel.insert(50 + i, i)).collect();
    let first = wheel.poll(100).unwrap();
    assert_eq!(wheel.len(), 2);
    let (a, b) = match keys.iter().position(|&k| k == first).unwrap() {
        0 => (keys[1], keys[2]),
        1 => (keys[0], keys[2]),
        _ => (keys[0], keys[1]),
    };
    assert!(wheel.try_remove(a).is_some());
    assert_eq!(wheel.len(), 1);
    assert_eq!(wheel.next_expiration(), Some(100));
    assert_eq!(wheel.poll(100), Some(b));
    assert_eq!(wheel.poll(100), None);
    assert_eq!((wheel.len(), wheel.allocated()), (0, 2));
}

#[test]
fn remove_after_cascade() {
    let mut wheel = wheel_at(64, 0);
    let gone = wheel.insert(5000, 1);
    wheel.insert(5001, 2);
    // 4096 starts the level-2 bucket both live in, so they have cascaded to a lower level.
    assert_eq!(wheel.poll(4096), None);
    assert_eq!(wheel.try_remove(gone), Some(1));
    assert_eq!(drive(&mut wheel), [(5001, 2)]);
    assert!((0..wheel.levels.len()).all(|l| wheel.level_next_set(l, 0).is_none()));
}

// ===== next_expiration and poll =====

#[test]
fn next_expiration_bounds() {
    for slots in [1usize, 2, 64, 1024] {
        let bits0 = slots.trailing_zeros();
        for elapsed in [0, 1, 63, 64, 100, 4095, 4096, (1 << 30) + 17, MAX_TICK - 70] {
            for delta in [
                1,
                2,
                63,
                64,
                65,
                1000,
                4095,
                4096,
                1 << 20,
                (1 << 33) + 5,
                1 << 61,
            ] {
                let tick = elapsed.saturating_add(delta).min(MAX_TICK);
                if tick == elapsed {
                    continue;
                }
                let mut wheel = wheel_at(slots, elapsed);
                wheel.insert(tick, 0);
                let next = wheel.next_expiration().unwrap();
                assert!(
                    (elapsed + 1..=tick).contains(&next),
                    "slots {slots} elapsed {elapsed} tick {tick}: next {next}"
                );
                if tick >> bits0 == elapsed >> bits0 {
                    assert_eq!(
                        next, tick,
                        "slots {slots} elapsed {elapsed}: level 0 is exact"
                    );
                }
                // A later entry must not pull the expiration later.
                wheel.insert(tick.saturating_add(delta).min(MAX_TICK), 0);
                assert_eq!(wheel.next_expiration(), Some(next));
                // Anything due makes the expiration "now".
                wheel.insert(elapsed, 0);
                assert_eq!(wheel.next_expiration(), Some(elapsed));
            }
        }
    }
}

#[test]
fn poll_never_moves_time_back() {
    let mut wheel = wheel_at(64, 100);
    let later = wheel.insert(150, 1);
    assert_eq!(wheel.poll(50), None);
    assert_eq!(wheel.elapsed(), 100);
    assert_eq!(wheel.len(), 1);

    // Due by the wheel's clock, even though the caller's `now` is behind it.
    let past = wheel.insert(20, 2);
    assert_eq!(wheel.poll(50), Some(past));
    assert_eq!(wheel.poll(50), None);
    assert_eq!(wheel.elapsed(), 100);
    assert_eq!(wheel.poll(149), None);
    assert_eq!(wheel.poll(150), Some(later));
}

#[test]
fn large_jump_fires_exactly_what_is_due() {
    let jump = 1u64 << 40;
    // Ticks on both sides of every level boundary up to 2^41.
    let ticks: Vec<u64> = (0..=41)
        .flat_map(|bit| {
            let t = 1u64 << bit;
            [t - 1, t, t + 1, t + 12345]
        })
        .chain([jump - 1, jump, jump + 1, MAX_TICK, u64::MAX])
        .collect();
    for slots in [1, 2, 64, 1024, 1 << 20] {
        let mut wheel = wheel_at(slots, 0);
        for &t in &ticks {
            wheel.insert(t, t);
        }
        let mut fired = Vec::new();
        while let Some(key) = wheel.poll(jump) {
            fired.push(wheel.try_remove(key).unwrap());
        }
        fired.sort();
        let mut due: Vec<u64> = ticks.iter().copied().filter(|&t| t <= jump).collect();
        due.sort();
        assert_eq!(fired, due, "slots {slots}");
        assert_eq!(wheel.elapsed(), jump);
        assert_eq!(wheel.len(), ticks.len() - due.len());
        assert_eq!(wheel.next_expiration().map(|n| n > jump), Some(true));

        let mut rest: Vec<u64> = drive(&mut wheel)
            .into_iter()
            .map(|(now, t)| {
                assert_eq!(now, t.min(MAX_TICK), "slots {slots}: fired late or early");
                t
            })
            .collect();
        rest.sort();
        let mut want: Vec<u64> = ticks.iter().copied().filter(|&t| t > jump).collect();
        want.sort();
        assert_eq!(rest, want, "slots {slots}");
    }
}

#[test]
fn many_entries_in_one_bucket() {
    let mut wheel = wheel_at(64, 0);
    let same: Vec<Key> = (0..1000).map(|_| wheel.insert(777, 777)).collect();
    // 4096..8192 is a single level-2 bucket from 0: they cascade together and split up.
    let spread: Vec<Key> = (4096..5096).map(|t| wheel.insert(t, t)).collect();
    assert_eq!(wheel.len(), 2000);
    for &key in same.iter().step_by(2) {
        assert_eq!(wheel.try_remove(key), Some(777));
    }
    for &key in spread.iter().step_by(3) {
        assert!(wheel.try_remove(key).is_some());
    }
    assert_eq!(wheel.len(), 500 + 666);

    let fired = drive(&mut wheel);
    assert_eq!(fired.len(), 500 + 666);
    assert!(fired.iter().all(|&(now, t)| now == t));
    assert!(fired.windows(2).all(|w| w[0].0 <= w[1].0));
    assert_eq!(fired.iter().filter(|&&(_, t)| t == 777).count(), 500);
    assert_eq!(wheel.allocated(), 0);
}

#[test]
fn len_and_allocated() {
    let mut wheel = wheel_at(64, 0);
    let a = wheel.insert(10, 1);
    let b = wheel.insert(10_000, 2);
    let c = wheel.insert_detached(5, 3);
    assert_eq!((wheel.len(), wheel.allocated()), (2, 3));
    let keys: HashSet<Key> = wheel.keys().into_iter().collect();
    assert_eq!(keys, HashSet::from([a, b, c]));

    assert_eq!(wheel.poll(10), Some(a));
    assert_eq!((wheel.len(), wheel.allocated()), (1, 3));
    assert!(wheel.reschedule(a, 20));
    assert!(wheel.reschedule(a, 30));
    assert_eq!((wheel.len(), wheel.allocated()), (2, 3));
    *wheel.get_mut(c).unwrap() = 33;
    assert_eq!(wheel.try_remove(c), Some(33));
    assert_eq!(wheel.try_remove(b), Some(2));
    assert_eq!((wheel.len(), wheel.allocated()), (1, 1));
    assert_eq!(wheel.keys(), [a]);
    assert_eq!(drive(&mut wheel), [(30, 1)]);
    assert_eq!((wheel.len(), wheel.allocated()), (0, 0));
    assert!(wheel.keys().is_empty());
}

#[test]
fn peek_names_the_earliest_entry() {
    let mut wheel = wheel_at(64, 0);
    assert_eq!(wheel.peek(), None);
    // One level-1 bucket ([64, 128)) holds both; the later one is linked at its head.
    let early = wheel.insert(70, 1);
    let late = wheel.insert(100, 2);
    assert_eq!(wheel.peek(), Some(early));
    let sooner = wheel.insert(3, 3);
    assert_eq!(wheel.peek(), Some(sooner), "a lower level comes first");
    assert_eq!(wheel.try_remove(sooner), Some(3));
    assert_eq!(wheel.poll(69), None);
    assert_eq!(wheel.peek(), Some(early), "after the cascade to level 0");
    assert_eq!(wheel.poll(70), Some(early));
    assert_eq!(wheel.try_remove(early), Some(1));
    let due = wheel.insert(5, 4);
    assert_eq!(wheel.peek(), Some(due), "the due list comes first");
    assert_eq!(wheel.try_remove(due), Some(4));
    assert_eq!(wheel.peek(), Some(late));
}

#[test]
fn capacity_reserve_and_shrink() {
    let mut wheel = wheel_at(64, 0);
    assert_eq!(wheel.capacity(), 0);
    wheel.reserve(10);
    assert!(wheel.capacity() >= 10);
    let key = wheel.insert(5, 1);
    wheel.shrink_to_fit();
    assert_eq!(wheel.capacity(), 1);
    assert_eq!(wheel.try_remove(key), Some(1));
}

// ===== property test against a model =====

/// A tick relative to the wheel's clock at the time the op runs, so that sequences stay
/// interesting after time has moved on.
#[derive(Debug, Clone, Copy)]
enum At {
    After(u64),
    Before(u64),
    Abs(u64),
}

impl At {
    fn resolve(self, elapsed: u64) -> u64 {
        match self {
            At::After(d) => elapsed.saturating_add(d),
            At::Before(d) => elapsed.saturating_sub(d),
            At::Abs(t) => t,
        }
    }
}

/// Deadlines: mostly near the clock and within each level's reach, some far, some saturating.
fn deadline() -> BoxedStrategy<At> {
    prop_oneof![
        3 => (0u64..4).prop_map(At::After),
        1 => (0u64..4).prop_map(At::Before),
        3 => (0u64..64).prop_map(At::After),
        2 => (0u64..1 << 12).prop_map(At::After),
        2 => (0u64..1 << 24).prop_map(At::After),
        1 => (0u64..1 << 12).prop_map(At::Before),
        1 => (1u64 << 24..1 << 50).prop_map(At::After),
        1 => (0..=MAX_TICK).prop_map(At::Abs),
        1 => prop_oneof![Just(MAX_TICK - 1), Just(MAX_TICK), Just(MAX_TICK + 1), Just(u64::MAX)]
            .prop_map(At::Abs),
    ]
    .boxed()
}

/// Targets of `poll`: mostly short steps, so that entries fire one bucket at a time.
fn target() -> BoxedStrategy<At> {
    prop_oneof![
        4 => (0u64..4).prop_map(At::After),
        1 => (0u64..64).prop_map(At::Before),
        3 => (0u64..128).prop_map(At::After),
        2 => (0u64..1 << 13).prop_map(At::After),
        1 => (0u64..1 << 25).prop_map(At::After),
        1 => Just(At::After(1 << 40)),
        1 => Just(At::Abs(u64::MAX)),
    ]
    .boxed()
}

/// What the caller does with an entry `poll` hands out.
#[derive(Debug, Clone, Copy)]
enum OnFire {
    Keep,
    Free,
    /// Re-arm `period` after its tick, like an interval; may come due again in the same drain.
    Rearm(u64),
}

#[derive(Debug, Clone)]
enum Op {
    Insert(At),
    InsertDetached(At),
    /// Picks from every key ever handed out, so it is often stale.
    Remove(usize),
    Reschedule(usize, At),
    Unschedule(usize),
    /// Poll until `None`.
    Advance(At, OnFire),
    /// A single poll, leaving the wheel mid-batch with its clock behind the caller's `now`.
    PollOnce(At),
    /// The driver's loop: sleep until `next_expiration`, then poll until `None`.
    AdvanceToNext(OnFire),
}

/// Boxed, like `deadline` and `target`: unboxed, the nested unions make value trees so large
/// that moving them dominates a debug-build run.
fn op() -> BoxedStrategy<Op> {
    let on_fire = prop_oneof![
        Just(OnFire::Keep),
        Just(OnFire::Free),
        prop_oneof![0u64..3, 1u64..100, 1u64..1 << 14].prop_map(OnFire::Rearm),
    ]
    .boxed();
    prop_oneof![
        6 => deadline().prop_map(Op::Insert),
        1 => deadline().prop_map(Op::InsertDetached),
        2 => any::<usize>().prop_map(Op::Remove),
        3 => (any::<usize>(), deadline()).prop_map(|(i, at)| Op::Reschedule(i, at)),
        1 => any::<usize>().prop_map(Op::Unschedule),
        3 => (target(), on_fire.clone()).prop_map(|(at, f)| Op::Advance(at, f)),
        2 => target().prop_map(Op::PollOnce),
        3 => on_fire.prop_map(Op::AdvanceToNext),
    ]
    .boxed()
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Scheduled(u64),
    Detached(u64),
    Freed,
}

/// The trivially correct wheel: a table of every key ever handed out and what became of it.
/// An entry's value is its index here.
struct Model {
    keys: Vec<Key>,
    states: Vec<State>,
    ids: HashMap<Key, usize>,
}

impl Model {
    fn add(&mut self, key: Key, state: State) {
        let id = self.keys.len();
        assert!(
            self.ids.insert(key, id).is_none(),
            "key {key:?} handed out twice"
        );
        self.keys.push(key);
        self.states.push(state);
    }

    fn scheduled(&self) -> impl Iterator<Item = u64> + '_ {
        self.states.iter().filter_map(|s| match *s {
            State::Scheduled(t) => Some(t),
            _ => None,
        })
    }
}

struct Harness {
    wheel: Wheel<usize>,
    model: Model,
    /// The latest `now` any poll was given: the wheel's clock may never pass it.
    max_now: u64,
}

impl Harness {
    fn new(slots: usize) -> Self {
        Harness {
            wheel: Wheel::new(slots),
            model: Model {
                keys: Vec::new(),
                states: Vec::new(),
                ids: HashMap::new(),
            },
            max_now: 0,
        }
    }

    fn pick(&self, i: usize) -> Option<usize> {
        (!self.model.keys.is_empty()).then(|| i % self.model.keys.len())
    }

    fn run(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let elapsed = self.wheel.elapsed();
        match *op {
            Op::Insert(at) => {
                let tick = at.resolve(elapsed);
                let id = self.model.keys.len();
                let key = self.wheel.insert(tick, id);
                self.model.add(key, State::Scheduled(tick.min(MAX_TICK)));
            }
            Op::InsertDetached(at) => {
                let tick = at.resolve(elapsed);
                let id = self.model.keys.len();
                let key = self.wheel.insert_detached(tick, id);
                self.model.add(key, State::Detached(tick.min(MAX_TICK)));
            }
            Op::Remove(i) => {
                let Some(id) = self.pick(i) else {
                    return Ok(());
                };
                let want = (self.model.states[id] != State::Freed).then_some(id);
                prop_assert_eq!(self.wheel.try_remove(self.model.keys[id]), want);
                self.model.states[id] = State::Freed;
            }
            Op::Reschedule(i, at) => {
                let Some(id) = self.pick(i) else {
                    return Ok(());
                };
                let tick = at.resolve(elapsed);
                let live = self.model.states[id] != State::Freed;
                prop_assert_eq!(self.wheel.reschedule(self.model.keys[id], tick), live);
                if live {
                    self.model.states[id] = State::Scheduled(tick.min(MAX_TICK));
                }
            }
            Op::Unschedule(i) => {
                let Some(id) = self.pick(i) else {
                    return Ok(());
                };
                let live = self.model.states[id] != State::Freed;
                prop_assert_eq!(self.wheel.unschedule(self.model.keys[id]), live);
                if let State::Scheduled(t) = self.model.states[id] {
                    self.model.states[id] = State::Detached(t);
                }
            }
            Op::Advance(at, on_fire) => {
                self.drain(at.resolve(elapsed), on_fire, false)?;
            }
            Op::PollOnce(at) => {
                let now = at.resolve(elapsed);
                self.max_now = self.max_now.max(now.min(MAX_TICK));
                match self.wheel.poll(now) {
                    Some(key) => {
                        self.fired(key, now, elapsed, false)?;
                    }
                    None => self.check_drained(now, elapsed)?,
                }
            }
            Op::AdvanceToNext(on_fire) => {
                if let Some(next) = self.wheel.next_expiration() {
                    self.drain(next, on_fire, true)?;
                }
            }
        }
        self.check_invariants()
    }

    /// Polls `now` until `None`, checking each entry against the model as it comes out.
    fn drain(&mut self, now: u64, on_fire: OnFire, exact: bool) -> Result<(), TestCaseError> {
        let before = self.wheel.elapsed();
        self.max_now = self.max_now.max(now.min(MAX_TICK));
        let mut rearms = 4;
        while let Some(key) = self.wheel.poll(now) {
            let (id, tick) = self.fired(key, now, before, exact)?;
            match on_fire {
                OnFire::Keep => {}
                OnFire::Free => {
                    prop_assert_eq!(self.wheel.try_remove(key), Some(id));
                    self.model.states[id] = State::Freed;
                }
                OnFire::Rearm(period) if rearms > 0 => {
                    rearms -= 1;
                    let again = tick.saturating_add(period);
                    prop_assert!(self.wheel.reschedule(key, again));
                    self.model.states[id] = State::Scheduled(again.min(MAX_TICK));
                }
                OnFire::Rearm(_) => {}
            }
            prop_assert_eq!(self.wheel.len(), self.model.scheduled().count());
        }
        self.check_drained(now, before)
    }

    /// `poll(now)` handed out `key` when the clock read `before`: it must be a scheduled
    /// entry whose tick the wheel's clock could have reached.
    fn fired(
        &mut self,
        key: Key,
        now: u64,
        before: u64,
        exact: bool,
    ) -> Result<(usize, u64), TestCaseError> {
        let Some(&id) = self.model.ids.get(&key) else {
            return Err(TestCaseError::fail(format!(
                "poll returned unknown key {key:?}"
            )));
        };
        let State::Scheduled(tick) = self.model.states[id] else {
            return Err(TestCaseError::fail(format!(
                "poll returned entry {id} in state {:?}",
                self.model.states[id]
            )));
        };
        let clock = now.min(MAX_TICK).max(before);
        prop_assert!(
            tick <= clock,
            "entry {} at {} fired early, at {}",
            id,
            tick,
            clock
        );
        if exact {
            // The driver slept until `now` = next_expiration; anything not already overdue
            // must have been due exactly then, or the sleep overshot it.
            prop_assert!(
                tick <= before || tick == now,
                "entry {} at {} fired at {}",
                id,
                tick,
                now
            );
        }
        prop_assert_eq!(self.wheel.get(key), Some(&id));
        prop_assert!(!self.wheel.is_scheduled(key));
        self.model.states[id] = State::Detached(tick);
        Ok((id, tick))
    }

    /// `poll(now)` returned `None` with the clock at `before` when it started: the clock is
    /// now at `now` (or stays ahead of it) and nothing at or before it is still scheduled.
    fn check_drained(&self, now: u64, before: u64) -> Result<(), TestCaseError> {
        let elapsed = self.wheel.elapsed();
        prop_assert_eq!(elapsed, now.min(MAX_TICK).max(before));
        if let Some(lost) = self.model.scheduled().find(|&t| t <= elapsed) {
            return Err(TestCaseError::fail(format!(
                "entry at {lost} not fired by poll({now}); clock {elapsed}"
            )));
        }
        Ok(())
    }

    fn check_invariants(&self) -> Result<(), TestCaseError> {
        let wheel = &self.wheel;
        let model = &self.model;
        let elapsed = wheel.elapsed();
        prop_assert!(elapsed <= self.max_now);
        prop_assert_eq!(wheel.len(), model.scheduled().count());
        let live = model.states.iter().filter(|&&s| s != State::Freed).count();
        prop_assert_eq!(wheel.allocated(), live);

        match (wheel.next_expiration(), model.scheduled().min()) {
            (None, None) => {}
            (Some(next), Some(min)) => {
                prop_assert!(
                    next >= elapsed,
                    "next_expiration {} behind clock {}",
                    next,
                    elapsed
                );
                prop_assert!(
                    next <= min.max(elapsed),
                    "next_expiration {} after {}",
                    next,
                    min
                );
                let bits0 = wheel.bits0;
                if min <= elapsed || min >> bits0 == elapsed >> bits0 {
                    prop_assert_eq!(next, min.max(elapsed));
                }
            }
            (next, min) => {
                return Err(TestCaseError::fail(format!(
                    "next_expiration {next:?} but earliest scheduled {min:?}"
                )));
            }
        }

        for (id, (&key, &state)) in model.keys.iter().zip(&model.states).enumerate() {
            match state {
                State::Freed => {
                    prop_assert_eq!(wheel.get(key), None);
                    prop_assert_eq!(wheel.tick(key), None);
                }
                State::Scheduled(t) | State::Detached(t) => {
                    prop_assert_eq!(wheel.get(key), Some(&id));
                    prop_assert_eq!(wheel.tick(key), Some(t));
                }
            }
            prop_assert_eq!(
                wheel.is_scheduled(key),
                matches!(state, State::Scheduled(_))
            );
        }
        let keys: HashSet<Key> = wheel.keys().into_iter().collect();
        let want: HashSet<Key> = model
            .keys
            .iter()
            .zip(&model.states)
            .filter(|(_, s)| **s != State::Freed)
            .map(|(&k, _)| k)
            .collect();
        prop_assert_eq!(keys, want);
        Ok(())
    }
}

proptest! {
    // CI needs at least 10k cases; PROPTEST_CASES can only raise it, for soak runs. CI runs
    // a debug build, where the default ChaCha generator alone would take half a minute.
    #![proptest_config(ProptestConfig {
        cases: ProptestConfig::default().cases.max(10_000),
        rng_algorithm: proptest::test_runner::RngAlgorithm::XorShift,
        ..ProptestConfig::default()
    })]

    #[test]
    fn matches_model(
        // 2^13 slots is the smallest level 0 whose bitmap needs two summary words.
        slots in prop_oneof![Just(1usize), Just(2), Just(4), Just(64), Just(1024), Just(1 << 13)],
        ops in prop::collection::vec(op(), 1..64),
    ) {
        let mut harness = Harness::new(slots);
        for op in &ops {
            harness.run(op)?;
        }
        // Whatever is left must come out, each entry exactly at its tick, and each stop
        // must fire or cascade something: a timer cascades at most once per level.
        let mut stops = (harness.wheel.len() + 1) * (harness.wheel.levels.len() + 1);
        while harness.wheel.next_expiration().is_some() {
            prop_assert!(stops > 0, "the driver loop makes no progress");
            stops -= 1;
            harness.run(&Op::AdvanceToNext(OnFire::Free))?;
        }
        prop_assert_eq!(harness.wheel.len(), 0);
    }
}

#[test]
fn shrink_when_empty_frees_everything_and_keeps_keys_stale() {
    let mut wheel = wheel_at(64, 0);
    let old = wheel.insert(5, 1);
    assert_eq!(wheel.try_remove(old), Some(1));
    wheel.shrink_to_fit();
    assert_eq!(wheel.capacity(), 0);
    let new = wheel.insert(5, 2);
    assert_ne!(old, new);
    assert_eq!(wheel.try_remove(old), None);
    assert_eq!(wheel.try_remove(new), Some(2));
}

#[test]
fn key_debug_names_index_and_generation() {
    let mut wheel = Wheel::new(8);
    let first = wheel.insert(5, 0u64);
    wheel.try_remove(first);
    let second = wheel.insert(5, 0u64);
    assert_eq!(format!("{second:?}"), "Key { index: 0, generation: 1 }");
}
