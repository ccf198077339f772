//! Callback tasks: [`Timer::schedule`] and its variants, and the [`TimerTask`] handle.
//!
//! # Ground rules
//! - A task is a [`TaskShared`] in an entry of its shard's task wheel. The entry's key is
//!   fixed when the task is scheduled: a repeating task is re-armed in place by the driver,
//!   so it keeps its key (and its one unit of `max_pending` capacity) until it ends.
//! - `state` leaves `PENDING` once, by CAS: to `FIRED` (the driver fired a one-shot task, or
//!   a repeating series ended because its callback panicked) or to `CANCELLED`
//!   ([`TimerTask::cancel`], or the timer closing). The CAS winner alone counts the outcome
//!   and acts on it, so a cancel racing the fire of the same tick is counted exactly once
//!   (Netty #14959).
//! - Only someone holding the shard lock who sees the entry still holds the same `Arc`
//!   (`Arc::ptr_eq`) removes it: keys are reused once freed. Whoever removes the entry gives
//!   back its capacity and its count in `Global::tasks`, so each happens exactly once.
//! - Slots are freed at once, never by a scan: the driver frees a one-shot entry as soon as
//!   it pops it (fired or found cancelled) and a cancel frees the entry it wins.
//! - The job (the user's closure or future) is taken out of the task by whoever runs or
//!   drops it, and is run or dropped with no lock held: user code, its destructors included,
//!   may use the timer.
//! - A repeating job is taken for each run and put back afterwards: a run that finds it
//!   missing (the previous run is still going) is skipped, so runs never overlap; a run put
//!   back after the series ended is dropped by the runner.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::clock::{Clock, MAX_NANOS};
use crate::driver::{Global, RUNNING};
use crate::loom::{lock, Arc, AtomicU64, AtomicU8, Mutex, Ordering};
use crate::wheel::Key;
use crate::{Error, Timer};

pub(crate) const PENDING: u8 = 0;
pub(crate) const FIRED: u8 = 1;
pub(crate) const CANCELLED: u8 = 2;

/// A user executor for sync callbacks, as given to `Builder::executor`.
///
/// `AssertUnwindSafe` keeps `Timer` unwind safe: the driver catches a panic of the executor
/// and relies on none of its state afterwards.
pub(crate) type ExecutorFn =
    Arc<AssertUnwindSafe<Box<dyn Fn(Box<dyn FnOnce() + Send>) + Send + Sync>>>;

/// The state a task's handles and its wheel entry share.
pub(crate) struct TaskShared {
    pub(crate) state: AtomicU8,
    job: Mutex<Option<Job>>,
    /// Deadline of the next run (the only one of a one-shot task), in nanoseconds from the
    /// timer's start. Written by the driver under the shard lock when it re-arms a series.
    deadline: AtomicU64,
    /// Period of a repeating task in nanoseconds; 0 for a one-shot task.
    pub(crate) period: u64,
}

/// What a task runs.
pub(crate) enum Job {
    Once(Box<dyn FnOnce() + Send>),
    Async(Pin<Box<dyn Future<Output = ()> + Send>>),
    Repeating(Box<dyn FnMut() + Send>),
}

/// A task the driver fired, on its way to the executor.
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

/// Handle to a callback scheduled with [`Timer::schedule`], [`Timer::schedule_at`],
/// [`Timer::schedule_async`] or [`Timer::schedule_repeating`]: Netty's `Timeout`.
///
/// Clones refer to the same task.
///
/// # Cancellation
///
/// Dropping a `TimerTask` does **not** cancel the task (as in Netty): fire-and-forget is the
/// common case. Call [`cancel`](TimerTask::cancel) to stop it. A pending task keeps its
/// timer's driver running even after every [`Timer`] handle is dropped.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use wheel_timer::Timer;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), wheel_timer::Error> {
/// let timer = Timer::new();
/// let task = timer.schedule(Duration::from_secs(48 * 3600), || println!("auto-rated"))?;
/// assert!(task.cancel()); // the user rated the order in time
/// assert!(task.is_cancelled());
/// assert!(!task.cancel()); // only the first cancel wins
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct TimerTask {
    shared: Arc<TaskShared>,
    global: Arc<Global>,
    key: Key,
    shard: usize,
}

// ===== impl TaskShared =====

impl TaskShared {
    /// Takes the job out, for running or dropping it (with no lock held).
    pub(crate) fn take_job(&self) -> Option<Job> {
        lock(&self.job).take()
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

    fn state_name(&self) -> &'static str {
        match self.state.load(Ordering::Acquire) {
            PENDING => "pending",
            FIRED => "expired",
            _ => "cancelled",
        }
    }
}

// ===== impl Executor =====

impl Executor {
    /// Runs a sync job: on the user's executor if there is one, else on the blocking pool
    /// of the timer's runtime, else (a bare `Global` driven by a test, no runtime) right
    /// here, where no lock is held.
    ///
    /// Not as a plain tokio task: tokio's time driver, which the wheel's driver sleeps on,
    /// is only polled by an idle worker, so a callback blocking a worker can stall every
    /// timer (measured: with two workers, timers due at 30-90 ms fired at 212 ms behind a
    /// callback blocking for 200 ms).
    fn execute(&self, job: Box<dyn FnOnce() + Send>) {
        if let Some(custom) = &self.custom {
            custom(job);
        } else if let Some(runtime) = &self.runtime {
            runtime.spawn_blocking(job);
        } else {
            job();
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

impl fmt::Debug for Executor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Executor")
            .field("runtime", &self.runtime.as_ref().map(Handle::id))
            .field("custom", &self.custom.is_some())
            .finish()
    }
}

// ===== impl Global (tasks) =====

impl Global {
    /// Allocates a task due at `nanos` (saturated) in shard `shard` and makes sure the driver
    /// wakes for it.
    fn schedule_task(
        this: &Arc<Self>,
        shard: usize,
        now: Instant,
        nanos: u64,
        period: u64,
        job: Job,
    ) -> Result<TimerTask, Error> {
        if this.state() != RUNNING {
            return Err(Error::shutdown());
        }
        this.admit()?;
        // A deadline already past is due at the current tick, not at its own, so lateness
        // is measured from when the task was scheduled.
        let tick = this
            .clock
            .tick_at_or_after(nanos)
            .max(this.clock.tick_of(now));
        let shared = Arc::new(TaskShared {
            state: AtomicU8::new(PENDING),
            job: Mutex::new(Some(job)),
            deadline: AtomicU64::new(nanos),
            period,
        });
        this.task_allocated();
        let mut core = this.shards[shard].lock();
        if core.closed {
            drop(core);
            this.tasks_freed(1);
            // The job is dropped here, with no lock held.
            drop(shared);
            return Err(Error::shutdown());
        }
        let key = core.tasks.insert(tick, Some(shared.clone()));
        core.counters.scheduled += 1;
        drop(core);
        this.scheduled_at(tick);
        tracing::trace!(
            tick,
            shard,
            repeating = period != 0,
            "wheel-timer: task scheduled"
        );
        Ok(TimerTask {
            shared,
            global: this.clone(),
            key,
            shard,
        })
    }

    /// Hands a fired task's job to the executor; called by the driver with no lock held.
    pub(crate) fn dispatch(this: &Arc<Self>, fired: Fired) {
        let Some(job) = fired.task.take_job() else {
            // The series' previous run is still going (or it just ended): skip this run.
            return;
        };
        match job {
            Job::Async(future) => {
                let future = CatchUnwind {
                    future,
                    global: this.clone(),
                };
                match this.executor.runtime.as_ref() {
                    Some(runtime) => drop(runtime.spawn(future)),
                    None => tracing::error!(
                        "wheel-timer: an async task fired on a timer without a runtime; dropped"
                    ),
                }
            }
            job => {
                let global = this.clone();
                let unrun = Unrun {
                    task: fired.task.clone(),
                    job: Some(job),
                };
                let run = Box::new(move || {
                    let mut unrun = unrun;
                    if let Some(job) = unrun.job.take() {
                        global.run_sync(fired, job);
                    }
                });
                if let Err(payload) = catch_unwind(AssertUnwindSafe(|| this.executor.execute(run)))
                {
                    // A panicking user executor must not take the driver down with it.
                    this.callback_panicked(&*payload, "the timer's executor");
                }
            }
        }
    }

    /// Runs a sync job on the executor, catching its panic.
    ///
    /// (If the executor drops the job instead, [`Unrun`] hands a repeating callback back to
    /// its task, so the series goes on at its next period rather than dying silently.)
    fn run_sync(&self, fired: Fired, job: Job) {
        match job {
            Job::Once(f) => {
                if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
                    self.callback_panicked(&*payload, "a timer callback");
                }
            }
            Job::Repeating(mut f) => {
                let task = &fired.task;
                if task.state.load(Ordering::Acquire) != PENDING {
                    // Cancelled after the driver fired this run.
                    return;
                }
                match catch_unwind(AssertUnwindSafe(&mut f)) {
                    Ok(()) => {
                        *lock(&task.job) = Some(Job::Repeating(f));
                        if task.state.load(Ordering::Acquire) != PENDING {
                            // The series ended while this run was going: nobody else will
                            // drop the job now that it is back.
                            drop(task.take_job());
                        }
                    }
                    Err(payload) => {
                        self.callback_panicked(&*payload, "a repeating timer callback");
                        drop(f);
                        self.end_series(&fired);
                    }
                }
            }
            Job::Async(_) => unreachable!("async jobs are spawned, not executed"),
        }
    }

    /// Ends a repeating series whose callback panicked: it counts as expired.
    fn end_series(&self, fired: &Fired) {
        if fired
            .task
            .state
            .compare_exchange(PENDING, FIRED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        let removed = self.remove_task(fired.shard, fired.key, &fired.task);
        if removed.is_some() {
            self.tasks_freed(1);
        }
        drop(removed);
        drop(fired.task.take_job());
    }

    /// Removes `task`'s entry if it still holds `task`; `None` if someone else freed it.
    fn remove_task(
        &self,
        shard: usize,
        key: Key,
        task: &Arc<TaskShared>,
    ) -> Option<Arc<TaskShared>> {
        let mut core = self.shards[shard].lock();
        match core.tasks.get(key) {
            Some(Some(held)) if Arc::ptr_eq(held, task) => core.tasks.try_remove(key).flatten(),
            _ => None,
        }
    }

    fn callback_panicked(&self, payload: &(dyn Any + Send), what: &str) {
        self.stats.panicked.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            panic = panic_message(payload),
            "wheel-timer: {what} panicked; the timer keeps running"
        );
    }
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
                this.global
                    .callback_panicked(&*payload, "an async timer task");
                Poll::Ready(())
            }
        }
    }
}

/// A sync job on its way to the executor. Dropped unrun (an executor that drops or rejects
/// jobs, a runtime shutting down), it gives a repeating callback back to its task: without it
/// the series would stay pending forever and never run again, as every later fire finds no
/// callback and skips.
struct Unrun {
    task: Arc<TaskShared>,
    job: Option<Job>,
}

impl Drop for Unrun {
    fn drop(&mut self) {
        if let Some(job @ Job::Repeating(_)) = self.job.take() {
            *lock(&self.task.job) = Some(job);
            if self.task.state.load(Ordering::Acquire) != PENDING {
                // The series ended meanwhile: nobody else will drop the callback now.
                drop(self.task.take_job());
            }
        }
    }
}

// ===== impl TimerTask =====

impl TimerTask {
    pub(crate) fn from_closed(
        global: &Arc<Global>,
        shared: Arc<TaskShared>,
        key: Key,
        shard: usize,
    ) -> Self {
        TimerTask {
            shared,
            global: global.clone(),
            key,
            shard,
        }
    }

    /// Cancels the task: a pending one-shot task will not run, a repeating series will not
    /// start another run (a run already going finishes). Its wheel slot and its
    /// `max_pending` capacity are freed at once, and its callback is dropped.
    ///
    /// Returns `true` only for the call that moved the task from pending to cancelled:
    /// `false` if it already fired (a one-shot task whose callback has been handed to the
    /// executor), was cancelled before, or its timer was shut down. Exactly one of a cancel
    /// and the fire it races wins.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_timer::Error> {
    /// let timer = wheel_timer::Timer::new();
    /// let task = timer.schedule(Duration::from_secs(60), || unreachable!())?;
    /// assert_eq!(timer.pending(), 1);
    /// assert!(task.cancel());
    /// assert_eq!(timer.pending(), 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn cancel(&self) -> bool {
        if !self.mark_cancelled() {
            return false;
        }
        self.finish_cancel();
        true
    }

    /// The first half of `cancel`: the CAS that decides the race with the driver.
    fn mark_cancelled(&self) -> bool {
        self.shared
            .state
            .compare_exchange(PENDING, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The second half of `cancel`, for the CAS winner: count it, free the entry if the
    /// driver has not, and drop the job.
    fn finish_cancel(&self) {
        let removed = {
            let mut core = self.global.shards[self.shard].lock();
            core.counters.cancelled += 1;
            match core.tasks.get(self.key) {
                Some(Some(held)) if Arc::ptr_eq(held, &self.shared) => {
                    core.tasks.try_remove(self.key).flatten()
                }
                _ => None,
            }
        };
        if removed.is_some() {
            self.global.tasks_freed(1);
        }
        drop(removed);
        drop(self.shared.take_job());
        tracing::trace!(shard = self.shard, "wheel-timer: task cancelled");
    }

    /// Whether the task was cancelled, by [`cancel`](TimerTask::cancel) or by its timer's
    /// [`shutdown`](Timer::shutdown) (or the loss of its runtime).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_timer::Error> {
    /// let timer = wheel_timer::Timer::new();
    /// let task = timer.schedule(Duration::from_secs(60), || {})?;
    /// timer.shutdown();
    /// assert!(task.is_cancelled());
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_cancelled(&self) -> bool {
        self.shared.state.load(Ordering::Acquire) == CANCELLED
    }

    /// Whether the task has expired: a one-shot task's deadline came and its callback was
    /// handed to the executor (it may still be running), or a repeating series ended because
    /// its callback panicked. A running series is never expired.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_timer::Error> {
    /// let timer = wheel_timer::Timer::new();
    /// let task = timer.schedule(Duration::from_millis(5), || {})?;
    /// assert!(!task.is_expired());
    /// timer.sleep(Duration::from_millis(10)).await;
    /// assert!(task.is_expired());
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_expired(&self) -> bool {
        self.shared.state.load(Ordering::Acquire) == FIRED
    }

    /// When the task runs: its deadline, or for a repeating task the deadline of its next run
    /// (the last one once the series ended). The callback runs at the first tick at or after
    /// it, never before.
    ///
    /// # Examples
    ///
    /// ```
    /// use tokio::time::{Duration, Instant};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_timer::Error> {
    /// let timer = wheel_timer::Timer::new();
    /// let at = Instant::now() + Duration::from_secs(20 * 3600);
    /// let task = timer.schedule_at(at, || println!("20:00 digest"))?;
    /// assert_eq!(task.deadline(), at);
    /// # task.cancel();
    /// # Ok(())
    /// # }
    /// ```
    pub fn deadline(&self) -> Instant {
        self.global
            .clock
            .instant(self.shared.deadline.load(Ordering::Relaxed))
    }
}

impl fmt::Debug for TimerTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("TimerTask");
        d.field("state", &self.shared.state_name())
            .field("deadline", &self.deadline());
        if self.shared.period != 0 {
            d.field("period", &Duration::from_nanos(self.shared.period));
        }
        d.finish()
    }
}

// ===== impl Timer (tasks) =====

impl Timer {
    /// Runs `task` once `delay` has passed (rounded up to the next tick): Netty's
    /// `newTimeout`.
    ///
    /// The callback never runs on the driver: by default it runs on the blocking thread pool
    /// of the timer's runtime (`spawn_blocking`), or on the executor given to
    /// [`Builder::executor`](crate::Builder::executor), so a slow or blocking callback
    /// delays no other timer. A panic in it is caught, counted in
    /// [`Stats::panicked`](crate::Stats::panicked) and reported with `tracing::warn!`; the
    /// timer keeps working.
    ///
    /// A zero delay runs the task at the driver's next turn; `Duration::MAX` saturates 146
    /// years out (it never runs in practice, but stays pending until cancelled).
    ///
    /// # Cancellation
    ///
    /// Dropping the returned [`TimerTask`] does not cancel the task; call
    /// [`TimerTask::cancel`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_timer::Timer;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_timer::Error> {
    /// let timer = Timer::new();
    /// let (tx, rx) = tokio::sync::oneshot::channel();
    /// timer.schedule(Duration::from_millis(10), move || {
    ///     let _ = tx.send("fired");
    /// })?;
    /// assert_eq!(rx.await.ok(), Some("fired"));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_shutdown`] after [`Timer::shutdown`] or once the timer's runtime is gone;
    /// [`Error::is_at_capacity`] when [`Builder::max_pending`](crate::Builder::max_pending)
    /// timers are pending.
    pub fn schedule<F>(&self, delay: Duration, task: F) -> Result<TimerTask, Error>
    where
        F: FnOnce() + Send + 'static,
    {
        let now = Instant::now();
        self.schedule_job(now, now.checked_add(delay), 0, Job::Once(Box::new(task)))
    }

    /// Runs `task` at `deadline` (rounded up to the next tick); a deadline in the past runs it
    /// at the driver's next turn. Otherwise as [`Timer::schedule`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tokio::time::{Duration, Instant};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_timer::Error> {
    /// let timer = wheel_timer::Timer::new();
    /// let (tx, rx) = tokio::sync::oneshot::channel();
    /// let at = Instant::now() + Duration::from_millis(10);
    /// timer.schedule_at(at, move || {
    ///     let _ = tx.send(Instant::now());
    /// })?;
    /// assert!(rx.await.unwrap() >= at);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Timer::schedule`].
    pub fn schedule_at<F>(&self, deadline: Instant, task: F) -> Result<TimerTask, Error>
    where
        F: FnOnce() + Send + 'static,
    {
        self.schedule_job(Instant::now(), Some(deadline), 0, Job::Once(Box::new(task)))
    }

    /// Spawns `future` on the timer's runtime once `delay` has passed. Always on the runtime,
    /// even with a [`Builder::executor`](crate::Builder::executor) (which runs closures, not
    /// futures). A panic while polling it is caught and counted like a callback's.
    /// Otherwise as [`Timer::schedule`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_timer::Error> {
    /// let timer = wheel_timer::Timer::new();
    /// let (tx, rx) = tokio::sync::oneshot::channel();
    /// timer.schedule_async(Duration::from_millis(10), async move {
    ///     tokio::task::yield_now().await;
    ///     let _ = tx.send(42);
    /// })?;
    /// assert_eq!(rx.await.ok(), Some(42));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Timer::schedule`].
    pub fn schedule_async<F>(&self, delay: Duration, future: F) -> Result<TimerTask, Error>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let now = Instant::now();
        self.schedule_job(now, now.checked_add(delay), 0, Job::Async(Box::pin(future)))
    }

    /// Runs `task` every `period`, the first time one period from now, until the returned
    /// handle is cancelled (one [`TimerTask::cancel`] stops the whole series) or the timer is
    /// shut down: something Netty's timer cannot do.
    ///
    /// Runs are due at `now + k × period` and never overlap: if a run is still going when
    /// the next is due, that next run is skipped, and runs the driver was too late for are
    /// skipped rather than bunched up (like
    /// [`MissedTickBehavior::Skip`](crate::MissedTickBehavior::Skip)). A series counts as one
    /// pending timer. If the callback panics, the panic is caught and reported as for
    /// [`Timer::schedule`] and the series ends ([`TimerTask::is_expired`] turns true),
    /// since the callback's state may be broken.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_timer::Error> {
    /// let timer = wheel_timer::Timer::new();
    /// let runs = Arc::new(AtomicU32::new(0));
    /// let counter = runs.clone();
    /// let series = timer.schedule_repeating(Duration::from_millis(10), move || {
    ///     counter.fetch_add(1, Ordering::Relaxed);
    /// })?;
    /// while runs.load(Ordering::Relaxed) < 3 {
    ///     timer.sleep(Duration::from_millis(10)).await;
    /// }
    /// assert!(series.cancel());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Timer::schedule`].
    ///
    /// # Panics
    ///
    /// If `period` is zero.
    #[track_caller]
    pub fn schedule_repeating<F>(&self, period: Duration, task: F) -> Result<TimerTask, Error>
    where
        F: FnMut() + Send + 'static,
    {
        assert!(
            !period.is_zero(),
            "wheel-timer: schedule_repeating needs a non-zero period"
        );
        let period_ns = u64::try_from(period.as_nanos()).map_or(MAX_NANOS, |p| p.min(MAX_NANOS));
        let now = Instant::now();
        let job = Job::Repeating(Box::new(task));
        self.schedule_job(now, now.checked_add(period), period_ns, job)
    }

    /// Schedules `job` at `deadline` (`None`: past every deadline the wheel keeps) in the
    /// calling thread's shard.
    fn schedule_job(
        &self,
        now: Instant,
        deadline: Option<Instant>,
        period: u64,
        job: Job,
    ) -> Result<TimerTask, Error> {
        let global = self.global();
        let nanos = deadline.map_or(MAX_NANOS, |deadline| global.clock.nanos(deadline));
        Global::schedule_task(global, self.shard_index(), now, nanos, period, job)
    }
}

#[cfg(all(test, not(wheel_loom)))]
mod tests {
    //! The exact interleavings of a cancel racing the driver, played step by step on a timer
    //! with no runtime (callbacks then run inline, after the driver unlocked).

    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    use super::*;
    use crate::Builder;

    fn unspawned(max_pending: Option<usize>) -> (Timer, Arc<Global>) {
        let mut builder = Builder::new();
        builder.shards(1).tick(Duration::from_millis(1));
        if let Some(max) = max_pending {
            builder.max_pending(max);
        }
        builder.build_unspawned().unwrap()
    }

    fn tick_of(task: &TimerTask) -> u64 {
        let core = task.global.shards[task.shard].lock();
        core.tasks.tick(task.key).expect("still allocated")
    }

    fn counter() -> (Arc<AtomicUsize>, impl FnMut() + Send + 'static) {
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        (runs, move || {
            counted.fetch_add(1, SeqCst);
        })
    }

    #[test]
    fn cancel_winning_the_race_with_the_fire_is_counted_once() {
        let (timer, global) = unspawned(Some(1));
        let (runs, run) = counter();
        let task = timer.schedule(Duration::from_millis(5), run).unwrap();
        let tick = tick_of(&task);
        assert!(
            global.next_wake() <= tick,
            "the driver is told to wake in time"
        );
        // The cancel's CAS lands first, the driver pops the entry in that same tick, and
        // only then does the cancel take the shard lock.
        assert!(task.mark_cancelled());
        Global::turn(&global, tick, &mut Vec::new());
        task.finish_cancel();
        assert_eq!(runs.load(SeqCst), 0);
        assert!(task.is_cancelled() && !task.is_expired());
        assert!(!task.cancel(), "a second cancel loses");
        let stats = timer.stats();
        assert_eq!((stats.fired, stats.cancelled, stats.pending), (0, 1, 0));
        assert_eq!(global.task_counts(), (0, Some(0)), "freed exactly once");
        let again = timer.schedule(Duration::from_millis(5), || {}).unwrap();
        let refused = timer.schedule(Duration::from_millis(5), || {}).unwrap_err();
        assert!(refused.is_at_capacity(), "the capacity count is exact");
        assert!(again.cancel());
    }

    #[test]
    fn cancel_losing_the_race_with_the_fire_changes_nothing() {
        let (timer, global) = unspawned(Some(1));
        let (runs, run) = counter();
        let task = timer.schedule(Duration::from_millis(5), run).unwrap();
        Global::turn(&global, tick_of(&task), &mut Vec::new());
        assert_eq!(runs.load(SeqCst), 1);
        assert!(task.is_expired());
        assert!(!task.cancel());
        assert!(!task.is_cancelled());
        let stats = timer.stats();
        assert_eq!((stats.fired, stats.cancelled, stats.pending), (1, 0, 0));
        assert_eq!(global.task_counts(), (0, Some(0)));
    }

    #[test]
    fn late_cancel_never_frees_the_task_that_reused_the_slot() {
        let (timer, global) = unspawned(Some(2));
        let first = timer.schedule(Duration::from_millis(5), || {}).unwrap();
        let tick = tick_of(&first);
        assert!(first.mark_cancelled());
        Global::turn(&global, tick, &mut Vec::new());
        let (runs, run) = counter();
        let second = timer.schedule(Duration::from_millis(5), run).unwrap();
        assert_eq!(second.key.index(), first.key.index(), "the slot was reused");
        first.finish_cancel();
        assert_eq!(timer.pending(), 1, "the second task is still scheduled");
        assert_eq!(global.task_counts(), (1, Some(1)));
        Global::turn(&global, tick_of(&second), &mut Vec::new());
        assert_eq!(runs.load(SeqCst), 1);
        assert_eq!(global.task_counts(), (0, Some(0)));
    }

    #[test]
    fn repeating_task_rearms_in_place_on_its_grid_and_skips_missed_runs() {
        let (timer, global) = unspawned(None);
        let (runs, run) = counter();
        let task = timer
            .schedule_repeating(Duration::from_millis(10), run)
            .unwrap();
        let first = task.deadline();
        let start = tick_of(&task);
        Global::turn(&global, start, &mut Vec::new());
        assert_eq!(runs.load(SeqCst), 1);
        assert_eq!(task.deadline(), first + Duration::from_millis(10));
        assert_eq!(timer.pending(), 1, "re-armed in place, same key");
        // The driver comes 35 ms late for the next run: it runs once, and the next run is
        // the next point of the 10 ms grid after now rather than a burst of missed runs.
        let late = tick_of(&task) + 35;
        Global::turn(&global, late, &mut Vec::new());
        assert_eq!(runs.load(SeqCst), 2);
        assert_eq!(task.deadline(), first + Duration::from_millis(50));
        let stats = timer.stats();
        assert_eq!((stats.scheduled, stats.fired), (3, 2));
        assert!(task.cancel());
        assert_eq!(timer.pending(), 0);
        assert_eq!(global.task_counts(), (0, None));
    }
}
