//! Synchronization facade: loom's types under `--cfg wheel_loom`, std's otherwise.
//!
//! Every `Arc`, atomic, `Mutex` and thread in the crate comes from here so that the loom
//! models (see `tests/loom.rs` and docs/ARCHITECTURE.md) see every shared access. The only
//! exception is [`global`], for process-wide statics (the default-timer registry and the
//! instance counter), which need `const` constructors that loom lacks; no loom model goes
//! through them.

#[cfg(wheel_loom)]
pub(crate) use loom::sync::{
    atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering},
    Arc, Mutex, MutexGuard,
};

#[cfg(not(wheel_loom))]
pub(crate) use std::sync::{
    atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering},
    Arc, Mutex, MutexGuard,
};

/// The shard lock: critical sections are a few list operations, and each thread has its own
/// shard, so contention is rare. A spin lock that yields the thread when it finds the lock
/// taken releases with a plain store instead of a read-modify-write, which halves the atomic
/// operations per sleep on the hot path. Under loom it is loom's `Mutex`.
#[cfg(not(wheel_loom))]
pub(crate) type ShardLock<T> = spin::mutex::SpinMutex<T, spin::relax::Yield>;
#[cfg(not(wheel_loom))]
pub(crate) type ShardGuard<'a, T> = spin::mutex::SpinMutexGuard<'a, T, spin::relax::Yield>;
#[cfg(wheel_loom)]
pub(crate) type ShardLock<T> = Mutex<T>;
#[cfg(wheel_loom)]
pub(crate) type ShardGuard<'a, T> = MutexGuard<'a, T>;

/// Locks a shard.
#[cfg(not(wheel_loom))]
pub(crate) fn lock_shard<T>(lock: &ShardLock<T>) -> ShardGuard<'_, T> {
    lock.lock()
}
#[cfg(wheel_loom)]
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
