//! The callback task's state machine: every transition of a task out of `PENDING`, and the
//! claim of its job by a run, live here and nowhere else.
//!
//! # Ground rules
//! - A task is a [`TaskShared`] in an entry of its shard's task wheel (`shard.rs`). `state`
//!   leaves `PENDING` once, by CAS: to `FIRED` ([`TaskShared::fire_once`], the driver fired a
//!   one-shot task; [`TaskShared::end_series`], a repeating callback panicked) or to
//!   `CANCELLED` ([`TaskShared::cancel`], by the user or the timer closing). The CAS winner
//!   alone counts the outcome and acts on it, so a cancel racing the fire of the same tick is
//!   counted exactly once (as Netty's fix for #14959 does).
//! - The job (the user's closure or future) stays in the task until a run claims it:
//!   [`TaskShared::claim`] takes it under the job's lock only while the task is `PENDING`,
//!   and [`TaskShared::cancel`] makes its CAS under that same lock and takes the job too.
//!   So a cancel that returned `true` either took the job (no run will ever start) or found
//!   it claimed by a run that started before it (that run finishes; no later one starts).
//! - A repeating job is put back after each run ([`TaskShared::put_back`]); a run that finds
//!   the job missing (the previous run is still going) is skipped, so runs never overlap, and
//!   a job put back after the series ended is handed back to be dropped.
//! - Jobs are run and dropped with no lock held: user code, its destructors included, may use
//!   the timer. The job's lock guards only the `Option` swap.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;

use tokio::runtime::Handle;

use crate::clock::{Clock, MAX_NANOS};
use crate::loom::{lock, Arc, AtomicU64, AtomicU8, Mutex, Ordering};
use crate::wheel::Key;

const PENDING: u8 = 0;
const FIRED: u8 = 1;
const CANCELLED: u8 = 2;

/// A user executor for sync callbacks, as given to `Builder::executor`.
///
/// `AssertUnwindSafe` keeps `Timer` unwind safe: the driver catches a panic of the executor
/// and relies on none of its state afterwards.
pub(crate) type ExecutorFn =
    Arc<AssertUnwindSafe<Box<dyn Fn(Box<dyn FnOnce() + Send>) + Send + Sync>>>;

/// The state a task's handles and its wheel entry share.
pub(crate) struct TaskShared {
    state: AtomicU8,
    job: Mutex<Option<Job>>,
    /// Deadline of the next run (the only one of a one-shot task), in nanoseconds from the
    /// timer's start. Written by the driver under the shard lock when it re-arms a series.
    deadline: AtomicU64,
    /// Period of a repeating task in nanoseconds; 0 for a one-shot task.
    period: u64,
}

/// What a task runs.
pub(crate) enum Job {
    Once(Box<dyn FnOnce() + Send>),
    Async(Pin<Box<dyn Future<Output = ()> + Send>>),
    Repeating(Box<dyn FnMut() + Send>),
}

/// A task the driver fired, on its way to the executor.
#[derive(Debug)]
pub(crate) struct Fired {
    pub(crate) task: Arc<TaskShared>,
    pub(crate) key: Key,
    pub(crate) shard: usize,
}

/// Where fired callbacks run.
#[derive(Clone, Default)]
pub(crate) struct Executor {
    /// The timer's runtime: async jobs always run there, sync ones unless `custom` is set.
    pub(crate) runtime: Option<Handle>,
    pub(crate) custom: Option<ExecutorFn>,
}

// ===== impl TaskShared =====

impl TaskShared {
    pub(crate) fn new(job: Job, deadline: u64, period: u64) -> TaskShared {
        TaskShared {
            state: AtomicU8::new(PENDING),
            job: Mutex::new(Some(job)),
            deadline: AtomicU64::new(deadline),
            period,
        }
    }

    pub(crate) fn is_pending(&self) -> bool {
        self.state.load(Ordering::Acquire) == PENDING
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.state.load(Ordering::Acquire) == CANCELLED
    }

    pub(crate) fn is_expired(&self) -> bool {
        self.state.load(Ordering::Acquire) == FIRED
    }

    pub(crate) fn is_repeating(&self) -> bool {
        self.period != 0
    }

    pub(crate) fn period(&self) -> u64 {
        self.period
    }

    /// Deadline of the next (or only) run, in nanoseconds from the timer's start.
    pub(crate) fn deadline(&self) -> u64 {
        self.deadline.load(Ordering::Relaxed)
    }

    /// PENDING → FIRED for a one-shot task the driver popped: `true` if the driver won (the
    /// task must run), `false` if a cancel did.
    pub(crate) fn fire_once(&self) -> bool {
        self.to_fired()
    }

    /// PENDING → CANCELLED, made under the job's lock so that it is ordered with every claim
    /// (see the ground rules). `None` if the task was no longer pending; otherwise the job, if
    /// no run had claimed it, to be dropped by the caller with no lock held.
    pub(crate) fn cancel(&self) -> Option<Option<Job>> {
        let mut job = lock(&self.job);
        self.state
            .compare_exchange(PENDING, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        Some(job.take())
    }

    /// PENDING → FIRED for a repeating series whose callback panicked: `true` for the caller
    /// that ended it (it frees the entry).
    pub(crate) fn end_series(&self) -> bool {
        self.to_fired()
    }

    /// The one PENDING → FIRED CAS behind [`fire_once`](Self::fire_once) and
    /// [`end_series`](Self::end_series).
    fn to_fired(&self) -> bool {
        self.state
            .compare_exchange(PENDING, FIRED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Starts a run: the job, taken under its lock, if the task is still pending (a one-shot
    /// task the driver fired counts as pending for its own run) and no other run holds it.
    pub(crate) fn claim(&self) -> Option<Job> {
        let mut job = lock(&self.job);
        let runnable = match self.state.load(Ordering::Acquire) {
            PENDING => true,
            // The one run a fired one-shot task has.
            FIRED => !self.is_repeating(),
            _ => false,
        };
        if runnable {
            job.take()
        } else {
            None
        }
    }

    /// Puts a repeating job back after its run. Returns it if the series ended meanwhile:
    /// nobody else will drop it, so the caller does, with no lock held.
    pub(crate) fn put_back(&self, returned: Job) -> Option<Job> {
        let mut job = lock(&self.job);
        if self.is_pending() {
            *job = Some(returned);
            None
        } else {
            Some(returned)
        }
    }

    /// Moves a repeating task's deadline to its next run after tick `now` and returns it:
    /// the next point of its period grid that lies after the start of tick `now`, so runs
    /// the driver was too late for are skipped rather than bunched up. Driver only, under
    /// the shard lock.
    pub(crate) fn next_deadline(&self, now: u64, clock: &Clock) -> u64 {
        let last = self.deadline.load(Ordering::Relaxed);
        let floor = clock.tick_start_nanos(now);
        let period = self.period;
        let next = match last.checked_add(period) {
            Some(next) if next > floor => next,
            _ => {
                let k = (floor.saturating_sub(last) / period).saturating_add(1);
                last.saturating_add(k.saturating_mul(period))
            }
        }
        .min(MAX_NANOS);
        self.deadline.store(next, Ordering::Relaxed);
        next
    }

    pub(crate) fn state_name(&self) -> &'static str {
        match self.state.load(Ordering::Acquire) {
            PENDING => "pending",
            FIRED => "expired",
            _ => "cancelled",
        }
    }
}

impl fmt::Debug for TaskShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskShared")
            .field("state", &self.state_name())
            .field("deadline_ns", &self.deadline.load(Ordering::Relaxed))
            .field("period_ns", &self.period)
            .finish_non_exhaustive()
    }
}

// ===== impl Executor =====

impl Executor {
    /// Runs a sync job: on the user's executor if there is one, else on the blocking pool
    /// of the timer's runtime, else (a bare timer driven by a test, no runtime) right here,
    /// where no lock is held.
    ///
    /// Not as a plain tokio task: tokio's time driver, which the wheel's driver sleeps on,
    /// is only polled by an idle worker, so a callback blocking a worker can stall every
    /// timer (measured: with two workers, timers due at 30-90 ms fired at 212 ms behind a
    /// callback blocking for 200 ms).
    pub(crate) fn execute(&self, job: Box<dyn FnOnce() + Send>) {
        if let Some(custom) = &self.custom {
            custom(job);
        } else if let Some(runtime) = &self.runtime {
            runtime.spawn_blocking(job);
        } else {
            job();
        }
    }
}

impl fmt::Debug for Executor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Executor")
            .field("runtime", &self.runtime.as_ref().map(Handle::id))
            .field("custom", &self.custom.is_some())
            .finish()
    }
}
