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
//!   `live`, and every allocated callback task in `tasks`; the driver exits once both are
//!   zero, so a scheduled task keeps it alive after every handle is gone. Whoever brings
//!   either count to zero notifies it; both counts and the driver's check are `SeqCst`, so
//!   of two threads bringing them to zero at once, one sees the other's zero.
//! - Tasks (see `callback.rs`) live in each shard's second wheel. The driver pops them under
//!   the same lock as the sleeps, frees (one-shot) or re-arms (repeating) them there, and
//!   hands the fired ones to the executor in batches of [`BATCH`] after unlocking.
//! - Counters: per-shard plain counters in [`ShardCore`] are bumped under the lock their
//!   operation already holds; the driver's own figures are atomics in [`DriverStats`].
//! - Closing (shutdown, or the driver task dropped with its runtime) happens shard by shard
//!   under the lock: `closed` is set, every scheduled waker is taken and woken, every task is
//!   freed and the pending ones are cancelled, and the shard's `elapsed` mirror is set to
//!   `u64::MAX` so no poll takes the lock-free path again.

use std::task::Waker;

use crate::loom::Notify;

use crate::callback::{Executor, Fired, TaskShared, CANCELLED, FIRED, PENDING};
use crate::clock::Clock;
use crate::loom::{
    lock_shard, Arc, AtomicU64, AtomicU8, AtomicUsize, Ordering, ShardGuard, ShardLock,
};
use crate::wheel::{Key, Wheel};

/// Wakers collected under one lock hold before they are woken (tokio uses 32 too).
pub(crate) const BATCH: usize = 32;

/// Not parked on a deadline.
const PARKED: u64 = u64::MAX;

pub(crate) const RUNNING: u8 = 0;
pub(crate) const STOPPED: u8 = 1;
pub(crate) const DRIVER_GONE: u8 = 2;

/// One timer's shared state.
#[derive(Debug)]
pub(crate) struct Global {
    pub(crate) clock: Clock,
    pub(crate) shards: Box<[Shard]>,
    next_wake: AtomicU64,
    notify: Notify,
    live: AtomicUsize,
    /// Allocated task entries over every shard (see the ground rules on liveness).
    tasks: AtomicUsize,
    state: AtomicU8,
    /// `Builder::max_pending`; `None` keeps the sleep path free of a shared counter.
    pub(crate) limit: Option<Limit>,
    /// Where fired callbacks run.
    pub(crate) executor: Executor,
    pub(crate) stats: DriverStats,
}

/// Optional configuration of a [`Global`].
#[derive(Debug, Default)]
pub(crate) struct Options {
    pub(crate) max_pending: Option<usize>,
    pub(crate) executor: Executor,
}

/// The `max_pending` admission counter: allocated entries of both wheels (a sleep from its
/// registration until it completes or is dropped, a task until it fires or is cancelled).
#[derive(Debug)]
pub(crate) struct Limit {
    max: usize,
    count: AtomicUsize,
}

/// Counters kept off the shards: the driver's own, plus callback panics (rare, and counted
/// by the task that ran the callback).
#[derive(Debug, Default)]
pub(crate) struct DriverStats {
    pub(crate) wakeups: AtomicU64,
    /// Largest `now - tick` of a fired entry, in ticks.
    pub(crate) max_lateness: AtomicU64,
    pub(crate) panicked: AtomicU64,
}

/// Per-shard counters, bumped under the shard lock.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ShardCounters {
    /// Entries scheduled: sleep registrations (and re-arms after firing), task schedules and
    /// every re-arm of a repeating task.
    pub(crate) scheduled: u64,
    /// Entries the driver fired: sleeps woken, callbacks handed to the executor.
    pub(crate) fired: u64,
    /// Tasks cancelled, by `TimerTask::cancel` or by the timer closing.
    pub(crate) cancelled: u64,
}

/// What one driver turn did, for its trace event and the lateness figure.
#[derive(Debug, Default)]
struct TurnCounts {
    sleeps: usize,
    tasks: usize,
    lateness: u64,
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
    /// Callback tasks (every entry is `Some`: the `Option` is only for the wheel's `Default`).
    pub(crate) tasks: Wheel<Option<Arc<TaskShared>>>,
    /// Set once by `Global::close`; nothing is scheduled afterwards.
    pub(crate) closed: bool,
    pub(crate) counters: ShardCounters,
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
                        tasks: Wheel::new(slots),
                        closed: false,
                        counters: ShardCounters::default(),
                    }),
                    elapsed: AtomicU64::new(0),
                })
                .collect(),
            next_wake: AtomicU64::new(PARKED),
            notify: Notify::new(),
            live: AtomicUsize::new(0),
            tasks: AtomicUsize::new(0),
            state: AtomicU8::new(RUNNING),
            limit: None,
            executor: Executor::default(),
            stats: DriverStats::default(),
        }
    }

    /// Applies the builder's optional configuration.
    pub(crate) fn configure(mut self, options: Options) -> Self {
        self.limit = options.max_pending.map(|max| Limit {
            max,
            count: AtomicUsize::new(0),
        });
        self.executor = options.executor;
        self
    }

    /// A counted handle to shard `index`. (An associated function: loom's `Arc` cannot be a
    /// method receiver.)
    pub(crate) fn handle(global: &Arc<Self>, index: usize) -> ShardHandle {
        global.live.fetch_add(1, Ordering::SeqCst);
        ShardHandle {
            global: global.clone(),
            index,
        }
    }

    pub(crate) fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    /// Registered sleeps not yet fired plus scheduled tasks, summed over the shards (each
    /// shard's count is exact at the moment its lock is held).
    pub(crate) fn pending(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let core = s.lock();
                core.sleeps.len() + core.tasks.len()
            })
            .sum()
    }

    /// Takes one unit of `max_pending` capacity for an entry about to be allocated.
    ///
    /// # Errors
    ///
    /// [`Error::is_at_capacity`](crate::Error::is_at_capacity) when the limit is reached.
    pub(crate) fn admit(&self) -> Result<(), crate::Error> {
        if let Some(limit) = &self.limit {
            if limit.count.fetch_add(1, Ordering::AcqRel) >= limit.max {
                limit.count.fetch_sub(1, Ordering::AcqRel);
                return Err(crate::Error::at_capacity());
            }
        }
        Ok(())
    }

    /// Counts an entry allocated without admission (a sleep from an infallible constructor).
    pub(crate) fn allocated(&self) {
        if let Some(limit) = &self.limit {
            limit.count.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Gives back the capacity of `n` freed entries.
    pub(crate) fn freed(&self, n: usize) {
        if let Some(limit) = &self.limit {
            if n > 0 {
                limit.count.fetch_sub(n, Ordering::AcqRel);
            }
        }
    }

    /// Allocated task entries and the `max_pending` count; for tests and models.
    #[cfg(test)]
    pub(crate) fn task_counts(&self) -> (usize, Option<usize>) {
        (
            self.tasks.load(Ordering::SeqCst),
            self.limit.as_ref().map(|l| l.count.load(Ordering::SeqCst)),
        )
    }

    /// Counts a task entry about to be allocated (it keeps the driver alive).
    pub(crate) fn task_allocated(&self) {
        self.tasks.fetch_add(1, Ordering::SeqCst);
    }

    /// Counts `n` freed task entries (with their capacity) and wakes the driver if they were
    /// the last thing keeping it alive.
    pub(crate) fn tasks_freed(&self, n: usize) {
        if n == 0 {
            return;
        }
        self.freed(n);
        if self.tasks.fetch_sub(n, Ordering::SeqCst) == n && self.live.load(Ordering::SeqCst) == 0 {
            self.notify.notify_one();
        }
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
    #[cfg(test)]
    pub(crate) fn next_wake(&self) -> u64 {
        self.next_wake.load(Ordering::Acquire)
    }

    /// One driver turn at tick `now`: fire everything due, then return the tick to sleep
    /// until (`u64::MAX`: park until notified). `wakers` is scratch space, empty on return.
    ///
    /// Takes the `Arc` (fired callbacks hold the timer until they ran) as a plain argument:
    /// loom's `Arc` cannot be a method receiver.
    pub(crate) fn turn(this: &Arc<Self>, now: u64, wakers: &mut Vec<Waker>) -> u64 {
        if now >= this.next_wake.load(Ordering::Acquire) {
            // Woken for the planned deadline: start over from "parked" so entries scheduled
            // from here on notify (see the ground rules).
            this.next_wake.swap(PARKED, Ordering::AcqRel);
        }
        let mut next = PARKED;
        let mut fired = Vec::new();
        let mut counts = TurnCounts::default();
        for index in 0..this.shards.len() {
            if let Some(exp) = Global::advance(this, index, now, wakers, &mut fired, &mut counts) {
                next = next.min(exp);
            }
        }
        if counts.sleeps + counts.tasks > 0 {
            this.stats
                .max_lateness
                .fetch_max(counts.lateness, Ordering::Relaxed);
            tracing::debug!(
                tick = now,
                sleeps = counts.sleeps,
                tasks = counts.tasks,
                max_lateness_ticks = counts.lateness,
                "wheel-timer: driver turn fired timers"
            );
        }
        this.next_wake.fetch_min(next, Ordering::AcqRel);
        this.next_wake.load(Ordering::Acquire)
    }

    /// Closes every shard with `reason` (`STOPPED` or `DRIVER_GONE`): wakes every scheduled
    /// sleep so its next poll reports the closure, and frees every task, cancelling the
    /// pending ones. Returns `false` if already closed.
    pub(crate) fn close(&self, reason: u8) -> bool {
        self.close_taking(reason, &mut Vec::new())
    }

    /// [`Global::close`], handing out the tasks it cancelled (their jobs already dropped).
    pub(crate) fn close_taking(
        &self,
        reason: u8,
        cancelled: &mut Vec<(Arc<TaskShared>, Key, usize)>,
    ) -> bool {
        if self
            .state
            .compare_exchange(RUNNING, reason, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        let mut wakers = Vec::new();
        let mut others = Vec::new();
        let mut freed = 0;
        for (index, shard) in self.shards.iter().enumerate() {
            let first = cancelled.len();
            let mut core = shard.lock();
            core.closed = true;
            for key in core.sleeps.keys() {
                core.sleeps.unschedule(key);
                if let Some(waker) = core.sleeps.get_mut(key).and_then(Option::take) {
                    wakers.push(waker);
                }
            }
            for key in core.tasks.keys() {
                let Some(Some(task)) = core.tasks.try_remove(key) else {
                    continue;
                };
                freed += 1;
                if task
                    .state
                    .compare_exchange(PENDING, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    core.counters.cancelled += 1;
                    cancelled.push((task, key, index));
                } else {
                    // Cancelled or ended by someone who has not taken the lock yet: they
                    // find the entry gone and leave it.
                    others.push(task);
                }
            }
            shard.elapsed.store(u64::MAX, Ordering::Release);
            drop(core);
            wakers.drain(..).for_each(Waker::wake);
            // User code (the jobs' captures) is dropped with no lock held.
            for (task, _, _) in &cancelled[first..] {
                drop(task.take_job());
            }
            others.clear();
        }
        self.tasks_freed(freed);
        self.notify.notify_one();
        true
    }

    /// Whether the driver should exit: no handle can schedule and no task is left to fire.
    fn abandoned(&self) -> bool {
        self.live.load(Ordering::SeqCst) == 0 && self.tasks.load(Ordering::SeqCst) == 0
    }

    /// Fires what is due at `now` in shard `index`, waking sleeps and dispatching tasks in
    /// batches with the lock released; returns the shard's next expiration.
    fn advance(
        this: &Arc<Self>,
        index: usize,
        now: u64,
        wakers: &mut Vec<Waker>,
        fired: &mut Vec<Fired>,
        counts: &mut TurnCounts,
    ) -> Option<u64> {
        let shard = &this.shards[index];
        loop {
            let mut core = shard.lock();
            if core.closed {
                return None;
            }
            let mut full = false;
            let mut freed = 0;
            while let Some(key) = core.sleeps.poll(now) {
                counts.sleeps += 1;
                core.counters.fired += 1;
                if let Some(tick) = core.sleeps.tick(key) {
                    counts.lateness = counts.lateness.max(now.saturating_sub(tick));
                }
                if let Some(waker) = core.sleeps.get_mut(key).and_then(Option::take) {
                    wakers.push(waker);
                    if wakers.len() == BATCH {
                        full = true;
                        break;
                    }
                }
            }
            while !full {
                let Some(key) = core.tasks.poll(now) else {
                    break;
                };
                if let Some(tick) = core.tasks.tick(key) {
                    counts.lateness = counts.lateness.max(now.saturating_sub(tick));
                }
                let Some(Some(task)) = core.tasks.get(key).cloned() else {
                    // `schedule` never leaves an empty entry; free one rather than loop on it.
                    core.tasks.try_remove(key);
                    freed += 1;
                    continue;
                };
                if task.period == 0 {
                    core.tasks.try_remove(key);
                    freed += 1;
                    if task
                        .state
                        .compare_exchange(PENDING, FIRED, Ordering::AcqRel, Ordering::Acquire)
                        .is_err()
                    {
                        // Cancelled: the canceller counted it and finds the entry gone. This
                        // may drop the last `Arc` under the lock, which runs no user code: a
                        // task leaves PENDING only through someone who takes its job (the
                        // canceller, `end_series`, the runner) and drops it unlocked.
                        continue;
                    }
                } else {
                    if task.state.load(Ordering::Acquire) != PENDING {
                        // A series cancelled or ended by a panic: its owner finds it gone.
                        core.tasks.try_remove(key);
                        freed += 1;
                        continue;
                    }
                    let next = task.next_deadline(now, &this.clock);
                    core.tasks
                        .reschedule(key, this.clock.tick_at_or_after(next));
                    core.counters.scheduled += 1;
                }
                core.counters.fired += 1;
                counts.tasks += 1;
                fired.push(Fired {
                    task,
                    key,
                    shard: index,
                });
                if fired.len() == BATCH {
                    full = true;
                }
            }
            shard
                .elapsed
                .store(core.sleeps.elapsed(), Ordering::Release);
            let next = if full {
                None
            } else {
                match (core.sleeps.next_expiration(), core.tasks.next_expiration()) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            };
            drop(core);
            wakers.drain(..).for_each(Waker::wake);
            this.tasks_freed(freed);
            for fired in fired.drain(..) {
                Global::dispatch(this, fired);
            }
            if !full {
                return next;
            }
        }
    }
}

// ===== impl Shard =====

impl Shard {
    pub(crate) fn lock(&self) -> ShardGuard<'_, ShardCore> {
        lock_shard(&self.core)
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
        if self.global.live.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.global.notify.notify_one();
        }
    }
}

// ===== loom hooks =====

/// What the loom models (`src/loom_tests/`) need to play the driver task.
#[cfg(all(test, wheel_loom))]
impl Global {
    pub(crate) fn notify(&self) -> &Notify {
        &self.notify
    }

    /// The driver task's exit condition.
    pub(crate) fn is_abandoned(&self) -> bool {
        self.abandoned()
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
async fn run(global: &Arc<Global>) {
    let mut wakers = Vec::with_capacity(BATCH);
    let sleep = tokio::time::sleep_until(global.clock.start);
    tokio::pin!(sleep);
    let calibration = global.clock.calibration();
    let mut calibrating = calibration.is_some();
    let calibration = async move {
        if let Some(sleep) = calibration {
            sleep.await;
        }
    };
    tokio::pin!(calibration);
    loop {
        let notified = global.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        global.stats.wakeups.fetch_add(1, Ordering::Relaxed);
        let now = global.clock.now_tick();
        let target = Global::turn(global, now, &mut wakers);
        if global.state() != RUNNING || global.abandoned() {
            // Closed, or nothing can reach the timer any more: `live` counts every handle
            // and sleep, `tasks` every task.
            return;
        }
        if target != PARKED {
            sleep.as_mut().reset(global.clock.tick_start(target));
        }
        tokio::select! {
            biased;
            _ = notified => {}
            _ = &mut calibration, if calibrating => {
                calibrating = false;
                // Safe only while no shard's time has moved off tick 0 (see `Clock`).
                let moved = global
                    .shards
                    .iter()
                    .any(|s| s.elapsed.load(Ordering::Acquire) != 0);
                global.clock.calibrate(moved);
            }
            _ = &mut sleep, if target != PARKED => {}
        }
    }
}
