//! Model 7: `Timer::shutdown` racing a thread that schedules a callback and waits on a
//! sleep, while a third runs the driver task's loop.

use std::future::poll_fn;

use super::{at, fixture_with, model, Driver, BASE};
use crate::loom::{thread, Arc, AtomicUsize, Ordering};

/// Model 7: one thread shuts the timer down; another schedules a task due at `BASE + 1` and
/// then waits for a sleep due then too (registered before); the main thread runs the driver
/// loop from `BASE + 1`: turn, stop once the timer is closed (or abandoned), else wait for
/// the planned tick or, parked, for a notification. Nothing hangs: the driver exits and the
/// waiting thread returns, with the sleep either fired or reporting the closure (the
/// non-panicking poll that crate-internal waiters use). Nothing shutdown stopped runs: the
/// task is refused (`is_shutdown`), or cancelled and returned by `shutdown` (never run, its
/// callback dropped), or it fired before its shard closed and ran once; nothing stays
/// pending, and the task count and `max_pending` capacity end at 0.
#[test]
fn shutdown_vs_schedule_and_poll() {
    model(|| {
        let (timer, global, _) = fixture_with(1, Some(2));
        let mut sleep = timer.sleep_until(at(&global, BASE + 1));
        let runs = Arc::new(AtomicUsize::new(0));
        let stopper = {
            let timer = timer.clone();
            thread::spawn(move || timer.shutdown())
        };
        let user = {
            let (timer, global, runs) = (timer.clone(), global.clone(), runs.clone());
            thread::spawn(move || {
                let task = timer.schedule_at(at(&global, BASE + 1), move || {
                    runs.fetch_add(1, Ordering::AcqRel);
                });
                let slept = loom::future::block_on(poll_fn(|cx| sleep.poll_unless_closed(cx)));
                (task, slept.is_ok())
            })
        };
        Driver::new(global.clone()).run(BASE + 1);
        let cancelled = stopper.join().unwrap();
        let (task, fired) = user.join().unwrap();
        assert!(!global.is_running());
        let ran = runs.load(Ordering::Acquire);
        match task {
            Err(error) => {
                assert!(error.is_shutdown(), "{error}");
                assert!(cancelled.is_empty());
                assert_eq!(ran, 0, "a refused task ran");
            }
            Ok(task) if task.is_cancelled() => {
                assert_eq!(cancelled.len(), 1, "a cancelled task was not returned");
                assert!(cancelled[0].is_cancelled());
                assert_eq!(ran, 0, "a task cancelled by shutdown ran");
            }
            Ok(task) => {
                assert!(task.is_expired(), "a task is neither run nor cancelled");
                assert!(cancelled.is_empty());
                assert_eq!(ran, 1, "a fired task did not run once");
            }
        }
        if fired {
            // Never "fired" by the close: the driver reached the deadline before it.
            let elapsed = global.elapsed(0);
            assert!(
                elapsed > BASE,
                "the sleep completed though its deadline never came"
            );
        }
        assert_eq!(timer.pending(), 0);
        assert_eq!(
            global.task_counts(),
            (0, Some(0)),
            "the task count or capacity was not given back exactly once"
        );
    });
}
