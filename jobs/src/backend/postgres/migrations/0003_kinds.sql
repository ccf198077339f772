-- Version 3: kinds, per-job options and priorities.
--
-- Every job stores its kind and priority, and its own attempts, backoff and lease (the
-- options resolved when it was scheduled). The options are nullable: NULL means the
-- queue's own value, read from the configuration of the handle that reads the row. The
-- rows of version 2 (and a series' occurrences) have NULL there, so they read as the plain
-- spec of the queue that opens them, whatever queue they belong to: many queues share a
-- schema, each with its own configuration, and the migration (per schema) cannot know
-- theirs. A schedule of this version writes every option, so a default changed later never
-- changes a job already scheduled. Adding columns that are nullable or have a constant
-- default rewrites no row. `hold_off` (nanoseconds, NULL = 0) is the job's own hold-off
-- (`Dedup::HoldOff`): its ack writes a tombstone in `held`. Dead rows keep it too: a
-- revived job is pending again with its whole spec.
--
-- `key` is the job's key (`JobOptions::key`, NULL: none), `key_limit` and `rate_starts` /
-- `rate_per` (nanoseconds) its limits (NULL: none); a job with either is *gated* (fairness
-- per key, `gates` below). `waiting` is true for a gated pending job its gate holds back:
-- it is in no due index, so no claim reads it (a running job never waits).
--
-- The `next_` columns hold a job's successor (`Dedup::AllowWhileRunning`): the run_at,
-- payload and resolved spec of a schedule that met the job running, all NULL when none
-- waits (`next_payload IS NOT NULL` is the flag every statement tests). A successor lives
-- in its job's row, not in a table of its own: whatever version of the row a statement
-- locks (an ack waiting on a schedule that stored one, a schedule waiting on an ack) holds
-- the successor that goes with it, so the ack hands over to what it read under the lock,
-- never to a row its snapshot cannot see. A job without one pays a test of its row's NULL
-- bitmap. It is never counted, listed, copied nor imported; dead rows never have one.
ALTER TABLE {schema}.jobs
    ADD COLUMN kind text COLLATE "C" NOT NULL DEFAULT '',
    ADD COLUMN priority smallint NOT NULL DEFAULT 0,
    ADD COLUMN max_attempts integer,
    ADD COLUMN backoff_first bigint,
    ADD COLUMN backoff_max bigint,
    ADD COLUMN lease bigint,
    ADD COLUMN hold_off bigint,
    ADD COLUMN key text COLLATE "C",
    ADD COLUMN key_limit integer,
    ADD COLUMN rate_starts integer,
    ADD COLUMN rate_per bigint,
    ADD COLUMN waiting boolean NOT NULL DEFAULT false,
    ADD COLUMN next_run_at bigint,
    ADD COLUMN next_payload bytea,
    ADD COLUMN next_kind text COLLATE "C",
    ADD COLUMN next_priority smallint,
    ADD COLUMN next_max_attempts integer,
    ADD COLUMN next_backoff_first bigint,
    ADD COLUMN next_backoff_max bigint,
    ADD COLUMN next_lease bigint,
    ADD COLUMN next_hold_off bigint,
    ADD COLUMN next_key text COLLATE "C",
    ADD COLUMN next_key_limit integer,
    ADD COLUMN next_rate_starts integer,
    ADD COLUMN next_rate_per bigint;
ALTER TABLE {schema}.dead
    ADD COLUMN kind text COLLATE "C" NOT NULL DEFAULT '',
    ADD COLUMN priority smallint NOT NULL DEFAULT 0,
    ADD COLUMN max_attempts integer,
    ADD COLUMN backoff_first bigint,
    ADD COLUMN backoff_max bigint,
    ADD COLUMN lease bigint,
    ADD COLUMN hold_off bigint,
    ADD COLUMN key text COLLATE "C",
    ADD COLUMN key_limit integer,
    ADD COLUMN rate_starts integer,
    ADD COLUMN rate_per bigint;

-- Tombstones of the ids acked with a hold-off: a schedule of `id` is refused while the
-- server's clock is before `until` (nanoseconds), in any dedup mode. Written by the ack's
-- own statement (so in the ack's transaction, `ack_in` included); a schedule meeting an
-- expired one deletes it, and each claim deletes at most 64 expired ones, earliest first
-- (`held_until`). Never counted, listed nor copied.
CREATE TABLE {schema}.held (
    queue text COLLATE "C" NOT NULL,
    id text COLLATE "C" NOT NULL,
    until bigint NOT NULL,
    PRIMARY KEY (queue, id)
);
CREATE INDEX held_until ON {schema}.held (queue, until);

-- The due indexes, both read one priority level at a time (a claim finds the levels in use
-- by a skip scan, then reads each level's due head with `run_at <= now`, so no scan walks a
-- level's future jobs): every kind (`run`, `consume`, lists and counts of pending jobs, the
-- next due time), and one named kind (`run_kind`, `consume_kind`), which never reads
-- another kind's rows. Jobs of the kind '' (every job scheduled without options) are left
-- out of the second: a plain schedule writes one due index entry, as in version 2 (two cost
-- 43 % more WAL per inserted row). A claim of the kind '' reads the first, past other
-- kinds' due jobs of its levels.
--
-- Neither holds the waiting jobs of a gate: a tenant's backlog held back by its key's limit
-- costs a claim nothing. `jobs_waiting` orders them for lists of pending jobs, `jobs_gate`
-- orders a gate's pending jobs, admitted and waiting apart, in key order (run_at, priority
-- desc, id: due time first, so a job of a high priority due tomorrow never holds a slot the
-- key's due jobs need) for its rebalance; only gated rows are in them.
DROP INDEX {schema}.jobs_pending;
CREATE INDEX jobs_pending ON {schema}.jobs (queue, priority DESC, run_at, id)
    WHERE token IS NULL AND NOT waiting;
CREATE INDEX jobs_due ON {schema}.jobs (queue, kind, priority DESC, run_at, id)
    WHERE token IS NULL AND NOT waiting AND kind <> '';
CREATE INDEX jobs_waiting ON {schema}.jobs (queue, run_at, id) WHERE waiting;
CREATE INDEX jobs_gate ON {schema}.jobs (queue, kind, key, waiting, run_at, priority DESC, id)
    WHERE token IS NULL AND (key_limit IS NOT NULL OR rate_starts IS NOT NULL);

-- Fairness per key: one row per (queue, kind, key) of gated jobs. `running` counts its
-- leased jobs, `admitted` its pending jobs in the due indexes (`waiting` false), its rate
-- window opened at `window_start` with `started` starts in it, and the limits of the job
-- that entered last (`key_limit`, `rate_starts`, `rate_per`; a retry does not set them).
-- `wake_at` is the end of an open rate window when the gate must be looked at then (jobs
-- wait for it, or the gate is empty and is deleted then), or 10 ms on when its rebalance
-- left room because a waiting row was held (below): claims rebalance the gates whose
-- time has come (`gate_timers`). A gate without running, admitted or waiting jobs and
-- without an open window is deleted by the rebalance that finds it so.
--
-- Every statement on `jobs` keeps them: its trigger (below) rebalances each gate its rows
-- touched, in (kind, key) order, after the statement locked those rows: job rows first,
-- then gate rows, and within a rebalance the jobs it moves are locked `SKIP LOCKED` (a row
-- another transaction holds is being changed by a statement that rebalances its gate after
-- it), so no rebalance waits on a job row while holding a gate.
CREATE TABLE {schema}.gates (
    queue text COLLATE "C" NOT NULL,
    kind text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    running integer NOT NULL DEFAULT 0,
    admitted integer NOT NULL DEFAULT 0,
    window_start bigint,
    started integer NOT NULL DEFAULT 0,
    key_limit integer,
    rate_starts integer,
    rate_per bigint,
    wake_at bigint,
    PRIMARY KEY (queue, kind, key)
);
CREATE INDEX gates_wake ON {schema}.gates (queue, wake_at) WHERE wake_at IS NOT NULL;

-- rebalance(gate, now): the gate's running changes by `d_run`, `d_start` jobs started
-- (opening a window if none is open); an `enter`ing job sets the limits. Then the first
-- `cap` pending jobs in key order (run_at, priority desc, id) are admitted and the others
-- wait, where cap = min(limit - running, rate's starts - started in the open window), at
-- least 0: demotion, promotion and the swap in one step, O(cap + admitted) rows read. Rows another
-- transaction holds are left as they are (it rebalances after its change) and counted
-- where they are. Its own updates of `waiting` set `wheel_jobs.gating` so the trigger they
-- fire leaves the gates alone; their wake-ups go out as any update's (a promoted job due
-- soon wakes idle consumers).
CREATE FUNCTION {schema}.gate_rebalance(q text, k text, ky text, d_run integer, d_start integer,
    enter boolean, lim integer, rs integer, rp bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    g {schema}.gates;
    t bigint := (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint;
    open_ boolean;
    cap integer := 2147483647;
    tot integer;
    kept integer;
    cut boolean;
    b_run bigint;
    b_pri integer;
    b_id text;
    extra integer;
    dem text[];
    up text[];
    n integer;
    held boolean;
    stuck boolean;
    -- How soon a gate whose promotion skipped a held row is looked at again (10 ms).
    retry constant bigint := 10000000;
BEGIN
    INSERT INTO {schema}.gates AS x (queue, kind, key, running, key_limit, rate_starts, rate_per)
        VALUES (q, k, ky, greatest(d_run, 0), lim, rs, rp)
        ON CONFLICT (queue, kind, key) DO UPDATE SET running = greatest(x.running + d_run, 0),
            key_limit = CASE WHEN enter THEN lim ELSE x.key_limit END,
            rate_starts = CASE WHEN enter THEN rs ELSE x.rate_starts END,
            rate_per = CASE WHEN enter THEN rp ELSE x.rate_per END
        RETURNING * INTO g;
    open_ := g.rate_per IS NOT NULL AND g.window_start IS NOT NULL AND t < g.window_start + g.rate_per;
    IF d_start > 0 AND g.rate_per IS NOT NULL THEN
        IF NOT open_ THEN
            g.window_start := t;
            g.started := 0;
            open_ := true;
        END IF;
        g.started := g.started + d_start;
    END IF;
    IF g.key_limit IS NOT NULL THEN
        cap := least(cap, greatest(g.key_limit - g.running, 0));
    END IF;
    IF g.rate_starts IS NOT NULL THEN
        cap := least(cap, greatest(g.rate_starts - CASE WHEN open_ THEN g.started ELSE 0 END, 0));
    END IF;
    -- The first `cap` pending jobs in key order, merged from the admitted and the waiting
    -- (each an index range read in key order): how many, how many of them are admitted,
    -- and the last of them, the boundary (`cut`: jobs after it wait; none when fewer than
    -- `cap` are pending). Rows are placed against the boundary, not looked up in a list:
    -- O(cap + admitted) rows read, whatever the limit.
    SELECT count(*), count(*) FILTER (WHERE NOT x.waiting) INTO tot, kept FROM (
        (SELECT j.id, j.priority, j.run_at, j.waiting FROM {schema}.jobs j WHERE j.queue = q
          AND j.kind = k AND j.key = ky AND NOT j.waiting AND j.token IS NULL
          AND (j.key_limit IS NOT NULL OR j.rate_starts IS NOT NULL)
          ORDER BY j.run_at, j.priority DESC, j.id LIMIT cap)
        UNION ALL
        (SELECT j.id, j.priority, j.run_at, j.waiting FROM {schema}.jobs j WHERE j.queue = q
          AND j.kind = k AND j.key = ky AND j.waiting AND j.token IS NULL
          AND (j.key_limit IS NOT NULL OR j.rate_starts IS NOT NULL)
          ORDER BY j.run_at, j.priority DESC, j.id LIMIT cap)
        ORDER BY 3, 2 DESC, 1 LIMIT cap) x;
    cut := tot >= cap;
    IF cut AND cap > 0 THEN
        SELECT x.run_at, x.priority, x.id INTO b_run, b_pri, b_id FROM (
            (SELECT j.id, j.priority, j.run_at FROM {schema}.jobs j WHERE j.queue = q
              AND j.kind = k AND j.key = ky AND NOT j.waiting AND j.token IS NULL
              AND (j.key_limit IS NOT NULL OR j.rate_starts IS NOT NULL)
              ORDER BY j.run_at, j.priority DESC, j.id LIMIT cap)
            UNION ALL
            (SELECT j.id, j.priority, j.run_at FROM {schema}.jobs j WHERE j.queue = q
              AND j.kind = k AND j.key = ky AND j.waiting AND j.token IS NULL
              AND (j.key_limit IS NOT NULL OR j.rate_starts IS NOT NULL)
              ORDER BY j.run_at, j.priority DESC, j.id LIMIT cap)
            ORDER BY 3, 2 DESC, 1 OFFSET cap - 1 LIMIT 1) x;
    END IF;
    -- The admitted jobs after the boundary wait, but for those another transaction holds:
    -- they stay admitted (one may be a claim's lease), and take the room of as many
    -- promotions, so admitted never passes cap whichever way their change ends.
    SELECT count(*) INTO extra FROM {schema}.jobs j WHERE cut AND j.queue = q AND j.kind = k
        AND j.key = ky AND NOT j.waiting AND j.token IS NULL
        AND (j.key_limit IS NOT NULL OR j.rate_starts IS NOT NULL)
        AND (cap = 0 OR j.run_at >= b_run AND (j.run_at, -j.priority, j.id) > (b_run, -b_pri, b_id));
    SELECT array_agg(x.id) INTO dem FROM (SELECT j.id FROM {schema}.jobs j WHERE cut AND j.queue = q
        AND j.kind = k AND j.key = ky AND NOT j.waiting AND j.token IS NULL
        AND (j.key_limit IS NOT NULL OR j.rate_starts IS NOT NULL)
        AND (cap = 0 OR j.run_at >= b_run AND (j.run_at, -j.priority, j.id) > (b_run, -b_pri, b_id))
        FOR UPDATE SKIP LOCKED) x;
    SELECT array_agg(x.id) INTO up FROM (SELECT j.id FROM {schema}.jobs j WHERE j.queue = q
        AND j.kind = k AND j.key = ky AND j.waiting AND j.token IS NULL
        AND (j.key_limit IS NOT NULL OR j.rate_starts IS NOT NULL)
        AND (NOT cut OR j.run_at <= b_run AND (j.run_at, -j.priority, j.id) <= (b_run, -b_pri, b_id))
        ORDER BY j.run_at, j.priority DESC, j.id
        LIMIT greatest(cap - kept - (extra - coalesce(cardinality(dem), 0)), 0)
        FOR UPDATE SKIP LOCKED) x;
    IF dem IS NOT NULL OR up IS NOT NULL THEN
        PERFORM set_config('wheel_jobs.gating', 'on', true);
        UPDATE {schema}.jobs SET waiting = true WHERE queue = q AND id = ANY(dem);
        UPDATE {schema}.jobs SET waiting = false WHERE queue = q AND id = ANY(up);
        PERFORM set_config('wheel_jobs.gating', '', true);
    END IF;
    SELECT count(*) INTO n FROM {schema}.jobs j WHERE j.queue = q AND j.kind = k AND j.key = ky
        AND NOT j.waiting AND j.token IS NULL AND (j.key_limit IS NOT NULL OR j.rate_starts IS NOT NULL);
    held := EXISTS (SELECT 1 FROM {schema}.jobs j WHERE j.queue = q AND j.kind = k AND j.key = ky
        AND j.waiting AND j.token IS NULL AND (j.key_limit IS NOT NULL OR j.rate_starts IS NOT NULL));
    IF g.running = 0 AND n = 0 AND NOT held AND NOT open_ THEN
        DELETE FROM {schema}.gates WHERE queue = q AND kind = k AND key = ky;
        RETURN;
    END IF;
    -- Room left while jobs wait: a promotion skipped a waiting row another transaction
    -- holds without changing it (a schedule of its id that met it, `ON CONFLICT … WHERE
    -- false`, held to the end of a caller's `schedule_in`; a series step's read), whose
    -- commit rebalances nothing. The gate's timer comes at once (`retry`), so the next claim
    -- of its kind rebalances it again, and idle consumers are woken for it.
    stuck := held AND n < cap;
    UPDATE {schema}.gates SET admitted = n, window_start = g.window_start, started = g.started,
        wake_at = CASE WHEN stuck THEN t + retry WHEN open_ AND (held OR g.running = 0 AND n = 0)
            THEN g.window_start + g.rate_per END
        WHERE queue = q AND kind = k AND key = ky;
    IF stuck THEN
        PERFORM pg_notify(trim(both '"' FROM '{schema}') || ':wake', (t + retry)::text || ' ' || q);
    END IF;
END $$;

-- The gates of `q` (of the kinds `kinds`, NULL: every kind) whose `wake_at` has come, at
-- most `most`, rebalanced in (kind, key) order, skipping those another transaction holds
-- (it rebalances them): how many. A claim runs it when its statement saw one due.
CREATE FUNCTION {schema}.gate_timers(q text, kinds text[], most integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    g record;
    n integer := 0;
BEGIN
    FOR g IN SELECT x.kind, x.key FROM {schema}.gates x WHERE x.queue = q AND x.wake_at <= (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint
        AND (kinds IS NULL OR x.kind = ANY(kinds)) ORDER BY x.kind, x.key LIMIT most
        FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM {schema}.gate_rebalance(q, g.kind, g.key, 0, 0, false, NULL, NULL, NULL);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;

-- Counters per queue and kind. The rows of version 2 are the kind '' (every job had it).
ALTER TABLE {schema}.counts ADD COLUMN kind text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE {schema}.counts DROP CONSTRAINT counts_pkey, ADD PRIMARY KEY (queue, kind, slot);
ALTER TABLE {schema}.count_deltas ADD COLUMN kind text COLLATE "C" NOT NULL DEFAULT '';

-- The triggers of version 2, their deltas grouped by queue and kind: an update's old rows
-- count out of their kind and its new rows into theirs, so a Replace that changes a job's
-- kind moves its count from one kind to the other. A wake-up is for jobs that do not wait
-- for their gate. Then the gates the rows touched are rebalanced (`gate_rebalance`).
CREATE OR REPLACE FUNCTION {schema}.jobs_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    c record;
BEGIN
    INSERT INTO {schema}.count_deltas (queue, kind, pending, running, dead)
        SELECT queue, kind, count(*) FILTER (WHERE token IS NULL), count(*) FILTER (WHERE token IS NOT NULL), 0
        FROM new_rows GROUP BY queue, kind;
    PERFORM pg_notify(TG_TABLE_SCHEMA || ':wake', min(run_at)::text || ' ' || queue)
        FROM new_rows WHERE token IS NULL AND NOT waiting GROUP BY queue
        HAVING min(run_at) <= (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint + 60000000000;
    IF current_setting('wheel_jobs.gating', true) IS DISTINCT FROM 'on' THEN
        FOR c IN SELECT queue, kind, key, count(*) FILTER (WHERE token IS NOT NULL)::int AS run,
                (array_agg(key_limit ORDER BY id))[1] AS lim, (array_agg(rate_starts ORDER BY id))[1] AS rs,
                (array_agg(rate_per ORDER BY id))[1] AS rp
            FROM new_rows WHERE key_limit IS NOT NULL OR rate_starts IS NOT NULL
            GROUP BY queue, kind, key ORDER BY queue, kind, key
        LOOP
            PERFORM {schema}.gate_rebalance(c.queue, c.kind, c.key, c.run, 0, true, c.lim, c.rs, c.rp);
        END LOOP;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION {schema}.jobs_updated() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    c record;
    quick boolean;
BEGIN
    INSERT INTO {schema}.count_deltas (queue, kind, pending, running, dead)
        SELECT queue, kind, sum(p), sum(r), 0 FROM (
            SELECT queue, kind, (token IS NULL)::int AS p, (token IS NOT NULL)::int AS r FROM new_rows
            UNION ALL
            SELECT queue, kind, -(token IS NULL)::int, -(token IS NOT NULL)::int FROM old_rows
        ) AS changes GROUP BY queue, kind HAVING sum(p) <> 0 OR sum(r) <> 0;
    -- A job made pending again (a retry) or moved (a reschedule) may be due earlier than
    -- what an idle consumer sleeps toward: a wake-up if it is due within 60 s.
    PERFORM pg_notify(TG_TABLE_SCHEMA || ':wake', min(run_at)::text || ' ' || queue)
        FROM new_rows WHERE token IS NULL AND NOT waiting GROUP BY queue
        HAVING min(run_at) <= (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint + 60000000000;
    IF current_setting('wheel_jobs.gating', true) IS DISTINCT FROM 'on' THEN
        IF EXISTS (SELECT 1 FROM new_rows WHERE key_limit IS NOT NULL OR rate_starts IS NOT NULL)
            OR EXISTS (SELECT 1 FROM old_rows WHERE key_limit IS NOT NULL OR rate_starts IS NOT NULL) THEN
            -- Each changed row counts out of its old gate and into its new one; a lease
            -- renewed or redelivered (running before and after, same gate) changes nothing.
            -- A start is pending -> running; a job entering is one made pending but by a
            -- retry (attempt > 0 after running).
            --
            -- The starts' shortcut below holds only if the gate's counters were its rows'
            -- before this statement's starts. A claim's kills fire `jobs_deleted` first,
            -- and a rebalance there already sees this statement's leased rows running
            -- while `running` does not count them: its cap was too high, and only a
            -- rebalance counting the starts demotes what it promoted too many. So when
            -- that trigger ran one (`wheel_jobs.rebalanced`, set by it, read and cleared
            -- here), every gate takes the rebalance. (Left set by a statement without
            -- gated updates, it costs a later statement of the transaction the shortcut,
            -- never a wrong count.)
            quick := current_setting('wheel_jobs.rebalanced', true) IS DISTINCT FROM 'on';
            IF NOT quick THEN
                PERFORM set_config('wheel_jobs.rebalanced', '', true);
            END IF;
            FOR c IN WITH per AS (SELECT v.queue, v.kind, v.key, sum(v.run)::int AS run, sum(v.start)::int AS start,
                    bool_or(v.enter) AS enter, bool_and(s.st) AS starts,
                    (array_agg(v.lim ORDER BY v.enter DESC, v.id))[1] AS lim,
                    (array_agg(v.rs ORDER BY v.enter DESC, v.id))[1] AS rs,
                    (array_agg(v.rp ORDER BY v.enter DESC, v.id))[1] AS rp
                FROM new_rows n JOIN old_rows o ON o.queue = n.queue AND o.id = n.id
                CROSS JOIN LATERAL (VALUES
                    (n.queue, n.kind, n.key, (n.token IS NOT NULL)::int,
                     (n.token IS NOT NULL AND o.token IS NULL)::int,
                     n.token IS NULL AND (o.token IS NULL OR n.attempt = 0),
                     n.key_limit, n.rate_starts, n.rate_per, n.id,
                     n.key_limit IS NOT NULL OR n.rate_starts IS NOT NULL),
                    (o.queue, o.kind, o.key, -(o.token IS NOT NULL)::int, 0, false,
                     o.key_limit, o.rate_starts, o.rate_per, o.id,
                     o.key_limit IS NOT NULL OR o.rate_starts IS NOT NULL)
                ) AS v(queue, kind, key, run, start, enter, lim, rs, rp, id, gated)
                CROSS JOIN LATERAL (SELECT n.token IS NOT NULL AND o.token IS NULL AND NOT o.waiting
                    AND o.kind = n.kind AND o.key IS NOT DISTINCT FROM n.key) AS s(st)
                WHERE v.gated AND NOT (o.token IS NOT NULL AND n.token IS NOT NULL
                    AND o.kind = n.kind AND o.key IS NOT DISTINCT FROM n.key)
                GROUP BY v.queue, v.kind, v.key),
                -- Starts alone (admitted jobs leased, a claim's) of a gate with a limit
                -- and no rate: its cap and its admitted jobs both shrink by as many, so
                -- admitted = min(pending, cap) and the order still hold: the counters
                -- move, nothing is rebalanced. One update for every such gate (the claim
                -- holds them: its `gl`).
                fast AS (UPDATE {schema}.gates g SET running = g.running + v.start,
                    admitted = greatest(g.admitted - v.start, 0)
                    FROM per v WHERE quick AND v.starts AND NOT v.enter AND v.run = v.start AND g.queue = v.queue
                    AND g.kind = v.kind AND g.key = v.key AND g.key_limit IS NOT NULL
                    AND g.rate_starts IS NULL AND g.rate_per IS NULL
                    RETURNING g.queue, g.kind, g.key)
                SELECT v.* FROM per v WHERE NOT EXISTS (SELECT 1 FROM fast f WHERE f.queue = v.queue
                    AND f.kind = v.kind AND f.key = v.key)
                ORDER BY v.queue, v.kind, v.key
            LOOP
                PERFORM {schema}.gate_rebalance(c.queue, c.kind, c.key, c.run, c.start, c.enter,
                    c.lim, c.rs, c.rp);
            END LOOP;
        END IF;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION {schema}.jobs_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    c record;
    dq text[];
    dk text[];
    dky text[];
    dmore boolean[];
    more boolean;
BEGIN
    INSERT INTO {schema}.count_deltas (queue, kind, pending, running, dead)
        SELECT queue, kind, -count(*) FILTER (WHERE token IS NULL), -count(*) FILTER (WHERE token IS NOT NULL), 0
        FROM old_rows GROUP BY queue, kind;
    IF current_setting('wheel_jobs.gating', true) IS DISTINCT FROM 'on'
        AND EXISTS (SELECT 1 FROM old_rows WHERE key_limit IS NOT NULL OR rate_starts IS NOT NULL) THEN
        -- Releases alone (running jobs acked or dead: a settle's, a claim's kills, whose
        -- `gl` holds their gates already) of a gate with a limit and no rate: its cap grows
        -- by `room` (the limit's room after, less before), and the jobs admitted before
        -- were at most the cap before, so promoting its first `room` waiting jobs in key
        -- order (after every admitted one: the order holds) keeps admitted = min(pending,
        -- cap), and a gate with none waiting only counts. One statement for every such
        -- gate of the statement, not a rebalance each (an ack of a key's running job in a
        -- busy backlog: one promotion). The rest take `gate_rebalance` (`more` says if
        -- any): other deletes (a cancel, a Replace moving a job), gates with a rate (a
        -- window may have closed since) or counters out of step, and the gates `done`
        -- here that need more: a promotion short of its room while a job still waits (a
        -- row another transaction holds: the stuck case there), a gate left with nothing
        -- running nor pending (deleted there).
        PERFORM set_config('wheel_jobs.gating', 'on', true);
        WITH per AS (SELECT queue, kind, key, -count(*)::int AS run, bool_and(token IS NOT NULL) AS freed
                FROM old_rows WHERE key_limit IS NOT NULL OR rate_starts IS NOT NULL
                GROUP BY queue, kind, key),
            g AS (SELECT g.queue, g.kind, g.key, g.running + v.run AS r,
                    greatest(g.key_limit - g.running - v.run, 0) - greatest(g.key_limit - g.running, 0) AS room
                FROM per v JOIN {schema}.gates g ON g.queue = v.queue AND g.kind = v.kind AND g.key = v.key
                WHERE v.freed AND g.key_limit IS NOT NULL AND g.rate_starts IS NULL AND g.rate_per IS NULL
                AND g.running + v.run >= 0 ORDER BY g.kind, g.key FOR UPDATE OF g),
            -- The first `room` waiting jobs in key order, held ones included (a `SKIP
            -- LOCKED` read with that `LIMIT` would pass over a held row and promote one
            -- after it, out of key order); then those of them no other transaction holds,
            -- the ones promoted. A held one makes the promotion short of its room while a
            -- job waits: the gate takes the rebalance (its stuck case).
            first AS MATERIALIZED (SELECT g.queue, g.kind, g.key, w.id FROM g CROSS JOIN LATERAL (
                    SELECT j.id FROM {schema}.jobs j WHERE j.queue = g.queue AND j.kind = g.kind
                    AND j.key = g.key AND j.waiting AND j.token IS NULL
                    AND (j.key_limit IS NOT NULL OR j.rate_starts IS NOT NULL)
                    ORDER BY j.run_at, j.priority DESC, j.id LIMIT g.room) w
                WHERE g.room > 0),
            up AS MATERIALIZED (SELECT f.queue, f.kind, f.key, j.id FROM first f
                JOIN {schema}.jobs j ON j.queue = f.queue AND j.id = f.id
                WHERE j.kind = f.kind AND j.key = f.key AND j.waiting AND j.token IS NULL
                AND (j.key_limit IS NOT NULL OR j.rate_starts IS NOT NULL)
                FOR UPDATE OF j SKIP LOCKED),
            moved AS (UPDATE {schema}.jobs j SET waiting = false FROM up
                WHERE j.queue = up.queue AND j.id = up.id RETURNING up.queue, up.kind, up.key),
            n AS (SELECT queue, kind, key, count(*)::int AS n FROM moved GROUP BY queue, kind, key),
            -- This statement's snapshot: the rows `moved` promotes still wait in it.
            done AS (UPDATE {schema}.gates x SET running = g.r, admitted = x.admitted + coalesce(n.n, 0)
                FROM g LEFT JOIN n ON n.queue = g.queue AND n.kind = g.kind AND n.key = g.key
                WHERE x.queue = g.queue AND x.kind = g.kind AND x.key = g.key
                RETURNING x.queue, x.kind, x.key,
                    g.room > coalesce(n.n, 0) AND EXISTS (SELECT 1 FROM {schema}.jobs j
                        WHERE j.queue = g.queue AND j.kind = g.kind AND j.key = g.key AND j.waiting
                        AND j.token IS NULL AND (j.key_limit IS NOT NULL OR j.rate_starts IS NOT NULL)
                        AND NOT EXISTS (SELECT 1 FROM up WHERE up.queue = j.queue AND up.id = j.id))
                    OR g.r = 0 AND NOT EXISTS (SELECT 1 FROM {schema}.jobs j WHERE j.queue = g.queue
                        AND j.kind = g.kind AND j.key = g.key AND j.token IS NULL
                        AND (j.key_limit IS NOT NULL OR j.rate_starts IS NOT NULL)) AS more)
        SELECT array_agg(d.queue), array_agg(d.kind), array_agg(d.key), array_agg(d.more),
                coalesce(bool_or(d.more), false) OR count(*) < (SELECT count(*) FROM per)
            INTO dq, dk, dky, dmore, more FROM done d;
        PERFORM set_config('wheel_jobs.gating', '', true);
        IF more THEN
            -- The same statement's starts (a claim's leases, `jobs_updated` after this)
            -- must then take the rebalance too: this one counts their rows running
            -- before `running` does.
            PERFORM set_config('wheel_jobs.rebalanced', 'on', true);
            FOR c IN SELECT v.*, d.queue IS NOT NULL AS done FROM (SELECT queue, kind, key,
                    -count(*) FILTER (WHERE token IS NOT NULL)::int AS run,
                    (array_agg(key_limit ORDER BY id))[1] AS lim, (array_agg(rate_starts ORDER BY id))[1] AS rs,
                    (array_agg(rate_per ORDER BY id))[1] AS rp
                FROM old_rows WHERE key_limit IS NOT NULL OR rate_starts IS NOT NULL
                GROUP BY queue, kind, key) v
                LEFT JOIN unnest(dq, dk, dky, dmore) AS d(queue, kind, key, more)
                    ON d.queue = v.queue AND d.kind = v.kind AND d.key = v.key
                WHERE d.queue IS NULL OR d.more
                ORDER BY v.queue, v.kind, v.key
            LOOP
                PERFORM {schema}.gate_rebalance(c.queue, c.kind, c.key, CASE WHEN c.done THEN 0 ELSE c.run END,
                    0, false, c.lim, c.rs, c.rp);
            END LOOP;
        END IF;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION {schema}.dead_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.count_deltas (queue, kind, pending, running, dead)
        SELECT queue, kind, 0, 0, count(*) FROM new_rows GROUP BY queue, kind;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION {schema}.dead_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.count_deltas (queue, kind, pending, running, dead)
        SELECT queue, kind, 0, 0, -count(*) FROM old_rows GROUP BY queue, kind;
    RETURN NULL;
END $$;
