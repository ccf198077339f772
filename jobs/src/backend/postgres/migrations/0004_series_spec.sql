-- Version 4: a recurring series of a kind.
--
-- A series stores the spec its occurrences are made with (`RecurringOptions`, resolved when
-- it is set): its kind and priority, and its attempts, backoff and lease (never a key nor a
-- hold-off). Each occurrence it places is inserted with these columns as they are, so it is
-- an ordinary job of that kind and priority. The rows of version 3 have kind '', priority 0
-- and NULL options, exactly what their occurrences were inserted with: NULL options read as
-- the plain spec of the handle that reads the row, as a job's do (`0003_kinds.sql`), so an
-- old series goes on as it did. A set of this version writes every option. Adding columns
-- that are nullable or have a constant default rewrites no row.
ALTER TABLE {schema}.series
    ADD COLUMN kind text COLLATE "C" NOT NULL DEFAULT '',
    ADD COLUMN priority smallint NOT NULL DEFAULT 0,
    ADD COLUMN max_attempts integer,
    ADD COLUMN backoff_first bigint,
    ADD COLUMN backoff_max bigint,
    ADD COLUMN lease bigint;

-- A claim reads the due heads of its kinds only, highest priority first (`sql/claim.rs`
-- `heads`): a skip scan of each kind's priority levels, then a range of due heads per level.
CREATE INDEX series_by_kind ON {schema}.series (queue, kind, priority, head) WHERE head IS NOT NULL;
