//! [`IdleTracker`], the tracker's API.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::task::Waker;
use std::time::Duration;

use hashbrown::DefaultHashBuilder;

use super::handle::IdleHandle;
use super::idleness::{IdleKind, IdleMode};
use super::state::TrackerState;
use super::stream::IdleStream;
use crate::loom::Arc;

/// Tracks which keys (connections, sessions, users…) have gone `idle_timeout` without a
/// touch, and hands them out in batches on its [`Expirations`](crate::Expirations) stream.
///
/// This is the classic idle-connection ring: every touch resets a key's idle clock, and a
/// driver task expires each key `idle_timeout` after its last touch, exactly once per idle
/// episode, removing it from the tracker. A touch after expiry tracks the key again.
///
/// There are two ways to touch:
/// - [`IdleTracker::touch`] by key, from any thread: a lock of one shard (keys are sharded by
///   hash) and a table lookup, no clock read, no allocation for a known key.
/// - [`IdleTracker::register`] once per connection, then [`IdleHandle::touch`] per packet:
///   no lock, no lookup, no allocation, no clock read — two atomic loads and, at most once
///   per tick, an atomic max.
///
/// [`IdleTracker::wrap`] puts a socket behind an [`IdleStream`] that touches on every
/// successful read and fails with [`TimedOut`](std::io::ErrorKind::TimedOut) once the key
/// expired.
///
/// # Timing
///
/// The tracker has a tick of its own, a whole number of its timer's ticks: by default the
/// timeout divided by 64 (never finer than the timer's tick), so a 30 s tracker ticks every
/// 469 ms — two driver turns a second while it tracks keys, none while it tracks nothing
/// (measured with 100,000 idle keys: under 0.05 % of a core, see the README). Set
/// it with [`IdleTrackerBuilder::tick`](crate::IdleTrackerBuilder::tick).
///
/// A key expires **never earlier** than `idle_timeout` after its last touch. On tokio's
/// paused clock (a driver waking exactly on tick boundaries) it expires at most **one
/// tick** after that; on a real clock at most two ticks plus the driver's wake-up latency
/// (so at most 1/32 of the timeout late with the default tick, under a second for 30 s). Why: touches do not read
/// the clock. The driver publishes a new *epoch* every tick while it tracks keys, a touch
/// records the current epoch, and an epoch counts as touched at the instant it was
/// replaced — an upper bound of the real touch time, up to one tick after it. The key is
/// then expired by the first driver turn at or after that bound plus the timeout, up to one
/// more tick.
///
/// # Stopping
///
/// The tracker stops when its timer is shut down (or its runtime ends): keys still tracked
/// are dropped without being reported, [`Expirations`](crate::Expirations) ends, every
/// [`IdleHandle::idle`] completes, tracked [`IdleStream`]s fail their reads and writes with
/// an error saying so, and later touches and registrations track nothing (`len()` stays
/// 0). A stopped tracker never holds a key that cannot expire.
///
/// Stopping is the tracker driver's work, so it follows
/// [`Timer::shutdown`](crate::Timer::shutdown) at the driver's next turn rather than inside
/// the call: until [`is_stopped`](Self::is_stopped) reads `true`, touches are still
/// accepted and counted, and the stop then drops them with the rest. If the runtime ends
/// before the driver ever ran, dropping its task stops the tracker all the same.
///
/// # Keys and hashing
///
/// Keys are hashed with `S`, by default hashbrown's [`DefaultHashBuilder`] (foldhash,
/// seeded randomly per tracker): fast, and only *minimally* resistant to hash flooding — it
/// defeats precomputed colliding keys, not an attacker who can study the running process.
/// For keys a hostile client chooses (names, tokens) pick [`std::hash::RandomState`]
/// (SipHash) with [`IdleTrackerBuilder::hasher`](crate::IdleTrackerBuilder::hasher); socket addresses and server-assigned ids
/// are fine with the default. Lookups take any borrowed form of the key (`&str` for a
/// `String` key), as a `HashMap`'s do.
///
/// # Memory
///
/// Per tracked key, beyond the key itself: 16 bytes of stamp and links, the `Option<K>`
/// overhead (none for keys with a niche such as `String` or `Arc`, 8 bytes for integers) and
/// 5–12 bytes of hash table (measured: 32–35 bytes per `u64` key beyond the key at 1M and
/// 10M keys); 8 more for a key with an [`IdleHandle`]. Per shard, 4 bytes per bucket of
/// the ring, and 8 per bucket once per tracker (the timeout in ticks plus two, rounded up
/// to a power of two: 128 buckets with the default tick).
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
/// let (tracker, mut expirations) = IdleTracker::new(&timer, Duration::from_millis(300));
/// tracker.touch("alice");
/// tracker.touch("bob");
/// tokio::time::sleep(Duration::from_millis(200)).await;
/// tracker.touch("alice"); // a packet from alice
/// assert_eq!(expirations.next_batch().await, Some(vec!["bob"]));
/// assert_eq!(expirations.next_batch().await, Some(vec!["alice"]));
/// assert!(tracker.is_empty());
/// # }
/// ```
#[must_use = "dropping the last IdleTracker and IdleHandle ends its Expirations once the keys left expire"]
pub struct IdleTracker<K, S = DefaultHashBuilder> {
    shared: Arc<TrackerState<K, S>>,
}

// ===== impl IdleTracker =====

impl<K, S> IdleTracker<K, S> {
    /// The tracker handle of `shared`, counted in `TrackerState::handles` by its creator.
    pub(super) fn from_shared(shared: Arc<TrackerState<K, S>>) -> Self {
        IdleTracker { shared }
    }
}

impl<K, S> IdleTracker<K, S>
where
    K: Hash + Eq + Send + Sync + 'static,
    S: BuildHasher + Send + Sync + 'static,
{
    /// Resets `key`'s idle clock, tracking it if it is not tracked (or expired).
    ///
    /// Takes one shard's lock and looks the key up; reads no clock; allocates only when the
    /// key is new and its shard must grow. For the per-packet path of a long-lived
    /// connection, [`IdleTracker::register`] a handle and use [`IdleHandle::touch`].
    ///
    /// Once the tracker has stopped (its timer shut down), does nothing: the key could never
    /// expire.
    ///
    /// # Panics
    ///
    /// If one shard would hold more than 2^31 keys.
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
    /// tracker.touch(7u64);
    /// tracker.touch(7u64);
    /// assert_eq!(tracker.len(), 1);
    /// # }
    /// ```
    #[track_caller]
    pub fn touch(&self, key: K) {
        let shared = &*self.shared;
        let hash = shared.hash(&key);
        let mut core = shared.lock_shard(hash);
        let epoch = shared.epoch();
        if core.ring.touch(hash, &key, epoch) {
            return;
        }
        // Checked under the shard lock, which the stopping driver takes after setting it.
        if shared.is_done() {
            drop(core);
            drop(key);
            return;
        }
        core.ring.insert(hash, key, epoch);
        shared.count_in();
        drop(core);
        shared.inserted();
    }

    /// Stops tracking `key`; `false` if it was not tracked. It will not be reported as
    /// expired. A key with an [`IdleHandle`] is detached from it: the handle's
    /// [`idle`](IdleHandle::idle) completes and its [`IdleStream`], if any, no longer times
    /// out.
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
    /// tracker.touch("carol");
    /// assert!(tracker.remove(&"carol"));
    /// assert!(!tracker.remove(&"carol"));
    /// # }
    /// ```
    pub fn remove<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let shared = &*self.shared;
        let hash = shared.hash(key);
        let mut core = shared.lock_shard(hash);
        let Some((key, handle)) = core.ring.remove(hash, key) else {
            return false;
        };
        let waiters = handle.and_then(|handle| core.waiters.take(handle));
        drop(core);
        shared.removed();
        waiters
            .into_iter()
            .flat_map(|w| w.into_wakers())
            .for_each(Waker::wake);
        drop(key);
        true
    }

    /// Whether `key` is tracked (touched and not expired or removed since).
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
    /// tracker.touch(1u8);
    /// assert!(tracker.contains(&1));
    /// assert!(!tracker.contains(&2));
    /// # }
    /// ```
    pub fn contains<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.shared.hash(key);
        self.shared.lock_shard(hash).ring.contains(hash, key)
    }

    /// When `key` will expire if it is not touched again: the tick boundary whose driver
    /// turn expires it (the bound of [`IdleTracker`]'s *Timing*, before the driver's wake-up
    /// latency); `None` if it is not tracked.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use wheel_timer::{IdleTracker, Timer};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let timer = Timer::new();
    /// let (tracker, _expirations) = IdleTracker::new(&timer, Duration::from_secs(30));
    /// tracker.touch("frank".to_string());
    /// let deadline = tracker.deadline("frank").expect("tracked");
    /// assert!(deadline >= Instant::now() + Duration::from_secs(30));
    /// assert_eq!(tracker.deadline("grace"), None);
    /// # }
    /// ```
    pub fn deadline<Q>(&self, key: &Q) -> Option<tokio::time::Instant>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let shared = &*self.shared;
        let hash = shared.hash(key);
        let epoch = shared.lock_shard(hash).ring.last_epoch(hash, key)?;
        Some(shared.deadline_of(epoch))
    }

    /// A handle for the hot path of one connection: tracks `key` (as a touch would) and
    /// returns the handle whose [`touch`](IdleHandle::touch) takes no lock. Dropping the
    /// handle stops tracking the key.
    ///
    /// A key tracked by [`IdleTracker::touch`] is taken over. A key that already has a handle
    /// gets a new one and the old handle is detached, as by [`IdleTracker::remove`] (a
    /// reconnecting user supersedes their old connection).
    ///
    /// # Panics
    ///
    /// If one shard would hold more than 2^31 keys.
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
    /// let conn = tracker.register(42u64);
    /// conn.touch(); // per packet: no lock, no lookup
    /// conn.idle().await; // 100 ms without a packet
    /// assert!(conn.is_expired());
    /// # }
    /// ```
    #[track_caller]
    pub fn register(&self, key: K) -> IdleHandle<K, S>
    where
        K: Clone,
    {
        let shared = &*self.shared;
        let hash = shared.hash(&key);
        let shard = shared.shard_index(hash);
        let mut core = shared.shards[shard].lock();
        if shared.is_done() {
            // Stopped: a handle whose key is not tracked, as if removed.
            let handle = core.ring.detached_handle();
            let (chunk, offset) = core.ring.chunk_of(handle);
            drop(core);
            shared.add_handle();
            return IdleHandle {
                shared: self.shared.clone(),
                chunk,
                offset,
                shard: shard as u32,
                slot: u32::MAX,
                handle,
                hash,
                key,
            };
        }
        let epoch = shared.epoch();
        let registered = core.ring.register(hash, key.clone(), epoch);
        let (chunk, offset) = core.ring.chunk_of(registered.handle);
        let waiters = registered
            .superseded
            .and_then(|handle| core.waiters.take(handle));
        if registered.inserted {
            shared.count_in();
        }
        drop(core);
        shared.add_handle();
        if registered.inserted {
            shared.inserted();
        }
        waiters
            .into_iter()
            .flat_map(|w| w.into_wakers())
            .for_each(Waker::wake);
        drop(registered.spare);
        IdleHandle {
            shared: self.shared.clone(),
            chunk,
            offset,
            shard: shard as u32,
            slot: registered.slot,
            handle: registered.handle,
            hash,
            key,
        }
    }

    /// Wraps `io` (a socket…) in an [`IdleStream`] tracked under `key`: every successful
    /// read or write touches the key, and once it expires, reads and writes fail with
    /// [`TimedOut`](std::io::ErrorKind::TimedOut). The key is also reported on the
    /// [`Expirations`](crate::Expirations) stream.
    ///
    /// # Panics
    ///
    /// As [`IdleTracker::register`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::io::AsyncReadExt;
    /// use wheel_timer::{IdleTracker, Timer};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let timer = Timer::new();
    /// let (tracker, _expirations) = IdleTracker::new(&timer, Duration::from_millis(50));
    /// let (client, _server) = tokio::io::duplex(64);
    /// let mut client = tracker.wrap("conn-1", client);
    /// let err = client.read_u8().await.unwrap_err(); // nothing arrives for 50 ms
    /// assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    /// # }
    /// ```
    #[track_caller]
    pub fn wrap<T>(&self, key: K, io: T) -> IdleStream<T>
    where
        K: Clone,
    {
        self.wrap_with(key, io, IdleKind::Read, IdleMode::Fail)
    }

    /// Wraps `io` in an [`IdleStream`] tracked under `key`, choosing which activity touches
    /// the key — successful reads ([`IdleKind::Read`], as [`IdleTracker::wrap`]), writes
    /// ([`IdleKind::Write`]) or both ([`IdleKind::All`]) — and what the stream does when the
    /// key expires ([`IdleMode`]). Whatever the mode, the key is reported on the
    /// [`Expirations`](crate::Expirations) stream. In [`IdleMode::Event`] the stream reports the expiry once
    /// (as the error of the read or write in progress, `TimedOut` with [`IdleKind::of`] the
    /// kind), keeps working, and tracks the key again on its next touching activity (as
    /// [`IdleTracker::register`] would: a newer handle of the same key is superseded).
    ///
    /// # Panics
    ///
    /// As [`IdleTracker::register`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::io::{AsyncReadExt, AsyncWriteExt};
    /// use wheel_timer::{IdleKind, IdleMode, IdleTracker, Timer};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> std::io::Result<()> {
    /// let timer = Timer::new();
    /// let (tracker, mut expirations) = IdleTracker::new(&timer, Duration::from_secs(30));
    /// let (server, mut client) = tokio::io::duplex(64);
    /// let mut server = tracker.wrap_with(7u32, server, IdleKind::Read, IdleMode::Event);
    /// let err = server.read_u8().await.unwrap_err(); // 30 s without a request
    /// assert_eq!(IdleKind::of(&err), Some(IdleKind::Read));
    /// assert_eq!(expirations.next_batch().await, Some(vec![7]));
    /// server.write_all(b"bye\n").await?; // a last line before closing
    /// let mut bye = [0u8; 4];
    /// client.read_exact(&mut bye).await?;
    /// assert_eq!(&bye, b"bye\n");
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn wrap_with<T>(&self, key: K, io: T, kind: IdleKind, mode: IdleMode) -> IdleStream<T>
    where
        K: Clone,
    {
        IdleStream::tracked(io, self.register(key), kind, mode)
    }
}

impl<K, S> IdleTracker<K, S> {
    /// Number of tracked keys.
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
    /// tracker.touch('a');
    /// tracker.touch('b');
    /// assert_eq!(tracker.len(), 2);
    /// # }
    /// ```
    pub fn len(&self) -> usize {
        self.shared.len()
    }

    /// Whether no key is tracked.
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
    /// let (tracker, _expirations) = IdleTracker::<u32>::new(&timer, Duration::from_secs(30));
    /// assert!(tracker.is_empty());
    /// # }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The idle timeout as applied: the requested one rounded up to whole ticks.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_timer::{IdleTracker, Timer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_timer::Error> {
    /// let timer = Timer::builder().tick(Duration::from_millis(10)).build()?;
    /// let (tracker, _expirations) = IdleTracker::<u32>::new(&timer, Duration::from_millis(25));
    /// assert_eq!(tracker.idle_timeout(), Duration::from_millis(30));
    /// # Ok(())
    /// # }
    /// ```
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_nanos(self.shared.timeout_ns)
    }

    /// The tracker's tick (see [`IdleTrackerBuilder::tick`](crate::IdleTrackerBuilder::tick)).
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
    /// let (tracker, _expirations) = IdleTracker::<u32>::new(&timer, Duration::from_secs(1));
    /// assert_eq!(tracker.tick(), Duration::from_millis(16)); // 1 s / 64, rounded up
    /// # }
    /// ```
    pub fn tick(&self) -> Duration {
        Duration::from_nanos(self.shared.tick_ns)
    }

    /// Expired keys queued on the [`Expirations`](crate::Expirations) stream and not yet taken from it: a
    /// stream alive but never polled keeps them all (see [`Expirations`](super::expirations::Expirations)' *Backlog*).
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
    /// let (tracker, mut expirations) = IdleTracker::new(&timer, Duration::from_millis(10));
    /// tracker.touch(1u8);
    /// tracker.touch(2u8);
    /// tokio::time::sleep(Duration::from_millis(20)).await;
    /// assert_eq!(tracker.undelivered(), 2);
    /// expirations.next_batch().await;
    /// assert_eq!(tracker.undelivered(), 0);
    /// # }
    /// ```
    pub fn undelivered(&self) -> usize {
        self.shared.out.undelivered()
    }

    /// Whether the tracker has stopped (its timer shut down, or its runtime ended): nothing
    /// is tracked or expires any more.
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
    /// let (tracker, mut expirations) = IdleTracker::<u8>::new(&timer, Duration::from_secs(1));
    /// assert!(!tracker.is_stopped());
    /// timer.shutdown();
    /// assert_eq!(expirations.next_batch().await, None);
    /// assert!(tracker.is_stopped());
    /// # }
    /// ```
    pub fn is_stopped(&self) -> bool {
        self.shared.is_done()
    }
}

impl<K, S> IdleHandle<K, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: BuildHasher + Send + Sync + 'static,
{
    /// Registers the key again and makes this the new handle (the old one is released).
    pub(crate) fn renew(&mut self) {
        self.shared.add_handle();
        let tracker = IdleTracker {
            shared: self.shared.clone(),
        };
        *self = tracker.register(self.key.clone());
    }
}

impl<K, S> Clone for IdleTracker<K, S> {
    fn clone(&self) -> Self {
        self.shared.add_handle();
        IdleTracker {
            shared: self.shared.clone(),
        }
    }
}

impl<K, S> Drop for IdleTracker<K, S> {
    fn drop(&mut self) {
        self.shared.release_handle();
    }
}

impl<K, S> fmt::Debug for IdleTracker<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdleTracker")
            .field("len", &self.len())
            .field("idle_timeout", &self.idle_timeout())
            .field("tick", &self.tick())
            .field("shards", &self.shared.shards.len())
            .field("stopped", &self.is_stopped())
            .finish()
    }
}
