//! Sans-IO core of one tracker shard: a ring of one-tick buckets plus a key → slot table.
//!
//! Time is a `u64` tick and touch times are *epochs* handed in by the caller; this module
//! knows nothing of tokio, clocks, wakers or threads (its tests drive it by hand).
//!
//! # Invariants
//! - Every tracked key owns one slot in a slab: the key, the epoch of its last touch (its
//!   *stamp*) and its list links. The table maps the key's hash to the slot index, so the key
//!   is stored once, and a keyed touch reads one slot and writes a plain `u64` under the lock.
//! - A key with an `IdleHandle` keeps its stamp outside the slot, in a fixed-size chunk of
//!   atomics (`CHUNK` per chunk, never moved), so the handle can touch without the lock; the
//!   slot's stamp field then holds `HANDLE | handle index`. Handle stamps only grow (writers
//!   use [`raise`]), so a touch that loaded an older epoch late never lowers a newer one;
//!   `EXPIRED` and `REMOVED` are sticky markers above every epoch, set when the key stops
//!   being tracked. A handle stamp is freed only by its handle (`release`), so a stale
//!   handle never writes into another key's stamp; the slot itself is freed at once.
//! - A tracked slot is linked in exactly one list: a bucket (`tick & mask`) or the scan list
//!   (buckets being processed). It sits in the bucket of a tick *at or before* its due tick,
//!   never after: filing early costs one more look, filing late would expire late. Touching
//!   never moves a slot; [`Ring::advance`] re-files it when its bucket comes round.
//! - `advance` expires a slot only if `due(stamp) <= now`, where `due` comes from [`Dues`]:
//!   an upper bound of the touch time plus the timeout. So a key never expires early,
//!   whatever bucket it was filed in.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

use hashbrown::HashTable;

use crate::loom::{arc_slice, Arc, AtomicU64, Ordering};

/// Marks a slot stamp as `HANDLE | handle index`.
const HANDLE: u64 = 1 << 63;
/// Sticky stamp of a handle whose key expired.
pub(crate) const EXPIRED: u64 = u64::MAX;
/// Sticky stamp of a handle whose key was removed or superseded (not expired).
pub(crate) const REMOVED: u64 = u64::MAX - 1;
/// Handle stamps per chunk.
pub(crate) const CHUNK: usize = 1024;

/// End of a list.
const NIL: u32 = u32::MAX;
/// `prev` of a slot on the free list.
const FREE: u32 = u32::MAX - 1;
/// A link value with this bit names a list head (`HEAD | bucket`) rather than a slot.
const HEAD: u32 = 1 << 31;
/// Most slots (and most handles) one shard holds.
pub(crate) const MAX_SLOTS: usize = HEAD as usize - 2;

/// A fixed block of handle stamps; handle `h` stamps into `chunks[h / CHUNK][h % CHUNK]`.
pub(crate) type Chunk = Arc<[AtomicU64]>;

/// Raises `stamp` to `value` unless it is already at or above it. Plain loads while the
/// stamp is current (the common case: many touches per tick), one `fetch_max` otherwise.
#[inline]
pub(crate) fn raise(stamp: &AtomicU64, value: u64) {
    if stamp.load(Ordering::Relaxed) < value {
        stamp.fetch_max(value, Ordering::Relaxed);
    }
}

/// Due ticks of epochs: `ring[epoch & (len - 1)]` for replaced epochs, `lower` (a lower
/// bound) for the current one, whose end is not known yet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dues<'a> {
    pub(crate) current: u64,
    pub(crate) lower: u64,
    pub(crate) ring: &'a [u64],
}

impl Dues<'_> {
    /// The tick at which a key last touched in `epoch` may expire. An overwritten ring entry
    /// holds the due of a *later* epoch, which is later still: safe, never early.
    pub(crate) fn due(&self, epoch: u64) -> u64 {
        if epoch == self.current {
            self.lower
        } else {
            self.ring[(epoch as usize) & (self.ring.len() - 1)]
        }
    }
}

#[derive(Debug)]
struct Slot<K> {
    key: Option<K>,
    /// The last touch's epoch, or `HANDLE | handle index`.
    stamp: u64,
    prev: u32,
    next: u32,
}

/// One shard's keys, buckets and handle stamps.
#[derive(Debug)]
pub(crate) struct Ring<K, S> {
    hasher: S,
    table: HashTable<u32>,
    slots: Vec<Slot<K>>,
    free: u32,
    chunks: Vec<Chunk>,
    /// Handle stamps in use.
    handles: usize,
    free_handles: Vec<u32>,
    /// Bucket heads, then the scan list's head.
    heads: Box<[u32]>,
    mask: u64,
    /// Every bucket of a tick up to this one has been moved to the scan list.
    processed: u64,
    tracked: usize,
}

/// What [`Ring::register`] did.
#[derive(Debug)]
pub(crate) struct Registered<K> {
    pub(crate) slot: u32,
    pub(crate) handle: u32,
    /// The handle that tracked the same key before, now `REMOVED`.
    pub(crate) superseded: Option<u32>,
    /// A key to drop outside the lock.
    pub(crate) spare: Option<K>,
    /// Whether a key was added to the tracker (rather than an existing one taken over).
    pub(crate) inserted: bool,
}

// ===== impl Ring =====

impl<K, S> Ring<K, S> {
    /// A ring of `buckets` (a power of two, more than the timeout in ticks plus one) whose
    /// time starts at tick `start`.
    pub(crate) fn new(hasher: S, buckets: usize, start: u64) -> Self {
        assert!(buckets.is_power_of_two() && buckets < HEAD as usize);
        Ring {
            hasher,
            table: HashTable::new(),
            slots: Vec::new(),
            free: NIL,
            chunks: Vec::new(),
            handles: 0,
            free_handles: Vec::new(),
            heads: vec![NIL; buckets + 1].into_boxed_slice(),
            mask: buckets as u64 - 1,
            processed: start,
            tracked: 0,
        }
    }

    /// Number of tracked keys.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.tracked
    }

    /// Handle `handle`'s stamp.
    pub(crate) fn handle_stamp(&self, handle: u32) -> &AtomicU64 {
        &self.chunks[handle as usize / CHUNK][handle as usize % CHUNK]
    }

    /// The chunk holding handle `handle`'s stamp and its offset there.
    pub(crate) fn chunk_of(&self, handle: u32) -> (Chunk, u32) {
        (
            self.chunks[handle as usize / CHUNK].clone(),
            (handle as usize % CHUNK) as u32,
        )
    }

    /// The epoch of `slot`'s last touch.
    fn epoch(&self, slot: u32) -> u64 {
        let stamp = self.slots[slot as usize].stamp;
        if stamp & HANDLE == 0 {
            stamp
        } else {
            self.handle_stamp((stamp & !HANDLE) as u32)
                .load(Ordering::Relaxed)
        }
    }

    /// Frees handle `handle` when it is dropped; if its key was still tracked (in `slot`),
    /// stops tracking it and returns the key (to be dropped outside the lock).
    pub(crate) fn release(&mut self, hash: u64, slot: u32, handle: u32) -> Option<K> {
        let tracked = self.handle_stamp(handle).load(Ordering::Relaxed) < REMOVED;
        self.free_handles.push(handle);
        self.handles -= 1;
        if !tracked {
            return None;
        }
        debug_assert_eq!(self.slots[slot as usize].stamp, HANDLE | u64::from(handle));
        if let Ok(entry) = self.table.find_entry(hash, |&j| j == slot) {
            entry.remove();
        }
        Some(self.untrack(slot))
    }

    fn scan(&self) -> usize {
        self.heads.len() - 1
    }

    fn set_next(&mut self, at: u32, next: u32) {
        if at & HEAD != 0 {
            self.heads[(at & !HEAD) as usize] = next;
        } else {
            self.slots[at as usize].next = next;
        }
    }

    fn push(&mut self, list: usize, slot: u32) {
        let head = self.heads[list];
        let s = &mut self.slots[slot as usize];
        s.prev = HEAD | list as u32;
        s.next = head;
        if head != NIL {
            self.slots[head as usize].prev = slot;
        }
        self.heads[list] = slot;
    }

    fn unlink(&mut self, slot: u32) {
        let Slot { prev, next, .. } = self.slots[slot as usize];
        debug_assert!(prev != FREE, "unlink of a free slot");
        self.set_next(prev, next);
        if next != NIL {
            self.slots[next as usize].prev = prev;
        }
    }

    /// Unlinks a tracked slot (already out of the table), frees it and returns its key.
    fn untrack(&mut self, slot: u32) -> K {
        self.unlink(slot);
        self.tracked -= 1;
        let s = &mut self.slots[slot as usize];
        let key = s.key.take().expect("tracked slot has a key");
        s.prev = FREE;
        s.next = self.free;
        self.free = slot;
        key
    }

    /// Takes a free slot, growing the slab if none is free.
    #[track_caller]
    fn alloc(&mut self) -> u32 {
        if self.free != NIL {
            let slot = self.free;
            self.free = self.slots[slot as usize].next;
            return slot;
        }
        let slot = self.slots.len();
        assert!(
            slot < MAX_SLOTS,
            "wheel-timer: more than {MAX_SLOTS} keys in one idle-tracker shard"
        );
        self.slots.push(Slot {
            key: None,
            stamp: 0,
            prev: FREE,
            next: NIL,
        });
        slot as u32
    }

    /// Sets the sticky `marker` on `slot`'s handle stamp, if it has a handle.
    ///
    /// A swap, not a store: the marker must follow any concurrent touch's `fetch_max` in the
    /// stamp's modification order. The memory model guarantees that for a store too, but
    /// loom 0.7 lets a store slip between the read and the write of a concurrent RMW
    /// (tokio-rs/loom#254), and model 5 would then report a lost wakeup that cannot happen.
    /// The swap costs one locked instruction per expired or removed handle key.
    fn mark(&mut self, slot: u32, marker: u64) -> Option<u32> {
        let stamp = self.slots[slot as usize].stamp;
        (stamp & HANDLE != 0).then(|| {
            let handle = (stamp & !HANDLE) as u32;
            self.handle_stamp(handle).swap(marker, Ordering::Relaxed);
            handle
        })
    }

    /// A handle for a key this ring will not track (its tracker stopped): its stamp is
    /// `REMOVED` from the start, so its [`Ring::release`] frees only the stamp.
    #[track_caller]
    pub(crate) fn detached_handle(&mut self) -> u32 {
        self.alloc_handle(REMOVED)
    }

    /// Stops tracking every key (the tracker stopped): marks their handles `REMOVED`,
    /// appends the keys to `keys` and the handles to `handles`.
    pub(crate) fn clear(&mut self, keys: &mut Vec<K>, handles: &mut Vec<u32>) {
        if self.tracked == 0 {
            return;
        }
        self.table.clear();
        for slot in 0..self.slots.len() as u32 {
            if self.slots[slot as usize].key.is_some() {
                handles.extend(self.mark(slot, REMOVED));
                keys.push(self.untrack(slot));
            }
        }
    }

    /// Takes a free handle stamp set to `stamp`, growing the chunks if none is free.
    #[track_caller]
    fn alloc_handle(&mut self, stamp: u64) -> u32 {
        let handle = match self.free_handles.pop() {
            Some(handle) => handle,
            None => {
                let handle = self.handles;
                assert!(
                    handle < MAX_SLOTS,
                    "wheel-timer: more than {MAX_SLOTS} idle handles in one shard"
                );
                if handle % CHUNK == 0 {
                    self.chunks
                        .push(arc_slice((0..CHUNK).map(|_| AtomicU64::new(0)).collect()));
                }
                handle as u32
            }
        };
        self.handles += 1;
        // No handle holds this stamp yet: a plain store is safe.
        self.handle_stamp(handle).store(stamp, Ordering::Relaxed);
        handle
    }
}

impl<K: Hash + Eq, S: BuildHasher> Ring<K, S> {
    fn find<Q>(&self, hash: u64, key: &Q) -> Option<u32>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let slots = &self.slots;
        self.table
            .find(hash, |&j| Self::is(&slots[j as usize], key))
            .copied()
    }

    fn is<Q>(slot: &Slot<K>, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        slot.key.as_ref().is_some_and(|k| k.borrow() == key)
    }

    pub(crate) fn contains<Q>(&self, hash: u64, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.find(hash, key).is_some()
    }

    /// The epoch `key` was last touched in, if it is tracked (`None` for a handle whose
    /// stamp is already marked).
    pub(crate) fn last_epoch<Q>(&self, hash: u64, key: &Q) -> Option<u64>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let epoch = self.epoch(self.find(hash, key)?);
        (epoch < REMOVED).then_some(epoch)
    }

    /// Touches `key` in `epoch` if it is tracked; `false` if it is not.
    #[inline]
    pub(crate) fn touch<Q>(&mut self, hash: u64, key: &Q, epoch: u64) -> bool
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let Some(slot) = self.find(hash, key) else {
            return false;
        };
        let stamp = &mut self.slots[slot as usize].stamp;
        if *stamp & HANDLE == 0 {
            *stamp = (*stamp).max(epoch);
        } else {
            let handle = (*stamp & !HANDLE) as u32;
            raise(self.handle_stamp(handle), epoch);
        }
        true
    }

    /// Tracks a new key (not tracked yet) with stamp `stamp` (the epoch of its touch, or
    /// `HANDLE | h`). It is filed in the next bucket to process, where the driver finds its
    /// due tick.
    #[track_caller]
    pub(crate) fn insert(&mut self, hash: u64, key: K, stamp: u64) -> u32 {
        let slot = self.alloc();
        let s = &mut self.slots[slot as usize];
        s.key = Some(key);
        s.stamp = stamp;
        let bucket = ((self.processed + 1) & self.mask) as usize;
        self.push(bucket, slot);
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.table.insert_unique(hash, slot, |&j| {
            hasher.hash_one(
                slots[j as usize]
                    .key
                    .as_ref()
                    .expect("tracked slot has a key"),
            )
        });
        self.tracked += 1;
        slot
    }

    /// Stops tracking `key`: returns it, and its handle if it has one (now `REMOVED`).
    pub(crate) fn remove<Q>(&mut self, hash: u64, key: &Q) -> Option<(K, Option<u32>)>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let slots = &self.slots;
        let entry = self
            .table
            .find_entry(hash, |&j| Self::is(&slots[j as usize], key))
            .ok()?;
        let (slot, _) = entry.remove();
        let handle = self.mark(slot, REMOVED);
        Some((self.untrack(slot), handle))
    }

    /// Gives `key` to a new handle, touched in `epoch`. A key tracked without a handle is
    /// taken over; one that already has a handle is superseded: the old handle is marked
    /// `REMOVED` and the key's slot passes to the new one.
    #[track_caller]
    pub(crate) fn register(&mut self, hash: u64, key: K, epoch: u64) -> Registered<K> {
        let Some(slot) = self.find(hash, &key) else {
            let handle = self.alloc_handle(epoch);
            let slot = self.insert(hash, key, HANDLE | u64::from(handle));
            return Registered {
                slot,
                handle,
                superseded: None,
                spare: None,
                inserted: true,
            };
        };
        let last = self.epoch(slot).max(epoch);
        let superseded = self.mark(slot, REMOVED);
        let handle = self.alloc_handle(last);
        self.slots[slot as usize].stamp = HANDLE | u64::from(handle);
        Registered {
            slot,
            handle,
            superseded,
            spare: Some(key),
            inserted: false,
        }
    }

    /// Processes time up to tick `now`: moves each bucket up to it to the scan list, then
    /// looks at each slot there: expired (`due <= now`) slots leave the table, their keys go
    /// to `expired` and their handles (marked `EXPIRED`) to `handles`; the others are
    /// re-filed at their due tick. Looks at no more than `budget` slots (and takes from it
    /// those it looked at); returns `false` if it stopped early (call again).
    pub(crate) fn advance(
        &mut self,
        now: u64,
        dues: &Dues<'_>,
        budget: &mut usize,
        expired: &mut Vec<K>,
        handles: &mut Vec<u32>,
    ) -> bool {
        let scan = self.scan();
        let buckets = self.mask + 1;
        loop {
            let slot = self.heads[scan];
            if slot == NIL {
                if self.processed >= now {
                    return true;
                }
                if self.tracked == 0 {
                    self.processed = now;
                    return true;
                }
                // Behind by a whole rotation or more: each bucket once is enough.
                self.processed = self.processed.max(now.saturating_sub(buckets)) + 1;
                let bucket = (self.processed & self.mask) as usize;
                let first = std::mem::replace(&mut self.heads[bucket], NIL);
                if first != NIL {
                    self.slots[first as usize].prev = HEAD | scan as u32;
                    self.heads[scan] = first;
                }
                continue;
            }
            if *budget == 0 {
                return false;
            }
            *budget -= 1;
            let due = dues.due(self.epoch(slot));
            if due > now {
                self.unlink(slot);
                self.push((due & self.mask) as usize, slot);
                continue;
            }
            let key = self.slots[slot as usize]
                .key
                .as_ref()
                .expect("tracked slot has a key");
            let hash = self.hasher.hash_one(key);
            if let Ok(entry) = self.table.find_entry(hash, |&j| j == slot) {
                entry.remove();
            }
            handles.extend(self.mark(slot, EXPIRED));
            expired.push(self.untrack(slot));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::hash::RandomState;

    use super::*;

    /// Plays the driver by hand: one epoch per advance, replaced at the advance's tick.
    struct Sim {
        ring: Ring<u32, RandomState>,
        dues: Vec<u64>,
        epoch: u64,
        lower: u64,
        now: u64,
        timeout: u64,
    }

    impl Sim {
        fn new(timeout: u64) -> Sim {
            let buckets = (timeout + 2).next_power_of_two() as usize;
            Sim {
                ring: Ring::new(RandomState::new(), buckets, 0),
                dues: vec![u64::MAX; buckets],
                epoch: 1,
                lower: timeout,
                now: 0,
                timeout,
            }
        }

        fn hash(&self, key: u32) -> u64 {
            self.ring.hasher.hash_one(key)
        }

        fn touch(&mut self, key: u32) {
            let hash = self.hash(key);
            if !self.ring.touch(hash, &key, self.epoch) {
                self.ring.insert(hash, key, self.epoch);
            }
        }

        /// Moves to tick `to` (publishing once) and returns what expired, in ascending order.
        fn advance(&mut self, to: u64, budget: usize) -> Vec<u32> {
            self.advance_with_handles(to, budget).0
        }

        /// As `advance`, also returning the handles of expired keys.
        fn advance_with_handles(&mut self, to: u64, budget: usize) -> (Vec<u32>, Vec<u32>) {
            assert!(to > self.now);
            self.now = to;
            let mask = self.dues.len() - 1;
            self.dues[self.epoch as usize & mask] = to + self.timeout;
            self.lower = to + self.timeout;
            self.epoch += 1;
            let dues = Dues {
                current: self.epoch,
                lower: self.lower,
                ring: &self.dues,
            };
            let (mut expired, mut handles) = (Vec::new(), Vec::new());
            while !self
                .ring
                .advance(to, &dues, &mut budget.clone(), &mut expired, &mut handles)
            {}
            expired.sort();
            (expired, handles)
        }
    }

    #[test]
    fn expires_one_tick_after_the_touch_tick_plus_timeout() {
        let mut sim = Sim::new(10);
        sim.touch(1);
        for t in 1..=10 {
            assert!(sim.advance(t, usize::MAX).is_empty(), "tick {t}");
        }
        assert_eq!(sim.advance(11, usize::MAX), [1]);
        assert_eq!(sim.ring.len(), 0);
    }

    #[test]
    fn touch_defers_expiry_and_untouched_keys_go() {
        let mut sim = Sim::new(10);
        sim.touch(1);
        sim.touch(2);
        for t in 1..=5 {
            assert!(sim.advance(t, usize::MAX).is_empty());
        }
        sim.touch(1);
        for t in 6..=10 {
            assert!(sim.advance(t, usize::MAX).is_empty());
        }
        assert_eq!(sim.advance(11, usize::MAX), [2]);
        for t in 12..=15 {
            assert!(sim.advance(t, usize::MAX).is_empty());
        }
        assert_eq!(sim.advance(16, usize::MAX), [1]);
    }

    #[test]
    fn remove_unlinks_and_frees() {
        let mut sim = Sim::new(4);
        for k in 0..5 {
            sim.touch(k);
        }
        let hash = sim.hash(3);
        assert_eq!(sim.ring.remove(hash, &3).map(|(k, _)| k), Some(3));
        assert!(sim.ring.remove(hash, &3).is_none());
        assert!(sim.advance(1, usize::MAX).is_empty());
        assert_eq!(sim.advance(20, usize::MAX), [0, 1, 2, 4]);
        // Freed slots are reused: no growth.
        for k in 10..15 {
            sim.touch(k);
        }
        assert_eq!(sim.ring.slots.len(), 5);
    }

    #[test]
    fn a_jump_past_a_whole_rotation_visits_every_bucket() {
        let mut sim = Sim::new(6);
        for k in 0..20 {
            sim.touch(k);
            sim.advance(sim.now + 1, usize::MAX);
        }
        // Keys touched in the last 6 ticks are still tracked; jump far ahead.
        assert_eq!(sim.advance(1_000, usize::MAX).len(), 20 - 14);
        assert_eq!(sim.ring.len(), 0);
    }

    #[test]
    fn expired_handles_keep_their_stamp_marked() {
        let mut sim = Sim::new(3);
        let hash = sim.hash(7);
        let reg = sim.ring.register(hash, 7, sim.epoch);
        assert!(reg.inserted);
        let expired = {
            let now = 10;
            sim.now = now;
            let dues = Dues {
                current: sim.epoch + 1,
                lower: now + 3,
                ring: &[1, 1, 1, 1, 1, 1, 1, 1],
            };
            let (mut keys, mut handles) = (Vec::new(), Vec::new());
            assert!(sim
                .ring
                .advance(now, &dues, &mut { usize::MAX }, &mut keys, &mut handles));
            (keys, handles)
        };
        assert_eq!(expired, (vec![7], vec![reg.handle]));
        let stamp = sim.ring.handle_stamp(reg.handle);
        assert_eq!(stamp.load(Ordering::Relaxed), EXPIRED);
        // A late touch through the handle cannot revive or lower the marker.
        raise(stamp, 99);
        assert_eq!(stamp.load(Ordering::Relaxed), EXPIRED);
        // The key can be tracked again (its old slot was freed); the handle's drop then
        // frees only its stamp.
        sim.touch(7);
        assert_eq!(sim.ring.len(), 1);
        assert!(sim.ring.release(hash, reg.slot, reg.handle).is_none());
        assert_eq!(sim.ring.len(), 1);
        assert!(sim.ring.contains(hash, &7));
    }

    #[test]
    fn register_takes_over_or_supersedes() {
        let mut sim = Sim::new(3);
        sim.touch(1);
        let hash = sim.hash(1);
        let first = sim.ring.register(hash, 1, sim.epoch);
        assert!(!first.inserted && first.superseded.is_none());
        let second = sim.ring.register(hash, 1, sim.epoch);
        assert_eq!(second.superseded, Some(first.handle));
        assert_eq!(second.slot, first.slot);
        assert_ne!(second.handle, first.handle);
        let old = sim.ring.handle_stamp(first.handle).load(Ordering::Relaxed);
        assert_eq!(old, REMOVED);
        assert!(sim.ring.release(hash, first.slot, first.handle).is_none());
        assert_eq!(sim.ring.len(), 1);
        assert_eq!(sim.ring.release(hash, second.slot, second.handle), Some(1));
        assert_eq!(sim.ring.len(), 0);
    }

    #[test]
    fn stamps_never_go_down() {
        let stamp = AtomicU64::new(5);
        raise(&stamp, 3);
        assert_eq!(stamp.load(Ordering::Relaxed), 5);
        raise(&stamp, 8);
        assert_eq!(stamp.load(Ordering::Relaxed), 8);
    }

    /// Random touches (by key and through handles), removals, budgets and time steps against
    /// a model that knows each key's due tick: keys expire at the first advance at or after
    /// it, never before. Keys below 25 are touched by key, the others through handles.
    #[test]
    fn matches_a_model_under_random_schedules() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut rand = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for round in 0..40 {
            let timeout = 1 + rand(40);
            let mut sim = Sim::new(timeout);
            // key -> the epoch of its last touch; epoch -> its due tick once replaced.
            let mut model: HashMap<u32, u64> = HashMap::new();
            let mut due_of: HashMap<u64, u64> = HashMap::new();
            // key -> (slot, handle) of its live handle.
            let mut handles: HashMap<u32, (u32, u32)> = HashMap::new();
            for _ in 0..400 {
                for _ in 0..rand(6) {
                    let key = rand(50) as u32;
                    if key < 25 {
                        sim.touch(key);
                    } else {
                        let hash = sim.hash(key);
                        match handles.get(&key) {
                            Some(&(_, h)) if model.contains_key(&key) => {
                                raise(sim.ring.handle_stamp(h), sim.epoch);
                            }
                            old => {
                                if let Some(&(slot, h)) = old {
                                    assert!(sim.ring.release(hash, slot, h).is_none());
                                }
                                let reg = sim.ring.register(hash, key, sim.epoch);
                                assert!(reg.inserted);
                                handles.insert(key, (reg.slot, reg.handle));
                            }
                        }
                    }
                    model.insert(key, sim.epoch);
                }
                if rand(10) == 0 {
                    let key = rand(50) as u32;
                    let hash = sim.hash(key);
                    let removed = match handles.remove(&key) {
                        Some((slot, h)) if rand(2) == 0 => {
                            sim.ring.release(hash, slot, h).is_some()
                        }
                        Some((slot, h)) => {
                            let removed = sim.ring.remove(hash, &key);
                            assert_eq!(
                                removed.as_ref().and_then(|r| r.1),
                                removed.as_ref().map(|_| h)
                            );
                            assert!(sim.ring.release(hash, slot, h).is_none());
                            removed.is_some()
                        }
                        None => sim.ring.remove(hash, &key).is_some(),
                    };
                    assert_eq!(removed, model.remove(&key).is_some());
                }
                let step = if rand(20) == 0 {
                    1 + rand(3 * timeout)
                } else {
                    1
                };
                let epoch = sim.epoch;
                let to = sim.now + step;
                due_of.insert(epoch, to + timeout);
                let budget = 1 + rand(8) as usize;
                let (got, expired_handles) = sim.advance_with_handles(to, budget);
                let mut want: Vec<u32> = model
                    .iter()
                    .filter(|(_, e)| due_of.get(e).is_some_and(|&d| d <= to))
                    .map(|(&k, _)| k)
                    .collect();
                want.sort();
                assert_eq!(got, want, "round {round}, tick {to}");
                for key in &got {
                    model.remove(key);
                    if let Some(&(_, h)) = handles.get(key) {
                        assert!(expired_handles.contains(&h));
                        let stamp = sim.ring.handle_stamp(h).load(Ordering::Relaxed);
                        assert_eq!(stamp, EXPIRED);
                    }
                }
                assert_eq!(
                    expired_handles.len(),
                    got.iter().filter(|&&k| k >= 25).count()
                );
                assert_eq!(sim.ring.len(), model.len());
            }
        }
    }
}
