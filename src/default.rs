//! The default timer of each tokio runtime, behind the free functions.
//!
//! One [`Timer`] per runtime, created on first use and found by the runtime's `Id`: a
//! thread-local cache answers repeated calls from the same runtime without a lock; a
//! process-wide registry (locked only on a cache miss) shares the timer between the
//! runtime's threads.
//!
//! Naming the current runtime costs a clone of its handle (`Handle::try_current`, a reference
//! count every thread of the runtime writes): tokio offers nothing cheaper. So the cache also
//! remembers the task that last confirmed it: a task runs on one runtime for its whole life
//! and task ids are never reused, so while the same task asks again the cached timer is its
//! runtime's, found with one read of tokio's task id and no shared write. (Inside
//! `block_in_place`, a future that a task runs on another runtime's `Handle::block_on` still
//! counts as that task's and gets its runtime's timer, which that runtime keeps driving.) Entries whose timer stopped (its runtime was dropped, taking the driver
//! task with it, or it was shut down) are replaced on the next miss, so a runtime built after
//! another was dropped gets a fresh timer.

use std::cell::{Cell, RefCell};
use std::future::IntoFuture;
use std::time::Duration;

use tokio::runtime::{Handle, Id};
use tokio::time::Instant;

use crate::loom::global::Mutex;
use crate::{Sleep, Timeout, Timer};

static REGISTRY: Mutex<Vec<(Id, Timer)>> = Mutex::new(Vec::new());

thread_local! {
    static CACHE: RefCell<Option<(Id, Timer)>> = const { RefCell::new(None) };
    /// The task that last confirmed `CACHE` (see the module docs).
    static CONFIRMED_BY: Cell<Option<tokio::task::Id>> = const { Cell::new(None) };
}

/// Runs `f` with the current runtime's default timer.
#[track_caller]
pub(crate) fn with_default<R>(f: impl FnOnce(&Timer) -> R) -> R {
    let task = tokio::task::try_id();
    let mut f = Some(f);
    if task.is_some() && CONFIRMED_BY.get() == task {
        let fast = CACHE.with(|cache| match &*cache.borrow() {
            Some((_, timer)) if timer.is_running() => f.take().map(|f| f(timer)),
            _ => None,
        });
        if let Some(out) = fast {
            return out;
        }
    }
    let f = f.expect("not called on the fast path");
    let out = with_default_slow(f);
    CONFIRMED_BY.set(task);
    out
}

/// [`with_default`] naming the runtime through its handle.
#[track_caller]
fn with_default_slow<R>(f: impl FnOnce(&Timer) -> R) -> R {
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
