//! The public queue: [`JobQueue`], a thin front over the [`Backend`] trait (it is opened by
//! the [`Builder`](crate::Builder) in `builder.rs`).
//!
//! # Ground rules
//!
//! - Input is validated here, once for every backend: ids are 1 to
//!   [`MAX_ID_LEN`](crate::MAX_ID_LEN) bytes, payloads at most `max_payload` bytes; then the
//!   call goes to the trait. No backend is named here.
//! - After a change that makes a job due (schedule, reschedule, retry) is durable, the queue
//!   tells its idle consumers (`core/wakeup.rs`), so a job scheduled earlier than what they sleep
//!   toward is delivered on time.

pub(crate) mod builder;
pub(crate) mod consumer;
pub(crate) mod copy;
pub(crate) mod delivery;
pub(crate) mod hub;
pub(crate) mod kinds;
pub(crate) mod metrics;
mod recurring;
pub(crate) mod routes;
#[cfg(feature = "postgres")]
mod sql;
#[cfg(feature = "serde")]
pub(crate) mod typed;
pub(crate) mod worker;

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use crate::backend::{Backend, ClaimKinds, NewJob};
use crate::core::config::Config;
use crate::core::error::Error;
use crate::core::job::{check_id, check_payload, Counts, JobInfo, JobState, Scheduled, When};
use crate::core::kind::{assert_kind, Dedup, JobOptions, Spec};
use crate::core::list::{ListOptions, Page};
use crate::core::wakeup::Wakeup;
use crate::queue::consumer::Consumer;
use crate::queue::delivery::Delivery;
use crate::queue::hub::Hub;
use crate::queue::kinds::Worker;

/// A durable queue of delayed jobs. Cheap to clone: clones share one store.
///
/// See the [crate docs](crate) for the guarantees.
#[derive(Clone)]
pub struct JobQueue {
    inner: Arc<Hub>,
}

impl fmt::Debug for JobQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobQueue")
            .field("backend", &self.inner.backend)
            .field("lease", &self.inner.config.lease)
            .field("max_attempts", &self.inner.config.max_attempts)
            .finish()
    }
}

impl JobQueue {
    pub(crate) fn with_backend(
        backend: Box<dyn Backend>,
        config: Config,
        wakeup: Arc<Wakeup>,
    ) -> JobQueue {
        let inner = Arc::new(Hub::new(backend, config, wakeup));
        #[cfg(feature = "metrics")]
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(refresh_gauges(Arc::downgrade(&inner)));
        }
        JobQueue { inner }
    }

    /// Stores a job `id` with `payload`, due `when`. Returns once the job is durable
    /// (fsync'd); concurrent calls share one commit.
    ///
    /// Idempotent on `id`: if a job with this id is pending, running or dead, nothing
    /// changes and the result is [`Scheduled::Exists`]. An acked job is gone, so its id can
    /// be scheduled again (unless it was scheduled with a hold-off,
    /// [`Dedup::HoldOff`](crate::Dedup::HoldOff): then [`Scheduled::HeldOff`] until it ends).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_jobs::Scheduled;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_jobs::Error> {
    /// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-schedule-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// # let queue = wheel_jobs::JobQueue::open(dir.join("jobs.redb")).await?;
    /// let in_48h = Duration::from_secs(48 * 3600);
    /// assert_eq!(queue.schedule("rate:order-42", in_48h, "5 stars").await?, Scheduled::Created);
    /// assert_eq!(queue.schedule("rate:order-42", in_48h, "5 stars").await?, Scheduled::Exists);
    /// # queue.close().await?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_id`], [`Error::is_payload_too_large`], [`Error::is_storage`],
    /// [`Error::is_closed`]. After an error the job may or may not exist (a failure can
    /// strike after the commit); scheduling it again is safe.
    pub async fn schedule(
        &self,
        id: &str,
        when: impl Into<When>,
        payload: impl Into<Vec<u8>>,
    ) -> Result<Scheduled, Error> {
        check_id(id)?;
        let payload = payload.into();
        check_payload(&payload, self.inner.config.max_payload)?;
        let spec = self.inner.defaults.plain().clone();
        self.schedule_spec(id, when.into(), payload, spec, Dedup::Keep)
            .await
    }

    /// [`schedule`](Self::schedule) with options: the job's kind, priority, attempts,
    /// backoff and lease. Options left unset come from the kind's defaults
    /// ([`Builder::kind`](crate::Builder::kind)), then from the queue's; the result is stored
    /// with the job.
    ///
    /// The options' [`Dedup`](crate::Dedup) mode says what happens if the id is taken:
    /// [`Scheduled::Exists`] (`Keep`, the default), [`Scheduled::Replaced`] (`Replace`, on a
    /// pending job), [`Scheduled::Successor`] (`AllowWhileRunning`, on a running job), or
    /// [`Scheduled::HeldOff`] while an acked job's hold-off lasts. Idle consumers are woken
    /// for a replaced job as for a created one; the `scheduled` metric counts created jobs
    /// and successors.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_jobs::{JobOptions, Scheduled};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_jobs::Error> {
    /// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-schedule-with-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// # let queue = wheel_jobs::JobQueue::open(dir.join("jobs.redb")).await?;
    /// let capture = JobOptions::kind("capture").priority(10).max_attempts(3);
    /// let outcome = queue.schedule_with("capture:order-42", Duration::ZERO, "42", &capture).await?;
    /// assert_eq!(outcome, Scheduled::Created);
    /// let job = queue.get("capture:order-42").await?.expect("stored");
    /// assert_eq!((job.kind(), job.priority()), ("capture", 10));
    /// # queue.close().await?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`schedule`](Self::schedule), and [`Error::is_invalid_input`] for a kind longer
    /// than [`MAX_KIND_LEN`](crate::MAX_KIND_LEN) bytes or with a control character,
    /// `max_attempts` 0 or a zero lease, or a dedup mode other than `Keep` on Redis or
    /// PostgreSQL (not built there yet).
    pub async fn schedule_with(
        &self,
        id: &str,
        when: impl Into<When>,
        payload: impl Into<Vec<u8>>,
        options: &JobOptions,
    ) -> Result<Scheduled, Error> {
        check_id(id)?;
        let payload = payload.into();
        check_payload(&payload, self.inner.config.max_payload)?;
        let spec = self.inner.defaults.resolve(options)?;
        let dedup = self.inner.defaults.dedup_of(options);
        self.schedule_spec(id, when.into(), payload, spec, dedup)
            .await
    }

    async fn schedule_spec(
        &self,
        id: &str,
        when: When,
        payload: Vec<u8>,
        spec: Spec,
        dedup: Dedup,
    ) -> Result<Scheduled, Error> {
        let job = NewJob {
            id: id.to_owned(),
            when,
            payload,
            spec,
            dedup,
        };
        let (outcome, run_at) = self.inner.backend.schedule(job).await?;
        if matches!(outcome, Scheduled::Created | Scheduled::Successor) {
            self.inner.metrics.scheduled(1);
        }
        if matches!(outcome, Scheduled::Created | Scheduled::Replaced) {
            // A replaced job's run_at may have moved earlier than consumers sleep.
            self.inner.wakeup.due_at(run_at);
        }
        Ok(outcome)
    }

    /// [`schedule`](Self::schedule) for many jobs at once, the outcomes in order. Bulk loads
    /// go much faster this way than through one call per job.
    ///
    /// On the embedded store it is one commit: all or nothing. On Redis the jobs are written
    /// per partition in script calls of at most 512 jobs (a script blocks the server while
    /// it runs), each all or nothing: after an error, some of the jobs may be stored. Ids
    /// make the call idempotent, so retrying the whole batch is safe.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_jobs::Scheduled;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_jobs::Error> {
    /// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-many-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// # let queue = wheel_jobs::JobQueue::open(dir.join("jobs.redb")).await?;
    /// let jobs = (0..3).map(|i| (format!("broadcast-{i}"), Duration::from_secs(60), "hello"));
    /// assert_eq!(queue.schedule_many(jobs).await?, [Scheduled::Created; 3]);
    /// # queue.close().await?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`schedule`](Self::schedule); an invalid id or payload anywhere refuses the whole
    /// batch before anything is stored.
    pub async fn schedule_many<I, S, W, P>(&self, jobs: I) -> Result<Vec<Scheduled>, Error>
    where
        I: IntoIterator<Item = (S, W, P)>,
        S: Into<String>,
        W: Into<When>,
        P: Into<Vec<u8>>,
    {
        let spec = self.inner.defaults.plain().clone();
        self.schedule_many_spec(jobs, spec, Dedup::Keep).await
    }

    /// [`schedule_many`](Self::schedule_many) with the same options for every job (see
    /// [`schedule_with`](Self::schedule_with)).
    ///
    /// # Errors
    ///
    /// As [`schedule_many`](Self::schedule_many) and [`schedule_with`](Self::schedule_with).
    pub async fn schedule_many_with<I, S, W, P>(
        &self,
        jobs: I,
        options: &JobOptions,
    ) -> Result<Vec<Scheduled>, Error>
    where
        I: IntoIterator<Item = (S, W, P)>,
        S: Into<String>,
        W: Into<When>,
        P: Into<Vec<u8>>,
    {
        let spec = self.inner.defaults.resolve(options)?;
        let dedup = self.inner.defaults.dedup_of(options);
        self.schedule_many_spec(jobs, spec, dedup).await
    }

    async fn schedule_many_spec<I, S, W, P>(
        &self,
        jobs: I,
        spec: Spec,
        dedup: Dedup,
    ) -> Result<Vec<Scheduled>, Error>
    where
        I: IntoIterator<Item = (S, W, P)>,
        S: Into<String>,
        W: Into<When>,
        P: Into<Vec<u8>>,
    {
        let max = self.inner.config.max_payload;
        let mut batch = Vec::new();
        for (id, when, payload) in jobs {
            let (id, payload) = (id.into(), payload.into());
            check_id(&id)?;
            check_payload(&payload, max)?;
            batch.push(NewJob {
                id,
                when: when.into(),
                payload,
                spec: spec.clone(),
                dedup,
            });
        }
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let outcomes = self.inner.backend.schedule_many(batch).await?;
        let created = outcomes
            .iter()
            .filter(|(o, _)| matches!(o, Scheduled::Created | Scheduled::Successor));
        self.inner.metrics.scheduled(created.count() as u64);
        let moved = outcomes
            .iter()
            .filter(|(o, _)| matches!(o, Scheduled::Created | Scheduled::Replaced));
        if let Some(earliest) = moved.map(|(_, at)| *at).min() {
            self.inner.wakeup.due_at(earliest);
        }
        Ok(outcomes.into_iter().map(|(o, _)| o).collect())
    }

    /// Removes a pending job: `true` if it was pending, and then it is never delivered
    /// (nor is a successor waiting for it, [`Dedup::AllowWhileRunning`](crate::Dedup::AllowWhileRunning)).
    /// A running job with a successor loses the successor (`true`) and runs on. Any other
    /// running job, a dead job, or an unknown id gives `false` and nothing changes; so does
    /// the pending occurrence of a recurring series (its series would have none:
    /// [`cancel_recurring`](Self::cancel_recurring) removes both).
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_id`], [`Error::is_storage`], [`Error::is_closed`].
    pub async fn cancel(&self, id: &str) -> Result<bool, Error> {
        check_id(id)?;
        self.inner.backend.cancel(id.to_owned()).await
    }

    /// Moves a pending job to `when` (earlier or later): `true` if it was pending. The
    /// pending occurrence of a recurring series gives `false` and stays: its time is its id
    /// and the series' schedule (moved, it would run out of turn with the occurrences
    /// after it); change the series with
    /// [`schedule_recurring`](Self::schedule_recurring) instead.
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_id`], [`Error::is_storage`], [`Error::is_closed`].
    pub async fn reschedule(&self, id: &str, when: impl Into<When>) -> Result<bool, Error> {
        check_id(id)?;
        match self
            .inner
            .backend
            .reschedule(id.to_owned(), when.into())
            .await?
        {
            Some(run_at) => {
                self.inner.wakeup.due_at(run_at);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The queue's name: the Redis queue's name, or the embedded store's file name without
    /// its extension (`jobs` for `jobs.redb`). Its metrics carry it as their `queue` label.
    pub fn name(&self) -> &str {
        &self.inner.config.name
    }

    /// The job's state, due time and attempts, or `None` if there is no such job (never
    /// scheduled, cancelled, acked or removed; an id held off after its ack,
    /// [`Dedup::HoldOff`](crate::Dedup::HoldOff), has no job either).
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_id`], [`Error::is_storage`], [`Error::is_closed`].
    pub async fn get(&self, id: &str) -> Result<Option<JobInfo>, Error> {
        check_id(id)?;
        self.inner.backend.get(id.to_owned()).await
    }

    /// How many jobs are scheduled and not delivered (including retries waiting to run
    /// again; not counting running and dead jobs). O(1).
    ///
    /// # Errors
    ///
    /// [`Error::is_storage`], [`Error::is_closed`].
    pub async fn pending(&self) -> Result<u64, Error> {
        self.inner.backend.pending().await
    }

    /// How many jobs are delivered and not yet acked or given back (state
    /// [`JobState::Running`]), including those whose lease lapsed
    /// and that wait for redelivery. O(1).
    ///
    /// # Errors
    ///
    /// [`Error::is_storage`], [`Error::is_closed`].
    pub async fn running(&self) -> Result<u64, Error> {
        self.inner.backend.running().await
    }

    /// How many jobs are pending, running and dead, whether the queue is paused, and when
    /// the next pending job is due.
    ///
    /// The numbers come from counters the store keeps beside the jobs, never from a scan:
    /// O(1) whatever the queue's size (the next due time reads the head of the due index).
    /// On Redis one script call per partition.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_jobs::Error> {
    /// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-counts-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// let queue = wheel_jobs::JobQueue::open(dir.join("jobs.redb")).await?;
    /// queue.schedule("rate:order-42", Duration::from_secs(60), "5 stars").await?;
    /// let counts = queue.counts().await?;
    /// assert_eq!((counts.pending, counts.running, counts.dead), (1, 0, 0));
    /// assert!(!counts.paused);
    /// assert!(counts.next_due.is_some());
    /// # queue.close().await?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_storage`], [`Error::is_unavailable`], [`Error::is_closed`].
    pub async fn counts(&self) -> Result<Counts, Error> {
        let counts = self.inner.backend.counts().await?;
        self.inner.metrics.counts(&counts);
        Ok(counts)
    }

    /// A page of the jobs in `state`, each state in the order of its next step: pending
    /// jobs oldest due first (by `run_at`, then id), running ones by the end of their lease
    /// (the jobs a stalled process would lose first come first), dead ones most recently
    /// dead first. Resume with the page's [`cursor`](Page::cursor) in
    /// [`ListOptions::after`]: the next page starts right after the last job shown, so jobs
    /// added or removed between pages never make a listing show a job twice or skip one that
    /// did not move (a running job whose lease was renewed has moved).
    ///
    /// Each page costs O(limit): a range read of the state's index (on Redis, per
    /// partition, merged), never a scan. Pages carry the jobs' payloads: keep the limit
    /// modest for large payloads.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_jobs::{JobState, ListOptions};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_jobs::Error> {
    /// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-list-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// let queue = wheel_jobs::JobQueue::open(dir.join("jobs.redb")).await?;
    /// for i in 0..5 {
    ///     queue.schedule(&format!("job-{i}"), Duration::from_secs(60 + i), "").await?;
    /// }
    /// let page = queue.list(JobState::Pending, ListOptions::new().limit(3)).await?;
    /// let ids: Vec<&str> = page.jobs().iter().map(|job| job.id()).collect();
    /// assert_eq!(ids, ["job-0", "job-1", "job-2"]);
    /// let cursor = page.cursor().expect("more jobs follow");
    /// let rest = queue.list(JobState::Pending, ListOptions::new().limit(3).after(cursor)).await?;
    /// assert_eq!(rest.jobs().len(), 2);
    /// assert!(rest.cursor().is_none());
    /// # queue.close().await?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_input`] for a limit of 0 or above
    /// [`ListOptions::MAX_LIMIT`] (1,000), a cursor from another state's list, or a
    /// [`kind`](ListOptions::kind) longer than [`MAX_KIND_LEN`](crate::MAX_KIND_LEN) bytes or
    /// with a control character;
    /// [`Error::is_storage`], [`Error::is_unavailable`], [`Error::is_closed`].
    pub async fn list(&self, state: JobState, options: &ListOptions) -> Result<Page, Error> {
        let (limit, after) = options.checked(state)?;
        let after = after.map(|(at, id)| (at, id.to_owned()));
        // One more than the page: whether a next page exists.
        let payloads = options.with_payloads();
        let kind = options.kind_filter().map(str::to_owned);
        let jobs = (self.inner.backend)
            .list(state, after, limit + 1, payloads, kind)
            .await?;
        Ok(Page::new(state, limit, jobs))
    }

    /// Sends a dead job back: pending again at `when`, its attempts counted from 0 (so it
    /// gets [`max_attempts`](crate::Builder::max_attempts) more deliveries), its
    /// [`last_error`](JobInfo::last_error) kept until a new failure replaces it. `true` if the
    /// job was dead; a pending, running or unknown job gives `false` and nothing changes.
    /// Wakes idle consumers like a schedule.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_jobs::JobState;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_jobs::Error> {
    /// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-revive-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// let queue = wheel_jobs::JobQueue::builder().max_attempts(1).open(dir.join("jobs.redb")).await?;
    /// queue.schedule("email:welcome-7", Duration::ZERO, "").await?;
    /// let delivery = queue.consume().next().await.expect("open queue")?;
    /// delivery.fail(Duration::ZERO, "smtp down").await?; // its only attempt: dead
    /// assert_eq!(queue.get("email:welcome-7").await?.unwrap().state(), JobState::Dead);
    ///
    /// assert!(queue.revive("email:welcome-7", Duration::ZERO).await?);
    /// let job = queue.get("email:welcome-7").await?.unwrap();
    /// assert_eq!((job.state(), job.attempt(), job.last_error()), (JobState::Pending, 0, Some("smtp down")));
    /// # queue.close().await?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_id`], [`Error::is_storage`], [`Error::is_unavailable`],
    /// [`Error::is_closed`].
    pub async fn revive(&self, id: &str, when: impl Into<When>) -> Result<bool, Error> {
        check_id(id)?;
        match self
            .inner
            .backend
            .revive(id.to_owned(), when.into())
            .await?
        {
            Some(run_at) => {
                self.inner.metrics.revived(1);
                self.inner.wakeup.due_at(run_at);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// [`revive`](Self::revive) every dead job, oldest deaths first, a bounded batch per
    /// commit (per script call on Redis); returns how many. Jobs that die while it runs may
    /// be revived too.
    ///
    /// # Errors
    ///
    /// [`Error::is_storage`], [`Error::is_unavailable`], [`Error::is_closed`]. Batches
    /// committed before the error stay revived.
    pub async fn revive_all_dead(&self, when: impl Into<When>) -> Result<u64, Error> {
        const BATCH: usize = 10_000;
        let when = when.into();
        let mut total = 0;
        loop {
            let (revived, run_at) = self.inner.backend.revive_dead(BATCH, when).await?;
            if let Some(run_at) = run_at {
                self.inner.wakeup.due_at(run_at);
            }
            self.inner.metrics.revived(revived);
            total += revived;
            if revived < BATCH as u64 {
                return Ok(total);
            }
        }
    }

    /// Stops every consumer of the queue from claiming jobs, in this process and (on Redis)
    /// every other, until [`resume`](Self::resume); durable, so a reopened queue stays
    /// paused. Schedules, cancels, reschedules, revives and the acks, retries and extends of
    /// deliveries already handed out go on. Idempotent.
    ///
    /// Once it returns no claim leases anything. Jobs a [`Consumer`] claimed before (its
    /// prefetch buffer) are still handed out; [`run`](Self::run) claims only as many jobs as
    /// it has free handlers, so at most the claim it had in flight completes. Paused
    /// consumers sleep without reading the store, but for their safety wakeup
    /// ([`Builder::safety_wakeup`](crate::Builder::safety_wakeup)).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_jobs::Error> {
    /// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-pause-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// let queue = wheel_jobs::JobQueue::open(dir.join("jobs.redb")).await?;
    /// queue.pause().await?;
    /// queue.schedule("report", Duration::ZERO, "").await?; // stored, not delivered
    /// assert!(queue.counts().await?.paused);
    /// queue.resume().await?; // idle consumers look again at once
    /// let delivery = queue.consume().next().await.expect("open queue")?;
    /// assert_eq!(delivery.id(), "report");
    /// # queue.close().await?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_storage`], [`Error::is_unavailable`], [`Error::is_closed`]. On a
    /// partitioned Redis queue a failure may leave some partitions paused: call it again.
    pub async fn pause(&self) -> Result<(), Error> {
        self.inner.backend.set_paused(true).await
    }

    /// Lets consumers claim again after [`pause`](Self::pause), and wakes the idle ones at
    /// once: in this process directly, in others (on Redis) by a wake message. Idempotent.
    ///
    /// # Errors
    ///
    /// As [`pause`](Self::pause).
    pub async fn resume(&self) -> Result<(), Error> {
        self.inner.backend.set_paused(false).await?;
        // Every sleeping consumer waits for a time after 0: all of them look again.
        self.inner.wakeup.due_at(0);
        Ok(())
    }

    /// Deletes a dead job: `true` if `id` was dead. Dead jobs stay until this call or
    /// [`purge_dead`](Self::purge_dead), for inspection with [`get`](Self::get).
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_id`], [`Error::is_storage`], [`Error::is_closed`].
    pub async fn remove_dead(&self, id: &str) -> Result<bool, Error> {
        check_id(id)?;
        self.inner.backend.remove_dead(id.to_owned()).await
    }

    /// Deletes every dead job, a bounded batch per commit; returns how many.
    ///
    /// # Errors
    ///
    /// [`Error::is_storage`], [`Error::is_closed`]. Batches committed before the error stay
    /// deleted.
    pub async fn purge_dead(&self) -> Result<u64, Error> {
        const BATCH: usize = 10_000;
        let mut total = 0;
        loop {
            let removed = self.inner.backend.purge_dead(BATCH).await?;
            total += removed;
            if removed < BATCH as u64 {
                return Ok(total);
            }
        }
    }

    /// Runs `handler` on due jobs, at most `concurrency` at a time, until the queue is closed.
    ///
    /// `Ok(())` acks the job; `Err` or a panic [fails](Delivery::fail) it: retried after the
    /// builder's [`backoff`](crate::Builder::backoff) (attempt `n` waits `first · 2^(n−1)`),
    /// with the error's text (or `panicked: <message>`) as its
    /// [`last_error`](JobInfo::last_error), and dead after
    /// [`max_attempts`](crate::Builder::max_attempts). A handler may also ack, retry, fail or
    /// extend its [`Delivery`] itself; the loop's own ack then returns `false` harmlessly.
    /// Each handler runs in a `tracing` span `wheel_jobs.job` with fields `job` (the id) and
    /// `attempt`.
    ///
    /// Handlers run at least once per job (see [`Delivery`]): make them idempotent, keyed by
    /// the job id. While a handler runs, its lease is renewed every third of the
    /// [`lease`](crate::Builder::lease), so a slow handler keeps its job; a job is delivered
    /// again only once its process stops renewing (it died, hangs outside the runtime, or
    /// cannot reach the store for two thirds of a lease).
    ///
    /// # Cancellation
    ///
    /// Dropping the future aborts the running handlers; their jobs stay leased and are
    /// redelivered when the lease ends.
    ///
    /// # Shutdown
    ///
    /// [`close`](JobQueue::close) drains: `run` stops claiming, lets the running handlers
    /// finish and their acks (or retries) commit, and returns `Ok(())`; only then does the
    /// store close. A `run` started once `close` began returns `Ok(())` at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_jobs::Error> {
    /// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-run-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// let queue = wheel_jobs::JobQueue::open(dir.join("jobs.redb")).await?;
    /// queue.schedule("rate:order-7", Duration::from_millis(10), "5").await?;
    /// let (done, mut ran) = tokio::sync::mpsc::unbounded_channel();
    /// let worker = queue.clone();
    /// tokio::spawn(async move {
    ///     worker.run(8, move |job| {
    ///         let done = done.clone();
    ///         async move {
    ///             done.send(job.id().to_owned()).ok();
    ///             Ok::<(), std::io::Error>(())
    ///         }
    ///     }).await
    /// });
    /// assert_eq!(ran.recv().await.as_deref(), Some("rate:order-7"));
    /// # queue.close().await?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// Returns `Ok(())` once the queue is closed and the running handlers finished, or the
    /// first storage error a claim meets ([`Error::is_storage`]). An unreachable store
    /// ([`Error::is_unavailable`]) is retried with a backoff, not returned.
    ///
    /// # Panics
    ///
    /// Panics if `concurrency` is 0.
    #[track_caller]
    pub fn run<F, Fut, E>(
        &self,
        concurrency: usize,
        handler: F,
    ) -> impl Future<Output = Result<(), Error>> + Send
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Display + Send + 'static,
    {
        assert!(
            concurrency > 0,
            "wheel-jobs: run needs a concurrency of at least 1"
        );
        worker::run(self.inner.clone(), None, concurrency, handler)
    }

    /// [`run`](Self::run) for the jobs of one kind: claims only jobs of `kind`, at most
    /// `concurrency` at once. Jobs of other kinds are left to the workers that handle them
    /// (a kind no worker handles stays pending, counted in [`Counts::kinds`]). Run one per
    /// kind a process handles, each with its own cap; the kind `""` is the jobs scheduled
    /// without one.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_jobs::JobOptions;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_jobs::Error> {
    /// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-run-kind-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// let queue = wheel_jobs::JobQueue::open(dir.join("jobs.redb")).await?;
    /// queue.schedule_with("rate:7", Duration::ZERO, "5", &JobOptions::kind("rate")).await?;
    /// queue.schedule_with("remind:7", Duration::ZERO, "", &JobOptions::kind("remind")).await?;
    /// let (done, mut ran) = tokio::sync::mpsc::unbounded_channel();
    /// let worker = queue.clone();
    /// tokio::spawn(async move {
    ///     worker.run_kind("rate", 4, move |job| {
    ///         let done = done.clone();
    ///         async move {
    ///             done.send(job.id().to_owned()).ok();
    ///             Ok::<(), std::io::Error>(())
    ///         }
    ///     }).await
    /// });
    /// assert_eq!(ran.recv().await.as_deref(), Some("rate:7"));
    /// // Nobody handles "remind" here: it stays pending.
    /// assert_eq!(queue.counts().await?.kinds["remind"].pending, 1);
    /// # queue.close().await?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run).
    ///
    /// # Panics
    ///
    /// Panics if `concurrency` is 0, or if `kind` is longer than
    /// [`MAX_KIND_LEN`](crate::MAX_KIND_LEN) bytes or holds a control character (no job has
    /// such a kind).
    #[track_caller]
    pub fn run_kind<F, Fut, E>(
        &self,
        kind: &str,
        concurrency: usize,
        handler: F,
    ) -> impl Future<Output = Result<(), Error>> + Send
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Display + Send + 'static,
    {
        assert!(
            concurrency > 0,
            "wheel-jobs: run_kind needs a concurrency of at least 1"
        );
        assert_kind("run_kind", kind);
        worker::run(
            self.inner.clone(),
            Some(kind.to_owned()),
            concurrency,
            handler,
        )
    }

    /// A worker for several kinds, each with its own handler and optional cap, claimed
    /// together by one loop: declare them with [`Worker::kind`] and [`Worker::cap`], then
    /// [`Worker::run`]. See [`Worker`].
    pub fn worker(&self) -> Worker {
        Worker::new(self.inner.clone())
    }

    /// A stream of due jobs, each leased to the receiver. See [`Consumer`].
    pub fn consume(&self) -> Consumer {
        Consumer::new(self.inner.clone(), ClaimKinds::All)
    }

    /// [`consume`](Self::consume) for the jobs of one kind only.
    ///
    /// # Panics
    ///
    /// Panics if `kind` is longer than [`MAX_KIND_LEN`](crate::MAX_KIND_LEN) bytes or holds
    /// a control character (no job has such a kind).
    #[track_caller]
    pub fn consume_kind(&self, kind: &str) -> Consumer {
        assert_kind("consume_kind", kind);
        Consumer::new(self.inner.clone(), ClaimKinds::one(kind))
    }

    /// Stops claiming (every consumer stream ends once its buffer is empty), waits for the
    /// handlers [`run`](Self::run) is running to finish and their acks or retries to commit,
    /// then finishes the calls already made and releases the store (another `open` of the
    /// path then succeeds). Every handle of this queue is closed: later calls fail with
    /// [`Error::is_closed`].
    ///
    /// A handler that never returns, or a `run` future kept but no longer polled, keeps
    /// `close` waiting; bound it with `tokio::time::timeout` if handlers may hang (dropping
    /// `close` halfway leaves the queue claiming nothing, open, until `close` is called
    /// again). Called from inside a handler of `run`, `close` does not wait for the handlers
    /// (it would wait for itself). A [`Delivery`] taken from a [`Consumer`]
    /// is not waited for.
    ///
    /// Dropping every handle also releases the store, in the background.
    ///
    /// # Errors
    ///
    /// [`Error::is_storage`] if the store failed while closing.
    pub async fn close(&self) -> Result<(), Error> {
        self.inner.drain.close(&self.inner.wakeup).await;
        let result = self.inner.backend.close().await;
        self.inner.wakeup.wake_all();
        result
    }
}

/// How often a queue's gauges are read from its store's counters (`metrics.rs`).
#[cfg(feature = "metrics")]
const GAUGES_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Sets the queue's gauges from its counters every [`GAUGES_EVERY`] until the queue closes
/// or every handle is dropped; a failed read just waits for the next.
#[cfg(feature = "metrics")]
async fn refresh_gauges(queue: std::sync::Weak<Hub>) {
    loop {
        let Some(inner) = queue.upgrade().filter(|q| !q.drain.closing()) else {
            return;
        };
        if let Ok(counts) = inner.backend.counts().await {
            inner.metrics.counts(&counts);
        }
        let timer = inner.config.timer();
        // Not holding the queue while asleep: dropping every handle ends this task.
        drop(inner);
        timer.sleep(GAUGES_EVERY).await;
    }
}
