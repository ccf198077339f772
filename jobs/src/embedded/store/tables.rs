//! The store's tables and what keeps them in step: [`Tables`] (every index and the counts
//! written through [`Tables::set`]) and the reads a page
//! or a claim makes.

use redb::{ReadableTable, Table, TableDefinition};

use super::super::record::Record;
use super::super::series;
use super::super::wal;
use super::LOG_AT_MOST;
use crate::error::Error;
use crate::job::{JobInfo, JobState, Scheduled, When};
use crate::model::{Counts, Job, Status};

pub(super) const JOBS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("jobs");
pub(super) const DUE: TableDefinition<'_, (u64, &str), ()> = TableDefinition::new("due");
pub(super) const RUNNING: TableDefinition<'_, (u64, &str), ()> = TableDefinition::new("running");
pub(super) const DIED: TableDefinition<'_, (u64, &str), ()> = TableDefinition::new("died");
pub(super) const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");
pub(super) const SERIES: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("series");

pub(super) fn storage(err: impl std::fmt::Display) -> Error {
    Error::storage(err)
}

pub(in crate::embedded) struct Tables<'t> {
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
pub(in crate::embedded) struct Stored {
    pub(in crate::embedded) job: Job,
    pub(super) error: Option<String>,
    pub(super) payload: Vec<u8>,
}

impl Stored {
    /// The record of this job in state `job`, its error and payload unchanged.
    pub(super) fn with(&self, job: Job) -> Record<'_> {
        Record {
            job,
            error: self.error.as_deref(),
            payload: &self.payload,
        }
    }

    pub(super) fn info(self, id: String) -> JobInfo {
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
        )
    }
}

impl Tables<'_> {
    pub(in crate::embedded) fn load(&self, id: &str) -> Result<Option<Stored>, Error> {
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
    pub(in crate::embedded) fn set(
        &mut self,
        counts: &mut Counts,
        id: &str,
        before: Option<Job>,
        after: Option<Record<'_>>,
    ) -> Result<(), Error> {
        let after_job = after.map(|r| r.job);
        // Each state's table holds its jobs' `listed_at` keys: run_at, lease end, death time.
        let key = |job: Option<Job>, state: fn(&Status) -> bool| {
            job.filter(|j| state(&j.status)).map(|j| j.listed_at())
        };
        let due = |job| key(job, |s| *s == Status::Pending);
        let running = |job| key(job, |s| matches!(s, Status::Leased { .. }));
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

    pub(in crate::embedded) fn load_series(
        &self,
        name: &str,
    ) -> Result<Option<series::Record>, Error> {
        match self.series.get(name).map_err(storage)? {
            Some(bytes) => Ok(Some(series::Record::decode(bytes.value())?)),
            None => Ok(None),
        }
    }

    /// Every series, in name order.
    pub(in crate::embedded) fn all_series(&self) -> Result<Vec<(String, series::Record)>, Error> {
        let mut out = Vec::new();
        for entry in self.series.iter().map_err(storage)? {
            let (name, bytes) = entry.map_err(storage)?;
            out.push((
                name.value().to_owned(),
                series::Record::decode(bytes.value())?,
            ));
        }
        Ok(out)
    }

    /// Stores (or for `None` deletes) a series' record, logged like a job's.
    pub(in crate::embedded) fn set_series(
        &mut self,
        name: &str,
        record: Option<&series::Record>,
    ) -> Result<(), Error> {
        self.put_series(name, record.map(series::Record::encode).as_deref())
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

pub(super) fn schedule(
    t: &mut Tables<'_>,
    counts: &mut Counts,
    now: u64,
    id: &str,
    when: When,
    payload: &[u8],
) -> Result<(Scheduled, u64), Error> {
    if let Some(stored) = t.load(id)? {
        return Ok((Scheduled::Exists, stored.job.run_at));
    }
    let job = Job::new(when.resolve(now));
    let record = Record {
        job,
        error: None,
        payload,
    };
    t.set(counts, id, None, Some(record))?;
    Ok((Scheduled::Created, job.run_at))
}

/// The earliest `run_at` of a pending job: the first key of `due`.
pub(super) fn next_pending(t: &Tables<'_>) -> Result<Option<u64>, Error> {
    Ok(t.due
        .first()
        .map_err(storage)?
        .map(|(key, _)| key.value().0))
}

/// Up to `limit` jobs in `state` after the position `after`, each with its position: a range
/// of the state's table, pending by `(run_at, id)`, running by `(lease end, id)`, dead by
/// `(death time, id)` descending.
pub(super) fn list(
    t: &Tables<'_>,
    state: JobState,
    after: Option<(u64, &str)>,
    limit: usize,
    payloads: bool,
) -> Result<Vec<(u64, JobInfo)>, Error> {
    use std::ops::Bound::{Excluded, Unbounded};
    let start = after.map_or(Unbounded, Excluded);
    let keys: Box<dyn Iterator<Item = _>> = match state {
        JobState::Pending => Box::new(t.due.range((start, Unbounded)).map_err(storage)?),
        JobState::Running => Box::new(t.running.range((start, Unbounded)).map_err(storage)?),
        JobState::Dead => Box::new(t.died.range((Unbounded, start)).map_err(storage)?.rev()),
    };
    let mut out = Vec::with_capacity(limit.min(1024));
    for entry in keys {
        if out.len() == limit {
            break;
        }
        let (key, _) = entry.map_err(storage)?;
        let (at, id) = key.value();
        let Some(stored) = t.load_with(id, payloads)? else {
            return Err(Error::storage(format!(
                "an index names a missing job {id:?}"
            )));
        };
        if self::state(stored.job.status) == state {
            out.push((at, stored.info(id.to_owned())));
        }
    }
    Ok(out)
}

pub(super) fn state(status: Status) -> JobState {
    match status {
        Status::Pending => JobState::Pending,
        Status::Leased { .. } => JobState::Running,
        Status::Dead { .. } => JobState::Dead,
    }
}
