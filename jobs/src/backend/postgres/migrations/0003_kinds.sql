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
    ADD COLUMN next_run_at bigint,
    ADD COLUMN next_payload bytea,
    ADD COLUMN next_kind text COLLATE "C",
    ADD COLUMN next_priority smallint,
    ADD COLUMN next_max_attempts integer,
    ADD COLUMN next_backoff_first bigint,
    ADD COLUMN next_backoff_max bigint,
    ADD COLUMN next_lease bigint,
    ADD COLUMN next_hold_off bigint;
ALTER TABLE {schema}.dead
    ADD COLUMN kind text COLLATE "C" NOT NULL DEFAULT '',
    ADD COLUMN priority smallint NOT NULL DEFAULT 0,
    ADD COLUMN max_attempts integer,
    ADD COLUMN backoff_first bigint,
    ADD COLUMN backoff_max bigint,
    ADD COLUMN lease bigint,
    ADD COLUMN hold_off bigint;

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
DROP INDEX {schema}.jobs_pending;
CREATE INDEX jobs_pending ON {schema}.jobs (queue, priority DESC, run_at, id) WHERE token IS NULL;
CREATE INDEX jobs_due ON {schema}.jobs (queue, kind, priority DESC, run_at, id)
    WHERE token IS NULL AND kind <> '';

-- Counters per queue and kind. The rows of version 2 are the kind '' (every job had it).
ALTER TABLE {schema}.counts ADD COLUMN kind text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE {schema}.counts DROP CONSTRAINT counts_pkey, ADD PRIMARY KEY (queue, kind, slot);
ALTER TABLE {schema}.count_deltas ADD COLUMN kind text COLLATE "C" NOT NULL DEFAULT '';

-- The triggers of version 2, their deltas grouped by queue and kind: an update's old rows
-- count out of their kind and its new rows into theirs, so a Replace that changes a job's
-- kind moves its count from one kind to the other.
CREATE OR REPLACE FUNCTION {schema}.jobs_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.count_deltas (queue, kind, pending, running, dead)
        SELECT queue, kind, count(*) FILTER (WHERE token IS NULL), count(*) FILTER (WHERE token IS NOT NULL), 0
        FROM new_rows GROUP BY queue, kind;
    PERFORM pg_notify(TG_TABLE_SCHEMA || ':wake', min(run_at)::text || ' ' || queue)
        FROM new_rows WHERE token IS NULL GROUP BY queue
        HAVING min(run_at) <= (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint + 60000000000;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION {schema}.jobs_updated() RETURNS trigger LANGUAGE plpgsql AS $$
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
        FROM new_rows WHERE token IS NULL GROUP BY queue
        HAVING min(run_at) <= (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint + 60000000000;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION {schema}.jobs_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.count_deltas (queue, kind, pending, running, dead)
        SELECT queue, kind, -count(*) FILTER (WHERE token IS NULL), -count(*) FILTER (WHERE token IS NOT NULL), 0
        FROM old_rows GROUP BY queue, kind;
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
