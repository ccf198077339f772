//! [`IdleHandle`], one connection's lock-free grip on its tracker key, and its [`Idle`] future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use hashbrown::DefaultHashBuilder;

use super::ring::{raise, Chunk, EXPIRED, REMOVED};
use super::state::TrackerState;
use super::waiters::Waiter;
use crate::loom::{Arc, AtomicU64, Ordering};

/// A tracked key's handle, from [`IdleTracker::register`](crate::IdleTracker::register):
/// [`touch`](IdleHandle::touch) on every packet, [`idle`](IdleHandle::idle) to wait for
/// expiry. Dropping it stops tracking the key.
///
/// The handle owns its key's slot in the tracker and keeps a reference to the slot's stamp,
/// so a touch is two atomic loads (the tracker's published epoch and the stamp) and, the
/// first time in a tick, an atomic max: no lock, no lookup, no allocation, no clock read.
/// `IdleHandle` is `Send + Sync`: any thread may touch.
///
/// Once the key expired (or was removed from the tracker, or superseded by a newer handle
/// for the same key, or the tracker stopped), touching does nothing: register again to
/// track the key anew.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use wheel_timer::{IdleTracker, Timer};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let timer = Timer::new();
/// let (tracker, _expirations) = IdleTracker::new(&timer, Duration::from_millis(100));
/// let handle = tracker.register("session-9");
/// for _ in 0..3 {
///     tokio::time::sleep(Duration::from_millis(60)).await;
///     handle.touch();
/// }
/// assert!(!handle.is_expired());
/// handle.idle().await;
/// assert!(handle.is_expired());
/// assert!(!tracker.contains(&"session-9"));
/// # }
/// ```
#[must_use = "dropping an IdleHandle stops tracking its key"]
pub struct IdleHandle<K, S = DefaultHashBuilder> {
    pub(super) shared: Arc<TrackerState<K, S>>,
    /// The chunk holding this handle's stamp, at `offset`.
    pub(super) chunk: Chunk,
    pub(super) offset: u32,
    pub(super) shard: u32,
    /// The key's slot in its shard, valid while the stamp is not `EXPIRED`/`REMOVED`.
    pub(super) slot: u32,
    /// This handle's index in its shard (its stamp and its waiters).
    pub(super) handle: u32,
    pub(super) hash: u64,
    pub(super) key: K,
}

/// Future returned by [`IdleHandle::idle`]: completes when the handle's key expires, is
/// removed from the tracker or superseded, or when the tracker stops (its timer shut down or
/// its runtime ended).
///
/// While pending it holds one waker in the tracker, replaced when polled with another and
/// removed when the future is dropped.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use wheel_timer::{IdleTracker, Timer};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let timer = Timer::new();
/// let (tracker, _expirations) = IdleTracker::new(&timer, Duration::from_millis(50));
/// let handle = tracker.register(1u32);
/// let idle: wheel_timer::Idle<'_, u32> = handle.idle();
/// idle.await;
/// # }
/// ```
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct Idle<'a, K, S = DefaultHashBuilder> {
    handle: &'a IdleHandle<K, S>,
    waiter: Option<Waiter>,
}

// ===== impl IdleHandle =====

impl<K, S> IdleHandle<K, S> {
    #[inline]
    fn stamp(&self) -> &AtomicU64 {
        &self.chunk[self.offset as usize]
    }

    /// Resets the key's idle clock: no lock, no lookup, no allocation, no clock read.
    ///
    /// Does nothing once the key expired or stopped being tracked.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_timer::{IdleTracker, Timer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let timer = Timer::new();
    /// let (tracker, _expirations) = IdleTracker::new(&timer, Duration::from_secs(30));
    /// let handle = tracker.register(5u64);
    /// handle.touch();
    /// assert!(tracker.contains(&5));
    /// # }
    /// ```
    #[inline]
    pub fn touch(&self) {
        raise(self.stamp(), self.shared.epoch());
    }

    /// Touches, and tells whether the key is still being tracked for expiry (`false` once
    /// it expired).
    #[inline]
    pub(crate) fn touch_alive(&self) -> bool {
        let stamp = self.stamp();
        let value = self.shared.epoch();
        let current = stamp.load(Ordering::Relaxed);
        if current < value {
            stamp.fetch_max(value, Ordering::Relaxed);
        }
        current != EXPIRED
    }

    /// The key this handle tracks.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_timer::{IdleTracker, Timer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let timer = Timer::new();
    /// let (tracker, _expirations) = IdleTracker::new(&timer, Duration::from_secs(30));
    /// assert_eq!(*tracker.register("dave").key(), "dave");
    /// # }
    /// ```
    pub fn key(&self) -> &K {
        &self.key
    }

    /// Whether the key has expired (went the idle timeout without a touch). Lock-free.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_timer::{IdleTracker, Timer};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let timer = Timer::new();
    /// let (tracker, _expirations) = IdleTracker::new(&timer, Duration::from_millis(10));
    /// let handle = tracker.register(0u8);
    /// assert!(!handle.is_expired());
    /// tokio::time::sleep(Duration::from_millis(20)).await;
    /// assert!(handle.is_expired());
    /// # }
    /// ```
    pub fn is_expired(&self) -> bool {
        self.stamp().load(Ordering::Acquire) == EXPIRED
    }

    /// A future that completes when the key expires — or, so it never waits forever, when
    /// the key is removed from the tracker or superseded by a newer handle, or when the
    /// tracker's driver stops. [`IdleHandle::is_expired`] tells which. The exception is a
    /// runtime's shutdown that stopped the driver: polled from a task of that runtime, the
    /// future stays pending and is dropped with the task, as a tokio sleep would be.
    ///
    /// Any number of tasks may wait at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_timer::{IdleTracker, Timer};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let timer = Timer::new();
    /// let (tracker, _expirations) = IdleTracker::new(&timer, Duration::from_millis(100));
    /// let handle = tracker.register("eve");
    /// let started = tokio::time::Instant::now();
    /// handle.idle().await;
    /// assert!(started.elapsed() >= Duration::from_millis(100));
    /// # }
    /// ```
    pub fn idle(&self) -> Idle<'_, K, S> {
        Idle {
            handle: self,
            waiter: None,
        }
    }

    /// Whether the tracker has stopped (its timer shut down or its runtime ended): the key
    /// will never expire.
    pub(crate) fn is_stopped(&self) -> bool {
        self.shared.is_done()
    }

    /// Ready once the key is no longer tracked for expiry (see [`IdleHandle::idle`]);
    /// otherwise stores `cx`'s waker as `waiter`'s (a new waiter if `None`), replacing the
    /// one it stored before.
    pub(crate) fn poll_idle(&self, cx: &mut Context<'_>, waiter: &mut Option<Waiter>) -> Poll<()> {
        if self.stamp().load(Ordering::Acquire) >= REMOVED {
            return self.stopped_or_ready();
        }
        // Cloned before the lock; the waker not kept is dropped after it (user code).
        let waker = cx.waker().clone();
        let mut core = self.shared.shards[self.shard as usize].lock();
        // Markers are set and waiters taken under this lock, so re-checking here cannot
        // miss a wakeup.
        if self.stamp().load(Ordering::Acquire) >= REMOVED || self.shared.is_done() {
            drop(core);
            return self.stopped_or_ready();
        }
        let unused = core.waiters.set(self.handle, waiter, waker);
        drop(core);
        drop(unused);
        Poll::Pending
    }

    /// Ready, unless the caller is a task of the runtime whose shutdown stopped the tracker:
    /// then pending (it is dropped with the runtime), so that a task looping on `idle` does
    /// not spin through the shutdown.
    #[inline]
    fn stopped_or_ready(&self) -> Poll<()> {
        if self.shared.caller_runtime_shutting_down() {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }

    /// Removes `waiter`'s waker (its future is gone).
    pub(crate) fn forget(&self, waiter: Waiter) {
        let mut core = self.shared.shards[self.shard as usize].lock();
        let waker = core.waiters.remove(self.handle, waiter);
        drop(core);
        drop(waker);
    }
}

impl<K, S> Drop for IdleHandle<K, S> {
    fn drop(&mut self) {
        let mut core = self.shared.shards[self.shard as usize].lock();
        let key = core.ring.release(self.hash, self.slot, self.handle);
        let waiters = core.waiters.take(self.handle);
        drop(core);
        if key.is_some() {
            self.shared.removed();
        }
        drop(key);
        drop(waiters);
        self.shared.release_handle();
    }
}

impl<K: fmt::Debug, S> fmt::Debug for IdleHandle<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdleHandle")
            .field("key", &self.key)
            .field("expired", &self.is_expired())
            .finish()
    }
}

// ===== impl Idle =====

impl<K, S> Future for Idle<'_, K, S> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let polled = this.handle.poll_idle(cx, &mut this.waiter);
        if polled.is_ready() {
            // Its entry went with the key's waiters, or was never made.
            this.waiter = None;
        }
        polled
    }
}

impl<K, S> Drop for Idle<'_, K, S> {
    fn drop(&mut self) {
        if let Some(waiter) = self.waiter.take() {
            self.handle.forget(waiter);
        }
    }
}

impl<K: fmt::Debug, S> fmt::Debug for Idle<'_, K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idle").field("handle", self.handle).finish()
    }
}
