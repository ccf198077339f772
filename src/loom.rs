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
