//! Test-only views of the shared state, for unit tests and the loom models: kept out of the
//! production API.

use super::Global;
#[cfg(wheel_loom)]
use super::ShardCounters;
use crate::loom::Ordering;
use crate::wheel::Key;

impl Global {
    /// Allocated task entries and the `max_pending` count.
    pub(crate) fn task_counts(&self) -> (usize, Option<usize>) {
        (
            self.tasks.load(Ordering::SeqCst),
            self.limit.as_ref().map(|l| l.count.load(Ordering::SeqCst)),
        )
    }

    /// The tick task `key` of shard `index` is scheduled for, if still allocated.
    #[cfg_attr(wheel_loom, allow(dead_code))]
    pub(crate) fn task_tick(&self, index: usize, key: Key) -> Option<u64> {
        self.shards[index].lock().tasks.tick(key)
    }

    /// The tick the driver will wake at next (`u64::MAX` when parked).
    pub(crate) fn next_wake(&self) -> u64 {
        self.next_wake.load(Ordering::Acquire)
    }
}

/// What only the loom models read.
#[cfg(wheel_loom)]
impl Global {
    /// Sleep entries allocated in all shards (scheduled, or fired and not yet freed).
    pub(crate) fn allocated_sleeps(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().sleeps.allocated())
            .sum()
    }

    /// Shard `index`'s sleep wheel `elapsed`, read under the lock.
    pub(crate) fn elapsed(&self, index: usize) -> u64 {
        self.shards[index].lock().sleeps.elapsed()
    }

    /// Shard `index`'s lock-free `elapsed` mirror.
    pub(crate) fn mirror(&self, index: usize) -> u64 {
        self.shards[index].elapsed.load(Ordering::Acquire)
    }

    pub(crate) fn counters(&self, index: usize) -> ShardCounters {
        self.shards[index].lock().counters
    }

    /// The ticks of every scheduled sleep, per shard.
    pub(crate) fn scheduled_sleep_ticks(&self) -> Vec<Vec<u64>> {
        self.shards
            .iter()
            .map(|shard| {
                let core = shard.lock();
                let sleeps = &core.sleeps;
                sleeps
                    .keys()
                    .into_iter()
                    .filter(|&key| sleeps.is_scheduled(key))
                    .filter_map(|key| sleeps.tick(key))
                    .collect()
            })
            .collect()
    }
}
