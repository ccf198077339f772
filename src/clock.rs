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
/// millisecond to every expiry. So the driver finds the grid first ([`GridProbe`], two to three
/// milliseconds) and sets `phase` to put tick boundaries on it (at most 1 µs before). Until then the driver's clock
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
    /// `UNSETTLED`, `SETTLING`, then `SETTLED` once the phase is set; the driver's clock
    /// stands at tick 0 until then.
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
            settled: AtomicU64::new(UNSETTLED),
        }
    }

    /// Nanoseconds from the start to `deadline`: 0 for earlier instants, saturated at
    /// [`MAX_NANOS`].
    #[inline]
    pub(crate) fn nanos(&self, deadline: Instant) -> u64 {
        duration_nanos(deadline.saturating_duration_since(self.start))
    }

    /// Nanoseconds from the start to `duration` after `now`, saturated at [`MAX_NANOS`]: the
    /// deadline of a sleep or task made at `now`.
    ///
    /// One sum in `u128` and one saturation: this runs for every sleep and timeout.
    #[inline]
    pub(crate) fn nanos_after(&self, now: Instant, duration: std::time::Duration) -> u64 {
        let sum = now.saturating_duration_since(self.start).as_nanos() + duration.as_nanos();
        saturate(sum)
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
        if self.settled.load(Ordering::Acquire) != SETTLED {
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

const UNSETTLED: u64 = 0;
const SETTLING: u64 = 1;
const SETTLED: u64 = 2;

/// tokio's timer resolution.
const TOKIO_GRID_NS: u64 = 1_000_000;
/// tokio sleeps a probe's first round registers, spread evenly over one grid period (16 µs
/// apart).
const PROBES: u64 = 64;
/// tokio sleeps of the second round, spread over the first round's 16 µs (1 µs apart).
const FINE_PROBES: u64 = 16;
/// Rounds tried (first and second together) before settling for what is known.
const PROBE_TRIES: u32 = 5;
/// How far ahead of now a round's first sleep lies at least.
const PROBE_LEAD_NS: u64 = 100_000;

/// Finds where tokio's 1 ms timer grid lies (see [`Clock`]).
///
/// tokio's time driver rounds a deadline up to the next point of a 1 ms grid counted from its
/// own (private) start instant, and fires it at the first park that ends at or after that
/// point. A round registers `n` tokio sleeps spread evenly over an interval known to hold a
/// grid point (shifted by whole periods into the future) and waits for the first to fire:
/// tokio processes one grid point `g` at a time, so the ones that fire together are exactly
/// those at or before `g`, and `g` lies between the last of them and the first that did not.
/// Processing can come a whole period late (a park that began just before `g`), which fires
/// every sleep; that result is only trusted if it came within a period of the round's first
/// sleep, else the round is retried. The first round spans a whole period
/// ([`PROBES`], 16 µs apart), the second the 16 µs it found ([`FINE_PROBES`], 1 µs apart).
/// The boundary is put at the last sleep that fired: at or just before `g`, never after it
/// (a wheel tick starting just after a grid point would wait a whole extra period).
#[derive(Debug, Default)]
pub(crate) struct GridProbe {
    sleeps: Vec<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// Nanoseconds from the timer's start of the round's first sleep.
    first: u64,
    /// Nanoseconds between the round's sleeps.
    step: u64,
    /// Whether this is the second round.
    fine: bool,
    tries: u32,
    /// On a paused clock: the instant of the round's first sleep (see [`Clock::arm_paused`]).
    paused: Option<Instant>,
    /// On a paused clock, in a first round: the instant the round was armed at (its last
    /// sleep's).
    armed_at: Option<Instant>,
}

impl GridProbe {
    /// Polls the round's sleeps: `None` while none has fired, else the index of the last one
    /// that did and whether they all did.
    fn poll_round(&mut self, cx: &mut std::task::Context<'_>) -> Option<(usize, bool)> {
        use std::future::Future;
        let ready: Vec<bool> = self
            .sleeps
            .iter_mut()
            .map(|s| s.as_mut().poll(cx).is_ready())
            .collect();
        let last = ready.iter().rposition(|&r| r)?;
        Some((last, last == ready.len() - 1))
    }
}

/// Sleeps per round on a paused clock (plus one at the round's start).
const PAUSED_PROBES: u64 = 32;

impl Clock {
    /// Starts finding tokio's grid, or settles the phase at 0 at once for ticks that are not
    /// whole milliseconds (their boundaries cannot all sit on the grid).
    pub(crate) fn probe_grid(&self) -> Option<GridProbe> {
        if self.settled.load(Ordering::Acquire) != UNSETTLED {
            return None;
        }
        if self.tick_ns % TOKIO_GRID_NS != 0 {
            self.settle(0);
            return None;
        }
        let mut probe = GridProbe::default();
        if clock_is_paused() {
            self.arm_paused(&mut probe, None, TOKIO_GRID_NS);
        } else {
            let now = self.nanos(Instant::now());
            self.arm(&mut probe, now, TOKIO_GRID_NS, PROBES);
        }
        Some(probe)
    }

    /// Finds the grid at once on a paused clock, when tokio has processed up to now (so the
    /// probe's sleeps fire as they are registered): then the timer is settled before its
    /// driver first runs, and a test's first `advance` already moves the wheel. Returns
    /// whether it settled; if not, the driver's probe ([`Clock::probe_grid`]) does it.
    pub(crate) fn settle_if_paused(&self) -> bool {
        if self.tick_ns % TOKIO_GRID_NS != 0 || !clock_is_paused() {
            return false;
        }
        let mut probe = GridProbe::default();
        self.arm_paused(&mut probe, None, TOKIO_GRID_NS);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        self.poll_paused(&mut probe, &mut cx).is_ready()
    }

    /// On a paused clock a probe must not wait for time, which moves only when told (and
    /// its sleeps must not make auto-advance jump): each round's sleeps lie in the past,
    /// `PAUSED_PROBES + 1` of them from `lo`, `step` apart (the first round over the last
    /// millisecond). tokio fires at its next park, without moving the clock, exactly those at
    /// or before the last grid point it processed, so each round narrows the grid point
    /// 32-fold, down to the nanosecond. The first sleep lies at or before that point and
    /// fires too, which tells a round that tokio has processed.
    ///
    /// `step` rounds up, so the sleeps reach at least `lo + width`: a narrowing round's
    /// interval `[lo, lo + width)` holds the grid point, so its last sleep lies beyond it and
    /// fires only if the clock was advanced meanwhile; then the probe starts over from now.
    /// Rounded down (976 ns apart over 31,250 ns, 30 over 976), the sleeps stopped short of
    /// the interval's end, all of them fired at about one clock offset in sixty, and the
    /// probe started over from the same clock forever (a livelock inside `Builder::build`
    /// or the driver task).
    fn arm_paused(&self, probe: &mut GridProbe, lo: Option<Instant>, width: u64) {
        probe.armed_at = None;
        let lo = lo.unwrap_or_else(|| {
            let now = Instant::now();
            probe.armed_at = Some(now);
            now.checked_sub(std::time::Duration::from_nanos(width))
                .unwrap_or(now)
        });
        let step = width.div_ceil(PAUSED_PROBES).max(1);
        probe.paused = Some(lo);
        probe.step = step;
        probe.sleeps.clear();
        probe.sleeps.extend((0..=PAUSED_PROBES).map(|j| {
            let at = lo + std::time::Duration::from_nanos(j * step);
            Box::pin(tokio::time::sleep_until(at))
        }));
    }

    /// [`Clock::poll_probe`] on a paused clock.
    fn poll_paused(
        &self,
        probe: &mut GridProbe,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        loop {
            let Some(lo) = probe.paused else {
                return std::task::Poll::Ready(());
            };
            let Some((last, all)) = probe.poll_round(cx) else {
                return std::task::Poll::Pending;
            };
            let at = lo + std::time::Duration::from_nanos(last as u64 * probe.step);
            // All fired: the grid point is at or after the last sleep. In a first round whose
            // clock has not moved, that sleep is now, so it is the grid point itself;
            // otherwise the clock moved under the round, which starts over.
            let exact = probe.armed_at == Some(Instant::now());
            if all && !exact {
                self.arm_paused(probe, None, TOKIO_GRID_NS);
                continue;
            }
            if probe.step == 1 || all {
                let phase = if at >= self.start {
                    self.nanos(at) % TOKIO_GRID_NS
                } else {
                    let before = duration_nanos(self.start - at) % TOKIO_GRID_NS;
                    (TOKIO_GRID_NS - before) % TOKIO_GRID_NS
                };
                self.settle(phase);
                return std::task::Poll::Ready(());
            }
            let width = probe.step;
            self.arm_paused(probe, Some(at), width);
        }
    }

    /// Registers `n` sleeps over `[lo, lo + width)`, shifted by whole periods to lie at least
    /// [`PROBE_LEAD_NS`] ahead of now.
    fn arm(&self, probe: &mut GridProbe, lo: u64, width: u64, n: u64) {
        let now = self.nanos(Instant::now());
        let ahead = now + PROBE_LEAD_NS;
        let periods = ahead.saturating_sub(lo).div_ceil(TOKIO_GRID_NS);
        let step = width / n;
        probe.first = lo + periods * TOKIO_GRID_NS + step / 2;
        probe.step = step;
        probe.sleeps.clear();
        probe.sleeps.extend((0..n).map(|j| {
            let at = self.instant(probe.first + j * step);
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
        if probe.paused.is_some() {
            return self.poll_paused(probe, cx);
        }
        loop {
            let Some((last, all)) = probe.poll_round(cx) else {
                return std::task::Poll::Pending;
            };
            let seen = self.nanos(Instant::now());
            let trusted = !all || seen < probe.first + TOKIO_GRID_NS;
            if trusted {
                // The grid point lies in [at, at + step).
                let at = probe.first + last as u64 * probe.step;
                if probe.fine || probe.tries >= PROBE_TRIES {
                    self.settle(at % TOKIO_GRID_NS);
                    return std::task::Poll::Ready(());
                }
                probe.fine = true;
                let width = probe.step;
                self.arm(probe, at, width, FINE_PROBES);
                continue;
            }
            if probe.tries >= PROBE_TRIES {
                // Settle for what is known: the first round's boundary (the start of the
                // second round's interval), or nothing.
                let known = if probe.fine {
                    (probe.first - probe.step / 2) % TOKIO_GRID_NS
                } else {
                    0
                };
                self.settle(known);
                return std::task::Poll::Ready(());
            }
            let (lo, width, n) = if probe.fine {
                let lo = probe.first - probe.step / 2;
                (lo, probe.step * FINE_PROBES, FINE_PROBES)
            } else {
                (seen, TOKIO_GRID_NS, PROBES)
            };
            self.arm(probe, lo, width, n);
        }
    }

    /// Sets the phase and lets the driver's clock move (see [`Clock::driver_tick`]), once:
    /// a second settler (the driver's probe racing the paused-clock one at build) changes
    /// nothing.
    fn settle(&self, phase: u64) {
        if self
            .settled
            .compare_exchange(UNSETTLED, SETTLING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.phase.store(phase, Ordering::Relaxed);
            self.settled.store(SETTLED, Ordering::Release);
        }
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
#[inline]
pub(crate) fn duration_nanos(d: std::time::Duration) -> u64 {
    saturate(d.as_nanos())
}

/// `nanos` saturated at [`MAX_NANOS`].
#[inline]
fn saturate(nanos: u128) -> u64 {
    u64::try_from(nanos).map_or(MAX_NANOS, |n| n.min(MAX_NANOS))
}

/// Deadlines are kept as nanoseconds from the timer's start in 62 bits (146 years).
pub(crate) const MAX_NANOS: u64 = (1 << 62) - 1;

/// Shards a timer or tracker gets by default: four per CPU (so threads rarely share one),
/// a power of two (trackers pick a shard by masking a hash), at most `max`.
pub(crate) fn default_shards(max: usize) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cpus * 4).next_power_of_two().min(max)
}
