//! Test-only views of the wheel, for its unit tests and the loom models: kept out of the
//! production API.

use super::{Key, Wheel, MAX_TICK};

impl<T> Wheel<T> {
    /// Takes `key`'s entry out of its bucket without freeing it; `false` if the key is stale.
    pub(crate) fn unschedule(&mut self, key: Key) -> bool {
        let Some(index) = self.arena.resolve(key) else {
            return false;
        };
        self.unlink(index);
        true
    }

    /// Allocates a detached entry: it holds `value` and `tick` but is not scheduled until
    /// [`Wheel::reschedule`].
    #[track_caller]
    pub(crate) fn insert_detached(&mut self, tick: u64, value: T) -> Key {
        self.arena.alloc(tick.min(MAX_TICK), value)
    }
}
