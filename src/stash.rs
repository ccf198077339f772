//! The calling thread's stash: the shard handle of the last sleep dropped on it, kept for
//! the thread's next sleep in the same shard.
//!
//! Every sleep holds a counted reference to its shard (`Arc<ShardHandle>`): the shard's
//! memory must outlive it, and the count keeps the timer's driver alive while a sleep
//! exists. Counting it up at creation and down at drop are two atomic read-modify-writes,
//! as costly as a shard lock. With the stash, a dropped sleep hands its reference to the
//! thread instead, and the thread's next sleep of that shard takes it ([`take`]): in a loop
//! of timeouts nothing is counted, and nothing another thread reads is written.
//!
//! Only the reference is kept, never the wheel entry: a dropped sleep deregisters at once, so
//! its waker is dropped with it and nothing of it stays scheduled (a kept entry would keep
//! the waker's task alive until its deadline, and make a paused clock's auto-advance jump to
//! that deadline).
//!
//! A kept reference keeps the timer's shared state and its driver task (parked: no wakeups)
//! alive, at most one timer per thread. A timer is no longer kept once it stops running or
//! its last `Timer` handle is dropped (`ShardHandle::keeps`); dropping the last `Timer`
//! handle, or a sleep of a timer that is no longer kept, also releases the dropping thread's
//! stash of that timer ([`forget`]). A thread whose stash holds the timer when its last
//! `Timer` handle is dropped elsewhere keeps it until that thread drops a sleep of a running
//! timer or of that timer, or exits.
//!
//! [`take`] runs no user code (a stash of another shard is left in place), so the default
//! timer's cache may stay borrowed around it; releasing a reference may notify the driver.
//!
//! The loom models build without the stash (a `thread_local!` would be shared by a model's
//! threads): every sleep there counts its own reference.

use crate::loom::Arc;
use crate::shard::{Global, ShardHandle};

#[cfg(not(all(test, wheel_loom)))]
mod imp {
    use std::cell::Cell;

    use super::{Arc, Global, ShardHandle};

    thread_local! {
        static STASH: Cell<Option<Arc<ShardHandle>>> = const { Cell::new(None) };
    }

    /// The stashed handle if `wanted` accepts it; otherwise the stash is left as it was.
    /// Runs no user code.
    #[inline]
    fn take_if(wanted: impl FnOnce(&Arc<ShardHandle>) -> bool) -> Option<Arc<ShardHandle>> {
        STASH
            .try_with(|stash| match stash.take() {
                Some(handle) if wanted(&handle) => Some(handle),
                other => {
                    stash.set(other);
                    None
                }
            })
            .ok()
            .flatten()
    }

    /// `want` itself if the thread's stash holds it, else a new reference to it.
    #[inline]
    pub(crate) fn take(want: &Arc<ShardHandle>) -> Arc<ShardHandle> {
        take_if(|handle| Arc::ptr_eq(handle, want)).unwrap_or_else(|| want.clone())
    }

    /// Keeps a dropped sleep's `handle` for the thread's next sleep, releasing the one the
    /// stash held; releases `handle` (and the stash, if it holds the same timer) instead if
    /// the timer is not kept.
    #[inline]
    pub(crate) fn put(handle: Arc<ShardHandle>) {
        if !handle.keeps() {
            forget(handle.global());
            return;
        }
        let mut handle = Some(handle);
        let old = STASH.try_with(|stash| stash.replace(handle.take()));
        // The old reference, or this one while the thread exits, is released here.
        drop((old, handle));
    }

    /// Releases the calling thread's stash if it holds a handle of `global`'s timer.
    pub(crate) fn forget(global: &Global) {
        drop(take_if(|handle| std::ptr::eq(&**handle.global(), global)));
    }
}

#[cfg(all(test, wheel_loom))]
mod imp {
    use super::{Arc, Global, ShardHandle};

    pub(crate) fn take(want: &Arc<ShardHandle>) -> Arc<ShardHandle> {
        want.clone()
    }

    pub(crate) fn put(handle: Arc<ShardHandle>) {
        drop(handle);
    }

    pub(crate) fn forget(_: &Global) {}
}

pub(crate) use imp::{forget, put, take};
