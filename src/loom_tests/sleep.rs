//! Models 1–3, 10 and 11: one sleep's waker registration, cancellation and reset racing the driver's
//! turn that fires it. The main thread plays the driver; one loom thread plays the task.

use super::{fixture, mirror, model, Probe, BASE};
use crate::loom::thread;

/// Model 1: a poll that replaces the stored waker, then a re-poll with the new waker (which
/// may take the lock-free path), race the fire. Exactly one waker is woken, once: the one
/// stored last. If the replacing poll returned `Pending`, the fire came after it and must
/// wake the new waker; if the fire came first, that poll sees it and is `Ready`.
#[test]
fn fire_wakes_latest_waker() {
    model(|| {
        let (timer, global, mut driver) = fixture(1);
        let mut sleep = timer.sleep_until(super::at(&global, BASE + 1));
        let first = Probe::new();
        assert!(first.poll(&mut sleep).is_pending());
        let task = thread::spawn(move || {
            let second = Probe::new();
            let replaced = second.poll(&mut sleep).is_pending();
            if replaced {
                let _ = second.poll(&mut sleep);
            }
            (sleep, second, replaced)
        });
        driver.turn(BASE + 1);
        let (mut sleep, second, replaced) = task.join().unwrap();
        if replaced {
            assert_eq!((first.wakes(), second.wakes()), (0, 1));
        } else {
            assert_eq!((first.wakes(), second.wakes()), (1, 0));
        }
        assert!(second.poll(&mut sleep).is_ready());
        assert_eq!(timer.pending(), 0);
        drop(sleep);
        assert_eq!(super::allocated(&global), 0);
    });
}

/// Model 10, the lock-free path: a task registers (first poll) racing the fire, then waits to
/// be woken (loom's `block_on` may also wake it spuriously, once). Re-polls with the same
/// waker skip the lock while the shard's `elapsed` mirror is below the sleep's tick; the
/// driver stores the mirror before it wakes, so the woken re-poll sees the fire. A lost
/// wakeup leaves the task blocked forever, which loom reports as a deadlock.
#[test]
fn woken_repoll_sees_fire() {
    model(|| {
        let (timer, global, mut driver) = fixture(1);
        let sleep = timer.sleep_until(super::at(&global, BASE + 1));
        let task = thread::spawn(move || loom::future::block_on(sleep));
        driver.turn(BASE + 1);
        task.join().unwrap();
        assert_eq!(timer.pending(), 0);
        assert_eq!(super::allocated(&global), 0);
    });
}

/// Model 2: dropping a registered sleep races
/// the turn that fires it. Exactly one wins: the fire (its waker woken once) or the cancel
/// (never woken); either way the pending count drops by one and the entry is freed. The
/// sleep's waker drops another sleep of the same shard when woken, which deadlocks unless
/// the driver wakes with the shard's lock released.
#[test]
fn drop_vs_fire() {
    model(|| {
        let (timer, global, mut driver) = fixture(1);
        let mut other = timer.sleep_until(super::at(&global, BASE + 2));
        assert!(Probe::new().poll(&mut other).is_pending());
        let probe = Probe::dropping(other);
        let mut sleep = timer.sleep_until(super::at(&global, BASE + 1));
        assert!(probe.poll(&mut sleep).is_pending());
        assert_eq!(timer.pending(), 2);
        let task = thread::spawn(move || drop(sleep));
        driver.turn(BASE + 1);
        task.join().unwrap();
        let fired = probe.wakes();
        assert!(fired <= 1, "woken {fired} times");
        // The fire's wake dropped `other`; after a winning cancel it is still registered.
        assert_eq!(timer.pending(), 1 - fired);
        assert_eq!(super::allocated(&global), 1 - fired);
        probe.release();
        driver.turn(BASE + 3);
        assert_eq!(probe.wakes(), fired, "a cancelled sleep was woken");
        assert_eq!(timer.pending(), 0);
        assert_eq!(super::allocated(&global), 0);
    });
}

/// Model 3, later: a sleep due at `BASE + 1` is reset to `BASE + 3` and re-polled (same
/// waker: the lock-free path is open) while the driver advances to `BASE + 2`. The old
/// deadline may fire before the reset (a spurious wake is allowed), but the sleep is not
/// ready before `BASE + 3`, and the turn at `BASE + 3` wakes its waker again.
#[test]
fn reset_later_vs_advance() {
    model(|| {
        let (timer, global, mut driver) = fixture(1);
        let mut sleep = timer.sleep_until(super::at(&global, BASE + 1));
        let probe = Probe::new();
        assert!(probe.poll(&mut sleep).is_pending());
        let task = {
            let (global, probe) = (global.clone(), probe.clone());
            thread::spawn(move || {
                sleep.reset_inner(super::at(&global, BASE + 3));
                let polled = probe.poll(&mut sleep);
                (sleep, polled)
            })
        };
        driver.turn(BASE + 1);
        driver.turn(BASE + 2);
        let (mut sleep, polled) = task.join().unwrap();
        assert!(polled.is_pending(), "ready before its new deadline");
        driver.assert_none_stranded();
        let woken = probe.wakes();
        assert!(woken <= 1);
        driver.turn(BASE + 2);
        assert_eq!(probe.wakes(), woken, "fired before its new deadline");
        assert!(
            probe.poll(&mut sleep).is_pending(),
            "ready before its new deadline"
        );
        driver.turn(BASE + 3);
        assert_eq!(
            probe.wakes(),
            woken + 1,
            "the new deadline did not wake the task"
        );
        assert!(probe.poll(&mut sleep).is_ready());
        assert_eq!(timer.pending(), 0);
    });
}

/// Model 11, earlier: a sleep due at `BASE + 3` is reset to `BASE + 2` and re-polled while the
/// driver advances to `BASE + 2`. A `Ready` poll comes only once the shard has reached the
/// new deadline; a `Pending` one is followed by a wake, at once if the reset came after the
/// driver passed `BASE + 2` (the reset must notify it), and never by the old deadline.
#[test]
fn reset_earlier_vs_advance() {
    model(|| {
        let (timer, global, mut driver) = fixture(1);
        let mut sleep = timer.sleep_until(super::at(&global, BASE + 3));
        let probe = Probe::new();
        assert!(probe.poll(&mut sleep).is_pending());
        let task = {
            let (global, probe) = (global.clone(), probe.clone());
            thread::spawn(move || {
                sleep.reset_inner(super::at(&global, BASE + 2));
                let before = probe.wakes();
                let polled = probe.poll(&mut sleep);
                if polled.is_ready() {
                    assert!(
                        mirror(&global, 0) >= BASE + 2,
                        "ready before its new deadline"
                    );
                }
                (sleep, before, polled)
            })
        };
        driver.turn(BASE + 1);
        driver.turn(BASE + 2);
        let (mut sleep, before, polled) = task.join().unwrap();
        driver.assert_none_stranded();
        if polled.is_pending() {
            // The driver's next turn, woken by the notification or its planned deadline.
            driver.turn(BASE + 2);
            assert_eq!(
                probe.wakes(),
                before + 1,
                "the new deadline did not wake the task"
            );
            assert!(probe.poll(&mut sleep).is_ready());
        }
        assert_eq!(timer.pending(), 0);
        let woken = probe.wakes();
        driver.turn(BASE + 3);
        assert_eq!(probe.wakes(), woken, "the old deadline fired");
    });
}
