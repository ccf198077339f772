-- Version 2: a wake-up only for jobs due within 60 s of the commit.
--
-- PostgreSQL makes every transaction that sent a `pg_notify` commit one at a time, under
-- one cluster-wide lock held until its commit record is flushed, so those commits share
-- no flush: an application transaction that scheduled a job 48 h ahead paid that for a
-- wake-up nobody needs. A job due later than 60 s after its statement sends none; an idle
-- consumer finds it at its safety wakeup, which a PostgreSQL queue caps at 60 s
-- (`WAKE_HORIZON` in `backend/postgres/mod.rs`), before it is due.
CREATE OR REPLACE FUNCTION {schema}.jobs_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.count_deltas (queue, pending, running, dead)
        SELECT queue, count(*) FILTER (WHERE token IS NULL), count(*) FILTER (WHERE token IS NOT NULL), 0
        FROM new_rows GROUP BY queue;
    PERFORM pg_notify(TG_TABLE_SCHEMA || ':wake', min(run_at)::text || ' ' || queue)
        FROM new_rows WHERE token IS NULL GROUP BY queue
        HAVING min(run_at) <= (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint + 60000000000;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION {schema}.jobs_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.count_deltas (queue, pending, running, dead)
        SELECT queue, sum(p), sum(r), 0 FROM (
            SELECT queue, (token IS NULL)::int AS p, (token IS NOT NULL)::int AS r FROM new_rows
            UNION ALL
            SELECT queue, -(token IS NULL)::int, -(token IS NOT NULL)::int FROM old_rows
        ) AS changes GROUP BY queue HAVING sum(p) <> 0 OR sum(r) <> 0;
    -- A job made pending again (a retry) or moved (a reschedule) may be due earlier than
    -- what an idle consumer sleeps toward: a wake-up if it is due within 60 s.
    PERFORM pg_notify(TG_TABLE_SCHEMA || ':wake', min(run_at)::text || ' ' || queue)
        FROM new_rows WHERE token IS NULL GROUP BY queue
        HAVING min(run_at) <= (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint + 60000000000;
    RETURN NULL;
END $$;
