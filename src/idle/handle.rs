//! [`IdleHandle`], one connection's lock-free grip on its tracker key, and its [`Idle`] future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use super::ring::{raise, Chunk, EXPIRED, REMOVED};
use super::tracker::{Shared, DONE};
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
/// for the same key), touching does nothing: register again to track the key anew.
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
pub struct IdleHandle<K> {
    pub(super) shared: Arc<Shared<K>>,
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
/// removed from the tracker or superseded, or when the tracker's driver stops (its runtime
/// shut down).
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
pub struct Idle<'a, K> {
    handle: &'a IdleHandle<K>,
}

// ===== impl IdleHandle =====

impl<K> IdleHandle<K> {
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
    /// tracker's driver stops. [`IdleHandle::is_expired`] tells which.
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
    pub fn idle(&self) -> Idle<'_, K> {
        Idle { handle: self }
    }

    /// Ready once the key is no longer tracked for expiry (see [`IdleHandle::idle`]);
    /// otherwise registers `cx`'s waker with the tracker, in place of `replaced` (a waker
    /// this caller registered before and no longer waits with) if given.
    pub(crate) fn poll_idle(&self, cx: &mut Context<'_>, replaced: Option<&Waker>) -> Poll<()> {
        if self.stamp().load(Ordering::Acquire) >= REMOVED {
            return Poll::Ready(());
        }
        let mut core = self.shared.shards[self.shard as usize].lock();
        // Markers are set and waiters taken under this lock, so re-checking here cannot
        // miss a wakeup.
        if self.stamp().load(Ordering::Acquire) >= REMOVED
            || self.shared.state.load(Ordering::Acquire) == DONE
        {
            return Poll::Ready(());
        }
        let waiters = core.waiters.entry(self.handle).or_default();
        let stale = replaced
            .and_then(|old| waiters.iter().position(|w| w.will_wake(old)))
            .map(|i| waiters.swap_remove(i));
        if !waiters.iter().any(|w| w.will_wake(cx.waker())) {
            waiters.push(cx.waker().clone());
        }
        drop(core);
        // A waker is user code: dropped with no lock held.
        drop(stale);
        Poll::Pending
    }
}

impl<K> Drop for IdleHandle<K> {
    fn drop(&mut self) {
        let mut core = self.shared.shards[self.shard as usize].lock();
        let key = core.ring.release(self.hash, self.slot, self.handle);
        let waiters = core.waiters.remove(&self.handle);
        drop(core);
        if key.is_some() {
            self.shared.removed();
        }
        drop(key);
        drop(waiters);
        self.shared.release_handle();
    }
}

impl<K: fmt::Debug> fmt::Debug for IdleHandle<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdleHandle")
            .field("key", &self.key)
            .field("expired", &self.is_expired())
            .finish()
    }
}

// ===== impl Idle =====

impl<K> Future for Idle<'_, K> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.handle.poll_idle(cx, None)
    }
}

impl<K: fmt::Debug> fmt::Debug for Idle<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idle").field("handle", self.handle).finish()
    }
}
