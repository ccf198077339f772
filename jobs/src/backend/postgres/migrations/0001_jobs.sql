-- wheel-jobs schema version 1: today's job fields. `{schema}` is the quoted schema name
-- (validated by names.rs), the only text spliced in. Times are bigint nanoseconds since the
-- Unix epoch from the server's clock_timestamp(); i64::MAX means "never" (u64::MAX above).
-- Ids and queue names use the "C" collation: byte order, the order every backend lists in.

-- Pending and running jobs only: the hot table, kept small (dead rows move to `dead`).
-- Pending: token and lease_until are null. Running: both set.
CREATE TABLE {schema}.jobs (
    queue text COLLATE "C" NOT NULL,
    id text COLLATE "C" NOT NULL,
    run_at bigint NOT NULL,
    attempt integer NOT NULL DEFAULT 0,
    token bigint,
    lease_until bigint,
    last_error text,
    payload bytea NOT NULL,
    PRIMARY KEY (queue, id),
    CHECK ((token IS NULL) = (lease_until IS NULL))
) WITH (fillfactor = 80);

-- The due index of pending jobs (claims, `list` of pending, `counts`' next due).
CREATE INDEX jobs_pending ON {schema}.jobs (queue, run_at, id) WHERE token IS NULL;
-- Running jobs by lease end (claims of ended leases, `list` of running).
CREATE INDEX jobs_running ON {schema}.jobs (queue, lease_until, id) WHERE token IS NOT NULL;

CREATE TABLE {schema}.dead (
    queue text COLLATE "C" NOT NULL,
    id text COLLATE "C" NOT NULL,
    run_at bigint NOT NULL,
    attempt integer NOT NULL,
    died_at bigint NOT NULL,
    last_error text,
    payload bytea NOT NULL,
    PRIMARY KEY (queue, id)
);
CREATE INDEX dead_by_death ON {schema}.dead (queue, died_at, id);

-- Recurring series: the head is an ordinary pending job whose id is `head_id`.
CREATE TABLE {schema}.series (
    queue text COLLATE "C" NOT NULL,
    name text COLLATE "C" NOT NULL,
    runs bigint NOT NULL,
    head bigint,
    head_id text COLLATE "C",
    last bigint,
    rule text NOT NULL,
    payload bytea NOT NULL,
    PRIMARY KEY (queue, name)
);
CREATE INDEX series_by_head ON {schema}.series (queue, head) WHERE head IS NOT NULL;

CREATE TABLE {schema}.queues (
    queue text COLLATE "C" PRIMARY KEY,
    paused boolean NOT NULL DEFAULT false
);

-- Counters per state: folded slot rows (at most 16 per queue) plus the changes not yet
-- folded. Triggers append one delta row per statement and queue; a fold (claims, `counts`)
-- moves them into a slot. No COUNT(*), and no row every insert must lock.
CREATE TABLE {schema}.counts (
    queue text COLLATE "C" NOT NULL,
    slot smallint NOT NULL,
    pending bigint NOT NULL DEFAULT 0,
    running bigint NOT NULL DEFAULT 0,
    dead bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, slot)
);
CREATE TABLE {schema}.count_deltas (
    queue text COLLATE "C" NOT NULL,
    pending bigint NOT NULL,
    running bigint NOT NULL,
    dead bigint NOT NULL
);
CREATE INDEX count_deltas_queue ON {schema}.count_deltas (queue);

-- Counts and wake-ups follow every statement on `jobs` and `dead`, whoever runs it (the
-- library or an application's transaction through `schedule_in`). A wake is
-- `pg_notify('<schema>:wake', '<run_at> <queue>')`, sent inside the statement's
-- transaction: it is delivered at commit, and never for a rollback.
CREATE FUNCTION {schema}.jobs_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.count_deltas (queue, pending, running, dead)
        SELECT queue, count(*) FILTER (WHERE token IS NULL), count(*) FILTER (WHERE token IS NOT NULL), 0
        FROM new_rows GROUP BY queue;
    PERFORM pg_notify(TG_TABLE_SCHEMA || ':wake', min(run_at)::text || ' ' || queue)
        FROM new_rows WHERE token IS NULL GROUP BY queue;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_inserted AFTER INSERT ON {schema}.jobs
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {schema}.jobs_inserted();

CREATE FUNCTION {schema}.jobs_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.count_deltas (queue, pending, running, dead)
        SELECT queue, sum(p), sum(r), 0 FROM (
            SELECT queue, (token IS NULL)::int AS p, (token IS NOT NULL)::int AS r FROM new_rows
            UNION ALL
            SELECT queue, -(token IS NULL)::int, -(token IS NOT NULL)::int FROM old_rows
        ) AS changes GROUP BY queue HAVING sum(p) <> 0 OR sum(r) <> 0;
    -- A job made pending again (a retry) or moved (a reschedule) may be due earlier than
    -- what an idle consumer sleeps toward. (Any updated pending row notifies: joining the
    -- old rows to find the changed ones cost a claim more than the rare spare wake-up.)
    PERFORM pg_notify(TG_TABLE_SCHEMA || ':wake', min(run_at)::text || ' ' || queue)
        FROM new_rows WHERE token IS NULL GROUP BY queue;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_updated AFTER UPDATE ON {schema}.jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.jobs_updated();

CREATE FUNCTION {schema}.jobs_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.count_deltas (queue, pending, running, dead)
        SELECT queue, -count(*) FILTER (WHERE token IS NULL), -count(*) FILTER (WHERE token IS NOT NULL), 0
        FROM old_rows GROUP BY queue;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_deleted AFTER DELETE ON {schema}.jobs
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {schema}.jobs_deleted();

CREATE FUNCTION {schema}.dead_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.count_deltas (queue, pending, running, dead)
        SELECT queue, 0, 0, count(*) FROM new_rows GROUP BY queue;
    RETURN NULL;
END $$;
CREATE TRIGGER dead_inserted AFTER INSERT ON {schema}.dead
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {schema}.dead_inserted();

CREATE FUNCTION {schema}.dead_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.count_deltas (queue, pending, running, dead)
        SELECT queue, 0, 0, -count(*) FROM old_rows GROUP BY queue;
    RETURN NULL;
END $$;
CREATE TRIGGER dead_deleted AFTER DELETE ON {schema}.dead
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {schema}.dead_deleted();
