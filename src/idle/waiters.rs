//! The tasks waiting on one tracked key: [`IdleHandle::idle`](crate::IdleHandle::idle)
//! futures and [`IdleStream`](crate::IdleStream) directions.
//!
//! # Ground rules
//! - Every waiter owns at most one entry, named by a [`Waiter`] (slot index plus an id that
//!   is never reused within the shard), so a re-poll replaces the waiter's own waker, a
//!   dropped waiter removes it, and storage is bounded by the waiters *alive*, not by those
//!   that ever polled.
//! - The table lives in the shard core and is touched only under the shard lock; wakers are
//!   cloned before that lock is taken and every waker taken out is woken or dropped after it
//!   is released (they run user code).
//! - When a key stops being tracked the whole list is taken (and woken); a waiter whose entry
//!   went that way finds its id gone and does nothing.

use std::collections::HashMap;
use std::task::Waker;

/// A waiter's place in its handle's [`Waiters`]: slot index and id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Waiter {
    index: u32,
    id: u64,
}

/// One handle's waiting tasks: a small slab of wakers.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    slots: Vec<Option<(u64, Waker)>>,
    free: Vec<u32>,
    live: usize,
}

impl Waiters {
    /// Wakers of every waiter (the list is consumed).
    pub(crate) fn into_wakers(self) -> impl Iterator<Item = Waker> {
        self.slots.into_iter().flatten().map(|(_, waker)| waker)
    }
}

/// Every handle's waiters in one shard, by handle index, and the shard's waiter ids.
#[derive(Debug, Default)]
pub(crate) struct WaiterTable {
    by_handle: HashMap<u32, Waiters>,
    next_id: u64,
}

impl WaiterTable {
    /// Stores `waker` for `waiter` (a new entry if `waiter` is `None` or its entry is gone)
    /// and returns what to drop once the lock is released: the waker replaced, or `waker`
    /// itself if the stored one already wakes the same task.
    pub(crate) fn set(
        &mut self,
        handle: u32,
        waiter: &mut Option<Waiter>,
        waker: Waker,
    ) -> Option<Waker> {
        let list = self.by_handle.entry(handle).or_default();
        if let Some(w) = *waiter {
            if let Some(Some((id, stored))) = list.slots.get_mut(w.index as usize) {
                if *id == w.id {
                    if stored.will_wake(&waker) {
                        return Some(waker);
                    }
                    return Some(std::mem::replace(stored, waker));
                }
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        let index = match list.free.pop() {
            Some(index) => {
                list.slots[index as usize] = Some((id, waker));
                index
            }
            None => {
                list.slots.push(Some((id, waker)));
                (list.slots.len() - 1) as u32
            }
        };
        list.live += 1;
        *waiter = Some(Waiter { index, id });
        None
    }

    /// Removes `waiter`'s entry, if it is still there; returns its waker (to drop unlocked).
    pub(crate) fn remove(&mut self, handle: u32, waiter: Waiter) -> Option<Waker> {
        let list = self.by_handle.get_mut(&handle)?;
        let slot = list.slots.get_mut(waiter.index as usize)?;
        if !matches!(slot, Some((id, _)) if *id == waiter.id) {
            return None;
        }
        let (_, waker) = slot.take()?;
        list.live -= 1;
        if list.live == 0 {
            self.by_handle.remove(&handle);
        } else {
            list.free.push(waiter.index);
        }
        Some(waker)
    }

    /// Takes every waiter of `handle` (its key stopped being tracked).
    pub(crate) fn take(&mut self, handle: u32) -> Option<Waiters> {
        self.by_handle.remove(&handle)
    }

    /// Takes every waiter of every handle (the tracker stopped).
    pub(crate) fn take_all(&mut self) -> Vec<Waiters> {
        self.by_handle.drain().map(|(_, list)| list).collect()
    }

    /// Entries stored for every handle (for the loom models).
    #[cfg(all(test, wheel_loom))]
    pub(crate) fn total(&self) -> usize {
        self.by_handle.values().map(|list| list.live).sum()
    }

    /// Entries stored for `handle` (for the tests).
    #[cfg(test)]
    pub(crate) fn count(&self, handle: u32) -> usize {
        self.by_handle.get(&handle).map_or(0, |list| list.live)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_or_removed_waiter_leaves_no_entry() {
        let mut table = WaiterTable::default();
        let mut a = None;
        assert!(table.set(3, &mut a, Waker::noop().clone()).is_none());
        assert_eq!(table.count(3), 1);
        // Re-registering replaces the entry rather than adding one.
        table.set(3, &mut a, Waker::noop().clone());
        assert_eq!(table.count(3), 1);
        let mut b = None;
        table.set(3, &mut b, Waker::noop().clone());
        assert_eq!(table.count(3), 2);
        assert!(table.remove(3, a.unwrap()).is_some());
        assert!(table.remove(3, a.unwrap()).is_none(), "removed twice");
        assert_eq!(table.count(3), 1);
        // The freed slot is reused under a new id: the old waiter cannot remove it.
        let mut c = None;
        table.set(3, &mut c, Waker::noop().clone());
        assert_eq!(c.unwrap().index, a.unwrap().index);
        assert!(table.remove(3, a.unwrap()).is_none());
        assert_eq!(table.count(3), 2);
        assert_eq!(table.take(3).map(|w| w.into_wakers().count()), Some(2));
        assert!(table.remove(3, b.unwrap()).is_none());
        assert_eq!(table.count(3), 0);
    }
}
