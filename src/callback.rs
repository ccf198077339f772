//! Callback tasks: [`Timer::schedule`] and its variants, [`Timer::shutdown`], and the
//! [`TimerTask`] handle. How a fired task's job reaches its executor is in `dispatch.rs`.
//!
//! # Ground rules
//! - The task's states and every transition out of `PENDING` are in `task.rs`; its wheel
//!   entry is reached only through `shard.rs` ([`Global::insert_task`],
//!   [`Global::remove_task`]). The entry's key is fixed when the task is scheduled: a
//!   repeating task is re-armed in place by the driver, so it keeps its key (and its one unit
//!   of `max_pending` capacity) until it ends.
//! - Only someone holding the shard lock who sees the entry still holds the same `Arc`
//!   removes it (keys are reused once freed): whoever removes it gives back its capacity and
//!   its count of allocated tasks, so each happens exactly once.
//! - Slots are freed at once, never by a scan: the driver frees a one-shot entry as soon as
//!   it pops it (fired or found cancelled) and a cancel frees the entry it wins.
//! - A one-shot job is claimed when the driver dispatches it; a repeating job is claimed by
//!   each run when it starts on the executor, under the job's lock and only while the series
//!   is pending (`TaskShared::claim`), so a run handed to the executor before a cancel never
//!   starts after that cancel returned `true`.
//! - Jobs run, and are dropped, with no lock held: user code, its destructors included, may
//!   use the timer.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::{self, MAX_NANOS};
use crate::error::Error;
use crate::loom::Arc;
use crate::shard::{Closing, Global};
use crate::task::{Job, TaskShared};
use crate::timer::Timer;
use crate::wheel::Key;

/// Handle to a callback scheduled with [`Timer::schedule`], [`Timer::schedule_at`],
/// [`Timer::schedule_async`] or [`Timer::schedule_repeating`]: Netty's `Timeout`.
///
/// Clones refer to the same task.
///
/// # Cancellation
///
/// Dropping a `TimerTask` does **not** cancel the task (as in Netty): fire-and-forget is the
/// common case, and says so with `drop(task)` or `let _task = …`. Call
/// [`cancel`](TimerTask::cancel) to stop it. A pending task keeps its timer's driver running
/// even after every [`Timer`] handle is dropped.
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
#[must_use = "a TimerTask is the only way to cancel its task; `drop` it to fire and forget"]
pub struct TimerTask {
    shared: Arc<TaskShared>,
    global: Arc<Global>,
    key: Key,
    shard: usize,
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
    /// start another run. Its wheel slot and its `max_pending` capacity are freed at once,
    /// and its callback is dropped (after the run in progress, if one is).
    ///
    /// Returns `true` only for the call that moved the task from pending to cancelled:
    /// `false` if it already fired (a one-shot task whose callback has been handed to the
    /// executor), was cancelled before, or its timer was shut down. Exactly one of a cancel
    /// and the fire it races wins. After `true`, no run of the task starts, even one the
    /// driver had already handed to the executor: a run starts by taking the callback
    /// under the task's lock, and the cancel decides under that same lock. Only a run that
    /// had started before the cancel may still be going, and it is the last.
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
        let Some(job) = self.mark_cancelled() else {
            return false;
        };
        self.finish_cancel(job);
        true
    }

    /// The first half of `cancel`: the transition that decides the race with the driver and
    /// the runs; the job if no run holds it.
    fn mark_cancelled(&self) -> Option<Option<Job>> {
        self.shared.cancel()
    }

    /// The second half of `cancel`, for the winner: count it, free the entry if the driver
    /// has not, and drop the job with no lock held.
    fn finish_cancel(&self, job: Option<Job>) {
        self.global
            .remove_task(self.shard, self.key, &self.shared, true);
        drop(job);
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
        self.shared.is_cancelled()
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
        self.shared.is_expired()
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
        self.global.clock.instant(self.shared.deadline())
    }
}

impl fmt::Debug for TimerTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("TimerTask");
        d.field("state", &self.shared.state_name())
            .field("deadline", &self.deadline());
        if self.shared.is_repeating() {
            d.field("period", &Duration::from_nanos(self.shared.period()));
        }
        d.finish()
    }
}

// ===== impl Timer (tasks) =====

impl Timer {
    /// Stops the timer: Netty's `stop()`. Returns the callback tasks that had not fired, now
    /// cancelled (their callbacks dropped, [`TimerTask::is_cancelled`] true); from here on
    /// every `schedule*` and `try_sleep*` call fails with [`Error::is_shutdown`] and the
    /// driver task exits. Unlike Netty's, the returned handles cannot run the work: they
    /// tell which tasks (by [`TimerTask::deadline`]) were cut short, so keep what a task
    /// needs to be redone elsewhere if it must survive a stop.
    ///
    /// Sleeps, timeouts and intervals still waiting are woken, and their next poll **panics**
    /// with a message starting `wheel-timer:` (so does the first poll of one created
    /// afterwards, unless its deadline has already passed: a sleep already due completes,
    /// as it would have on a running timer): they can never complete, and a panic is louder
    /// than a hang. Stop polling
    /// them (drop them, or select on a shutdown signal) before shutting the timer down. A
    /// sleep the driver had already fired, but that was not polled since, stays elapsed
    /// ([`Sleep::is_elapsed`](crate::Sleep::is_elapsed)) and completes at its next poll.
    /// Callbacks already handed to the executor still run.
    ///
    /// Calling it again returns an empty `Vec`. Dropping every handle does not require it:
    /// the driver exits by itself once nothing is pending.
    ///
    /// # Panics
    ///
    /// On a runtime's default timer ([`default_timer`](crate::default_timer)): it serves every
    /// library's [`sleep_wheel`](crate::sleep_wheel) and `timeout_wheel` in the process, so
    /// shutting it down would make all of theirs panic. It stops with its runtime; stop a
    /// [`Timer`] of your own instead.
    ///
    /// ```should_panic
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// wheel_timer::default_timer().shutdown(); // panics: refused
    /// # }
    /// ```
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_timer::Error> {
    /// let timer = wheel_timer::Timer::new();
    /// timer.schedule(Duration::from_secs(60), || unreachable!())?;
    /// let unfired = timer.shutdown();
    /// assert_eq!(unfired.len(), 1);
    /// assert!(unfired[0].is_cancelled());
    /// assert!(timer.schedule(Duration::from_secs(1), || {}).unwrap_err().is_shutdown());
    /// assert!(timer.shutdown().is_empty());
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn shutdown(&self) -> Vec<TimerTask> {
        assert!(
            !self.is_default(),
            "wheel-timer: the runtime's default timer cannot be shut down (every sleep_wheel in \
             the process uses it); shut down a Timer of your own instead"
        );
        let global = self.global();
        let mut cancelled = Vec::new();
        global.close(Closing::Stopped, &mut cancelled);
        cancelled
            .into_iter()
            .map(|(task, key, shard)| TimerTask::from_closed(global, task, key, shard))
            .collect()
    }

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
    /// [`TimerTask::cancel`]. If the timer's runtime shuts down first, the task is cancelled
    /// (its callback dropped unrun) and one `tracing::warn!` counts the tasks cancelled so.
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
        let period_ns = clock::duration_nanos(period);
        let now = Instant::now();
        let job = Job::Repeating(Box::new(task));
        self.schedule_job(now, now.checked_add(period), period_ns, job)
    }

    /// Schedules `job` at `deadline` (`None`: past every deadline the wheel keeps) in the
    /// calling thread's shard, and makes sure the driver wakes for it.
    fn schedule_job(
        &self,
        now: Instant,
        deadline: Option<Instant>,
        period: u64,
        job: Job,
    ) -> Result<TimerTask, Error> {
        let global = self.global();
        let clock = &global.clock;
        let nanos = deadline.map_or(MAX_NANOS, |deadline| clock.nanos(deadline));
        // A deadline already past is due at the current tick, not at its own, so lateness
        // is measured from when the task was scheduled.
        let tick = clock.tick_at_or_after(nanos).max(clock.tick_of(now));
        let shared = Arc::new(TaskShared::new(job, nanos, period));
        let shard = self.shard_index();
        let key = global.insert_task(shard, tick, shared.clone())?;
        tracing::trace!(
            tick,
            shard,
            repeating = period != 0,
            "wheel-timer: task scheduled"
        );
        Ok(TimerTask {
            shared,
            global: global.clone(),
            key,
            shard,
        })
    }
}

#[cfg(all(test, not(wheel_loom)))]
mod tests {
    //! The exact interleavings of a cancel racing the driver, played step by step on a timer
    //! with no runtime (callbacks then run inline, after the driver unlocked).

    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    use super::*;
    use crate::timer::Builder;

    fn unspawned(max_pending: Option<usize>) -> (Timer, Arc<Global>) {
        let mut builder = Builder::new();
        builder.shards(1).tick(Duration::from_millis(1));
        if let Some(max) = max_pending {
            builder.max_pending(max);
        }
        builder.build_unspawned().unwrap()
    }

    fn tick_of(task: &TimerTask) -> u64 {
        task.global
            .task_tick(task.shard, task.key)
            .expect("still allocated")
    }

    /// One driver turn at `tick`.
    fn turn(global: &Arc<Global>, tick: u64) {
        crate::driver::Driver::new(global.clone()).step(tick);
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
        let job = task.mark_cancelled().expect("the cancel wins");
        turn(&global, tick);
        task.finish_cancel(job);
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
        turn(&global, tick_of(&task));
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
        let job = first.mark_cancelled().expect("the cancel wins");
        turn(&global, tick);
        let (runs, run) = counter();
        let second = timer.schedule(Duration::from_millis(5), run).unwrap();
        assert_eq!(second.key.index(), first.key.index(), "the slot was reused");
        first.finish_cancel(job);
        assert_eq!(timer.pending(), 1, "the second task is still scheduled");
        assert_eq!(global.task_counts(), (1, Some(1)));
        turn(&global, tick_of(&second));
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
        turn(&global, start);
        assert_eq!(runs.load(SeqCst), 1);
        assert_eq!(task.deadline(), first + Duration::from_millis(10));
        assert_eq!(timer.pending(), 1, "re-armed in place, same key");
        // The driver comes 35 ms late for the next run: it runs once, and the next run is
        // the next point of the 10 ms grid after now rather than a burst of missed runs.
        let late = tick_of(&task) + 35;
        turn(&global, late);
        assert_eq!(runs.load(SeqCst), 2);
        assert_eq!(task.deadline(), first + Duration::from_millis(50));
        let stats = timer.stats();
        assert_eq!((stats.scheduled, stats.fired), (3, 2));
        assert!(task.cancel());
        assert_eq!(timer.pending(), 0);
        assert_eq!(global.task_counts(), (0, None));
    }
}
