//! Every statement of the PostgreSQL backend: its SQL text (built once per schema from
//! `names.rs`) and one typed function that binds its parameters and decodes its rows,
//! grouped by what they act on like the Redis backend's `scripts/`: `jobs.rs` (one job by
//! id: schedule, cancel, reschedule, get), `claim.rs` (a consumer's leases: claim, settle =
//! ack / retry / fail, extend), `dead.rs` (remove, purge, revive), `queue.rs` (the whole
//! queue: fold, counts, list, pause, add). This file holds the shared pieces (the server's
//! clock, time encoding, the series-head test) and [`Sql`], which owns every group's text.
//! Recurring series' statements live with their steps in `../series.rs`.
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
//!   mirrors (or, for dedup modes and successors, the `embedded/store` function). Counts and wake-ups are not here: the schema's triggers keep them for every
//!   statement on `jobs` and `dead` (migrations/0001_jobs.sql).

mod claim;
mod dead;
mod jobs;
mod queue;

use sqlx::postgres::{PgExecutor, PgRow};
use sqlx::Row;

use super::error::pg_error;
use super::names::Names;
use crate::core::error::Error;
use crate::core::job::When;
use crate::core::kind::{Keyed, Spec};

pub(super) use claim::{Head, HeadsListed, Leased, Settle, Settled};

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

/// SQL for "`id` is not the pending occurrence of a series": neither cancelled nor moved
/// by hand (`embedded/series.rs` `is_head`).
fn not_head(series: &str, id: &str) -> String {
    format!(
        "NOT EXISTS (SELECT 1 FROM {series} s WHERE s.queue = $1 \
         AND s.name = split_part({id}, '@', 1) AND s.head_id = {id})"
    )
}

/// A job's stored spec as a select list (`migrations/0003_kinds.sql`), with the columns'
/// table alias `t` (`""` for none); [`spec`] decodes it.
fn spec_cols(t: &str) -> String {
    let t = if t.is_empty() {
        String::new()
    } else {
        format!("{t}.")
    };
    format!(
        "{t}kind, {t}priority, {t}max_attempts, {t}backoff_first, {t}backoff_max, {t}lease, \
         {t}hold_off, {t}key, {t}key_limit, {t}rate_starts, {t}rate_per"
    )
}

/// The successor's spec columns (`next_kind`, …, `next_hold_off`), in [`spec_cols`]' order,
/// with the table alias `t` (`""` for none).
fn next_spec_cols(t: &str) -> String {
    let t = if t.is_empty() {
        String::new()
    } else {
        format!("{t}.")
    };
    spec_cols("")
        .split(", ")
        .map(|c| format!("{t}next_{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// SQL for "the job (alias `t`) has a successor waiting" (`Dedup::AllowWhileRunning`,
/// `migrations/0003_kinds.sql`): one test of the row's NULL bitmap.
fn has_next(t: &str) -> String {
    format!("{t}.next_payload IS NOT NULL")
}

/// Which jobs a statement reads: every kind, the kind `''`, or the named kind `$6`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kinds {
    All,
    Plain,
    Named,
}

impl Kinds {
    const EACH: [Kinds; 3] = [Kinds::All, Kinds::Plain, Kinds::Named];

    /// Which statement of a group of three serves `kind`.
    fn of(kind: Option<&str>) -> Kinds {
        match kind {
            None => Kinds::All,
            Some("") => Kinds::Plain,
            Some(_) => Kinds::Named,
        }
    }

    /// The condition on a row of `jobs` or `dead` (alias `t`, `""` for none). A named
    /// kind's says `<> ''` too, so the planner may use `jobs_due` (whose rows it is).
    fn rows(self, t: &str) -> String {
        let t = if t.is_empty() {
            String::new()
        } else {
            format!("{t}.")
        };
        match self {
            Kinds::All => String::new(),
            Kinds::Plain => format!("AND {t}kind = ''"),
            Kinds::Named => format!("AND {t}kind = $6 AND {t}kind <> ''"),
        }
    }

    /// The binding of `$6`, if the statement has one.
    fn bind<'q>(
        kind: Option<&'q str>,
        q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        match kind {
            Some(k) if !k.is_empty() => q.bind(k),
            _ => q,
        }
    }
}

/// SQL for "the priority levels in use among pending jobs" as a recursive CTE named
/// `levels(lvl)`, highest first, ending in a NULL row: a skip scan, one index probe per
/// level, of `jobs_due` for a named kind, else of `jobs_pending` (all levels: the kind
/// `''` has no index of its own).
fn levels(jobs: &str, kinds: Kinds) -> String {
    let kind = match kinds {
        Kinds::Named => kinds.rows(""),
        Kinds::All | Kinds::Plain => String::new(),
    };
    format!(
        "levels(lvl) AS (SELECT max(priority) FROM {jobs} WHERE queue = $1 AND token IS NULL AND NOT waiting {kind} \
         UNION ALL SELECT (SELECT max(priority) FROM {jobs} WHERE queue = $1 AND token IS NULL AND NOT waiting {kind} \
         AND priority < l.lvl) FROM levels l WHERE l.lvl IS NOT NULL)"
    )
}

/// The spec in the columns `i..i + 11` of `r` ([`spec_cols`]): NULL options are `plain`'s
/// (rows written before version 3, occurrences of a series set before version 4).
pub(super) fn spec(r: &PgRow, i: usize, plain: &Spec) -> Result<Spec, Error> {
    let ns = |j: usize| -> Result<Option<std::time::Duration>, Error> {
        Ok(db(r.try_get::<Option<i64>, _>(i + j))?
            .map(|v| std::time::Duration::from_nanos(u64::try_from(v).unwrap_or(0))))
    };
    let priority: i16 = db(r.try_get(i + 1))?;
    Ok(Spec {
        kind: db(r.try_get(i))?,
        priority: i8::try_from(priority).unwrap_or(if priority < 0 { i8::MIN } else { i8::MAX }),
        max_attempts: db(r.try_get::<Option<i32>, _>(i + 2))?
            .map_or(plain.max_attempts, |a| u32::try_from(a).unwrap_or(1)),
        backoff: (
            ns(3)?.unwrap_or(plain.backoff.0),
            ns(4)?.unwrap_or(plain.backoff.1),
        ),
        lease: ns(5)?.unwrap_or(plain.lease),
        // NULL (rows before version 3's hold-off, series occurrences): none.
        hold_off: ns(6)?.unwrap_or(std::time::Duration::ZERO),
        key: match db(r.try_get::<Option<String>, _>(i + 7))? {
            None => None,
            Some(key) => {
                let limit: Option<i32> = db(r.try_get(i + 8))?;
                let starts: Option<i32> = db(r.try_get(i + 9))?;
                let per: Option<i64> = db(r.try_get(i + 10))?;
                Some(Keyed {
                    key,
                    limit: limit.map_or(0, |l| u32::try_from(l).unwrap_or(0)),
                    rate: starts.zip(per).map(|(starts, per)| {
                        (
                            u32::try_from(starts).unwrap_or(1),
                            std::time::Duration::from_nanos(u64::try_from(per).unwrap_or(0)),
                        )
                    }),
                })
            }
        },
    })
}

/// Specs as the parameter arrays of [`spec_cols`]' columns, for `unnest`.
#[derive(Debug, Default)]
struct SpecArrays<'a> {
    kinds: Vec<&'a str>,
    priorities: Vec<i16>,
    max_attempts: Vec<i32>,
    backoff_first: Vec<i64>,
    backoff_max: Vec<i64>,
    leases: Vec<i64>,
    hold_offs: Vec<i64>,
    keys: Vec<Option<&'a str>>,
    key_limits: Vec<Option<i32>>,
    rate_starts: Vec<Option<i32>>,
    rate_pers: Vec<Option<i64>>,
}

impl<'a> SpecArrays<'a> {
    fn push(&mut self, s: &'a Spec) {
        self.kinds.push(&s.kind);
        self.priorities.push(s.priority.into());
        self.max_attempts
            .push(i32::try_from(s.max_attempts).unwrap_or(i32::MAX));
        self.backoff_first.push(span(s.backoff.0));
        self.backoff_max.push(span(s.backoff.1));
        self.leases.push(span(s.lease));
        self.hold_offs.push(span(s.hold_off));
        self.keys.push(s.key.as_ref().map(|k| k.key.as_str()));
        // 0 (no limit) is stored NULL, as is no rate: a job with neither is not gated.
        let gate = s.gate();
        self.key_limits.push(
            gate.filter(|k| k.limit > 0)
                .map(|k| i32::try_from(k.limit).unwrap_or(i32::MAX)),
        );
        let rate = gate.and_then(|k| k.rate);
        self.rate_starts
            .push(rate.map(|(starts, _)| i32::try_from(starts).unwrap_or(i32::MAX)));
        self.rate_pers.push(rate.map(|(_, per)| span(per)));
    }

    /// Binds the arrays, in [`spec_cols`]' order.
    fn bind<'q>(
        self,
        q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>
    where
        'a: 'q,
    {
        q.bind(self.kinds)
            .bind(self.priorities)
            .bind(self.max_attempts)
            .bind(self.backoff_first)
            .bind(self.backoff_max)
            .bind(self.leases)
            .bind(self.hold_offs)
            .bind(self.keys)
            .bind(self.key_limits)
            .bind(self.rate_starts)
            .bind(self.rate_pers)
    }
}

/// The statements of one schema, by group, and the spec NULL options stand for.
#[derive(Debug)]
pub(super) struct Sql {
    jobs: jobs::JobsSql,
    claims: claim::ClaimSql,
    dead: dead::DeadSql,
    queue: queue::QueueSql,
    now: String,
    /// The queue's plain spec (`Defaults::plain`): what a row's NULL options read as.
    plain: Spec,
}

/// The `BEGIN` of a transaction at READ COMMITTED (whatever the server's default) whose lock
/// waits end after `lock_timeout` (SQLSTATE 55P03): one round trip with the timeout.
fn begin(lock_timeout: Option<std::time::Duration>) -> String {
    match lock_timeout {
        // 0 turns the timeout off: wait at least 1 ms.
        Some(t) => format!(
            "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = '{}ms'",
            t.as_millis().clamp(1, i32::MAX as u128)
        ),
        None => "BEGIN ISOLATION LEVEL READ COMMITTED".to_owned(),
    }
}

fn db<T>(r: Result<T, sqlx::Error>) -> Result<T, Error> {
    r.map_err(pg_error)
}

impl Sql {
    pub(super) fn new(n: &Names, plain: Spec) -> Sql {
        Sql {
            plain,
            jobs: jobs::JobsSql::new(n),
            claims: claim::ClaimSql::new(n),
            dead: dead::DeadSql::new(n),
            queue: queue::QueueSql::new(n),
            now: format!("SELECT {NOW}"),
        }
    }

    /// The server's clock.
    pub(super) async fn now(&self, ex: impl PgExecutor<'_>) -> Result<u64, Error> {
        let r = db(sqlx::query(&self.now).fetch_one(ex).await)?;
        Ok(dec(db(r.try_get(0))?))
    }
}

/// Runs `statement`, which moves the job `id` of `queue` to a new run_at (binds: queue, id,
/// and [`when`]'s pair) and returns it if the job was in the state it moves from: the
/// shape `reschedule` (pending) and `revive` (dead) share.
async fn move_job(
    ex: impl PgExecutor<'_>,
    statement: &str,
    queue: &str,
    id: &str,
    w: When,
) -> Result<Option<u64>, Error> {
    let (at, after) = when(w);
    let row = db(sqlx::query(statement)
        .bind(queue)
        .bind(id)
        .bind(at)
        .bind(after)
        .fetch_optional(ex)
        .await)?;
    row.map(|r| Ok(dec(db(r.try_get(0))?))).transpose()
}

/// Column `i` as an attempt count.
fn attempt(r: &PgRow, i: usize) -> Result<u32, Error> {
    Ok(u32::try_from(db(r.try_get::<i32, _>(i))?).unwrap_or(0))
}

/// SQL for "the job (alias `t`, `""` for none) is gated": it has a key limit or a key rate
/// (`migrations/0003_kinds.sql`, `gates`). A gated job enters pending as waiting; its
/// gate's rebalance (the statement's trigger) admits it if it may.
fn gated(t: &str) -> String {
    let t = if t.is_empty() {
        String::new()
    } else {
        format!("{t}.")
    };
    format!("({t}key_limit IS NOT NULL OR {t}rate_starts IS NOT NULL)")
}
