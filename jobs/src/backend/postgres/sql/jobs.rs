//! The statements on one job by id: `schedule` (many at once), `import` (a copy's jobs),
//! `cancel`, `reschedule`, `get`.
//!
//! A schedule is, per round of distinct ids (a batch's repeated id goes to a later round,
//! so it meets what the earlier one left), two statements in the caller's transaction: the
//! schedule, then the lookup of what it created under an id that is dead or held off (and,
//! rarely, their removal). The schedule answers each job by its dedup mode: held off (a
//! live tombstone in `held`: nothing stored; an expired one is deleted), created, replaced
//! (a Replace's `ON CONFLICT DO UPDATE` of a pending row that is no series occurrence,
//! told from an insert by `xmax = 0`), or exists (no row answered). Its `NOT EXISTS` tests
//! of `dead` and `held` read the statement's snapshot: when its `ON CONFLICT` waited on a
//! claim that kills the job (the `jobs` row deleted, a `dead` row inserted) or on an ack
//! that leaves a tombstone (the row deleted, a `held` row inserted), that commit lets the
//! insert through while the new `dead` or `held` row stays invisible to it. The second
//! statement's fresh snapshot (READ COMMITTED) sees it; its delete's trigger delta cancels
//! the insert's, so the counts stay exact. A replaced row was pending and locked by the
//! update: neither a kill nor an ack can have passed it. Its `NOT EXISTS` of a series head
//! reads the snapshot too: a Replace that waited on the insert of a row its snapshot did
//! not see, by a series placing it as its occurrence, gives it back to the series (a third
//! statement, sent only then, for an id with an `@`) and answers Exists.
//!
//! An import writes every job as pending first, through the same insert and the same check
//! (an id held off at the server's now is skipped): the `jobs` key is what orders it
//! against a schedule or a kill of the same id. The dead ones then move to `dead` in the
//! same transaction (their `jobs` rows were never visible to anyone), so an id is never in
//! both tables, and the trigger deltas (pending in, pending out, dead in) leave the counts
//! exact. Tombstones are never imported.

use std::time::Duration;

use sqlx::postgres::{PgConnection, PgExecutor, PgPool};
use sqlx::Row;

use super::{
    attempt, db, dec, enc, has_next, next_spec_cols, not_head, run_at, spec, spec_cols, when,
    SpecArrays, Sql, NOW,
};
use crate::backend::postgres::names::Names;
use crate::backend::{Import, NewJob};
use crate::core::error::Error;
use crate::core::job::{system_time, JobInfo, JobState, Scheduled, When};
use crate::core::kind::Dedup;
use crate::core::series::occurrence_series;

/// The SQL text of these statements for one schema.
#[derive(Debug)]
pub(super) struct JobsSql {
    schedule: String,
    import: String,
    bury: String,
    died: String,
    undead: String,
    unplace: String,
    cancel: String,
    reschedule: String,
    get: String,
}

impl JobsSql {
    pub(super) fn new(n: &Names) -> JobsSql {
        let Names {
            jobs,
            dead,
            series,
            held,
            gates,
            ..
        } = n;
        JobsSql {
            // Every option of the spec is written: a default changed later does not change
            // the job (NULL is for rows written before version 3).
            //
            // Each job as its dedup mode says (`embedded/store/jobs.rs` `schedule`): an id
            // held off at now answers its tombstone's end and stores nothing (an expired
            // tombstone is deleted); a free id is created; a Replace ($6) of a pending job
            // that is not a series' occurrence takes the new run_at, payload and spec, its
            // attempt and last error kept (an update: the triggers move its counts and wake
            // the consumers if it became due earlier). The ids are distinct (`schedule_raw`
            // sends repeated ones in later rounds). One insert, in id order, whatever each
            // job's mode (its `replace` read back from the input): the rows are locked in id
            // order, as by any other schedule, so batches mixing modes on the same ids
            // cannot deadlock.
            //
            // Only the ids absent from the statement's snapshot, or pending there for a
            // Replace, are sent to the insert: `ON CONFLICT DO UPDATE` locks the row it meets
            // even when its WHERE is false, and an id seen existing (Keep) or running
            // (Replace) answers Exists without touching it, so a schedule in a long
            // transaction never holds a running job's row against its worker's ack, retry or
            // extension. The row of an id created or claimed by another transaction between
            // the snapshot and the insert is still locked, and left as it is (the token
            // check), until this transaction ends.
            //
            // An AllowWhileRunning ($18, false for a series' occurrence) of a job running
            // without a successor stores it as the successor, in the `next_` columns of the
            // job's row (`embedded/store/jobs.rs` `schedule`): the same insert's `ON CONFLICT
            // DO UPDATE`, so the running row is locked in id order with the others, and only
            // when the statement's snapshot saw it running without one (else Exists without
            // a lock); its WHERE rechecks that under the lock, against the row's latest
            // version. The update sets only the `next_` columns of a running row and only
            // the job's own of a pending one (a Replace), whose successor, if a retry left
            // it one, it drops: the newest schedule wins. The lock is held until the
            // transaction ends: in `schedule_in`, the job's worker's ack waits for the
            // caller's commit, which it must (the successor may yet be rolled back).
            //
            // A gated job enters its gate waiting (its rebalance, in the insert's or the
            // update's trigger, may admit it at once); `gl` locks the gates of the jobs
            // written, and the old gate of a pending job replaced (as the snapshot saw it:
            // a Replace may change the key), in (kind, key) order, after their rows, so the
            // two triggers (insert, update) take no gate out of order
            // (`migrations/0003_kinds.sql`, `gates`).
            //
            // Answers: 0 created, 1 replaced, 2 held off (with the tombstone's end), 3
            // replaced a row this statement's snapshot did not see (a series may have placed
            // it as an occurrence meanwhile: `schedule_round` checks it), 4 a successor
            // stored (with its run_at); an id not answered exists.
            schedule: format!(
                "WITH now AS (SELECT {NOW} AS t), \
                 input AS (SELECT i.id, i.ord, i.replace, i.allow, {run_at}::bigint AS run_at, i.payload, {spec_i} \
                   FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bytea[], $6::boolean[], {spec_types}, \
                   $18::boolean[]) WITH ORDINALITY AS i(id, at, after, payload, replace, {spec}, allow, ord)), \
                 hold AS (SELECT h.id, h.until FROM {held} h WHERE h.queue = $1 \
                   AND h.id IN (SELECT id FROM input) AND h.until > (SELECT t FROM now)), \
                 stale AS (DELETE FROM {held} h WHERE h.queue = $1 AND h.id IN (SELECT id FROM input) \
                   AND h.until <= (SELECT t FROM now) RETURNING 1), \
                 free AS (SELECT * FROM input \
                   WHERE NOT EXISTS (SELECT 1 FROM {dead} d WHERE d.queue = $1 AND d.id = input.id) \
                   AND NOT EXISTS (SELECT 1 FROM hold WHERE hold.id = input.id)), \
                 seen AS (SELECT j.id, j.token IS NOT NULL AS running, {seen_next} AS has_next, \
                   j.kind, j.key, {gated_j} AS gated FROM {jobs} j \
                   WHERE j.queue = $1 AND j.id IN (SELECT id FROM input)), \
                 sent AS (SELECT * FROM free WHERE NOT EXISTS (SELECT 1 FROM seen \
                   WHERE seen.id = free.id AND CASE WHEN seen.running THEN NOT free.allow OR seen.has_next \
                   ELSE NOT free.replace END)), \
                 ins AS (INSERT INTO {jobs} AS j (queue, id, run_at, payload, {spec}, waiting) \
                   SELECT $1, id, run_at, payload, {spec}, {gated} FROM sent ORDER BY id \
                   ON CONFLICT (queue, id) DO UPDATE SET {set_spec} \
                   WHERE j.token IS NULL AND (SELECT f.replace FROM sent f WHERE f.id = EXCLUDED.id) \
                   AND {head} \
                   OR j.token IS NOT NULL AND NOT {seen_next} AND (SELECT f.allow FROM sent f WHERE f.id = EXCLUDED.id) \
                   RETURNING j.id, CASE WHEN j.token IS NULL THEN j.run_at ELSE j.next_run_at END AS run_at, \
                   j.xmax = 0 AS inserted, j.token IS NOT NULL AS successor, j.kind, j.key, \
                   j.token IS NULL AND {gated_j} AS gated), \
                 gl AS (SELECT 1 FROM {gates} g WHERE g.queue = $1 AND (g.kind, g.key) IN \
                   (SELECT kind, key FROM ins WHERE gated UNION ALL SELECT s.kind, s.key FROM seen s \
                   WHERE s.gated AND NOT s.running AND s.id IN (SELECT id FROM ins)) \
                   ORDER BY g.kind, g.key FOR UPDATE) \
                 SELECT id, run_at, CASE WHEN inserted THEN 0 WHEN successor THEN 4 \
                   WHEN EXISTS (SELECT 1 FROM seen WHERE seen.id = ins.id) THEN 1 ELSE 3 END AS outcome \
                   FROM ins \
                 UNION ALL SELECT id, until, 2 FROM hold \
                 UNION ALL SELECT NULL, NULL, 5 FROM (SELECT count(*) AS n FROM gl) c WHERE c.n < 0",
                run_at = run_at("i.at", "i.after"),
                spec = spec_cols(""),
                spec_i = spec_cols("i"),
                spec_types = spec_types(7),
                seen_next = has_next("j"),
                set_spec = conflict_sets(),
                gated = super::gated(""),
                gated_j = super::gated("j"),
                head = not_head(series, "j.id"),
            ),
            // Each job as given, pending, where its id is free (see the module docs).
            import: format!(
                "WITH input AS (SELECT i.* FROM unnest($2::text[], $3::bigint[], $4::integer[], \
                   $5::text[], $6::bytea[], {spec_types}) \
                   WITH ORDINALITY AS i(id, run_at, attempt, last_error, payload, {spec}, ord)), \
                 ins AS (INSERT INTO {jobs} (queue, id, run_at, attempt, last_error, payload, {spec}) \
                   SELECT $1, input.id, input.run_at, input.attempt, input.last_error, input.payload, \
                   {spec_input} FROM input \
                   WHERE NOT EXISTS (SELECT 1 FROM {dead} d WHERE d.queue = $1 AND d.id = input.id) \
                   AND NOT EXISTS (SELECT 1 FROM {held} h WHERE h.queue = $1 AND h.id = input.id \
                     AND h.until > {NOW}) \
                   ORDER BY input.id, input.ord \
                   ON CONFLICT (queue, id) DO NOTHING RETURNING id) \
                 SELECT id FROM ins",
                spec = spec_cols(""),
                spec_input = spec_cols("input"),
                spec_types = spec_types(7),
            ),
            // The imported dead jobs ($2), pending since `import` in this transaction, moved
            // to `dead` with their death times ($3).
            bury: format!(
                "WITH input AS (SELECT * FROM unnest($2::text[], $3::bigint[]) AS i(id, died_at)), \
                 moved AS (DELETE FROM {jobs} j USING input \
                   WHERE j.queue = $1 AND j.id = input.id AND j.token IS NULL \
                   RETURNING j.id, j.run_at, j.attempt, input.died_at, j.last_error, j.payload, {spec_j}) \
                 INSERT INTO {dead} (queue, id, run_at, attempt, died_at, last_error, payload, {spec}) \
                 SELECT $1, id, run_at, attempt, died_at, last_error, payload, {spec} FROM moved",
                spec = spec_cols(""),
                spec_j = spec_cols("j"),
            ),
            // Of the jobs just inserted ($2), those whose id died meanwhile (see the module
            // docs); usually none, and then the delete below is not sent.
            // The same for the ids held off since (an ack committed while the insert waited
            // on its row), with the tombstone's end.
            died: format!(
                "SELECT id, NULL::bigint AS until FROM {dead} WHERE queue = $1 AND id = ANY($2::text[]) \
                 UNION ALL SELECT id, until FROM {held} WHERE queue = $1 AND id = ANY($2::text[]) \
                 AND until > {NOW}"
            ),
            // In the caller's transaction the rows just inserted are still pending: nobody
            // else sees them yet.
            undead: format!(
                "DELETE FROM {jobs} WHERE queue = $1 AND id = ANY($2::text[]) AND token IS NULL \
                 RETURNING id"
            ),
            // Of the jobs $2 a Replace just updated, unseen by its statement's snapshot, those
            // a series placed as its occurrence while the Replace waited on their insert (the
            // statement's `NOT EXISTS` on `series` read the snapshot, without the new head):
            // given back what the series wrote (`series.rs` `place_head`: its time and
            // payload, the plain spec), as if the series had come second. The Replace holds
            // their rows, so the series cannot have moved on.
            unplace: format!(
                "UPDATE {jobs} j SET run_at = s.head, payload = s.payload, {plain} \
                 FROM {series} s WHERE j.queue = $1 AND j.id = ANY($2::text[]) AND j.token IS NULL \
                 AND s.queue = $1 AND s.name = split_part(j.id, '@', 1) AND s.head_id = j.id \
                 RETURNING j.id",
                // The plain spec has no key: the job waits for no gate.
                plain = spec_cols("")
                    .split(", ")
                    .chain(["waiting"])
                    .map(|c| format!("{c} = DEFAULT"))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            // Machine::cancel (`embedded/store/jobs.rs` `cancel`): a pending job, with its
            // successor if a retry left it one, but not a series' pending occurrence; or the
            // successor of a running job, which runs on. `lk` locks the row if its snapshot
            // version is one of those and answers its latest version (a claim or a retry may
            // have committed meanwhile), which alone says which of the two it is: the delete
            // and the update test only `lk`, never the row's snapshot version. A running job
            // without a successor is not locked (false, as before).
            //
            // An ack that hands over deletes the row and inserts its successor's: if it
            // commits while `lk` waits, the locked version is gone and the new row is not
            // in this statement's snapshot, so `lk` finds nothing. `seen` (the snapshot's
            // version was one to cancel) then answers false, and the caller runs the
            // statement once more, under a new snapshot (`Sql::cancel`).
            cancel: format!(
                "WITH lk AS (SELECT j.token IS NULL AS pending FROM {jobs} j \
                   WHERE j.queue = $1 AND j.id = $2 AND (j.token IS NULL AND {head} OR {next}) FOR UPDATE), \
                 seen AS (SELECT 1 FROM {jobs} j \
                   WHERE j.queue = $1 AND j.id = $2 AND (j.token IS NULL AND {head} OR {next})), \
                 del AS (DELETE FROM {jobs} j USING lk WHERE j.queue = $1 AND j.id = $2 AND lk.pending \
                   RETURNING 1), \
                 dropped AS (UPDATE {jobs} j SET {none} FROM lk WHERE j.queue = $1 AND j.id = $2 \
                   AND NOT lk.pending RETURNING 1) \
                 SELECT true FROM del UNION ALL SELECT true FROM dropped \
                 UNION ALL SELECT false FROM seen WHERE NOT EXISTS (SELECT 1 FROM lk)",
                head = not_head(series, "$2"),
                next = has_next("j"),
                none = no_successor(),
            ),
            // Machine::reschedule.
            reschedule: format!(
                "WITH now AS (SELECT {NOW} AS t) \
                 UPDATE {jobs} SET run_at = {} WHERE queue = $1 AND id = $2 AND token IS NULL \
                 AND {} RETURNING run_at",
                run_at("$3", "$4"),
                not_head(series, "$2")
            ),
            // With the successor's run_at, if one waits (a dead job never has one).
            get: format!(
                "SELECT run_at, attempt, token IS NOT NULL AS running, false AS dead, last_error, payload, \
                 {spec}, next_run_at FROM {jobs} WHERE queue = $1 AND id = $2 \
                 UNION ALL SELECT run_at, attempt, false, true, last_error, payload, {spec}, NULL \
                 FROM {dead} WHERE queue = $1 AND id = $2 LIMIT 1",
                spec = spec_cols(""),
            ),
        }
    }
}

impl Sql {
    /// Schedules the jobs in order, each as its dedup mode says: its outcome and run_at (for
    /// `HeldOff`, the tombstone's end; 0 for `Exists`). At least two statements on `conn`:
    /// run them in a transaction (the caller's, or [`Sql::schedule_tx`]'s).
    pub(in crate::backend::postgres) async fn schedule(
        &self,
        conn: &mut PgConnection,
        queue: &str,
        jobs: &[NewJob],
    ) -> Result<Vec<(Scheduled, u64)>, Error> {
        db(self.schedule_raw(conn, queue, jobs).await)
    }

    /// [`Sql::schedule`] in a transaction of its own on a connection of `pool`; with a
    /// `lock_timeout`, waiting longer on another transaction's row fails (SQLSTATE 55P03).
    /// The raw error, so the caller can tell a contended lock from a failure.
    pub(in crate::backend::postgres) async fn schedule_tx(
        &self,
        pool: &PgPool,
        queue: &str,
        jobs: &[NewJob],
        lock_timeout: Option<Duration>,
    ) -> Result<Vec<(Scheduled, u64)>, sqlx::Error> {
        // READ COMMITTED whatever the server's default: the second statement must see the
        // deaths committed while the first one waited.
        let mut tx = pool.begin_with(super::begin(lock_timeout)).await?;
        let answers = self.schedule_raw(&mut tx, queue, jobs).await?;
        tx.commit().await?;
        Ok(answers)
    }

    /// The schedule in rounds of distinct ids: the n-th job of an id goes in round n, so a
    /// later job of an id meets what an earlier one left (one statement cannot change a
    /// row twice). Each round is the statement, then the check of what it created.
    async fn schedule_raw(
        &self,
        conn: &mut PgConnection,
        queue: &str,
        jobs: &[NewJob],
    ) -> Result<Vec<(Scheduled, u64)>, sqlx::Error> {
        let mut answers = vec![(Scheduled::Exists, 0); jobs.len()];
        for round in rounds(jobs.iter().map(|j| j.id.as_str())) {
            self.schedule_round(conn, queue, jobs, &round, &mut answers)
                .await?;
        }
        Ok(answers)
    }

    /// One statement for the jobs `round` (distinct ids), answered in `answers`.
    async fn schedule_round(
        &self,
        conn: &mut PgConnection,
        queue: &str,
        jobs: &[NewJob],
        round: &[usize],
        answers: &mut [(Scheduled, u64)],
    ) -> Result<(), sqlx::Error> {
        let n = round.len();
        let (mut ids, mut ats, mut afters, mut payloads, mut replaces, mut allows) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let mut specs = SpecArrays::default();
        let mut at_id = std::collections::HashMap::with_capacity(n);
        for &i in round {
            let job = &jobs[i];
            let (at, after) = when(job.when);
            at_id.insert(job.id.as_str(), i);
            ids.push(job.id.as_str());
            ats.push(at);
            afters.push(after);
            payloads.push(job.payload.as_slice());
            replaces.push(job.dedup == Dedup::Replace);
            // A series' occurrence never gets a successor: Exists, as with Keep.
            allows.push(
                job.dedup == Dedup::AllowWhileRunning && occurrence_series(&job.id).is_none(),
            );
            specs.push(&job.spec);
        }
        let query = sqlx::query(&self.jobs.schedule)
            .bind(queue)
            .bind(ids)
            .bind(ats)
            .bind(afters)
            .bind(payloads)
            .bind(replaces);
        let rows = specs.bind(query).bind(allows).fetch_all(&mut *conn).await?;
        let (mut created, mut unseen) = (Vec::new(), Vec::new());
        for r in &rows {
            let id: String = r.try_get(0)?;
            let at = dec(r.try_get(1)?);
            let outcome = match r.try_get::<i32, _>(2)? {
                0 => Scheduled::Created,
                1 | 3 => Scheduled::Replaced,
                4 => Scheduled::Successor,
                _ => Scheduled::HeldOff {
                    until: system_time(at),
                },
            };
            if outcome == Scheduled::Created {
                created.push(id.clone());
            }
            // Only an id with an `@` can be a series' occurrence.
            if r.try_get::<i32, _>(2)? == 3 && id.contains('@') {
                unseen.push(id.clone());
            }
            if let Some(&i) = at_id.get(id.as_str()) {
                answers[i] = (outcome, at);
            }
        }
        if !unseen.is_empty() {
            let placed = sqlx::query(&self.jobs.unplace)
                .bind(queue)
                .bind(&unseen)
                .fetch_all(&mut *conn)
                .await?;
            for r in &placed {
                if let Some(&i) = at_id.get(r.try_get::<&str, _>(0)?) {
                    answers[i] = (Scheduled::Exists, 0);
                }
            }
        }
        let undone = self
            .undo(conn, queue, created.iter().map(String::as_str).collect())
            .await?;
        for (id, held) in undone {
            if let Some(&i) = at_id.get(id.as_str()) {
                answers[i] = match held {
                    Some(until) => (
                        Scheduled::HeldOff {
                            until: system_time(until),
                        },
                        until,
                    ),
                    None => (Scheduled::Exists, 0),
                };
            }
        }
        Ok(())
    }

    /// Of the jobs `ids` just inserted as pending in this transaction, deletes those whose
    /// id is dead or held off (the module docs say how that happens) and returns them, with
    /// the tombstone's end for a held one; usually none, and then the delete is not sent.
    async fn undo(
        &self,
        conn: &mut PgConnection,
        queue: &str,
        ids: Vec<&str>,
    ) -> Result<std::collections::HashMap<String, Option<u64>>, sqlx::Error> {
        if ids.is_empty() {
            return Ok(Default::default());
        }
        let found = sqlx::query(&self.jobs.died)
            .bind(queue)
            .bind(ids)
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(|r| {
                Ok((
                    r.try_get::<String, _>(0)?,
                    r.try_get::<Option<i64>, _>(1)?.map(dec),
                ))
            })
            .collect::<Result<std::collections::HashMap<_, _>, sqlx::Error>>()?;
        if found.is_empty() {
            return Ok(found);
        }
        let ids: Vec<&str> = found.keys().map(String::as_str).collect();
        let deleted = sqlx::query(&self.jobs.undead)
            .bind(queue)
            .bind(ids)
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(|r| r.try_get::<String, _>(0))
            .collect::<Result<std::collections::HashSet<_>, _>>()?;
        Ok(found
            .into_iter()
            .filter(|(id, _)| deleted.contains(id))
            .collect())
    }

    /// Writes each job as given unless its id exists, in one transaction of its own on a
    /// connection of `pool` (see the module docs): whether it wrote, in order (an id twice
    /// is written once, the first time).
    pub(in crate::backend::postgres) async fn import(
        &self,
        pool: &PgPool,
        queue: &str,
        jobs: &[Import],
    ) -> Result<Vec<bool>, Error> {
        let n = jobs.len();
        let (mut ids, mut run_ats, mut attempts, mut errors, mut payloads) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let mut specs = SpecArrays::default();
        for job in jobs {
            specs.push(&job.spec);
            ids.push(job.id.as_str());
            run_ats.push(enc(job.run_at));
            attempts.push(i32::try_from(job.attempt).unwrap_or(i32::MAX));
            // PostgreSQL's text refuses NUL.
            errors.push(job.last_error.as_ref().map(|e| e.replace('\0', "\u{FFFD}")));
            payloads.push(job.payload.as_slice());
        }
        let run = async {
            // READ COMMITTED whatever the server's default: the check after the insert must
            // see the deaths committed while it waited (the module docs).
            let mut tx = pool
                .begin_with("BEGIN ISOLATION LEVEL READ COMMITTED")
                .await?;
            let query = sqlx::query(&self.jobs.import)
                .bind(queue)
                .bind(&ids)
                .bind(run_ats)
                .bind(attempts)
                .bind(errors)
                .bind(payloads);
            let inserted = specs
                .bind(query)
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(|r| r.try_get::<String, _>(0))
                .collect::<Result<std::collections::HashSet<_>, _>>()?;
            let undead = self
                .undo(
                    &mut tx,
                    queue,
                    inserted.iter().map(String::as_str).collect(),
                )
                .await?;
            let mut written = Vec::with_capacity(n);
            let mut seen = std::collections::HashSet::new();
            let (mut dead_ids, mut died_ats) = (Vec::new(), Vec::new());
            for job in jobs {
                let wrote = seen.insert(job.id.as_str())
                    && inserted.contains(&job.id)
                    && !undead.contains_key(&job.id);
                if let (true, Some(at)) = (wrote, job.died_at) {
                    dead_ids.push(job.id.as_str());
                    died_ats.push(enc(at));
                }
                written.push(wrote);
            }
            if !dead_ids.is_empty() {
                sqlx::query(&self.jobs.bury)
                    .bind(queue)
                    .bind(dead_ids)
                    .bind(died_ats)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok::<_, sqlx::Error>(written)
        };
        db(run.await)
    }

    /// Cancels `id`: a pending job (with its successor) or a running job's successor. A
    /// row changed under the statement's lock (an ack handing over, committed meanwhile)
    /// runs it once more, under a new snapshot (at READ COMMITTED).
    pub(in crate::backend::postgres) async fn cancel(
        &self,
        conn: &mut PgConnection,
        queue: &str,
        id: &str,
    ) -> Result<bool, Error> {
        let mut again = true;
        loop {
            let row = db(sqlx::query_scalar::<_, bool>(&self.jobs.cancel)
                .bind(queue)
                .bind(id)
                .fetch_optional(&mut *conn)
                .await)?;
            match row {
                Some(false) if again => again = false,
                row => return Ok(row == Some(true)),
            }
        }
    }

    pub(in crate::backend::postgres) async fn reschedule(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        id: &str,
        w: When,
    ) -> Result<Option<u64>, Error> {
        super::move_job(ex, &self.jobs.reschedule, queue, id, w).await
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
        Ok(Some(
            JobInfo::new(
                id.to_owned(),
                state,
                dec(db(r.try_get(0))?),
                attempt(&r, 1)?,
                db(r.try_get(4))?,
                db(r.try_get(5))?,
                spec(&r, 6, &self.plain)?,
            )
            .with_successor(db(r.try_get::<Option<i64>, _>(17))?.map(dec)),
        ))
    }
}

/// The positions of `ids` in rounds of distinct ids: the n-th of an id in round n, each
/// round in input order.
fn rounds<'a>(ids: impl Iterator<Item = &'a str>) -> Vec<Vec<usize>> {
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    let mut seen: std::collections::HashMap<&str, usize> = Default::default();
    for (i, id) in ids.enumerate() {
        let n = seen.entry(id).or_insert(0);
        if *n == rounds.len() {
            rounds.push(Vec::new());
        }
        rounds[*n].push(i);
        *n += 1;
    }
    rounds
}

/// The `SET` list of the schedule's `ON CONFLICT DO UPDATE`: on a pending row (a Replace),
/// the new run_at, payload and spec, and no successor; on a running row (a successor
/// stored), the new ones in the `next_` columns, the job's own left as they are.
fn conflict_sets() -> String {
    let cols = format!("run_at, payload, {}", spec_cols(""));
    let own = cols
        .split(", ")
        .map(|c| format!("{c} = CASE WHEN j.token IS NULL THEN EXCLUDED.{c} ELSE j.{c} END"));
    let next = cols
        .split(", ")
        .map(|c| format!("next_{c} = CASE WHEN j.token IS NULL THEN NULL ELSE EXCLUDED.{c} END"));
    // A gated job replaced enters its gate's waiting jobs (its rebalance may admit it).
    let waiting = "waiting = CASE WHEN j.token IS NULL THEN EXCLUDED.waiting ELSE j.waiting END";
    own.chain(next)
        .chain(std::iter::once(waiting.to_owned()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// SQL setting the successor columns of a job to none.
pub(super) fn no_successor() -> String {
    format!("next_run_at, next_payload, {}", next_spec_cols(""))
        .split(", ")
        .map(|c| format!("{c} = NULL"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The types of [`spec_cols`]' parameter arrays from `$first` on, for `unnest`.
fn spec_types(first: usize) -> String {
    [
        "text[]",
        "smallint[]",
        "integer[]",
        "bigint[]",
        "bigint[]",
        "bigint[]",
        "bigint[]",
        "text[]",
        "integer[]",
        "integer[]",
        "bigint[]",
    ]
    .iter()
    .enumerate()
    .map(|(i, t)| format!("${}::{t}", first + i))
    .collect::<Vec<_>>()
    .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_id_in_a_batch_goes_to_a_later_round() {
        let got = rounds(["a", "b", "a", "c", "a", "b"].into_iter());
        assert_eq!(got, vec![vec![0, 1, 3], vec![2, 5], vec![4]]);
        assert!(rounds(std::iter::empty()).is_empty());
    }

    #[test]
    fn a_replace_updates_only_a_pending_job_that_is_no_series_occurrence() {
        let names = Names::new("wheel_jobs");
        let text = JobsSql::new(&names).schedule;
        // The job's own values change only on a pending row (a running one's go to its
        // successor, `next_`).
        assert!(
            text.contains(
                "DO UPDATE SET run_at = CASE WHEN j.token IS NULL THEN EXCLUDED.run_at ELSE j.run_at END"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "hold_off = CASE WHEN j.token IS NULL THEN EXCLUDED.hold_off ELSE j.hold_off END"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "WHERE j.token IS NULL AND (SELECT f.replace FROM sent f WHERE f.id = EXCLUDED.id) \
                 AND NOT EXISTS (SELECT 1 FROM"
            ),
            "{text}"
        );
        assert!(!text.contains("attempt = "), "attempts stay: {text}");
    }

    #[test]
    fn a_successor_is_stored_only_beside_a_running_job_without_one() {
        let names = Names::new("wheel_jobs");
        let text = JobsSql::new(&names).schedule;
        // Rechecked under the row lock, on the row's latest version.
        assert!(
            text.contains(
                "OR j.token IS NOT NULL AND NOT j.next_payload IS NOT NULL \
                 AND (SELECT f.allow FROM sent f WHERE f.id = EXCLUDED.id)"
            ),
            "{text}"
        );
        // Only a running row's successor columns take the new values; a Replace drops them.
        assert!(
            text.contains(
                "next_payload = CASE WHEN j.token IS NULL THEN NULL ELSE EXCLUDED.payload END"
            ),
            "{text}"
        );
        // An id seen running with a successor, or seen running by another mode, is not sent
        // (Exists, no lock).
        assert!(
            text.contains("CASE WHEN seen.running THEN NOT free.allow OR seen.has_next"),
            "{text}"
        );
    }

    #[test]
    fn a_schedule_locks_its_rows_in_id_order_whatever_their_modes() {
        let names = Names::new("wheel_jobs");
        let text = JobsSql::new(&names).schedule;
        // One insert for Keep and Replace alike: two would lock a batch's Keep ids, then
        // its Replace ids, and two batches mixing them on the same ids could deadlock.
        assert_eq!(text.matches("INSERT INTO").count(), 1, "{text}");
        assert!(
            text.contains("ORDER BY id ON CONFLICT (queue, id) DO UPDATE"),
            "{text}"
        );
    }
}
