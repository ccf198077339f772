//! The PostgreSQL backend (feature `postgres`): a queue in a schema of the application's
//! own database, so a job can be scheduled, cancelled or acknowledged inside the
//! application's transaction (`JobQueue::schedule_in`, `Delivery::ack_in`).
//!
//! # Ground rules
//!
//! - The server's clock only: every "now" is `clock_timestamp()` in the statement that uses
//!   it (`sql/`); clients with skewed clocks never deliver early.
//! - Each `Backend` call is one statement in its own transaction, but for recurring series
//!   (one transaction of several statements, `series.rs`). Concurrent acks and retries
//!   share one statement and one commit (`batch.rs`), so do concurrent schedules, and so do
//!   concurrent claims of named kinds (`claims.rs`: the `run_kind` loops of one handle).
//! - Claims take due jobs with `FOR UPDATE SKIP LOCKED`, lease them and bump their attempt
//!   (or kill those out of attempts) in the same statement, so competing consumers in any
//!   number of processes never wait on each other and never take one job twice. A claim
//!   names its kinds (all, or one) and takes higher priorities first, one priority level
//!   at a time (`sql/claim.rs`); each job is leased and killed by its own spec.
//! - A job's options are stored on its row; a NULL option (a row written before schema
//!   version 3, an occurrence of a series set before version 4) is the queue's own: the
//!   `plain` spec of the handle. A series stores its occurrences' spec the same way.
//! - Counts and wake-ups are kept by the schema's statement triggers, whoever writes (the
//!   library, or an application's transaction): `counts` sums at most 16 folded slot rows and
//!   the deltas not yet folded, never a `COUNT(*)`; a wake is a `pg_notify` inside the
//!   writing transaction, so only a commit wakes anyone (`listen.rs`).
//! - `postgres_timeout` bounds every call (queueing for a batch or a pool connection
//!   included): an unreachable server gives `is_unavailable` within it. A call that timed
//!   out may or may not have committed; every call is idempotent or token-checked.
//! - Jobs in a queue are the rows of `jobs` (pending, running) and `dead` whose `queue` is
//!   its name; many queues share a schema.
//! - Dedup modes (`sql/jobs.rs`): a Replace is the schedule's own `INSERT … ON CONFLICT DO
//!   UPDATE` of a pending row that is no series occurrence; a job's hold-off is stored on
//!   its row (`hold_off`), and the ack's own statement writes its tombstone in `held`
//!   (`queue, id, until`), so `ack_in` writes it in the caller's transaction. A schedule
//!   of a held id answers its `until` and stores nothing, or deletes it once expired; each
//!   claim deletes at most 64 expired ones; imports skip held ids. Tombstones are neither
//!   counted, listed nor copied.
//! - Successors (`Dedup::AllowWhileRunning`) live in their job's row, in the `next_`
//!   columns (run_at, payload, spec; `next_payload IS NOT NULL` is the flag): stored by the
//!   schedule's own `ON CONFLICT DO UPDATE` on a running row (rechecked under its lock),
//!   dropped by `cancel` and by a Replace of the job pending again, kept through retries.
//!   An ack or a death (`settle`) deletes the row and inserts its successor as the pending
//!   job from the deleted version's RETURNING; a claim's kill of an ended lease updates the
//!   row into its successor; each in its one statement, so in `ack_in`'s transaction too.
//!   Never counted, listed, copied nor imported.
//!
//! # Files
//!
//! `names.rs` names the schema's objects; `migrate.rs` creates and upgrades the schema from
//! `migrations/`; `sql/` holds each statement with its typed function, one file per group;
//! `series.rs` the recurring series' steps; `batch.rs` the group commit; `claims.rs` the
//! merged claims; `listen.rs` the
//! `LISTEN` task; `error.rs` maps sqlx's errors; `backend.rs` is the
//! [`Backend`](crate::backend::Backend) implementation; this file holds the [`Postgres`]
//! value and opens it.
//!
//! A new `Backend` operation touches `sql/<group>.rs` (its statement and function),
//! `backend.rs` (the method), and, if it changes a job's state, the triggers of a new
//! migration file when counts or wake-ups must follow.

mod backend;
mod batch;
mod claims;
mod error;
mod listen;
mod migrate;
pub(crate) mod names;
mod series;
mod sql;

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::PgPool;

use self::batch::{answer, timed_out, Batcher, Reply};
use self::claims::{ClaimReq, HeadClaims};
use self::error::pg_error;
use self::names::Names;
use self::series::SeriesSql;
use self::sql::{Settle, Settled, Sql};
use crate::backend::{ClaimBatch, NewJob};
use crate::core::config::Config;
use crate::core::error::Error;
use crate::core::job::{Scheduled, When};
use crate::core::kind::Spec;
use crate::core::state::mix;
use crate::core::wakeup::Wakeup;

/// Where the queue's connections come from.
#[derive(Debug)]
pub(crate) enum Target<'a> {
    /// A `postgres://` URL: the queue makes its own pool.
    Url(&'a str),
    /// The application's pool.
    Pool(PgPool),
}

/// Connections in the pool the queue makes from a URL (claims, batches, single calls); the
/// listener has one more of its own.
const POOL_SIZE: u32 = 10;

/// How far ahead a job may be due and still wake idle consumers at its commit (the
/// schema's triggers, `migrations/0002_wake_soon.sql`, say 60 s too): a commit that sent a
/// notification waits for every other such commit, so one 48 h ahead sends none. An idle
/// consumer of a PostgreSQL queue looks at least this often (the builder caps
/// `safety_wakeup` at it), so it finds such a job before the job is due.
pub(crate) const WAKE_HORIZON: Duration = Duration::from_secs(60);

/// How often a claim folds the queue's counter deltas into a slot (at most).
const FOLD_EVERY: Duration = Duration::from_secs(1);

/// How long a batch of schedules waits on another transaction's row lock before it is
/// re-run one request at a time (at most: a short `postgres_timeout` shortens it).
const BATCH_LOCK_WAIT: Duration = Duration::from_millis(100);

pub(crate) struct Postgres {
    pool: PgPool,
    queue: String,
    names: Arc<Names>,
    sql: Arc<Sql>,
    /// The series' statements and what the first claims of their heads need.
    heads: Arc<HeadClaims>,
    /// The spec of a job scheduled without options, which NULL options read as.
    plain: Spec,
    timeout: Option<Duration>,
    schedules: Batcher<NewJob, (Scheduled, u64)>,
    settles: Batcher<Settle, Settled>,
    /// Claims of named kinds, merged (`claims.rs`).
    claims: Batcher<ClaimReq, ClaimBatch>,
    closed: AtomicBool,
    /// The calls under way, which `close` waits for.
    calls: AtomicUsize,
    /// Notified when the last call under way ends.
    idle: tokio::sync::Notify,
    /// Stops the listener when the backend goes.
    _listening: listen::Listening,
    tokens: AtomicU64,
    token_seed: u64,
    last_fold: Mutex<Option<Instant>>,
}

impl fmt::Debug for Postgres {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Postgres")
            .field("schema", &self.names.schema)
            .field("queue", &self.queue)
            .finish()
    }
}

/// One call under way on a [`Postgres`] handle (see [`Postgres::enter`]).
struct Call<'a>(&'a Postgres);

impl Drop for Call<'_> {
    fn drop(&mut self) {
        if self.0.calls.fetch_sub(1, SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.schedules.task.abort();
        self.settles.task.abort();
        self.claims.task.abort();
    }
}

impl Postgres {
    pub(crate) async fn open(
        target: Target<'_>,
        queue: &str,
        config: &Config,
        wakeup: Arc<Wakeup>,
    ) -> Result<Postgres, Error> {
        names::check_queue(queue)?;
        names::check_schema(&config.postgres_schema)?;
        let timeout = config.postgres_timeout;
        let opened = async {
            let pool = match target {
                Target::Url(url) => {
                    let options = PgConnectOptions::from_str(url)
                        .map_err(|err| {
                            Error::invalid_config_owned(format!("a bad PostgreSQL URL: {err}"))
                        })?
                        // JIT compiling a claim costs more than running it (~100 ms against
                        // ~1 ms at 1M jobs): never worth it for these short statements.
                        // Generic plans: the server otherwise re-plans the claim (ten CTEs)
                        // at every execution, its custom plan never looking dear enough to
                        // give up; planning cost more than running it (300 claims of one
                        // job: 1.35 s re-planned, 0.5 s on the generic plan), and the
                        // generic plan is the same index scans.
                        .options([("jit", "off"), ("plan_cache_mode", "force_generic_plan")]);
                    PgPoolOptions::new()
                        .max_connections(POOL_SIZE)
                        .acquire_timeout(timeout.unwrap_or(Duration::from_secs(30)))
                        .connect_with(options)
                        .await
                        .map_err(pg_error)?
                }
                Target::Pool(pool) => pool,
            };
            let names = Names::new(&config.postgres_schema);
            migrate::migrate(&pool, &names, timeout).await?;
            let sql = Sql::new(&names, config.defaults().plain().clone());
            sql.add_queue(&pool, queue).await?;
            Ok::<_, Error>((pool, names, sql))
        };
        let (pool, names, sql) = match timeout {
            Some(t) => tokio::time::timeout(t, opened)
                .await
                .map_err(|_| Error::unavailable(timed_out(t)))??,
            None => opened.await?,
        };
        let names = Arc::new(names);
        let sql = Arc::new(sql);
        let schedules = {
            let (pool, sql, queue) = (pool.clone(), sql.clone(), queue.to_owned());
            Batcher::new(timeout, move |jobs: Vec<NewJob>, replies| {
                let (pool, sql, queue) = (pool.clone(), sql.clone(), queue.clone());
                schedule_batch(pool, sql, queue, timeout, jobs, replies)
            })
        };
        let settles = {
            let (pool, sql, queue) = (pool.clone(), sql.clone(), queue.to_owned());
            Batcher::new(timeout, move |batch: Vec<Settle>, replies| {
                let (pool, sql, queue) = (pool.clone(), sql.clone(), queue.clone());
                settle_batch(pool, sql, queue, timeout, batch, replies)
            })
        };
        let heads = Arc::new(HeadClaims {
            series: SeriesSql::new(&names),
            rules: Mutex::default(),
            plain: config.defaults().plain().clone(),
        });
        let claims = {
            let (pool, sql, queue) = (pool.clone(), sql.clone(), queue.to_owned());
            let heads = heads.clone();
            Batcher::new(timeout, move |batch: Vec<ClaimReq>, replies| {
                let (pool, sql, queue) = (pool.clone(), sql.clone(), queue.clone());
                claims::claim_batch(pool, sql, heads.clone(), queue, batch, replies)
            })
        };
        let listening = listen::spawn(&pool, names.channel.clone(), queue.to_owned(), &wakeup);
        let seed = mix(crate::core::job::nanos(std::time::SystemTime::now())
            ^ u64::from(std::process::id()).rotate_left(32)
            ^ (Arc::as_ptr(&wakeup) as u64));
        Ok(Postgres {
            pool,
            queue: queue.to_owned(),
            heads,
            names,
            sql,
            plain: config.defaults().plain().clone(),
            timeout,
            schedules,
            settles,
            claims,
            closed: AtomicBool::new(false),
            calls: AtomicUsize::new(0),
            idle: tokio::sync::Notify::new(),
            _listening: listening,
            tokens: AtomicU64::new(0),
            token_seed: seed,
            last_fold: Mutex::new(None),
        })
    }

    /// Counts a call under way until the guard drops; fails once the queue is closed.
    fn enter(&self) -> Result<Call<'_>, Error> {
        // Counted before the check: a `close` that sets `closed` after it waits for this call.
        self.calls.fetch_add(1, SeqCst);
        let call = Call(self);
        if self.closed.load(SeqCst) {
            return Err(Error::closed());
        }
        Ok(call)
    }

    /// Refuses new calls, then waits for the calls under way (their statements and
    /// batches) to end, so nothing of this handle touches the tables after `close`.
    async fn close_calls(&self) {
        self.closed.store(true, SeqCst);
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.calls.load(SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }

    /// `call` within `postgres_timeout`.
    async fn timed<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let _call = self.enter()?;
        match self.timeout {
            Some(t) => tokio::time::timeout(t, call)
                .await
                .map_err(|_| Error::unavailable(timed_out(t)))?,
            None => call.await,
        }
    }

    /// A fresh lease token: a per-handle random seed and a counter, mixed.
    fn token(&self) -> i64 {
        let n = self.tokens.fetch_add(1, SeqCst);
        mix(self.token_seed.wrapping_add(n)) as i64
    }

    /// Whether a fold of the counter deltas is due (at most one per `FOLD_EVERY`).
    fn fold_due(&self) -> bool {
        let mut last = self.last_fold.lock().expect("fold clock");
        let due = last.is_none_or(|at| at.elapsed() >= FOLD_EVERY);
        if due {
            *last = Some(Instant::now());
        }
        due
    }

    /// A counter slot for a fold.
    fn slot(&self) -> i16 {
        (self.token() as u64 % names::SLOTS as u64) as i16
    }

    /// `schedule` on the caller's connection (in its transaction): the job exists if and
    /// only if that transaction commits; the commit wakes the idle consumers.
    pub(crate) async fn schedule_in(
        &self,
        conn: &mut PgConnection,
        job: NewJob,
    ) -> Result<Scheduled, Error> {
        let _call = self.enter()?;
        names::check_id(&job.id)?;
        let answers = self.sql.schedule(conn, &self.queue, &[job]).await?;
        Ok(answers.first().map_or(Scheduled::Exists, |&(s, _)| s))
    }

    /// `cancel` on the caller's connection.
    pub(crate) async fn cancel_in(&self, conn: &mut PgConnection, id: &str) -> Result<bool, Error> {
        let _call = self.enter()?;
        self.sql.cancel(&mut *conn, &self.queue, id).await
    }

    /// `reschedule` on the caller's connection.
    pub(crate) async fn reschedule_in(
        &self,
        conn: &mut PgConnection,
        id: &str,
        when: When,
    ) -> Result<bool, Error> {
        let _call = self.enter()?;
        Ok(self
            .sql
            .reschedule(&mut *conn, &self.queue, id, when)
            .await?
            .is_some())
    }

    /// An ack on the caller's connection: `true` if the lease was held, and then the job is
    /// deleted when (and only if) the caller's transaction commits.
    pub(crate) async fn ack_in(
        &self,
        conn: &mut PgConnection,
        id: &str,
        token: u64,
    ) -> Result<bool, Error> {
        let _call = self.enter()?;
        let answers = self
            .sql
            .settle(
                &mut *conn,
                &self.queue,
                &[Settle::Ack {
                    id: id.to_owned(),
                    token: token as i64,
                }],
            )
            .await?;
        Ok(answers.first() == Some(&Settled::Acked))
    }
}

/// One batch of schedules: one transaction whose lock waits are short. When it loses one
/// (on a row an open transaction inserts or kills, or as a deadlock victim against a
/// transaction inserting in another order), each request runs alone, in order; one that
/// still waits on a lock then waits alone, in a task of its own, up to its own timeout, so
/// only the contested ids wait for the transaction that holds them.
async fn schedule_batch(
    pool: PgPool,
    sql: Arc<Sql>,
    queue: String,
    timeout: Option<Duration>,
    jobs: Vec<NewJob>,
    replies: Vec<Reply<(Scheduled, u64)>>,
) {
    let short = Some(timeout.map_or(BATCH_LOCK_WAIT, |t| (t / 4).min(BATCH_LOCK_WAIT)));
    match sql.schedule_tx(&pool, &queue, &jobs, short).await {
        Ok(answers) => return answer(replies, Ok(answers)),
        Err(err) if !error::is_contended(&err) => return answer(replies, Err(pg_error(err))),
        Err(_) => {}
    }
    for (job, reply) in jobs.into_iter().zip(replies) {
        if reply.is_closed() {
            continue;
        }
        let one = std::slice::from_ref(&job);
        match sql.schedule_tx(&pool, &queue, one, short).await {
            Err(err) if error::is_contended(&err) => {
                let (pool, sql, queue) = (pool.clone(), sql.clone(), queue.clone());
                tokio::spawn(async move {
                    let one = std::slice::from_ref(&job);
                    let result = sql.schedule_tx(&pool, &queue, one, timeout).await;
                    let _ = reply.send(one_answer(result));
                });
            }
            result => drop(reply.send(one_answer(result))),
        }
    }
}

/// One batch of acks and retries, as [`schedule_batch`]: one transaction whose lock waits
/// are short. When it loses one (on the row of a running job whose successor an open
/// transaction schedules, `schedule_in`), each request runs alone, in order; one that still
/// waits then waits alone, in a task of its own, up to its own timeout, so only the
/// settlement of that job waits for the caller's commit, and the rest answer at once.
async fn settle_batch(
    pool: PgPool,
    sql: Arc<Sql>,
    queue: String,
    timeout: Option<Duration>,
    batch: Vec<Settle>,
    replies: Vec<Reply<Settled>>,
) {
    let short = Some(timeout.map_or(BATCH_LOCK_WAIT, |t| (t / 4).min(BATCH_LOCK_WAIT)));
    match sql.settle_tx(&pool, &queue, &batch, short).await {
        Ok(answers) => return answer(replies, Ok(answers)),
        Err(err) if !error::is_contended(&err) => return answer(replies, Err(pg_error(err))),
        Err(_) => {}
    }
    for (settle, reply) in batch.into_iter().zip(replies) {
        if reply.is_closed() {
            continue;
        }
        let one = std::slice::from_ref(&settle);
        match sql.settle_tx(&pool, &queue, one, short).await {
            Err(err) if error::is_contended(&err) => {
                let (pool, sql, queue) = (pool.clone(), sql.clone(), queue.clone());
                tokio::spawn(async move {
                    let one = std::slice::from_ref(&settle);
                    let result = sql.settle_tx(&pool, &queue, one, timeout).await;
                    let _ = reply.send(one_settled(result));
                });
            }
            result => drop(reply.send(one_settled(result))),
        }
    }
}

/// The answer to a settlement of one job alone.
fn one_settled(result: Result<Vec<Settled>, sqlx::Error>) -> Result<Settled, Error> {
    let answers = result.map_err(pg_error)?;
    Ok(answers.first().copied().unwrap_or(Settled::Stale))
}

/// The answer to a schedule of one job alone.
fn one_answer(
    result: Result<Vec<(Scheduled, u64)>, sqlx::Error>,
) -> Result<(Scheduled, u64), Error> {
    let answers = result.map_err(pg_error)?;
    Ok(answers.first().copied().unwrap_or((Scheduled::Exists, 0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_times_saturate_at_never() {
        assert_eq!(sql::dec(sql::enc(u64::MAX)), u64::MAX);
        assert_eq!(sql::dec(sql::enc(42)), 42);
        assert_eq!(sql::dec(-5), 0);
        assert_eq!(sql::span(Duration::MAX), i64::MAX);
    }
}
