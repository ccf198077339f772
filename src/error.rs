//! Error types: [`Error`] for configuration and lifecycle failures, [`Elapsed`] for timeouts.

use std::fmt;

/// Why a timer operation failed.
///
/// Opaque on purpose: ask it with the `is_*` methods.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let err = wheel_timer::Timer::builder().slots(0).build().unwrap_err();
/// assert!(err.is_invalid_config());
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    InvalidConfig(&'static str),
    NoRuntime { time_disabled: bool },
    Shutdown,
    AtCapacity,
}

impl Error {
    pub(crate) fn invalid_config(why: &'static str) -> Self {
        Error {
            kind: Kind::InvalidConfig(why),
        }
    }

    pub(crate) fn no_runtime() -> Self {
        Error {
            kind: Kind::NoRuntime {
                time_disabled: false,
            },
        }
    }

    pub(crate) fn time_disabled() -> Self {
        Error {
            kind: Kind::NoRuntime {
                time_disabled: true,
            },
        }
    }

    pub(crate) fn shutdown() -> Self {
        Error {
            kind: Kind::Shutdown,
        }
    }

    pub(crate) fn at_capacity() -> Self {
        Error {
            kind: Kind::AtCapacity,
        }
    }

    /// The builder was given a value it cannot honour (zero tick, zero or too many slots…).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let err = wheel_timer::Timer::builder().shards(0).build().unwrap_err();
    /// assert!(err.is_invalid_config());
    /// assert!(!err.is_shutdown());
    /// # }
    /// ```
    pub fn is_invalid_config(&self) -> bool {
        matches!(self.kind, Kind::InvalidConfig(_))
    }

    /// The timer was built outside a tokio runtime, which it needs for its driver task, or
    /// on a runtime built without its time driver (`enable_time` or `enable_all` on tokio's
    /// runtime builder), which the driver waits on.
    ///
    /// # Examples
    ///
    /// ```
    /// // No runtime here.
    /// let err = wheel_timer::Timer::builder().build().unwrap_err();
    /// assert!(err.is_no_runtime());
    /// ```
    pub fn is_no_runtime(&self) -> bool {
        matches!(self.kind, Kind::NoRuntime { .. })
    }

    /// The timer has been shut down (or its runtime is gone) and takes no new work.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let timer = wheel_timer::Timer::new();
    /// timer.shutdown();
    /// let err = timer.try_sleep(Duration::from_secs(1)).unwrap_err();
    /// assert!(err.is_shutdown());
    /// # }
    /// ```
    pub fn is_shutdown(&self) -> bool {
        matches!(self.kind, Kind::Shutdown)
    }

    /// The timer already holds its configured maximum of pending timers.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_timer::Error> {
    /// let timer = wheel_timer::Timer::builder().max_pending(1).build()?;
    /// let _held = timer.try_sleep(Duration::from_secs(1))?;
    /// let err = timer.try_sleep(Duration::from_secs(1)).unwrap_err();
    /// assert!(err.is_at_capacity());
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_at_capacity(&self) -> bool {
        matches!(self.kind, Kind::AtCapacity)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::InvalidConfig(why) => write!(f, "invalid timer configuration: {why}"),
            Kind::NoRuntime {
                time_disabled: false,
            } => f.write_str("a wheel-timer needs a tokio runtime context to start its driver"),
            Kind::NoRuntime {
                time_disabled: true,
            } => f.write_str(
                "a wheel-timer needs a tokio runtime with its time driver: call `enable_time` \
                 (or `enable_all`) on the runtime builder",
            ),
            Kind::Shutdown => f.write_str("the timer has been shut down"),
            Kind::AtCapacity => f.write_str("the timer is at its maximum of pending timers"),
        }
    }
}

impl std::error::Error for Error {}

/// The error of a [`Timeout`](crate::Timeout) whose deadline passed before its future
/// completed.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let res = wheel_timer::timeout_wheel(Duration::from_millis(1), std::future::pending::<()>()).await;
/// let err = res.unwrap_err();
/// assert_eq!(err.to_string(), "deadline has elapsed");
/// let io: std::io::Error = err.into();
/// assert_eq!(io.kind(), std::io::ErrorKind::TimedOut);
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed(());

impl Elapsed {
    pub(crate) fn new() -> Self {
        Elapsed(())
    }
}

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

impl From<Elapsed> for std::io::Error {
    fn from(e: Elapsed) -> Self {
        std::io::Error::new(std::io::ErrorKind::TimedOut, e)
    }
}
