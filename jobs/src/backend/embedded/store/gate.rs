//! One gate's stored state ([`Gate`]: a `(kind, key)`'s counters, rate window, limits and
//! timer), its layout and the arithmetic of its cap; and the definitions of the gate
//! tables. How the store keeps them is in `gates.rs`.

use std::time::Duration;

use redb::TableDefinition;

use crate::core::error::Error;
use crate::core::kind::Keyed;

/// `(kind, key)` → the gate's state ([`Gate::encode`]), for every gate with a job or an
/// open rate window.
pub(super) const GATES: TableDefinition<'_, (&str, &str), &[u8]> = TableDefinition::new("gates");
/// A gate's admitted jobs (also in `due`), in key order.
pub(super) const GATE_ADMITTED: TableDefinition<'_, GateKey, ()> =
    TableDefinition::new("gate_admitted");
/// A gate's waiting jobs (not in `due`), in key order.
pub(super) const GATE_WAITING: TableDefinition<'_, GateKey, ()> =
    TableDefinition::new("gate_waiting");
/// The waiting jobs again as `(kind, run_at, id)`: a list of pending jobs merges them in.
pub(super) const WAITING_BY_KIND: TableDefinition<'_, (&str, u64, &str), ()> =
    TableDefinition::new("waiting_by_kind");
/// `(kind, at, key)`: the gate of `(kind, key)` is to be rebalanced at `at`, the end of
/// its rate window.
pub(super) const GATE_TIMERS: TableDefinition<'_, (&str, u64, &str), ()> =
    TableDefinition::new("gate_timers");

/// The most gate rows the store keeps decoded between batches ([`Rows`]); past it the
/// copy is dropped at the next batch's start and rebuilt from the table as gates are read
/// (one batch touching more gates grows it past this until the next batch starts).
pub(super) const ROWS_AT_MOST: usize = 1 << 16;

/// The `gates` table's rows as of the last commit, for the gates read since (by name,
/// `kind NUL key`; `None`: no row), each with its counters (`gates.rs`, "Counters"), so
/// that an operation touching a gate reads no row. A copy of what is committed, never
/// more: a batch takes it, updates it with every gate it reads or settles, and the store
/// keeps it only once the batch's transaction committed (or aborted having settled no
/// gate); any other end drops it, and an open starts with none.
pub(super) type Rows = Names<Option<Gate>>;

/// A map by gate name (`kind NUL key`), hashed with std's `RandomState` (SipHash-1-3, a
/// random key per map). The names are the tenants' keys, and [`Rows`] (up to
/// [`ROWS_AT_MOST`] entries) and the running counters live across batches: a hash without
/// a claim of resistance to chosen collisions would let one tenant's keys slow every
/// lookup. Every step finds its gate once (`Tables::gate_mut`), so the hash is paid a few
/// times per job.
pub(super) type Names<V> = std::collections::HashMap<String, V>;
/// A set of gate names, hashed as [`Names`].
pub(super) type NameSet = std::collections::HashSet<String>;

/// The most gates whose timer came one claim rebalances.
pub(super) const TIMERS_PER_CLAIM: usize = 64;

/// A key of `gate_admitted` and `gate_waiting`: `(kind, key, run_at, level, id)`, so that a
/// gate's jobs are in key order (run_at, then priority highest first, then id).
pub(super) type GateKey = (&'static str, &'static str, u64, u8, &'static str);

/// The layout of a gate's row: version 2 stores what is not derivable from the jobs.
/// Version 1 (format 5) also stored `running` and `admitted`; it is read with them
/// ignored, and rewritten as version 2 by the upgrade at open (`upgrade.rs`).
const VERSION: u8 = 2;
const VERSION_1: u8 = 1;
pub(super) const LEN: usize = 1 + 7 * 8;
const LEN_1: usize = 1 + 9 * 8;

/// One gate's state: its row's fields, and the two counters the store derives from the
/// jobs instead of storing them (`running`, `admitted`: `gates.rs`, "Counters").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Gate {
    /// Its running jobs (a redelivered one included). Not stored: counted from the leased
    /// jobs at open.
    pub(super) running: u64,
    /// Its pending jobs in `due`. Not stored: the size of its range of `gate_admitted`.
    pub(super) admitted: u64,
    /// Its pending jobs in its queue.
    pub(super) waiting: u64,
    /// When the rate window opened.
    pub(super) window_start: u64,
    /// Starts in the window (0: no window yet).
    pub(super) started: u64,
    /// At most this many running; 0 for no limit.
    pub(super) limit: u32,
    /// At most `.0` starts per `.1` nanoseconds.
    pub(super) rate: Option<(u32, u64)>,
    /// Its key in `gate_timers`, if any.
    pub(super) timer: Option<u64>,
}

fn corrupt() -> Error {
    Error::storage("a gate's record is corrupt")
}

impl Gate {
    /// Its row: `version: u8`, then as little-endian `u64`s: waiting, window start,
    /// started, limit, the rate's starts (0: none) and period, the timer (0: none). Two
    /// gates with the same row differ at most in their counters.
    pub(super) fn encode(&self) -> [u8; LEN] {
        let (starts, per) = self.rate.unwrap_or_default();
        let mut out = [0; LEN];
        out[0] = VERSION;
        for (i, field) in [
            self.waiting,
            self.window_start,
            self.started,
            u64::from(self.limit),
            u64::from(starts),
            per,
            self.timer.unwrap_or(0),
        ]
        .into_iter()
        .enumerate()
        {
            out[1 + 8 * i..9 + 8 * i].copy_from_slice(&field.to_le_bytes());
        }
        out
    }

    /// The gate of a row (of either version), its counters 0: the caller derives them.
    pub(super) fn decode(bytes: &[u8]) -> Result<Gate, Error> {
        // Version 1 had running and admitted first; they are skipped.
        let first = match (bytes.first(), bytes.len()) {
            (Some(&VERSION), LEN) => 0,
            (Some(&VERSION_1), LEN_1) => 2,
            _ => return Err(corrupt()),
        };
        let field = |i: usize| {
            let at = 1 + 8 * (first + i);
            u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
        };
        let small = |i: usize| u32::try_from(field(i)).map_err(|_| corrupt());
        let starts = small(4)?;
        Ok(Gate {
            running: 0,
            admitted: 0,
            waiting: field(0),
            window_start: field(1),
            started: field(2),
            limit: small(3)?,
            rate: (starts > 0).then(|| (starts, field(5))),
            timer: Some(field(6)).filter(|&at| at > 0),
        })
    }

    /// Whether a row of this layout is of an older one (to rewrite at open).
    pub(super) fn is_old_row(bytes: &[u8]) -> bool {
        bytes.first() == Some(&VERSION_1)
    }

    /// Whether a rate window is open at `now` (one opens at a start).
    pub(super) fn window_open(&self, now: u64) -> bool {
        self.rate
            .is_some_and(|(_, per)| self.started > 0 && now < self.window_start.saturating_add(per))
    }

    /// How many of its pending jobs may be admitted at `now`, `freed` of its running jobs
    /// not counted (a retry placing itself).
    pub(super) fn cap(&self, now: u64, freed: u64) -> u64 {
        let mut cap = u64::MAX;
        if self.limit > 0 {
            cap = u64::from(self.limit).saturating_sub(self.running.saturating_sub(freed));
        }
        if let Some((starts, _)) = self.rate {
            let started = if self.window_open(now) {
                self.started
            } else {
                0
            };
            cap = cap.min(u64::from(starts).saturating_sub(started));
        }
        cap
    }

    /// A claim started one of its jobs at `now`: a closed window opens.
    pub(super) fn start(&mut self, now: u64) {
        if self.rate.is_some() {
            if !self.window_open(now) {
                self.window_start = now;
                self.started = 0;
            }
            self.started += 1;
        }
    }

    /// The limits of the job entering it.
    pub(super) fn take(&mut self, keyed: &Keyed) {
        self.limit = keyed.limit;
        self.rate = keyed.rate.map(|(starts, per)| (starts, nanos_of(per)));
    }

    /// Whether a rebalance at `now` provably moves nothing: its counters need no demotion
    /// or promotion (nothing waits within the cap, or the cap is reached), and when jobs
    /// both wait and are admitted, `ordered` says that every admitted one is still before
    /// every waiting one (no job entered or moved in the gate since its last rebalance: a
    /// job leaving either part, a demotion of the last admitted and a promotion of the
    /// first waiting all keep that order).
    pub(super) fn balanced(&self, now: u64, ordered: bool) -> bool {
        let cap = self.cap(now, 0);
        if self.admitted > cap || (self.admitted < cap && self.waiting > 0) {
            return false;
        }
        ordered || self.admitted == 0 || self.waiting == 0
    }

    /// Whether it has no job at all.
    pub(super) fn is_empty(&self) -> bool {
        self.running == 0 && self.admitted == 0 && self.waiting == 0
    }

    /// Whether it is kept when written at `now`: it has a job, or starts in an open window.
    pub(super) fn kept(&self, now: u64) -> bool {
        !self.is_empty() || self.window_open(now)
    }

    /// Its timer at `now`: the window's end, while a window is open and jobs wait (or none
    /// is left, so that it is deleted then).
    pub(super) fn wanted_timer(&self, now: u64) -> Option<u64> {
        let (_, per) = self.rate?;
        (self.window_open(now) && (self.waiting > 0 || self.is_empty()))
            .then(|| self.window_start.saturating_add(per))
    }
}

fn nanos_of(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    /// The maps by gate name hash with a key of their own (std's `RandomState`): the same
    /// name hashes differently in two maps, so no set of tenant keys collides in all of
    /// them.
    #[test]
    fn the_gate_maps_hash_names_with_a_key_of_their_own() {
        let (a, b) = (Names::<u64>::default(), Names::<u64>::default());
        let (c, d) = (NameSet::default(), NameSet::default());
        let hash = |s: &std::collections::hash_map::RandomState| s.hash_one("kind\0tenant");
        assert_ne!(hash(a.hasher()), hash(b.hasher()));
        assert_ne!(hash(c.hasher()), hash(d.hasher()));
    }

    #[test]
    fn a_gate_round_trips_and_garbage_is_corrupt() {
        let gate = Gate {
            running: 1,
            admitted: 2,
            waiting: 3,
            window_start: 4,
            started: 5,
            limit: 6,
            rate: Some((7, 8)),
            timer: Some(9),
        };
        // The counters are not stored: they read as 0, the store derives them.
        let stored = Gate {
            running: 0,
            admitted: 0,
            ..gate
        };
        assert_eq!(Gate::decode(&gate.encode()).unwrap(), stored);
        assert_eq!(
            Gate::decode(&Gate::default().encode()).unwrap(),
            Gate::default()
        );
        assert!(Gate::decode(&gate.encode()[1..]).unwrap_err().is_storage());
        let mut big_limit = gate.encode();
        big_limit[1 + 3 * 8 + 4] = 1;
        assert!(Gate::decode(&big_limit).unwrap_err().is_storage());
        // A version 1 row (format 5) reads with its counters ignored.
        let mut old = vec![VERSION_1];
        for field in [1u64, 2, 3, 4, 5, 6, 7, 8, 9] {
            old.extend_from_slice(&field.to_le_bytes());
        }
        assert!(Gate::is_old_row(&old) && !Gate::is_old_row(&gate.encode()));
        assert_eq!(Gate::decode(&old).unwrap(), stored);
    }

    /// A rebalance is skipped only when it provably moves nothing: the counters need no
    /// move, and jobs both admitted and waiting are known to be in order.
    #[test]
    fn a_gate_is_balanced_only_when_no_rebalance_could_move_it() {
        let gate = |admitted, waiting| Gate {
            limit: 2,
            running: 1,
            admitted,
            waiting,
            ..Gate::default()
        };
        // (admitted, waiting) with a cap of 1: whether balanced when in order, and when
        // the order is unknown.
        for ((admitted, waiting), ordered, unknown) in [
            ((0, 0), true, true),
            ((1, 0), true, true),
            ((2, 0), false, false), // over the cap: a demotion
            ((0, 1), false, false), // room and a job waiting: a promotion
            ((1, 1), true, false),  // full: only the order of the ends tells
        ] {
            let g = gate(admitted, waiting);
            assert_eq!(g.balanced(0, true), ordered, "{g:?} in order");
            assert_eq!(g.balanced(0, false), unknown, "{g:?} order unknown");
        }
        let full = Gate {
            running: 2,
            waiting: 3,
            ..gate(0, 0)
        };
        assert!(full.balanced(0, false), "a cap of 0 and none admitted");
    }

    /// The cap is what both limits leave; a closed window counts no start.
    #[test]
    fn the_cap_is_the_tighter_of_limit_and_rate() {
        let mut gate = Gate {
            limit: 3,
            running: 1,
            ..Gate::default()
        };
        assert_eq!(gate.cap(0, 0), 2);
        assert_eq!(gate.cap(0, 1), 3, "a retry's own slot");
        gate.rate = Some((2, 100));
        assert_eq!(gate.cap(0, 0), 2, "no window yet");
        gate.start(10);
        assert_eq!((gate.window_start, gate.started), (10, 1));
        assert_eq!(gate.cap(50, 0), 1);
        gate.start(60);
        assert_eq!(
            (gate.window_start, gate.started),
            (10, 2),
            "the same window"
        );
        assert_eq!(gate.cap(109, 0), 0);
        assert_eq!(gate.wanted_timer(109), None, "no job waits");
        gate.waiting = 1;
        assert_eq!(gate.wanted_timer(109), Some(110));
        assert_eq!(gate.cap(110, 0), 2, "the window ended");
        assert_eq!(gate.wanted_timer(110), None);
        gate.start(110);
        assert_eq!((gate.window_start, gate.started), (110, 1), "a new window");
        gate.limit = 0;
        assert_eq!(gate.cap(110, 0), 1, "no limit: the rate's");
    }
}
