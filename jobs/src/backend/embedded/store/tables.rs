//! The store's tables and what keeps them in step: [`Tables`], every index and the counts
//! written through [`Tables::set`], and each change appended to the batch's log record.

use redb::{ReadableTable, Table, TableDefinition};

use crate::backend::embedded::record::Record;
use crate::backend::embedded::wal;
use crate::core::error::Error;
use crate::core::job::{JobInfo, JobState};
use crate::core::kind::Spec;
use crate::core::state::{Machine, Status, Tally};

pub(super) const JOBS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("jobs");
pub(super) const DUE: TableDefinition<'_, (u64, &str), ()> = TableDefinition::new("due");
pub(super) const RUNNING: TableDefinition<'_, (u64, &str), ()> = TableDefinition::new("running");
pub(super) const DIED: TableDefinition<'_, (u64, &str), ()> = TableDefinition::new("died");
pub(super) const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");
/// A batch whose log record would be longer than this is a checkpoint instead (a bulk
/// `schedule_many`): it rewrites so many pages that the record saves nothing, and the pages
/// its commit frees could not be reused before the next checkpoint (the file would grow).
pub(super) const LOG_AT_MOST: usize = 256 << 10;

pub(super) const SERIES: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("series");

pub(super) fn storage(err: impl std::fmt::Display) -> Error {
    Error::storage(err)
}

pub(super) struct Tables<'t> {
    pub(super) jobs: Table<'t, &'static str, &'static [u8]>,
    pub(super) due: Table<'t, (u64, &'static str), ()>,
    pub(super) running: Table<'t, (u64, &'static str), ()>,
    pub(super) died: Table<'t, (u64, &'static str), ()>,
    pub(super) series: Table<'t, &'static str, &'static [u8]>,
    /// The body of this batch's log record: every job's final value; `None` once it would
    /// pass `LOG_AT_MOST` (the batch is then a checkpoint, and a bulk load does not build a
    /// record it would throw away), or for a batch that pauses or resumes (the log holds
    /// jobs only, so the flag is made durable by a checkpoint).
    pub(super) log: Option<Vec<u8>>,
    /// Whether claims are stopped, as this batch leaves it.
    pub(super) paused: bool,
}

impl<'t> Tables<'t> {
    pub(super) fn open(txn: &'t redb::WriteTransaction) -> Result<Tables<'t>, Error> {
        Ok(Tables {
            jobs: txn.open_table(JOBS).map_err(storage)?,
            due: txn.open_table(DUE).map_err(storage)?,
            running: txn.open_table(RUNNING).map_err(storage)?,
            died: txn.open_table(DIED).map_err(storage)?,
            series: txn.open_table(SERIES).map_err(storage)?,
            log: Some(Vec::new()),
            paused: false,
        })
    }
}

/// A job read from `jobs`, owned.
pub(super) struct Stored {
    pub(super) job: Machine,
    pub(super) error: Option<String>,
    pub(super) payload: Vec<u8>,
}

impl Stored {
    /// The record of this job in state `job`, its error and payload unchanged.
    pub(super) fn with(&self, job: Machine) -> Record<'_> {
        Record {
            job,
            error: self.error.as_deref(),
            payload: &self.payload,
        }
    }

    pub(super) fn info(self, id: String, spec: Spec) -> JobInfo {
        let Stored {
            job,
            error,
            payload,
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
        let record = Record::decode(value.value()).map_err(storage)?;
        Ok(Some(Stored {
            job: record.job,
            error: record.error.map(str::to_owned),
            payload: if payload {
                record.payload.to_vec()
            } else {
                Vec::new()
            },
        }))
    }

    /// Stores `after` (or deletes the job for `None`) in place of `before`, keeping the due
    /// index, the running and dead indexes and the counts in step.
    pub(super) fn set(
        &mut self,
        counts: &mut Tally,
        id: &str,
        before: Option<Machine>,
        after: Option<Record<'_>>,
    ) -> Result<(), Error> {
        let after_job = after.map(|r| r.job);
        // Each state's table holds its jobs' `listed_at` keys: run_at, lease end, death time.
        let key = |job: Option<Machine>, state: fn(&Status) -> bool| {
            job.filter(|j| state(&j.status)).map(|j| j.listed_at())
        };
        let due = |job| key(job, |s| *s == Status::Pending);
        let running = |job| key(job, |s| matches!(s, Status::Running { .. }));
        let died = |job| key(job, |s| matches!(s, Status::Dead { .. }));
        rekey(&mut self.due, id, due(before), due(after_job))?;
        rekey(&mut self.running, id, running(before), running(after_job))?;
        rekey(&mut self.died, id, died(before), died(after_job))?;
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
        counts.transition(before.map(|j| j.status), after_job.map(|j| j.status));
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
