//! The default timer of each tokio runtime, behind the free functions.
//!
//! One [`Timer`] per runtime, created on first use and found by the runtime's `Id`: a
//! thread-local cache answers repeated calls from the same runtime without a lock; a
//! process-wide registry (locked only on a cache miss) shares the timer between the
//! runtime's threads.
//!
//! Naming the current runtime costs a clone of its handle (`Handle::try_current`, a reference
//! count every thread of the runtime writes): tokio offers nothing cheaper, and a
//! thread-local cache cannot be trusted without it outside a task (one thread can enter two
//! runtimes in turn, and a timer of the wrong one might never be driven). So the cache also
//! remembers the task that last confirmed it. Inside a task the answer is one read of
//! tokio's task id and one thread-local, with no shared write (a few nanoseconds): a task
//! runs on one runtime for its whole life and task ids are never reused (tokio draws them
//! from a 64-bit counter), so while the same task asks again the cached timer is its
//! runtime's. (Inside `block_in_place`, a future that a task runs on another runtime's
//! `Handle::block_on` still counts as that task's and gets its runtime's timer, which that
//! runtime keeps driving.) Outside a task every call names the runtime. Entries whose timer
//! stopped (its runtime was dropped, taking the driver task with it, or it was shut down)
//! are replaced on the next miss, so a runtime built after another was dropped gets a fresh
//! timer.
//!
//! There are two caches with the same rules. The sleep and timeout functions need only the
//! thread's shard of the timer: the thread's stash (`crate::stash`) keeps it with the
//! runtime and the task that confirmed it, so inside that task a sleep costs tokio's task id
//! and the one thread-local access `Timer::sleep` makes anyway (callgrind: 582 instructions
//! per create + poll + drop against `Timer::sleep`'s 561). [`default_timer`] and the
//! intervals need the `Timer` itself, kept here; that cache is borrowed while the caller's
//! closure runs, so the closure runs no user code.

use std::cell::RefCell;
use std::future::IntoFuture;
use std::time::Duration;

use tokio::runtime::{Handle, Id};
use tokio::time::Instant;

use crate::loom::global::Mutex;
use crate::loom::Arc;
use crate::shard::ShardHandle;
use crate::sleep::Sleep;
use crate::stash;
use crate::timeout::Timeout;
use crate::timer::Timer;

static REGISTRY: Mutex<Vec<(Id, Timer)>> = Mutex::new(Vec::new());

/// The calling thread's last answer for `with_default` (the free functions' sleeps use
/// the thread's cached default shard instead, kept beside its stash: see `sleep_handle`).
struct Cached {
    runtime: Id,
    /// The task that last confirmed `runtime` (see the module docs); `None` outside a task.
    task: Option<tokio::task::Id>,
    timer: Timer,
}

thread_local! {
    static CACHE: RefCell<Option<Cached>> = const { RefCell::new(None) };
}

/// The shard handle for a new sleep on the current runtime's default timer: the calling
/// thread's shard, taken from its stash when the stash holds it (as `Timer::sleep_handle`).
///
/// The thread's stash keeps the answer (`stash::take_default_in_task`): inside the task
/// that last confirmed it, that is one read of tokio's task id and one thread-local
/// access, the stash's own, so the free functions cost what `Timer::sleep` does.
#[track_caller]
#[inline]
pub(crate) fn sleep_handle() -> Arc<ShardHandle> {
    let task = tokio::task::try_id();
    if task.is_some() {
        if let Some(handle) = stash::take_default_in_task(task) {
            return handle;
        }
    }
    sleep_handle_slow(task)
}

/// [`sleep_handle`] naming the runtime through its handle.
#[track_caller]
#[inline(never)]
fn sleep_handle_slow(task: Option<tokio::task::Id>) -> Arc<ShardHandle> {
    let handle = current_handle();
    let id = handle.id();
    if let Some(shard) = stash::take_default_of(id, task) {
        return shard;
    }
    let timer = with_handle(&handle, task, Timer::clone);
    let shard = timer.shard_handle();
    let out = stash::take(&shard);
    stash::set_default(id, task, shard);
    out
}

/// Runs `f` with the current runtime's default timer. `f` must not run user code (it is
/// called with the thread's cache borrowed).
#[track_caller]
#[inline]
pub(crate) fn with_default<R>(f: impl FnOnce(&Timer) -> R) -> R {
    let task = tokio::task::try_id();
    if task.is_some() {
        let mut f = Some(f);
        let fast = CACHE.with(|cache| match &*cache.borrow() {
            Some(cached) if cached.task == task && cached.timer.is_running() => {
                f.take().map(|f| f(&cached.timer))
            }
            _ => None,
        });
        match fast {
            Some(out) => out,
            None => with_handle(
                &current_handle(),
                task,
                f.expect("not called on the fast path"),
            ),
        }
    } else {
        with_handle(&current_handle(), task, f)
    }
}

#[track_caller]
fn current_handle() -> Handle {
    match Handle::try_current() {
        Ok(handle) => handle,
        Err(_) => panic!(
            "wheel-timer: the free functions (sleep_wheel, timeout_wheel, …) must be called from inside a tokio runtime context"
        ),
    }
}

/// [`with_default`] for the runtime of `handle`; `task` (the current task, if any) is
/// remembered as the one that confirmed the answer.
#[track_caller]
fn with_handle<R>(
    handle: &Handle,
    task: Option<tokio::task::Id>,
    f: impl FnOnce(&Timer) -> R,
) -> R {
    let id = handle.id();
    // The hit is answered inside the access and returns the (small) result alone; a miss
    // fills the cache in a second access.
    let mut f = Some(f);
    let hit = CACHE.with(|cache| match &mut *cache.borrow_mut() {
        Some(cached) if cached.runtime == id && cached.timer.is_running() => {
            cached.task = task;
            f.take().map(|f| f(&cached.timer))
        }
        _ => None,
    });
    if let Some(out) = hit {
        return out;
    }
    let f = f.expect("not called on a hit");
    let timer = lookup(handle, id);
    let (out, stale) = CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        let stale = cache.replace(Cached {
            runtime: id,
            task,
            timer,
        });
        let cached = cache.as_ref().expect("filled above");
        (f(&cached.timer), stale)
    });
    // The replaced timer is dropped with the cache released.
    drop(stale);
    out
}

#[track_caller]
fn lookup(handle: &Handle, id: Id) -> Timer {
    let mut registry = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    registry.retain(|(_, timer)| timer.is_running());
    if let Some((_, timer)) = registry.iter().find(|(rid, _)| *rid == id) {
        return timer.clone();
    }
    let _enter = handle.enter();
    // The configuration is valid and a runtime is entered: only a runtime without its time
    // driver is refused, which tokio's own sleeps would panic on too.
    let timer = Timer::build_default().unwrap_or_else(|e| panic!("wheel-timer: {e}"));
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
#[inline]
pub fn sleep_wheel(duration: Duration) -> Sleep {
    Sleep::after(sleep_handle(), duration)
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
#[inline]
pub fn sleep_wheel_until(deadline: Instant) -> Sleep {
    Sleep::until(sleep_handle(), deadline)
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
#[inline]
pub fn timeout_wheel<F: IntoFuture>(duration: Duration, future: F) -> Timeout<F::IntoFuture> {
    let future = future.into_future();
    Timeout::new(future, Sleep::after(sleep_handle(), duration))
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
#[inline]
pub fn timeout_wheel_at<F: IntoFuture>(deadline: Instant, future: F) -> Timeout<F::IntoFuture> {
    let future = future.into_future();
    Timeout::new(future, Sleep::until(sleep_handle(), deadline))
}
