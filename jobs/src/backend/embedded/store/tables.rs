//! The store's tables and what keeps them in step: [`Tables`], every index and the counts
//! written through [`Tables::set`], and each change appended to the batch's log record.
//! The reads of the per-kind indexes are in `index.rs`; the gates of keys with limits (their
//! tables, counters, rebalance and timers) in `gates.rs`.

use std::borrow::Cow;

use redb::{ReadableTable, Table, TableDefinition};

use super::counts::Counters;
use super::gate::{self, Gate, GateKey};
use crate::backend::embedded::record::Record;
use crate::backend::embedded::wal;
use crate::core::error::Error;
use crate::core::job::{JobInfo, JobState};
use crate::core::kind::Spec;
use crate::core::state::{Machine, Status};

pub(super) const JOBS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("jobs");
/// The pending plain jobs' keys (kind `""`, priority 0): `(run_at, id)`. Format 4's `due`,
/// kept: the plain path compares the fields it compared before kinds.
pub(super) const PLAIN_DUE: TableDefinition<'_, (u64, &str), ()> = TableDefinition::new("due");
/// The running jobs' keys of kind `""`: `(lease end, id)`. Format 4's `running`, kept.
pub(super) const PLAIN_RUNNING: TableDefinition<'_, (u64, &str), ()> =
    TableDefinition::new("running");
/// The other pending jobs' keys: `(kind, level, run_at, id)`, `level` being [`level`] of
/// the job's priority (so a kind's levels read highest priority first). Never holds kind
/// `""` at [`PLAIN_LEVEL`]: those are in `PLAIN_DUE`.
pub(super) const DUE: TableDefinition<'_, DueKey, ()> = TableDefinition::new("due_by_kind");
/// The other running jobs' keys: `(kind, lease end, id)`, never of kind `""`.
pub(super) const RUNNING: TableDefinition<'_, LeaseKey, ()> =
    TableDefinition::new("running_by_kind");
/// The level of priority 0, the plain group's with kind `""`.
pub(super) const PLAIN_LEVEL: u8 = 127;
/// The dead jobs' keys: `(death time, id)`, every kind's (a list of every kind, a purge).
pub(super) const DIED: TableDefinition<'_, (u64, &str), ()> = TableDefinition::new("died");
/// The dead jobs' keys under their kind: `(kind, death time, id)`, every kind's, `""`
/// included (a list of one kind's dead jobs reads only that kind's range).
pub(super) const DIED_BY_KIND: TableDefinition<'_, LeaseKey, ()> =
    TableDefinition::new("died_by_kind");
pub(super) const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");
/// A batch whose log record would be longer than this is a checkpoint instead (a bulk
/// `schedule_many`): it rewrites so many pages that the record saves nothing, and the pages
/// its commit frees could not be reused before the next checkpoint (the file would grow).
pub(super) const LOG_AT_MOST: usize = 256 << 10;

pub(super) const SERIES: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("series");
/// The hold-off tombstones (`Dedup::HoldOff`): an acked job's id → the end of its hold-off.
/// Never counted: no state holds them.
pub(super) const HELD: TableDefinition<'_, &str, u64> = TableDefinition::new("held");
/// The same tombstones by their end, `(until, id)`: a claim deletes the expired ones from
/// its front, a bounded number at a time.
pub(super) const HELD_UNTIL: TableDefinition<'_, (u64, &str), ()> =
    TableDefinition::new("held_until");
/// The successors of `Dedup::AllowWhileRunning`: a job's id → the record of the job that
/// takes its place (pending, attempt 0, no error) once it is acked or dies. Present exactly
/// while the job's record has its `next` bit set; never counted, listed or indexed.
pub(super) const NEXT: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("next");
/// The most expired tombstones one claim deletes.
pub(super) const HELD_PER_CLAIM: usize = 64;

/// A key of `due`: `(kind, level, run_at, id)`.
pub(super) type DueKey = (&'static str, u8, u64, &'static str);
/// A key of `running`: `(kind, lease end, id)`.
pub(super) type LeaseKey = (&'static str, u64, &'static str);

/// The level of `priority` in `due`: 0 for 127, 255 for -128 (levels read in key order
/// are priorities highest first).
pub(super) fn level(priority: i8) -> u8 {
    127u8.wrapping_sub(priority as u8)
}

pub(super) fn storage(err: impl std::fmt::Display) -> Error {
    Error::storage(err)
}

pub(super) struct Tables<'t> {
    pub(super) jobs: Table<'t, &'static str, &'static [u8]>,
    pub(super) plain_due: Table<'t, (u64, &'static str), ()>,
    pub(super) plain_running: Table<'t, (u64, &'static str), ()>,
    pub(super) due: Table<'t, DueKey, ()>,
    pub(super) running: Table<'t, LeaseKey, ()>,
    pub(super) died: Table<'t, (u64, &'static str), ()>,
    pub(super) died_by_kind: Table<'t, LeaseKey, ()>,
    pub(super) series: Table<'t, &'static str, &'static [u8]>,
    pub(super) held: Table<'t, &'static str, u64>,
    pub(super) held_until: Table<'t, (u64, &'static str), ()>,
    pub(super) next: Table<'t, &'static str, &'static [u8]>,
    /// `gates.rs`: (kind, key) → the gate's state.
    pub(super) gates: Table<'t, (&'static str, &'static str), &'static [u8]>,
    /// `gates.rs`: the admitted pending jobs of each gate, in key order.
    pub(super) gate_admitted: Table<'t, GateKey, ()>,
    /// `gates.rs`: the waiting pending jobs of each gate, in key order.
    pub(super) gate_waiting: Table<'t, GateKey, ()>,
    /// `gates.rs`: the waiting jobs again, `(kind, run_at, id)`, for lists of pending jobs.
    pub(super) waiting_by_kind: Table<'t, LeaseKey, ()>,
    /// `gates.rs`: `(kind, at, key)`, a gate to revisit at `at` (its rate window's end).
    pub(super) gate_timers: Table<'t, LeaseKey, ()>,
    /// The gates this operation read, as they are now, by name (`kind NUL key`): each is
    /// rebalanced, written and logged by `Tables::settle`.
    pub(super) gate_cache: gate::Names<Gate>,
    /// The gates of `gate_cache` a job entered or moved in (`Tables::place`): only their
    /// rebalance compares the ends of their two parts.
    pub(super) gate_placed: gate::NameSet,
    /// A reused buffer for the name of the gate looked up (`Tables::gate_mut`).
    pub(super) gate_name: String,
    /// The `gates` rows this transaction sees, for the gates read so far ([`gate::Rows`]).
    pub(super) gate_rows: gate::Rows,
    /// The `running` counter of every gate with a running job, by name, as this
    /// transaction leaves them (not stored: `gates.rs`, "Counters").
    pub(super) gate_running: gate::Names<u64>,
    /// Whether this transaction settled a gate (an abort then drops `gate_rows` and
    /// `gate_running`).
    pub(super) gates_settled: bool,
    /// Whether this is the open's replay of the log: its gates' counters are not used, so
    /// `Tables::gate_mut` does not count their admitted jobs.
    pub(super) replaying: bool,
    /// The earliest run_at of the jobs a rebalance admitted in this batch (the writer
    /// thread wakes idle consumers for it once the batch is durable).
    pub(super) promoted: Option<u64>,
    /// The batch's clock reading (a gate's rate window opens at a claim's `now`).
    pub(super) now: u64,
    /// The body of this batch's log record: every job's final value; `None` once it would
    /// pass `LOG_AT_MOST` (the batch is then a checkpoint, and a bulk load does not build a
    /// record it would throw away), or for a batch that pauses or resumes (the log holds
    /// jobs only, so the flag is made durable by a checkpoint).
    pub(super) log: Option<Vec<u8>>,
    /// Whether claims are stopped, as this batch leaves it.
    pub(super) paused: bool,
    /// The spec of a job scheduled without options: a record written before kinds reads
    /// as one of it, and the occurrences of a series stored before series had a spec
    /// (series record version 1, `series.rs`) are made with it.
    pub(super) plain: Spec,
}

impl<'t> Tables<'t> {
    pub(super) fn open(txn: &'t redb::WriteTransaction, plain: &Spec) -> Result<Tables<'t>, Error> {
        Ok(Tables {
            jobs: txn.open_table(JOBS).map_err(storage)?,
            plain_due: txn.open_table(PLAIN_DUE).map_err(storage)?,
            plain_running: txn.open_table(PLAIN_RUNNING).map_err(storage)?,
            due: txn.open_table(DUE).map_err(storage)?,
            running: txn.open_table(RUNNING).map_err(storage)?,
            died: txn.open_table(DIED).map_err(storage)?,
            died_by_kind: txn.open_table(DIED_BY_KIND).map_err(storage)?,
            series: txn.open_table(SERIES).map_err(storage)?,
            held: txn.open_table(HELD).map_err(storage)?,
            held_until: txn.open_table(HELD_UNTIL).map_err(storage)?,
            next: txn.open_table(NEXT).map_err(storage)?,
            gates: txn.open_table(gate::GATES).map_err(storage)?,
            gate_admitted: txn.open_table(gate::GATE_ADMITTED).map_err(storage)?,
            gate_waiting: txn.open_table(gate::GATE_WAITING).map_err(storage)?,
            waiting_by_kind: txn.open_table(gate::WAITING_BY_KIND).map_err(storage)?,
            gate_timers: txn.open_table(gate::GATE_TIMERS).map_err(storage)?,
            gate_cache: gate::Names::default(),
            gate_placed: gate::NameSet::default(),
            gate_name: String::new(),
            gate_rows: gate::Rows::default(),
            gate_running: gate::Names::default(),
            gates_settled: false,
            replaying: false,
            promoted: None,
            now: 0,
            log: Some(Vec::new()),
            paused: false,
            plain: plain.clone(),
        })
    }
}

/// A job read from `jobs`, owned.
pub(super) struct Stored {
    pub(super) job: Machine,
    pub(super) spec: Spec,
    pub(super) error: Option<String>,
    pub(super) payload: Vec<u8>,
    /// Whether a successor waits in `next`.
    pub(super) next: bool,
    /// Whether it waits for its key's slot (`gates.rs`).
    pub(super) waiting: bool,
}

impl Stored {
    /// The record of this job in state `job`, its error, payload, successor and place in
    /// its gate unchanged.
    pub(super) fn with(&self, job: Machine) -> Record<'_> {
        Record {
            job,
            spec: Cow::Borrowed(&self.spec),
            error: self.error.as_deref(),
            payload: &self.payload,
            next: self.next,
            waiting: self.waiting,
        }
    }

    /// The job as `get` and lists show it (without its successor: lists do not show one).
    pub(super) fn info(self, id: String) -> JobInfo {
        let Stored {
            job,
            spec,
            error,
            payload,
            next: _,
            waiting: _,
        } = self;
        JobInfo::new(
            id,
            state(job.status),
            job.run_at,
            job.attempt,
            error,
            payload,
            spec,
        )
    }
}

impl Tables<'_> {
    pub(super) fn load(&self, id: &str) -> Result<Option<Stored>, Error> {
        self.load_with(id, true)
    }

    /// [`load`](Self::load), with an empty payload unless `payload` (a listing's page).
    pub(super) fn load_with(&self, id: &str, payload: bool) -> Result<Option<Stored>, Error> {
        let Some(value) = self.jobs.get(id).map_err(storage)? else {
            return Ok(None);
        };
        let record = Record::decode(value.value(), &self.plain).map_err(storage)?;
        Ok(Some(Stored {
            job: record.job,
            spec: record.spec.into_owned(),
            error: record.error.map(str::to_owned),
            payload: if payload {
                record.payload.to_vec()
            } else {
                Vec::new()
            },
            next: record.next,
            waiting: record.waiting,
        }))
    }

    /// Stores `after` (or deletes the job for `None`) in place of `before`, keeping the due
    /// index, the running and dead indexes (both of them), the gates and the counts in
    /// step. A pending gated job's place in its gate (`waiting`) is the gate's to decide
    /// ([`Tables::place`]), whatever `after` says.
    pub(super) fn set(
        &mut self,
        counts: &mut Counters,
        id: &str,
        before: Option<&Stored>,
        mut after: Option<Record<'_>>,
    ) -> Result<(), Error> {
        if let Some(record) = after.as_mut() {
            record.waiting = self.place(before, record)?;
        }
        self.set_exact(counts, id, before, after)
    }

    /// [`set`](Self::set) with `after` exactly as given, its `waiting` bit included: the
    /// log's replay, and a rebalance moving a job between its gate's two parts.
    pub(super) fn set_exact(
        &mut self,
        counts: &mut Counters,
        id: &str,
        before: Option<&Stored>,
        after: Option<Record<'_>>,
    ) -> Result<(), Error> {
        self.account(
            id,
            before.map(|s| (&s.spec, s.job, s.waiting)),
            after.as_ref().map(|r| (&*r.spec, r.job, r.waiting)),
        )?;
        let before = before.map(|s| (s.job, s.spec.kind.as_str(), s.spec.priority, s.waiting));
        let after_key = after
            .as_ref()
            .map(|r| (r.job, r.spec.kind.as_str(), r.spec.priority, r.waiting));
        // Each state's table holds its jobs' `listed_at` keys: run_at, lease end, death
        // time; the pending and running ones under their kind. A waiting job is in its
        // gate's tables instead of `due`.
        type Keys<'k> = Option<(Machine, &'k str, i8, bool)>;
        fn due(k: Keys<'_>) -> Option<(&str, u8, u64)> {
            k.filter(|(j, _, _, waiting)| j.status == Status::Pending && !waiting)
                .map(|(j, kind, p, _)| (kind, level(p), j.listed_at()))
        }
        fn running(k: Keys<'_>) -> Option<(&str, u64)> {
            k.filter(|(j, _, _, _)| matches!(j.status, Status::Running { .. }))
                .map(|(j, kind, _, _)| (kind, j.listed_at()))
        }
        fn died(k: Keys<'_>) -> Option<(&str, u64)> {
            k.filter(|(j, _, _, _)| matches!(j.status, Status::Dead { .. }))
                .map(|(j, kind, _, _)| (kind, j.listed_at()))
        }
        let (due_before, due_after) = (due(before), due(after_key));
        if due_before != due_after {
            match due_before {
                Some(("", PLAIN_LEVEL, at)) => self.plain_due.remove((at, id)).map(drop),
                Some((kind, level, at)) => self.due.remove((kind, level, at, id)).map(drop),
                None => Ok(()),
            }
            .map_err(storage)?;
            match due_after {
                Some(("", PLAIN_LEVEL, at)) => self.plain_due.insert((at, id), ()).map(drop),
                Some((kind, level, at)) => self.due.insert((kind, level, at, id), ()).map(drop),
                None => Ok(()),
            }
            .map_err(storage)?;
        }
        let (running_before, running_after) = (running(before), running(after_key));
        if running_before != running_after {
            match running_before {
                Some(("", until)) => self.plain_running.remove((until, id)).map(drop),
                Some((kind, until)) => self.running.remove((kind, until, id)).map(drop),
                None => Ok(()),
            }
            .map_err(storage)?;
            match running_after {
                Some(("", until)) => self.plain_running.insert((until, id), ()).map(drop),
                Some((kind, until)) => self.running.insert((kind, until, id), ()).map(drop),
                None => Ok(()),
            }
            .map_err(storage)?;
        }
        let (died_before, died_after) = (died(before), died(after_key));
        if died_before != died_after {
            rekey(
                &mut self.died,
                id,
                died_before.map(|(_, at)| at),
                died_after.map(|(_, at)| at),
            )?;
            if let Some((kind, at)) = died_before {
                self.died_by_kind.remove((kind, at, id)).map_err(storage)?;
            }
            if let Some((kind, at)) = died_after {
                self.died_by_kind
                    .insert((kind, at, id), ())
                    .map_err(storage)?;
            }
        }
        counts.transition(
            before.map(|(j, kind, _, _)| (kind, j.status)),
            after_key.map(|(j, kind, _, _)| (kind, j.status)),
        );
        match after {
            Some(record) => {
                let value = record.encode();
                self.jobs.insert(id, value.as_slice()).map_err(storage)?;
                self.log_change(id, Some(&value));
            }
            None => {
                self.jobs.remove(id).map_err(storage)?;
                self.log_change(id, None);
            }
        };
        Ok(())
    }

    pub(super) fn log_change(&mut self, id: &str, value: Option<&[u8]>) {
        if let Some(log) = &mut self.log {
            wal::push_change(log, id, value);
            if log.len() > LOG_AT_MOST {
                self.log = None;
            }
        }
    }

    pub(super) fn put_series(&mut self, name: &str, bytes: Option<&[u8]>) -> Result<(), Error> {
        match bytes {
            Some(bytes) => self.series.insert(name, bytes).map(drop),
            None => self.series.remove(name).map(drop),
        }
        .map_err(storage)?;
        if let Some(log) = &mut self.log {
            wal::push_series_change(log, name, bytes);
            if log.len() > LOG_AT_MOST {
                self.log = None;
            }
        }
        Ok(())
    }
}

// ===== successors =====

impl Tables<'_> {
    /// The successor waiting for `id`, as its record (pending, attempt 0) holds it.
    pub(super) fn successor(&self, id: &str) -> Result<Option<Stored>, Error> {
        let Some(value) = self.next.get(id).map_err(storage)? else {
            return Ok(None);
        };
        let record = Record::decode(value.value(), &self.plain).map_err(storage)?;
        Ok(Some(Stored {
            job: record.job,
            spec: record.spec.into_owned(),
            error: record.error.map(str::to_owned),
            payload: record.payload.to_vec(),
            next: false,
            waiting: false,
        }))
    }

    /// Sets (`Some(record)`) or deletes `id`'s successor, in `next` and the log. The caller
    /// sets the running job's `next` bit to match, in the same batch.
    pub(super) fn put_next(&mut self, id: &str, record: Option<&[u8]>) -> Result<(), Error> {
        match record {
            Some(bytes) => self.next.insert(id, bytes).map(drop),
            None => self.next.remove(id).map(drop),
        }
        .map_err(storage)?;
        if let Some(log) = &mut self.log {
            wal::push_next_change(log, id, record);
            if log.len() > LOG_AT_MOST {
                self.log = None;
            }
        }
        Ok(())
    }
}

// ===== hold-off tombstones =====

impl Tables<'_> {
    /// The end of `id`'s hold-off, if a tombstone holds it (expired or not).
    pub(super) fn held(&self, id: &str) -> Result<Option<u64>, Error> {
        Ok(self.held.get(id).map_err(storage)?.map(|v| v.value()))
    }

    /// Sets (`Some(until)`) or deletes `id`'s tombstone, in both its tables and the log.
    pub(super) fn put_held(&mut self, id: &str, until: Option<u64>) -> Result<(), Error> {
        let before = self.held(id)?;
        rekey(&mut self.held_until, id, before, until)?;
        match until {
            Some(until) => self.held.insert(id, until).map(drop),
            None => self.held.remove(id).map(drop),
        }
        .map_err(storage)?;
        if let Some(log) = &mut self.log {
            wal::push_held_change(log, id, until);
            if log.len() > LOG_AT_MOST {
                self.log = None;
            }
        }
        Ok(())
    }

    /// Deletes up to [`HELD_PER_CLAIM`] tombstones whose hold-off ended at or before `now`,
    /// earliest first; how many.
    pub(super) fn expire_held(&mut self, now: u64) -> Result<usize, Error> {
        let mut expired = Vec::new();
        for entry in self
            .held_until
            .range((0, "")..)
            .map_err(storage)?
            .take(HELD_PER_CLAIM)
        {
            let (key, _) = entry.map_err(storage)?;
            let (until, id) = key.value();
            if until > now {
                break;
            }
            expired.push(id.to_owned());
        }
        for id in &expired {
            self.put_held(id, None)?;
        }
        Ok(expired.len())
    }
}

/// Moves `id`'s key in `index` from `before` to `after` (`None`: no key); nothing if equal.
pub(super) fn rekey(
    index: &mut Table<'_, (u64, &'static str), ()>,
    id: &str,
    before: Option<u64>,
    after: Option<u64>,
) -> Result<(), Error> {
    if before == after {
        return Ok(());
    }
    if let Some(at) = before {
        index.remove((at, id)).map_err(storage)?;
    }
    if let Some(at) = after {
        index.insert((at, id), ()).map_err(storage)?;
    }
    Ok(())
}

/// The public state of a job in `status`.
pub(super) fn state(status: Status) -> JobState {
    match status {
        Status::Pending => JobState::Pending,
        Status::Running { .. } => JobState::Running,
        Status::Dead { .. } => JobState::Dead,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_order_priorities_highest_first() {
        assert_eq!(level(i8::MAX), 0);
        assert_eq!(level(0), PLAIN_LEVEL);
        assert_eq!(level(-1), 128);
        assert_eq!(level(i8::MIN), 255);
        for p in i8::MIN..i8::MAX {
            assert_eq!(level(p), level(p + 1) + 1, "{p}");
        }
    }
}
