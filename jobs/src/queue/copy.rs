//! Copying a queue into another, on any backends: [`JobQueue::copy_to`] and what it reports,
//! [`Copied`].
//!
//! # Ground rules
//!
//! - A job is written only where its id is free ([`Backend::import`]), exactly as the source
//!   holds it: pending at its `run_at`, or dead since its death time, with its attempts,
//!   last error and payload. A copy that stops halfway (a crash, a lost connection) is
//!   finished by running it again: the ids already there are skipped, so nothing is
//!   written twice and nothing is skipped that was not there.
//! - Hold-off tombstones (`Dedup::HoldOff`) are not jobs and are not copied; a job copied
//!   keeps its hold-off in its options, and no backend writes an id over its own live
//!   tombstone (the id counts as existing).
//! - Successors (`Dedup::AllowWhileRunning`) are not jobs either and are not copied: a copy
//!   is of a stopped queue, and the job a successor waits for is copied pending (below), as
//!   a job of its own, with no successor beside it (lists do not show successors).
//! - The source is read through its list indexes a page at a time (pending, running, dead),
//!   each page written with one import (one commit embedded or on PostgreSQL, one script
//!   call per partition on Redis). Jobs that move in the source while it is read may be
//!   missed or copied in an older state: the source must be still (paused, its workers
//!   stopped; the command refuses an unpaused one).
//! - A gated job (a key with a limit or a rate) enters its gate in the destination as an
//!   import does. A Redis destination of more than one partition refuses gated jobs
//!   (`Error::is_invalid_config`), so such a copy stops part-way, at the first page that
//!   holds one, with the pages before it written; it is not checked before the copy starts.
//! - A running job has no lease in the destination: it is written pending at its lease's
//!   end with the attempts it has, which is when and how the source would deliver it again.
//! - Series come after jobs, through [`JobQueue::schedule_recurring_with`], only for names
//!   the destination lacks, so a new series' first occurrence is its first after now
//!   (that call takes no other). A pending occurrence still ahead is that one: copied as
//!   a job, it is adopted by the series as the store's series rules adopt any
//!   never-delivered job under the id (`core/series.rs`), and the series goes on with the
//!   same next occurrence. One already due (it fell due while the source was paused) is
//!   not: it stays an ordinary job and runs once, the series' catch-up policy applied
//!   neither to it nor to the occurrences missed after it, and the series' next
//!   occurrence is its first after the copy. Either way the series has one pending
//!   occurrence, never two.

use std::collections::HashSet;

use super::JobQueue;
use crate::backend::Import;
use crate::core::error::Error;
use crate::core::job::{nanos, JobState};
use crate::core::kind::JobOptions;
use crate::core::series::{occurrence_id, RecurringOptions};

/// Jobs read and written per step: within one Redis script call's limit.
const PAGE: usize = 500;

/// What [`JobQueue::copy_to`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Copied {
    /// Jobs written to the destination (pending, running and dead ones).
    pub jobs: u64,
    /// Jobs whose id the destination held already, left as they were there.
    pub existing: u64,
    /// Of [`jobs`](Self::jobs), the running ones, written pending at their lease's end.
    pub running: u64,
    /// Recurring series created in the destination.
    pub series: u64,
    /// Series whose name the destination held already, left as they were there.
    pub existing_series: u64,
    /// Series of the source with no occurrence left, not copied.
    pub ended_series: u64,
}

impl JobQueue {
    /// Copies this queue's jobs and recurring series into `to`, whatever the two backends:
    /// how an application that started on the embedded store moves to PostgreSQL or Redis.
    ///
    /// Each pending and dead job is written as it is here: its `run_at`, attempts, last
    /// error and payload, and a dead job's death time (so the destination lists and revives
    /// it in the same order). A running job is written pending, due at the end of its
    /// lease, with its attempts: as if its lease ran out, which is when this queue would
    /// deliver it again. Each series is created with its recurrence, catch-up policy and
    /// payload; its [`last_run`](crate::RecurringInfo::last_run) starts empty. Its pending
    /// occurrence, copied as a job, stays its next one if still ahead. If it is due
    /// already (it fell due while this queue was paused), it runs once in `to` as an
    /// ordinary job, whatever the series' [`CatchUp`](crate::CatchUp) policy would have
    /// run of the occurrences missed since (none under `CatchUp::None`, several under
    /// `CatchUp::All`), and the series' next occurrence there is its first after the
    /// copy. Whether the queue is paused is not copied.
    ///
    /// Only ids and series names that `to` lacks are written; the rest are counted and left
    /// alone. So a copy that failed halfway is completed by calling it again, and a second
    /// call writes nothing, as long as nothing consumes `to` in between (a job acked there
    /// is gone, and a second copy would write it again).
    ///
    /// Stop the source first: [`pause`](Self::pause) it and stop its workers (or let their
    /// handlers finish), so no job moves while it is read. A job that moves during the copy
    /// (claimed, acked, retried) may be missed or copied as it was.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_jobs::Error> {
    /// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-copy-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// let old = wheel_jobs::JobQueue::open(dir.join("old.redb")).await?;
    /// old.schedule("rate:order-42", Duration::from_secs(48 * 3600), "5 stars").await?;
    /// old.pause().await?;
    ///
    /// let new = wheel_jobs::JobQueue::open(dir.join("new.redb")).await?;
    /// let copied = old.copy_to(&new).await?;
    /// assert_eq!((copied.jobs, copied.existing), (1, 0));
    /// assert_eq!(new.get("rate:order-42").await?.unwrap().payload(), b"5 stars");
    /// // Again: everything is there already.
    /// assert_eq!(old.copy_to(&new).await?.existing, 1);
    /// # old.close().await?;
    /// # new.close().await?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_payload_too_large`] for a payload above `to`'s
    /// [`max_payload`](crate::Builder::max_payload); [`Error::is_invalid_input`] for an id
    /// `to`'s backend cannot store (PostgreSQL refuses NUL), or a series whose pending
    /// occurrence vanished while it was copied (the source was not still); both name the
    /// job or series. [`Error::is_storage`], [`Error::is_unavailable`],
    /// [`Error::is_closed`] of either queue. [`Error::is_invalid_config`] for a gated job
    /// (its key has a [`key_limit`](crate::JobOptions::key_limit) or
    /// [`key_rate`](crate::JobOptions::key_rate)) copied into a Redis queue of more than one
    /// partition, which refuses them: the copy stops at the page holding the first one, the
    /// pages before it written. Nothing is checked beforehand: to copy such a queue, first
    /// cancel its gated jobs (or copy into a queue of one partition). The pages written
    /// before the error stay written: after a storage or connection failure, call it again;
    /// an input error comes back at the same job until its cause is fixed (a larger
    /// `max_payload` for `to`).
    pub async fn copy_to(&self, to: &JobQueue) -> Result<Copied, Error> {
        let mut copied = Copied::default();
        for state in [JobState::Pending, JobState::Running, JobState::Dead] {
            self.copy_state(to, state, &mut copied).await?;
        }
        self.copy_series(to, &mut copied).await?;
        Ok(copied)
    }

    /// Copies every job in `state`, a page at a time.
    async fn copy_state(
        &self,
        to: &JobQueue,
        state: JobState,
        copied: &mut Copied,
    ) -> Result<(), Error> {
        let max = to.inner.config.max_payload;
        let mut after = None;
        loop {
            let page = self
                .inner
                .backend
                .list(state, after, PAGE, true, None)
                .await?;
            // Until a page comes back empty: a short page proves nothing on a backend that
            // merges partitions.
            let Some((at, last)) = page.last() else {
                return Ok(());
            };
            after = Some((*at, last.id().to_owned()));
            let mut jobs = Vec::with_capacity(page.len());
            for (at, job) in page {
                if job.payload().len() > max {
                    return Err(Error::payload_too_large_of(
                        job.id(),
                        job.payload().len(),
                        max,
                    ));
                }
                let run_at = nanos(job.run_at());
                let (run_at, died_at) = match state {
                    JobState::Pending => (run_at, None),
                    JobState::Running => (at, None),
                    JobState::Dead => (run_at, Some(at)),
                };
                jobs.push(Import {
                    id: job.id().to_owned(),
                    run_at,
                    died_at,
                    attempt: job.attempt(),
                    last_error: job.last_error().map(str::to_owned),
                    payload: job.payload().to_vec(),
                    spec: job.spec().clone(),
                });
            }
            let earliest = jobs
                .iter()
                .filter(|j| j.died_at.is_none())
                .map(|j| j.run_at)
                .min();
            let written = to.inner.backend.import(jobs).await?;
            let n = written.iter().filter(|&&w| w).count() as u64;
            copied.jobs += n;
            copied.existing += written.len() as u64 - n;
            if state == JobState::Running {
                copied.running += n;
            }
            if let (Some(earliest), true) = (earliest, n > 0) {
                to.inner.wakeup.due_at(earliest);
            }
        }
    }

    /// Creates in `to` each series it lacks, with the payload of its pending occurrence
    /// (a series' payload: every occurrence is made with it, and setting the series anew
    /// gives it to the pending one).
    async fn copy_series(&self, to: &JobQueue, copied: &mut Copied) -> Result<(), Error> {
        let there: HashSet<String> = to
            .list_recurring()
            .await?
            .into_iter()
            .map(|series| series.name().to_owned())
            .collect();
        for series in self.list_recurring().await? {
            let name = series.name();
            if there.contains(name) {
                copied.existing_series += 1;
                continue;
            }
            let Some(next) = series.next_run_nanos() else {
                copied.ended_series += 1;
                continue;
            };
            let head = occurrence_id(name, next);
            let Some(job) = self.inner.backend.get(head.clone()).await? else {
                return Err(Error::invalid_input(format!(
                    "the series {name:?} moved on while it was copied (its pending \
                     occurrence {head:?} is gone): pause the source, then copy again"
                )));
            };
            to.schedule_recurring_with(
                name,
                series.recurrence().clone(),
                job.payload().to_vec(),
                RecurringOptions::new()
                    .options(JobOptions::of_spec(series.spec()))
                    .catch_up(series.catch_up()),
            )
            .await?;
            copied.series += 1;
        }
        Ok(())
    }
}
