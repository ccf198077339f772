//! The public queue: [`JobQueue`], its [`Builder`], and the values its calls take and return.
//!
//! # Ground rules
//!
//! - Input is validated here, once for every backend: ids are 1 to [`MAX_ID_LEN`] bytes,
//!   payloads at most `max_payload` bytes.
//! - After a change that makes a job due (schedule, reschedule, retry) is durable, the queue
//!   tells its idle consumers (`wakeup.rs`), so a job scheduled earlier than what they sleep
//!   toward is delivered on time.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::backend::Backend;
use crate::embedded::Embedded;
use crate::wakeup::Wakeup;
use crate::{model, Consumer, Error};

/// The longest job id, in bytes.
pub const MAX_ID_LEN: usize = 256;

/// The shortest lease: [`Builder::lease`] raises a shorter (non-zero) one to this.
///
/// A lease starts when the store reads the claim that takes it, and the claim is committed
/// (fsync'd, maybe behind a batch of other writes) before its jobs are handed out. A
/// consumer never hands out a job whose lease may have ended, so a lease shorter than a
/// commit would be spent waiting for that commit: the job dropped, its attempt gone. One
/// second is far above a commit's time even on a slow disk.
pub const MIN_LEASE: Duration = Duration::from_secs(1);

/// The largest [`Builder::max_payload`]: Redis's limit for one string, and well inside the
/// embedded store's 4 GiB per value (and per log record).
pub const MAX_PAYLOAD: usize = 512 << 20;

/// When a job is due: a delay from now, or a wall-clock time.
///
/// Both are stored as wall-clock time, so a job keeps its due time across restarts. A time
/// in the past means "due at once"; `Duration::MAX` and times beyond the year 2554 saturate
/// there (nanoseconds since the Unix epoch in a `u64`), which is as good as never.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use wheel_jobs::When;
///
/// let in_two_days: When = Duration::from_secs(48 * 3600).into();
/// let at_eight: When = (SystemTime::now() + Duration::from_secs(60)).into();
/// assert_ne!(in_two_days, at_eight);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// This long after the store's clock reads the request.
    After(Duration),
    /// At this wall-clock time.
    At(SystemTime),
}

impl From<Duration> for When {
    fn from(delay: Duration) -> When {
        When::After(delay)
    }
}

impl From<SystemTime> for When {
    fn from(at: SystemTime) -> When {
        When::At(at)
    }
}

impl When {
    /// Nanoseconds since the Unix epoch, given the store's `now` in the same unit.
    pub(crate) fn resolve(self, now: u64) -> u64 {
        match self {
            When::After(delay) => model::add(now, delay),
            When::At(at) => nanos(at),
        }
    }
}

/// Wall-clock nanoseconds since the Unix epoch, saturating (0 before 1970, `u64::MAX` after 2554).
pub(crate) fn nanos(at: SystemTime) -> u64 {
    match at.duration_since(UNIX_EPOCH) {
        Ok(since) => u64::try_from(since.as_nanos()).unwrap_or(u64::MAX),
        Err(_) => 0,
    }
}

pub(crate) fn system_time(nanos: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(nanos)
}

/// What [`JobQueue::schedule`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheduled {
    /// A new job was stored.
    Created,
    /// A job with this id is already pending, running or dead; it was left unchanged. A
    /// schedule retried after a timeout or a crash is therefore safe.
    Exists,
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// Waiting for its `run_at` (or for a retry).
    Pending,
    /// Delivered to a consumer, under a lease.
    Running,
    /// Out of attempts; kept until [`JobQueue::remove_dead`] or [`JobQueue::purge_dead`].
    Dead,
}

/// A snapshot of one job, from [`JobQueue::get`].
#[derive(Clone, PartialEq, Eq)]
pub struct JobInfo {
    pub(crate) state: JobState,
    pub(crate) run_at: u64,
    pub(crate) attempt: u32,
    pub(crate) payload: Vec<u8>,
}

impl JobInfo {
    /// Pending, running or dead.
    pub fn state(&self) -> JobState {
        self.state
    }

    /// When the job is (or was last) due.
    pub fn run_at(&self) -> SystemTime {
        system_time(self.run_at)
    }

    /// Deliveries so far: 0 before the first.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The job's payload.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }
}

impl fmt::Debug for JobInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobInfo")
            .field("state", &self.state)
            .field("run_at", &self.run_at())
            .field("attempt", &self.attempt)
            .field("payload_len", &self.payload.len())
            .finish()
    }
}

// ===== Builder =====

#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) lease: Duration,
    pub(crate) max_attempts: u32,
    pub(crate) max_payload: usize,
    pub(crate) backoff: (Duration, Duration),
    pub(crate) prefetch: usize,
    pub(crate) cache_size: usize,
    pub(crate) quick_repair: bool,
    pub(crate) partitions: usize,
    pub(crate) redis_timeout: Option<Duration>,
    pub(crate) safety_wakeup: Duration,
    pub(crate) timer: Option<wheel_timer::Timer>,
}

/// Configures and opens a [`JobQueue`]. Made by [`JobQueue::builder`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), wheel_jobs::Error> {
/// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-builder-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// # let path = dir.join("jobs.redb");
/// let queue = wheel_jobs::JobQueue::builder()
///     .lease(Duration::from_secs(30))
///     .max_attempts(5)
///     .max_payload(1 << 20)
///     .open(&path)
///     .await?;
/// # queue.close().await?;
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Builder {
    config: Config,
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl Config {
    /// The wheel consumers and workers arm their timers on: the builder's, or the current
    /// runtime's default timer.
    pub(crate) fn timer(&self) -> wheel_timer::Timer {
        self.timer
            .clone()
            .unwrap_or_else(wheel_timer::default_timer)
    }
}

impl Builder {
    /// The defaults: 30 s leases, 5 attempts, 1 MiB payloads, retry backoff from 1 s doubling
    /// to 1 h, 64 jobs claimed at a time by [`JobQueue::consume`], a 64 MiB page cache.
    pub fn new() -> Builder {
        Builder {
            config: Config {
                lease: Duration::from_secs(30),
                max_attempts: 5,
                max_payload: 1 << 20,
                backoff: (Duration::from_secs(1), Duration::from_secs(3600)),
                prefetch: 64,
                cache_size: 64 << 20,
                quick_repair: true,
                partitions: 1,
                redis_timeout: Some(Duration::from_secs(1)),
                safety_wakeup: Duration::from_secs(5),
                timer: None,
            },
        }
    }

    /// How long a delivery is owned by its consumer before the job is delivered again
    /// (default 30 s). A lease below [`MIN_LEASE`] (1 s) is raised to it; zero is refused
    /// by `open` with [`Error::is_invalid_config`].
    pub fn lease(&mut self, lease: Duration) -> &mut Self {
        self.config.lease = lease;
        self
    }

    /// Deliveries before a job is dead (kept, state [`JobState::Dead`]). At least 1.
    pub fn max_attempts(&mut self, attempts: u32) -> &mut Self {
        self.config.max_attempts = attempts;
        self
    }

    /// The largest payload [`JobQueue::schedule`] accepts, in bytes; at most
    /// [`MAX_PAYLOAD`](crate::MAX_PAYLOAD) (512 MiB), or `open` fails with
    /// [`Error::is_invalid_config`].
    pub fn max_payload(&mut self, bytes: usize) -> &mut Self {
        self.config.max_payload = bytes;
        self
    }

    /// The retry delay of [`JobQueue::run`] after a failed attempt `n`: `first · 2^(n−1)`,
    /// at most `max`, plus up to 25 % jitter.
    pub fn backoff(&mut self, first: Duration, max: Duration) -> &mut Self {
        self.config.backoff = (first, max);
        self
    }

    /// How many due jobs one [`JobQueue::consume`] stream claims at a time (they are leased
    /// from the claim on). At least 1.
    pub fn prefetch(&mut self, jobs: usize) -> &mut Self {
        self.config.prefetch = jobs;
        self
    }

    /// Memory for the embedded store's page cache, in bytes: the store never holds more of
    /// the file than this, however many jobs are pending.
    pub fn cache_size(&mut self, bytes: usize) -> &mut Self {
        self.config.cache_size = bytes;
        self
    }

    /// Whether every checkpoint of the embedded store (a durable redb commit, every 5 s
    /// while jobs change; the changes in between are made durable by the store's
    /// write-ahead log) also saves the allocator state, so that the first open after a
    /// crash or `kill -9` does not walk the file (default `true`); it still replays the log,
    /// at most 2 MiB of changes (a full log of 36,000 schedules on a 10M-job store: 377 and
    /// 343 ms in two runs, of which 257 and 241 ms are redb's own recovery; a clean close
    /// leaves nothing to replay: about 1–9 ms).
    /// Turned off, checkpoints are cheaper but that open walks the whole file to rebuild
    /// the state. Either way nothing acknowledged is lost.
    pub fn quick_repair(&mut self, enabled: bool) -> &mut Self {
        self.config.quick_repair = enabled;
        self
    }

    /// Redis only: split the queue into this many partitions (default 1), each with its own
    /// hash tag `{name:i}` so a cluster spreads them over its nodes. Jobs go to a partition
    /// by a stable hash of their id; consumers claim from every partition in turn. Every
    /// process must use the same number for a queue. At least 1.
    pub fn partitions(&mut self, partitions: usize) -> &mut Self {
        self.config.partitions = partitions;
        self
    }

    /// Redis only (a server, or each node of a cluster): how long a connection attempt or a
    /// call may take before it fails with [`Error::is_unavailable`] (default 1 s; `None`: no
    /// limit). These timeouts run on tokio's clock, so a test on a paused clock wants `None`.
    pub fn redis_timeout(&mut self, timeout: Option<Duration>) -> &mut Self {
        self.config.redis_timeout = timeout;
        self
    }

    /// The longest an idle consumer sleeps before it reads the store again although nothing
    /// told it a job is due (default 5 s; each sleep is drawn between 3/4 of this and all of
    /// it, so idle consumers do not read the store in step). This wakeup only covers what no
    /// notification reported: a wall-clock step, or a Redis wake message lost while a
    /// subscription was down. Must be at least 1 ms.
    pub fn safety_wakeup(&mut self, wakeup: Duration) -> &mut Self {
        self.config.safety_wakeup = wakeup;
        self
    }

    /// The wheel that consumers arm their one timer on (default: the runtime's
    /// [`default_timer`](wheel_timer::default_timer)).
    pub fn timer(&mut self, timer: wheel_timer::Timer) -> &mut Self {
        self.config.timer = Some(timer);
        self
    }

    #[cfg(test)]
    pub(crate) fn config(&self) -> Config {
        self.config.clone()
    }

    pub(crate) fn checked(&self) -> Result<Config, Error> {
        let c = &self.config;
        if c.lease.is_zero() {
            return Err(Error::invalid_config("the lease must not be zero"));
        }
        if c.max_attempts == 0 {
            return Err(Error::invalid_config("max_attempts must be at least 1"));
        }
        if c.prefetch == 0 {
            return Err(Error::invalid_config("prefetch must be at least 1"));
        }
        if c.partitions == 0 {
            return Err(Error::invalid_config("partitions must be at least 1"));
        }
        if c.max_payload > MAX_PAYLOAD {
            return Err(Error::invalid_config("max_payload must be at most 512 MiB"));
        }
        if c.safety_wakeup < Duration::from_millis(1) {
            return Err(Error::invalid_config(
                "the safety wakeup must be at least 1 ms",
            ));
        }
        let mut c = c.clone();
        c.lease = c.lease.max(MIN_LEASE);
        Ok(c)
    }

    /// Opens the embedded store at `path`, creating it if missing.
    ///
    /// Jobs that fell due while no process had the store open are delivered at once, and
    /// leases held by a process that died are redelivered once they expire. Opening reads
    /// no jobs: its cost does not grow with their number (after a crash it replays at most
    /// 2 MiB of the write-ahead log).
    ///
    /// The store is two files: `path` and, beside it, `path` + `.wal`, its write-ahead log
    /// (the latest changes may be only there until the next checkpoint). Copy, move or
    /// delete them together; after a [`close`](JobQueue::close) the log holds nothing the
    /// store needs.
    ///
    /// # Errors
    ///
    /// [`Error::is_locked`] if another process or handle has the store open,
    /// [`Error::is_storage`] if the file cannot be read or is not a job store,
    /// [`Error::is_invalid_config`] for a zero lease, attempts, prefetch or safety wakeup.
    pub async fn open(&self, path: impl AsRef<Path>) -> Result<JobQueue, Error> {
        let config = self.checked()?;
        let backend = Embedded::open(path.as_ref().to_path_buf(), &config).await?;
        Ok(JobQueue::with_backend(
            Box::new(backend),
            config,
            Arc::default(),
        ))
    }

    /// Opens the queue `name` on the Redis server at `url` (`redis://host:port`,
    /// `redis+unix:///path/to/redis.sock`), with the same API and guarantees as the embedded
    /// store, shared by every process that opens the same name. Requires the `redis` feature.
    ///
    /// Every state change is one Lua script run with the server's clock; see the crate docs.
    ///
    /// # Errors
    ///
    /// [`Error::is_unavailable`] if the server cannot be reached, [`Error::is_invalid_config`]
    /// for a bad URL, an empty name or one with braces (they delimit the cluster hash tag).
    #[cfg(feature = "redis")]
    pub async fn redis(&self, url: &str, name: &str) -> Result<JobQueue, Error> {
        let config = self.checked()?;
        let wakeup: Arc<Wakeup> = Arc::default();
        let target = crate::redis::Target::Server(url);
        let backend = crate::redis::Redis::open(target, name, &config, wakeup.clone()).await?;
        Ok(JobQueue::with_backend(Box::new(backend), config, wakeup))
    }

    /// [`redis`](Self::redis) on a Redis Cluster, given some of its nodes' URLs. The keys of
    /// each partition share one hash tag, so every script runs on one slot; with
    /// [`partitions`](Self::partitions) > 1 a queue's partitions spread over the nodes.
    /// Requires the `redis` feature.
    ///
    /// # Errors
    ///
    /// As [`redis`](Self::redis).
    #[cfg(feature = "redis")]
    pub async fn redis_cluster(&self, nodes: &[String], name: &str) -> Result<JobQueue, Error> {
        let config = self.checked()?;
        let wakeup: Arc<Wakeup> = Arc::default();
        let target = crate::redis::Target::Cluster(nodes);
        let backend = crate::redis::Redis::open(target, name, &config, wakeup.clone()).await?;
        Ok(JobQueue::with_backend(Box::new(backend), config, wakeup))
    }
}

// ===== JobQueue =====

pub(crate) struct Inner {
    pub(crate) backend: Box<dyn Backend>,
    pub(crate) config: Config,
    pub(crate) wakeup: Arc<Wakeup>,
    pub(crate) drain: crate::worker::Drain,
}

/// A durable queue of delayed jobs. Cheap to clone: clones share one store.
///
/// See the [crate docs](crate) for the guarantees.
#[derive(Clone)]
pub struct JobQueue {
    pub(crate) inner: Arc<Inner>,
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

fn check_id(id: &str) -> Result<(), Error> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(Error::invalid_id(id.len()));
    }
    Ok(())
}

impl JobQueue {
    pub(crate) fn with_backend(
        backend: Box<dyn Backend>,
        config: Config,
        wakeup: Arc<Wakeup>,
    ) -> JobQueue {
        JobQueue {
            inner: Arc::new(Inner {
                backend,
                config,
                wakeup,
                drain: crate::worker::Drain::default(),
            }),
        }
    }

    /// Opens the embedded store at `path` with the default settings ([`Builder::new`]),
    /// creating it if missing.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_jobs::Error> {
    /// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-open-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// let queue = wheel_jobs::JobQueue::open(dir.join("jobs.redb")).await?;
    /// assert_eq!(queue.pending().await?, 0);
    /// # queue.close().await?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Builder::open`].
    pub async fn open(path: impl AsRef<Path>) -> Result<JobQueue, Error> {
        Builder::new().open(path).await
    }

    /// A builder to set the lease, attempts and limits before opening.
    pub fn builder() -> Builder {
        Builder::new()
    }

    /// Stores a job `id` with `payload`, due `when`. Returns once the job is durable
    /// (fsync'd); concurrent calls share one commit.
    ///
    /// Idempotent on `id`: if a job with this id is pending, running or dead, nothing
    /// changes and the result is [`Scheduled::Exists`]. An acked job is gone, so its id can
    /// be scheduled again.
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
        let max = self.inner.config.max_payload;
        if payload.len() > max {
            return Err(Error::payload_too_large(payload.len(), max));
        }
        let (outcome, run_at) = self
            .inner
            .backend
            .schedule(id.to_owned(), when.into(), payload)
            .await?;
        if outcome == Scheduled::Created {
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
        let max = self.inner.config.max_payload;
        let mut batch = Vec::new();
        for (id, when, payload) in jobs {
            let (id, payload) = (id.into(), payload.into());
            check_id(&id)?;
            if payload.len() > max {
                return Err(Error::payload_too_large(payload.len(), max));
            }
            batch.push((id, when.into(), payload));
        }
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let outcomes = self.inner.backend.schedule_many(batch).await?;
        let created = outcomes.iter().filter(|(o, _)| *o == Scheduled::Created);
        if let Some(earliest) = created.map(|(_, at)| *at).min() {
            self.inner.wakeup.due_at(earliest);
        }
        Ok(outcomes.into_iter().map(|(o, _)| o).collect())
    }

    /// Removes a pending job: `true` if it was pending, and then it is never delivered.
    /// A running or dead job, or an unknown id, gives `false` and nothing changes.
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_id`], [`Error::is_storage`], [`Error::is_closed`].
    pub async fn cancel(&self, id: &str) -> Result<bool, Error> {
        check_id(id)?;
        self.inner.backend.cancel(id.to_owned()).await
    }

    /// Moves a pending job to `when` (earlier or later): `true` if it was pending.
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

    /// The job's state, due time and attempts, or `None` if there is no such job (never
    /// scheduled, cancelled, acked or removed).
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
    /// [`JobState::Running`]), including those whose lease lapsed and that wait for
    /// redelivery. O(1).
    ///
    /// # Errors
    ///
    /// [`Error::is_storage`], [`Error::is_closed`].
    pub async fn running(&self) -> Result<u64, Error> {
        self.inner.backend.running().await
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

    /// A stream of due jobs, each leased to the receiver. See [`Consumer`].
    pub fn consume(&self) -> Consumer {
        Consumer::new(self.inner.clone())
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
    /// (it would wait for itself). A [`Delivery`](crate::Delivery) taken from a [`Consumer`]
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
