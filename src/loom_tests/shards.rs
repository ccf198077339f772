//! Model 4: two task threads register and cancel sleeps on both shards of a timer while the
//! driver turns it at its planned deadline.

use std::task::Poll;

use super::{model, sleep_in, Probe, BASE};
use crate::loom::thread;
use crate::sleep::Sleep;

/// A sleep, its waker, and whether its (only) poll registered it.
struct Task {
    sleep: Sleep,
    probe: Probe,
    registered: bool,
}

impl Task {
    fn poll(mut sleep: Sleep) -> Task {
        let probe = Probe::new();
        let registered = probe.poll(&mut sleep) == Poll::Pending;
        Task {
            sleep,
            probe,
            registered,
        }
    }
}

/// Model 4: thread A registers a sleep in shard 0 and cancels one the main thread registered
/// there; thread B registers one in shard 1 at the very tick the driver is turning to; the
/// driver wakes at its planned deadline and turns both shards. Once they have joined:
/// - every registered sleep has fired (woken exactly once) or is still scheduled, and
///   `pending()` counts exactly the latter;
/// - the `next_wake` protocol held: every still-scheduled entry's tick is at or after the
///   driver's planned wake, or the driver has been notified since its turn (nothing is
///   stranded);
/// - the next turn fires every remaining sleep once, and the cancelled one never.
#[test]
fn inserts_and_cancels_vs_turn() {
    model(|| {
        let (timer, global, mut driver) = super::fixture(2);
        let cancelled = Task::poll(sleep_in(&global, 0, BASE + 1));
        assert!(cancelled.registered);
        // The driver plans its wake for `cancelled` (its registration notified it).
        assert_eq!(driver.turn(BASE), BASE + 1);
        let a = {
            let global = global.clone();
            thread::spawn(move || {
                let task = Task::poll(sleep_in(&global, 0, BASE + 2));
                drop(cancelled.sleep);
                (task, cancelled.probe)
            })
        };
        let b = {
            let global = global.clone();
            thread::spawn(move || Task::poll(sleep_in(&global, 1, BASE + 1)))
        };
        driver.turn(BASE + 1);
        let (task_a, cancelled) = a.join().unwrap();
        let task_b = b.join().unwrap();
        let tasks = [task_a, task_b];

        assert!(cancelled.wakes() <= 1);
        let mut pending = 0;
        for task in &tasks {
            if task.registered {
                let fired = task.sleep.is_elapsed();
                assert_eq!(task.probe.wakes(), usize::from(fired));
                pending += usize::from(!fired);
            } else {
                // Registering found the shard past its tick: ready at once, nothing to fire.
                assert_eq!(task.probe.wakes(), 0);
            }
        }
        assert_eq!(timer.pending(), pending);
        driver.assert_none_stranded();

        let cancel_wakes = cancelled.wakes();
        driver.turn(BASE + 2);
        assert_eq!(timer.pending(), 0);
        for mut task in tasks {
            assert_eq!(task.probe.wakes(), usize::from(task.registered));
            assert!(task.probe.poll(&mut task.sleep).is_ready());
        }
        assert_eq!(
            cancelled.wakes(),
            cancel_wakes,
            "a cancelled sleep was woken"
        );
        assert_eq!(super::allocated(&global), 0);
    });
}
