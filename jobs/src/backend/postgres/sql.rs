//! Every statement of the PostgreSQL backend: its SQL text (built once per schema from
//! `names.rs`) and one typed function that binds its parameters and decodes its rows.
//!
//! # Ground rules
//!
//! - SQL text holds only names from `names.rs`; ids, payloads, errors, queue names, times
//!   and limits are bound parameters (`$n`), always. `$1` is the queue.
//! - "Now" is the server's `clock_timestamp()` in nanoseconds ([`NOW`]), read once per
//!   statement in a `now` CTE; the client's clock is never read.
//! - Times are stored as `bigint` nanoseconds, saturating at `i64::MAX` ("never", read back
//!   as `u64::MAX`): [`enc`], [`dec`].
//! - Where a state-machine rule runs in SQL, a comment names the `core/state` function it
//!   mirrors. Counts and wake-ups are not here: the schema's triggers keep them for every
//!   statement on `jobs` and `dead` (migrations/0001_jobs.sql).

use sqlx::postgres::{PgExecutor, PgRow};
use sqlx::Row;

use super::error::pg_error;
use super::names::Names;
use crate::core::error::Error;
use crate::core::job::{JobInfo, JobState, When};

/// The server's clock, nanoseconds since the Unix epoch.
const NOW: &str = "(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint";

/// `i64::MAX` as SQL text: the stored "never".
const NEVER: &str = "9223372036854775807";

/// A stored time for `t`.
pub(super) fn enc(t: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}

/// The time a stored `v` stands for.
pub(super) fn dec(v: i64) -> u64 {
    if v == i64::MAX {
        u64::MAX
    } else {
        u64::try_from(v).unwrap_or(0)
    }
}

/// A duration as stored nanoseconds, saturating.
pub(super) fn span(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// `When` as the two parameters the statements resolve it from: a time, or a delay after
/// the server's now.
pub(super) fn when(w: When) -> (Option<i64>, Option<i64>) {
    match w {
        When::At(at) => (Some(enc(crate::core::job::nanos(at))), None),
        When::After(d) => (None, Some(span(d))),
    }
}

/// SQL resolving a `When` from the parameters `$at`, `$after` against the `now` CTE.
fn run_at(at: &str, after: &str) -> String {
    format!(
        "CASE WHEN {at}::bigint IS NOT NULL THEN {at}::bigint \
         ELSE LEAST((SELECT t FROM now)::numeric + {after}::bigint, {NEVER})::bigint END"
    )
}

/// SQL for "now + `by`" (a parameter or column of nanoseconds), saturating.
fn later(by: &str) -> String {
    format!("LEAST((SELECT t FROM now)::numeric + {by}, {NEVER})::bigint")
}

/// One job to schedule: id, when, payload.
pub(super) type NewJob = (String, When, Vec<u8>);

/// A settlement of a leased job, for the shared ack / retry statement.
#[derive(Debug, Clone)]
pub(super) enum Settle {
    Ack {
        id: String,
        token: i64,
    },
    /// Retry after `after` ns; with `Some(error)` a failure recording it.
    Retry {
        id: String,
        token: i64,
        after: i64,
        error: Option<String>,
    },
}

/// What a settlement did: acked; back to pending at (ns); dead at (ns); stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Settled {
    Acked,
    Pending(u64),
    Died(u64),
    Stale,
}

/// One row of a claim's answer.
#[derive(Debug)]
pub(super) struct ClaimRows {
    pub(super) jobs: Vec<(String, Vec<u8>, u32, u64)>,
    pub(super) now: u64,
    pub(super) died: u64,
    pub(super) next_due: Option<u64>,
    pub(super) paused: bool,
    /// Series heads due, left to the series step (`series.rs`).
    pub(super) heads: Vec<String>,
}

/// The statements of one schema.
#[derive(Debug)]
pub(super) struct Sql {
    schedule: String,
    cancel: String,
    reschedule: String,
    get: String,
    claim: String,
    settle: String,
    extend: String,
    remove_dead: String,
    purge_dead: String,
    fold: String,
    counts: String,
    list: [String; 6],
    revive: String,
    revive_dead: String,
    set_paused: String,
    add_queue: String,
    now: String,
}

fn db<T>(r: Result<T, sqlx::Error>) -> Result<T, Error> {
    r.map_err(pg_error)
}

impl Sql {
    pub(super) fn new(n: &Names) -> Sql {
        let Names {
            jobs,
            dead,
            series,
            queues,
            counts,
            deltas,
            ..
        } = n;
        // The pending occurrence of a series: neither cancelled nor moved by hand
        // (`embedded/series.rs` `is_head`).
        let not_head = |id: &str| {
            format!(
                "NOT EXISTS (SELECT 1 FROM {series} s WHERE s.queue = $1 \
                 AND s.name = split_part({id}, '@', 1) AND s.head_id = {id})"
            )
        };
        let list = |table: &str, at: &str, filter: &str, cmp: &str, order: &str, after: bool| {
            let position = if after {
                format!("AND ({at}, id) {cmp} ($2, $3)")
            } else {
                String::new()
            };
            format!(
                "SELECT {at} AS at, id, run_at, attempt, last_error, \
                 CASE WHEN $5 THEN payload ELSE ''::bytea END AS payload \
                 FROM {table} WHERE queue = $1 {filter} {position} \
                 ORDER BY {at} {order}, id {order} LIMIT $4"
            )
        };
        let pending = "AND token IS NULL";
        let running = "AND token IS NOT NULL";
        Sql {
            schedule: format!(
                "WITH now AS (SELECT {NOW} AS t), \
                 input AS (SELECT i.id, i.ord, {run_at}::bigint AS run_at, i.payload \
                   FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bytea[]) \
                   WITH ORDINALITY AS i(id, at, after, payload, ord)), \
                 ins AS (INSERT INTO {jobs} (queue, id, run_at, payload) \
                   SELECT $1, input.id, input.run_at, input.payload FROM input \
                   WHERE NOT EXISTS (SELECT 1 FROM {dead} d WHERE d.queue = $1 AND d.id = input.id) \
                   ORDER BY input.ord \
                   ON CONFLICT (queue, id) DO NOTHING RETURNING id, run_at) \
                 SELECT id, run_at FROM ins",
                run_at = run_at("i.at", "i.after"),
            ),
            // Machine::cancel: only a pending job, and not a series' pending occurrence.
            cancel: format!(
                "DELETE FROM {jobs} WHERE queue = $1 AND id = $2 AND token IS NULL AND {} RETURNING 1",
                not_head("$2")
            ),
            // Machine::reschedule.
            reschedule: format!(
                "WITH now AS (SELECT {NOW} AS t) \
                 UPDATE {jobs} SET run_at = {} WHERE queue = $1 AND id = $2 AND token IS NULL \
                 AND {} RETURNING run_at",
                run_at("$3", "$4"),
                not_head("$2")
            ),
            get: format!(
                "SELECT run_at, attempt, token IS NOT NULL AS running, false AS dead, last_error, payload \
                 FROM {jobs} WHERE queue = $1 AND id = $2 \
                 UNION ALL SELECT run_at, attempt, false, true, last_error, payload \
                 FROM {dead} WHERE queue = $1 AND id = $2 LIMIT 1"
            ),
            // Machine::claim for each due job: the expired leases first (their last error
            // becomes Machine::claim_error's), then pending jobs in due order, $2 in all (a
            // plain `LIMIT $2` on each index scan: a computed limit makes the planner guess
            // a large one and cost the plan into JIT compilation); a job whose
            // attempts reached $5 moves to `dead` instead of being leased. Series heads are
            // left to the series step (`series.rs`), which moves the series in the same
            // transaction as the claim of its head.
            claim: format!(
                "WITH now AS (SELECT {NOW} AS t), \
                 paused AS (SELECT EXISTS (SELECT 1 FROM {queues} WHERE queue = $1 AND paused) AS p), \
                 expired AS (SELECT j.id, j.attempt, j.lease_until AS at FROM {jobs} j \
                   WHERE j.queue = $1 AND j.token IS NOT NULL AND j.lease_until <= (SELECT t FROM now) \
                   AND NOT (SELECT p FROM paused) \
                   ORDER BY j.lease_until, j.id LIMIT $2 FOR UPDATE SKIP LOCKED), \
                 due AS (SELECT j.id, j.attempt, j.run_at AS at FROM {jobs} j \
                   WHERE j.queue = $1 AND j.token IS NULL AND j.run_at <= (SELECT t FROM now) \
                   AND NOT (SELECT p FROM paused) \
                   AND (j.attempt > 0 OR strpos(j.id, '@') = 0 OR {head}) \
                   ORDER BY j.run_at, j.id LIMIT $2 FOR UPDATE SKIP LOCKED), \
                 picked AS (SELECT id, attempt, expired FROM (\
                   SELECT id, attempt, true AS expired, 0 AS k, at FROM expired \
                   UNION ALL SELECT id, attempt, false, 1, at FROM due) AS both_ \
                   ORDER BY k, at, id LIMIT $2), \
                 killed AS (DELETE FROM {jobs} j USING picked p \
                   WHERE j.queue = $1 AND j.id = p.id AND p.attempt >= $5 \
                   RETURNING j.queue, j.id, j.run_at, j.attempt, \
                   CASE WHEN p.expired THEN 'lease expired' ELSE j.last_error END AS last_error, j.payload), \
                 buried AS (INSERT INTO {dead} (queue, id, run_at, attempt, died_at, last_error, payload) \
                   SELECT queue, id, run_at, attempt, (SELECT t FROM now), last_error, payload FROM killed \
                   RETURNING 1), \
                 leased AS (UPDATE {jobs} j SET attempt = j.attempt + 1, token = $4, \
                   lease_until = {until}, \
                   last_error = CASE WHEN p.expired THEN 'lease expired' ELSE j.last_error END \
                   FROM picked p WHERE j.queue = $1 AND j.id = p.id AND p.attempt < $5 \
                   RETURNING j.id, j.payload, j.attempt, j.run_at), \
                 next_pending AS (SELECT j.run_at AS t FROM {jobs} j WHERE j.queue = $1 AND j.token IS NULL \
                   AND NOT EXISTS (SELECT 1 FROM picked p WHERE p.id = j.id) ORDER BY j.run_at, j.id LIMIT 1), \
                 next_lease AS (SELECT j.lease_until AS t FROM {jobs} j WHERE j.queue = $1 AND j.token IS NOT NULL \
                   AND NOT EXISTS (SELECT 1 FROM picked p WHERE p.id = j.id) ORDER BY j.lease_until, j.id LIMIT 1), \
                 heads AS (SELECT s.head_id FROM {series} s WHERE s.queue = $1 AND s.head <= (SELECT t FROM now) \
                   AND NOT (SELECT p FROM paused) ORDER BY s.head LIMIT $2) \
                 SELECT 0 AS kind, id, payload, attempt, run_at AS at FROM leased \
                 UNION ALL SELECT 1, NULL, NULL, (SELECT count(*) FROM buried)::int, (SELECT t FROM now) \
                 UNION ALL SELECT 2, NULL, NULL, (SELECT p FROM paused)::int, \
                   LEAST((SELECT t FROM next_pending), (SELECT t FROM next_lease), \
                   CASE WHEN EXISTS (SELECT 1 FROM leased) THEN {until} END) \
                 UNION ALL SELECT 3, head_id, NULL, NULL, NULL FROM heads",
                head = not_head("j.id"),
                until = later("$3"),
            ),
            // Acks (Machine::ack: the token must hold) and retries (Machine::retry: with the
            // token, back to pending, or dead if that was the last attempt, $8) of many jobs
            // in one statement and one commit.
            settle: format!(
                "WITH now AS (SELECT {NOW} AS t), \
                 acked AS (DELETE FROM {jobs} j USING unnest($2::text[], $3::bigint[]) AS a(id, token) \
                   WHERE j.queue = $1 AND j.id = a.id AND j.token = a.token RETURNING j.id, a.token), \
                 r AS (SELECT * FROM unnest($4::text[], $5::bigint[], $6::bigint[], $7::text[]) \
                   AS r(id, token, after, error)), \
                 back AS (UPDATE {jobs} j SET run_at = {after}, token = NULL, lease_until = NULL, \
                   last_error = coalesce(r.error, j.last_error) \
                   FROM r WHERE j.queue = $1 AND j.id = r.id AND j.token = r.token AND j.attempt < $8 \
                   RETURNING j.id, r.token, j.run_at), \
                 gone AS (DELETE FROM {jobs} j USING r \
                   WHERE j.queue = $1 AND j.id = r.id AND j.token = r.token AND j.attempt >= $8 \
                   RETURNING j.queue, j.id, r.token, j.run_at, j.attempt, \
                   coalesce(r.error, j.last_error) AS last_error, j.payload), \
                 buried AS (INSERT INTO {dead} (queue, id, run_at, attempt, died_at, last_error, payload) \
                   SELECT queue, id, run_at, attempt, (SELECT t FROM now), last_error, payload FROM gone \
                   RETURNING id) \
                 SELECT 0 AS kind, id, token, 0::bigint AS at FROM acked \
                 UNION ALL SELECT 1, id, token, run_at FROM back \
                 UNION ALL SELECT 2, id, token, (SELECT t FROM now) FROM gone",
                after = later("r.after"),
            ),
            // Machine::extend.
            extend: format!(
                "WITH now AS (SELECT {NOW} AS t) \
                 UPDATE {jobs} SET lease_until = {} WHERE queue = $1 AND id = $2 AND token = $3 RETURNING 1",
                later("$4")
            ),
            remove_dead: format!("DELETE FROM {dead} WHERE queue = $1 AND id = $2 RETURNING 1"),
            purge_dead: format!(
                "DELETE FROM {dead} WHERE queue = $1 AND id IN (SELECT id FROM {dead} \
                 WHERE queue = $1 ORDER BY died_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)"
            ),
            fold: format!(
                "WITH d AS (DELETE FROM {deltas} WHERE queue = $1 RETURNING pending, running, dead) \
                 INSERT INTO {counts} AS c (queue, slot, pending, running, dead) \
                 SELECT $1, $2, sum(pending), sum(running), sum(dead) FROM d HAVING count(*) > 0 \
                 ON CONFLICT (queue, slot) DO UPDATE SET pending = c.pending + excluded.pending, \
                 running = c.running + excluded.running, dead = c.dead + excluded.dead"
            ),
            counts: format!(
                "SELECT coalesce(sum(pending), 0)::bigint, coalesce(sum(running), 0)::bigint, \
                 coalesce(sum(dead), 0)::bigint, \
                 EXISTS (SELECT 1 FROM {queues} WHERE queue = $1 AND paused), \
                 (SELECT run_at FROM {jobs} WHERE queue = $1 AND token IS NULL ORDER BY run_at, id LIMIT 1) \
                 FROM (SELECT pending, running, dead FROM {counts} WHERE queue = $1 \
                 UNION ALL SELECT pending, running, dead FROM {deltas} WHERE queue = $1) AS c"
            ),
            list: [
                list(jobs, "run_at", pending, ">", "ASC", false),
                list(jobs, "run_at", pending, ">", "ASC", true),
                list(jobs, "lease_until", running, ">", "ASC", false),
                list(jobs, "lease_until", running, ">", "ASC", true),
                list(dead, "died_at", "", "<", "DESC", false),
                list(dead, "died_at", "", "<", "DESC", true),
            ],
            // Machine::revive: pending again, attempts from 0, the last error kept.
            revive: format!(
                "WITH now AS (SELECT {NOW} AS t), \
                 d AS (DELETE FROM {dead} WHERE queue = $1 AND id = $2 RETURNING queue, id, last_error, payload) \
                 INSERT INTO {jobs} (queue, id, run_at, attempt, last_error, payload) \
                 SELECT queue, id, {}, 0, last_error, payload FROM d RETURNING run_at",
                run_at("$3", "$4")
            ),
            revive_dead: format!(
                "WITH now AS (SELECT {NOW} AS t), \
                 d AS (DELETE FROM {dead} WHERE queue = $1 AND id IN (SELECT id FROM {dead} \
                   WHERE queue = $1 ORDER BY died_at, id LIMIT $2 FOR UPDATE SKIP LOCKED) \
                   RETURNING queue, id, last_error, payload), \
                 ins AS (INSERT INTO {jobs} (queue, id, run_at, attempt, last_error, payload) \
                   SELECT queue, id, {}, 0, last_error, payload FROM d RETURNING run_at) \
                 SELECT count(*)::bigint, min(run_at) FROM ins",
                run_at("$3", "$4")
            ),
            set_paused: format!(
                "WITH u AS (INSERT INTO {queues} (queue, paused) VALUES ($1, $2) \
                 ON CONFLICT (queue) DO UPDATE SET paused = excluded.paused RETURNING paused) \
                 SELECT pg_notify($3, '0 ' || $1) FROM u WHERE NOT u.paused"
            ),
            add_queue: format!(
                "INSERT INTO {queues} (queue) VALUES ($1) ON CONFLICT (queue) DO NOTHING"
            ),
            now: format!("SELECT {NOW}"),
        }
    }

    /// Creates the jobs that do not exist (as pending, dead or running), in order: the
    /// created ones' ids and run_ats.
    pub(super) async fn schedule(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        jobs: Vec<NewJob>,
    ) -> Result<Vec<(String, u64)>, Error> {
        let n = jobs.len();
        let (mut ids, mut ats, mut afters, mut payloads) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for (id, w, payload) in jobs {
            let (at, after) = when(w);
            ids.push(id);
            ats.push(at);
            afters.push(after);
            payloads.push(payload);
        }
        let rows = db(sqlx::query(&self.schedule)
            .bind(queue)
            .bind(ids)
            .bind(ats)
            .bind(afters)
            .bind(payloads)
            .fetch_all(ex)
            .await)?;
        rows.iter()
            .map(|r| Ok((db(r.try_get(0))?, dec(db(r.try_get(1))?))))
            .collect()
    }

    pub(super) async fn cancel(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        id: &str,
    ) -> Result<bool, Error> {
        let row = db(sqlx::query(&self.cancel)
            .bind(queue)
            .bind(id)
            .fetch_optional(ex)
            .await)?;
        Ok(row.is_some())
    }

    pub(super) async fn reschedule(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        id: &str,
        w: When,
    ) -> Result<Option<u64>, Error> {
        let (at, after) = when(w);
        let row = db(sqlx::query(&self.reschedule)
            .bind(queue)
            .bind(id)
            .bind(at)
            .bind(after)
            .fetch_optional(ex)
            .await)?;
        row.map(|r| Ok(dec(db(r.try_get(0))?))).transpose()
    }

    pub(super) async fn get(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        id: &str,
    ) -> Result<Option<JobInfo>, Error> {
        let row = db(sqlx::query(&self.get)
            .bind(queue)
            .bind(id)
            .fetch_optional(ex)
            .await)?;
        let Some(r) = row else { return Ok(None) };
        let state = match (db(r.try_get::<bool, _>(2))?, db(r.try_get::<bool, _>(3))?) {
            (_, true) => JobState::Dead,
            (true, _) => JobState::Running,
            _ => JobState::Pending,
        };
        Ok(Some(JobInfo::new(
            id.to_owned(),
            state,
            dec(db(r.try_get(0))?),
            attempt(&r, 1)?,
            db(r.try_get(4))?,
            db(r.try_get(5))?,
        )))
    }

    /// Claims up to `max` due jobs under `token` for `lease` ns, killing those out of
    /// `max_attempts`.
    pub(super) async fn claim(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        max: usize,
        lease: i64,
        token: i64,
        max_attempts: u32,
    ) -> Result<ClaimRows, Error> {
        let rows = db(sqlx::query(&self.claim)
            .bind(queue)
            .bind(i64::try_from(max).unwrap_or(i64::MAX))
            .bind(lease)
            .bind(token)
            .bind(i32::try_from(max_attempts).unwrap_or(i32::MAX))
            .fetch_all(ex)
            .await)?;
        let mut out = ClaimRows {
            jobs: Vec::new(),
            now: 0,
            died: 0,
            next_due: None,
            paused: false,
            heads: Vec::new(),
        };
        for r in &rows {
            match db(r.try_get::<i32, _>(0))? {
                0 => out.jobs.push((
                    db(r.try_get(1))?,
                    db(r.try_get(2))?,
                    attempt(r, 3)?,
                    dec(db(r.try_get(4))?),
                )),
                1 => {
                    out.died = attempt(r, 3)?.into();
                    out.now = dec(db(r.try_get(4))?);
                }
                2 => {
                    out.paused = db(r.try_get::<i32, _>(3))? != 0;
                    out.next_due = db(r.try_get::<Option<i64>, _>(4))?.map(dec);
                }
                _ => out.heads.push(db(r.try_get(1))?),
            }
        }
        Ok(out)
    }

    /// Acks and retries, in one statement; the answers in order.
    pub(super) async fn settle(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        max_attempts: u32,
        batch: &[Settle],
    ) -> Result<Vec<Settled>, Error> {
        let (mut ack_ids, mut ack_tokens) = (Vec::new(), Vec::new());
        let (mut ids, mut tokens, mut afters, mut errors) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for s in batch {
            match s {
                Settle::Ack { id, token } => {
                    ack_ids.push(id.as_str());
                    ack_tokens.push(*token);
                }
                Settle::Retry {
                    id,
                    token,
                    after,
                    error,
                } => {
                    ids.push(id.as_str());
                    tokens.push(*token);
                    afters.push(*after);
                    errors.push(error.as_deref());
                }
            }
        }
        let rows = db(sqlx::query(&self.settle)
            .bind(queue)
            .bind(ack_ids)
            .bind(ack_tokens)
            .bind(ids)
            .bind(tokens)
            .bind(afters)
            .bind(errors)
            .bind(i32::try_from(max_attempts).unwrap_or(i32::MAX))
            .fetch_all(ex)
            .await)?;
        let mut done = std::collections::HashMap::new();
        for r in &rows {
            let id: String = db(r.try_get(1))?;
            let token: i64 = db(r.try_get(2))?;
            let at = dec(db(r.try_get(3))?);
            let answer = match db(r.try_get::<i32, _>(0))? {
                0 => Settled::Acked,
                1 => Settled::Pending(at),
                _ => Settled::Died(at),
            };
            done.insert((id, token), answer);
        }
        Ok(batch
            .iter()
            .map(|s| {
                let key = match s {
                    Settle::Ack { id, token } | Settle::Retry { id, token, .. } => {
                        (id.clone(), *token)
                    }
                };
                // Each change answers one request: a duplicate of it is stale.
                done.remove(&key).unwrap_or(Settled::Stale)
            })
            .collect())
    }

    pub(super) async fn extend(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        id: &str,
        token: i64,
        by: i64,
    ) -> Result<bool, Error> {
        let row = db(sqlx::query(&self.extend)
            .bind(queue)
            .bind(id)
            .bind(token)
            .bind(by)
            .fetch_optional(ex)
            .await)?;
        Ok(row.is_some())
    }

    pub(super) async fn remove_dead(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        id: &str,
    ) -> Result<bool, Error> {
        let row = db(sqlx::query(&self.remove_dead)
            .bind(queue)
            .bind(id)
            .fetch_optional(ex)
            .await)?;
        Ok(row.is_some())
    }

    pub(super) async fn purge_dead(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        limit: usize,
    ) -> Result<u64, Error> {
        let done = db(sqlx::query(&self.purge_dead)
            .bind(queue)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .execute(ex)
            .await)?;
        Ok(done.rows_affected())
    }

    /// Moves the queue's counter changes into its slot `slot`.
    pub(super) async fn fold(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        slot: i16,
    ) -> Result<(), Error> {
        db(sqlx::query(&self.fold)
            .bind(queue)
            .bind(slot)
            .execute(ex)
            .await)?;
        Ok(())
    }

    /// (pending, running, dead, paused, next due).
    pub(super) async fn counts(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
    ) -> Result<(u64, u64, u64, bool, Option<u64>), Error> {
        let r = db(sqlx::query(&self.counts).bind(queue).fetch_one(ex).await)?;
        let count = |i| -> Result<u64, Error> { Ok(db(r.try_get::<i64, _>(i))?.max(0) as u64) };
        Ok((
            count(0)?,
            count(1)?,
            count(2)?,
            db(r.try_get(3))?,
            db(r.try_get::<Option<i64>, _>(4))?.map(dec),
        ))
    }

    pub(super) async fn list(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        state: JobState,
        after: Option<(u64, String)>,
        limit: usize,
        payloads: bool,
    ) -> Result<Vec<(u64, JobInfo)>, Error> {
        let base = match state {
            JobState::Pending => 0,
            JobState::Running => 2,
            JobState::Dead => 4,
        };
        let text = &self.list[base + usize::from(after.is_some())];
        let (at, id) = after.map_or((0, String::new()), |(at, id)| (enc(at), id));
        let rows = db(sqlx::query(text)
            .bind(queue)
            .bind(at)
            .bind(id)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .bind(payloads)
            .fetch_all(ex)
            .await)?;
        rows.iter()
            .map(|r| {
                let info = JobInfo::new(
                    db(r.try_get(1))?,
                    state,
                    dec(db(r.try_get(2))?),
                    attempt(r, 3)?,
                    db(r.try_get(4))?,
                    db(r.try_get(5))?,
                );
                Ok((dec(db(r.try_get(0))?), info))
            })
            .collect()
    }

    pub(super) async fn revive(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        id: &str,
        w: When,
    ) -> Result<Option<u64>, Error> {
        let (at, after) = when(w);
        let row = db(sqlx::query(&self.revive)
            .bind(queue)
            .bind(id)
            .bind(at)
            .bind(after)
            .fetch_optional(ex)
            .await)?;
        row.map(|r| Ok(dec(db(r.try_get(0))?))).transpose()
    }

    pub(super) async fn revive_dead(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        limit: usize,
        w: When,
    ) -> Result<(u64, Option<u64>), Error> {
        let (at, after) = when(w);
        let r = db(sqlx::query(&self.revive_dead)
            .bind(queue)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .bind(at)
            .bind(after)
            .fetch_one(ex)
            .await)?;
        Ok((
            db(r.try_get::<i64, _>(0))?.max(0) as u64,
            db(r.try_get::<Option<i64>, _>(1))?.map(dec),
        ))
    }

    /// Sets the paused flag; an unpause wakes idle consumers on `channel`.
    pub(super) async fn set_paused(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        paused: bool,
        channel: &str,
    ) -> Result<(), Error> {
        db(sqlx::query(&self.set_paused)
            .bind(queue)
            .bind(paused)
            .bind(channel)
            .fetch_all(ex)
            .await)?;
        Ok(())
    }

    pub(super) async fn add_queue(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
    ) -> Result<(), Error> {
        db(sqlx::query(&self.add_queue).bind(queue).execute(ex).await)?;
        Ok(())
    }

    /// The server's clock.
    pub(super) async fn now(&self, ex: impl PgExecutor<'_>) -> Result<u64, Error> {
        let r = db(sqlx::query(&self.now).fetch_one(ex).await)?;
        Ok(dec(db(r.try_get(0))?))
    }
}

/// Column `i` as an attempt count.
fn attempt(r: &PgRow, i: usize) -> Result<u32, Error> {
    Ok(u32::try_from(db(r.try_get::<i32, _>(i))?).unwrap_or(0))
}
