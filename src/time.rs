//! `tokio::time`'s names on the wheel: switch with one import.
//!
//! ```
//! // use tokio::time::{sleep, timeout, Duration, Instant};
//! use wheel_timer::time::{sleep, timeout, Duration, Instant};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let start = Instant::now();
//! sleep(Duration::from_millis(10)).await;
//! assert!(start.elapsed() >= Duration::from_millis(10));
//! assert!(timeout(Duration::from_millis(5), std::future::pending::<()>()).await.is_err());
//! # }
//! ```
//!
//! Every function runs on the current runtime's [default timer](crate::default_timer) (1 ms
//! tick, like tokio's) and is the same function as its `_wheel` twin
//! ([`sleep_wheel`](crate::sleep_wheel), …). [`Instant`] and [`Duration`] *are* tokio's and
//! std's, so a paused clock (`#[tokio::test(start_paused = true)]`, `tokio::time::pause`,
//! `advance`) drives these timers; the clock controls themselves stay in `tokio::time`. What
//! still differs from tokio, item by item, is listed in the README ("Moving from
//! tokio::time").

pub use std::time::Duration;
pub use tokio::time::Instant;

pub use crate::interval::{Interval, MissedTickBehavior};
pub use crate::sleep::Sleep;
pub use crate::timeout::Timeout;

/// `tokio::time::error`'s counterpart: the error a [`Timeout`] resolves to.
pub mod error {
    pub use crate::error::Elapsed;
}

use std::future::IntoFuture;

/// Waits until `duration` has elapsed: `tokio::time::sleep` on the wheel.
///
/// The deadline rounds up to the next 1 ms tick; a zero duration completes on the first
/// poll; `Duration::MAX` saturates 146 years out.
///
/// # Examples
///
/// ```
/// use wheel_timer::time::{sleep, Duration};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// sleep(Duration::from_millis(10)).await;
/// # }
/// ```
///
/// # Panics
///
/// Outside a tokio runtime context.
#[track_caller]
pub fn sleep(duration: Duration) -> Sleep {
    crate::sleep_wheel(duration)
}

/// Waits until `deadline`: `tokio::time::sleep_until` on the wheel.
///
/// # Examples
///
/// ```
/// use wheel_timer::time::{sleep_until, Duration, Instant};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// sleep_until(Instant::now() + Duration::from_millis(10)).await;
/// # }
/// ```
///
/// # Panics
///
/// Outside a tokio runtime context.
#[track_caller]
pub fn sleep_until(deadline: Instant) -> Sleep {
    crate::sleep_wheel_until(deadline)
}

/// Requires `future` to complete within `duration`: `tokio::time::timeout` on the wheel.
///
/// # Examples
///
/// ```
/// use wheel_timer::time::{timeout, Duration};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// assert_eq!(timeout(Duration::from_secs(1), async { 7 }).await, Ok(7));
/// # }
/// ```
///
/// # Errors
///
/// [`error::Elapsed`] if the duration elapses first.
///
/// # Panics
///
/// Outside a tokio runtime context.
#[track_caller]
pub fn timeout<F: IntoFuture>(duration: Duration, future: F) -> Timeout<F::IntoFuture> {
    crate::timeout_wheel(duration, future)
}

/// Requires `future` to complete before `deadline`: `tokio::time::timeout_at` on the wheel.
///
/// # Examples
///
/// ```
/// use wheel_timer::time::{timeout_at, Duration, Instant};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let deadline = Instant::now() + Duration::from_millis(5);
/// assert!(timeout_at(deadline, std::future::pending::<()>()).await.is_err());
/// # }
/// ```
///
/// # Errors
///
/// [`error::Elapsed`] if the deadline passes first.
///
/// # Panics
///
/// Outside a tokio runtime context.
#[track_caller]
pub fn timeout_at<F: IntoFuture>(deadline: Instant, future: F) -> Timeout<F::IntoFuture> {
    crate::timeout_wheel_at(deadline, future)
}

/// Ticks every `period`, the first time right away: `tokio::time::interval` on the wheel.
///
/// # Examples
///
/// ```
/// use wheel_timer::time::{interval, Duration};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mut every = interval(Duration::from_millis(10));
/// every.tick().await; // right away
/// every.tick().await; // 10 ms later
/// # }
/// ```
///
/// # Panics
///
/// If `period` is zero, or outside a tokio runtime context.
#[track_caller]
pub fn interval(period: Duration) -> Interval {
    crate::interval_wheel(period)
}

/// Ticks every `period`, the first time at `start`: `tokio::time::interval_at` on the wheel.
///
/// # Examples
///
/// ```
/// use wheel_timer::time::{interval_at, Duration, Instant};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let start = Instant::now() + Duration::from_millis(20);
/// let mut every = interval_at(start, Duration::from_millis(10));
/// assert_eq!(every.tick().await, start);
/// # }
/// ```
///
/// # Panics
///
/// If `period` is zero, or outside a tokio runtime context.
#[track_caller]
pub fn interval_at(start: Instant, period: Duration) -> Interval {
    crate::interval_wheel_at(start, period)
}
