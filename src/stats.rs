//! [`Stats`], a snapshot of a timer's counters.
//!
//! The counters are kept where they cost nothing extra: per-shard plain integers bumped
//! under the shard lock the counted operation already holds (scheduled, fired, cancelled),
//! and atomics only the driver or a panicking callback writes (wakeups, lateness, panics).
//! [`Timer::stats`] sums the shards one lock at a time, so the snapshot is exact per shard,
//! not across shards.

use crate::shard::Snapshot;
use crate::timer::Timer;

/// A snapshot of a timer's counters, from [`Timer::stats`].
///
/// For tasks, `scheduled = fired + cancelled + pending` once the counts settle (every
/// re-arm of a repeating series counts as one more scheduled and, when it fires, fired).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), wheel_timer::Error> {
/// let timer = wheel_timer::Timer::new();
/// let task = timer.schedule(Duration::from_secs(60), || {})?;
/// timer.sleep(Duration::from_millis(2)).await;
/// task.cancel();
/// let stats = timer.stats();
/// assert_eq!(stats.scheduled, 2); // the task and the sleep
/// assert_eq!(stats.fired, 1); // the sleep
/// assert_eq!(stats.cancelled, 1); // the task
/// assert_eq!(stats.pending, 0);
/// println!("{stats:?}");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Timers pending now, as [`Timer::pending`]: registered sleeps still waiting and
    /// scheduled tasks (a repeating series counts once).
    pub pending: usize,
    /// Entries ever scheduled: sleep registrations (and re-arms of a fired sleep by
    /// `reset`), task schedules, and every re-arm of a repeating task.
    pub scheduled: u64,
    /// Entries the driver fired: sleeps woken, and callbacks that came due (handed to the
    /// executor, or skipped because the series' previous run was still going).
    pub fired: u64,
    /// Tasks cancelled, by [`TimerTask::cancel`](crate::TimerTask::cancel) or by
    /// [`Timer::shutdown`], and repeating series ended by a panicking run. Dropped sleeps
    /// are not counted.
    pub cancelled: u64,
    /// Callbacks (and async tasks) that panicked; each was caught and reported with
    /// `tracing::warn!`.
    pub panicked: u64,
    /// Times the driver task woke up to turn the wheel.
    pub driver_wakeups: u64,
    /// The largest lateness observed, in ticks: how many ticks after its own tick the driver
    /// fired an entry. Includes scheduling delay of the driver task; a sleep first polled
    /// after its deadline counts from its deadline.
    pub max_lateness_ticks: u64,
}

impl Timer {
    /// A snapshot of the timer's counters; see [`Stats`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let timer = wheel_timer::Timer::new();
    /// timer.sleep(Duration::from_millis(5)).await;
    /// let stats = timer.stats();
    /// assert_eq!((stats.scheduled, stats.fired), (1, 1));
    /// assert!(stats.driver_wakeups >= 1);
    /// # }
    /// ```
    pub fn stats(&self) -> Stats {
        self.global().snapshot().into()
    }
}

impl From<Snapshot> for Stats {
    fn from(s: Snapshot) -> Stats {
        Stats {
            pending: s.pending,
            scheduled: s.counters.scheduled,
            fired: s.counters.fired,
            cancelled: s.counters.cancelled,
            panicked: s.panicked,
            driver_wakeups: s.wakeups,
            max_lateness_ticks: s.max_lateness,
        }
    }
}
