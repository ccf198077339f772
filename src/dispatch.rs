//! How a task the driver fired reaches its executor, and how a run of it goes.
//!
//! # Ground rules
//! - The driver calls [`dispatch`] with no lock held. A one-shot job is claimed there
//!   (`TaskShared::claim`) and handed to the executor; async jobs are spawned on the timer's
//!   runtime. A repeating run is handed over as a closure that claims the callback when it
//!   starts (under the task's lock, only while the series is pending), runs it and puts it
//!   back; so a run handed over before a cancel never starts after that cancel returned
//!   `true`, and a run the executor drops unrun has taken nothing (the series goes on).
//! - User code (jobs, their destructors, a user executor) runs with no lock held, and its
//!   panics are caught, counted and reported; they never reach the driver.

use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::loom::Arc;
use crate::shard::Global;
use crate::task::{Fired, Job};

/// Hands a fired task to its executor; called by the driver with no lock held.
pub(crate) fn dispatch(global: &Arc<Global>, fired: Fired) {
    if fired.task.is_repeating() {
        // The run claims the callback when it starts, not here (see the ground rules).
        let runner = global.clone();
        execute(global, Box::new(move || run_repeating(&runner, &fired)));
        return;
    }
    let Some(job) = fired.task.claim() else {
        return;
    };
    match job {
        Job::Async(future) => {
            let future = CatchUnwind {
                future,
                global: global.clone(),
            };
            match global.executor().runtime.as_ref() {
                Some(runtime) => drop(runtime.spawn(future)),
                None => tracing::error!(
                    "wheel-timer: an async task fired on a timer without a runtime; dropped"
                ),
            }
        }
        Job::Once(f) => {
            let global2 = global.clone();
            execute(
                global,
                Box::new(move || {
                    if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
                        callback_panicked(&global2, &*payload, "a timer callback");
                    }
                }),
            );
        }
        Job::Repeating(_) => unreachable!("a one-shot task holds no repeating job"),
    }
}

/// Hands a sync job to the timer's executor, catching a panic of a user executor (it must
/// not take the driver down with it).
fn execute(global: &Arc<Global>, run: Box<dyn FnOnce() + Send>) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| global.executor().execute(run))) {
        callback_panicked(global, &*payload, "the timer's executor");
    }
}

/// One run of a repeating series, on the executor: claims the callback (skipped if the
/// series ended or its previous run still holds it), runs it with no lock held, and puts it
/// back. A panicking callback ends the series: its state may be broken.
fn run_repeating(global: &Arc<Global>, fired: &Fired) {
    let task = &fired.task;
    let Some(job) = task.claim() else {
        return;
    };
    let Job::Repeating(mut f) = job else {
        unreachable!("a repeating task holds a repeating job");
    };
    match catch_unwind(AssertUnwindSafe(&mut f)) {
        Ok(()) => {
            // Returned if the series ended meanwhile: dropped here, unlocked.
            drop(task.put_back(Job::Repeating(f)));
        }
        Err(payload) => {
            callback_panicked(global, &*payload, "a repeating timer callback");
            drop(f);
            // Its re-arm was counted as scheduled: the ended series counts as cancelled.
            if task.end_series() {
                global.remove_task(fired.shard, fired.key, task, true);
            }
        }
    }
}

fn callback_panicked(global: &Global, payload: &(dyn Any + Send), what: &str) {
    global.count_panic();
    tracing::warn!(
        panic = panic_message(payload),
        "wheel-timer: {what} panicked; the timer keeps running"
    );
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "<non-string panic payload>"
    }
}

/// Runs an async job, turning a panic into a counted warning.
struct CatchUnwind {
    future: Pin<Box<dyn Future<Output = ()> + Send>>,
    global: Arc<Global>,
}

impl Future for CatchUnwind {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        match catch_unwind(AssertUnwindSafe(|| this.future.as_mut().poll(cx))) {
            Ok(poll) => poll,
            Err(payload) => {
                callback_panicked(&this.global, &*payload, "an async timer task");
                Poll::Ready(())
            }
        }
    }
}
