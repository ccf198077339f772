//! `IdleTracker::builder` (tick, shards, hasher), map-like key lookups, `deadline`, the
//! undelivered backlog, and the driver yielding inside a large turn. Paused clock.

use std::time::Duration;

use tokio::time::{sleep, Instant};
use wheel_timer::{IdleTracker, Timer};

use crate::support::{ms, Events};

#[tokio::test(start_paused = true)]
async fn the_default_tick_is_a_fraction_of_the_timeout() {
    let timer = Timer::new();
    let (tracker, _expirations) = IdleTracker::<u32>::new(&timer, Duration::from_secs(30));
    assert_eq!(tracker.tick(), ms(469));
    assert_eq!(tracker.idle_timeout(), Duration::from_secs(30));
    let (short, _expirations) = IdleTracker::<u32>::new(&timer, ms(50));
    assert_eq!(short.tick(), timer.tick_duration());
}

/// With a 250 ms tick a 1 s timeout expires on a tick boundary at or after the deadline,
/// never before, and at most one tick after it on the paused clock.
#[tokio::test(start_paused = true)]
async fn a_key_expires_within_one_tracker_tick_of_its_deadline() {
    let timer = Timer::new();
    let (tracker, mut expirations) = IdleTracker::builder(Duration::from_secs(1))
        .tick(ms(250))
        .shards(3)
        .build(&timer);
    assert_eq!(tracker.tick(), ms(250));
    for offset in [0u64, 10, 120, 249, 250, 251, 400] {
        let t0 = Instant::now();
        sleep(ms(offset)).await;
        let touched = Instant::now();
        tracker.touch(offset);
        assert_eq!(expirations.next_batch().await, Some(vec![offset]));
        let late = Instant::now() - touched;
        assert!(
            late >= Duration::from_secs(1) && late <= ms(1250),
            "touched {:?} after a start, expired {late:?} after the touch",
            touched - t0
        );
    }
}

/// `deadline` is when the driver turn that expires the key is due, and that turn expires
/// it then (paused clock: the driver is punctual).
#[tokio::test(start_paused = true)]
async fn deadline_says_when_an_untouched_key_expires() {
    let timer = Timer::new();
    let (tracker, mut expirations) = IdleTracker::builder(Duration::from_secs(1))
        .tick(ms(100))
        .build(&timer);
    tracker.touch(1u8);
    sleep(ms(350)).await;
    tracker.touch(2u8);
    let first = tracker.deadline(&1).expect("tracked");
    let second = tracker.deadline(&2).expect("tracked");
    assert!(first < second);
    assert_eq!(expirations.next_batch().await, Some(vec![1]));
    assert_on(first);
    assert_eq!(tracker.deadline(&1), None);
    assert_eq!(expirations.next_batch().await, Some(vec![2]));
    assert_on(second);
}

/// Now is `at`, up to tokio's rounding of a timer to its millisecond.
#[track_caller]
fn assert_on(at: Instant) {
    let now = Instant::now();
    assert!(now >= at && now - at < ms(1), "{:?} off", now - at);
}

/// Keys are looked up by any borrowed form, with any `BuildHasher`.
#[tokio::test(start_paused = true)]
async fn string_keys_are_looked_up_by_str_with_a_chosen_hasher() {
    let timer = Timer::new();
    let (tracker, mut expirations) = IdleTracker::<String>::builder(ms(100))
        .hasher(std::hash::RandomState::new())
        .build(&timer);
    tracker.touch("alice".to_string());
    tracker.touch("bob".to_string());
    assert!(tracker.contains("alice"));
    assert!(tracker.deadline("bob").is_some());
    assert!(tracker.remove("alice"));
    assert!(!tracker.remove("alice"));
    let handle = tracker.register("carol".to_string());
    assert!(tracker.contains("carol"));
    let mut batch = expirations.next_batch().await.expect("a batch");
    batch.sort();
    assert_eq!(batch, ["bob", "carol"]);
    assert!(handle.is_expired());
}

/// An `Expirations` nobody polls keeps its batches: `undelivered` counts them and a warning
/// is logged when the backlog passes the threshold, then again each time it doubles.
#[test]
fn an_unpolled_stream_is_counted_and_warned_about() {
    let events = Events::at(tracing::Level::WARN);
    let _default = tracing::subscriber::set_default(events.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let timer = Timer::new();
        let (tracker, mut expirations) = IdleTracker::builder(ms(10))
            .warn_undelivered(100)
            .build(&timer);
        for round in 0..5u32 {
            for key in 0..60 {
                tracker.touch(round * 1000 + key);
            }
            sleep(ms(20)).await;
        }
        assert_eq!(tracker.undelivered(), 300);
        let warnings = events.messages();
        // Past 100 (at 120), then past 240 (at 240).
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("undelivered=120"), "{warnings:?}");
        assert!(warnings[0].contains("not being polled"), "{warnings:?}");
        let mut taken = 0;
        while taken < 300 {
            taken += expirations.next_batch().await.expect("a batch").len();
        }
        assert_eq!(tracker.undelivered(), 0);
        drop(expirations);
        tracker.touch(1);
        sleep(ms(20)).await;
        assert_eq!(
            tracker.undelivered(),
            0,
            "nobody listens: batches are dropped"
        );
    });
}

/// A turn expiring many keys yields to the runtime between slices: another task on the same
/// current-thread runtime sees the tracker part-way through the turn.
#[tokio::test(start_paused = true)]
async fn a_large_turn_yields_to_other_tasks() {
    const KEYS: usize = 50_000;
    let timer = Timer::new();
    let (tracker, mut expirations) = IdleTracker::new(&timer, ms(100));
    for key in 0..KEYS as u64 {
        tracker.touch(key);
    }
    let watcher = tokio::spawn({
        let tracker = tracker.clone();
        async move {
            // Yields while anything may be running (so time stands still), sleeps otherwise
            // (so the paused clock moves on to the due tick).
            let (mut partial, mut spins) = (0, 0);
            while !tracker.is_empty() {
                if tracker.len() < KEYS {
                    partial += 1;
                    tokio::task::yield_now().await;
                } else if spins < 100 {
                    spins += 1;
                    tokio::task::yield_now().await;
                } else {
                    spins = 0;
                    sleep(ms(1)).await;
                }
            }
            partial
        }
    });
    let batch = expirations.next_batch().await.expect("a batch");
    assert_eq!(
        batch.len(),
        KEYS,
        "one batch per turn, however it was sliced"
    );
    let partial = watcher.await.expect("no panic");
    assert!(partial >= 5, "saw the turn part-way {partial} times");
}
