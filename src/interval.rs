//! [`Interval`], the wheel's drop-in for `tokio::time::Interval`, and [`MissedTickBehavior`].
//!
//! An interval is a [`Sleep`] re-armed in place after each tick (`Sleep::reset_inner`), so a
//! tick allocates nothing: the wheel entry is freed when the tick completes and the next
//! poll takes a free arena slot again. The tick schedule follows tokio's `Interval` exactly
//! (`tokio/src/time/interval.rs`): first tick at the start instant, a tick counts as missed
//! when it completes more than 5 ms (or one wheel tick, if coarser) after its deadline, and
//! a missed tick is caught up according to [`MissedTickBehavior`].

use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use crate::default::with_default;
use crate::sleep::Sleep;
use crate::timer::Timer;

/// Periods are capped at about 30 years (as tokio does), so deadlines stay representable.
const MAX_PERIOD: Duration = Duration::from_secs(86400 * 365 * 30);
/// A tick completing later than this after its deadline is a missed tick (tokio's figure).
const MISSED_AFTER: Duration = Duration::from_millis(5);

/// Ticks every `period` on the current runtime's default timer, the first time right away:
/// the wheel's drop-in for `tokio::time::interval`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mut interval = wheel_timer::interval_wheel(Duration::from_millis(10));
/// interval.tick().await; // completes immediately
/// interval.tick().await; // 10 ms later
/// # }
/// ```
///
/// # Panics
///
/// If `period` is zero, or outside a tokio runtime context.
#[track_caller]
pub fn interval_wheel(period: Duration) -> Interval {
    check_period(period);
    with_default(|timer| timer.interval(period))
}

/// Ticks every `period` on the current runtime's default timer, the first time at `start`:
/// the wheel's drop-in for `tokio::time::interval_at`.
///
/// # Examples
///
/// ```
/// use tokio::time::{Duration, Instant};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let start = Instant::now() + Duration::from_millis(20);
/// let mut interval = wheel_timer::interval_wheel_at(start, Duration::from_millis(10));
/// assert_eq!(interval.tick().await, start);
/// # }
/// ```
///
/// # Panics
///
/// If `period` is zero, or outside a tokio runtime context.
#[track_caller]
pub fn interval_wheel_at(start: Instant, period: Duration) -> Interval {
    check_period(period);
    with_default(|timer| timer.interval_at(start, period))
}

#[track_caller]
fn check_period(period: Duration) {
    assert!(
        !period.is_zero(),
        "wheel-timer: an interval's period must be non-zero"
    );
}

/// What an [`Interval`] does when ticks were missed (a tick completed more than 5 ms, or one
/// wheel tick if coarser, after its deadline): tokio's `MissedTickBehavior`, with the same
/// variants and schedules, and a `From` conversion from it.
///
/// Take an interval of period 100 ms started at 0 ms whose tick due at 100 ms is only
/// polled at 350 ms:
///
/// | behavior | ticks returned after 350 ms | next deadline after that |
/// |---|---|---|
/// | `Burst` | 100, 200, 300 at once | 400 |
/// | `Delay` | 100 | 450 (now + period) |
/// | `Skip` | 100 | 400 (next point of the original grid) |
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use wheel_timer::MissedTickBehavior;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mut interval = wheel_timer::interval_wheel(Duration::from_millis(50));
/// interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
/// assert_eq!(interval.missed_tick_behavior(), MissedTickBehavior::Delay);
/// assert_eq!(MissedTickBehavior::from(tokio::time::MissedTickBehavior::Skip), MissedTickBehavior::Skip);
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MissedTickBehavior {
    /// Catch up: the missed ticks complete back to back, at their original deadlines, until
    /// the interval is on time again (the default).
    #[default]
    Burst,
    /// Start over from now: the next tick is one period after the late one completed, and
    /// every later tick keeps that new spacing.
    Delay,
    /// Drop the missed ticks: the next tick is the next point of the original schedule
    /// (start + k × period) after now.
    Skip,
}

/// An interval's ticks, from [`Timer::interval`], [`Timer::interval_at`],
/// [`interval_wheel`] or [`interval_wheel_at`]: tokio's `Interval` on the wheel.
///
/// Each tick returns the instant it was scheduled for. Missed ticks are handled per
/// [`MissedTickBehavior`] (default: [`Burst`](MissedTickBehavior::Burst)). An interval is
/// also a `Stream` of those instants (`futures_core::Stream`), which never ends.
///
/// # Cancellation
///
/// [`tick`](Interval::tick) is cancel safe: dropping its future before it completes loses no
/// tick. Dropping the interval frees its wheel entry.
///
/// # Panics
///
/// As [`Sleep`]: polling after its timer was shut down, or lost its runtime, panics with a
/// message starting `wheel-timer:`, except from a task of the runtime whose shutdown took
/// the timer's driver (it stays pending).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tokio::time::Instant;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let timer = wheel_timer::Timer::new();
/// let mut interval = timer.interval(Duration::from_millis(10));
/// let first = interval.tick().await; // immediately
/// assert_eq!(interval.tick().await, first + Duration::from_millis(10));
/// assert!(Instant::now() >= first + Duration::from_millis(10));
/// # }
/// ```
pub struct Interval {
    sleep: Sleep,
    /// The deadline of the next tick, exact (the sleep's own clamps to the timer's start).
    next: Instant,
    period: Duration,
    missed_tick_behavior: MissedTickBehavior,
}

// ===== impl Timer (intervals) =====

impl Timer {
    /// Ticks every `period` on this timer, the first time right away: tokio's
    /// `interval`. Periods above about 30 years are capped there.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let timer = wheel_timer::Timer::new();
    /// let mut interval = timer.interval(Duration::from_millis(5));
    /// for _ in 0..3 {
    ///     interval.tick().await;
    /// }
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// If `period` is zero.
    #[track_caller]
    pub fn interval(&self, period: Duration) -> Interval {
        self.interval_at(Instant::now(), period)
    }

    /// Ticks every `period` on this timer, the first time at `start`: tokio's
    /// `interval_at`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tokio::time::{Duration, Instant};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let timer = wheel_timer::Timer::new();
    /// let start = Instant::now() + Duration::from_millis(5);
    /// let mut interval = timer.interval_at(start, Duration::from_millis(5));
    /// assert_eq!(interval.tick().await, start);
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// If `period` is zero.
    #[track_caller]
    pub fn interval_at(&self, start: Instant, period: Duration) -> Interval {
        check_period(period);
        Interval {
            sleep: self.sleep_until(start),
            next: start,
            period: period.min(MAX_PERIOD),
            missed_tick_behavior: MissedTickBehavior::default(),
        }
    }
}

// ===== impl MissedTickBehavior =====

impl MissedTickBehavior {
    /// The deadline after a tick due at `due` completed late, at `now`.
    fn next_deadline(self, sleep: &Sleep, due: Instant, now: Instant, period: Duration) -> Instant {
        match self {
            MissedTickBehavior::Burst => sleep.saturating_add(due, period),
            MissedTickBehavior::Delay => sleep.saturating_add(now, period),
            MissedTickBehavior::Skip => {
                // Periods are capped at 30 years, so the remainder fits in a u64.
                let behind = (now - due).as_nanos() % period.as_nanos();
                sleep.saturating_add(now, period - Duration::from_nanos(behind as u64))
            }
        }
    }
}

impl From<tokio::time::MissedTickBehavior> for MissedTickBehavior {
    fn from(behavior: tokio::time::MissedTickBehavior) -> Self {
        match behavior {
            tokio::time::MissedTickBehavior::Burst => MissedTickBehavior::Burst,
            tokio::time::MissedTickBehavior::Delay => MissedTickBehavior::Delay,
            tokio::time::MissedTickBehavior::Skip => MissedTickBehavior::Skip,
        }
    }
}

// ===== impl Interval =====

impl Interval {
    /// Completes at the next tick and returns the instant that tick was scheduled for (not
    /// the later instant it completed at). The first tick completes at the start instant.
    ///
    /// # Cancellation
    ///
    /// Cancel safe: if the future is dropped before completing, no tick is lost.
    ///
    /// # Examples
    ///
    /// ```
    /// use tokio::time::{Duration, Instant};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut interval = wheel_timer::interval_wheel(Duration::from_millis(10));
    /// let first = interval.tick().await;
    /// assert_eq!(interval.tick().await, first + Duration::from_millis(10));
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// If the interval's timer was shut down or lost its runtime.
    pub async fn tick(&mut self) -> Instant {
        poll_fn(|cx| self.poll_tick(cx)).await
    }

    /// Polls for the next tick: `Ready` with the instant the tick was scheduled for, or
    /// `Pending` with `cx`'s waker registered for it. A `Ready` result registers no waker
    /// (as tokio), so a caller that wants the following tick must poll again.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::task::{Context, Poll, Waker};
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut interval = wheel_timer::interval_wheel(Duration::from_secs(1));
    /// let mut cx = Context::from_waker(Waker::noop());
    /// assert!(interval.poll_tick(&mut cx).is_ready()); // the first tick is immediate
    /// assert!(interval.poll_tick(&mut cx).is_pending());
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// If the interval's timer was shut down or lost its runtime.
    pub fn poll_tick(&mut self, cx: &mut Context<'_>) -> Poll<Instant> {
        ready!(Pin::new(&mut self.sleep).poll(cx));
        let due = self.next;
        let now = Instant::now();
        let tolerance = MISSED_AFTER.max(self.sleep.tick_duration());
        let next = if now > self.sleep.saturating_add(due, tolerance) {
            self.missed_tick_behavior
                .next_deadline(&self.sleep, due, now, self.period)
        } else {
            self.sleep.saturating_add(due, self.period)
        };
        self.reset_at(next);
        Poll::Ready(due)
    }

    /// Restarts the schedule one period from now: the next tick is due at `now + period`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tokio::time::{Duration, Instant};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut interval = wheel_timer::interval_wheel(Duration::from_millis(10));
    /// interval.tick().await;
    /// let reset_at = Instant::now();
    /// interval.reset();
    /// assert!(interval.tick().await >= reset_at + Duration::from_millis(10));
    /// # }
    /// ```
    pub fn reset(&mut self) {
        let next = self.sleep.saturating_add(Instant::now(), self.period);
        self.reset_at(next);
    }

    /// Makes the next tick due now; later ones follow one period apart.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut interval = wheel_timer::interval_wheel(Duration::from_secs(3600));
    /// interval.tick().await;
    /// interval.reset_immediately();
    /// interval.tick().await; // does not wait an hour
    /// # }
    /// ```
    pub fn reset_immediately(&mut self) {
        self.reset_at(Instant::now());
    }

    /// Makes the next tick due `after` from now (capped at about 30 years); later ones follow
    /// one period apart.
    ///
    /// # Examples
    ///
    /// ```
    /// use tokio::time::{Duration, Instant};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut interval = wheel_timer::interval_wheel(Duration::from_secs(3600));
    /// interval.tick().await;
    /// let before = Instant::now();
    /// interval.reset_after(Duration::from_millis(5));
    /// assert!(interval.tick().await >= before + Duration::from_millis(5));
    /// # }
    /// ```
    pub fn reset_after(&mut self, after: Duration) {
        let next = self
            .sleep
            .saturating_add(Instant::now(), after.min(MAX_PERIOD));
        self.reset_at(next);
    }

    /// Makes the next tick due at `deadline`; later ones follow one period apart. A deadline
    /// in the past makes the next tick complete at once, and counts as missed per
    /// [`MissedTickBehavior`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tokio::time::{Duration, Instant};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut interval = wheel_timer::interval_wheel(Duration::from_secs(3600));
    /// interval.tick().await;
    /// let at = Instant::now() + Duration::from_millis(5);
    /// interval.reset_at(at);
    /// assert_eq!(interval.tick().await, at);
    /// # }
    /// ```
    pub fn reset_at(&mut self, deadline: Instant) {
        self.next = deadline;
        self.sleep.reset_inner(deadline);
    }

    /// How missed ticks are handled.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let interval = wheel_timer::interval_wheel(std::time::Duration::from_secs(1));
    /// assert_eq!(interval.missed_tick_behavior(), wheel_timer::MissedTickBehavior::Burst);
    /// # }
    /// ```
    pub fn missed_tick_behavior(&self) -> MissedTickBehavior {
        self.missed_tick_behavior
    }

    /// Sets how missed ticks are handled from now on.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheel_timer::MissedTickBehavior;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut interval = wheel_timer::interval_wheel(std::time::Duration::from_secs(1));
    /// interval.set_missed_tick_behavior(MissedTickBehavior::Skip);
    /// # }
    /// ```
    pub fn set_missed_tick_behavior(&mut self, behavior: MissedTickBehavior) {
        self.missed_tick_behavior = behavior;
    }

    /// The period between ticks (capped at about 30 years).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let interval = wheel_timer::interval_wheel(Duration::from_millis(250));
    /// assert_eq!(interval.period(), Duration::from_millis(250));
    /// # }
    /// ```
    pub fn period(&self) -> Duration {
        self.period
    }
}

impl futures_core::Stream for Interval {
    type Item = Instant;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Instant>> {
        self.get_mut().poll_tick(cx).map(Some)
    }
}

impl fmt::Debug for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Interval")
            .field("next", &self.next)
            .field("period", &self.period)
            .field("missed_tick_behavior", &self.missed_tick_behavior)
            .finish()
    }
}
