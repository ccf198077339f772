//! Synchronization facade: loom's types in the unit tests built with `--cfg wheel_loom`,
//! std's otherwise (loom is a dev-dependency, so other targets built with that cfg, such as
//! the integration tests, use std's).
//!
//! Every `Arc`, atomic, `Mutex` and thread in the crate comes from here so that the loom
//! models (`src/loom_tests/`, see docs/ARCHITECTURE.md) see every shared access. The only
//! exceptions are [`global`], for process-wide statics (the default-timer registry and the
//! instance counter), which need `const` constructors that loom lacks and which no loom model
//! goes through, and, in loom builds of the tests only, `StdArc` for wakers and the model's
//! stand-ins for what is not memory: `ModelClock` for the clock and `runtime` for the tokio
//! runtime a poll comes from (see below).
//!
//! The crate-specific cfg (not `--cfg loom`) keeps tokio built as usual: a global `--cfg loom`
//! would rebuild tokio in its own loom mode, without `net`/`fs` (tokio#2463).

#[cfg(all(test, wheel_loom))]
pub(crate) use loom::sync::{
    atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering},
    Arc, Mutex, MutexGuard,
};

#[cfg(not(all(test, wheel_loom)))]
pub(crate) use std::sync::{
    atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering},
    Arc, Mutex, MutexGuard,
};

/// Threads, for the models (the crate itself spawns none).
#[cfg(all(test, wheel_loom))]
#[allow(unused_imports)]
pub(crate) use loom::thread;
#[cfg(not(all(test, wheel_loom)))]
#[allow(unused_imports)]
pub(crate) use std::thread;

/// std's `Arc` for wakers the crate hands to tokio (`std::task::Wake` is implemented for std's
/// `Arc` alone); what they share with the rest of the crate is in the facade's types.
pub(crate) use std::sync::Arc as WakeArc;

/// std's `Arc`, in loom builds of the tests only: `std::task::Wake` is implemented for std's
/// `Arc` alone, so the models' counting wakers live in one. What they share across threads
/// (their counters) are loom atomics.
#[cfg(all(test, wheel_loom))]
pub(crate) use std::sync::Arc as StdArc;

/// The driver's wake-up signal: tokio's `Notify`.
#[cfg(not(all(test, wheel_loom)))]
pub(crate) use tokio::sync::Notify;

/// The driver's wake-up signal under loom: tokio's `Notify` plus a loom-visible permit, which
/// the models read and wait on where the driver task would await.
#[cfg(all(test, wheel_loom))]
pub(crate) use model::Notify;

#[cfg(all(test, wheel_loom))]
mod model {
    use loom::sync::{Condvar, Mutex};

    use super::lock;

    /// tokio's `Notify` (so the driver task still compiles) plus a loom permit mirroring the
    /// one `notify_one` stores when no task is waiting. The permit is a `Mutex<bool>`, not an
    /// atomic: loom lets a read-modify-write read any store not ordered before it, so a
    /// thread spinning on an atomic flag may never see it set.
    #[derive(Debug)]
    pub(crate) struct Notify {
        tokio: tokio::sync::Notify,
        permit: Mutex<bool>,
        parked: Condvar,
    }

    impl Notify {
        pub(crate) fn new() -> Notify {
            Notify {
                tokio: tokio::sync::Notify::new(),
                permit: Mutex::new(false),
                parked: Condvar::new(),
            }
        }

        /// Like tokio's: the permit is kept until the driver consumes it, and the notifier
        /// happens-before the driver's next turn.
        pub(crate) fn notify_one(&self) {
            *lock(&self.permit) = true;
            self.parked.notify_one();
            self.tokio.notify_one();
        }

        pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
            self.tokio.notified()
        }

        /// Consumes the permit, as the driver task's `notified().enable()` does at the top of
        /// each loop; `true` if it was notified since the last call.
        pub(crate) fn take_permit(&self) -> bool {
            std::mem::take(&mut *lock(&self.permit))
        }

        /// Whether a notification is waiting to be consumed: the driver task would not stay
        /// parked.
        pub(crate) fn is_notified(&self) -> bool {
            *lock(&self.permit)
        }

        /// Blocks the calling loom thread until notified, consuming the permit: the driver
        /// parked in `notified.await`. A notification that never comes is a deadlock, which
        /// loom reports.
        pub(crate) fn wait(&self) {
            let mut permit = lock(&self.permit);
            while !*permit {
                permit = self
                    .parked
                    .wait(permit)
                    .unwrap_or_else(|poison| poison.into_inner());
            }
            *permit = false;
        }
    }
}

/// An `Arc<[T]>` of `items` (loom's `Arc` has no `FromIterator`, only `from_std`).
#[cfg(not(all(test, wheel_loom)))]
pub(crate) fn arc_slice<T>(items: Vec<T>) -> Arc<[T]> {
    Arc::from(items)
}

/// An `Arc<[T]>` of `items` (loom's `Arc` has no `FromIterator`, only `from_std`).
#[cfg(all(test, wheel_loom))]
pub(crate) fn arc_slice<T>(items: Vec<T>) -> Arc<[T]> {
    Arc::from_std(std::sync::Arc::from(items))
}

/// The clock a loom model sets, read by the idle tracker instead of `Instant::now()` so
/// that replays are deterministic. It stands for a physical clock, not shared memory: every
/// thread reads the latest setting, so it is a std atomic, which loom neither schedules on
/// nor weakens.
#[cfg(all(test, wheel_loom))]
#[derive(Debug, Default)]
pub(crate) struct ModelClock(std::sync::atomic::AtomicU64);

#[cfg(all(test, wheel_loom))]
impl ModelClock {
    /// Nanoseconds since the start.
    pub(crate) fn nanos(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Moves the clock to `nanos` after the start (never backwards).
    pub(crate) fn set(&self, nanos: u64) {
        self.0.fetch_max(nanos, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Which tokio runtime a poll comes from, for the futures' choice between staying pending
/// and panicking once their timer's driver is gone (`Global::caller_runtime_shutting_down`).
/// Under loom, whose threads run no runtime, a model says per thread which runtime's task it
/// plays (`runtime::enter_task`), and every timer is built on `runtime::MODEL`.
#[cfg(not(all(test, wheel_loom)))]
pub(crate) mod runtime {
    pub(crate) use tokio::runtime::Id;

    /// The runtime entered on this thread, the one a timer built here is driven on.
    pub(crate) fn current() -> Option<Id> {
        tokio::runtime::Handle::try_current()
            .ok()
            .map(|handle| handle.id())
    }

    /// The runtime of the task being polled on this thread; `None` outside a task (a thread
    /// blocking on a future with `block_on`, or no runtime at all).
    pub(crate) fn task() -> Option<Id> {
        tokio::task::try_id()?;
        current()
    }
}

/// Which tokio runtime a poll comes from, as a loom model plays it (see the std variant).
#[cfg(all(test, wheel_loom))]
pub(crate) mod runtime {
    use std::cell::Cell;

    /// A runtime, by number.
    pub(crate) type Id = u64;

    /// The runtime every model's timer (and tracker) is built on.
    pub(crate) const MODEL: Id = 1;

    loom::thread_local! {
        static TASK: Cell<Option<Id>> = Cell::new(None);
    }

    pub(crate) fn current() -> Option<Id> {
        Some(MODEL)
    }

    pub(crate) fn task() -> Option<Id> {
        TASK.with(Cell::get)
    }

    /// From now on the calling loom thread polls as a task of runtime `id` (`None`: as a
    /// thread outside any task).
    pub(crate) fn enter_task(id: Option<Id>) {
        TASK.with(|task| task.set(id));
    }
}

/// The shard lock: critical sections are a few list operations and never run user code, and
/// each thread has its own shard, so contention is rare. A spin lock that yields the thread
/// when it finds the lock taken releases with a plain store instead of a read-modify-write,
/// which saves an atomic operation per lock on the sleep hot path. Under loom it is loom's
/// `Mutex`.
#[cfg(not(all(test, wheel_loom)))]
#[derive(Debug)]
pub(crate) struct ShardLock<T>(spin::mutex::SpinMutex<T, spin::relax::Yield>);

#[cfg(not(all(test, wheel_loom)))]
impl<T> ShardLock<T> {
    pub(crate) fn new(value: T) -> Self {
        ShardLock(spin::mutex::SpinMutex::new(value))
    }
}

// No critical section runs user code or can leave the data half-updated, so a panic never
// exposes a broken invariant: the lock is as unwind-safe as std's `Mutex`.
#[cfg(not(all(test, wheel_loom)))]
impl<T> std::panic::UnwindSafe for ShardLock<T> {}
#[cfg(not(all(test, wheel_loom)))]
impl<T> std::panic::RefUnwindSafe for ShardLock<T> {}

#[cfg(not(all(test, wheel_loom)))]
pub(crate) type ShardGuard<'a, T> = spin::mutex::SpinMutexGuard<'a, T, spin::relax::Yield>;
#[cfg(all(test, wheel_loom))]
pub(crate) type ShardLock<T> = Mutex<T>;
#[cfg(all(test, wheel_loom))]
pub(crate) type ShardGuard<'a, T> = MutexGuard<'a, T>;

/// Locks a shard.
#[cfg(not(all(test, wheel_loom)))]
pub(crate) fn lock_shard<T>(lock: &ShardLock<T>) -> ShardGuard<'_, T> {
    lock.0.lock()
}
#[cfg(all(test, wheel_loom))]
pub(crate) fn lock_shard<T>(lock: &ShardLock<T>) -> ShardGuard<'_, T> {
    self::lock(lock)
}

/// Process-wide statics (never modelled by loom).
pub(crate) mod global {
    pub(crate) use std::sync::atomic::{AtomicUsize, Ordering};
    pub(crate) use std::sync::Mutex;
}

/// Locks `mutex`, ignoring poisoning: every critical section in this crate leaves the data
/// consistent before anything in it can panic (wakers and callbacks run outside locks).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}
