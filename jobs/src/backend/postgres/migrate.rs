//! The schema's versions: created and migrated by the library from the SQL files in
//! `migrations/`, under a transaction-scoped advisory lock, so many processes opening at
//! once apply each version exactly once.
//!
//! # Ground rules
//!
//! - Version `n` is `migrations/000n_*.sql`, applied in one transaction with the version
//!   row; files are never edited once released (a change is a new file and version).
//! - A schema at a newer version than [`VERSION`] is refused with both versions named: this
//!   library would misread it.
//! - Opening a schema already at [`VERSION`] takes no lock: one read.
//! - A migration waits at most [`lock_timeout`] for each table lock it takes (after the
//!   advisory lock, which it waits for while another process migrates): behind an
//!   application's open transaction that read the tables it fails with a clear
//!   `is_unavailable` error, instead of waiting in the lock queue, where every later
//!   statement on the tables would queue behind it. Its statements stop at
//!   `postgres_timeout` (`statement_timeout`), the bound of the open waiting for them, so
//!   an index build the caller gave up on does not go on holding the tables' locks.

use std::time::Duration;

use sqlx::postgres::PgConnection;
use sqlx::{Executor, PgPool, Row};

use super::error::pg_error;
use super::names::Names;
use crate::core::error::Error;

/// The versions this library knows, in order.
const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("migrations/0001_jobs.sql")),
    (2, include_str!("migrations/0002_wake_soon.sql")),
    (3, include_str!("migrations/0003_kinds.sql")),
    (4, include_str!("migrations/0004_series_spec.sql")),
];

/// The longest a migration waits for a lock on a table (`SET LOCAL lock_timeout`): half
/// the open's `postgres_timeout` (so the server gives up first and says why), at most 10 s.
fn lock_timeout(timeout: Option<Duration>) -> Duration {
    let most = Duration::from_secs(10);
    timeout.map_or(most, |t| (t / 2).min(most))
}

/// The schema version this library writes.
pub(super) const VERSION: i32 = 4;

fn db<T>(r: Result<T, sqlx::Error>) -> Result<T, Error> {
    r.map_err(pg_error)
}

fn too_new(names: &Names, found: i32) -> Error {
    Error::invalid_config_owned(format!(
        "the PostgreSQL schema {:?} is at version {found}, newer than version {VERSION} that \
         this wheel-jobs knows: open it with a newer wheel-jobs",
        names.schema
    ))
}

/// A migration's error; a lost lock wait says what blocked it and what to do.
fn locked_out(names: &Names, version: i32, waited: Duration, err: sqlx::Error) -> Error {
    if !super::error::is_contended(&err) {
        return pg_error(err);
    }
    Error::unavailable(format!(
        "postgres: migrating the schema {:?} to version {version} waited more than {waited:?} \
         for a lock on its tables: another transaction holds one (an open transaction of the \
         application, or a process of an older wheel-jobs); nothing was changed: end it and \
         open again ({err})",
        names.schema
    ))
}

/// The version recorded in the schema, `None` if it has none yet.
async fn recorded(c: &mut PgConnection, names: &Names) -> Result<Option<i32>, Error> {
    let row = db(sqlx::query(&format!(
        "SELECT version FROM {} WHERE id = 1",
        names.version
    ))
    .fetch_optional(c)
    .await)?;
    row.map(|r| db(r.try_get(0))).transpose()
}

/// Brings the schema to [`VERSION`], or refuses a newer one; `timeout` is the open's
/// `postgres_timeout`.
pub(super) async fn migrate(
    pool: &PgPool,
    names: &Names,
    timeout: Option<Duration>,
) -> Result<(), Error> {
    let mut conn = db(pool.acquire().await)?;
    let exists = db(sqlx::query("SELECT to_regclass($1) IS NOT NULL")
        .bind(&names.version)
        .fetch_one(&mut *conn)
        .await)?;
    if exists.try_get::<bool, _>(0).unwrap_or(false) {
        match recorded(&mut conn, names).await? {
            Some(v) if v == VERSION => return Ok(()),
            Some(v) if v > VERSION => return Err(too_new(names, v)),
            _ => {}
        }
    }
    drop(conn);
    let mut tx = db(pool.begin().await)?;
    db(
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .bind(names.migration_lock())
            .execute(&mut *tx)
            .await,
    )?;
    let create = format!(
        "CREATE SCHEMA IF NOT EXISTS {}; \
         CREATE TABLE IF NOT EXISTS {} (id integer PRIMARY KEY CHECK (id = 1), version integer NOT NULL)",
        names.quoted, names.version
    );
    // Several statements: the simple query protocol (`Executor::execute` of a `&str`).
    db(tx.execute(create.as_str()).await)?;
    let found = recorded(&mut tx, names).await?.unwrap_or(0);
    if found > VERSION {
        return Err(too_new(names, found));
    }
    let waited = lock_timeout(timeout);
    let mut limits = format!("SET LOCAL lock_timeout = {}", waited.as_millis());
    if let Some(t) = timeout {
        limits.push_str(&format!(
            "; SET LOCAL statement_timeout = {}",
            t.as_millis().max(1)
        ));
    }
    db(tx.execute(limits.as_str()).await)?;
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > found) {
        let sql = sql.replace("{schema}", &names.quoted);
        tx.execute(sql.as_str())
            .await
            .map_err(|err| locked_out(names, *version, waited, err))?;
        db(sqlx::query(&format!(
            "INSERT INTO {} (id, version) VALUES (1, $1) \
             ON CONFLICT (id) DO UPDATE SET version = excluded.version",
            names.version
        ))
        .bind(version)
        .execute(&mut *tx)
        .await)?;
    }
    db(tx.commit().await)
}

#[cfg(test)]
mod tests {
    use super::MIGRATIONS;

    /// A gate's rebalance places its jobs against the boundary (the last of the first
    /// `cap`), never by looking each up in a list of them: a list's membership test costs
    /// O(cap) per admitted job, 15–35 ms a statement for a key limit of 5,000.
    #[test]
    fn a_rebalance_places_jobs_against_its_boundary() {
        let (_, sql) = MIGRATIONS.iter().find(|(v, _)| *v == 3).expect("version 3");
        let start = sql
            .find("CREATE FUNCTION {schema}.gate_rebalance")
            .expect("rebalance");
        let body = &sql[start..];
        let body = &body[..body.find("END $$;").expect("its end")];
        assert!(body.contains("OFFSET cap - 1 LIMIT 1"), "{body}");
        assert!(!body.contains("array_agg(x.id), '{}'"), "{body}");
        assert!(!body.contains("= ANY(top)"), "{body}");
        let placed = "(j.run_at, -j.priority, j.id) > (b_run, -b_pri, b_id)";
        assert_eq!(body.matches(placed).count(), 2, "demotions: {body}");
    }
}
