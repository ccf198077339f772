//! Time for every part of the crate: deadlines as nanoseconds from a timer's start, their
//! saturation, and the mapping of those nanoseconds to ticks.
//!
//! # Ground rules
//! - A deadline is kept as nanoseconds since the timer's start in 62 bits ([`MAX_NANOS`],
//!   146 years); every conversion from a `Duration` or an `Instant` saturates there, so
//!   `Duration::MAX` is a deadline 146 years out, never an overflow.
//! - Ticks round up: a deadline inside a tick belongs to the next tick boundary, so nothing
//!   fires early. The timer's wheels and the idle tracker use these helpers and no copies.

use tokio::time::Instant;

use crate::loom::{AtomicU64, Ordering};
use crate::wheel::MAX_TICK;

/// Maps tokio instants to wheel ticks.
///
/// Tick `t` starts `phase + t * tick_ns` nanoseconds after `start`. The driver waits with
/// tokio's own timer, which only wakes on its 1 ms grid; a tick boundary off that grid would
/// be rounded up to the next grid point, adding up to a millisecond to every expiry. So the
/// driver measures the grid's offset once, before its first turn, and sets `phase` to it
/// (`Clock::calibrate`). `phase` only ever grows, and only before the wheels' time first moves:
/// a tick computed with the old phase then starts later than it did, never earlier.
#[derive(Debug)]
pub(crate) struct Clock {
    pub(crate) start: Instant,
    pub(crate) tick_ns: u64,
    /// `u64::MAX / tick_ns`: divides by a multiply on the sleep hot path.
    recip: u64,
    phase: AtomicU64,
}

impl Clock {
    pub(crate) fn new(start: Instant, tick_ns: u64) -> Clock {
        assert!(tick_ns > 0);
        Clock {
            start,
            tick_ns,
            recip: u64::MAX / tick_ns,
            phase: AtomicU64::new(0),
        }
    }

    /// Nanoseconds from the start to `deadline`: 0 for earlier instants, saturated at
    /// [`MAX_NANOS`].
    pub(crate) fn nanos(&self, deadline: Instant) -> u64 {
        duration_nanos(deadline.saturating_duration_since(self.start))
    }

    fn phase(&self) -> u64 {
        // Relaxed: a reader that still sees the old (smaller) phase computes a tick whose
        // start can only move later once the new phase is in force.
        self.phase.load(Ordering::Relaxed)
    }

    /// `(nanos / tick_ns, nanos % tick_ns)` by multiplication: the reciprocal's estimate is
    /// at most one short, fixed by one comparison.
    fn div(&self, nanos: u64) -> (u64, u64) {
        let mut q = ((u128::from(nanos) * u128::from(self.recip)) >> 64) as u64;
        let mut r = nanos - q * self.tick_ns;
        if r >= self.tick_ns {
            q += 1;
            r -= self.tick_ns;
        }
        debug_assert_eq!((q, r), (nanos / self.tick_ns, nanos % self.tick_ns));
        (q, r)
    }

    /// The first tick that starts at or after `nanos`: sub-tick delays round up, so a timer
    /// never fires early.
    pub(crate) fn tick_at_or_after(&self, nanos: u64) -> u64 {
        let (q, r) = self.div(nanos.saturating_sub(self.phase()));
        (q + u64::from(r != 0)).min(MAX_TICK)
    }

    /// The tick `now` falls in (tick 0 before the first boundary).
    pub(crate) fn tick_of(&self, now: Instant) -> u64 {
        let ns = self.nanos(now).saturating_sub(self.phase());
        self.div(ns).0.min(MAX_TICK)
    }

    pub(crate) fn now_tick(&self) -> u64 {
        self.tick_of(Instant::now())
    }

    pub(crate) fn instant(&self, nanos: u64) -> Instant {
        self.start + std::time::Duration::from_nanos(nanos)
    }

    /// Nanoseconds from the start to the start of `tick`, saturated at [`MAX_NANOS`].
    pub(crate) fn tick_start_nanos(&self, tick: u64) -> u64 {
        tick.saturating_mul(self.tick_ns)
            .saturating_add(self.phase())
            .min(MAX_NANOS)
    }

    /// The instant tick `tick` starts at, saturating far in the future.
    pub(crate) fn tick_start(&self, tick: u64) -> Instant {
        self.instant(self.tick_start_nanos(tick))
    }
}

/// How far before the measured grid point tick boundaries are put: the measurement includes
/// the driver's own wake-up delay, and a boundary just after a grid point would wait for the
/// next one.
const CALIBRATION_MARGIN_NS: u64 = 200_000;
/// tokio's timer resolution.
const TOKIO_GRID_NS: u64 = 1_000_000;

impl Clock {
    /// A 1 ns tokio sleep: it wakes on the first point of tokio's grid, which
    /// [`Clock::calibrate`] then measures. `None` for ticks that are not whole milliseconds
    /// (their boundaries cannot all sit on tokio's grid).
    pub(crate) fn calibration(&self) -> Option<tokio::time::Sleep> {
        (self.tick_ns % TOKIO_GRID_NS == 0)
            .then(|| tokio::time::sleep(std::time::Duration::from_nanos(1)))
    }

    /// Sets the phase from the calibration sleep's wake-up, now: its offset from the timer's
    /// own millisecond grid, less a margin. Only while `time_moved` is false (see [`Clock`]).
    pub(crate) fn calibrate(&self, time_moved: bool) {
        if !time_moved {
            let offset = self.nanos(Instant::now()) % TOKIO_GRID_NS;
            let phase = offset.saturating_sub(CALIBRATION_MARGIN_NS);
            self.phase.store(phase, Ordering::Relaxed);
        }
    }
}

/// `d` in nanoseconds, saturated at [`MAX_NANOS`].
pub(crate) fn duration_nanos(d: std::time::Duration) -> u64 {
    d.as_secs()
        .checked_mul(1_000_000_000)
        .and_then(|ns| ns.checked_add(u64::from(d.subsec_nanos())))
        .map_or(MAX_NANOS, |ns| ns.min(MAX_NANOS))
}

/// Deadlines are kept as nanoseconds from the timer's start in 62 bits (146 years).
pub(crate) const MAX_NANOS: u64 = (1 << 62) - 1;

/// Shards a timer or tracker gets by default: four per CPU (so threads rarely share one),
/// a power of two (trackers pick a shard by masking a hash), at most `max`.
pub(crate) fn default_shards(max: usize) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cpus * 4).next_power_of_two().min(max)
}
