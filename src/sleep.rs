//! [`Sleep`], the wheel's drop-in for `tokio::time::Sleep`.
//!
//! A sleep is registered lazily: creating one touches no lock; the first poll inserts an
//! entry in the calling thread's shard; dropping a registered sleep removes it (O(1)); a
//! completed sleep has already freed its entry, so dropping it touches no lock either. The
//! dropped sleep's shard handle goes to the dropping thread's stash (`crate::stash`), where
//! the thread's next sleep in that shard takes it instead of counting a new reference. A
//! re-poll with the same waker while the shard's `elapsed` is below the sleep's tick is
//! answered without the lock (see the driver's ground rules).
//!
//! A sleep from `Timer::try_sleep` is the exception: it registers when it is created (with no
//! waker), so that it can be refused at `max_pending`; its first poll stores the waker.
//! Under `max_pending` every registered entry is counted from its insert until the sleep
//! frees it (completion, reset into the past, drop); infallible sleeps are counted but never
//! refused.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::time::Instant;

use crate::clock::MAX_NANOS;
use crate::error::Error;
use crate::loom::Arc;
use crate::shard::{Closing, Polled, Registered, ShardHandle};
use crate::stash;
use crate::wheel::Key;

/// The sleep's timer was shut down or lost its driver: the sleep can never complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Closed;

/// Set once the sleep has completed (returned `Ready`).
const ELAPSED: u64 = 1 << 63;
/// Set when the deadline had passed when it was set: ready on the next poll.
const PAST: u64 = 1 << 62;

/// Future returned by [`sleep_wheel`](crate::sleep_wheel),
/// [`sleep_wheel_until`](crate::sleep_wheel_until) and [`Timer::sleep`](crate::Timer::sleep):
/// completes at its deadline, rounded up to the timer's tick.
///
/// Never completes before its deadline; on a running driver, completes within one tick after
/// it (plus scheduling delay). Dropping it cancels it and drops the waker it stored.
///
/// # Panics
///
/// Polling panics if its timer has been shut down ([`Timer::shutdown`](crate::Timer::shutdown))
/// or its driver is gone because the runtime it ran on was dropped: the sleep can then never
/// complete, and a panic is louder than a hang. The message starts with `wheel-timer:`.
/// The exception is a runtime's shutdown, which may drop the driver task while another
/// worker still polls a task of that runtime: polled from such a task, the sleep stays
/// pending and is dropped with it, as a tokio sleep would be.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use wheel_timer::sleep_wheel;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// sleep_wheel(Duration::from_millis(10)).await;
/// println!("10 ms have elapsed");
/// # }
/// ```
#[must_use = "futures do nothing unless you `.await` or poll them"]
// The field order is chosen for moves: a new sleep is written field by field, and a move
// then reloads it 16 bytes at a time; a load that spans two smaller stores waits for both
// to retire (a store-forwarding stall, several nanoseconds on the hot path). `waker` is
// always `NONE` in a new sleep, written as one 16-byte store that the first reload matches.
#[repr(C)]
pub struct Sleep {
    /// Identity (data, vtable) of the waker stored in the entry; `NONE` when none is.
    waker: (usize, usize),
    /// `None` only while being dropped (the handle moves to the thread's stash).
    handle: Option<Arc<ShardHandle>>,
    /// Deadline in nanoseconds from the timer's start, plus the `ELAPSED` and `PAST` bits.
    deadline: u64,
    /// The wheel entry once registered, `Key::DANGLING` before and after.
    key: Key,
}

/// `waker` when no waker is stored. No waker has this identity (a vtable is never at
/// address 0).
const NONE: (usize, usize) = (0, 0);

fn waker_id(waker: &Waker) -> (usize, usize) {
    (waker.data() as usize, waker.vtable() as *const _ as usize)
}

// ===== impl Sleep =====

impl Sleep {
    #[inline]
    pub(crate) fn new(handle: Arc<ShardHandle>, nanos: u64, past: bool) -> Sleep {
        Sleep {
            handle: Some(handle),
            key: Key::DANGLING,
            deadline: nanos.min(MAX_NANOS) | if past { PAST } else { 0 },
            waker: NONE,
        }
    }

    /// A sleep of `duration` from now in `handle`'s shard.
    #[inline]
    pub(crate) fn after(handle: Arc<ShardHandle>, duration: std::time::Duration) -> Sleep {
        let nanos = handle.global().clock.nanos_after(Instant::now(), duration);
        Sleep::new(handle, nanos, duration.is_zero())
    }

    /// A sleep until `deadline` in `handle`'s shard.
    #[inline]
    pub(crate) fn until(handle: Arc<ShardHandle>, deadline: Instant) -> Sleep {
        let past = deadline <= Instant::now();
        let nanos = handle.global().clock.nanos(deadline);
        Sleep::new(handle, nanos, past)
    }

    #[inline]
    fn handle(&self) -> &ShardHandle {
        self.handle
            .as_deref()
            .expect("a Sleep's handle is taken only by its drop")
    }

    /// A sleep registered at once (for `Timer::try_sleep`): its capacity was admitted by the
    /// caller and is given back if the sleep ends up not registered.
    pub(crate) fn registered(handle: Arc<ShardHandle>, nanos: u64) -> Result<Sleep, Error> {
        let nanos = nanos.min(MAX_NANOS);
        let tick = handle.global().clock.tick_at_or_after(nanos);
        match handle.register(tick, None, true) {
            Registered::Scheduled(key) => Ok(Sleep {
                handle: Some(handle),
                key,
                deadline: nanos,
                waker: NONE,
            }),
            Registered::Due => Ok(Sleep::new(handle, nanos, true)),
            Registered::Closed => Err(Error::shutdown()),
        }
    }

    /// The instant this sleep completes at (before rounding up to a tick).
    ///
    /// Deadlines before the timer was created read as its creation instant, and deadlines
    /// more than 146 years away (`Duration::MAX`) as that saturation point.
    ///
    /// # Examples
    ///
    /// ```
    /// use tokio::time::{Duration, Instant};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let deadline = Instant::now() + Duration::from_secs(1);
    /// let sleep = wheel_timer::sleep_wheel_until(deadline);
    /// assert_eq!(sleep.deadline(), deadline);
    /// # }
    /// ```
    pub fn deadline(&self) -> Instant {
        self.handle().global().clock.instant(self.nanos())
    }

    /// Whether the sleep has completed: it returned `Ready`, or its timer has fired it.
    /// A sleep that was never polled is not elapsed, even with a past deadline (as tokio).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut sleep = std::pin::pin!(wheel_timer::sleep_wheel(Duration::from_millis(1)));
    /// assert!(!sleep.is_elapsed());
    /// sleep.as_mut().await;
    /// assert!(sleep.is_elapsed());
    /// # }
    /// ```
    pub fn is_elapsed(&self) -> bool {
        if self.deadline & ELAPSED != 0 {
            return true;
        }
        self.key != Key::DANGLING && self.handle().is_fired(self.key)
    }

    /// Moves the deadline, before or after completion. A registered sleep stays registered
    /// with the waker it has; a deadline in the past makes the next poll ready.
    ///
    /// # Examples
    ///
    /// ```
    /// use tokio::time::{Duration, Instant};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut sleep = std::pin::pin!(wheel_timer::sleep_wheel(Duration::from_secs(3600)));
    /// sleep.as_mut().reset(Instant::now() + Duration::from_millis(5));
    /// sleep.await;
    /// # }
    /// ```
    pub fn reset(self: Pin<&mut Self>, deadline: Instant) {
        self.get_mut().reset_inner(deadline);
    }

    pub(crate) fn reset_inner(&mut self, deadline: Instant) {
        let handle = self.handle.as_deref().expect("not dropped");
        let clock = &handle.global().clock;
        let nanos = clock.nanos(deadline);
        let past = deadline <= Instant::now();
        self.deadline = nanos | if past { PAST } else { 0 };
        if self.key == Key::DANGLING {
            return;
        }
        let rescheduled = if past {
            None
        } else {
            handle.reschedule(self.key, clock.tick_at_or_after(nanos))
        };
        match rescheduled {
            // Its waker was taken when it fired, so the next poll must store one.
            Some(true) => self.waker = NONE,
            Some(false) => {}
            // Past, or the timer closed: ready (or reporting the closure) at the next poll.
            None => {
                handle.deregister(self.key);
                self.key = Key::DANGLING;
                self.waker = NONE;
            }
        }
    }

    /// The timer's tick.
    pub(crate) fn tick_duration(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.handle().global().clock.tick_ns)
    }

    /// `instant + duration`, saturating at the latest deadline the timer keeps.
    pub(crate) fn saturating_add(
        &self,
        instant: Instant,
        duration: std::time::Duration,
    ) -> Instant {
        instant
            .checked_add(duration)
            .unwrap_or_else(|| self.handle().global().clock.instant(MAX_NANOS))
    }

    fn nanos(&self) -> u64 {
        self.deadline & MAX_NANOS
    }

    fn complete(deadline: &mut u64) -> Poll<Result<(), Closed>> {
        *deadline = (*deadline | ELAPSED) & !PAST;
        Poll::Ready(Ok(()))
    }

    /// What a sleep polled after its timer closed does: stays pending in a task of the
    /// runtime whose shutdown took the driver (the task is dropped with the runtime, as it
    /// would be holding a tokio sleep), else panics.
    #[cold]
    pub(crate) fn closed<T>(&self) -> Poll<T> {
        let global = self.handle().global();
        if global.caller_runtime_shutting_down() {
            return Poll::Pending;
        }
        if global.closing() == Some(Closing::DriverGone) {
            panic!("wheel-timer: a Sleep was polled after its timer's driver stopped (its tokio runtime shut down)");
        }
        panic!("wheel-timer: a Sleep was polled after its timer was shut down");
    }

    /// Whether a poll that found the timer closed should stay pending rather than report it
    /// (see [`Sleep::closed`]).
    pub(crate) fn caller_runtime_shutting_down(&self) -> bool {
        self.handle().global().caller_runtime_shutting_down()
    }

    /// Polls without the closed-timer panic: crate-internal waiters (the idle tracker's
    /// driver) stop cleanly on `Err(Closed)` instead.
    #[inline(always)]
    pub(crate) fn poll_unless_closed(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Closed>> {
        if self.deadline & (ELAPSED | PAST) != 0 {
            return Self::complete(&mut self.deadline);
        }
        let handle = self.handle.as_deref().expect("not dropped");
        let tick = handle.global().clock.tick_at_or_after(self.nanos());
        if self.key != Key::DANGLING
            && self.waker == waker_id(cx.waker())
            && handle.surely_pending(tick)
        {
            return Poll::Pending;
        }
        // Cloned before the shard is locked: a waker's clone is user code.
        let waker = cx.waker().clone();
        if self.key == Key::DANGLING {
            match handle.register(tick, Some(waker), false) {
                Registered::Scheduled(key) => self.key = key,
                Registered::Due => return Self::complete(&mut self.deadline),
                Registered::Closed => return Poll::Ready(Err(Closed)),
            }
        } else {
            match handle.poll_registered(self.key, waker) {
                Polled::Pending => {}
                Polled::Fired => {
                    self.key = Key::DANGLING;
                    self.waker = NONE;
                    return Self::complete(&mut self.deadline);
                }
                Polled::Closed => return Poll::Ready(Err(Closed)),
            }
        }
        self.waker = waker_id(cx.waker());
        Poll::Pending
    }
}

impl Sleep {
    /// [`poll_unless_closed`](Self::poll_unless_closed) within tokio's cooperative budget, as
    /// tokio's own `Sleep` takes part in it: a task looping on ready sleeps yields once its
    /// budget is spent instead of starving its neighbours.
    ///
    /// tokio takes a unit of budget before polling and gives it back if the poll is pending.
    /// Here a spent budget is checked first (one thread-local read, inlined) and the unit is
    /// taken only once the poll is ready, which is the same for the budget and the task, and
    /// spares the common pending poll tokio's out-of-line restore. If taking it fails after
    /// all, the completion is kept (`ELAPSED`, or the closed timer) and reported by the next
    /// poll, which `poll_proceed` has scheduled.
    #[inline]
    pub(crate) fn poll_budgeted(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Closed>> {
        if !tokio::task::coop::has_budget_remaining() {
            // Spent: pending, and the task is woken to yield (as tokio's `Sleep`).
            return budget_spent(cx);
        }
        let ready = std::task::ready!(self.poll_unless_closed(cx));
        std::task::ready!(tokio::task::coop::poll_proceed(cx)).made_progress();
        Poll::Ready(ready)
    }
}

/// A poll made with the task's coop budget spent: `poll_proceed` registers the task to be
/// woken, and a unit it hands out anyway is given back when its guard drops.
#[cold]
fn budget_spent<T>(cx: &mut Context<'_>) -> Poll<T> {
    let _restore = std::task::ready!(tokio::task::coop::poll_proceed(cx));
    // Not spent after all (nothing on this thread ran in between, so never): retried at once.
    cx.waker().wake_by_ref();
    Poll::Pending
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        match this.poll_budgeted(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(()),
            Poll::Ready(Err(Closed)) => this.closed(),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            if self.key != Key::DANGLING {
                handle.deregister(self.key);
            }
            stash::put(handle);
        }
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline())
            .field("registered", &(self.key != Key::DANGLING))
            .field("elapsed", &(self.deadline & ELAPSED != 0))
            .finish()
    }
}
