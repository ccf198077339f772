//! How a `schedule` in this process wakes idle consumers early, without a polling loop.
//!
//! # Ground rules
//!
//! - Every consumer owns a `Slot`: `0` while it is busy (it will look at the store again
//!   before sleeping), `u64::MAX` from just before it reads the store until it knows the
//!   next due time, then that due time while it sleeps.
//! - A consumer enables its `Notified` *before* setting its slot to `u64::MAX` and reading
//!   the store; a writer that made a job due at `run_at` notifies, *after* its change is
//!   durable, when any slot holds a time later than `run_at`. Either the consumer's read saw
//!   the change, or the writer's check saw `u64::MAX` or a later due time and the notify
//!   reaches the already-enabled `Notified`. No wakeup is lost and busy consumers cost
//!   nothing.
//! - All slot accesses are `SeqCst`: the argument above is a store-buffering pattern.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

#[derive(Debug, Default)]
pub(crate) struct Wakeup {
    notify: Notify,
    slots: Mutex<Vec<Arc<AtomicU64>>>,
}

/// One consumer's registration; unregisters on drop.
#[derive(Debug)]
pub(crate) struct Slot {
    wakeup: Arc<Wakeup>,
    due: Arc<AtomicU64>,
}

impl Wakeup {
    pub(crate) fn register(self: &Arc<Self>) -> Slot {
        let due = Arc::new(AtomicU64::new(0));
        self.slots.lock().expect("wakeup slots").push(due.clone());
        Slot {
            wakeup: self.clone(),
            due,
        }
    }

    /// A job became due at `run_at` (created, moved or retried): wake consumers sleeping
    /// past it.
    pub(crate) fn due_at(&self, run_at: u64) {
        let late = self
            .slots
            .lock()
            .expect("wakeup slots")
            .iter()
            .any(|s| s.load(SeqCst) > run_at);
        if late {
            self.notify.notify_waiters();
        }
    }

    /// Wakes every waiting consumer (used on close).
    pub(crate) fn wake_all(&self) {
        self.notify.notify_waiters();
    }

    pub(crate) fn notify(&self) -> &Notify {
        &self.notify
    }
}

impl Slot {
    pub(crate) fn set(&self, due: u64) {
        self.due.store(due, SeqCst);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut slots = self.wakeup.slots.lock().expect("wakeup slots");
        slots.retain(|s| !Arc::ptr_eq(s, &self.due));
    }
}
