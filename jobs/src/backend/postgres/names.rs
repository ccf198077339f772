//! Every name the PostgreSQL backend puts in SQL text: the schema (validated, quoted), its
//! tables, indexes, trigger functions and the wake channel. Nothing else is ever spliced into
//! a statement; ids, payloads, errors and queue names travel as bound parameters.

use crate::core::error::Error;

/// The longest schema name: its wake channel (`<schema>:wake`) must fit PostgreSQL's 63-byte
/// identifiers.
const MAX_SCHEMA_LEN: usize = 48;

/// The longest queue name, in bytes (it travels in wake payloads, at most 8000 bytes).
pub(crate) const MAX_QUEUE_LEN: usize = 256;

/// `Ok` if `schema` can name the queue's schema: 1 to 48 bytes of lowercase ASCII letters,
/// digits and `_`, not starting with a digit nor with `pg_` (reserved by PostgreSQL).
pub(crate) fn check_schema(schema: &str) -> Result<(), Error> {
    let valid = !schema.is_empty()
        && schema.len() <= MAX_SCHEMA_LEN
        && !schema.starts_with(|c: char| c.is_ascii_digit())
        && !schema.starts_with("pg_")
        && schema
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if valid {
        Ok(())
    } else {
        Err(Error::invalid_config_owned(format!(
            "the PostgreSQL schema {schema:?} must be 1 to {MAX_SCHEMA_LEN} lowercase ASCII \
             letters, digits and `_`, not starting with a digit or `pg_`"
        )))
    }
}

/// `Ok` if `queue` can name a queue: 1 to [`MAX_QUEUE_LEN`] bytes, no NUL (which
/// PostgreSQL's text refuses).
pub(crate) fn check_queue(queue: &str) -> Result<(), Error> {
    if queue.is_empty() || queue.len() > MAX_QUEUE_LEN || queue.contains('\0') {
        return Err(Error::invalid_config_owned(format!(
            "the queue name must be 1 to {MAX_QUEUE_LEN} bytes without NUL, not {} bytes",
            queue.len()
        )));
    }
    Ok(())
}

/// `Ok` if PostgreSQL can store `id` (the front checked its length): no NUL, which its
/// text refuses. Checked before a schedule joins a batch, so it cannot fail the others.
pub(crate) fn check_id(id: &str) -> Result<(), Error> {
    if id.contains('\0') {
        return Err(Error::invalid_input(format!(
            "the job id {id:?} cannot be stored on PostgreSQL: it contains NUL, which its \
             text type refuses"
        )));
    }
    Ok(())
}

/// The names of one schema's objects, each already quoted and qualified for SQL text.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    /// The schema as given (validated): what the advisory lock and the channel derive from.
    pub(crate) schema: String,
    /// `"schema"`.
    pub(crate) quoted: String,
    /// Pending and running jobs: the hot table, kept small.
    pub(crate) jobs: String,
    /// Dead jobs.
    pub(crate) dead: String,
    /// Recurring series.
    pub(crate) series: String,
    /// Tombstones of ids acked with a hold-off (`Dedup::HoldOff`).
    pub(crate) held: String,
    /// Fairness per key: one row per (queue, kind, key) of gated jobs.
    pub(crate) gates: String,
    /// One row per queue: its paused flag.
    pub(crate) queues: String,
    /// Per-queue counters, 16 slot rows per queue.
    pub(crate) counts: String,
    /// Counter changes not yet folded into `counts`: insert-only, so no statement waits for
    /// another's counter row.
    pub(crate) deltas: String,
    /// The schema's version (one row).
    pub(crate) version: String,
    /// The wake channel (`pg_notify`'s first argument; `LISTEN` quotes it).
    pub(crate) channel: String,
}

/// Counter slots per queue: a fold adds to one at random, `counts` sums them.
pub(crate) const SLOTS: i16 = 16;

impl Names {
    /// The names in `schema`, which [`check_schema`] accepted.
    pub(crate) fn new(schema: &str) -> Names {
        debug_assert!(check_schema(schema).is_ok());
        let quoted = format!("\"{schema}\"");
        let table = |name: &str| format!("{quoted}.\"{name}\"");
        Names {
            schema: schema.to_owned(),
            jobs: table("jobs"),
            dead: table("dead"),
            series: table("series"),
            held: table("held"),
            gates: table("gates"),
            queues: table("queues"),
            counts: table("counts"),
            deltas: table("count_deltas"),
            version: table("schema_version"),
            channel: format!("{schema}:wake"),
            quoted,
        }
    }

    /// The key of the advisory lock that serializes migrations of this schema.
    pub(crate) fn migration_lock(&self) -> String {
        format!("wheel-jobs migrate {}", self.schema)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_are_plain_identifiers() {
        for good in ["wheel_jobs", "a", "jobs2", "_x", &"s".repeat(48)] {
            assert!(check_schema(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Jobs",
            "2jobs",
            "pg_jobs",
            "a-b",
            "a\"b",
            "x; DROP TABLE t",
            &"s".repeat(49),
        ] {
            assert!(check_schema(bad).unwrap_err().is_invalid_config(), "{bad}");
        }
        let names = Names::new("wheel_jobs");
        assert_eq!(names.jobs, "\"wheel_jobs\".\"jobs\"");
        assert_eq!(names.channel, "wheel_jobs:wake");
        assert!(names.channel.len() <= 63);
    }

    #[test]
    fn queue_names_are_bounded_and_nul_free() {
        assert!(check_queue("orders").is_ok());
        assert!(check_queue("'; DROP TABLE jobs; --").is_ok());
        for bad in ["", "a\0b", &"q".repeat(MAX_QUEUE_LEN + 1)] {
            assert!(check_queue(bad).unwrap_err().is_invalid_config());
        }
    }
}
