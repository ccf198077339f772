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
/// tokio's own timer, which rounds every deadline up to a point of its 1 ms grid; a tick
/// boundary just after a grid point would be rounded up to the next one, adding up to a
/// millisecond to every expiry. So the driver finds the grid first ([`GridProbe`], about a
/// millisecond) and sets `phase` to put tick boundaries on it. Until then the driver's clock
/// stands at tick 0 ([`Clock::driver_tick`]): nothing fires (an entry due meanwhile fires
/// right after, late by at most the probe's time, never early), so the wheels' time has not
/// moved when `phase` is set, and `phase` only grows (0 to its value): a tick computed with
/// the old phase starts later than it did, never earlier.
#[derive(Debug)]
pub(crate) struct Clock {
    pub(crate) start: Instant,
    pub(crate) tick_ns: u64,
    /// `u64::MAX / tick_ns`: divides by a multiply on the sleep hot path.
    recip: u64,
    phase: AtomicU64,
    /// 0 until the phase is settled; the driver's clock stands at tick 0 until then.
    settled: AtomicU64,
}

impl Clock {
    pub(crate) fn new(start: Instant, tick_ns: u64) -> Clock {
        assert!(tick_ns > 0);
        Clock {
            start,
            tick_ns,
            recip: u64::MAX / tick_ns,
            phase: AtomicU64::new(0),
            settled: AtomicU64::new(0),
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

    /// The tick the driver turns to now: tick 0 until the phase is settled.
    pub(crate) fn driver_tick(&self) -> u64 {
        if self.settled.load(Ordering::Acquire) == 0 {
            return 0;
        }
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

/// tokio's timer resolution.
const TOKIO_GRID_NS: u64 = 1_000_000;
/// tokio sleeps one grid probe registers, spread evenly over one grid period: the phase is
/// found to within `TOKIO_GRID_NS / PROBES` (16 µs).
const PROBES: u64 = 64;
/// Probes tried before giving up on the phase (keeping 0).
const PROBE_TRIES: u32 = 3;

/// Finds where tokio's 1 ms timer grid lies (see [`Clock`]).
///
/// tokio's time driver rounds a deadline up to the next point of a 1 ms grid counted from its
/// own (private) start instant, and fires it at the first park that ends at or after that
/// point. The probe registers [`PROBES`] tokio sleeps at `c + (j + ½)·δ` (`δ = 1 ms /
/// PROBES`, `c` = now) and waits for the first to fire: tokio processes one grid point `g` at
/// a time, so the ones that fire together are exactly those at or before `g`, and `g` lies
/// between the last of them and the first that did not. Processing can come a whole grid
/// period late (a park that began just before `g`), which fires every probe; that result is
/// only trusted if it came within a period of the first probe, else the probe is retried.
/// The boundary is put at the last probe that fired: at or just before `g`, never after it
/// (a wheel tick starting just after a grid point would wait a whole extra period).
#[derive(Debug)]
pub(crate) struct GridProbe {
    sleeps: Vec<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// Nanoseconds from the timer's start of the first probe.
    first: u64,
    tries: u32,
}

impl Clock {
    /// Starts finding tokio's grid, or settles the phase at 0 at once when that is pointless:
    /// ticks that are not whole milliseconds (their boundaries cannot all sit on the grid)
    /// and paused clocks (tests: time only moves when told, and the timer's start lies on
    /// tokio's grid unless the test advanced by a fraction of a millisecond first).
    pub(crate) fn probe_grid(&self) -> Option<GridProbe> {
        if self.tick_ns % TOKIO_GRID_NS != 0 || clock_is_paused() {
            self.settle(0);
            return None;
        }
        let mut probe = GridProbe {
            sleeps: Vec::with_capacity(PROBES as usize),
            first: 0,
            tries: 0,
        };
        self.arm(&mut probe);
        Some(probe)
    }

    fn arm(&self, probe: &mut GridProbe) {
        let step = TOKIO_GRID_NS / PROBES;
        let now = Instant::now();
        probe.first = self.nanos(now) + step / 2;
        probe.sleeps.clear();
        probe.sleeps.extend((0..PROBES).map(|j| {
            let at = now + std::time::Duration::from_nanos(step / 2 + j * step);
            Box::pin(tokio::time::sleep_until(at))
        }));
        probe.tries += 1;
    }

    /// Polls the probe; `Ready` once the phase is settled (found, or given up on).
    pub(crate) fn poll_probe(
        &self,
        probe: &mut GridProbe,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        use std::future::Future;
        let ready: Vec<bool> = probe
            .sleeps
            .iter_mut()
            .map(|s| s.as_mut().poll(cx).is_ready())
            .collect();
        let Some(last) = ready.iter().rposition(|&r| r) else {
            return std::task::Poll::Pending;
        };
        let step = TOKIO_GRID_NS / PROBES;
        let seen = self.nanos(Instant::now());
        let all = last as u64 == PROBES - 1;
        if !all || seen < probe.first + TOKIO_GRID_NS {
            let boundary = probe.first + last as u64 * step;
            self.settle(boundary % TOKIO_GRID_NS);
            return std::task::Poll::Ready(());
        }
        if probe.tries >= PROBE_TRIES {
            self.settle(0);
            return std::task::Poll::Ready(());
        }
        self.arm(probe);
        self.poll_probe(probe, cx)
    }

    /// Sets the phase and lets the driver's clock move (see [`Clock::driver_tick`]).
    fn settle(&self, phase: u64) {
        self.phase.store(phase, Ordering::Relaxed);
        self.settled.store(1, Ordering::Release);
    }
}

/// Whether tokio's clock is paused: it stands still while the real one moves.
fn clock_is_paused() -> bool {
    let before = Instant::now();
    let real = std::time::Instant::now();
    while real.elapsed() < std::time::Duration::from_micros(2) {
        std::hint::spin_loop();
    }
    Instant::now() == before
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
