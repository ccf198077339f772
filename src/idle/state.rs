//! [`TrackerState`], one tracker's shared state: its shards, the epoch publisher, its
//! counters and its configuration (how a timeout and a tick become ring sizes).
//!
//! The driver (`driver.rs`) turns the shards; the API (`tracker.rs`, `handle.rs`) touches,
//! inserts and removes through the methods here, which do their own counting and driver
//! notification. See the module docs of `idle` for the protocol.

use std::hash::{BuildHasher, Hash};
use std::time::Duration;

use tokio::time::Instant;

use super::output::Output;
use super::ring::Ring;
use super::waiters::WaiterTable;
use crate::clock;
use crate::loom::{
    lock, runtime, AtomicU64, AtomicU8, AtomicUsize, Mutex, MutexGuard, Notify, Ordering,
};
use crate::timer::Timer;

/// Most buckets in a shard's ring: a tick finer than `timeout / (MAX_BUCKETS - 2)` is
/// coarsened to that, so the ring stays small.
const MAX_BUCKETS: u64 = 1 << 16;
/// Most shards a tracker has.
pub(crate) const MAX_SHARDS: usize = 64;
/// The default tick is the timeout divided by this (rounded up to the timer's tick): a
/// 30 s tracker ticks every 469 ms, two driver turns a second while it tracks keys. Each
/// turn costs the runtime two wake-ups (tokio's own wheel cascades a deadline that far out
/// once before it fires), so this fraction is what keeps 100,000 idle keys under 0.05 % of
/// a core; the precision it gives (see `IdleTracker`'s docs) beats the one-second tick of
/// the original design.
pub(crate) const DEFAULT_TICKS_PER_TIMEOUT: u64 = 64;

const RUNNING: u8 = 0;
/// The driver has exited: nothing expires any more, nothing is tracked.
pub(crate) const DONE: u8 = 1;

/// The published epoch, alone on its cache line: every touch reads it, the driver writes it
/// once per tick.
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct Epoch(pub(crate) AtomicU64);

/// A tracker's settings as given to its builder.
#[derive(Clone)]
pub(crate) struct Config<S> {
    pub(crate) timeout: Duration,
    pub(crate) tick: Option<Duration>,
    pub(crate) shards: Option<usize>,
    pub(crate) hasher: S,
    /// Undelivered expired keys past which a warning is logged.
    pub(crate) warn_undelivered: usize,
}

/// One tracker's shared state.
#[derive(Debug)]
pub(crate) struct TrackerState<K, S> {
    pub(crate) epoch: Epoch,
    pub(crate) shards: Box<[Shard<K, S>]>,
    shard_mask: u64,
    hasher: S,
    /// Epoch publications; the driver holds it for a turn (or a slice of one).
    pub(super) clock: Mutex<Publisher>,
    /// Mirror of `Publisher::parked` for the insert path's lock-free check.
    parked: AtomicU8,
    pub(super) len: AtomicUsize,
    /// `IdleTracker` clones plus `IdleHandle`s: who can still touch.
    pub(super) handles: AtomicUsize,
    pub(crate) state: AtomicU8,
    /// The runtime whose shutdown stopped the tracker, if one did (its driver task's, or its
    /// timer's driver's); written before `DONE` is stored.
    ended_with: Mutex<Option<runtime::Id>>,
    /// The runtime the driver task runs on.
    pub(super) runtime: Option<runtime::Id>,
    /// Expired keys on their way to the `Expirations` stream.
    pub(super) out: Output<K>,
    pub(crate) notify: Notify,
    pub(super) start: Instant,
    pub(crate) tick_ns: u64,
    /// The idle timeout, in nanoseconds (rounded up to the timer's tick).
    pub(super) timeout_ns: u64,
    /// The clock the loom models set (see `TrackerState::clock_nanos`).
    #[cfg(all(test, wheel_loom))]
    pub(crate) model_clock: crate::loom::ModelClock,
}

/// A lock-protected part of the tracker: keys hash to one shard.
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct Shard<K, S> {
    core: Mutex<ShardCore<K, S>>,
}

#[derive(Debug)]
pub(crate) struct ShardCore<K, S> {
    pub(crate) ring: Ring<K, S>,
    /// Tasks waiting on a handle (`IdleHandle::idle`, `IdleStream`), by handle index.
    pub(crate) waiters: WaiterTable,
}

/// The epochs published so far (see the module docs).
#[derive(Debug)]
pub(super) struct Publisher {
    /// Due tick of each replaced epoch, by `epoch & (len - 1)`.
    pub(super) dues: Box<[u64]>,
    /// The tick of the driver's last publication (an inserter's does not count, so the
    /// driver's turn right after an unpark still closes the epoch the inserts went on in).
    pub(super) published: Option<u64>,
    /// A lower bound of the current epoch's due tick.
    pub(super) lower: u64,
    /// The driver is parked (nothing tracked) and publishes nothing.
    parked: bool,
}

/// `(tick_ns, timeout_ns, buckets)` for a tracker on a timer ticking every `base` ns.
fn geometry(base: u64, timeout: Duration, tick: Option<Duration>) -> (u64, u64, usize) {
    let base = base.max(1);
    let timeout_ns = clock::duration_nanos(timeout).div_ceil(base).max(1) * base;
    let wanted = match tick {
        Some(tick) => clock::duration_nanos(tick),
        None => timeout_ns / DEFAULT_TICKS_PER_TIMEOUT,
    };
    // A whole number of timer ticks (expiry is in the timer's time), and coarse enough
    // that the ring has at most `MAX_BUCKETS` buckets.
    let coarsest = timeout_ns.div_ceil(MAX_BUCKETS - 2);
    let tick_ns = wanted
        .max(coarsest)
        .div_ceil(base)
        .max(1)
        .saturating_mul(base);
    let tick_ns = tick_ns.min(clock::MAX_NANOS);
    let timeout_ticks = timeout_ns.div_ceil(tick_ns);
    let buckets = (timeout_ticks + 2).next_power_of_two() as usize;
    (tick_ns, timeout_ns, buckets)
}

// ===== impl TrackerState =====

impl<K, S: Clone> TrackerState<K, S> {
    pub(super) fn new(timer: &Timer, config: Config<S>) -> TrackerState<K, S> {
        let base = timer.tick_duration().as_nanos() as u64;
        let (tick_ns, timeout_ns, buckets) = geometry(base, config.timeout, config.tick);
        let shards = config
            .shards
            .map_or_else(
                || clock::default_shards(MAX_SHARDS),
                |n| n.clamp(1, MAX_SHARDS),
            )
            .next_power_of_two();
        let start = timer.global().clock.start;
        // The loom models' clock starts at the timer's start.
        #[cfg(not(all(test, wheel_loom)))]
        let now = clock::duration_nanos(Instant::now().saturating_duration_since(start)) / tick_ns;
        #[cfg(all(test, wheel_loom))]
        let now = 0;
        let shards: Box<[Shard<K, S>]> = (0..shards)
            .map(|_| Shard {
                core: Mutex::new(ShardCore {
                    ring: Ring::new(config.hasher.clone(), buckets, now),
                    waiters: WaiterTable::default(),
                }),
            })
            .collect();
        TrackerState {
            epoch: Epoch(AtomicU64::new(1)),
            shard_mask: shards.len() as u64 - 1,
            shards,
            hasher: config.hasher,
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
            ended_with: Mutex::new(None),
            runtime: runtime::current(),
            out: Output::new(config.warn_undelivered),
            notify: Notify::new(),
            start,
            tick_ns,
            timeout_ns,
            #[cfg(all(test, wheel_loom))]
            model_clock: crate::loom::ModelClock::default(),
        }
    }
}

impl<K, S> TrackerState<K, S> {
    /// The current epoch.
    #[inline]
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.0.load(Ordering::Relaxed)
    }

    /// Whether the driver has exited (see [`DONE`]).
    #[inline]
    pub(crate) fn is_done(&self) -> bool {
        self.state.load(Ordering::Acquire) == DONE
    }

    /// Whether the caller is a task of the runtime whose shutdown stopped the tracker: an
    /// idle wait polled then stays pending (the task is dropped with the runtime), as a tokio
    /// sleep would, instead of completing at once (see `Global::caller_runtime_shutting_down`).
    pub(crate) fn caller_runtime_shutting_down(&self) -> bool {
        if !self.is_done() {
            return false;
        }
        let ended_with = *lock(&self.ended_with);
        ended_with.is_some() && runtime::task() == ended_with
    }

    /// Marks the tracker `DONE`; `ended_with` is the runtime whose shutdown stopped it.
    pub(super) fn set_done(&self, ended_with: Option<runtime::Id>) {
        *lock(&self.ended_with) = ended_with;
        self.state.store(DONE, Ordering::Release);
    }

    pub(crate) fn shard_index(&self, hash: u64) -> usize {
        // Bits hashbrown uses for neither bucket position (low) nor tag (top 7).
        ((hash >> 40) & self.shard_mask) as usize
    }

    /// The tracker's clock reading, in nanoseconds since the start: the real clock, or under
    /// the loom models the model's clock, so that their replays are deterministic.
    pub(super) fn clock_nanos(&self) -> u64 {
        #[cfg(not(all(test, wheel_loom)))]
        let nanos = clock::duration_nanos(Instant::now().saturating_duration_since(self.start));
        #[cfg(all(test, wheel_loom))]
        let nanos = self.model_clock.nanos();
        nanos
    }

    pub(super) fn tick_start(&self, tick: u64) -> Instant {
        self.start + Duration::from_nanos(tick.saturating_mul(self.tick_ns).min(clock::MAX_NANOS))
    }

    /// The instant the tracker's clock reads `nanos`.
    pub(super) fn instant(&self, nanos: u64) -> Instant {
        self.start + Duration::from_nanos(nanos.min(clock::MAX_NANOS))
    }

    /// Replaces the current epoch. The clock is read *after* the new epoch is visible, so
    /// every touch that recorded the old one happened before that reading: the old epoch's
    /// keys are due at the first tick at or after that instant plus the timeout. Returns the
    /// reading's tick.
    pub(super) fn publish(&self, clock: &mut Publisher) -> u64 {
        let old = self.epoch.0.fetch_add(1, Ordering::SeqCst);
        let nanos = self.clock_nanos();
        let due = nanos.saturating_add(self.timeout_ns).div_ceil(self.tick_ns);
        let mask = clock.dues.len() - 1;
        clock.dues[old as usize & mask] = due;
        clock.lower = due;
        nanos / self.tick_ns
    }

    /// The tick boundary by which a key last touched in `epoch` expires, on a driver that
    /// wakes on time: its due tick once the epoch was replaced; for the current epoch, the
    /// tick after its lower bound (where a punctual driver's next turn puts it).
    pub(super) fn deadline_of(&self, epoch: u64) -> Instant {
        let clock = lock(&self.clock);
        let due = if epoch >= self.epoch() {
            clock.lower.saturating_add(1)
        } else {
            clock.dues[epoch as usize & (clock.dues.len() - 1)]
        };
        drop(clock);
        self.tick_start(due)
    }

    /// Counts a key just added, while its shard is still locked: a `remove` of the same key
    /// (which needs that lock) then always counts it out after, so `len` never wraps.
    pub(super) fn count_in(&self) {
        self.len.fetch_add(1, Ordering::SeqCst);
    }

    /// Called after `count_in`, with the shard unlocked: if the driver is parked, publishes
    /// (so the new key's epoch ends now, not when the driver gets to run) and wakes it. The
    /// `SeqCst` increment in `count_in` comes first, which is the store of the handshake with
    /// `park`.
    pub(super) fn inserted(&self) {
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
    pub(super) fn park(&self) -> bool {
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

    pub(crate) fn add_handle(&self) {
        self.handles.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn release_handle(&self) {
        if self.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.notify.notify_one();
        }
    }

    pub(crate) fn removed(&self) {
        self.len.fetch_sub(1, Ordering::SeqCst);
    }

    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }
}

impl<K, S: BuildHasher> TrackerState<K, S> {
    pub(crate) fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The shard `hash` belongs to, locked.
    pub(crate) fn lock_shard(&self, hash: u64) -> MutexGuard<'_, ShardCore<K, S>> {
        self.shards[self.shard_index(hash)].lock()
    }
}

// ===== impl Shard =====

impl<K, S> Shard<K, S> {
    pub(crate) fn lock(&self) -> MutexGuard<'_, ShardCore<K, S>> {
        lock(&self.core)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn the_default_tick_is_a_fraction_of_the_timeout_in_whole_timer_ticks() {
        // 30 s on a 1 ms timer: 30 s / 64 = 468.75 ms, rounded up to 469 ms.
        let (tick, timeout, buckets) = geometry(MS, Duration::from_secs(30), None);
        assert_eq!((tick, timeout), (469 * MS, 30_000 * MS));
        assert_eq!(buckets, 128);
        // Short timeouts keep the timer's tick.
        assert_eq!(geometry(MS, Duration::from_millis(64), None).0, MS);
        assert_eq!(geometry(MS, Duration::from_millis(100), None).0, 2 * MS);
        // A timeout is rounded up to the timer's tick; zero is one tick.
        assert_eq!(
            geometry(10 * MS, Duration::from_millis(25), None).1,
            30 * MS
        );
        assert_eq!(geometry(MS, Duration::ZERO, None).1, MS);
    }

    #[test]
    fn an_explicit_tick_is_rounded_up_and_coarsened_for_long_timeouts() {
        let (tick, _, buckets) = geometry(
            MS,
            Duration::from_secs(1),
            Some(Duration::from_micros(1500)),
        );
        assert_eq!(tick, 2 * MS);
        assert_eq!(buckets, 512);
        let (tick, _, buckets) = geometry(MS, Duration::from_secs(3600), Some(Duration::ZERO));
        assert!(buckets as u64 <= MAX_BUCKETS);
        assert_eq!(tick % MS, 0);
        let (tick, timeout, buckets) = geometry(MS, Duration::MAX, None);
        assert_eq!(timeout % MS, 0);
        assert!(tick > 0 && buckets as u64 <= MAX_BUCKETS);
    }
}
