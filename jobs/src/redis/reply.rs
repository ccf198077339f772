//! Replies from the server: error mapping and decoding, in one place for every script.
//!
//! # Ground rules
//!
//! - An error that may pass (no connection, a timeout, a server busy, loading or failing
//!   over) is [`Error::is_unavailable`], which `run` retries; anything else is
//!   [`Error::is_storage`].
//! - A reply of an unexpected shape is a storage error naming what was expected, never a
//!   panic: the server is not trusted to run our scripts' version.

use ::redis::Value;

use crate::error::Error;

/// Server replies that mean "not now" rather than "never": a script running too long
/// (`BUSY`), a server loading its data after a restart (`LOADING`), a cluster resharding or
/// failing over (`TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`).
const TRANSIENT: [&str; 5] = ["BUSY", "LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN"];

pub(super) fn redis_error(err: ::redis::RedisError) -> Error {
    if err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout()
        || err.code().is_some_and(|code| TRANSIENT.contains(&code))
    {
        Error::unavailable(err)
    } else {
        Error::storage(err)
    }
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
