//! The statements on a whole queue: `fold` (its count deltas into a slot row), `counts`,
//! `list` (a page of one state), `set_paused`, `add_queue`.

use sqlx::postgres::PgExecutor;
use sqlx::Row;

use super::{attempt, db, dec, enc, spec, spec_cols, Kinds, Sql};
use crate::backend::postgres::names::Names;
use crate::core::error::Error;
use crate::core::job::{JobInfo, JobState, KindCounts};

/// What `counts` reads: (pending, running, dead) in all, whether the queue is paused, the
/// next due time, and the counts per kind.
pub(in crate::backend::postgres) type CountRows = (
    (u64, u64, u64),
    bool,
    Option<u64>,
    Vec<(String, KindCounts)>,
);
/// The SQL text of these statements for one schema.
#[derive(Debug)]
pub(super) struct QueueSql {
    fold: String,
    counts: String,
    /// By state (pending, running, dead), then without and with a position, then by
    /// [`Kinds`]: `[state * 6 + after * 3 + kinds]`.
    list: Vec<String>,
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
        let spec = spec_cols("");
        let columns = format!(
            "id, run_at, attempt, last_error, CASE WHEN $5 THEN payload ELSE ''::bytea END AS payload, {spec}"
        );
        let mut list = Vec::with_capacity(18);
        for (table, at, filter, cmp, order) in [
            (
                jobs,
                "run_at",
                "AND token IS NULL AND NOT waiting",
                ">",
                "ASC",
            ),
            (jobs, "lease_until", "AND token IS NOT NULL", ">", "ASC"),
            (dead, "died_at", "", "<", "DESC"),
        ] {
            for after in [false, true] {
                for kinds in Kinds::EACH {
                    let position = if after {
                        format!("AND ({at}, id) {cmp} ($2, $3)")
                    } else {
                        String::new()
                    };
                    let kind = kinds.rows("");
                    list.push(if at == "run_at" {
                        // Pending jobs: each priority level's page, merged (the due indexes
                        // are by priority first): O(levels × limit), never another kind's
                        // rows with a named kind; and the page of the jobs waiting for their
                        // gate (`jobs_waiting`, read past other kinds' waiting jobs with a
                        // kind), which are pending too.
                        format!(
                            "WITH RECURSIVE {levels} SELECT x.* FROM (SELECT y.* FROM levels l CROSS JOIN LATERAL (\
                             SELECT run_at AS at, {columns} FROM {table} \
                             WHERE queue = $1 {filter} {kind} AND priority = l.lvl {position} \
                             ORDER BY run_at, id LIMIT $4) y WHERE l.lvl IS NOT NULL \
                             UNION ALL (SELECT run_at AS at, {columns} FROM {table} \
                             WHERE queue = $1 AND waiting {kind} {position} ORDER BY run_at, id LIMIT $4)) x \
                             ORDER BY x.at, x.id LIMIT $4",
                            levels = super::levels(jobs, kinds),
                        )
                    } else {
                        // Running and dead jobs: one index range, read past other kinds'
                        // rows with a kind.
                        format!(
                            "SELECT {at} AS at, {columns} FROM {table} \
                             WHERE queue = $1 {filter} {kind} {position} \
                             ORDER BY {at} {order}, id {order} LIMIT $4"
                        )
                    });
                }
            }
        }
        QueueSql {
            fold: format!(
                "WITH d AS (DELETE FROM {deltas} WHERE queue = $1 RETURNING kind, pending, running, dead) \
                 INSERT INTO {counts} AS c (queue, kind, slot, pending, running, dead) \
                 SELECT $1, kind, $2, sum(pending), sum(running), sum(dead) FROM d GROUP BY kind \
                 ON CONFLICT (queue, kind, slot) DO UPDATE SET pending = c.pending + excluded.pending, \
                 running = c.running + excluded.running, dead = c.dead + excluded.dead"
            ),
            // Per kind: its slot rows and unfolded deltas, summed. The next due time is the
            // earliest of each priority level's head.
            counts: format!(
                "WITH RECURSIVE {levels}, \
                 k AS (SELECT kind, sum(pending)::bigint AS p, sum(running)::bigint AS r, sum(dead)::bigint AS d \
                   FROM (SELECT kind, pending, running, dead FROM {counts} WHERE queue = $1 \
                   UNION ALL SELECT kind, pending, running, dead FROM {deltas} WHERE queue = $1) AS c \
                   GROUP BY kind) \
                 SELECT EXISTS (SELECT 1 FROM {queues} WHERE queue = $1 AND paused), \
                 (SELECT min(h.t) FROM levels l CROSS JOIN LATERAL (SELECT run_at AS t FROM {jobs} \
                   WHERE queue = $1 AND token IS NULL AND NOT waiting AND priority = l.lvl ORDER BY run_at, id LIMIT 1) h \
                   WHERE l.lvl IS NOT NULL), \
                 array_agg(kind ORDER BY kind), array_agg(p ORDER BY kind), array_agg(r ORDER BY kind), \
                 array_agg(d ORDER BY kind) FROM k",
                levels = super::levels(jobs, Kinds::All),
            ),
            list,
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

    /// The counts in all and per kind, the paused flag and the next due time.
    pub(in crate::backend::postgres) async fn counts(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
    ) -> Result<CountRows, Error> {
        let r = db(sqlx::query(&self.queue.counts)
            .bind(queue)
            .fetch_one(ex)
            .await)?;
        let kinds: Vec<String> = db(r.try_get::<Option<Vec<String>>, _>(2))?.unwrap_or_default();
        let column = |i| -> Result<Vec<u64>, Error> {
            Ok(db(r.try_get::<Option<Vec<Option<i64>>>, _>(i))?
                .unwrap_or_default()
                .into_iter()
                .map(|c| c.unwrap_or(0).max(0) as u64)
                .collect())
        };
        let (p, q, d) = (column(3)?, column(4)?, column(5)?);
        let mut total = (0, 0, 0);
        let mut per_kind = Vec::with_capacity(kinds.len());
        for (i, kind) in kinds.into_iter().enumerate() {
            let c = KindCounts::new(p[i], q[i], d[i]);
            total = (total.0 + c.pending, total.1 + c.running, total.2 + c.dead);
            per_kind.push((kind, c));
        }
        Ok((
            total,
            db(r.try_get(0))?,
            db(r.try_get::<Option<i64>, _>(1))?.map(dec),
            per_kind,
        ))
    }

    /// A page of `state`, of the kind `kind` only if given.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::backend::postgres) async fn list(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        state: JobState,
        after: Option<(u64, String)>,
        limit: usize,
        payloads: bool,
        kind: Option<&str>,
    ) -> Result<Vec<(u64, JobInfo)>, Error> {
        let base = match state {
            JobState::Pending => 0,
            JobState::Running => 6,
            JobState::Dead => 12,
        };
        let text =
            &self.queue.list[base + 3 * usize::from(after.is_some()) + Kinds::of(kind) as usize];
        let (at, id) = after.map_or((0, String::new()), |(at, id)| (enc(at), id));
        let query = sqlx::query(text)
            .bind(queue)
            .bind(at)
            .bind(id)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .bind(payloads);
        let query = Kinds::bind(kind, query);
        let rows = db(query.fetch_all(ex).await)?;
        rows.iter()
            .map(|r| {
                let info = JobInfo::new(
                    db(r.try_get(1))?,
                    state,
                    dec(db(r.try_get(2))?),
                    attempt(r, 3)?,
                    db(r.try_get(4))?,
                    db(r.try_get(5))?,
                    spec(r, 6, &self.plain)?,
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
