//! Slab of wheel entries with generational keys and intrusive bucket lists.
//!
//! Ground rules:
//! - An entry is *allocated* from `alloc` until `free`; a freed slot joins the free list (linked
//!   through `next`) and its generation is bumped, so a [`Key`] from before never matches again
//!   (until the 32-bit generation wraps; owners that can outlive that check identity themselves).
//! - `bucket` says where an allocated entry is linked: a bucket index, [`DETACHED`] (allocated but
//!   in no list: popped by `Wheel::poll`), or [`FREE`] (on the free list).
//! - Lists are doubly linked through `next`/`prev` arena indices with [`NIL`] as the end; the
//!   arena never moves an entry, so a `Key` stays valid across growth.

/// End of a list.
pub(crate) const NIL: u32 = u32::MAX;
/// `bucket` of a slot on the free list.
pub(super) const FREE: u32 = u32::MAX;
/// `bucket` of an allocated entry that is in no list.
pub(super) const DETACHED: u32 = u32::MAX - 1;
/// Largest number of live entries one arena holds.
pub(crate) const MAX_ENTRIES: usize = (u32::MAX - 1) as usize;

/// Names one allocated entry. Stale keys (entry freed, slot maybe reused) never match.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    /// The generation in the high half, the index in the low half: one word, so that a key
    /// is always stored and loaded whole (a key stored as two halves and loaded as one word,
    /// as a struct copy does, stalls the load).
    bits: u64,
}

impl Key {
    /// A key that never names a live entry, for owners that have not allocated yet.
    pub(crate) const DANGLING: Key = Key::new(NIL, 0);

    const fn new(index: u32, generation: u32) -> Key {
        Key {
            bits: (generation as u64) << 32 | index as u64,
        }
    }

    pub(crate) fn index(self) -> u32 {
        self.bits as u32
    }

    fn generation(self) -> u32 {
        (self.bits >> 32) as u32
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("index", &self.index())
            .field("generation", &self.generation())
            .finish()
    }
}

#[derive(Debug)]
pub(super) struct Entry<T> {
    pub(super) next: u32,
    pub(super) prev: u32,
    pub(super) bucket: u32,
    generation: u32,
    pub(super) tick: u64,
    /// `Some` while allocated, `None` on the free list (so `T` needs no `Default`).
    value: Option<T>,
}

#[derive(Debug)]
pub(super) struct Arena<T> {
    entries: Vec<Entry<T>>,
    free_head: u32,
    /// Allocated entries.
    pub(super) live: usize,
    /// Generation of entries pushed from now on: above every generation a freed entry ever
    /// had, so that releasing an empty arena's memory cannot make an old key live again.
    generation_floor: u32,
}

// ===== impl Arena =====

impl<T> Arena<T> {
    pub(super) fn new() -> Self {
        Arena {
            entries: Vec::new(),
            free_head: NIL,
            live: 0,
            generation_floor: 0,
        }
    }

    /// Number of allocated entries.
    pub(super) fn live(&self) -> usize {
        self.live
    }

    /// Entries the arena holds room for without growing.
    pub(super) fn capacity(&self) -> usize {
        self.entries.capacity()
    }

    pub(super) fn reserve(&mut self, additional: usize) {
        self.entries.reserve(additional);
    }

    /// Gives back spare room. An empty arena gives back everything: the floor is raised
    /// past every generation handed out, so keys stay stale when slots are pushed again.
    pub(super) fn shrink_to_fit(&mut self) {
        if self.live == 0 {
            let highest = self.entries.iter().map(|e| e.generation).max();
            if let Some(highest) = highest {
                self.generation_floor = self.generation_floor.max(highest).wrapping_add(1);
            }
            self.entries = Vec::new();
            self.free_head = NIL;
        } else {
            self.entries.shrink_to_fit();
        }
    }

    /// Drops the free slots past the last allocated one (no live key names them; the floor
    /// is raised past their generations so stale keys stay stale), rebuilds the free list
    /// lowest slot first so reuse fills the arena from the bottom, and gives back the room.
    pub(super) fn compact(&mut self) {
        let keep = self
            .entries
            .iter()
            .rposition(|e| e.bucket != FREE)
            .map_or(0, |last| last + 1);
        if let Some(highest) = self.entries[keep..].iter().map(|e| e.generation).max() {
            self.generation_floor = self.generation_floor.max(highest).wrapping_add(1);
        }
        self.entries.truncate(keep);
        self.free_head = NIL;
        for index in (0..keep).rev() {
            let entry = &mut self.entries[index];
            if entry.bucket == FREE {
                entry.next = self.free_head;
                self.free_head = index as u32;
            }
        }
        self.entries.shrink_to_fit();
    }

    /// Allocates a detached entry.
    ///
    /// # Panics
    ///
    /// When [`MAX_ENTRIES`] entries are live.
    #[track_caller]
    #[inline]
    pub(super) fn alloc(&mut self, tick: u64, value: T) -> Key {
        if self.free_head == NIL {
            return self.alloc_new(tick, value);
        }
        let index = self.free_head;
        let entry = &mut self.entries[index as usize];
        self.free_head = entry.next;
        entry.next = NIL;
        entry.prev = NIL;
        entry.bucket = DETACHED;
        entry.tick = tick;
        entry.value = Some(value);
        self.live += 1;
        Key::new(index, entry.generation)
    }

    /// [`alloc`](Self::alloc) with an empty free list: a new slot at the end (kept out of
    /// line, so that reusing a freed slot, the steady state, stays small).
    #[cold]
    #[inline(never)]
    #[track_caller]
    fn alloc_new(&mut self, tick: u64, value: T) -> Key {
        assert!(
            self.entries.len() < MAX_ENTRIES,
            "wheel-timer: more than {MAX_ENTRIES} timers in one shard"
        );
        self.entries.push(Entry {
            next: NIL,
            prev: NIL,
            bucket: DETACHED,
            generation: self.generation_floor,
            tick,
            value: Some(value),
        });
        self.live += 1;
        Key::new((self.entries.len() - 1) as u32, self.generation_floor)
    }

    /// Frees a detached entry and returns its value.
    #[inline]
    pub(super) fn free(&mut self, index: u32) -> T {
        let entry = &mut self.entries[index as usize];
        debug_assert_eq!(entry.bucket, DETACHED, "free of a linked entry");
        entry.bucket = FREE;
        entry.generation = entry.generation.wrapping_add(1);
        entry.next = self.free_head;
        self.free_head = index;
        self.live -= 1;
        entry
            .value
            .take()
            .expect("an allocated entry holds a value")
    }

    /// The index of `key`'s entry if the key is live.
    #[inline]
    pub(super) fn resolve(&self, key: Key) -> Option<u32> {
        match self.entries.get(key.index() as usize) {
            Some(e) if e.generation == key.generation() && e.bucket != FREE => Some(key.index()),
            _ => None,
        }
    }

    pub(super) fn key_of(&self, index: u32) -> Key {
        Key::new(index, self.entries[index as usize].generation)
    }

    pub(super) fn get(&self, index: u32) -> &Entry<T> {
        &self.entries[index as usize]
    }

    pub(super) fn get_mut(&mut self, index: u32) -> &mut Entry<T> {
        &mut self.entries[index as usize]
    }

    /// The value of the allocated entry `index`.
    pub(super) fn value(&self, index: u32) -> &T {
        self.entries[index as usize]
            .value
            .as_ref()
            .expect("an allocated entry holds a value")
    }

    #[inline]
    pub(super) fn value_mut(&mut self, index: u32) -> &mut T {
        self.entries[index as usize]
            .value
            .as_mut()
            .expect("an allocated entry holds a value")
    }

    /// Indices of all allocated entries.
    pub(super) fn live_indices(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.bucket != FREE)
            .map(|(i, _)| i as u32)
    }

    /// Pushes the detached entry `index` onto the list whose head is `*head`.
    #[inline]
    pub(super) fn push(&mut self, head: &mut u32, bucket: u32, index: u32) {
        let old = *head;
        {
            let entry = &mut self.entries[index as usize];
            debug_assert_eq!(entry.bucket, DETACHED);
            entry.bucket = bucket;
            entry.prev = NIL;
            entry.next = old;
        }
        if old != NIL {
            self.entries[old as usize].prev = index;
        }
        *head = index;
    }

    /// Unlinks `index` from the list whose head is `*head`; the entry becomes detached.
    #[inline]
    pub(super) fn unlink(&mut self, head: &mut u32, index: u32) {
        let (prev, next) = {
            let entry = &mut self.entries[index as usize];
            let links = (entry.prev, entry.next);
            entry.prev = NIL;
            entry.next = NIL;
            entry.bucket = DETACHED;
            links
        };
        if prev == NIL {
            debug_assert_eq!(*head, index);
            *head = next;
        } else {
            self.entries[prev as usize].next = next;
        }
        if next != NIL {
            self.entries[next as usize].prev = prev;
        }
    }
}
