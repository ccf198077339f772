//! [`Builder`]: how a [`JobQueue`] is configured and opened, on the embedded store, on
//! Redis or on PostgreSQL.
//!
//! # Ground rules
//!
//! - The only code that names a backend: `open`, `redis`, `redis_cluster` and `postgres`
//!   build one and hand it to the queue as a [`Backend`](crate::backend::Backend); nothing
//!   above the trait knows which store it talks to (but the transactional forms of
//!   PostgreSQL, `queue/sql.rs`, which reach it through `Backend::postgres`).
//! - The configuration is checked once, here ([`Config::checked`]), before anything opens.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::embedded::Embedded;
use crate::core::config::Config;
use crate::core::error::Error;
use crate::core::kind::JobOptions;
use crate::core::wakeup::Wakeup;
use crate::queue::JobQueue;

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

impl Builder {
    /// The defaults: 30 s leases, 5 attempts, 1 MiB payloads, retry backoff from 1 s doubling
    /// to 1 h, 64 jobs claimed at a time by [`JobQueue::consume`], a 64 MiB page cache.
    pub fn new() -> Builder {
        Builder {
            config: Config::default(),
        }
    }

    /// How long a delivery is owned by its consumer before the job is delivered again
    /// (default 30 s). A lease below [`MIN_LEASE`](crate::MIN_LEASE) (1 s) is raised to it;
    /// zero is refused by `open` with [`Error::is_invalid_config`]. Like the attempts and
    /// the backoff, it is the default of jobs this handle schedules, stored with each job: a
    /// job keeps its own after a reopen with another value ([`JobOptions`] sets one per job
    /// or per kind).
    pub fn lease(&mut self, lease: Duration) -> &mut Self {
        self.config.lease = lease;
        self
    }

    /// Deliveries before a job is dead (kept, state
    /// [`JobState::Dead`](crate::JobState::Dead)). At least 1. Stored with each job this
    /// handle schedules (see [`lease`](Self::lease)).
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

    /// The defaults of the jobs of `kind`: each option set in `options` applies to a job of
    /// that kind that does not set it itself ([`JobQueue::schedule_with`]); the rest come from
    /// this builder. The kind named inside `options`, if any, is ignored: `kind` names it.
    /// Checked when the queue opens ([`Error::is_invalid_config`](crate::Error::is_invalid_config)),
    /// which refuses the kind `""`: the jobs without a kind (plain schedules, recurring
    /// occurrences) take this builder's own [`max_attempts`](Self::max_attempts),
    /// [`backoff`](Self::backoff) and [`lease`](Self::lease).
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_jobs::{JobOptions, JobQueue};
    ///
    /// let mut builder = JobQueue::builder();
    /// builder
    ///     .max_attempts(25)
    ///     .kind("capture", JobOptions::new().max_attempts(3).priority(10))
    ///     .kind("reminder", JobOptions::new().backoff(Duration::from_secs(60), Duration::from_secs(3600)));
    /// ```
    pub fn kind(&mut self, kind: &str, options: JobOptions) -> &mut Self {
        self.config.kinds.insert(kind.to_owned(), options);
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
    /// process must use the same number for a queue: the first open records it
    /// (`{name}:layout`), and an open with another number fails with
    /// [`Error::is_invalid_config`]. At least 1.
    pub fn partitions(&mut self, partitions: usize) -> &mut Self {
        self.config.partitions = partitions;
        self
    }

    /// Redis only (a server, or each node of a cluster): how long a connection attempt or a
    /// call may take before it fails with [`Error::is_unavailable`] (default 1 s; `None`: no
    /// limit). While the server is down or unreachable every call fails within this bound
    /// (plus the runtime's delay in getting round to the timed-out task, a few milliseconds
    /// on an idle machine), and calls succeed again as soon as it is back. A call that
    /// writes several script calls (`schedule_many` in chunks of 512) bounds each of them.
    /// These timeouts run on tokio's clock, so a test on a paused clock wants `None`.
    pub fn redis_timeout(&mut self, timeout: Option<Duration>) -> &mut Self {
        self.config.redis_timeout = timeout;
        self
    }

    /// Redis only (a server or Sentinel's primary): every call whose change a failover
    /// could lose (schedule, ack, retry, cancel, reschedule, removals, setting or cancelling
    /// a recurring series) answers only once `replicas` replicas hold it, by
    /// `WAIT replicas timeout` on the same connection;
    /// if fewer acknowledged it within `timeout`, the call fails with
    /// [`Error::is_unavailable`] (the write is on the primary and may or may not survive a
    /// failover; schedules are idempotent, so retrying is safe). A failover to a replica
    /// that acknowledged loses nothing acknowledged. One `WAIT` serves a whole batch of
    /// concurrent schedules or acks. Claims and lease extensions do not wait: one lost in
    /// a failover only delivers a job again (at-least-once allows it), while a claim that
    /// failed its `WAIT` would strand its leases until they end. Default: off (`replicas`
    /// 0), and replication is asynchronous: a failover can lose the last writes the old
    /// primary acknowledged.
    ///
    /// A call's bound becomes `redis_timeout` plus `timeout`. `open` fails with
    /// [`Error::is_invalid_config`] for a `timeout` under 1 ms (`WAIT 0` would wait
    /// forever) and on a cluster, where it is not supported.
    pub fn min_replicas(&mut self, replicas: u32, timeout: Duration) -> &mut Self {
        self.config.min_replicas = (replicas > 0).then_some((replicas, timeout));
        self
    }

    /// Redis over TLS (`rediss://` URLs; feature `redis-tls`): check the server's
    /// certificate against the CA certificates in `pem` (PEM, one or more) instead of the
    /// system's trusted roots. The certificate is always checked, name included: a server
    /// whose certificate no trusted CA signed fails `open` at once with
    /// [`Error::is_unauthorized`]. Applies to servers, sentinels and cluster nodes alike.
    ///
    /// TLS uses rustls with its `ring` provider; a program that enables another rustls
    /// provider too must install one with `rustls::crypto::CryptoProvider::install_default`.
    #[cfg(feature = "redis-tls")]
    pub fn redis_tls_ca(&mut self, pem: impl Into<Vec<u8>>) -> &mut Self {
        self.config.tls_ca = Some(pem.into().into());
        self
    }

    /// The longest an idle consumer sleeps before it reads the store again although nothing
    /// told it a job is due (default 5 s; each sleep is drawn between 3/4 of this and all of
    /// it, so idle consumers do not read the store in step). This wakeup only covers what no
    /// notification reported: a wall-clock step, or a Redis wake message lost while a
    /// subscription was down. Must be at least 1 ms. On PostgreSQL at most 60 s (a larger
    /// value is taken as 60 s): a job due more than 60 s after its commit wakes no one
    /// then, and the safety wakeup is how idle consumers find it.
    pub fn safety_wakeup(&mut self, wakeup: Duration) -> &mut Self {
        self.config.safety_wakeup = wakeup;
        self
    }

    /// PostgreSQL only (feature `postgres`): how long a call may take, waiting for a
    /// pooled connection or a batch included, before it fails with
    /// [`Error::is_unavailable`] (default 5 s; `None`: no limit). `postgres` connects
    /// within it too. While the server is down or unreachable every call fails within
    /// this bound (plus the runtime's delay in getting round to the timed-out task), and
    /// calls succeed again as soon as it is back. A call that timed out may or may not have
    /// committed; every call is idempotent or checked by its lease token, so retrying is
    /// safe. These timeouts run on tokio's clock, so a test on a paused clock wants `None`.
    #[cfg(feature = "postgres")]
    pub fn postgres_timeout(&mut self, timeout: Option<Duration>) -> &mut Self {
        self.config.postgres_timeout = timeout;
        self
    }

    /// PostgreSQL only (feature `postgres`): the schema the queue's tables live in
    /// (default `wheel_jobs`), created by [`postgres`](Self::postgres) if missing. 1 to 48
    /// lowercase ASCII letters, digits and `_`, not starting with a digit or `pg_`;
    /// `postgres` fails with [`Error::is_invalid_config`] otherwise.
    #[cfg(feature = "postgres")]
    pub fn postgres_schema(&mut self, schema: &str) -> &mut Self {
        self.config.postgres_schema = schema.to_owned();
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
        self.config.checked()
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
        let mut config = self.checked()?;
        if let Some(stem) = path.as_ref().file_stem() {
            config.name = stem.to_string_lossy().into_owned();
        }
        let wakeup: Arc<Wakeup> = Arc::default();
        let backend = Embedded::open(path.as_ref().to_path_buf(), &config, wakeup.clone()).await?;
        Ok(JobQueue::with_backend(Box::new(backend), config, wakeup))
    }

    /// Opens the queue `name` on the Redis server at `url` (`redis://host:port`,
    /// `rediss://host:port` for TLS with the `redis-tls` feature,
    /// `redis+unix:///path/to/redis.sock`; a user and password go in the URL,
    /// `redis://user:password@host:port`), with the same API and guarantees as the embedded
    /// store, shared by every process that opens the same name. Requires the `redis` feature.
    ///
    /// Every state change is one Lua script run with the server's clock; see the crate docs.
    ///
    /// # Errors
    ///
    /// [`Error::is_unavailable`] if the server cannot be reached within
    /// [`redis_timeout`](Self::redis_timeout), [`Error::is_unauthorized`] at once if it
    /// refuses the user or password or we refuse its TLS certificate,
    /// [`Error::is_invalid_config`] for a bad URL, an empty name, one with braces (they
    /// delimit the cluster hash tag) or one ending in `:` and digits (`orders:0` names
    /// partition 0 of the queue `orders`).
    #[cfg(feature = "redis")]
    pub async fn redis(&self, url: &str, name: &str) -> Result<JobQueue, Error> {
        self.open_redis(crate::backend::redis::Target::Server(url), name)
            .await
    }

    /// [`redis`](Self::redis) on the primary that Redis Sentinel names for `master_name`,
    /// given some sentinels' URLs (`redis://host:26379`). After a failover, the first call
    /// that meets the old primary gone or demoted (`READONLY`) fails with
    /// [`Error::is_unavailable`] and the connection moves to the primary the sentinels
    /// name; [`JobQueue::run`](crate::JobQueue::run) carries on by itself. The data nodes
    /// are reached like the sentinels: TLS if the first URL is `rediss://`, with its user
    /// and password. Requires the `redis` feature.
    ///
    /// Replication is asynchronous: a write acknowledged by the old primary but not yet
    /// copied to the replica that takes over is lost, unless
    /// [`min_replicas`](Self::min_replicas) made the call wait for replicas.
    ///
    /// # Errors
    ///
    /// As [`redis`](Self::redis); [`Error::is_invalid_config`] if no sentinel knows
    /// `master_name`, [`Error::is_unavailable`] if none can be reached or the primary they
    /// name cannot.
    #[cfg(feature = "redis")]
    pub async fn redis_sentinel(
        &self,
        sentinels: &[String],
        master_name: &str,
        name: &str,
    ) -> Result<JobQueue, Error> {
        let target = crate::backend::redis::Target::Sentinel {
            sentinels,
            master: master_name,
        };
        self.open_redis(target, name).await
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
        self.open_redis(crate::backend::redis::Target::Cluster(nodes), name)
            .await
    }

    #[cfg(feature = "redis")]
    async fn open_redis(
        &self,
        target: crate::backend::redis::Target<'_>,
        name: &str,
    ) -> Result<JobQueue, Error> {
        let mut config = self.checked()?;
        config.name = name.to_owned();
        let wakeup: Arc<Wakeup> = Arc::default();
        let backend =
            crate::backend::redis::Redis::open(target, name, &config, wakeup.clone()).await?;
        Ok(JobQueue::with_backend(Box::new(backend), config, wakeup))
    }
}

#[cfg(feature = "postgres")]
impl Builder {
    /// Opens the queue `queue` on the PostgreSQL server at `url`
    /// (`postgres://user:password@host:port/database`, `?sslmode=require` for TLS with
    /// rustls and the webpki roots), with the same API and guarantees as the embedded
    /// store, shared by every process that opens the same queue in the same schema
    /// ([`postgres_schema`](Self::postgres_schema)). Requires the `postgres` feature.
    ///
    /// The queue makes a pool of 10 connections, and its `LISTEN` listener one more of its
    /// own. The schema is created, or upgraded, by the first process that opens it,
    /// under an advisory lock. Every state change is one statement using the server's
    /// clock; [`JobQueue::schedule_in`] and [`Delivery::ack_in`](crate::Delivery::ack_in)
    /// run in the application's own transaction.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), wheel_jobs::Error> {
    /// let queue = wheel_jobs::JobQueue::builder()
    ///     .postgres("postgres://app@localhost/shop", "orders")
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_unavailable`] if the server cannot be reached within
    /// [`postgres_timeout`](Self::postgres_timeout), [`Error::is_unauthorized`] at once if
    /// it refuses the user or password (or we refuse its TLS certificate),
    /// [`Error::is_invalid_config`] for a bad URL, schema or queue name (1 to 256 bytes,
    /// no NUL) or a schema created by a newer wheel-jobs (both versions named).
    pub async fn postgres(&self, url: &str, queue: &str) -> Result<JobQueue, Error> {
        self.open_postgres(crate::backend::postgres::Target::Url(url), queue)
            .await
    }

    /// [`postgres`](Self::postgres) on the application's own pool: the queue's calls and
    /// its group commits take connections from it, each for one statement (a series step:
    /// one short transaction); its `LISTEN` listener makes one connection of its own with
    /// the pool's connect options, so it never holds one of the pool's.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let pool = wheel_jobs::sqlx::PgPool::connect("postgres://app@localhost/shop").await?;
    /// let queue = wheel_jobs::JobQueue::builder().postgres_pool(pool.clone(), "orders").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`postgres`](Self::postgres).
    pub async fn postgres_pool(&self, pool: sqlx::PgPool, queue: &str) -> Result<JobQueue, Error> {
        self.open_postgres(crate::backend::postgres::Target::Pool(pool), queue)
            .await
    }

    async fn open_postgres(
        &self,
        target: crate::backend::postgres::Target<'_>,
        queue: &str,
    ) -> Result<JobQueue, Error> {
        let mut config = self.checked()?;
        config.name = queue.to_owned();
        // A job due beyond the horizon wakes no one at its commit: the safety wakeup finds it.
        let horizon = crate::backend::postgres::WAKE_HORIZON;
        config.safety_wakeup = config.safety_wakeup.min(horizon);
        let wakeup: Arc<Wakeup> = Arc::default();
        let backend =
            crate::backend::postgres::Postgres::open(target, queue, &config, wakeup.clone())
                .await?;
        Ok(JobQueue::with_backend(Box::new(backend), config, wakeup))
    }
}

impl JobQueue {
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
}
