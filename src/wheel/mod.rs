//! Sans-IO hierarchical hashed timing wheel.
//!
//! Time is a `u64` tick count handed in by the caller: this module knows nothing of tokio,
//! clocks, wakers or threads, which is what lets it be unit-, property- and loom-tested.
//!
//! # Invariants
//! - Level 0 has `slots` buckets of one tick each; every higher level has 64 buckets, each as
//!   wide as the whole level below. Enough levels exist for every tick below [`MAX_TICK`], so
//!   no timer is ever re-scanned per rotation (Netty's cost) and there is no top-level fudge.
//! - A scheduled entry with `tick > elapsed` is linked in the bucket of the level whose digit
//!   holds the highest bit where `tick` and `elapsed` differ. Above that digit they agree, so
//!   the bucket lies in the current rotation of its level, at or after `elapsed`'s own bucket.
//! - An entry with `tick <= elapsed` is linked in the due list; `poll` hands those out before
//!   it moves time on.
//! - `elapsed` only moves forward, and never past the start of an occupied bucket: `poll`
//!   processes the bucket (cascading its entries down or into the due list) first. So an entry
//!   is never returned before its tick and never skipped.
//! - Insert, remove and reschedule are O(1); a timer cascades at most once per level.
//! - A bucket's bit in `occupied` is set exactly while its list is non-empty (the due list's
//!   bit is never set). Buckets are numbered as their list heads are, so a remove finds the
//!   bit from the entry's `bucket` alone; level 0 is padded to at least 64 buckets so that
//!   every upper level's 64 buckets are one bitmap word.

mod arena;
mod bitmap;
#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;

pub(crate) use arena::Key;

use arena::{Arena, DETACHED};
use bitmap::Bitmap;

/// Ticks at or beyond this saturate: it is the latest tick the wheel keeps (2^62 − 1; at a
/// 1 ns tick that is still 146 years away).
pub(crate) const MAX_TICK: u64 = (1 << 62) - 1;

/// log2 of the bucket count of every level above level 0.
const UPPER_BITS: u32 = 6;

/// A hierarchical timing wheel holding one `T` per entry.
#[derive(Debug)]
pub(crate) struct Wheel<T> {
    arena: Arena<T>,
    /// List heads, one per bucket: level 0's buckets (padded to at least 64, so that every
    /// upper level is one word of `occupied`), then 64 per upper level, then the due list.
    heads: Box<[u32]>,
    /// Occupancy of the buckets, one bit per list head (same index): a bucket's bit is found
    /// from its head's index alone, without its level.
    occupied: Bitmap,
    /// Where each level's buckets start in `heads`, and which tick bits pick the bucket.
    levels: Box<[Level]>,
    /// The level of a tick, by the highest bit in which it differs from `elapsed` (the
    /// insert's hot path: a table read instead of a division and two branches).
    places: [u8; 64],
    /// log2 of level 0's bucket count.
    bits0: u32,
    elapsed: u64,
    scheduled: usize,
}

/// One level's layout: its buckets are `heads[base..base + mask + 1]`, and a tick's bucket
/// is `base + ((tick >> shift) & mask)`.
#[derive(Debug, Clone, Copy)]
struct Level {
    base: u32,
    shift: u32,
    mask: u64,
}

/// A bucket that `poll` must process at `deadline`.
#[derive(Debug, Clone, Copy)]
struct Expiration {
    level: usize,
    slot: usize,
    deadline: u64,
}

// ===== impl Wheel =====

impl<T> Wheel<T> {
    /// A wheel whose level 0 has `slots` buckets; `slots` must be a power of two no larger
    /// than 2^30 (the builder validates it).
    pub(crate) fn new(slots: usize) -> Self {
        assert!(
            slots.is_power_of_two() && slots <= 1 << 30,
            "invalid slot count {slots}"
        );
        let bits0 = slots.trailing_zeros();
        // Enough upper levels that the top one's digit holds bit 61, the highest bit of MAX_TICK.
        let upper = if bits0 >= 62 {
            0
        } else {
            (61 - bits0) / UPPER_BITS + 1
        } as usize;
        let base0 = slots.max(1 << UPPER_BITS);
        let mut levels = Vec::with_capacity(upper + 1);
        levels.push(Level {
            base: 0,
            shift: 0,
            mask: slots as u64 - 1,
        });
        levels.extend((1..=upper).map(|level| Level {
            base: (base0 + ((level - 1) << UPPER_BITS)) as u32,
            shift: bits0 + UPPER_BITS * (level as u32 - 1),
            mask: (1 << UPPER_BITS) - 1,
        }));
        // The level whose digit holds bit `high`; bits above the top level's (never set in
        // a tick's difference from `elapsed`, both being at most MAX_TICK) map to the top.
        let places = std::array::from_fn(|high| {
            let high = high as u32;
            if high < bits0 {
                0
            } else {
                (1 + (high - bits0) / UPPER_BITS).min(upper as u32) as u8
            }
        });
        let buckets = base0 + (upper << UPPER_BITS) + 1;
        Wheel {
            arena: Arena::new(),
            heads: vec![arena::NIL; buckets].into_boxed_slice(),
            occupied: Bitmap::new(buckets),
            levels: levels.into_boxed_slice(),
            places,
            bits0,
            elapsed: 0,
            scheduled: 0,
        }
    }

    /// The tick up to which time has been processed.
    pub(crate) fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// Number of entries scheduled (linked and not yet returned by `poll`).
    pub(crate) fn len(&self) -> usize {
        self.scheduled
    }

    /// Allocates an entry and schedules it at `tick` (saturated to [`MAX_TICK`]; a tick at or
    /// before `elapsed` is due at the next `poll`).
    ///
    /// # Panics
    ///
    /// When [`MAX_ENTRIES`] entries are allocated.
    #[track_caller]
    #[inline(always)]
    pub(crate) fn insert(&mut self, tick: u64, value: T) -> Key {
        let tick = tick.min(MAX_TICK);
        let key = self.arena.alloc(tick, value);
        self.link(key.index());
        key
    }

    /// Unschedules and frees `key`'s entry, returning its value; `None` if the key is stale.
    #[inline(always)]
    pub(crate) fn try_remove(&mut self, key: Key) -> Option<T> {
        let index = self.arena.resolve(key)?;
        self.unlink(index);
        Some(self.arena.free(index))
    }

    /// Moves `key`'s entry to `tick` (saturated), scheduling it again if `poll` had returned
    /// it. Returns `false` if the key is stale.
    pub(crate) fn reschedule(&mut self, key: Key, tick: u64) -> bool {
        let Some(index) = self.arena.resolve(key) else {
            return false;
        };
        self.unlink(index);
        self.arena.get_mut(index).tick = tick.min(MAX_TICK);
        self.link(index);
        true
    }

    pub(crate) fn get(&self, key: Key) -> Option<&T> {
        let index = self.arena.resolve(key)?;
        Some(self.arena.value(index))
    }

    pub(crate) fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        let index = self.arena.resolve(key)?;
        Some(self.arena.value_mut(index))
    }

    /// The tick `key`'s entry is (or was last) scheduled for.
    pub(crate) fn tick(&self, key: Key) -> Option<u64> {
        let index = self.arena.resolve(key)?;
        Some(self.arena.get(index).tick)
    }

    /// Whether `key` is live and scheduled (not yet returned by `poll`).
    pub(crate) fn is_scheduled(&self, key: Key) -> bool {
        self.arena
            .resolve(key)
            .is_some_and(|i| self.arena.get(i).bucket != DETACHED)
    }

    /// Keys of every allocated entry, scheduled or not.
    pub(crate) fn keys(&self) -> Vec<Key> {
        self.arena
            .live_indices()
            .map(|i| self.arena.key_of(i))
            .collect()
    }

    /// Advances time to `now` and returns the next entry whose tick is at or before it,
    /// detached but still allocated (free it with `try_remove` or schedule it again).
    /// Returns `None`, with `elapsed == now`, once nothing more is due. A `now` behind
    /// `elapsed` does not move time back.
    pub(crate) fn poll(&mut self, now: u64) -> Option<Key> {
        let now = now.min(MAX_TICK);
        loop {
            let due = self.due_head();
            let head = self.heads[due];
            if head != arena::NIL {
                self.unlink(head);
                return Some(self.arena.key_of(head));
            }
            match self.next_bucket() {
                Some(exp) if exp.deadline <= now => {
                    self.elapsed = self.elapsed.max(exp.deadline);
                    self.process(exp);
                }
                _ => {
                    self.elapsed = self.elapsed.max(now);
                    return None;
                }
            }
        }
    }

    /// The earliest tick at which `poll` has work: `elapsed` if something is due, the start
    /// of the first occupied bucket otherwise, `None` when nothing is scheduled. It may be
    /// earlier than every entry's tick (a bucket to cascade), never later.
    pub(crate) fn next_expiration(&self) -> Option<u64> {
        if self.heads[self.due_head()] != arena::NIL {
            return Some(self.elapsed);
        }
        self.next_bucket().map(|e| e.deadline)
    }

    /// The key of an entry that `poll` would hand out first: one from the due list if any
    /// is due, else the earliest-tick entry of the first occupied bucket (a scan of that
    /// bucket only). `None` when nothing is scheduled.
    pub(crate) fn peek(&self) -> Option<Key> {
        let due = self.heads[self.due_head()];
        if due != arena::NIL {
            return Some(self.arena.key_of(due));
        }
        let exp = self.next_bucket()?;
        let mut index = self.heads[self.bucket_index(exp.level, exp.slot)];
        let mut best = index;
        while index != arena::NIL {
            let entry = self.arena.get(index);
            if entry.tick < self.arena.get(best).tick {
                best = index;
            }
            index = entry.next;
        }
        Some(self.arena.key_of(best))
    }

    /// Number of allocated entries, scheduled or detached.
    pub(crate) fn allocated(&self) -> usize {
        self.arena.live()
    }

    /// Entries the arena holds room for without growing.
    pub(crate) fn capacity(&self) -> usize {
        self.arena.capacity()
    }

    /// Makes room for `additional` more entries without growing later.
    pub(crate) fn reserve(&mut self, additional: usize) {
        self.arena.reserve(additional);
    }

    /// Gives back the arena's spare room: everything when no entry is allocated (keys stay
    /// stale: generations keep counting up), else the slots never allocated (freed slots
    /// stay in the free list, since keys name them by index).
    pub(crate) fn shrink_to_fit(&mut self) {
        self.arena.shrink_to_fit();
    }

    /// Gives back every free slot past the last allocated entry; keys of allocated entries
    /// stay valid and stale keys stay stale.
    pub(crate) fn compact(&mut self) {
        self.arena.compact();
    }

    // ----- internals -----

    fn due_head(&self) -> usize {
        self.heads.len() - 1
    }

    fn shift(&self, level: usize) -> u32 {
        if level == 0 {
            0
        } else {
            self.bits0 + UPPER_BITS * (level as u32 - 1)
        }
    }

    fn level_bits(&self, level: usize) -> u32 {
        if level == 0 {
            self.bits0
        } else {
            UPPER_BITS
        }
    }

    fn bucket_index(&self, level: usize, slot: usize) -> usize {
        self.levels[level].base as usize + slot
    }

    /// The level of the highest bit in which a tick strictly after `elapsed` differs from
    /// it.
    #[inline]
    fn level_of(&self, tick: u64) -> Level {
        debug_assert!(tick > self.elapsed);
        let low0 = (1u64 << self.bits0) - 1;
        let masked = (self.elapsed ^ tick) | low0;
        self.levels[usize::from(self.places[(63 - masked.leading_zeros()) as usize & 63])]
    }

    /// Level and slot for a tick strictly after `elapsed`.
    #[cfg(test)]
    fn place(&self, tick: u64) -> (usize, usize) {
        let level = self.level_of(tick);
        let index = self.levels.iter().position(|l| l.base == level.base);
        let slot = (tick >> level.shift) & level.mask;
        (index.expect("a level of the wheel"), slot as usize)
    }

    #[inline(always)]
    fn link(&mut self, index: u32) {
        let tick = self.arena.get(index).tick;
        let bucket = if tick <= self.elapsed {
            self.due_head()
        } else {
            let level = self.level_of(tick);
            let bucket = level.base as usize + ((tick >> level.shift) & level.mask) as usize;
            self.occupied.set(bucket);
            bucket
        };
        let mut head = self.heads[bucket];
        self.arena.push(&mut head, bucket as u32, index);
        self.heads[bucket] = head;
        self.scheduled += 1;
    }

    #[inline(always)]
    fn unlink(&mut self, index: u32) {
        let bucket = self.arena.get(index).bucket;
        if bucket == DETACHED {
            return;
        }
        let bucket = bucket as usize;
        let mut head = self.heads[bucket];
        self.arena.unlink(&mut head, index);
        self.heads[bucket] = head;
        self.scheduled -= 1;
        if head == arena::NIL {
            // The due list's bit is never set; clearing it is harmless.
            self.occupied.clear(bucket);
        }
    }

    /// Level and slot of a bucket (a list head's index).
    #[cfg(test)]
    fn bucket_position(&self, bucket: usize) -> (usize, usize) {
        let level = self
            .levels
            .iter()
            .rposition(|l| l.base as usize <= bucket)
            .expect("level 0 starts at 0");
        (level, bucket - self.levels[level].base as usize)
    }

    /// The first occupied bucket of `level` at or after `from` in the level's current
    /// rotation, as a slot of the level.
    fn level_next_set(&self, level: usize, from: usize) -> Option<usize> {
        let l = self.levels[level];
        let slot = self.occupied.next_set(l.base as usize + from)? - l.base as usize;
        (slot as u64 <= l.mask).then_some(slot)
    }

    /// The first occupied bucket, lowest level first (a lower level's buckets all come due
    /// before any bucket of a higher level).
    fn next_bucket(&self) -> Option<Expiration> {
        (0..self.levels.len()).find_map(|level| {
            let shift = self.shift(level);
            let span = shift + self.level_bits(level);
            let now_slot =
                ((self.elapsed >> shift) & ((1u64 << self.level_bits(level)) - 1)) as usize;
            let slot = self.level_next_set(level, now_slot)?;
            let rotation_start = self.elapsed & !low_mask(span);
            let deadline = rotation_start + ((slot as u64) << shift);
            debug_assert!(deadline >= self.elapsed);
            Some(Expiration {
                level,
                slot,
                deadline,
            })
        })
    }

    /// Empties a bucket whose start has been reached: entries now due go to the due list, the
    /// rest cascade to a lower level.
    fn process(&mut self, exp: Expiration) {
        let bucket = self.bucket_index(exp.level, exp.slot);
        let mut next = std::mem::replace(&mut self.heads[bucket], arena::NIL);
        self.occupied.clear(bucket);
        while next != arena::NIL {
            let index = next;
            let entry = self.arena.get_mut(index);
            next = entry.next;
            entry.next = arena::NIL;
            entry.prev = arena::NIL;
            entry.bucket = DETACHED;
            self.scheduled -= 1;
            self.link(index);
        }
    }
}

/// The low `bits` bits set (all of them from 64 up).
fn low_mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}
