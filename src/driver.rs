//! The shared timer core and the tokio task that drives it.
//!
//! # Ground rules
//! - A timer is one [`Global`]: a clock, a set of [`Shard`]s and the driver's wake state.
//!   Each shard is a `Mutex` around sans-IO wheels; a thread always registers in "its" shard
//!   (round-robin per thread), so two threads creating and dropping sleeps never share a lock
//!   or a reference count.
//! - Only the driver moves time: [`Global::turn`] advances every shard to the current tick
//!   under that shard's lock, collects wakers in batches of [`BATCH`], and wakes them with no
//!   lock held (a waker may drop other sleeps of the same shard).
//! - `Shard::elapsed` mirrors the shard wheel's `elapsed` and is stored before the lock is
//!   released and before any waker is woken: a sleep whose tick is above it has certainly not
//!   fired, which lets a re-poll with an unchanged waker skip the lock.
//! - Wake protocol: `next_wake` is the tick the driver will wake at (`u64::MAX`: parked).
//!   Whoever schedules an entry at a tick below it lowers it with `fetch_min` after unlocking
//!   the shard and, if it lowered it, notifies the driver. The driver never raises it except
//!   by `swap(MAX)` when it wakes at or after it, before it scans the shards; afterwards it
//!   only `fetch_min`s the scan's result in. So an entry is either seen by the scan or its
//!   scheduler sees a `next_wake` above its tick and notifies (the notify permit is kept).
//! - Liveness: every [`ShardHandle`] (held by `Timer` handles and by sleeps) counts in
//!   `live`; the driver exits once `live` is zero and nothing is scheduled. The last handle's
//!   drop notifies it.
//! - Closing (shutdown, or the driver task dropped with its runtime) happens shard by shard
//!   under the lock: `closed` is set, every scheduled waker is taken and woken, and the
//!   shard's `elapsed` mirror is set to `u64::MAX` so no poll takes the lock-free path again.

use std::task::Waker;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::loom::{
    lock_shard, Arc, AtomicU64, AtomicU8, AtomicUsize, Ordering, ShardGuard, ShardLock,
};
use crate::wheel::{Wheel, MAX_TICK};

/// Wakers collected under one lock hold before they are woken (tokio uses 32 too).
pub(crate) const BATCH: usize = 32;

/// Not parked on a deadline.
const PARKED: u64 = u64::MAX;

pub(crate) const RUNNING: u8 = 0;
pub(crate) const STOPPED: u8 = 1;
pub(crate) const DRIVER_GONE: u8 = 2;

/// Maps tokio instants to wheel ticks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    pub(crate) start: Instant,
    pub(crate) tick_ns: u64,
    /// `u64::MAX / tick_ns`: divides by a multiply on the sleep hot path.
    recip: u64,
}

impl Clock {
    pub(crate) fn new(start: Instant, tick_ns: u64) -> Clock {
        assert!(tick_ns > 0);
        Clock {
            start,
            tick_ns,
            recip: u64::MAX / tick_ns,
        }
    }

    /// Nanoseconds from the start to `deadline`: 0 for earlier instants, saturated at
    /// [`MAX_NANOS`].
    pub(crate) fn nanos(&self, deadline: Instant) -> u64 {
        duration_nanos(deadline.saturating_duration_since(self.start))
    }

    /// `(nanos / tick_ns, nanos % tick_ns)` by multiplication: the reciprocal's estimate is
    /// at most one short, fixed by one comparison.
    fn div(&self, nanos: u64) -> (u64, u64) {
        let mut q = ((u128::from(nanos) * u128::from(self.recip)) >> 64) as u64;
        let mut r = nanos - q * self.tick_ns;
        if r >= self.tick_ns {
            q += 1;
            r -= self.tick_ns;
        }
        debug_assert_eq!((q, r), (nanos / self.tick_ns, nanos % self.tick_ns));
        (q, r)
    }

    /// The first tick that starts at or after `nanos`: sub-tick delays round up, so a timer
    /// never fires early.
    pub(crate) fn tick_at_or_after(&self, nanos: u64) -> u64 {
        let (q, r) = self.div(nanos);
        (q + u64::from(r != 0)).min(MAX_TICK)
    }

    /// The tick `now` falls in.
    pub(crate) fn tick_of(&self, now: Instant) -> u64 {
        self.div(self.nanos(now)).0.min(MAX_TICK)
    }

    pub(crate) fn now_tick(&self) -> u64 {
        self.tick_of(Instant::now())
    }

    pub(crate) fn instant(&self, nanos: u64) -> Instant {
        self.start + std::time::Duration::from_nanos(nanos)
    }

    /// The instant tick `tick` starts at, saturating far in the future.
    pub(crate) fn tick_start(&self, tick: u64) -> Instant {
        let ns = tick.saturating_mul(self.tick_ns).min(MAX_NANOS);
        self.instant(ns)
    }
}

/// `d` in nanoseconds, saturated at [`MAX_NANOS`].
pub(crate) fn duration_nanos(d: std::time::Duration) -> u64 {
    d.as_secs()
        .checked_mul(1_000_000_000)
        .and_then(|ns| ns.checked_add(u64::from(d.subsec_nanos())))
        .map_or(MAX_NANOS, |ns| ns.min(MAX_NANOS))
}

/// Deadlines are kept as nanoseconds from the timer's start in 62 bits (146 years).
pub(crate) const MAX_NANOS: u64 = (1 << 62) - 1;

/// One timer's shared state.
#[derive(Debug)]
pub(crate) struct Global {
    pub(crate) clock: Clock,
    pub(crate) shards: Box<[Shard]>,
    next_wake: AtomicU64,
    notify: Notify,
    live: AtomicUsize,
    state: AtomicU8,
    pub(crate) stats: DriverStats,
}

/// Counters only the driver writes.
#[derive(Debug, Default)]
pub(crate) struct DriverStats {
    pub(crate) wakeups: AtomicU64,
    pub(crate) max_lateness: AtomicU64,
}

/// A lock-protected slice of the timer.
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct Shard {
    core: ShardLock<ShardCore>,
    /// Mirror of `core.sleeps.elapsed()` (see the module's ground rules).
    pub(crate) elapsed: AtomicU64,
}

/// What a shard's lock protects.
#[derive(Debug)]
pub(crate) struct ShardCore {
    /// Sleep entries: the waker to wake, `None` once taken.
    pub(crate) sleeps: Wheel<Option<Waker>>,
    /// Set once by `Global::close`; nothing is scheduled afterwards.
    pub(crate) closed: bool,
}

/// A counted reference to one shard of one timer; sleeps and `Timer` handles hold these.
///
/// Aligned to two cache lines so the reference counts of different shards' handles, which
/// different threads bump on every sleep, never share a line.
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct ShardHandle {
    pub(crate) global: Arc<Global>,
    pub(crate) index: usize,
}

// ===== impl Global =====

impl Global {
    pub(crate) fn new(clock: Clock, shards: usize, slots: usize) -> Self {
        Global {
            clock,
            shards: (0..shards)
                .map(|_| Shard {
                    core: ShardLock::new(ShardCore {
                        sleeps: Wheel::new(slots),
                        closed: false,
                    }),
                    elapsed: AtomicU64::new(0),
                })
                .collect(),
            next_wake: AtomicU64::new(PARKED),
            notify: Notify::new(),
            live: AtomicUsize::new(0),
            state: AtomicU8::new(RUNNING),
            stats: DriverStats::default(),
        }
    }

    /// A counted handle to shard `index`.
    pub(crate) fn handle(self: &Arc<Self>, index: usize) -> ShardHandle {
        self.live.fetch_add(1, Ordering::Relaxed);
        ShardHandle {
            global: self.clone(),
            index,
        }
    }

    pub(crate) fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    /// Registered sleeps not yet fired, summed over the shards (each shard's count is exact
    /// at the moment its lock is held).
    pub(crate) fn pending(&self) -> usize {
        self.shards.iter().map(|s| s.lock().sleeps.len()).sum()
    }

    /// Called after an entry was scheduled at `tick` and its shard unlocked: makes sure the
    /// driver wakes by then.
    pub(crate) fn scheduled_at(&self, tick: u64) {
        if tick < self.next_wake.load(Ordering::Acquire)
            && self.next_wake.fetch_min(tick, Ordering::AcqRel) > tick
        {
            self.notify.notify_one();
        }
    }

    /// The tick the driver will wake at next (`u64::MAX` when parked); for tests and models.
    pub(crate) fn next_wake(&self) -> u64 {
        self.next_wake.load(Ordering::Acquire)
    }

    /// One driver turn at tick `now`: fire everything due, then return the tick to sleep
    /// until (`u64::MAX`: park until notified). `wakers` is scratch space, empty on return.
    pub(crate) fn turn(&self, now: u64, wakers: &mut Vec<Waker>) -> u64 {
        if now >= self.next_wake.load(Ordering::Acquire) {
            // Woken for the planned deadline: start over from "parked" so entries scheduled
            // from here on notify (see the ground rules).
            self.next_wake.swap(PARKED, Ordering::AcqRel);
        }
        let mut next = PARKED;
        for shard in self.shards.iter() {
            if let Some(exp) = shard.advance(now, wakers) {
                next = next.min(exp);
            }
        }
        self.next_wake.fetch_min(next, Ordering::AcqRel);
        self.next_wake.load(Ordering::Acquire)
    }

    /// Closes every shard with `reason` (`STOPPED` or `DRIVER_GONE`): wakes every scheduled
    /// sleep so its next poll reports the closure. Returns `false` if already closed.
    pub(crate) fn close(&self, reason: u8) -> bool {
        if self
            .state
            .compare_exchange(RUNNING, reason, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        let mut wakers = Vec::new();
        for shard in self.shards.iter() {
            let mut core = shard.lock();
            core.closed = true;
            for key in core.sleeps.keys() {
                core.sleeps.unschedule(key);
                if let Some(waker) = core.sleeps.get_mut(key).and_then(Option::take) {
                    wakers.push(waker);
                }
            }
            shard.elapsed.store(u64::MAX, Ordering::Release);
            drop(core);
            wakers.drain(..).for_each(Waker::wake);
        }
        self.notify.notify_one();
        true
    }

    /// Whether the driver should exit: nothing can reach the timer any more.
    fn abandoned(&self) -> bool {
        self.live.load(Ordering::Acquire) == 0
    }
}

// ===== impl Shard =====

impl Shard {
    pub(crate) fn lock(&self) -> ShardGuard<'_, ShardCore> {
        lock_shard(&self.core)
    }

    /// Fires what is due at `now`, waking in batches with the lock released; returns the
    /// shard's next expiration.
    fn advance(&self, now: u64, wakers: &mut Vec<Waker>) -> Option<u64> {
        loop {
            let mut core = self.lock();
            if core.closed {
                return None;
            }
            let mut full = false;
            while let Some(key) = core.sleeps.poll(now) {
                if let Some(waker) = core.sleeps.get_mut(key).and_then(Option::take) {
                    wakers.push(waker);
                    if wakers.len() == BATCH {
                        full = true;
                        break;
                    }
                }
            }
            self.elapsed.store(core.sleeps.elapsed(), Ordering::Release);
            let next = if full {
                None
            } else {
                core.sleeps.next_expiration()
            };
            drop(core);
            wakers.drain(..).for_each(Waker::wake);
            if !full {
                return next;
            }
        }
    }
}

// ===== impl ShardHandle =====

impl ShardHandle {
    pub(crate) fn shard(&self) -> &Shard {
        &self.global.shards[self.index]
    }
}

impl Drop for ShardHandle {
    fn drop(&mut self) {
        if self.global.live.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.global.notify.notify_one();
        }
    }
}

// ===== the driver task =====

/// Closes the timer if the driver task ends for any reason: its runtime shutting down drops
/// it, possibly before it was ever polled, so this lives outside the `async` body (captured
/// values of a future are dropped even when it never ran) and no sleep waits for a driver
/// that is gone.
struct DriverGuard(Arc<Global>);

impl Drop for DriverGuard {
    fn drop(&mut self) {
        self.0.close(DRIVER_GONE);
    }
}

/// The driver task for `global`, ready to spawn.
pub(crate) fn task(global: Arc<Global>) -> impl std::future::Future<Output = ()> + Send + 'static {
    let guard = DriverGuard(global);
    async move { run(&guard.0).await }
}

/// Turns the timer whenever a deadline comes or it is notified, and parks with no wakeups
/// while nothing is scheduled.
async fn run(global: &Global) {
    let mut wakers = Vec::with_capacity(BATCH);
    let sleep = tokio::time::sleep_until(global.clock.start);
    tokio::pin!(sleep);
    loop {
        let notified = global.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        global.stats.wakeups.fetch_add(1, Ordering::Relaxed);
        let now = global.clock.now_tick();
        let target = global.turn(now, &mut wakers);
        if global.state() != RUNNING || global.abandoned() {
            // Closed, or nothing can reach the timer any more (`live` counts every sleep).
            return;
        }
        if target == PARKED {
            notified.await;
        } else {
            sleep.as_mut().reset(global.clock.tick_start(target));
            tokio::select! {
                biased;
                _ = notified => {}
                _ = &mut sleep => {}
            }
        }
    }
}
