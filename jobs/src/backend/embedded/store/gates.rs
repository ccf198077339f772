//! Fairness per key: the gate of each `(kind, key)` whose jobs have a limit or a rate
//! ([`Spec::gate`]), its tables, and how every transition keeps them in step.
//!
//! # Ground rules
//!
//! - A gate's pending jobs are split in two, in key order (run_at, then priority highest
//!   first, then id: `(run_at, level, id)`; a job due later never holds a slot a due one
//!   needs, whatever its priority): the **admitted** ones, in `due` like any
//!   pending job (claimable) and again in `gate_admitted`; and the **waiting** ones, their
//!   record's `waiting` bit set (`record.rs`), in `gate_waiting` and `waiting_by_kind`
//!   instead of `due` (pending, counted and listed, never claimed). Five tables (defined
//!   with the gate's state in `gate.rs`): `gates` ((kind, key) → [`Gate`]),
//!   `gate_admitted` and `gate_waiting` ((kind, key, run_at, level, id) → ()),
//!   `waiting_by_kind` ((kind, run_at, id) → (), for lists) and `gate_timers` ((kind, at,
//!   key) → ()).
//! - Invariant after every operation: every admitted job is before every waiting one in key
//!   order, and `admitted = min(admitted + waiting, cap)` where `cap` is what the limit
//!   (`limit - running`) and the rate (`starts - started` in the open window) leave
//!   ([`Gate::cap`]). [`Tables::set`] is the one writer of the jobs, so the one place that
//!   keeps a gate's counters (`running`, `admitted`, `waiting`, the window's `started`) and
//!   indexes in step with the records (`Tables::account`): a claim of an admitted job
//!   (pending → running) is a start; a redelivery (running → running) changes nothing; an
//!   ack, retry, failure or death frees its slot. Every operation then rebalances the gates
//!   it touched (`Tables::settle`, from `Store::op` and twice in a claim): demote the last
//!   admitted while over the cap, promote the first waiting while under it, swap while the
//!   first waiting is before the last admitted (looked for only in a gate a job entered
//!   or moved in during the step, `gate_placed`: leaves, demotions of the last admitted
//!   and promotions of the first waiting keep the order; a gate whose counters need no
//!   move and whose order holds is not rebalanced at all, [`Gate::balanced`]). A move is
//!   one record rewrite through
//!   [`Tables::set_exact`]; a promotion is noted (`promoted`) so the writer thread wakes the
//!   idle consumers as soon as the batch's commit returns (after its fsync: every op that
//!   can promote needs one), as for a schedule.
//! - A pending gated job entering its gate (a schedule, a replace of another gate's job, an
//!   import, a revive, a retry, a successor taking over) is placed by `Tables::place`:
//!   admitted while the gate has room, else waiting; the rebalance that follows puts it in
//!   order. It gives the gate its limits, unless it is a retry (same limits, its own slot
//!   freed): the newest job to enter rules the gate. A job staying pending in its gate (a
//!   reschedule, a replace) keeps its part until the rebalance.
//! - A gate with an open rate window and waiting jobs (or none at all) has a timer at the
//!   window's end (`gate_timers`): every claim first rebalances up to
//!   [`TIMERS_PER_CLAIM`] gates of its kinds whose time has come, and its `next_due` is no
//!   later than the earliest timer of its kinds, so an idle consumer wakes by itself when
//!   the window ends. A gate with no running, admitted or waiting job is deleted when it is
//!   written (`Tables::settle`) unless its window is open (the starts in it must still
//!   count); such a gate keeps its timer, so it is deleted by the first claim of its kind
//!   after its window ends, or by its next touch. With no claim of its kind ever again it
//!   stays: one gate row and one timer row per `(kind, key)`, a bounded leftover.
//! - The store keeps the `gates` rows it read or wrote decoded between batches
//!   ([`Rows`](super::gate::Rows): exactly the committed rows, with their counters, kept
//!   after a commit or an abort that settled no gate, dropped by any other end), so a
//!   gate's row is read from the table once, not per operation.
//! - An operation's gates are read once into `gate_cache` and written back, and logged
//!   (their final value, `wal.rs`), when it ends, if their row changed: the log's replay
//!   applies a record's jobs (through `set_exact`, which recounts the gates on its way) and
//!   then its gates' logged rows over them ([`Tables::replay_gate`]), so a replayed store
//!   has the rows the live one had.
//!
//! # Counters
//!
//! A gate's row stores what the jobs cannot tell: `waiting`, the rate window, the limits of
//! the newest job to enter, the timer. `running` and `admitted` change at every start and
//! end of a job, and both are facts of the jobs, so they are not stored: a step writes and
//! logs a gate's row only when a stored field changes, so a start in a gate without a rate,
//! and an end that leaves the gate a job and promotes none, write nothing (every start in a
//! gate with a rate counts in `started`, and an end that leaves no job and no open window
//! deletes the row). `admitted` is the size of the gate's range of `gate_admitted` (at most
//! its cap), counted when the gate's row is read (`Tables::gate_mut`, before the step moves
//! that range); `running` is kept by the store for every gate with a running job
//! (`gate_running`, bounded by the running jobs), counted from the leased jobs' records
//! (`Tables::count_running`) by the first batch after an open, or after a batch that ended
//! without a commit having settled a gate: the count is that of the committed jobs, so a
//! crash, a replay or an abort cannot leave it stale. That count costs nothing in a store
//! with no gate row (a gate with a running job keeps its row), and otherwise one read of
//! every running job's record, gated or not (`Record::gate_key` decodes only its key):
//! O(running) once per open, before that first batch's own work, as the price of counters
//! no start or end writes. Format 5 stored both in the row; its rows are rewritten without
//! them at open (`upgrade.rs`).

use std::collections::hash_map::Entry;

use redb::ReadableTable;

use super::counts::Counters;
use super::gate::{Gate, Names, TIMERS_PER_CLAIM};
use super::index;
use super::tables::{level, storage, Stored, Tables};
use crate::backend::embedded::record::Record;
use crate::backend::embedded::wal;
use crate::backend::ClaimKinds;
use crate::core::error::Error;
use crate::core::kind::Spec;
use crate::core::state::{Machine, Status};

/// A gated job as its gate counts it: pending (with its place in key order and whether it
/// waits) or running. A dead job, or one without a gate, has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Side<'a> {
    kind: &'a str,
    key: &'a str,
    /// `(level, run_at, waiting)` while pending; `None` while running.
    pending: Option<(u8, u64, bool)>,
}

impl<'a> Side<'a> {
    fn of(spec: &'a Spec, job: Machine, waiting: bool) -> Option<Side<'a>> {
        let keyed = spec.gate()?;
        let pending = match job.status {
            Status::Pending => Some((level(spec.priority), job.run_at, waiting)),
            Status::Running { .. } => None,
            Status::Dead { .. } => return None,
        };
        Some(Side {
            kind: &spec.kind,
            key: &keyed.key,
            pending,
        })
    }
}

/// Which end of which part of a gate.
#[derive(Debug, Clone, Copy)]
enum End {
    LastAdmitted,
    FirstWaiting,
}

/// A job's place in its gate's key order (run_at, level), and its id.
type Place = ((u64, u8), String);

#[cfg(test)]
thread_local! {
    /// The `gate_admitted` entries `count_admitted` walked on this thread (tests).
    pub(super) static ADMITTED_COUNTED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// The records `count_running` read on this thread (tests).
    pub(super) static RUNNING_READ: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

// ===== impl Tables: counters, placement, rebalance =====

impl Tables<'_> {
    /// The gate of `(kind, key)`, read into this operation's cache (a new one if none).
    /// The cache is keyed by the gate's name (`kind NUL key`, as the log names it), built
    /// in a reused buffer: a gate found there costs no allocation.
    pub(super) fn gate_mut(&mut self, kind: &str, key: &str) -> Result<&mut Gate, Error> {
        write_name(&mut self.gate_name, kind, key);
        if !self.gate_cache.contains_key(self.gate_name.as_str()) {
            let row = match self.gate_rows.get(self.gate_name.as_str()) {
                Some(row) => *row,
                None => {
                    let row = match self.gates.get((kind, key)).map_err(storage)? {
                        Some(value) => Some(Gate::decode(value.value())?),
                        None => None,
                    };
                    let row = match row {
                        Some(mut gate) => {
                            gate.running = self
                                .gate_running
                                .get(self.gate_name.as_str())
                                .copied()
                                .unwrap_or(0);
                            // The open's replay throws its counters away (`forget_gates`,
                            // and its rows with its transaction): counted, they would cost
                            // a walk of the gate's admitted jobs per log record.
                            if !self.replaying {
                                gate.admitted = self.count_admitted(kind, key)?;
                            }
                            Some(gate)
                        }
                        None => None,
                    };
                    self.gate_rows.insert(self.gate_name.clone(), row);
                    row
                }
            };
            // One lookup to insert it and return it.
            return Ok(self
                .gate_cache
                .entry(self.gate_name.clone())
                .or_insert(row.unwrap_or_default()));
        }
        Ok(self
            .gate_cache
            .get_mut(self.gate_name.as_str())
            .expect("just cached"))
    }

    /// How many jobs the gate of `(kind, key)` has in `gate_admitted`: its `admitted`
    /// counter, which is not stored (at most its cap).
    fn count_admitted(&self, kind: &str, key: &str) -> Result<u64, Error> {
        let next_key = format!("{key}\0");
        let range = (kind, key, 0, 0, "")..(kind, next_key.as_str(), 0, 0, "");
        let mut n = 0;
        for entry in self.gate_admitted.range(range).map_err(storage)? {
            entry.map_err(storage)?;
            n += 1;
        }
        #[cfg(test)]
        ADMITTED_COUNTED.with(|c| c.set(c.get() + n));
        Ok(n)
    }

    /// The `running` counter of every gate with a running job (by name), counted from the
    /// leased jobs' records: what a batch starts from when the store has no count it
    /// trusts (after an open, or a batch that ended without a commit having touched
    /// gates). A store with no gate row has no gated job running (a gate with one keeps its
    /// row, `Gate::kept`) and reads nothing; any other reads every running job's record,
    /// and no other, decoding only the key of its gate (`Record::gate_key`).
    pub(super) fn count_running(&self) -> Result<Names<u64>, Error> {
        let mut out = Names::<u64>::default();
        if redb::ReadableTableMetadata::is_empty(&self.gates).map_err(storage)? {
            return Ok(out);
        }
        let mut name = String::new();
        let mut add = |kind: &str, id: &str| -> Result<(), Error> {
            #[cfg(test)]
            RUNNING_READ.with(|c| c.set(c.get() + 1));
            let Some(value) = self.jobs.get(id).map_err(storage)? else {
                return Err(Error::storage(format!(
                    "the lease index names a missing job {id:?}"
                )));
            };
            let Some(key) = Record::gate_key(value.value(), &self.plain).map_err(storage)? else {
                return Ok(());
            };
            write_name(&mut name, kind, key);
            match out.get_mut(name.as_str()) {
                Some(n) => *n += 1,
                None => {
                    out.insert(name.clone(), 1);
                }
            }
            Ok(())
        };
        for entry in self.plain_running.iter().map_err(storage)? {
            let (k, _) = entry.map_err(storage)?;
            add("", k.value().1)?;
        }
        for entry in self.running.iter().map_err(storage)? {
            let (k, _) = entry.map_err(storage)?;
            let (kind, _, id) = k.value();
            add(kind, id)?;
        }
        Ok(out)
    }

    /// Keeps the gates' counters and indexes in step with one job moving from `before` to
    /// `after` (called by `set_exact` for every transition).
    pub(super) fn account(
        &mut self,
        id: &str,
        before: Option<(&Spec, Machine, bool)>,
        after: Option<(&Spec, Machine, bool)>,
    ) -> Result<(), Error> {
        let before = before.and_then(|(spec, job, waiting)| Side::of(spec, job, waiting));
        let after = after.and_then(|(spec, job, waiting)| Side::of(spec, job, waiting));
        if before == after {
            return Ok(());
        }
        let now = self.now;
        // Each side's gate is read before its index moves: a gate read counts its admitted
        // jobs from `gate_admitted` as the step found it.
        if let Some(b) = before {
            let gate = self.gate_mut(b.kind, b.key)?;
            let count = match b.pending {
                None => &mut gate.running,
                Some((_, _, true)) => &mut gate.waiting,
                Some((_, _, false)) => &mut gate.admitted,
            };
            *count = count.saturating_sub(1);
            if let Some((level, at, waiting)) = b.pending {
                let key = (b.kind, b.key, at, level, id);
                if waiting {
                    self.gate_waiting.remove(key).map_err(storage)?;
                    self.waiting_by_kind
                        .remove((b.kind, at, id))
                        .map_err(storage)?;
                } else {
                    self.gate_admitted.remove(key).map_err(storage)?;
                }
            }
        }
        if let Some(a) = after {
            let started = a.pending.is_none() && before.is_some_and(|b| b.pending.is_some());
            let gate = self.gate_mut(a.kind, a.key)?;
            match a.pending {
                None => gate.running += 1,
                Some((_, _, true)) => gate.waiting += 1,
                Some((_, _, false)) => gate.admitted += 1,
            }
            if started {
                gate.start(now);
            }
            if let Some((level, at, waiting)) = a.pending {
                let key = (a.kind, a.key, at, level, id);
                if waiting {
                    self.gate_waiting.insert(key, ()).map_err(storage)?;
                    self.waiting_by_kind
                        .insert((a.kind, at, id), ())
                        .map_err(storage)?;
                } else {
                    self.gate_admitted.insert(key, ()).map_err(storage)?;
                }
            }
        }
        Ok(())
    }

    /// Whether `record`, written in place of `before`, waits in its gate: `false` for a job
    /// that is not pending and gated. One staying pending in its gate keeps its part; one
    /// entering is admitted while the gate has room, giving the gate its limits unless it
    /// is a retry.
    pub(super) fn place(
        &mut self,
        before: Option<&Stored>,
        record: &Record<'_>,
    ) -> Result<bool, Error> {
        let Some(keyed) = record.spec.gate() else {
            return Ok(false);
        };
        if record.job.status != Status::Pending {
            return Ok(false);
        }
        let kind = record.spec.kind.as_str();
        let same = before
            .filter(|b| b.spec.kind == kind && b.spec.gate().is_some_and(|k| k.key == keyed.key));
        let now = self.now;
        self.gate_mut(kind, &keyed.key)?;
        if !self.gate_placed.contains(self.gate_name.as_str()) {
            self.gate_placed.insert(self.gate_name.clone());
        }
        let gate = self.gate_mut(kind, &keyed.key)?;
        let running = same.is_some_and(|b| matches!(b.job.status, Status::Running { .. }));
        match same {
            Some(b) if b.job.status == Status::Pending => {
                // A replace with other limits brings them; a reschedule changes nothing.
                // Other limits change the cap even if the job keeps its place: the gate is
                // rebalanced however little else moved.
                if b.spec.key.as_ref() != Some(keyed) {
                    gate.take(keyed);
                }
                return Ok(b.waiting);
            }
            // A retry (a successor taking over is attempt 0): the gate's limits stay.
            Some(_) if running && record.job.attempt > 0 => {}
            _ => gate.take(keyed),
        }
        // A running job of this gate becoming this pending one frees its own slot.
        let freed = u64::from(running);
        Ok(gate.admitted >= gate.cap(now, freed))
    }

    /// The job at `end` of its gate's admitted or waiting part.
    fn end_of(&self, kind: &str, key: &str, end: End) -> Result<Place, Error> {
        let next_key = format!("{key}\0");
        let range = (kind, key, 0, 0, "")..(kind, next_key.as_str(), 0, 0, "");
        let found = match end {
            End::LastAdmitted => self
                .gate_admitted
                .range(range)
                .map_err(storage)?
                .next_back(),
            End::FirstWaiting => self.gate_waiting.range(range).map_err(storage)?.next(),
        };
        let Some(entry) = found else {
            return Err(Error::storage(format!(
                "gate ({kind:?}, {key:?}) counts jobs its index does not hold ({end:?})"
            )));
        };
        let (k, _) = entry.map_err(storage)?;
        let (_, _, at, level, id) = k.value();
        Ok(((at, level), id.to_owned()))
    }

    /// Moves the pending job `id` to its gate's waiting part (`true`) or admitted part.
    fn flip(&mut self, counts: &mut Counters, id: &str, waiting: bool) -> Result<(), Error> {
        let Some(stored) = self.load(id)? else {
            return Err(Error::storage(format!("a gate names a missing job {id:?}")));
        };
        let mut record = stored.with(stored.job);
        record.waiting = waiting;
        if !waiting {
            let at = stored.job.run_at;
            self.promoted = Some(self.promoted.map_or(at, |p| p.min(at)));
        }
        self.set_exact(counts, id, Some(&stored), Some(record))
    }

    /// Restores the gate's invariant (module docs): demote, promote, swap. Without
    /// `placed` (no job entered or moved in it since its last rebalance) its two parts are
    /// still in order: no swap is looked for.
    fn rebalance(
        &mut self,
        counts: &mut Counters,
        kind: &str,
        key: &str,
        placed: bool,
    ) -> Result<(), Error> {
        loop {
            let now = self.now;
            let gate = self.gate_mut(kind, key)?;
            let cap = gate.cap(now, 0);
            let (admitted, waiting) = (gate.admitted, gate.waiting);
            if admitted > cap {
                let (_, last) = self.end_of(kind, key, End::LastAdmitted)?;
                self.flip(counts, &last, true)?;
            } else if admitted < cap && waiting > 0 {
                let (_, first) = self.end_of(kind, key, End::FirstWaiting)?;
                self.flip(counts, &first, false)?;
            } else if placed && admitted > 0 && waiting > 0 {
                let last = self.end_of(kind, key, End::LastAdmitted)?;
                let first = self.end_of(kind, key, End::FirstWaiting)?;
                if first >= last {
                    return Ok(());
                }
                self.flip(counts, &last.1, true)?;
                self.flip(counts, &first.1, false)?;
            } else {
                return Ok(());
            }
        }
    }

    /// Ends an operation's (or a claim's step's) work on gates: rebalances every gate it
    /// read, then writes and logs them, deleting those left with no job and no open
    /// window, and moving their timers.
    pub(super) fn settle(&mut self, counts: &mut Counters) -> Result<(), Error> {
        if self.gate_cache.is_empty() {
            return Ok(());
        }
        let now = self.now;
        // Every gate this step read is brought to its invariant at `now`, not only those
        // whose jobs moved: a rate window that closed since the gate's last write raised its
        // cap, and the timer that would have told a claim so is recomputed below (dropped
        // once the window is closed), so a gate written without a rebalance could keep
        // waiting jobs with room and no timer. A rebalance moves jobs of its own gate only.
        // In name order, so that a batch writes its gates in one order whatever the hash.
        let mut read: Vec<(String, Gate)> = self.gate_cache.drain().collect();
        read.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for (name, gate) in &mut read {
            let placed = self.gate_placed.contains(name.as_str());
            if gate.balanced(now, !placed) {
                continue;
            }
            let (kind, key) = split_name(name)?;
            self.gate_cache.insert(name.clone(), *gate);
            self.rebalance(counts, kind, key, placed)?;
            *gate = self.gate_cache.remove(name.as_str()).expect("rebalanced");
            debug_assert!(self.gate_cache.is_empty(), "a rebalance read another gate");
        }
        self.gate_placed.clear();
        for (name, mut gate) in read {
            // The kept row's one lookup: read here, replaced at the end.
            let slot = self.gate_rows.entry(name);
            let (kind, key) = split_name(slot.key())?;
            let kept = gate.kept(now);
            let timer = gate.wanted_timer(now).filter(|_| kept);
            if gate.timer != timer {
                if let Some(at) = gate.timer {
                    self.gate_timers.remove((kind, at, key)).map_err(storage)?;
                }
                if let Some(at) = timer {
                    self.gate_timers
                        .insert((kind, at, key), ())
                        .map_err(storage)?;
                }
                gate.timer = timer;
            }
            // Only the row's fields are stored: a step that moved only the counters (a start
            // in a gate without a rate, an end promoting none and leaving a job: the common
            // case) writes and logs nothing.
            let value = kept.then(|| gate.encode());
            let unchanged = match &slot {
                Entry::Occupied(old) => old.get().map(|g| g.encode()) == value,
                Entry::Vacant(_) => false,
            };
            if !unchanged {
                match &value {
                    Some(value) => self.gates.insert((kind, key), value.as_slice()).map(drop),
                    None => self.gates.remove((kind, key)).map(drop),
                }
                .map_err(storage)?;
                log_gate(
                    &mut self.log,
                    slot.key(),
                    value.as_ref().map(|v| v.as_slice()),
                );
            }
            self.gates_settled = true;
            let name = slot.key();
            if gate.running > 0 {
                match self.gate_running.get_mut(name.as_str()) {
                    Some(running) => *running = gate.running,
                    None => {
                        self.gate_running.insert(name.clone(), gate.running);
                    }
                }
            } else {
                self.gate_running.remove(name.as_str());
            }
            let row = kept.then_some(gate);
            match slot {
                Entry::Occupied(mut old) => {
                    old.insert(row);
                }
                Entry::Vacant(new) => {
                    new.insert(row);
                }
            }
        }
        Ok(())
    }
}

/// Logs a gate's final row (`None`: deleted) in the operation's log record, if it still
/// keeps one (`Tables::log`).
fn log_gate(log: &mut Option<Vec<u8>>, name: &str, value: Option<&[u8]>) {
    if let Some(record) = log {
        wal::push_gate_change(record, name, value);
        if record.len() > super::tables::LOG_AT_MOST {
            *log = None;
        }
    }
}

/// Writes the name of the gate of `(kind, key)` into `name` (`kind NUL key`, as the cache
/// and the log name it), replacing what it held: a reused buffer, so no allocation.
fn write_name(name: &mut String, kind: &str, key: &str) {
    name.clear();
    name.push_str(kind);
    name.push('\0');
    name.push_str(key);
}

/// The kind and key of a gate's name ([`write_name`]'s form).
fn split_name(name: &str) -> Result<(&str, &str), Error> {
    name.split_once('\0')
        .ok_or_else(|| Error::storage("a logged gate's name is corrupt"))
}

// ===== impl Tables: timers, lists, replay =====

impl Tables<'_> {
    /// The kinds `kinds` names with gate timers, each with its earliest.
    fn timer_kinds(&self, kinds: &ClaimKinds) -> Result<Vec<(String, u64)>, Error> {
        match kinds {
            ClaimKinds::All => index::kinds_of(&self.gate_timers, None),
            ClaimKinds::Some(kinds) => {
                let mut out = Vec::new();
                for (kind, _) in kinds {
                    out.extend(index::kinds_of(&self.gate_timers, Some(kind))?);
                }
                Ok(out)
            }
        }
    }

    /// Reads into this operation's cache (so that its `settle` rebalances them) up to [`TIMERS_PER_CLAIM`] gates of the kinds `kinds` names
    /// whose timer is at or before `now` (their next `settle` moves or deletes the timer);
    /// how many.
    pub(super) fn wake_gates(&mut self, kinds: &ClaimKinds, now: u64) -> Result<usize, Error> {
        let mut woken = Vec::new();
        for (kind, first) in self.timer_kinds(kinds)? {
            if first > now {
                continue;
            }
            let left = TIMERS_PER_CLAIM - woken.len();
            for entry in index::kind_range(&self.gate_timers, &kind, None, now)?.take(left) {
                let (_, key) = entry?;
                woken.push((kind.clone(), key));
            }
            if woken.len() == TIMERS_PER_CLAIM {
                break;
            }
        }
        for (kind, key) in &woken {
            self.gate_mut(kind, key)?;
        }
        Ok(woken.len())
    }

    /// The earliest gate timer of the kinds `kinds` names.
    pub(super) fn next_timer(&self, kinds: &ClaimKinds) -> Result<Option<u64>, Error> {
        Ok(self.timer_kinds(kinds)?.iter().map(|(_, at)| *at).min())
    }

    /// Writes a gate's logged final value (`None`: deleted) over what the replay of its
    /// record's jobs counted, its timer with it.
    pub(super) fn replay_gate(&mut self, name: &str, value: Option<&[u8]>) -> Result<(), Error> {
        let (kind, key) = split_name(name)?;
        self.gate_cache.remove(name);
        self.gate_placed.remove(name);
        self.gate_rows.remove(name);
        self.gates_settled = true;
        let old = match self.gates.get((kind, key)).map_err(storage)? {
            Some(v) => Some(Gate::decode(v.value())?),
            None => None,
        };
        let new = value.map(Gate::decode).transpose()?;
        let (was, will) = (
            old.and_then(|g| g.timer),
            new.as_ref().and_then(|g| g.timer),
        );
        if was != will {
            if let Some(at) = was {
                self.gate_timers.remove((kind, at, key)).map_err(storage)?;
            }
            if let Some(at) = will {
                self.gate_timers
                    .insert((kind, at, key), ())
                    .map_err(storage)?;
            }
        }
        match value {
            Some(value) => self.gates.insert((kind, key), value).map(drop),
            None => self.gates.remove((kind, key)).map(drop),
        }
        .map_err(storage)
    }

    /// Forgets what a replayed record's jobs counted: its logged gates are the truth.
    pub(super) fn forget_gates(&mut self) {
        self.gate_cache.clear();
        self.gate_placed.clear();
    }
}
