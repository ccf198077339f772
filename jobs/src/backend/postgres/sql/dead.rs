//! The statements on dead jobs: `remove_dead` (one by id), `purge_dead` (the oldest up to a
//! limit), `revive` (one by id), `revive_dead` (the oldest up to a limit).

use sqlx::postgres::PgExecutor;
use sqlx::Row;

use super::{db, dec, run_at, spec_cols, when, Sql, NOW};
use crate::backend::postgres::names::Names;
use crate::core::error::Error;
use crate::core::job::When;
/// The SQL text of these statements for one schema.
#[derive(Debug)]
pub(super) struct DeadSql {
    remove_dead: String,
    purge_dead: String,
    revive: String,
    revive_dead: String,
}

impl DeadSql {
    pub(super) fn new(n: &Names) -> DeadSql {
        let Names { jobs, dead, .. } = n;
        let spec = spec_cols("");
        DeadSql {
            remove_dead: format!("DELETE FROM {dead} WHERE queue = $1 AND id = $2 RETURNING 1"),
            // The ids first, in a CTE computed once: a `LIMIT … FOR UPDATE SKIP LOCKED`
            // subquery inside `IN` may be run again per outer row by a nested-loop plan, each
            // run skipping the rows the last one deleted, and delete more than $2 (as the
            // claim's tombstone sweep, `claim.rs`).
            purge_dead: format!(
                "WITH ids AS MATERIALIZED (SELECT id FROM {dead} \
                 WHERE queue = $1 ORDER BY died_at, id LIMIT $2 FOR UPDATE SKIP LOCKED) \
                 DELETE FROM {dead} WHERE queue = $1 AND id IN (SELECT id FROM ids)"
            ),
            // Machine::revive: pending again, attempts from 0, the last error and the spec
            // kept.
            revive: format!(
                "WITH now AS (SELECT {NOW} AS t), \
                 d AS (DELETE FROM {dead} WHERE queue = $1 AND id = $2 \
                   RETURNING queue, id, last_error, payload, {spec}) \
                 INSERT INTO {jobs} (queue, id, run_at, attempt, last_error, payload, {spec}) \
                 SELECT queue, id, {}, 0, last_error, payload, {spec} FROM d RETURNING run_at",
                run_at("$3", "$4")
            ),
            revive_dead: format!(
                "WITH now AS (SELECT {NOW} AS t), \
                 ids AS MATERIALIZED (SELECT id FROM {dead} \
                   WHERE queue = $1 ORDER BY died_at, id LIMIT $2 FOR UPDATE SKIP LOCKED), \
                 d AS (DELETE FROM {dead} WHERE queue = $1 AND id IN (SELECT id FROM ids) \
                   RETURNING queue, id, last_error, payload, {spec}), \
                 ins AS (INSERT INTO {jobs} (queue, id, run_at, attempt, last_error, payload, {spec}) \
                   SELECT queue, id, {}, 0, last_error, payload, {spec} FROM d RETURNING run_at) \
                 SELECT count(*)::bigint, min(run_at) FROM ins",
                run_at("$3", "$4")
            ),
        }
    }
}

impl Sql {
    pub(in crate::backend::postgres) async fn remove_dead(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        id: &str,
    ) -> Result<bool, Error> {
        let row = db(sqlx::query(&self.dead.remove_dead)
            .bind(queue)
            .bind(id)
            .fetch_optional(ex)
            .await)?;
        Ok(row.is_some())
    }

    pub(in crate::backend::postgres) async fn purge_dead(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        limit: usize,
    ) -> Result<u64, Error> {
        let done = db(sqlx::query(&self.dead.purge_dead)
            .bind(queue)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .execute(ex)
            .await)?;
        Ok(done.rows_affected())
    }

    pub(in crate::backend::postgres) async fn revive(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        id: &str,
        w: When,
    ) -> Result<Option<u64>, Error> {
        super::move_job(ex, &self.dead.revive, queue, id, w).await
    }

    pub(in crate::backend::postgres) async fn revive_dead(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        limit: usize,
        w: When,
    ) -> Result<(u64, Option<u64>), Error> {
        let (at, after) = when(w);
        let r = db(sqlx::query(&self.dead.revive_dead)
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
}
