//! The timer's shared state and its shards: the only way into the wheels.
//!
//! # Ground rules
//! - A timer is one [`Global`]: a clock, a set of [`Shard`]s and the driver's wake state.
//!   Each shard is a spin lock (see `crate::loom::ShardLock`) around two sans-IO wheels, one
//!   of sleeps and one of callback tasks; a thread always registers in "its" shard
//!   (round-robin per thread), so two threads creating and dropping sleeps never share a lock
//!   or a reference count. Every field is private to this module: sleeps, tasks, stats and
//!   the driver go through the operations below, each of which does its own counting,
//!   `max_pending` accounting and driver notification, so none can be forgotten.
//! - Sleeps: [`ShardHandle::register`], [`ShardHandle::poll_registered`],
//!   [`ShardHandle::reschedule`], [`ShardHandle::deregister`]. Tasks: [`Global::insert_task`],
//!   [`Global::remove_task`]. The driver: [`Global::advance`], [`Global::close`].
//! - Only the driver moves time: [`Global::advance`] moves one shard to the current tick
//!   under its lock, collecting wakers and fired tasks in batches of [`BATCH`]; the driver
//!   wakes and dispatches them with no lock held (a waker may drop other sleeps of the same
//!   shard).
//! - `Shard::elapsed` mirrors the shard's sleep wheel's `elapsed` and is stored before the
//!   lock is released and before any waker is woken: a sleep whose tick is above it has
//!   certainly not fired, which lets a re-poll with an unchanged waker skip the lock.
//! - Wake protocol: `next_wake` is the tick the driver will wake at (`u64::MAX`: parked).
//!   Whoever schedules an entry at a tick below it lowers it with `fetch_min` after unlocking
//!   the shard and, if it lowered it, notifies the driver. The driver never raises it except
//!   by `swap(MAX)` when it wakes at or after it, before it scans the shards
//!   ([`Global::begin_turn`]); afterwards it only `fetch_min`s the scan's result in
//!   ([`Global::end_turn`]). So an entry is either seen by the scan or its scheduler sees a
//!   `next_wake` above its tick and notifies (the notify permit is kept).
//! - Liveness: every [`ShardHandle`] (held by `Timer` handles, sleeps and the threads'
//!   stashes, see `crate::stash`) counts in `live`, and every allocated callback task in
//!   `tasks`; the driver exits once both are zero, so a scheduled task keeps it alive after
//!   every handle is gone. Whoever brings
//!   either count to zero notifies it; both counts and the driver's check are `SeqCst`, so
//!   of two threads bringing them to zero at once, one sees the other's zero.
//! - Counters: per-shard plain counters are bumped under the lock their operation already
//!   holds; the driver's own figures are atomics in [`DriverStats`].
//! - Closing (shutdown, or the driver task dropped with its runtime) happens shard by shard
//!   under the lock: `closed` is set, every scheduled sleep's waker is taken and woken (the
//!   entry stays scheduled, so a sleep the driver had already fired still reads as fired),
//!   every task is freed and the pending ones are cancelled, and the `elapsed` mirror is set
//!   to `u64::MAX` so no poll takes the lock-free path again.
//! - Wakers and jobs are user code: they are cloned before a lock is taken and dropped or
//!   woken after it is released, never under it.

#[cfg(test)]
mod testing;

use std::task::Waker;

use crate::clock::Clock;
use crate::error::Error;
use crate::loom::{
    lock_shard, runtime, Arc, AtomicU64, AtomicU8, AtomicUsize, Notify, Ordering, ShardGuard,
    ShardLock,
};
use crate::task::{Executor, Fired, Job, TaskShared};
use crate::wheel::{Key, Wheel};

/// Wakers (and fired tasks) collected under one lock hold before they are woken (tokio uses
/// 32 too).
pub(crate) const BATCH: usize = 32;

/// `next_wake` when the driver is not waiting for a deadline.
pub(crate) const PARKED: u64 = u64::MAX;

const RUNNING: u8 = 0;
const STOPPED: u8 = 1;
const DRIVER_GONE: u8 = 2;

/// Why a timer closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closing {
    /// `Timer::shutdown`.
    Stopped,
    /// The driver task ended with its runtime (dropped by the runtime's shutdown).
    DriverGone,
}

/// One timer's shared state.
#[derive(Debug)]
pub(crate) struct Global {
    /// Read by the idle tracker too (its ticks count from the same start).
    pub(crate) clock: Clock,
    shards: Box<[Shard]>,
    next_wake: AtomicU64,
    notify: Notify,
    live: AtomicUsize,
    /// Allocated task entries over every shard (see the ground rules on liveness).
    tasks: AtomicUsize,
    state: AtomicU8,
    /// Set once the last `Timer` handle is gone: threads stop keeping this timer's handles
    /// (see `crate::stash`), so that they do not keep its driver alive.
    orphaned: AtomicU8,
    /// `Builder::max_pending`; `None` keeps the sleep path free of a shared counter.
    limit: Option<Limit>,
    /// Where fired callbacks run.
    executor: Executor,
    /// The runtime the driver task runs on (`None`: built outside a runtime, unspawned).
    runtime: Option<runtime::Id>,
    stats: DriverStats,
}

/// Optional configuration of a [`Global`].
#[derive(Debug, Default)]
pub(crate) struct Options {
    pub(crate) max_pending: Option<usize>,
    pub(crate) executor: Executor,
    /// The runtime the driver task is spawned on.
    pub(crate) runtime: Option<runtime::Id>,
}

/// The `max_pending` admission counter: allocated entries of both wheels (a sleep from its
/// registration until it completes or is dropped, a task until it fires or is cancelled).
#[derive(Debug)]
struct Limit {
    max: usize,
    count: AtomicUsize,
}

/// Counters kept off the shards: the driver's own, plus callback panics (rare, and counted
/// by the task that ran the callback).
#[derive(Debug, Default)]
struct DriverStats {
    wakeups: AtomicU64,
    /// Largest `now - tick` of a fired entry, in ticks.
    max_lateness: AtomicU64,
    panicked: AtomicU64,
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

/// A snapshot of every counter, summed over the shards (see `Stats`).
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    pub(crate) pending: usize,
    pub(crate) counters: ShardCounters,
    pub(crate) panicked: u64,
    pub(crate) wakeups: u64,
    pub(crate) max_lateness: u64,
}

/// What one driver turn did, for its trace event and the lateness figure.
#[derive(Debug, Default)]
pub(crate) struct TurnCounts {
    pub(crate) sleeps: usize,
    pub(crate) tasks: usize,
    pub(crate) lateness: u64,
}

/// A lock-protected slice of the timer.
#[derive(Debug)]
#[repr(align(128))]
struct Shard {
    core: ShardLock<ShardCore>,
    /// Mirror of `core.sleeps.elapsed()` (see the module's ground rules).
    elapsed: AtomicU64,
}

/// What a shard's lock protects.
#[derive(Debug)]
struct ShardCore {
    /// Sleep entries: the waker to wake; [`Waker::noop`] stands for none (taken by the fire,
    /// or not stored yet by a `try_sleep`), which keeps an entry at 40 bytes where an
    /// `Option` would not fit the arena's own `Option`.
    sleeps: Wheel<Waker>,
    tasks: Wheel<Arc<TaskShared>>,
    /// Set once by `Global::close`; nothing is scheduled afterwards.
    closed: bool,
    counters: ShardCounters,
}

/// A counted reference to one shard of one timer; sleeps and `Timer` handles hold these.
///
/// Aligned to two cache lines so the reference counts of different shards' handles, which
/// threads bump when a sleep cannot take its handle from their stash (`crate::stash`),
/// never share a line.
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct ShardHandle {
    global: Arc<Global>,
    index: usize,
}

/// How a sleep's registration went.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Registered {
    /// Scheduled under this key.
    Scheduled(Key),
    /// Its tick has already been processed: the sleep is due now.
    Due,
    /// The timer is closed.
    Closed,
}

/// What a registered sleep's poll found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Polled {
    /// Still scheduled; the waker is stored.
    Pending,
    /// The driver fired it; its entry is freed.
    Fired,
    /// The timer closed before it fired.
    Closed,
}

// ===== impl Global =====

impl Global {
    pub(crate) fn new(clock: Clock, shards: usize, slots: usize, options: Options) -> Self {
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
            orphaned: AtomicU8::new(0),
            limit: options.max_pending.map(|max| Limit {
                max,
                count: AtomicUsize::new(0),
            }),
            executor: options.executor,
            runtime: options.runtime,
            stats: DriverStats::default(),
        }
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

    pub(crate) fn executor(&self) -> &Executor {
        &self.executor
    }

    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Whether the timer still takes work (not shut down, driver alive).
    #[inline]
    pub(crate) fn is_running(&self) -> bool {
        self.state.load(Ordering::Acquire) == RUNNING
    }

    /// Marks the timer as having no `Timer` handle left (see `orphaned`).
    pub(crate) fn orphan(&self) {
        self.orphaned.store(1, Ordering::Release);
    }

    /// Why the timer closed; `None` while it runs.
    pub(crate) fn closing(&self) -> Option<Closing> {
        match self.state.load(Ordering::Acquire) {
            RUNNING => None,
            STOPPED => Some(Closing::Stopped),
            _ => Some(Closing::DriverGone),
        }
    }

    /// Whether the caller is a task of a runtime that is shutting down and took this timer's
    /// driver with it: the driver task was dropped by its runtime (`Closing::DriverGone`,
    /// which only a runtime's shutdown does) and the caller is a task of that same runtime,
    /// which the shutdown drops next. A future of the timer polled then stays pending, as
    /// tokio's own timers do in a shutdown (their driver outlives every task, so they never
    /// report it gone to one); polled anywhere else it reports the closure.
    pub(crate) fn caller_runtime_shutting_down(&self) -> bool {
        self.closing() == Some(Closing::DriverGone)
            && self.runtime.is_some()
            && runtime::task() == self.runtime
    }

    /// The runtime the driver task runs on.
    pub(crate) fn runtime(&self) -> Option<runtime::Id> {
        self.runtime
    }

    /// Whether the driver should exit: no handle can schedule and no task is left to fire.
    pub(crate) fn is_abandoned(&self) -> bool {
        self.live.load(Ordering::SeqCst) == 0 && self.tasks.load(Ordering::SeqCst) == 0
    }

    /// The driver's wake-up signal.
    pub(crate) fn notify(&self) -> &Notify {
        &self.notify
    }

    /// Registered sleeps not yet fired plus scheduled tasks, summed over the shards (each
    /// shard's count is exact at the moment its lock is held).
    pub(crate) fn pending(&self) -> usize {
        self.shards.iter().map(|s| s.lock().pending()).sum()
    }

    /// Every counter, each shard read under its lock.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let mut snapshot = Snapshot::default();
        for shard in self.shards.iter() {
            let core = shard.lock();
            snapshot.pending += core.pending();
            snapshot.counters.scheduled += core.counters.scheduled;
            snapshot.counters.fired += core.counters.fired;
            snapshot.counters.cancelled += core.counters.cancelled;
        }
        snapshot.panicked = self.stats.panicked.load(Ordering::Relaxed);
        snapshot.wakeups = self.stats.wakeups.load(Ordering::Relaxed);
        snapshot.max_lateness = self.stats.max_lateness.load(Ordering::Relaxed);
        snapshot
    }

    /// Counts a wakeup of the driver task.
    pub(crate) fn count_wakeup(&self) {
        self.stats.wakeups.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a caught callback panic.
    pub(crate) fn count_panic(&self) {
        self.stats.panicked.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes one unit of `max_pending` capacity for an entry about to be allocated.
    ///
    /// # Errors
    ///
    /// [`Error::is_at_capacity`] when the limit is reached.
    pub(crate) fn admit(&self) -> Result<(), Error> {
        if let Some(limit) = &self.limit {
            if limit.count.fetch_add(1, Ordering::AcqRel) >= limit.max {
                limit.count.fetch_sub(1, Ordering::AcqRel);
                return Err(Error::at_capacity());
            }
        }
        Ok(())
    }

    /// Counts an entry allocated without admission (a sleep from an infallible constructor).
    #[inline]
    fn allocated(&self) {
        if let Some(limit) = &self.limit {
            limit.count.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Gives back the capacity of `n` freed entries.
    #[inline]
    fn freed(&self, n: usize) {
        if let Some(limit) = &self.limit {
            if n > 0 {
                limit.count.fetch_sub(n, Ordering::AcqRel);
            }
        }
    }

    /// Counts `n` freed task entries (with their capacity) and wakes the driver if they were
    /// the last thing keeping it alive.
    fn tasks_freed(&self, n: usize) {
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
    #[inline]
    fn scheduled_at(&self, tick: u64) {
        if tick < self.next_wake.load(Ordering::Acquire)
            && self.next_wake.fetch_min(tick, Ordering::AcqRel) > tick
        {
            self.notify.notify_one();
        }
    }

    // ----- tasks -----

    /// Schedules `task` at `tick` in shard `shard`, taking its `max_pending` capacity, and
    /// makes sure the driver wakes by then.
    ///
    /// # Errors
    ///
    /// [`Error::is_shutdown`] once the timer is closed; [`Error::is_at_capacity`] at
    /// `max_pending`. The task's job is then dropped here, with no lock held.
    pub(crate) fn insert_task(
        &self,
        shard: usize,
        tick: u64,
        task: Arc<TaskShared>,
    ) -> Result<Key, Error> {
        if !self.is_running() {
            return Err(Error::shutdown());
        }
        self.admit()?;
        self.tasks.fetch_add(1, Ordering::SeqCst);
        let mut core = self.shards[shard].lock();
        if core.closed {
            drop(core);
            self.tasks_freed(1);
            drop(task);
            return Err(Error::shutdown());
        }
        let key = core.tasks.insert(tick, task);
        core.counters.scheduled += 1;
        drop(core);
        self.scheduled_at(tick);
        Ok(key)
    }

    /// Frees `task`'s entry if it still holds `task` (keys are reused once freed), giving
    /// back its capacity; `false` if someone else freed it. `cancelled` counts a cancel.
    pub(crate) fn remove_task(
        &self,
        shard: usize,
        key: Key,
        task: &Arc<TaskShared>,
        cancelled: bool,
    ) -> bool {
        let removed = {
            let mut core = self.shards[shard].lock();
            if cancelled {
                core.counters.cancelled += 1;
            }
            match core.tasks.get(key) {
                Some(held) if Arc::ptr_eq(held, task) => core.tasks.try_remove(key),
                _ => None,
            }
        };
        let found = removed.is_some();
        if found {
            self.tasks_freed(1);
        }
        found
    }

    // ----- the driver -----

    /// Starts a driver turn at tick `now` and counts the wakeup: if the driver reached the
    /// tick it planned to wake at, `next_wake` starts over from "parked" so that entries
    /// scheduled from here on notify (see the ground rules).
    pub(crate) fn begin_turn(&self, now: u64) {
        if now >= self.next_wake.load(Ordering::Acquire) {
            self.next_wake.swap(PARKED, Ordering::AcqRel);
        }
    }

    /// Ends a turn whose scan found `next` (the earliest occupied tick, `PARKED` for none)
    /// and returns the tick to wait for: `next`, or earlier if an entry was scheduled
    /// meanwhile.
    pub(crate) fn end_turn(&self, next: u64, counts: &TurnCounts) -> u64 {
        if counts.sleeps + counts.tasks > 0 {
            self.stats
                .max_lateness
                .fetch_max(counts.lateness, Ordering::Relaxed);
        }
        self.next_wake.fetch_min(next, Ordering::AcqRel);
        self.next_wake.load(Ordering::Acquire)
    }

    /// Moves shard `index` to tick `now` under its lock: takes the wakers of the sleeps due
    /// into `wakers` and the tasks due into `fired` (freeing one-shot entries and re-arming
    /// repeating ones in place) until either holds [`BATCH`]. Returns `None` if the batch
    /// filled (call again after waking and dispatching it, with no lock held), else the
    /// shard's next expiration (`PARKED` for none).
    pub(crate) fn advance(
        &self,
        index: usize,
        now: u64,
        wakers: &mut Vec<Waker>,
        fired: &mut Vec<Fired>,
        counts: &mut TurnCounts,
    ) -> Option<u64> {
        let shard = &self.shards[index];
        let mut core = shard.lock();
        if core.closed {
            return Some(PARKED);
        }
        let mut full = false;
        let mut freed = 0;
        while let Some(key) = core.sleeps.poll(now) {
            counts.sleeps += 1;
            core.counters.fired += 1;
            if let Some(tick) = core.sleeps.tick(key) {
                counts.lateness = counts.lateness.max(now.saturating_sub(tick));
            }
            if let Some(waker) = core.sleeps.get_mut(key).and_then(take_waker) {
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
            let Some(task) = core.tasks.get(key).cloned() else {
                break;
            };
            if !task.is_repeating() {
                core.tasks.try_remove(key);
                freed += 1;
                if !task.fire_once() {
                    // Cancelled: the canceller counted it and finds the entry gone. This
                    // may drop the last `Arc` under the lock, which runs no user code: the
                    // canceller took the job and drops it unlocked.
                    continue;
                }
            } else {
                if !task.is_pending() {
                    // A series cancelled or ended by a panic: its owner finds it gone.
                    core.tasks.try_remove(key);
                    freed += 1;
                    continue;
                }
                let next = task.next_deadline(now, &self.clock);
                core.tasks
                    .reschedule(key, self.clock.tick_at_or_after(next));
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
            let sleeps = core.sleeps.next_expiration().unwrap_or(PARKED);
            let tasks = core.tasks.next_expiration().unwrap_or(PARKED);
            Some(sleeps.min(tasks))
        };
        drop(core);
        self.tasks_freed(freed);
        next
    }

    /// Closes every shard (see the ground rules): wakes every scheduled sleep so that its
    /// next poll reports the closure, and frees every task, cancelling the pending ones,
    /// which are handed out in `cancelled` (their jobs already dropped). Returns `false` if
    /// already closed.
    pub(crate) fn close(
        &self,
        reason: Closing,
        cancelled: &mut Vec<(Arc<TaskShared>, Key, usize)>,
    ) -> bool {
        let state = match reason {
            Closing::Stopped => STOPPED,
            Closing::DriverGone => DRIVER_GONE,
        };
        if self
            .state
            .compare_exchange(RUNNING, state, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        let mut wakers = Vec::new();
        let mut jobs: Vec<Job> = Vec::new();
        let mut others = Vec::new();
        let mut freed = 0;
        for (index, shard) in self.shards.iter().enumerate() {
            let mut core = shard.lock();
            core.closed = true;
            for key in core.sleeps.keys() {
                if core.sleeps.is_scheduled(key) {
                    if let Some(waker) = core.sleeps.get_mut(key).and_then(take_waker) {
                        wakers.push(waker);
                    }
                }
            }
            for key in core.tasks.keys() {
                let Some(task) = core.tasks.try_remove(key) else {
                    continue;
                };
                freed += 1;
                match task.cancel() {
                    Some(job) => {
                        core.counters.cancelled += 1;
                        jobs.extend(job);
                        cancelled.push((task, key, index));
                    }
                    // Ended by someone who has not taken the lock yet: they find the entry
                    // gone and leave it.
                    None => others.push(task),
                }
            }
            shard.elapsed.store(u64::MAX, Ordering::Release);
            drop(core);
            wakers.drain(..).for_each(Waker::wake);
            // User code (the jobs' captures) is dropped with no lock held.
            jobs.clear();
            others.clear();
        }
        self.tasks_freed(freed);
        self.notify.notify_one();
        true
    }
}

// ===== impl ShardCore =====

impl ShardCore {
    /// Scheduled sleeps and tasks; none once closed (the sleeps still scheduled then can
    /// never fire).
    fn pending(&self) -> usize {
        if self.closed {
            0
        } else {
            self.sleeps.len() + self.tasks.len()
        }
    }
}

// ===== impl Shard =====

impl Shard {
    #[inline]
    fn lock(&self) -> ShardGuard<'_, ShardCore> {
        lock_shard(&self.core)
    }
}

// ===== impl ShardHandle =====

impl ShardHandle {
    #[inline]
    pub(crate) fn global(&self) -> &Arc<Global> {
        &self.global
    }

    #[inline]
    fn shard(&self) -> &Shard {
        &self.global.shards[self.index]
    }

    /// Whether a sleep at `tick` registered here may still be pending without taking the
    /// lock: its tick is above what the shard has processed (see the ground rules).
    #[inline]
    pub(crate) fn surely_pending(&self, tick: u64) -> bool {
        self.shard().elapsed.load(Ordering::Acquire) < tick
    }

    /// Registers a sleep at `tick` with `waker` (cloned by the caller before the call).
    /// `admitted`: its `max_pending` capacity was taken by the caller ([`Global::admit`]) and
    /// is given back here unless the sleep ends up scheduled; otherwise it is counted now.
    #[inline(always)]
    pub(crate) fn register(&self, tick: u64, waker: Option<Waker>, admitted: bool) -> Registered {
        let global = &self.global;
        let mut core = self.shard().lock();
        let outcome = if core.closed {
            Registered::Closed
        } else if tick <= core.sleeps.elapsed() {
            Registered::Due
        } else {
            let key = core
                .sleeps
                .insert(tick, waker.unwrap_or_else(|| Waker::noop().clone()));
            core.counters.scheduled += 1;
            drop(core);
            if !admitted {
                global.allocated();
            }
            global.scheduled_at(tick);
            return Registered::Scheduled(key);
        };
        drop(core);
        if admitted {
            global.freed(1);
        }
        // `waker`, if unused, is dropped here with no lock held.
        outcome
    }

    /// Whether a dropped sleep's handle may be kept for the thread's next sleep (see
    /// `crate::stash`): the timer runs and some `Timer` handle is alive.
    #[inline]
    #[cfg_attr(all(test, wheel_loom), allow(dead_code))] // the loom builds keep nothing
    pub(crate) fn keeps(&self) -> bool {
        self.global.state.load(Ordering::Acquire) == RUNNING
            && self.global.orphaned.load(Ordering::Acquire) == 0
    }

    /// Polls the sleep registered under `key`: frees it if the driver fired it, else stores
    /// `waker` unless the stored one would wake the same task. `waker` is cloned by the
    /// caller before the call and dropped, if not stored, after the lock is released.
    #[inline]
    pub(crate) fn poll_registered(&self, key: Key, waker: Waker) -> Polled {
        let mut core = self.shard().lock();
        if !core.sleeps.is_scheduled(key) {
            // Fired (before or after a close): its entry is freed here.
            let removed = core.sleeps.try_remove(key);
            drop(core);
            drop(removed);
            self.global.freed(1);
            return Polled::Fired;
        }
        if core.closed {
            return Polled::Closed;
        }
        let replaced = match core.sleeps.get_mut(key) {
            Some(stored) if !stored.will_wake(&waker) => std::mem::replace(stored, waker),
            _ => waker,
        };
        drop(core);
        drop(replaced);
        Polled::Pending
    }

    /// Whether the sleep registered under `key` has been fired by the driver.
    pub(crate) fn is_fired(&self, key: Key) -> bool {
        !self.shard().lock().sleeps.is_scheduled(key)
    }

    /// Moves the sleep registered under `key` to `tick`, scheduling it again if it had
    /// fired (its waker was taken then: the next poll must store one). Returns whether it had
    /// fired, or `None` if the timer is closed (the sleep must then be deregistered).
    #[inline]
    pub(crate) fn reschedule(&self, key: Key, tick: u64) -> Option<bool> {
        let mut core = self.shard().lock();
        if core.closed {
            return None;
        }
        let fired = !core.sleeps.is_scheduled(key);
        core.sleeps.reschedule(key, tick);
        if fired {
            core.counters.scheduled += 1;
        }
        drop(core);
        self.global.scheduled_at(tick);
        Some(fired)
    }

    /// Frees the sleep registered under `key` and its capacity; its waker is dropped after
    /// the lock is released.
    #[inline(always)]
    pub(crate) fn deregister(&self, key: Key) {
        let removed = self.shard().lock().sleeps.try_remove(key);
        self.global.freed(1);
        drop(removed);
    }
}

/// Takes a stored waker, leaving the "none" stand-in; `None` if none was stored.
fn take_waker(slot: &mut Waker) -> Option<Waker> {
    if slot.will_wake(Waker::noop()) {
        None
    } else {
        Some(std::mem::replace(slot, Waker::noop().clone()))
    }
}

impl Drop for ShardHandle {
    fn drop(&mut self) {
        if self.global.live.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.global.notify.notify_one();
        }
    }
}
