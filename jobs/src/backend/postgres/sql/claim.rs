//! The statements of a consumer's lease: `claim` (lease due jobs, kill those out of
//! attempts, delete at most [`HELD_PER_CLAIM`] expired tombstones), `settle` (acks and
//! retries, hence failures, of many jobs in one statement; an ack of a job with a hold-off
//! writes its tombstone in the same statement; an ack or a death of a job with a successor
//! hands over to it in the same statement, as a claim's kill does), `extend`.

use std::time::Duration;

use sqlx::postgres::PgExecutor;
use sqlx::{PgPool, Row};

use super::{
    attempt, db, dec, has_next, later, next_spec_cols, not_head, spec, spec_cols, Kinds, Sql, NOW,
};
use crate::backend::postgres::names::Names;
use crate::backend::ClaimKinds;
use crate::core::error::Error;
use crate::core::kind::Spec;

/// A settlement of a leased job, for the shared ack / retry statement.
#[derive(Debug, Clone)]
pub(in crate::backend::postgres) enum Settle {
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
pub(in crate::backend::postgres) enum Settled {
    Acked,
    Pending(u64),
    Died(u64),
    Stale,
}

/// One job a claim leased: id, payload, attempt, run_at, spec.
pub(in crate::backend::postgres) type Leased = (String, Vec<u8>, u32, u64, Spec);

/// A due series head a claim listed: its job id, kind and priority as its row had them,
/// for the series step (`series.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::backend::postgres) struct Head {
    pub(in crate::backend::postgres) id: String,
    pub(in crate::backend::postgres) kind: String,
    pub(in crate::backend::postgres) priority: i16,
}

/// One row of a claim's answer.
#[derive(Debug)]
pub(in crate::backend::postgres) struct ClaimRows {
    pub(in crate::backend::postgres) jobs: Vec<Leased>,
    pub(in crate::backend::postgres) now: u64,
    pub(in crate::backend::postgres) died: u64,
    pub(in crate::backend::postgres) next_due: Option<u64>,
    pub(in crate::backend::postgres) paused: bool,
    /// Series heads due of the claimed kinds, at the highest priority of those due (each
    /// caller's, in a merged claim), that kept their place in the claim's order; left to
    /// the series step (`series.rs`).
    pub(in crate::backend::postgres) heads: Vec<Head>,
    /// A gate of the claimed kinds has a timer due (a rate window ended): for
    /// [`Sql::gate_timers`].
    pub(in crate::backend::postgres) timers: bool,
    /// A claim of a set of kinds: each kind's next due time, of its pending jobs and its
    /// leases (a kind with neither is absent), and the rest of `next_due` (the leases this
    /// claim made, successors, gate timers); `next_due` is the least of them all. Empty and
    /// `None` for the claims of one kind or all.
    pub(in crate::backend::postgres) next_by_kind: Vec<(String, Option<u64>)>,
    pub(in crate::backend::postgres) next_other: Option<u64>,
    /// `next_due` and `next_other` without the gate timers: what a consumer whose gate
    /// rebalance failed looks again at (`claims.rs` `look_again`), the timer's retry apart.
    pub(in crate::backend::postgres) untimed: Option<u64>,
    pub(in crate::backend::postgres) other_untimed: Option<u64>,
}

/// The most gates whose timer came that one claim rebalances.
pub(super) const TIMERS_PER_CLAIM: i32 = 64;

/// The most expired tombstones (`held`) one claim deletes.
pub(super) const HELD_PER_CLAIM: u32 = 64;

/// The SQL text of these statements for one schema.
#[derive(Debug)]
pub(super) struct ClaimSql {
    /// A claim of every kind, of the kind `''`, of the kind `$6` ([`Kinds`]).
    claim: [String; 3],
    /// A claim of the kinds `$6`, each at most its room in `$7`, each of the member `$8`
    /// ([`set_parts`]).
    claim_set: String,
    settle: String,
    extend: String,
    timers: String,
}

impl ClaimSql {
    pub(super) fn new(n: &Names) -> ClaimSql {
        let Names {
            jobs,
            dead,
            series,
            queues,
            held,
            gates,
            ..
        } = n;
        // Machine::claim for each due job: the expired leases first (their last error
        // becomes Machine::claim_error's), then pending jobs by priority, due time and id,
        // $2 in all (a plain `LIMIT $2` on each index scan: a computed limit makes the
        // planner guess a large one and cost the plan into JIT compilation); a job whose
        // attempts reached its own `max_attempts` (NULL: the queue's, $5) moves to `dead`
        // instead of being leased, and each lease is the job's own (NULL: $3).
        //
        // Pending jobs are read one priority level at a time, highest first: `levels`
        // finds the levels in use (one index probe each), and each level's due jobs are a
        // `run_at <= now` range of the index, locked with SKIP LOCKED. The `LIMIT $2` over
        // that nested loop stops it once enough are locked, so lower levels are neither
        // read nor locked when higher ones fill the claim: O(levels + jobs claimed), and no
        // scan walks a level's future jobs. With a named kind ($6) every read of pending
        // jobs is of that kind's rows (`jobs_due`); the kind '' reads `jobs_pending`, past
        // other kinds' due jobs of its levels (not their future ones). Expired leases come
        // from `jobs_running`, which has no kind: it holds as many rows as the fleet runs
        // jobs, not the backlog.
        //
        // Series heads are left to the series step (`series.rs`), which moves the series
        // in the same transaction as the claim of its head. A head is an ordinary job of its
        // kind and priority: [`heads`] finds the highest priority of the due heads of the
        // claimed kinds (`hf`, from the series' own columns) and lists the due heads at it;
        // `due` reads no level below it, of any claimed kind (strict priority across the
        // kinds), and `picked` orders those heads with the jobs (a head holds a place, no
        // row: its `tid` is NULL, so nothing below acts on it) before the claim is cut to
        // `$2`; the heads that kept their place are answered (row 3) for the caller to
        // claim, and the consumer looks again at once for what waited below them. Heads the
        // caller could not claim (`skip`: locked, moved, their step failed) are left out of
        // its next statement, in the same claim: they hold nothing back. A plain claim's
        // next due time reads a bounded window (`next_level`). The kill and the lease find
        // the picked rows by `ctid` (the version the pick
        // locked), a TID scan whatever the statistics say: joined on (queue, id) alone, a
        // queue the table's statistics do not know yet (new since the last ANALYZE) was
        // estimated at one row, and the planner scanned the whole queue once per picked
        // job, 0.9 s per claim of 50 among 20,000 due. A picked row updated by a commit
        // after this statement's snapshot is locked in its new version, which the snapshot
        // cannot see: it is neither leased nor killed, only left as it is, and the next
        // due time below counts it (it excludes the leased, killed and handed rows, not the picked
        // ones), so the consumer looks again at once rather than at the next lease's end.
        //
        // A job killed (its lease ended at its last attempt, or a pending one out of
        // attempts) with a successor waiting (`nx`, read from the locked version, which is
        // the one the kill acts on) is not deleted but becomes its successor
        // (`embedded/store/jobs.rs` `hand_over`, `handed`): one update of its row, attempt
        // 0, the successor's run_at, payload and spec, the kill's last error, no dead row.
        // The update trigger counts it out of running and into pending (its new kind) and
        // wakes consumers; the death counts in `died` as a buried one does, and its run_at
        // in the next due time. Jobs without a successor pay one test of a NULL bit.
        //
        // Each claim deletes at most [`HELD_PER_CLAIM`] expired tombstones, earliest first
        // (`held_until`; one index probe when there are none), skipping those another
        // statement holds (`embedded/store/claim.rs` `expire_held`). The ids come from a
        // `MATERIALIZED` CTE, computed once: inside `IN`, a `LIMIT … SKIP LOCKED` subquery
        // may be run again per row by a nested-loop plan, each run skipping what the last
        // deleted, and delete far more than the bound.
        //
        // Fairness per key (`migrations/0003_kinds.sql`, `gates`): jobs waiting for their
        // gate are in no due index (`NOT waiting`, which every read of pending jobs here
        // says, so the planner uses the partial indexes), so the claim leases only admitted
        // ones, and a backlog held back costs it nothing. The statement's triggers do a
        // gate's bookkeeping (a lease from pending is a start: running + 1; a kill, running
        // - 1; then the gate's rebalance); `gl` first locks the gates the picked rows
        // need (`gk`: a pending job's, leased or killed; an expired lease's only when it is
        // killed, a redelivery changes no gate; a handed-over job's successor's), in (kind,
        // key) order, after those rows (the rule: job rows, then gates in order), so the
        // triggers, one per kind of change, never take gates out of order. It skips the
        // gates another transaction holds (a caller's `schedule_in` or `ack_in` holds its
        // gate to its commit): the picked rows needing one are `given` back, neither leased
        // nor killed (`ok` is the rest), so a claim never waits on a caller's transaction;
        // they are due and not taken, so the consumer looks again shortly (`LOCKED_RETRY`),
        // not in a loop. A gate absent from the snapshot (a successor's new one) is not
        // waited for either way. `timer` is the earliest gate timer of
        // the claimed kinds: the next due time is no later, and one due is reported (row
        // 4) for [`Sql::gate_timers`]. For ungated jobs: one probe of `gates_wake` and an
        // empty `gl`.
        let claim = |kinds: Option<Kinds>| {
            // `None`: a set of kinds, `$6` and their rooms `$7` (`claim_set` below).
            let kj = kinds.map_or_else(|| SET_ROWS.to_owned(), |k| k.rows("j"));
            let (levels, due, picked, next_level) = match kinds {
                Some(kinds) => (
                    super::levels(jobs, kinds),
                    format!(
                        "due AS (SELECT d.* FROM levels l CROSS JOIN LATERAL (\
                         SELECT j.ctid AS tid, j.id, j.attempt, j.max_attempts AS most, j.priority AS prio, \
                         j.run_at AS at, {next_j} AS nx FROM {jobs} j \
                         WHERE j.queue = $1 AND j.token IS NULL AND NOT j.waiting {kj} AND j.priority = l.lvl \
                         AND j.run_at <= (SELECT t FROM now) AND NOT (SELECT p FROM paused) \
                         AND (j.attempt > 0 OR strpos(j.id, '@') = 0 OR {head}) \
                         ORDER BY j.run_at, j.id LIMIT $2 FOR UPDATE SKIP LOCKED) d \
                         WHERE l.lvl IS NOT NULL AND l.lvl >= {HEADS_FLOOR} LIMIT $2)",
                        head = not_head(series, "j.id"),
                        next_j = has_next("j"),
                    ),
                    "picked AS (SELECT tid, id, attempt, most, expired, nx FROM (\
                     SELECT tid, id, attempt, most, true AS expired, 0 AS k, prio, at, nx FROM expired \
                     UNION ALL SELECT tid, id, attempt, most, false, 1, prio, at, nx FROM due \
                     UNION ALL SELECT NULL::tid, head_id, 0, NULL::integer, false, 1, priority, at, false FROM heads) AS both_ \
                     ORDER BY k, prio DESC, at, id LIMIT $2)"
                        .to_owned(),
                    next_level(jobs, kinds),
                ),
                None => set_parts(jobs, series),
            };
            // The expired leases: `$2` in all, or, for a set of kinds, each kind at most its
            // room, so one kind's many expired leases neither crowd out another's in a claim
            // merged from several (`claims.rs`) nor are locked beyond what `picked` can take.
            let expired_of = |rows: &str, limit: &str| {
                format!(
                    "SELECT j.ctid AS tid, j.id, j.kind, j.attempt, j.max_attempts AS most, \
                     j.priority AS prio, j.lease_until AS at, {next_j} AS nx FROM {jobs} j \
                     WHERE j.queue = $1 AND j.token IS NOT NULL {rows} AND j.lease_until <= (SELECT t FROM now) \
                     AND NOT (SELECT p FROM paused) \
                     ORDER BY j.lease_until, j.id LIMIT {limit} FOR UPDATE SKIP LOCKED",
                    next_j = has_next("j"),
                )
            };
            // The next lease to end, but those this claim leased, killed or handed over.
            let lease_of = |rows: &str| {
                format!(
                    "SELECT j.lease_until AS t FROM {jobs} j WHERE j.queue = $1 AND j.token IS NOT NULL {rows} \
                     AND NOT EXISTS (SELECT 1 FROM leased x WHERE x.id = j.id) \
                     AND NOT EXISTS (SELECT 1 FROM killed k WHERE k.id = j.id) \
                     AND NOT EXISTS (SELECT 1 FROM handed h WHERE h.id = j.id) ORDER BY j.lease_until, j.id LIMIT 1"
                )
            };
            // A claim of a set of kinds also answers each kind's next due time, its pending
            // jobs' and its leases' (row 5, the kind in `id`), and the rest of the next due
            // time (row 6: the leases it made, successors, gate timers), so each caller of a
            // claim merged from several (`claims.rs`) learns its own: the whole set's would
            // wake an idle kind's loop at once while another kind has due jobs or expired
            // leases beyond its room.
            let (expired, next_pending, next_lease, by_kind) = match kinds {
                Some(_) => (
                    format!("expired AS ({})", expired_of(&kj, "$2")),
                    format!(
                        "next_pending AS (SELECT min(h.t) AS t FROM levels l CROSS JOIN LATERAL ({next_level}) h \
                         WHERE l.lvl IS NOT NULL)"
                    ),
                    format!("next_lease AS ({})", lease_of(&kj)),
                    "",
                ),
                None => (
                    format!(
                        "expired AS (SELECT e.* FROM ks CROSS JOIN LATERAL ({}) e)",
                        expired_of("AND j.kind = ks.kind", "ks.room"),
                    ),
                    format!(
                        "next_kinds AS (SELECT l.kind, min(h.t) AS t FROM levels l CROSS JOIN LATERAL ({next_level}) h \
                         WHERE l.lvl IS NOT NULL GROUP BY l.kind), \
                         next_pending AS (SELECT min(t) AS t FROM next_kinds)"
                    ),
                    format!(
                        "next_leases AS (SELECT ks.kind, n.t FROM ks CROSS JOIN LATERAL ({}) n), \
                         next_lease AS (SELECT min(t) AS t FROM next_leases)",
                        lease_of("AND j.kind = ks.kind"),
                    ),
                    " UNION ALL SELECT 5, kind, NULL, NULL, min(t), '', 0::smallint, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL \
                     FROM (SELECT kind, t FROM next_kinds UNION ALL SELECT kind, t FROM next_leases) AS n GROUP BY kind \
                     UNION ALL SELECT 6, NULL, NULL, NULL, LEAST((SELECT min(lease_until) FROM leased), \
                     (SELECT min(run_at) FROM handed), (SELECT t FROM timer)), \
                     '', 0::smallint, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL \
                     UNION ALL SELECT 8, NULL, NULL, NULL, LEAST((SELECT min(lease_until) FROM leased), \
                     (SELECT min(run_at) FROM handed)), \
                     '', 0::smallint, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL",
                ),
            };
            format!(
                "WITH RECURSIVE now AS (SELECT {NOW} AS t), \
                 paused AS (SELECT EXISTS (SELECT 1 FROM {queues} WHERE queue = $1 AND paused) AS p), \
                 {levels}, \
                 {heads}, \
                 {expired}, {due}, {picked}, \
                 gk AS (SELECT p.id, j.kind, j.key, {gated_j} AS gated, j.next_kind, j.next_key, \
                   {gated_nj} AS ngated, NOT p.expired OR p.attempt >= coalesce(p.most, $5) AS starts, \
                   p.nx AND p.attempt >= coalesce(p.most, $5) AS hands \
                   FROM picked p JOIN {jobs} j ON j.ctid = p.tid AND j.queue = $1 AND j.id = p.id \
                   WHERE {gated_j} OR p.nx AND {gated_nj}), \
                 gl AS MATERIALIZED (SELECT g.kind, g.key FROM {gates} g WHERE g.queue = $1 AND (g.kind, g.key) IN ( \
                   SELECT kind, key FROM gk WHERE gated AND starts \
                   UNION ALL SELECT next_kind, next_key FROM gk WHERE hands AND ngated) \
                   ORDER BY g.kind, g.key FOR UPDATE SKIP LOCKED), \
                 given AS (SELECT gk.id FROM gk CROSS JOIN LATERAL (VALUES (gk.kind, gk.key, gk.gated AND gk.starts), \
                   (gk.next_kind, gk.next_key, gk.hands AND gk.ngated)) AS w(kind, key, needs) \
                   WHERE w.needs AND NOT EXISTS (SELECT 1 FROM gl WHERE gl.kind = w.kind AND gl.key = w.key) \
                   AND EXISTS (SELECT 1 FROM {gates} x WHERE x.queue = $1 AND x.kind = w.kind AND x.key = w.key)), \
                 ok AS (SELECT p.* FROM picked p WHERE NOT EXISTS (SELECT 1 FROM given b WHERE b.id = p.id)), \
                 killed AS (DELETE FROM {jobs} j USING ok p \
                   WHERE j.ctid = p.tid AND j.queue = $1 AND j.id = p.id AND p.attempt >= coalesce(p.most, $5) \
                   AND NOT p.nx \
                   RETURNING j.queue, j.id, j.run_at, j.attempt, \
                   CASE WHEN p.expired THEN 'lease expired' ELSE j.last_error END AS last_error, j.payload, \
                   {spec_j}), \
                 buried AS (INSERT INTO {dead} (queue, id, run_at, attempt, died_at, last_error, payload, {spec}) \
                   SELECT queue, id, run_at, attempt, (SELECT t FROM now), last_error, payload, {spec} FROM killed \
                   RETURNING 1), \
                 handed AS (UPDATE {jobs} j SET run_at = j.next_run_at, attempt = 0, token = NULL, \
                   lease_until = NULL, \
                   last_error = CASE WHEN p.expired THEN 'lease expired' ELSE j.last_error END, \
                   payload = j.next_payload, {take_next} \
                   FROM ok p WHERE j.ctid = p.tid AND j.queue = $1 AND j.id = p.id \
                   AND p.attempt >= coalesce(p.most, $5) AND p.nx \
                   RETURNING j.id, j.run_at), \
                 leased AS (UPDATE {jobs} j SET attempt = j.attempt + 1, token = $4, \
                   lease_until = {until}, \
                   last_error = CASE WHEN p.expired THEN 'lease expired' ELSE j.last_error END \
                   FROM ok p WHERE j.ctid = p.tid AND j.queue = $1 AND j.id = p.id \
                   AND p.attempt < coalesce(p.most, $5) \
                   RETURNING j.id, j.payload, j.attempt, j.run_at, j.lease_until, {spec_j}), \
                 sweep AS MATERIALIZED (SELECT x.id FROM {held} x WHERE x.queue = $1 \
                   AND x.until <= (SELECT t FROM now) ORDER BY x.until LIMIT {HELD_PER_CLAIM} \
                   FOR UPDATE SKIP LOCKED), \
                 swept AS (DELETE FROM {held} h WHERE h.queue = $1 AND h.until <= (SELECT t FROM now) \
                   AND h.id IN (SELECT id FROM sweep) RETURNING 1), \
                 {next_pending}, {next_lease}, \
                 timer AS (SELECT min(g.wake_at) AS t FROM {gates} g WHERE g.queue = $1 \
                   AND g.wake_at IS NOT NULL {kg}) \
                 SELECT 0 AS row_, id, payload, attempt, run_at AS at, {spec} FROM leased \
                 UNION ALL SELECT 1, NULL, NULL, ((SELECT count(*) FROM buried) + (SELECT count(*) FROM handed) \
                   + 0 * (SELECT count(*) FROM gl))::int, \
                   (SELECT t FROM now), \
                   '', 0::smallint, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL \
                 UNION ALL SELECT 2, NULL, NULL, (SELECT p FROM paused)::int, \
                   LEAST((SELECT t FROM next_pending), (SELECT t FROM next_lease), \
                   (SELECT min(lease_until) FROM leased), (SELECT min(run_at) FROM handed), \
                   (SELECT t FROM timer)), '', 0::smallint, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL \
                 UNION ALL SELECT 3, h.head_id, NULL, NULL, NULL, h.kind, h.priority, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM heads h \
                   WHERE EXISTS (SELECT 1 FROM picked p WHERE p.tid IS NULL AND p.id = h.head_id) \
                 UNION ALL SELECT 4, NULL, NULL, NULL, t, '', 0::smallint, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM timer \
                   WHERE t <= (SELECT t FROM now) \
                 UNION ALL SELECT 7, NULL, NULL, NULL, \
                   LEAST((SELECT t FROM next_pending), (SELECT t FROM next_lease), \
                   (SELECT min(lease_until) FROM leased), (SELECT min(run_at) FROM handed)), \
                   '', 0::smallint, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL{by_kind}",
                heads = heads(jobs, series, kinds),
                until = later("coalesce(j.lease, $3)"),
                spec = spec_cols(""),
                spec_j = spec_cols("j"),
                take_next = take_next(),
                gated_j = super::gated("j"),
                gated_nj = super::gated("j")
                    .replace("key_limit", "next_key_limit")
                    .replace("rate_starts", "next_rate_starts"),
                kg = kinds.map_or_else(|| "AND g.kind = ANY($6::text[])".to_owned(), |k| k.rows("g")),
            )
        };
        ClaimSql {
            claim: Kinds::EACH.map(|kinds| claim(Some(kinds))),
            claim_set: claim(None),
            // Acks (Machine::ack: the token must hold; a job with a hold-off leaves its
            // tombstone, `embedded/store/jobs.rs` `ack`) and retries (Machine::retry: with the
            // token, back to pending, or dead if that was the job's last attempt, its own
            // `max_attempts` or, NULL, the queue's $8) of many jobs in one statement and one
            // commit.
            //
            // A job with a successor (`embedded/store/jobs.rs` `hand_over`) acked or dead is
            // deleted all the same, and its successor, read from the deleted row's
            // RETURNING (the version the delete locked, so one a schedule committed while the
            // ack waited on the row is there), is inserted as the pending job under the id:
            // attempt 0, its own payload and spec, last_error NULL (acked) or the dead one's,
            // due at its run_at or, after an ack with a hold-off, not before the hold-off
            // ends; no tombstone, no dead row. The insert reads the deletes' output, so each
            // row is deleted before its key is inserted again. The triggers count the
            // running row out and the pending one in, and wake consumers for it. A retry
            // with attempts left leaves the successor in its row. Jobs without a successor
            // pay one test of the `next_payload` NULL bit.
            //
            // A gated job retried waits in its gate (`waiting`) and its trigger rebalances the
            // gate (running - 1, as for an ack or a death). `gl` locks the gates of every
            // settled job and successor, in (kind, key) order, after their rows: acks are a
            // delete and retries an update, each with a trigger, and two batches mixing them
            // on two keys would otherwise take the gates in opposite orders.
            settle: format!(
                "WITH now AS (SELECT {NOW} AS t), \
                 acked AS (DELETE FROM {jobs} j USING unnest($2::text[], $3::bigint[]) AS a(id, token) \
                   WHERE j.queue = $1 AND j.id = a.id AND j.token = a.token \
                   RETURNING j.id, a.token, j.hold_off, {next_j} AS has_next, j.next_run_at, j.next_payload, \
                   {next_spec_j}, j.kind AS g_kind, j.key AS g_key, {gated} AS g_gated), \
                 tombs AS (INSERT INTO {held} (queue, id, until) \
                   SELECT $1, id, {held_until} FROM acked WHERE hold_off > 0 AND NOT has_next \
                   ON CONFLICT (queue, id) DO UPDATE SET until = EXCLUDED.until RETURNING 1), \
                 r AS (SELECT * FROM unnest($4::text[], $5::bigint[], $6::bigint[], $7::text[]) \
                   AS r(id, token, after, error)), \
                 back AS (UPDATE {jobs} j SET run_at = {after}, token = NULL, lease_until = NULL, waiting = {gated}, \
                   last_error = coalesce(r.error, j.last_error) \
                   FROM r WHERE j.queue = $1 AND j.id = r.id AND j.token = r.token \
                   AND j.attempt < coalesce(j.max_attempts, $8) \
                   RETURNING j.id, r.token, j.run_at, j.kind AS g_kind, j.key AS g_key, {gated} AS g_gated), \
                 gone AS (DELETE FROM {jobs} j USING r \
                   WHERE j.queue = $1 AND j.id = r.id AND j.token = r.token \
                   AND j.attempt >= coalesce(j.max_attempts, $8) \
                   RETURNING j.queue, j.id, r.token, j.run_at, j.attempt, \
                   coalesce(r.error, j.last_error) AS last_error, j.payload, {spec_j}, \
                   {next_j} AS has_next, j.next_run_at, j.next_payload, {next_spec_j}), \
                 buried AS (INSERT INTO {dead} (queue, id, run_at, attempt, died_at, last_error, payload, {spec}) \
                   SELECT queue, id, run_at, attempt, (SELECT t FROM now), last_error, payload, {spec} FROM gone \
                   WHERE NOT has_next RETURNING id), \
                 handed AS (INSERT INTO {jobs} (queue, id, run_at, last_error, payload, {spec}) \
                   SELECT $1, id, GREATEST(next_run_at, CASE WHEN hold_off > 0 THEN {held_until} END), NULL, \
                   next_payload, {next_spec} FROM acked WHERE has_next \
                   UNION ALL SELECT $1, id, next_run_at, last_error, next_payload, {next_spec} FROM gone \
                   WHERE has_next RETURNING 1), \
                 gl AS (SELECT 1 FROM {gates} g WHERE g.queue = $1 AND (g.kind, g.key) IN ( \
                   SELECT g_kind, g_key FROM acked WHERE g_gated \
                   UNION ALL SELECT g_kind, g_key FROM back WHERE g_gated \
                   UNION ALL SELECT kind, key FROM gone WHERE {gated_} \
                   UNION ALL SELECT next_kind, next_key FROM acked WHERE has_next AND {gated_next} \
                   UNION ALL SELECT next_kind, next_key FROM gone WHERE has_next AND {gated_next}) \
                   ORDER BY g.kind, g.key FOR UPDATE) \
                 SELECT 0 AS kind, id, token, 0::bigint AS at FROM acked \
                 UNION ALL SELECT 1, id, token, run_at FROM back \
                 UNION ALL SELECT 2, id, token, (SELECT t FROM now) FROM gone \
                 UNION ALL SELECT 3, NULL, NULL, NULL FROM (SELECT count(*) AS n FROM gl) c WHERE c.n < 0",
                after = later("r.after"),
                gated = super::gated("j"),
                gated_ = super::gated(""),
                gated_next = super::gated("").replace("key_limit", "next_key_limit").replace("rate_starts", "next_rate_starts"),
                held_until = later("hold_off"),
                spec = spec_cols(""),
                spec_j = spec_cols("j"),
                next_j = has_next("j"),
                next_spec = next_spec_cols(""),
                next_spec_j = next_spec_cols("j"),
            ),
            // The gates whose rate window ended (`migrations/0003_kinds.sql`).
            timers: format!("SELECT {}.gate_timers($1, $2, $3)", n.quoted),
            // Machine::extend.
            extend: format!(
                "WITH now AS (SELECT {NOW} AS t) \
                 UPDATE {jobs} SET lease_until = {} WHERE queue = $1 AND id = $2 AND token = $3 RETURNING 1",
                later("$4")
            ),
        }
    }
}

/// The due series heads a claim statement lists ([`Sql::claim`]): those at the highest
/// due priority of the claimed kinds hold back the levels below them (strict priority).
#[derive(Clone, Copy, Debug)]
pub(in crate::backend::postgres) enum HeadsListed<'a> {
    /// Every due head but these: those an earlier statement of the same claim listed that
    /// delivered nothing (locked, moved, their step failed).
    Except(&'a [String]),
    /// None: the statement reads every level of the claimed kinds, without the heads (a
    /// claim's last round, `claims.rs` `HEAD_ROUNDS`).
    None,
}

/// The lowest priority level a claim of one kind or all reads: the highest priority of
/// the due series heads it may take (`hf`, [`heads`]), if any (strict priority).
const HEADS_FLOOR: &str = "coalesce((SELECT f FROM hf), -32768)";

/// The lowest priority level a claim of a set of kinds reads of the kind `ks.kind`: the
/// highest priority of the due series heads of the kinds of its member (`ks.member`: the
/// caller whose claim named the kind, in a claim merged from several, `claims.rs`), across
/// those kinds; another member's heads hold back none of its jobs.
const SET_HEADS_FLOOR: &str = "coalesce((SELECT f FROM hf WHERE hf.member = ks.member), -32768)";

/// The CTEs listing the due series heads a claim of `kinds` (`None`: the set `ks`) may take
/// (`heads(head_id, kind, priority, at)`) and the floor they put on the levels it reads
/// (`hf(member, f)`), from the series' own kind and priority (`migrations/0004_series_spec.sql`,
/// `series_by_kind`). `hk` is the claimed kinds, each with its member (a claim of one
/// kind or all is one member; for every kind, a skip scan of the kinds with a head, one
/// probe each); `hl` each one's priority levels with a head, highest first (a skip scan,
/// one probe per level); `hd` the levels with a due head, each one range probe stopped at
/// its first due head (whose job row must be the pending, never-delivered job of that kind
/// and priority); `hf` each member's highest, across its kinds; `heads` the due heads at
/// their member's, earliest first, at most `$2`. A claim reads only its kinds' series,
/// however many other kinds' series are due, and a queue without series pays one index
/// probe (`hk`'s or `hl`'s first). Heads below `hf` wait, as the jobs below it do, for the
/// next claim, which the consumer makes at once.
fn heads(jobs: &str, series: &str, kinds: Option<Kinds>) -> String {
    let hk = match kinds {
        Some(Kinds::All) => format!(
            "hk(kind, member) AS (SELECT (SELECT min(s.kind) FROM {series} s WHERE s.queue = $1 AND s.head IS NOT NULL), 0 \
             UNION ALL SELECT (SELECT min(s.kind) FROM {series} s WHERE s.queue = $1 AND s.head IS NOT NULL \
             AND s.kind > hk.kind), 0 FROM hk WHERE hk.kind IS NOT NULL)"
        ),
        Some(Kinds::Plain) => "hk(kind, member) AS (SELECT ''::text, 0)".to_owned(),
        Some(Kinds::Named) => "hk(kind, member) AS (SELECT $6::text, 0)".to_owned(),
        None => "hk(kind, member) AS (SELECT kind, member FROM ks)".to_owned(),
    };
    // The heads a claim of this call left out ([`Sql::claim`]'s `skip`): those an earlier
    // statement of it listed that delivered nothing (locked, moved, their step failed).
    // Whether it lists any ([`HeadsListed::None`]: false, and no head holds back a level).
    let (skip, listed) = match kinds {
        Some(Kinds::All | Kinds::Plain) => ("$6", "$7"),
        Some(Kinds::Named) => ("$7", "$8"),
        None => ("$9", "$10"),
    };
    let probe = format!(
        "SELECT j.run_at FROM {jobs} j WHERE j.queue = $1 AND j.id = s.head_id AND j.token IS NULL \
         AND NOT j.waiting AND j.attempt = 0 AND j.kind = s.kind AND j.priority = s.priority \
         AND j.run_at <= (SELECT t FROM now) LIMIT 1"
    );
    format!(
        "{hk}, \
         hl(kind, member, prio) AS (SELECT hk.kind, hk.member, (SELECT max(s.priority) FROM {series} s \
           WHERE s.queue = $1 AND s.kind = hk.kind AND s.head IS NOT NULL) FROM hk WHERE hk.kind IS NOT NULL \
           UNION ALL SELECT hl.kind, hl.member, (SELECT max(s.priority) FROM {series} s WHERE s.queue = $1 \
           AND s.kind = hl.kind AND s.head IS NOT NULL AND s.priority < hl.prio) FROM hl WHERE hl.prio IS NOT NULL), \
         hd AS MATERIALIZED (SELECT hl.kind, hl.member, hl.prio FROM hl WHERE {listed}::boolean \
           AND hl.prio IS NOT NULL AND NOT (SELECT p FROM paused) \
           AND EXISTS (SELECT 1 FROM {series} s WHERE s.queue = $1 AND s.kind = hl.kind AND s.priority = hl.prio \
           AND s.head <= (SELECT t FROM now) AND s.head_id <> ALL({skip}::text[]) AND EXISTS ({probe}))), \
         hf AS MATERIALIZED (SELECT member, max(prio) AS f FROM hd GROUP BY member), \
         heads AS MATERIALIZED (SELECT x.head_id, x.kind, x.priority, x.at FROM hd CROSS JOIN LATERAL ( \
           SELECT s.head_id, s.kind, s.priority, j.run_at AS at FROM {series} s CROSS JOIN LATERAL ({probe}) j \
           WHERE s.queue = $1 AND s.kind = hd.kind AND s.priority = hd.prio AND s.head <= (SELECT t FROM now) \
           AND s.head_id <> ALL({skip}::text[]) ORDER BY s.head LIMIT $2) x WHERE hd.prio = (SELECT f FROM hf WHERE hf.member = hd.member) \
           ORDER BY x.at, x.head_id LIMIT $2)"
    )
}

/// The condition on a row of `jobs` (alias `j`) of a claim of a set of kinds (`$6`).
const SET_ROWS: &str = "AND j.kind = ANY($6::text[])";

/// The parts of the claim of a set of kinds that differ from a claim of one kind or all:
/// the CTEs `levels`, `due` and `picked`, and the next due time per level (see
/// [`next_level`]). The kinds are `$6`, the most of each this claim takes is `$7` and the
/// member (caller) each is claimed for `$8` (`ks(kind, room, member)`).
///
/// `levels(kind, room, lvl)` is the skip scan of `super::levels` run per kind, all at once
/// (one recursive CTE, one index probe per level of each kind): a named kind's of
/// `jobs_due`, the kind `''`'s of `jobs_pending` (every kind's levels, as a claim of the
/// kind `''` reads them). `due` is, per kind, the nested loop of a claim of that kind over
/// its levels highest first, each level a `LATERAL (… LIMIT $2 FOR UPDATE SKIP LOCKED)`
/// (a named kind's rows of `jobs_due`; the kind `''`'s of `jobs_pending`, past other kinds'
/// due rows of its levels, as a claim of the kind `''` does), stopped at the kind's room
/// by `LIMIT ks.room`: so a claim reads O(kinds × levels + rooms) rows, none of a kind it
/// did not name, and locks at most each kind's room. `picked` then orders the expired
/// leases and those rows as every claim does and keeps the first `$2`, each kind at most
/// its room (expired leases count in it: `row_number` per kind).
fn set_parts(jobs: &str, series: &str) -> (String, String, String, String) {
    let levels = format!(
        "ks AS (SELECT k.kind, k.room, k.member FROM unnest($6::text[], $7::bigint[], $8::integer[]) \
           AS k(kind, room, member)), \
         levels(kind, room, lvl) AS (SELECT ks.kind, ks.room, CASE WHEN ks.kind = '' \
           THEN (SELECT max(priority) FROM {jobs} WHERE queue = $1 AND token IS NULL AND NOT waiting) \
           ELSE (SELECT max(priority) FROM {jobs} WHERE queue = $1 AND token IS NULL AND NOT waiting \
             AND kind = ks.kind AND kind <> '') END FROM ks \
         UNION ALL SELECT l.kind, l.room, CASE WHEN l.kind = '' \
           THEN (SELECT max(priority) FROM {jobs} WHERE queue = $1 AND token IS NULL AND NOT waiting AND priority < l.lvl) \
           ELSE (SELECT max(priority) FROM {jobs} WHERE queue = $1 AND token IS NULL AND NOT waiting \
             AND kind = l.kind AND kind <> '' AND priority < l.lvl) END \
         FROM levels l WHERE l.lvl IS NOT NULL)"
    );
    let pick = |rows: &str| {
        format!(
            "(SELECT j.ctid AS tid, j.id, j.kind, j.attempt, j.max_attempts AS most, j.priority AS prio, \
             j.run_at AS at, {next_j} AS nx FROM {jobs} j \
             WHERE j.queue = $1 AND j.token IS NULL AND NOT j.waiting {rows} AND j.priority = l.lvl \
             AND j.run_at <= (SELECT t FROM now) AND NOT (SELECT p FROM paused) \
             AND (j.attempt > 0 OR strpos(j.id, '@') = 0 OR {head}) \
             ORDER BY j.run_at, j.id LIMIT $2 FOR UPDATE SKIP LOCKED)",
            head = not_head(series, "j.id"),
            next_j = has_next("j"),
        )
    };
    // Two arms, one per index (a locking subquery cannot be an arm of a UNION itself):
    // for a kind only one of them has levels, so its rows come in its levels' order.
    let arm = |kind: &str, rows: &str| {
        format!(
            "SELECT x.* FROM levels l CROSS JOIN LATERAL {pick} x \
             WHERE l.kind = ks.kind AND {kind} AND l.lvl IS NOT NULL \
             AND l.lvl >= {SET_HEADS_FLOOR}",
            pick = pick(rows),
        )
    };
    let due = format!(
        "due AS (SELECT d.* FROM ks CROSS JOIN LATERAL ({named} UNION ALL {plain} LIMIT ks.room) d)",
        named = arm("l.kind <> ''", "AND j.kind = l.kind AND j.kind <> ''"),
        plain = arm("l.kind = ''", "AND j.kind = ''"),
    );
    let picked = "picked AS (SELECT c.tid, c.id, c.attempt, c.most, c.expired, c.nx FROM (\
         SELECT b.*, row_number() OVER (PARTITION BY b.kind ORDER BY b.k, b.prio DESC, b.at, b.id) AS nth \
         FROM (SELECT tid, id, kind, attempt, most, true AS expired, 0 AS k, prio, at, nx FROM expired \
         UNION ALL SELECT tid, id, kind, attempt, most, false, 1, prio, at, nx FROM due \
         UNION ALL SELECT NULL::tid, head_id, kind, 0, NULL::integer, false, 1, priority, at, false FROM heads) AS b) AS c \
         JOIN ks ON ks.kind = c.kind WHERE c.nth <= ks.room \
         ORDER BY c.k, c.prio DESC, c.at, c.id LIMIT $2)"
        .to_owned();
    let next = format!(
        "SELECT CASE WHEN l.kind = '' THEN ({plain}) ELSE ({named}) END AS t",
        plain = next_level(jobs, Kinds::Plain),
        named = next_level(jobs, Kinds::Named).replace("$6", "l.kind"),
    );
    (levels, due, picked, next)
}

/// SQL making a job's successor the job: its spec columns and none left (`next_payload`
/// and `next_run_at` are the caller's to move).
fn take_next() -> String {
    let own = spec_cols("")
        .split(", ")
        .map(|c| format!("{c} = j.next_{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!("{own}, {}", super::jobs::no_successor())
}

/// The most future pending rows a claim of the kind `''` reads per priority level to find
/// its next due time (`jobs_pending` has no kind: other kinds' rows are among them).
pub(super) const PLAIN_WINDOW: u32 = 1000;

/// The next due time of the pending jobs at the level `l.lvl` a claim of `kinds` reads, as
/// a one-row subquery `t` (NULL: none), for `next_pending`. Every kind and a named kind
/// have an index whose first row at the level is the answer. The kind `''` reads
/// `jobs_pending` past other kinds' rows: its due ones as the `due` step does (the first
/// due plain row not leased or killed here, locked by another transaction), then at most
/// [`PLAIN_WINDOW`] future rows. If no plain row is among them, the last one's run_at is
/// the answer: a lower bound of the next plain due time (the rows come in run_at order),
/// so the consumer wakes early and reads the next window, never late, and an idle claim
/// reads O(levels x window) rows whatever the other kinds' backlog.
fn next_level(jobs: &str, kinds: Kinds) -> String {
    let kj = kinds.rows("j");
    let not_taken = "AND NOT EXISTS (SELECT 1 FROM leased x WHERE x.id = j.id) \
                     AND NOT EXISTS (SELECT 1 FROM killed k WHERE k.id = j.id)";
    match kinds {
        Kinds::All | Kinds::Named => format!(
            "SELECT j.run_at AS t FROM {jobs} j WHERE j.queue = $1 AND j.token IS NULL AND NOT j.waiting {kj} \
             AND j.priority = l.lvl {not_taken} ORDER BY j.run_at, j.id LIMIT 1"
        ),
        Kinds::Plain => format!(
            "SELECT LEAST(\
               (SELECT j.run_at FROM {jobs} j WHERE j.queue = $1 AND j.token IS NULL AND NOT j.waiting {kj} \
                AND j.priority = l.lvl AND j.run_at <= (SELECT t FROM now) {not_taken} \
                ORDER BY j.run_at, j.id LIMIT 1), \
               (SELECT CASE WHEN bool_or(w.kind = '') THEN min(w.t) FILTER (WHERE w.kind = '') \
                  WHEN count(*) = {PLAIN_WINDOW} THEN max(w.t) END \
                FROM (SELECT j.run_at AS t, j.kind FROM {jobs} j WHERE j.queue = $1 AND j.token IS NULL AND NOT j.waiting \
                  AND j.priority = l.lvl AND j.run_at > (SELECT t FROM now) \
                  ORDER BY j.run_at, j.id LIMIT {PLAIN_WINDOW}) w)) AS t"
        ),
    }
}

impl Sql {
    /// Claims up to `max` due jobs of the kinds `kinds` names (each at most its own most)
    /// under `token`, each for its own lease, killing those out of their own attempts. For
    /// a set of kinds, `members` is the member (caller) each kind is claimed for, in the
    /// set's order (a claim merged from several, `claims.rs`; empty: all one caller's): a
    /// due series head holds back the lower levels of its member's kinds only. The heads
    /// `listed` leaves out are neither listed nor hold anything back: a claim that could not
    /// claim them (locked, moved, their step failed) runs the statement again without them,
    /// and its last statement without any ([`HeadsListed`]).
    #[allow(clippy::too_many_arguments)] // the claim's parts, each named once here
    pub(in crate::backend::postgres) async fn claim(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        max: usize,
        token: i64,
        kinds: &ClaimKinds,
        members: &[i32],
        listed: HeadsListed<'_>,
    ) -> Result<ClaimRows, Error> {
        let (skip, on) = match listed {
            HeadsListed::Except(skip) => (skip, true),
            HeadsListed::None => (&[][..], false),
        };
        let plain = &self.plain;
        // One kind or all: the statements of one, whose kind needs no room (`max` is it).
        let one = match kinds {
            ClaimKinds::All => Some(None),
            ClaimKinds::Some(set) if set.len() == 1 => Some(Some(set[0].0.as_str())),
            ClaimKinds::Some(_) => None,
        };
        let text = match one {
            Some(kind) => &self.claims.claim[Kinds::of(kind) as usize],
            None => &self.claims.claim_set,
        };
        // A claim of one kind takes at most that kind's most.
        let max = match (one, kinds) {
            (Some(Some(kind)), _) => kinds.most(kind, max),
            _ => max,
        };
        let query = sqlx::query(text)
            .bind(queue)
            .bind(i64::try_from(max).unwrap_or(i64::MAX))
            .bind(super::span(plain.lease))
            .bind(token)
            .bind(i32::try_from(plain.max_attempts).unwrap_or(i32::MAX));
        let query = match (one, kinds) {
            (Some(kind), _) => Kinds::bind(kind, query).bind(skip).bind(on),
            (None, ClaimKinds::Some(set)) => {
                let names: Vec<&str> = set.iter().map(|(k, _)| k.as_str()).collect();
                let rooms: Vec<i64> = set
                    .iter()
                    .map(|(_, most)| i64::try_from((*most).min(max)).unwrap_or(i64::MAX))
                    .collect();
                let members: Vec<i32> = (0..set.len())
                    .map(|i| members.get(i).copied().unwrap_or(0))
                    .collect();
                query
                    .bind(names)
                    .bind(rooms)
                    .bind(members)
                    .bind(skip)
                    .bind(on)
            }
            (None, ClaimKinds::All) => unreachable!("every kind is a statement of one"),
        };
        let rows = db(query.fetch_all(ex).await)?;
        let mut out = ClaimRows {
            jobs: Vec::new(),
            now: 0,
            died: 0,
            next_due: None,
            paused: false,
            heads: Vec::new(),
            timers: false,
            next_by_kind: Vec::new(),
            next_other: None,
            untimed: None,
            other_untimed: None,
        };
        for r in &rows {
            match db(r.try_get::<i32, _>(0))? {
                0 => out.jobs.push((
                    db(r.try_get(1))?,
                    db(r.try_get(2))?,
                    attempt(r, 3)?,
                    dec(db(r.try_get(4))?),
                    spec(r, 5, plain)?,
                )),
                1 => {
                    out.died = attempt(r, 3)?.into();
                    out.now = dec(db(r.try_get(4))?);
                }
                2 => {
                    out.paused = db(r.try_get::<i32, _>(3))? != 0;
                    out.next_due = db(r.try_get::<Option<i64>, _>(4))?.map(dec);
                }
                4 => out.timers = true,
                5 => out.next_by_kind.push((
                    db(r.try_get(1))?,
                    db(r.try_get::<Option<i64>, _>(4))?.map(dec),
                )),
                6 => out.next_other = db(r.try_get::<Option<i64>, _>(4))?.map(dec),
                7 => out.untimed = db(r.try_get::<Option<i64>, _>(4))?.map(dec),
                8 => out.other_untimed = db(r.try_get::<Option<i64>, _>(4))?.map(dec),
                _ => out.heads.push(Head {
                    id: db(r.try_get(1))?,
                    kind: db(r.try_get(5))?,
                    priority: db(r.try_get(6))?,
                }),
            }
        }
        // Claimed highest priority first; the sort is stable, so within a priority in the
        // order the statement listed them (earliest first, as its Append reads `heads`).
        out.heads.sort_by_key(|h| std::cmp::Reverse(h.priority));
        Ok(out)
    }

    /// Rebalances the gates of `kinds` whose timer came (at most [`TIMERS_PER_CLAIM`],
    /// skipping those another transaction holds): how many.
    pub(in crate::backend::postgres) async fn gate_timers(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        kinds: &ClaimKinds,
    ) -> Result<i32, Error> {
        let names: Option<Vec<&str>> = match kinds {
            ClaimKinds::All => None,
            ClaimKinds::Some(set) => Some(set.iter().map(|(k, _)| k.as_str()).collect()),
        };
        db(sqlx::query_scalar(&self.claims.timers)
            .bind(queue)
            .bind(names)
            .bind(TIMERS_PER_CLAIM)
            .fetch_one(ex)
            .await)
    }

    /// Acks and retries, in one statement; the answers in order.
    pub(in crate::backend::postgres) async fn settle(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        batch: &[Settle],
    ) -> Result<Vec<Settled>, Error> {
        db(self.settle_raw(ex, queue, batch).await)
    }

    /// [`Sql::settle`] in a transaction of its own on a connection of `pool` whose lock
    /// waits end after `lock_timeout` (SQLSTATE 55P03): the raw error, so the caller can
    /// tell a contended row (a job an open transaction schedules a successor of) from a
    /// failure.
    pub(in crate::backend::postgres) async fn settle_tx(
        &self,
        pool: &PgPool,
        queue: &str,
        batch: &[Settle],
        lock_timeout: Option<Duration>,
    ) -> Result<Vec<Settled>, sqlx::Error> {
        let mut tx = pool.begin_with(super::begin(lock_timeout)).await?;
        let answers = self.settle_raw(&mut *tx, queue, batch).await?;
        tx.commit().await?;
        Ok(answers)
    }

    async fn settle_raw(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        batch: &[Settle],
    ) -> Result<Vec<Settled>, sqlx::Error> {
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
        let rows = sqlx::query(&self.claims.settle)
            .bind(queue)
            .bind(ack_ids)
            .bind(ack_tokens)
            .bind(ids)
            .bind(tokens)
            .bind(afters)
            .bind(errors)
            .bind(i32::try_from(self.plain.max_attempts).unwrap_or(i32::MAX))
            .fetch_all(ex)
            .await?;
        let mut done = std::collections::HashMap::new();
        for r in &rows {
            let id: String = r.try_get(1)?;
            let token: i64 = r.try_get(2)?;
            let at = dec(r.try_get(3)?);
            let answer = match r.try_get::<i32, _>(0)? {
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

    pub(in crate::backend::postgres) async fn extend(
        &self,
        ex: impl PgExecutor<'_>,
        queue: &str,
        id: &str,
        token: i64,
        by: i64,
    ) -> Result<bool, Error> {
        let row = db(sqlx::query(&self.claims.extend)
            .bind(queue)
            .bind(id)
            .bind(token)
            .bind(by)
            .fetch_optional(ex)
            .await)?;
        Ok(row.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim_text(kinds: Kinds) -> String {
        let names = Names::new("wheel_jobs");
        ClaimSql::new(&names).claim[kinds as usize].clone()
    }

    #[test]
    fn a_plain_claims_next_due_time_reads_a_bounded_window_per_level() {
        let plain = claim_text(Kinds::Plain);
        let window = format!("LIMIT {PLAIN_WINDOW}) w");
        assert_eq!(plain.matches(window.as_str()).count(), 1, "{plain}");
        // No plain row in a full window: the last row's run_at, a lower bound.
        assert!(plain.contains("count(*) = 1000 THEN max(w.t)"), "{plain}");
        assert!(plain.contains("j.run_at > (SELECT t FROM now)"), "{plain}");
        for kinds in [Kinds::All, Kinds::Named] {
            let text = claim_text(kinds);
            assert!(!text.contains(window.as_str()), "{text}");
        }
    }

    #[test]
    fn a_claim_of_several_kinds_reads_each_kinds_rows_up_to_its_room() {
        let names = Names::new("wheel_jobs");
        let set = ClaimSql::new(&names).claim_set;
        // Per kind, its levels' rows, stopped at its room; a named kind's through jobs_due
        // (the `<> ''` the partial index needs), the kind '' through jobs_pending.
        assert!(
            set.contains("unnest($6::text[], $7::bigint[], $8::integer[])"),
            "{set}"
        );
        assert!(set.contains("LIMIT ks.room) d)"), "{set}");
        assert!(
            set.contains("AND j.kind = l.kind AND j.kind <> '' AND j.priority = l.lvl"),
            "{set}"
        );
        // Expired leases count in a kind's room, and the total is $2.
        assert!(set.contains("PARTITION BY b.kind"), "{set}");
        assert!(set.contains("WHERE c.nth <= ks.room"), "{set}");
        // Series heads of the claimed kinds, the highest due one holding back the levels
        // below it of every kind of its member (caller), and the heads holding their place
        // in `picked`.
        assert!(
            set.contains("hk(kind, member) AS (SELECT kind, member FROM ks)"),
            "{set}"
        );
        assert!(
            set.contains(
                "AND l.lvl >= coalesce((SELECT f FROM hf WHERE hf.member = ks.member), -32768)"
            ),
            "{set}"
        );
        assert!(
            set.contains("UNION ALL SELECT NULL::tid, head_id, kind, 0, NULL::integer, false, 1, priority, at, false FROM heads)"),
            "{set}"
        );
    }

    #[test]
    fn the_next_lease_leaves_out_the_rows_this_claim_changed() {
        for kinds in Kinds::EACH {
            let text = claim_text(kinds);
            let next_lease = &text[text.find("next_lease AS").expect("next_lease")..];
            let next_lease = &next_lease[..next_lease.find("LIMIT 1)").expect("its end")];
            for step in ["leased x", "killed k", "handed h"] {
                let left_out = format!("NOT EXISTS (SELECT 1 FROM {step} WHERE");
                assert!(next_lease.contains(&left_out), "{step}: {next_lease}");
            }
        }
    }

    #[test]
    fn a_claim_reads_no_job_waiting_for_its_gate_and_locks_gates_in_order() {
        let names = Names::new("wheel_jobs");
        let sql = ClaimSql::new(&names);
        for text in sql.claim.iter().chain([&sql.claim_set]) {
            // Every read of pending jobs says `NOT waiting`: the due indexes' predicate.
            let pending = text.matches("token IS NULL").count();
            let admitted = text.matches("token IS NULL AND NOT j.waiting").count()
                + text.matches("token IS NULL AND NOT waiting").count();
            assert!(pending > 0 && pending == admitted, "{text}");
            // In order, never waiting on a gate another transaction holds.
            assert!(
                text.contains("ORDER BY g.kind, g.key FOR UPDATE SKIP LOCKED)"),
                "gates in order: {text}"
            );
            assert!(text.contains("0 * (SELECT count(*) FROM gl)"), "{text}");
            // A handed-over job's old gate too (its own, as it dies), with its successor's.
            assert!(
                text.contains("NOT p.expired OR p.attempt >= coalesce(p.most, $5) AS starts"),
                "{text}"
            );
            assert!(
                text.contains("SELECT next_kind, next_key FROM gk WHERE hands AND ngated"),
                "{text}"
            );
            // The rows whose gate is held are neither leased nor killed.
            for step in [
                "killed AS (DELETE FROM",
                "handed AS (UPDATE",
                "leased AS (UPDATE",
            ] {
                let from = &text[text.find(step).expect(step)..];
                assert!(
                    from[..from.find("WHERE").expect("where")].contains(" ok p"),
                    "{step}"
                );
            }
            assert!(text.contains("(SELECT t FROM timer))"), "{text}");
        }
        assert!(
            sql.settle.contains("ORDER BY g.kind, g.key FOR UPDATE)"),
            "{}",
            sql.settle
        );
        // A retried gated job waits in its gate.
        assert!(sql
            .settle
            .contains("waiting = (j.key_limit IS NOT NULL OR j.rate_starts IS NOT NULL)"));
    }

    #[test]
    fn due_series_heads_hold_back_the_levels_below_theirs() {
        for (kinds, hk) in [
            (
                Kinds::All,
                "hk(kind, member) AS (SELECT (SELECT min(s.kind) FROM",
            ),
            (Kinds::Plain, "hk(kind, member) AS (SELECT ''::text, 0)"),
            (Kinds::Named, "hk(kind, member) AS (SELECT $6::text, 0)"),
        ] {
            let text = claim_text(kinds);
            assert!(
                text.contains(
                    "WHERE l.lvl IS NOT NULL AND l.lvl >= coalesce((SELECT f FROM hf), -32768) LIMIT $2)"
                ),
                "{text}"
            );
            // The heads of the claimed kinds, by the series' kind and priority, the job
            // row the pending never-delivered job of both.
            assert!(text.contains(hk), "{kinds:?}: {text}");
            assert!(
                text.contains("AND j.attempt = 0 AND j.kind = s.kind AND j.priority = s.priority"),
                "{text}"
            );
            // Heads hold their place in the claim's order; those that kept it are answered.
            assert!(text.contains(
                "UNION ALL SELECT NULL::tid, head_id, 0, NULL::integer, false, 1, priority, at, false FROM heads) AS both_"
            ));
            assert!(text.contains(
                "FROM heads h WHERE EXISTS (SELECT 1 FROM picked p WHERE p.tid IS NULL AND p.id = h.head_id)"
            ));
        }
    }
}
