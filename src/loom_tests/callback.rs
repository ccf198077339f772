//! Models 9, 12 and 13, callback tasks: `TimerTask::cancel` racing the driver's turn that
//! fires the task, and the run it handed to the executor.
//! The timer has no runtime and no executor, so a fired callback runs on the driver's thread
//! (the main thread here) right after the shard is unlocked, within `turn`.

use std::time::Duration;

use super::{at, fixture_with, model, BASE};
use crate::loom::{thread, Arc, AtomicUsize, Ordering};

/// Counts runs of a callback and drops of the callback itself (its captures).
#[derive(Clone)]
struct Calls {
    runs: Arc<AtomicUsize>,
    drops: Arc<AtomicUsize>,
}

/// Held by a callback: counts the callback's drop.
struct DropGuard(Arc<AtomicUsize>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}

impl Calls {
    fn new() -> Calls {
        Calls {
            runs: Arc::new(AtomicUsize::new(0)),
            drops: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// A callback counted by `self`.
    fn callback(&self) -> impl FnMut() + Send + 'static {
        let runs = self.runs.clone();
        let guard = DropGuard(self.drops.clone());
        move || {
            let _held = &guard;
            runs.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::Acquire)
    }

    fn drops(&self) -> usize {
        self.drops.load(Ordering::Acquire)
    }
}

/// A counted repeating series whose first run is due a period (2^23 ticks) after the timer's
/// start, rounded up: a turn 1000 ticks later covers any real-clock delay in scheduling.
fn repeating(timer: &crate::timer::Timer) -> (Calls, crate::callback::TimerTask) {
    let calls = Calls::new();
    let period = Duration::from_millis(2 * BASE);
    let task = timer
        .schedule_repeating(period, calls.callback())
        .expect("scheduled");
    (calls, task)
}

/// Model 12: a thread cancels a one-shot task while the driver turns to its tick. Exactly one
/// wins: the cancel (`true`, the callback never runs) or the fire (the cancel returns
/// `false`, the callback runs once). Either way the entry is freed, the timer's task count
/// and `max_pending` capacity are given back exactly once (an extra give-back would wrap
/// them), the winner alone is counted, the callback is dropped once, and no later turn runs
/// it.
#[test]
fn cancel_vs_fire() {
    model(|| {
        let (timer, global, mut driver) = fixture_with(1, Some(1));
        let calls = Calls::new();
        let task = timer
            .schedule_at(at(&global, BASE + 1), calls.callback())
            .expect("scheduled");
        assert_eq!(timer.pending(), 1);
        let canceller = {
            let task = task.clone();
            thread::spawn(move || task.cancel())
        };
        driver.turn(BASE + 1);
        let cancelled = canceller.join().unwrap();
        let ran = calls.runs();
        assert_eq!(
            usize::from(cancelled) + ran,
            1,
            "cancelled: {cancelled}, runs: {ran}; exactly one of the cancel and the fire wins"
        );
        assert_eq!(task.is_cancelled(), cancelled);
        assert_eq!(task.is_expired(), !cancelled);
        assert_eq!(timer.pending(), 0);
        assert_eq!(
            global.task_counts(),
            (0, Some(0)),
            "the task count or capacity was not given back exactly once"
        );
        let counters = global.counters(0);
        assert_eq!(
            (counters.cancelled, counters.fired),
            (u64::from(cancelled), u64::from(!cancelled))
        );
        assert_eq!(calls.drops(), 1, "the callback was not dropped");
        driver.turn(BASE + 2);
        assert_eq!(calls.runs(), ran, "a cancelled callback ran");
    });
}

/// Model 13, a repeating task: a thread cancels the series while the driver fires its first
/// run (which re-arms the entry, then runs the callback outside the lock). A pending series
/// is always cancellable: the cancel wins, the entry is freed and the count and capacity
/// given back once; the run, if it started, ends, and whichever of the cancel and the run
/// holds the callback last drops it at once (the `TimerTask` still exists, so only they can);
/// the series never runs again. The first run is due a period (2^23 ticks) after the timer's
/// start, rounded up; the turn 1000 ticks later covers any real-clock delay in scheduling.
#[test]
fn cancel_vs_repeating_run() {
    model(|| {
        let (timer, global, mut driver) = fixture_with(1, Some(1));
        let (calls, task) = repeating(&timer);
        let canceller = {
            let task = task.clone();
            thread::spawn(move || task.cancel())
        };
        driver.turn(2 * BASE + 1000);
        assert!(
            canceller.join().unwrap(),
            "a pending series was not cancelled"
        );
        let ran = calls.runs();
        assert!(ran <= 1, "ran {ran} times in one turn");
        assert!(task.is_cancelled());
        assert_eq!(timer.pending(), 0);
        assert_eq!(
            global.task_counts(),
            (0, Some(0)),
            "the task count or capacity was not given back exactly once"
        );
        assert_eq!(calls.drops(), 1, "the cancelled series kept its callback");
        driver.turn(4 * BASE + 2000);
        assert_eq!(calls.runs(), ran, "a cancelled series ran again");
    });
}

/// Model 9: a cancel racing a repeating run the driver has already handed to the
/// executor (here the driver's own thread, after it unlocked the shard). The cancel's `true`
/// settles the callback's fate when it returns: either the cancel took the callback and
/// dropped it before returning (no run starts afterwards), or a run had already taken it
/// (that run goes ahead, the last one). A run that checks the state outside the task's lock
/// allows a third outcome, which this model catches: the callback handed off, the cancel
/// returning `true` without it, and the run deciding later on its own not to run.
#[test]
fn cancel_vs_handed_off_run() {
    model(|| {
        let (timer, _global, mut driver) = fixture_with(1, None);
        let (calls, task) = repeating(&timer);
        let canceller = {
            let (task, calls) = (task.clone(), calls.clone());
            thread::spawn(move || {
                let cancelled = task.cancel();
                // Drops first: a run drops the callback only after it ran it.
                let dropped = calls.drops();
                (cancelled, calls.runs(), dropped)
            })
        };
        driver.turn(2 * BASE + 1000);
        let (cancelled, ran_before, dropped_before) = canceller.join().unwrap();
        assert!(cancelled, "a pending series was not cancelled");
        let ran = calls.runs();
        if ran == 0 {
            assert_eq!(
                dropped_before, 1,
                "the cancel returned true leaving the callback to a run that never ran it"
            );
        }
        if ran_before == 0 && dropped_before == 1 {
            assert_eq!(
                ran, 0,
                "a run started after the cancel dropped the callback"
            );
        }
        assert_eq!(calls.drops(), 1);
        driver.turn(4 * BASE + 2000);
        assert_eq!(calls.runs(), ran, "a cancelled series ran again");
    });
}
