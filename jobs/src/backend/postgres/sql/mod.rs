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
//!   mirrors. Counts and wake-ups are not here: the schema's triggers keep them for every
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

pub(super) use claim::{Settle, Settled};
pub(super) use jobs::NewJob;

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

/// The statements of one schema, by group.
#[derive(Debug)]
pub(super) struct Sql {
    jobs: jobs::JobsSql,
    claims: claim::ClaimSql,
    dead: dead::DeadSql,
    queue: queue::QueueSql,
    now: String,
}

fn db<T>(r: Result<T, sqlx::Error>) -> Result<T, Error> {
    r.map_err(pg_error)
}

impl Sql {
    pub(super) fn new(n: &Names) -> Sql {
        Sql {
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

/// Column `i` as an attempt count.
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

fn attempt(r: &PgRow, i: usize) -> Result<u32, Error> {
    Ok(u32::try_from(db(r.try_get::<i32, _>(i))?).unwrap_or(0))
}
