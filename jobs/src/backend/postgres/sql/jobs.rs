//! The statements on one job by id: `schedule` (many at once), `cancel`, `reschedule`,
//! `get`.

use sqlx::postgres::PgExecutor;
use sqlx::Row;

use super::{attempt, db, dec, not_head, run_at, when, Sql, NOW};
use crate::backend::postgres::names::Names;
use crate::core::error::Error;
use crate::core::job::{JobInfo, JobState, When};

/// One job to schedule: id, when, payload.
pub(in crate::backend::postgres) type NewJob = (String, When, Vec<u8>);

/// The SQL text of these statements for one schema.
#[derive(Debug)]
pub(super) struct JobsSql {
    schedule: String,
    cancel: String,
    reschedule: String,
    get: String,
}

impl JobsSql {
    pub(super) fn new(n: &Names) -> JobsSql {
        let Names {
            jobs, dead, series, ..
        } = n;
        JobsSql {
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
                not_head(series, "$2")
            ),
            // Machine::reschedule.
            reschedule: format!(
                "WITH now AS (SELECT {NOW} AS t) \
                 UPDATE {jobs} SET run_at = {} WHERE queue = $1 AND id = $2 AND token IS NULL \
                 AND {} RETURNING run_at",
                run_at("$3", "$4"),
                not_head(series, "$2")
            ),
            get: format!(
                "SELECT run_at, attempt, token IS NOT NULL AS running, false AS dead, last_error, payload \
                 FROM {jobs} WHERE queue = $1 AND id = $2 \
                 UNION ALL SELECT run_at, attempt, false, true, last_error, payload \
                 FROM {dead} WHERE queue = $1 AND id = $2 LIMIT 1"
            ),
        }
    }
}

impl Sql {
    /// Creates the jobs that do not exist (as pending, dead or running), in order: the
    /// created ones' ids and run_ats.
    pub(in crate::backend::postgres) async fn schedule(
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
        let rows = db(sqlx::query(&self.jobs.schedule)
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

    pub(in crate::backend::postgres) async fn cancel(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        id: &str,
    ) -> Result<bool, Error> {
        let row = db(sqlx::query(&self.jobs.cancel)
            .bind(queue)
            .bind(id)
            .fetch_optional(ex)
            .await)?;
        Ok(row.is_some())
    }

    pub(in crate::backend::postgres) async fn reschedule(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        id: &str,
        w: When,
    ) -> Result<Option<u64>, Error> {
        let (at, after) = when(w);
        let row = db(sqlx::query(&self.jobs.reschedule)
            .bind(queue)
            .bind(id)
            .bind(at)
            .bind(after)
            .fetch_optional(ex)
            .await)?;
        row.map(|r| Ok(dec(db(r.try_get(0))?))).transpose()
    }

    pub(in crate::backend::postgres) async fn get(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        id: &str,
    ) -> Result<Option<JobInfo>, Error> {
        let row = db(sqlx::query(&self.jobs.get)
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
}
