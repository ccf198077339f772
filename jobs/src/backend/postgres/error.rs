//! sqlx's errors as the crate's [`Error`]s: the same meaning as on every backend.
//!
//! - The server unreachable, gone, shutting down or out of connections, the pool out of
//!   time, a transaction chosen as a deadlock or serialization victim, a statement or lock
//!   wait cancelled by `statement_timeout` or `lock_timeout`: `is_unavailable` (retrying is
//!   safe: every call is idempotent or token-checked).
//! - Refused credentials or privileges; a server certificate we refuse (not signed by the
//!   `sslrootcert` CA, for another host), or `sslmode=require` against a server without
//!   TLS: `is_unauthorized`. Retrying cannot fix them, so the pool does not retry them
//!   either (it retries only a refused TCP connection and a server starting up): `open`
//!   fails with them at once.
//! - A NUL byte in an id or a queue name (PostgreSQL's text refuses it): `is_invalid_input`.
//! - Anything else (a schema someone altered, a corrupt reply): `is_storage`.

use crate::core::error::Error;

/// `err` as the crate's error.
pub(super) fn pg_error(err: sqlx::Error) -> Error {
    match &err {
        sqlx::Error::Io(io) if untrusted_certificate(io) => {
            Error::unauthorized(format!("postgres TLS: {err}"))
        }
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => Error::unavailable(format!("postgres: {err}")),
        sqlx::Error::PoolClosed => Error::closed(),
        sqlx::Error::Tls(_) => Error::unauthorized(format!("postgres TLS: {err}")),
        sqlx::Error::Configuration(_) => Error::invalid_config_owned(format!("postgres: {err}")),
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            match code.as_ref() {
                // invalid_authorization_specification, invalid_password,
                // insufficient_privilege.
                "28000" | "28P01" | "42501" => Error::unauthorized(format!("postgres: {err}")),
                // character_not_in_repertoire, untranslatable_character: a NUL in text.
                "22021" | "22P05" => Error::invalid_input(format!("postgres: {err}")),
                // serialization_failure, deadlock_detected, lock_not_available
                // (lock_timeout), query_canceled (statement_timeout), too_many_connections,
                // admin_shutdown, crash_shutdown, cannot_connect_now, connection errors
                // (class 08), a read-only standby (25006).
                c if c == "40001"
                    || c == "40P01"
                    || c == "55P03"
                    || c == "57014"
                    || c == "53300"
                    || c.starts_with("57P")
                    || c.starts_with("08")
                    || c == "25006" =>
                {
                    Error::unavailable(format!("postgres: {err}"))
                }
                _ => Error::storage(format!("postgres: {err}")),
            }
        }
        _ => Error::storage(format!("postgres: {err}")),
    }
}

/// Whether the TLS handshake failed on the server's certificate (not signed by a trusted
/// CA, expired, for another name). sqlx's rustls handshake returns rustls's error inside
/// an `io::Error`, which alone would read as a retried outage.
fn untrusted_certificate(io: &std::io::Error) -> bool {
    let tls = io
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    matches!(
        tls,
        Some(rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented)
    )
}

/// Whether `err` is a lost wait on another transaction's lock: `lock_timeout` (55P03) or a
/// deadlock victim (40P01). A batch that hits one is re-run one request at a time.
pub(super) fn is_contended(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => matches!(db.code().as_deref(), Some("55P03" | "40P01")),
        _ => false,
    }
}
