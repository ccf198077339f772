//! The default timer of each tokio runtime, behind the free functions.
//!
//! One [`Timer`] per runtime, created on first use and found by the runtime's `Id`: a
//! thread-local cache answers repeated calls from the same runtime without a lock; a
//! process-wide registry (locked only on a cache miss) shares the timer between the
//! runtime's threads. Entries whose timer stopped (its runtime was dropped, taking the driver
//! task with it, or it was shut down) are replaced on the next miss, so a runtime built after
//! another was dropped gets a fresh timer.

use std::cell::RefCell;
use std::future::IntoFuture;
use std::time::Duration;

use tokio::runtime::{Handle, Id};
use tokio::time::Instant;

use crate::loom::global::Mutex;
use crate::{Sleep, Timeout, Timer};

static REGISTRY: Mutex<Vec<(Id, Timer)>> = Mutex::new(Vec::new());

thread_local! {
    static CACHE: RefCell<Option<(Id, Timer)>> = const { RefCell::new(None) };
}

/// Runs `f` with the current runtime's default timer.
#[track_caller]
pub(crate) fn with_default<R>(f: impl FnOnce(&Timer) -> R) -> R {
    let handle = match Handle::try_current() {
        Ok(handle) => handle,
        Err(_) => panic!(
            "wheel-timer: the free functions (sleep_wheel, timeout_wheel, …) must be called from inside a tokio runtime context"
        ),
    };
    let id = handle.id();
    CACHE.with(|cache| {
        if let Some((cached, timer)) = &*cache.borrow() {
            if *cached == id && timer.is_running() {
                return f(timer);
            }
        }
        let timer = lookup(&handle, id);
        let out = f(&timer);
        *cache.borrow_mut() = Some((id, timer));
        out
    })
}

fn lookup(handle: &Handle, id: Id) -> Timer {
    let mut registry = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    registry.retain(|(_, timer)| timer.is_running());
    if let Some((_, timer)) = registry.iter().find(|(rid, _)| *rid == id) {
        return timer.clone();
    }
    let _enter = handle.enter();
    let timer = Timer::build_default()
        .expect("the default configuration is valid and a runtime is entered");
    registry.push((id, timer.clone()));
    timer
}

/// The current runtime's default timer: the one the free functions use.
///
/// It is shared by every library in the process that uses the free functions, so it cannot be
/// shut down ([`Timer::shutdown`] panics on it); it stops with its runtime.
///
/// # Panics
///
/// Outside a tokio runtime context.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let timer = wheel_timer::default_timer();
/// assert_eq!(timer.pending(), 0);
/// # }
/// ```
#[track_caller]
pub fn default_timer() -> Timer {
    with_default(Timer::clone)
}

/// Waits until `duration` has elapsed, on the current runtime's default timer: the wheel's
/// drop-in for `tokio::time::sleep`.
///
/// The deadline rounds up to the next 1 ms tick. A zero duration completes on the first
/// poll; `Duration::MAX` saturates 146 years out.
///
/// # Panics
///
/// Outside a tokio runtime context.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// wheel_timer::sleep_wheel(Duration::from_millis(100)).await;
/// # }
/// ```
#[track_caller]
pub fn sleep_wheel(duration: Duration) -> Sleep {
    with_default(|timer| timer.sleep(duration))
}

/// Waits until `deadline`, on the current runtime's default timer: the wheel's drop-in for
/// `tokio::time::sleep_until`.
///
/// # Panics
///
/// Outside a tokio runtime context.
///
/// # Examples
///
/// ```
/// use tokio::time::{Duration, Instant};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// wheel_timer::sleep_wheel_until(Instant::now() + Duration::from_millis(100)).await;
/// # }
/// ```
#[track_caller]
pub fn sleep_wheel_until(deadline: Instant) -> Sleep {
    with_default(|timer| timer.sleep_until(deadline))
}

/// Requires `future` to complete within `duration`, on the current runtime's default timer:
/// the wheel's drop-in for `tokio::time::timeout`.
///
/// # Panics
///
/// Outside a tokio runtime context.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let res = wheel_timer::timeout_wheel(Duration::from_millis(10), async { 1 + 1 }).await;
/// assert_eq!(res, Ok(2));
/// # }
/// ```
#[track_caller]
pub fn timeout_wheel<F: IntoFuture>(duration: Duration, future: F) -> Timeout<F::IntoFuture> {
    with_default(|timer| timer.timeout(duration, future))
}

/// Requires `future` to complete by `deadline`, on the current runtime's default timer: the
/// wheel's drop-in for `tokio::time::timeout_at`.
///
/// # Panics
///
/// Outside a tokio runtime context.
///
/// # Examples
///
/// ```
/// use tokio::time::{Duration, Instant};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let deadline = Instant::now() + Duration::from_millis(10);
/// let res = wheel_timer::timeout_wheel_at(deadline, std::future::pending::<()>()).await;
/// assert!(res.is_err());
/// # }
/// ```
#[track_caller]
pub fn timeout_wheel_at<F: IntoFuture>(deadline: Instant, future: F) -> Timeout<F::IntoFuture> {
    with_default(|timer| timer.timeout_at(deadline, future))
}
