//! Replies from the server: error mapping and decoding, in one place for every script.
//!
//! # Ground rules
//!
//! - An error that may pass (no connection, a timeout, a server busy, loading or failing
//!   over) is [`Error::is_unavailable`], which `run` retries; a refusal (credentials, ACL,
//!   the server's certificate) is [`Error::is_unauthorized`]; anything else is
//!   [`Error::is_storage`].
//! - A reply of an unexpected shape is a storage error naming what was expected, never a
//!   panic: the server is not trusted to run our scripts' version.

use ::redis::{ParsingError, Value};

use crate::core::error::Error;

/// Server replies that mean "not now" rather than "never": a script running too long
/// (`BUSY`), a server loading its data after a restart (`LOADING`), a cluster resharding or
/// failing over (`TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`), a primary just demoted to
/// replica by a failover (`READONLY`: the connection moves to the new primary), too few
/// replicas acknowledging a write (`NOREPLICAS`, from `min_replicas` or the server's own
/// `min-replicas-to-write`).
const TRANSIENT: [&str; 7] = [
    "BUSY",
    "LOADING",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "MASTERDOWN",
    "READONLY",
    "NOREPLICAS",
];

/// Server replies that refuse this client for good: wrong credentials (`WRONGPASS`), none
/// given where the server wants some (`NOAUTH`), an ACL that denies a command, key or
/// channel (`NOPERM`).
const REFUSED: [&str; 3] = ["WRONGPASS", "NOAUTH", "NOPERM"];

pub(super) fn redis_error(err: ::redis::RedisError) -> Error {
    let code = err.code();
    if err.kind() == ::redis::ErrorKind::MasterNameNotFoundBySentinel {
        // Every sentinel answered and none watches that name: a wrong master name.
        Error::invalid_config_owned(format!("no sentinel knows the master name: {err}"))
    } else if err.kind() == ::redis::ErrorKind::AuthenticationFailed
        || code.is_some_and(|code| REFUSED.contains(&code))
        || script_denied(&err)
        || untrusted_certificate(&err)
    {
        Error::unauthorized(err)
    } else if err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout()
        || code.is_some_and(|code| TRANSIENT.contains(&code))
    {
        Error::unavailable(err)
    } else {
        Error::storage(err)
    }
}

/// Whether the ACL denied a command a script called: the server answers `ERR The user
/// executing the script can't run this command ...` (or `can't access ... keys`), not
/// `NOPERM`, so the code alone would make a retried storage error of it.
fn script_denied(err: &::redis::RedisError) -> bool {
    err.detail()
        .is_some_and(|detail| detail.starts_with("The user executing the script can't"))
}

/// Whether the TLS handshake failed on the server's certificate (not signed by a trusted
/// CA, expired, for another name): retrying cannot fix it.
#[cfg(feature = "redis-tls")]
fn untrusted_certificate(err: &::redis::RedisError) -> bool {
    use std::error::Error as _;
    // redis-rs keeps the handshake's `io::Error` (rustls's error inside) behind an `Arc`.
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let tls = err
        .source()
        .and_then(|source| source.downcast_ref::<Shared>())
        .and_then(|shared| shared.downcast_ref::<std::io::Error>())
        .and_then(|io| io.get_ref())
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    matches!(
        tls,
        Some(rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented)
    )
}

#[cfg(not(feature = "redis-tls"))]
fn untrusted_certificate(_: &::redis::RedisError) -> bool {
    false
}

pub(super) fn int(v: &Value) -> Result<u64, Error> {
    match v {
        Value::Int(i) => {
            u64::try_from(*i).map_err(|_| Error::storage("negative integer from redis"))
        }
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| Error::storage("expected an integer from redis")),
        Value::SimpleString(s) => s
            .parse()
            .map_err(|_| Error::storage("expected an integer from redis")),
        _ => Err(Error::storage(format!(
            "expected an integer from redis, got {v:?}"
        ))),
    }
}

pub(super) fn bytes(v: Value) -> Result<Vec<u8>, Error> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.into_bytes()),
        Value::Nil => Ok(Vec::new()),
        other => Err(Error::storage(format!(
            "expected bytes from redis, got {other:?}"
        ))),
    }
}

pub(super) fn text(v: Value) -> Result<String, Error> {
    String::from_utf8(bytes(v)?).map_err(|_| Error::storage("non-UTF-8 text from redis"))
}

pub(super) fn array(v: Value) -> Result<Vec<Value>, Error> {
    match v {
        Value::Array(items) => Ok(items),
        other => Err(Error::storage(format!(
            "expected an array from redis, got {other:?}"
        ))),
    }
}

/// A score (microseconds, possibly in exponent form) as nanoseconds, saturating.
pub(super) fn score_ns(score: &str) -> Result<u64, Error> {
    let us: f64 = score
        .parse()
        .map_err(|_| Error::storage("bad score from redis"))?;
    Ok(if us >= (u64::MAX / 1000) as f64 {
        u64::MAX
    } else {
        us as u64 * 1000
    })
}

/// An error of ours as redis-rs's, for a `FromRedisValue` impl (it comes back as a storage
/// error through [`redis_error`]).
pub(super) fn parsing(err: Error) -> ParsingError {
    err.to_string().into()
}

/// A time field of a script's reply or a series record, in nanoseconds: empty for none.
pub(super) fn opt_ns(field: &str) -> Result<Option<u64>, Error> {
    if field.is_empty() {
        return Ok(None);
    }
    field
        .parse()
        .map(Some)
        .map_err(|_| Error::storage(format!("corrupt time {field:?}")))
}
