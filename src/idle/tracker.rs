//! [`IdleTracker`], the driver task that expires its keys, and the [`Expirations`] stream.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::poll_fn;
use std::hash::{BuildHasher, Hash};
use std::pin::Pin;
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;

use futures_core::Stream;
use hashbrown::DefaultHashBuilder;
use tokio::time::Instant;

use super::ring::{Dues, Ring};
use super::{IdleHandle, IdleStream};
use crate::loom::{
    lock, Arc, AtomicU64, AtomicU8, AtomicUsize, Mutex, MutexGuard, Notify, Ordering,
};
use crate::{clock, Timer};

/// Most buckets in a shard's ring: longer timeouts coarsen the tracker's tick instead.
const MAX_BUCKETS: u64 = 1 << 16;
/// Slots the driver looks at per lock hold, so touches of that shard are never stalled long.
const BUDGET: usize = 1024;
/// Most shards a tracker has.
const MAX_SHARDS: usize = 64;

const RUNNING: u8 = 0;
/// The driver has exited: nothing expires any more.
pub(crate) const DONE: u8 = 1;

/// The published epoch, alone on its cache line: every touch reads it, the driver writes it
/// once per tick.
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct Epoch(pub(crate) AtomicU64);

/// One tracker's shared state.
#[derive(Debug)]
pub(crate) struct Shared<K> {
    pub(crate) epoch: Epoch,
    pub(crate) shards: Box<[Shard<K>]>,
    shard_mask: u64,
    hasher: DefaultHashBuilder,
    /// Epoch publications; the driver holds it for a whole turn.
    clock: Mutex<Publisher>,
    /// Mirror of `Publisher::parked` for the insert path's lock-free check.
    parked: AtomicU8,
    len: AtomicUsize,
    /// `IdleTracker` clones plus `IdleHandle`s: who can still touch.
    handles: AtomicUsize,
    pub(crate) state: AtomicU8,
    out: Mutex<Output<K>>,
    pub(crate) notify: Notify,
    start: Instant,
    pub(crate) tick_ns: u64,
    timeout_ticks: u64,
    /// The clock the loom models set (see `Shared::clock_nanos`).
    #[cfg(all(test, wheel_loom))]
    pub(crate) model_clock: crate::loom::ModelClock,
}

/// A lock-protected part of the tracker: keys hash to one shard.
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct Shard<K> {
    core: Mutex<ShardCore<K>>,
}

#[derive(Debug)]
pub(crate) struct ShardCore<K> {
    pub(crate) ring: Ring<K, DefaultHashBuilder>,
    /// Tasks waiting on a handle (`IdleHandle::idle`, `IdleStream`), by handle index.
    pub(crate) waiters: HashMap<u32, Vec<Waker>>,
}

/// The epochs published so far (see the module docs).
#[derive(Debug)]
struct Publisher {
    /// Due tick of each replaced epoch, by `epoch & (len - 1)`.
    dues: Box<[u64]>,
    /// The tick of the driver's last publication (an inserter's does not count, so the
    /// driver's turn right after an unpark still closes the epoch the inserts went on in).
    published: Option<u64>,
    /// A lower bound of the current epoch's due tick.
    lower: u64,
    /// The driver is parked (nothing tracked) and publishes nothing.
    parked: bool,
}

#[derive(Debug)]
struct Output<K> {
    batches: VecDeque<Vec<K>>,
    waker: Option<Waker>,
    /// The `Expirations` stream still exists.
    listening: bool,
    /// The driver has exited.
    done: bool,
}

/// Tracks which keys (connections, sessions, users…) have gone `idle_timeout` without a
/// touch, and hands them out in batches on its [`Expirations`] stream.
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
/// successful read or write and fails with [`TimedOut`](std::io::ErrorKind::TimedOut) once
/// the key expired.
///
/// # Timing
///
/// The tracker's tick is its timer's tick (coarsened to `idle_timeout / 65534` for timeouts
/// longer than 65534 ticks, so the ring stays small). A key expires **no earlier** than
/// `idle_timeout` after its last touch. On tokio's paused clock it expires within one tick
/// after that; on a real clock within two ticks plus the driver's scheduling latency (the
/// driver wakes a little after a tick boundary, and the epoch it replaces there counts as
/// touched at the rounded-up end of that wake-up). Touches do not read the clock: the driver publishes a new
/// *epoch* every tick while it tracks keys, a touch records the current epoch, and an epoch
/// counts as touched at the instant it was replaced — an upper bound of the real touch time.
/// While it tracks nothing, the driver parks with no wakeups.
///
/// # Memory
///
/// Per tracked key, beyond the key itself: 16 bytes of stamp and links, the `Option<K>`
/// overhead (none for keys with a niche such as `String` or `Arc`, 8 bytes for integers) and
/// 5–12 bytes of hash table (measured: 32–35 bytes per `u64` key beyond the key at 1M and
/// 10M keys); 8 more for a key with an [`IdleHandle`]. Per shard, 4 bytes per bucket of
/// the ring (the timeout in ticks, rounded up to a power of two).
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
pub struct IdleTracker<K> {
    shared: Arc<Shared<K>>,
}

/// The keys of an [`IdleTracker`] that expired, one batch per tick, as a
/// [`Stream`](futures_core::Stream) of keys or with [`Expirations::next_batch`].
///
/// The stream ends once every `IdleTracker` handle and every [`IdleHandle`] is dropped and
/// every key left has expired (or the tracker's driver stopped because its runtime shut
/// down). Dropping it does not stop the tracker: keys keep expiring (for
/// [`IdleHandle::idle`] and [`IdleStream`]) and are dropped.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use futures::StreamExt;
/// use wheel_timer::{IdleTracker, Timer};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let timer = Timer::new();
/// let (tracker, expirations) = IdleTracker::new(&timer, Duration::from_millis(50));
/// for user in 0..3u32 {
///     tracker.touch(user);
/// }
/// drop(tracker); // once everything expired, the stream ends
/// let mut offline: Vec<u32> = expirations.collect().await;
/// offline.sort();
/// assert_eq!(offline, [0, 1, 2]);
/// # }
/// ```
#[must_use = "streams do nothing unless polled"]
pub struct Expirations<K> {
    shared: Arc<Shared<K>>,
    current: std::vec::IntoIter<K>,
}

// ===== impl Shared =====

impl<K> Shared<K> {
    fn new(timer: &Timer, idle_timeout: Duration, shards: usize) -> Shared<K> {
        let base = (timer.tick_duration().as_nanos() as u64).max(1);
        let timeout_ns = clock::duration_nanos(idle_timeout);
        let ticks = timeout_ns.div_ceil(base).max(1);
        let tick_ns = base * ticks.div_ceil(MAX_BUCKETS - 2);
        let timeout_ticks = timeout_ns.div_ceil(tick_ns).max(1);
        let buckets = (timeout_ticks + 2).next_power_of_two() as usize;
        let start = timer.global().clock.start;
        // The loom models' clock starts at the timer's start.
        #[cfg(not(all(test, wheel_loom)))]
        let now = clock::duration_nanos(Instant::now().saturating_duration_since(start)) / tick_ns;
        #[cfg(all(test, wheel_loom))]
        let now = 0;
        let hasher = DefaultHashBuilder::default();
        let shards: Box<[Shard<K>]> = (0..shards)
            .map(|_| Shard {
                core: Mutex::new(ShardCore {
                    ring: Ring::new(hasher.clone(), buckets, now),
                    waiters: HashMap::new(),
                }),
            })
            .collect();
        Shared {
            epoch: Epoch(AtomicU64::new(1)),
            shard_mask: shards.len() as u64 - 1,
            shards,
            hasher,
            clock: Mutex::new(Publisher {
                dues: vec![u64::MAX; buckets].into_boxed_slice(),
                published: None,
                lower: u64::MAX,
                parked: true,
            }),
            parked: AtomicU8::new(1),
            len: AtomicUsize::new(0),
            handles: AtomicUsize::new(1),
            state: AtomicU8::new(RUNNING),
            out: Mutex::new(Output {
                batches: VecDeque::new(),
                waker: None,
                listening: true,
                done: false,
            }),
            notify: Notify::new(),
            start,
            tick_ns,
            timeout_ticks,
            #[cfg(all(test, wheel_loom))]
            model_clock: crate::loom::ModelClock::default(),
        }
    }

    /// The current epoch.
    #[inline]
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.0.load(Ordering::Relaxed)
    }

    fn shard_index(&self, hash: u64) -> usize {
        // Bits hashbrown uses for neither bucket position (low) nor tag (top 7).
        ((hash >> 40) & self.shard_mask) as usize
    }

    /// The tracker's clock reading, in nanoseconds since the start: the real clock, or under
    /// the loom models the model's clock, so that their replays are deterministic.
    fn clock_nanos(&self) -> u64 {
        #[cfg(not(all(test, wheel_loom)))]
        let nanos = clock::duration_nanos(Instant::now().saturating_duration_since(self.start));
        #[cfg(all(test, wheel_loom))]
        let nanos = self.model_clock.nanos();
        nanos
    }

    fn tick_start(&self, tick: u64) -> Instant {
        self.start + Duration::from_nanos(tick.saturating_mul(self.tick_ns).min(clock::MAX_NANOS))
    }

    /// Replaces the current epoch. The clock is read *after* the new epoch is visible, so
    /// every touch that recorded the old one happened before that reading: the old epoch's
    /// keys are due at that instant plus the timeout (rounded up to a tick). Returns the
    /// reading's tick.
    fn publish(&self, clock: &mut Publisher) -> u64 {
        let old = self.epoch.0.fetch_add(1, Ordering::SeqCst);
        let nanos = self.clock_nanos();
        let due = nanos.div_ceil(self.tick_ns) + self.timeout_ticks;
        let mask = clock.dues.len() - 1;
        clock.dues[old as usize & mask] = due;
        clock.lower = due;
        nanos / self.tick_ns
    }

    /// Counts a key just added, while its shard is still locked: a `remove` of the same key
    /// (which needs that lock) then always counts it out after, so `len` never wraps.
    fn count_in(&self) {
        self.len.fetch_add(1, Ordering::SeqCst);
    }

    /// Called after `count_in`, with the shard unlocked: if the driver is parked, publishes
    /// (so the new key's epoch ends now, not when the driver gets to run) and wakes it. The
    /// `SeqCst` increment in `count_in` comes first, which is the store of the handshake with
    /// `park`.
    fn inserted(&self) {
        if self.parked.load(Ordering::SeqCst) != 0 {
            let mut clock = lock(&self.clock);
            if clock.parked {
                clock.parked = false;
                self.parked.store(0, Ordering::SeqCst);
                self.publish(&mut clock);
                drop(clock);
                self.notify.notify_one();
            }
        }
    }

    /// Marks the driver parked unless something got tracked meanwhile; `true` if it may
    /// wait for a notification. Pairs with `inserted` (store then load on both sides, all
    /// `SeqCst`): either the driver sees the key or the inserter sees `parked`.
    fn park(&self) -> bool {
        {
            let mut clock = lock(&self.clock);
            clock.parked = true;
            self.parked.store(1, Ordering::SeqCst);
        }
        if self.len.load(Ordering::SeqCst) == 0 {
            return true;
        }
        let mut clock = lock(&self.clock);
        if clock.parked {
            clock.parked = false;
            self.parked.store(0, Ordering::SeqCst);
        }
        false
    }

    pub(crate) fn release_handle(&self) {
        if self.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.notify.notify_one();
        }
    }

    pub(crate) fn removed(&self) {
        self.len.fetch_sub(1, Ordering::SeqCst);
    }

    fn listening(&self) -> bool {
        lock(&self.out).listening
    }

    /// Hands a tick's batch to the stream (or drops it if nobody listens).
    fn deliver(&self, batch: Vec<K>) {
        let mut out = lock(&self.out);
        if !out.listening {
            drop(out);
            drop(batch);
            return;
        }
        out.batches.push_back(batch);
        let waker = out.waker.take();
        drop(out);
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The driver has exited: end the stream, release every waiter.
    fn finish(&self) {
        self.state.store(DONE, Ordering::Release);
        let waker = {
            let mut out = lock(&self.out);
            out.done = true;
            out.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        for shard in self.shards.iter() {
            let waiters = std::mem::take(&mut shard.lock().waiters);
            waiters.into_values().flatten().for_each(Waker::wake);
        }
    }
}

impl<K: Hash + Eq> Shared<K> {
    pub(crate) fn hash(&self, key: &K) -> u64 {
        self.hasher.hash_one(key)
    }

    /// One driver turn: publishes a new epoch if a new tick began, then processes every
    /// shard up to the current tick (releasing each shard's lock every `BUDGET` slots).
    /// Expired keys are appended to `expired` (empty on entry) and counted out of `len`;
    /// waiters of expired handles are woken at the end, with no lock held. Returns the tick.
    fn turn(&self, expired: &mut Vec<K>, slots: &mut Vec<u32>, wakers: &mut Vec<Waker>) -> u64 {
        debug_assert!(expired.is_empty());
        let mut clock = lock(&self.clock);
        let tick = self.clock_nanos() / self.tick_ns;
        let now = match clock.published {
            Some(published) if tick <= published => tick,
            _ => {
                let now = self.publish(&mut clock);
                clock.published = Some(now);
                now
            }
        };
        let dues = Dues {
            current: self.epoch(),
            lower: clock.lower,
            ring: &clock.dues,
        };
        for shard in self.shards.iter() {
            loop {
                let mut core = shard.lock();
                let done = core.ring.advance(now, &dues, BUDGET, expired, slots);
                for handle in slots.drain(..) {
                    if let Some(list) = core.waiters.remove(&handle) {
                        wakers.extend(list);
                    }
                }
                drop(core);
                if done {
                    break;
                }
            }
        }
        drop(clock);
        // Counted out before any waiter wakes, so `len()` never still counts a key whose
        // `idle()` has completed.
        if !expired.is_empty() {
            self.len.fetch_sub(expired.len(), Ordering::SeqCst);
        }
        // With no lock held: a waker may run code that touches or registers.
        wakers.drain(..).for_each(Waker::wake);
        now
    }
}

// ===== impl Shard =====

impl<K> Shard<K> {
    pub(crate) fn lock(&self) -> MutexGuard<'_, ShardCore<K>> {
        lock(&self.core)
    }
}

// ===== the driver task =====

/// Ends the stream and releases waiters however the driver task ends (including being
/// dropped with its runtime).
struct Finish<'a, K>(&'a Shared<K>);

impl<K> Drop for Finish<'_, K> {
    fn drop(&mut self) {
        self.0.finish();
    }
}

/// The tracker's driver: while keys are tracked, wakes at every tick boundary (on the
/// tracker's timer) to publish an epoch and expire what is due; parks while nothing is
/// tracked; exits once nothing can touch and nothing is left to expire (or nobody listens).
async fn run<K>(shared: Arc<Shared<K>>, timer: Timer)
where
    K: Hash + Eq + Send + Sync + 'static,
{
    let finish = Finish(&shared);
    let mut scratch = Scratch::default();
    let mut sleep = timer.sleep_until(shared.start);
    loop {
        let notified = shared.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        match shared.step(&timer, &mut scratch) {
            Next::Exit => break,
            Next::Again => {}
            Next::Park => notified.await,
            Next::Tick(now) => {
                Pin::new(&mut sleep).reset(shared.tick_start(now + 1));
                let tick = std::future::poll_fn(|cx| sleep.poll_unless_closed(cx));
                tokio::select! {
                    biased;
                    _ = &mut notified => {}
                    done = tick => {
                        if done.is_err() {
                            // The timer was shut down (or lost its driver) under us: stop,
                            // and let `finish` end the stream, rather than panic in a
                            // library task.
                            break;
                        }
                    }
                }
            }
        }
    }
    drop(finish);
}

/// What the driver task does after a [`Shared::step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Exit: nothing can touch and nothing is left to expire (or nobody listens), or the
    /// timer stopped.
    Exit,
    /// Step again at once: a key was tracked while the driver was parking.
    Again,
    /// Parked (nothing tracked): wait for a notification.
    Park,
    /// Wait for the start of the tick after this one (or a notification).
    Tick(u64),
}

/// The driver's buffers, reused across steps.
#[derive(Debug)]
pub(crate) struct Scratch<K> {
    expired: Vec<K>,
    slots: Vec<u32>,
    wakers: Vec<Waker>,
}

impl<K> Default for Scratch<K> {
    fn default() -> Self {
        Scratch {
            expired: Vec::new(),
            slots: Vec::new(),
            wakers: Vec::new(),
        }
    }
}

impl<K: Hash + Eq> Shared<K> {
    /// One iteration of the driver task's loop, after it enabled its notification: a turn,
    /// the expired keys handed to the stream, then what to do next (parking if nothing is
    /// tracked). The loom models call it to play the driver without a runtime.
    pub(crate) fn step(&self, timer: &Timer, scratch: &mut Scratch<K>) -> Next {
        let Scratch {
            expired,
            slots,
            wakers,
        } = scratch;
        let now = self.turn(expired, slots, wakers);
        if !expired.is_empty() {
            self.deliver(std::mem::take(expired));
        }
        if self.handles.load(Ordering::Acquire) == 0
            && (self.len.load(Ordering::SeqCst) == 0 || !self.listening())
        {
            return Next::Exit;
        }
        if !timer.is_running() {
            return Next::Exit;
        }
        if self.len.load(Ordering::SeqCst) == 0 {
            return if self.park() { Next::Park } else { Next::Again };
        }
        Next::Tick(now)
    }
}

// ===== impl IdleTracker =====

impl<K> IdleTracker<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// A tracker expiring keys `idle_timeout` after their last touch, on `timer`'s tick,
    /// and the stream of its expired keys. Spawns the tracker's driver task on the current
    /// tokio runtime.
    ///
    /// `idle_timeout` is rounded up to whole ticks (at least one; `Duration::ZERO` means one
    /// tick) and saturates at 146 years.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime context.
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
    /// let (tracker, _expirations) = IdleTracker::<u64>::new(&timer, Duration::from_secs(30));
    /// assert_eq!(tracker.idle_timeout(), Duration::from_secs(30));
    /// # }
    /// ```
    #[track_caller]
    pub fn new(timer: &Timer, idle_timeout: Duration) -> (IdleTracker<K>, Expirations<K>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            panic!(
                "wheel-timer: IdleTracker::new must be called from inside a tokio runtime context"
            );
        };
        let (tracker, expirations, shared) =
            Self::unspawned(timer, idle_timeout, clock::default_shards(MAX_SHARDS));
        runtime.spawn(run(shared, timer.clone()));
        (tracker, expirations)
    }

    /// A tracker with `shards` shards, its stream, and the shared state its driver task
    /// runs on, without spawning that task (the loom models play it with [`Shared::step`]).
    pub(crate) fn unspawned(
        timer: &Timer,
        idle_timeout: Duration,
        shards: usize,
    ) -> (IdleTracker<K>, Expirations<K>, Arc<Shared<K>>) {
        let shared = Arc::new(Shared::new(timer, idle_timeout, shards));
        let tracker = IdleTracker {
            shared: shared.clone(),
        };
        let expirations = Expirations {
            shared: shared.clone(),
            current: Vec::new().into_iter(),
        };
        (tracker, expirations, shared)
    }

    /// Resets `key`'s idle clock, tracking it if it is not tracked (or expired).
    ///
    /// Takes one shard's lock and looks the key up; reads no clock; allocates only when the
    /// key is new and its shard must grow. For the per-packet path of a long-lived
    /// connection, [`IdleTracker::register`] a handle and use [`IdleHandle::touch`].
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
        let mut core = shared.shards[shared.shard_index(hash)].lock();
        let epoch = shared.epoch();
        if core.ring.touch(hash, &key, epoch) {
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
    pub fn remove(&self, key: &K) -> bool {
        let shared = &*self.shared;
        let hash = shared.hash(key);
        let mut core = shared.shards[shared.shard_index(hash)].lock();
        let Some((key, handle)) = core.ring.remove(hash, key) else {
            return false;
        };
        let waiters = handle.and_then(|handle| core.waiters.remove(&handle));
        drop(core);
        shared.removed();
        waiters.into_iter().flatten().for_each(Waker::wake);
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
    pub fn contains(&self, key: &K) -> bool {
        let hash = self.shared.hash(key);
        self.shared.shards[self.shared.shard_index(hash)]
            .lock()
            .ring
            .contains(hash, key)
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
    pub fn register(&self, key: K) -> IdleHandle<K> {
        let shared = &*self.shared;
        let hash = shared.hash(&key);
        let shard = shared.shard_index(hash);
        let mut core = shared.shards[shard].lock();
        let epoch = shared.epoch();
        let registered = core.ring.register(hash, key.clone(), epoch);
        let (chunk, offset) = core.ring.chunk_of(registered.handle);
        let waiters = registered
            .superseded
            .and_then(|handle| core.waiters.remove(&handle));
        if registered.inserted {
            shared.count_in();
        }
        drop(core);
        shared.handles.fetch_add(1, Ordering::Relaxed);
        if registered.inserted {
            shared.inserted();
        }
        waiters.into_iter().flatten().for_each(Waker::wake);
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
    /// [`Expirations`] stream.
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
    pub fn wrap<S>(&self, key: K, io: S) -> IdleStream<S> {
        IdleStream::tracked(io, self.register(key))
    }
}

impl<K> IdleTracker<K> {
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
        self.shared.len.load(Ordering::Acquire)
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
        Duration::from_nanos(self.shared.timeout_ticks * self.shared.tick_ns)
    }
}

impl<K> Clone for IdleTracker<K> {
    fn clone(&self) -> Self {
        self.shared.handles.fetch_add(1, Ordering::Relaxed);
        IdleTracker {
            shared: self.shared.clone(),
        }
    }
}

impl<K> Drop for IdleTracker<K> {
    fn drop(&mut self) {
        self.shared.release_handle();
    }
}

impl<K> fmt::Debug for IdleTracker<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdleTracker")
            .field("len", &self.len())
            .field("idle_timeout", &self.idle_timeout())
            .field("tick", &Duration::from_nanos(self.shared.tick_ns))
            .field("shards", &self.shared.shards.len())
            .finish()
    }
}

// ===== impl Expirations =====

impl<K> Expirations<K> {
    /// The next batch of expired keys: every key that expired in one driver turn (one tick,
    /// or several if the driver was late), or what is left of the batch the
    /// [`Stream`](futures_core::Stream) side was consuming. `None` once the stream has ended.
    ///
    /// # Cancellation
    ///
    /// Cancel safe: a batch is only taken when this future completes.
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
    /// let (tracker, mut expirations) = IdleTracker::new(&timer, Duration::from_millis(100));
    /// tracker.touch(1u32);
    /// tracker.touch(2u32);
    /// let mut batch = expirations.next_batch().await.unwrap_or_default();
    /// batch.sort();
    /// assert_eq!(batch, [1, 2]);
    /// # }
    /// ```
    pub async fn next_batch(&mut self) -> Option<Vec<K>> {
        poll_fn(|cx| self.poll_next_batch(cx)).await
    }

    /// Polls for the next batch of expired keys (see [`Expirations::next_batch`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::task::Context;
    /// use std::time::Duration;
    /// use wheel_timer::{IdleTracker, Timer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let timer = Timer::new();
    /// let (_tracker, mut expirations) = IdleTracker::<u32>::new(&timer, Duration::from_secs(1));
    /// let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    /// assert!(expirations.poll_next_batch(&mut cx).is_pending());
    /// # }
    /// ```
    pub fn poll_next_batch(&mut self, cx: &mut Context<'_>) -> Poll<Option<Vec<K>>> {
        if self.current.len() > 0 {
            return Poll::Ready(Some(std::mem::take(&mut self.current).collect()));
        }
        let mut out = lock(&self.shared.out);
        if let Some(batch) = out.batches.pop_front() {
            return Poll::Ready(Some(batch));
        }
        if out.done {
            return Poll::Ready(None);
        }
        match &out.waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            _ => out.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

// Keys are never pinned: the batch is a plain `Vec`.
impl<K> Unpin for Expirations<K> {}

impl<K> Stream for Expirations<K> {
    type Item = K;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<K>> {
        let this = self.get_mut();
        loop {
            if let Some(key) = this.current.next() {
                return Poll::Ready(Some(key));
            }
            match ready!(this.poll_next_batch(cx)) {
                Some(batch) => this.current = batch.into_iter(),
                None => return Poll::Ready(None),
            }
        }
    }
}

impl<K> Drop for Expirations<K> {
    fn drop(&mut self) {
        let batches = {
            let mut out = lock(&self.shared.out);
            out.listening = false;
            out.waker = None;
            std::mem::take(&mut out.batches)
        };
        drop(batches);
        self.shared.notify.notify_one();
    }
}

impl<K> fmt::Debug for Expirations<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let out = lock(&self.shared.out);
        f.debug_struct("Expirations")
            .field("queued_batches", &out.batches.len())
            .field("current_batch_left", &self.current.len())
            .field("ended", &(out.done && out.batches.is_empty()))
            .finish()
    }
}
