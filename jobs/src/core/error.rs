//! [`Error`]: why a queue operation failed, asked with `is_*` queries.

use std::fmt;
use std::sync::Arc;

/// Why a queue operation failed.
///
/// Opaque on purpose: ask it with the `is_*` methods. Cheap to clone (one batch of
/// operations that failed together shares one error).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), wheel_jobs::Error> {
/// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-error-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// let queue = wheel_jobs::JobQueue::open(dir.join("jobs.redb")).await?;
/// let err = queue.schedule("", std::time::Duration::ZERO, "payload").await.unwrap_err();
/// assert!(err.is_invalid_id());
/// # queue.close().await?;
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Error {
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    InvalidId {
        len: usize,
        max: usize,
    },
    PayloadTooLarge {
        len: usize,
        max: usize,
        /// The job it belongs to, where the caller named none itself (a copy's page).
        id: Option<Arc<str>>,
    },
    InvalidConfig(std::borrow::Cow<'static, str>),
    InvalidInput(std::borrow::Cow<'static, str>),
    Locked,
    Storage(Arc<str>),
    #[cfg_attr(
        not(any(feature = "redis", feature = "postgres", test)),
        allow(dead_code)
    )]
    Unavailable(Arc<str>),
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    Unauthorized(Arc<str>),
    Closed,
    InvalidRecurrence(std::borrow::Cow<'static, str>),
    InvalidSeriesName {
        len: usize,
        max: usize,
    },
}

impl Error {
    pub(crate) fn invalid_id(len: usize, max: usize) -> Self {
        Error {
            kind: Kind::InvalidId { len, max },
        }
    }

    pub(crate) fn payload_too_large(len: usize, max: usize) -> Self {
        Error {
            kind: Kind::PayloadTooLarge { len, max, id: None },
        }
    }

    /// A payload too large, of the job `id`: for a batch the caller did not write itself.
    pub(crate) fn payload_too_large_of(id: &str, len: usize, max: usize) -> Self {
        Error {
            kind: Kind::PayloadTooLarge {
                len,
                max,
                id: Some(id.into()),
            },
        }
    }

    pub(crate) fn invalid_config(why: &'static str) -> Self {
        Error {
            kind: Kind::InvalidConfig(why.into()),
        }
    }

    pub(crate) fn invalid_config_owned(why: String) -> Self {
        Error {
            kind: Kind::InvalidConfig(why.into()),
        }
    }

    pub(crate) fn invalid_input(why: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        Error {
            kind: Kind::InvalidInput(why.into()),
        }
    }

    #[cfg(any(feature = "redis", feature = "postgres", test))]
    pub(crate) fn unavailable(why: impl fmt::Display) -> Self {
        Error {
            kind: Kind::Unavailable(why.to_string().into()),
        }
    }

    #[cfg(any(feature = "redis", feature = "postgres"))]
    pub(crate) fn unauthorized(why: impl fmt::Display) -> Self {
        Error {
            kind: Kind::Unauthorized(why.to_string().into()),
        }
    }

    pub(crate) fn locked() -> Self {
        Error { kind: Kind::Locked }
    }

    pub(crate) fn storage(why: impl fmt::Display) -> Self {
        Error {
            kind: Kind::Storage(why.to_string().into()),
        }
    }

    pub(crate) fn closed() -> Self {
        Error { kind: Kind::Closed }
    }

    pub(crate) fn invalid_series_name(len: usize, max: usize) -> Self {
        Error {
            kind: Kind::InvalidSeriesName { len, max },
        }
    }

    pub(crate) fn invalid_recurrence(why: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        Error {
            kind: Kind::InvalidRecurrence(why.into()),
        }
    }

    /// The job id is empty or longer than [`MAX_ID_LEN`](crate::MAX_ID_LEN) (256) bytes, or
    /// a recurring series' name is empty, holds `@` or is longer than 225 bytes (room for
    /// its occurrences' `@<time>` suffix).
    pub fn is_invalid_id(&self) -> bool {
        matches!(
            self.kind,
            Kind::InvalidId { .. } | Kind::InvalidSeriesName { .. }
        )
    }

    /// The payload is longer than the queue's
    /// [`max_payload`](crate::Builder::max_payload).
    pub fn is_payload_too_large(&self) -> bool {
        matches!(self.kind, Kind::PayloadTooLarge { .. })
    }

    /// The builder was given a value it cannot honour (a zero lease, zero attempts…).
    pub fn is_invalid_config(&self) -> bool {
        matches!(self.kind, Kind::InvalidConfig(_))
    }

    /// A call's other input was refused: a page limit out of range or a cursor that is
    /// garbage or belongs to another state's list ([`JobQueue::list`](crate::JobQueue::list)),
    /// or a typed payload that does not encode. Nothing was read or changed.
    pub fn is_invalid_input(&self) -> bool {
        matches!(self.kind, Kind::InvalidInput(_))
    }

    /// The store is held by another process or another open [`JobQueue`](crate::JobQueue)
    /// handle in this one.
    pub fn is_locked(&self) -> bool {
        matches!(self.kind, Kind::Locked)
    }

    /// The store failed: an I/O error, a full disk, or a file that is not a job store or is
    /// corrupt. Nothing of the failed operation was applied.
    pub fn is_storage(&self) -> bool {
        matches!(self.kind, Kind::Storage(_))
    }

    /// The store could not be reached or is briefly unable to serve (the Redis server is
    /// down, restarting, loading its data, busy with a long script, or its cluster is failing
    /// over: `BUSY`, `LOADING`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`). The call may or may
    /// not have been applied; consumers retry by themselves with a backoff.
    pub fn is_unavailable(&self) -> bool {
        matches!(self.kind, Kind::Unavailable(_))
    }

    /// Redis and PostgreSQL: the server refused us, or we refused the server. Either the
    /// credentials are wrong (`WRONGPASS`, or `NOAUTH`: the URL has no password and the
    /// server wants one; PostgreSQL's `28P01`, `28000`), or the user's ACL or privileges deny
    /// a command, key, channel or table the queue needs (`NOPERM`, `42501`; the README's "On
    /// Redis" gives the rule a queue needs), or the server's TLS certificate is not signed by
    /// a trusted CA or not for the host in the URL, or (PostgreSQL) the URL says
    /// `sslmode=require` and the server serves no TLS. Retrying does not help:
    /// [`JobQueue::run`](crate::JobQueue::run) returns it, and
    /// `Builder::redis` and `Builder::postgres` (features `redis`, `postgres`) fail with it
    /// at once.
    pub fn is_unauthorized(&self) -> bool {
        matches!(self.kind, Kind::Unauthorized(_))
    }

    /// The queue was closed ([`JobQueue::close`](crate::JobQueue::close)) or its store stopped
    /// after a failure; it takes no more work.
    pub fn is_closed(&self) -> bool {
        matches!(self.kind, Kind::Closed)
    }

    /// A [`Recurrence`](crate::Recurrence) could not be built or has no further occurrence:
    /// an invalid cron expression, an unknown time zone, a zero interval, a zone given to an
    /// interval, or text that is not a recurrence's text form.
    pub fn is_invalid_recurrence(&self) -> bool {
        matches!(self.kind, Kind::InvalidRecurrence(_))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::InvalidId { len: 0, .. } => f.write_str("invalid job id: empty"),
            Kind::InvalidId { len, max } => {
                write!(f, "invalid job id: {len} bytes, the limit is {max}")
            }
            Kind::PayloadTooLarge { len, max, id: None } => {
                write!(f, "payload too large: {len} bytes, the limit is {max}")
            }
            Kind::PayloadTooLarge {
                len,
                max,
                id: Some(id),
            } => write!(
                f,
                "payload too large: the job {id:?}'s is {len} bytes, the limit is {max}"
            ),
            Kind::InvalidConfig(why) => write!(f, "invalid job queue configuration: {why}"),
            Kind::InvalidInput(why) => write!(f, "invalid input: {why}"),
            Kind::Locked => f.write_str("the job store is locked by another process or handle"),
            Kind::Storage(why) => write!(f, "job store failure: {why}"),
            Kind::Unavailable(why) => write!(f, "job store unavailable: {why}"),
            Kind::Unauthorized(why) => write!(f, "job store refused access: {why}"),
            Kind::Closed => f.write_str("the job queue is closed"),
            Kind::InvalidRecurrence(why) => write!(f, "invalid recurrence: {why}"),
            Kind::InvalidSeriesName { len, max } => write!(
                f,
                "invalid series name: it must be 1 to {max} bytes ({len} given) without '@'"
            ),
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "wheel_jobs::Error({self})")
    }
}

impl std::error::Error for Error {}

/// The message a panic carried (`panic!("...")` gives a `&str` or a `String`), or
/// "a panic" for any other payload.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic".to_owned()
    }
}
