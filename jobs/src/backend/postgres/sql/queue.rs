//! The statements on a whole queue: `fold` (its count deltas into a slot row), `counts`,
//! `list` (a page of one state), `set_paused`, `add_queue`.

use sqlx::postgres::PgExecutor;
use sqlx::Row;

use super::{attempt, db, dec, enc, Sql};
use crate::backend::postgres::names::Names;
use crate::core::error::Error;
use crate::core::job::{JobInfo, JobState};
/// The SQL text of these statements for one schema.
#[derive(Debug)]
pub(super) struct QueueSql {
    fold: String,
    counts: String,
    list: [String; 6],
    set_paused: String,
    add_queue: String,
}

impl QueueSql {
    pub(super) fn new(n: &Names) -> QueueSql {
        let Names {
            jobs,
            dead,
            queues,
            counts,
            deltas,
            ..
        } = n;
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
        QueueSql {
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
            set_paused: format!(
                "WITH u AS (INSERT INTO {queues} (queue, paused) VALUES ($1, $2) \
                 ON CONFLICT (queue) DO UPDATE SET paused = excluded.paused RETURNING paused) \
                 SELECT pg_notify($3, '0 ' || $1) FROM u WHERE NOT u.paused"
            ),
            add_queue: format!(
                "INSERT INTO {queues} (queue) VALUES ($1) ON CONFLICT (queue) DO NOTHING"
            ),
        }
    }
}

impl Sql {
    /// Moves the queue's counter changes into its slot `slot`.
    pub(in crate::backend::postgres) async fn fold(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        slot: i16,
    ) -> Result<(), Error> {
        db(sqlx::query(&self.queue.fold)
            .bind(queue)
            .bind(slot)
            .execute(ex)
            .await)?;
        Ok(())
    }

    /// (pending, running, dead, paused, next due).
    pub(in crate::backend::postgres) async fn counts(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
    ) -> Result<(u64, u64, u64, bool, Option<u64>), Error> {
        let r = db(sqlx::query(&self.queue.counts)
            .bind(queue)
            .fetch_one(ex)
            .await)?;
        let count = |i| -> Result<u64, Error> { Ok(db(r.try_get::<i64, _>(i))?.max(0) as u64) };
        Ok((
            count(0)?,
            count(1)?,
            count(2)?,
            db(r.try_get(3))?,
            db(r.try_get::<Option<i64>, _>(4))?.map(dec),
        ))
    }

    pub(in crate::backend::postgres) async fn list(
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
        let text = &self.queue.list[base + usize::from(after.is_some())];
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

    /// Sets the paused flag; an unpause wakes idle consumers on `channel`.
    pub(in crate::backend::postgres) async fn set_paused(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        paused: bool,
        channel: &str,
    ) -> Result<(), Error> {
        db(sqlx::query(&self.queue.set_paused)
            .bind(queue)
            .bind(paused)
            .bind(channel)
            .fetch_all(ex)
            .await)?;
        Ok(())
    }

    pub(in crate::backend::postgres) async fn add_queue(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
    ) -> Result<(), Error> {
        db(sqlx::query(&self.queue.add_queue)
            .bind(queue)
            .execute(ex)
            .await)?;
        Ok(())
    }
}
