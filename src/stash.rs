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

//! The thread-local also keeps the default timer's answer for the free functions
//! (`crate::default`): the current runtime's default timer's shard for this thread, with the
//! runtime and the task that confirmed it. Both live in one thread-local so that a free
//! function's sleep inside a task costs one thread-local access, as `Timer::sleep` does.

use crate::loom::Arc;
use crate::shard::{Global, ShardHandle};

#[cfg(not(all(test, wheel_loom)))]
mod imp {
    use std::cell::Cell;

    use tokio::runtime::Id;

    use super::{Arc, Global, ShardHandle};

    /// The calling thread's handles.
    struct Local {
        /// The shard handle of the last sleep dropped on this thread.
        stash: Cell<Option<Arc<ShardHandle>>>,
        /// This thread's shard of the default timer of `runtime` (see `crate::default`).
        default: Cell<Option<Arc<ShardHandle>>>,
        /// The address of `default`'s handle, 0 when none is cached: the free functions' fast
        /// path matches the stash against it without taking `default` out of its cell. While
        /// it is not 0, `default` holds a reference to that handle, so no other handle can
        /// live at that address.
        default_addr: Cell<usize>,
        runtime: Cell<Option<Id>>,
        /// The task that last confirmed `runtime`; `None` outside a task.
        task: Cell<Option<tokio::task::Id>>,
    }

    thread_local! {
        static LOCAL: Local = const {
            Local {
                stash: Cell::new(None),
                default: Cell::new(None),
                default_addr: Cell::new(0),
                runtime: Cell::new(None),
                task: Cell::new(None),
            }
        };
    }

    impl Local {
        /// `want` itself if the stash holds it, else a new reference to it.
        #[inline]
        fn take(&self, want: &Arc<ShardHandle>) -> Arc<ShardHandle> {
            match self.stash.take() {
                Some(handle) if Arc::ptr_eq(&handle, want) => handle,
                other => {
                    self.stash.set(other);
                    want.clone()
                }
            }
        }

        /// A sleep's handle of the cached default shard, if it is cached and its timer runs.
        ///
        /// In a loop of sleeps the stash holds that very handle (the last sleep dropped here
        /// was on it): it is recognised by its address and taken, and `default` is not
        /// touched (taking it out of its cell and putting it back costs two stores and the
        /// check for an old value to drop).
        #[inline(always)]
        fn take_default(&self) -> Option<Arc<ShardHandle>> {
            match self.stash.take() {
                Some(handle) if Arc::as_ptr(&handle) as usize == self.default_addr.get() => {
                    if handle.global().is_running() {
                        return Some(handle);
                    }
                    self.stash.set(Some(handle));
                    return None;
                }
                other => self.stash.set(other),
            }
            let shard = self.default.take()?;
            let out = shard.global().is_running().then(|| shard.clone());
            self.default.set(Some(shard));
            out
        }
    }

    /// The stashed handle if `wanted` accepts it; otherwise the stash is left as it was.
    /// Runs no user code.
    #[inline]
    fn take_if(wanted: impl FnOnce(&Arc<ShardHandle>) -> bool) -> Option<Arc<ShardHandle>> {
        LOCAL
            .try_with(|local| match local.stash.take() {
                Some(handle) if wanted(&handle) => Some(handle),
                other => {
                    local.stash.set(other);
                    None
                }
            })
            .ok()
            .flatten()
    }

    /// `want` itself if the thread's stash holds it, else a new reference to it.
    #[inline]
    pub(crate) fn take(want: &Arc<ShardHandle>) -> Arc<ShardHandle> {
        LOCAL
            .try_with(|local| local.take(want))
            .unwrap_or_else(|_| want.clone())
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
        let old = LOCAL.try_with(|local| local.stash.replace(handle.take()));
        // The old reference, or this one while the thread exits, is released here.
        drop((old, handle));
    }

    /// Releases the calling thread's stash, and its cached default shard, if they hold a
    /// handle of `global`'s timer.
    pub(crate) fn forget(global: &Global) {
        drop(take_if(|handle| std::ptr::eq(&**handle.global(), global)));
        let of_global = |handle: &Arc<ShardHandle>| std::ptr::eq(&**handle.global(), global);
        let default = LOCAL.try_with(|local| match local.default.take() {
            Some(handle) if of_global(&handle) => {
                local.default_addr.set(0);
                Some(handle)
            }
            other => {
                local.default.set(other);
                None
            }
        });
        drop(default);
    }

    /// A handle for a new sleep on the cached default shard, if the current task (`Some`) is
    /// the one that last confirmed it and its timer runs.
    #[inline(always)]
    pub(crate) fn take_default_in_task(task: Option<tokio::task::Id>) -> Option<Arc<ShardHandle>> {
        LOCAL
            .try_with(|local| {
                if local.task.get() == task {
                    local.take_default()
                } else {
                    None
                }
            })
            .ok()
            .flatten()
    }

    /// A handle for a new sleep on the cached default shard, if it is `runtime`'s and its
    /// timer runs; `task` becomes the task that confirmed it.
    #[inline]
    pub(crate) fn take_default_of(
        runtime: Id,
        task: Option<tokio::task::Id>,
    ) -> Option<Arc<ShardHandle>> {
        LOCAL
            .try_with(|local| {
                if local.runtime.get() != Some(runtime) {
                    return None;
                }
                let out = local.take_default()?;
                local.task.set(task);
                Some(out)
            })
            .ok()
            .flatten()
    }

    /// Caches `shard`, this thread's shard of `runtime`'s default timer, confirmed by `task`.
    pub(crate) fn set_default(runtime: Id, task: Option<tokio::task::Id>, shard: Arc<ShardHandle>) {
        let mut shard = Some(shard);
        let old = LOCAL.try_with(|local| {
            local.runtime.set(Some(runtime));
            local.task.set(task);
            let shard = shard.take();
            local
                .default_addr
                .set(shard.as_ref().map_or(0, |s| Arc::as_ptr(s) as usize));
            local.default.replace(shard)
        });
        // The replaced handle (a stopped timer's) is released with nothing borrowed.
        drop((old, shard));
    }
}

#[cfg(all(test, wheel_loom))]
mod imp {
    use tokio::runtime::Id;

    use super::{Arc, Global, ShardHandle};

    pub(crate) fn take(want: &Arc<ShardHandle>) -> Arc<ShardHandle> {
        want.clone()
    }

    pub(crate) fn put(handle: Arc<ShardHandle>) {
        drop(handle);
    }

    pub(crate) fn forget(_: &Global) {}

    pub(crate) fn take_default_in_task(_: Option<tokio::task::Id>) -> Option<Arc<ShardHandle>> {
        None
    }

    pub(crate) fn take_default_of(_: Id, _: Option<tokio::task::Id>) -> Option<Arc<ShardHandle>> {
        None
    }

    pub(crate) fn set_default(_: Id, _: Option<tokio::task::Id>, shard: Arc<ShardHandle>) {
        drop(shard);
    }
}

pub(crate) use imp::{forget, put, set_default, take, take_default_in_task, take_default_of};
