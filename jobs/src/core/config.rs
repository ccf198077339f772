//! [`Config`]: what [`Builder`](crate::Builder) produces, checked once before a queue opens.
//!
//! # Ground rules
//!
//! - A `Config` that exists has passed [`Config::checked`]: a non-zero lease (raised to
//!   [`MIN_LEASE`]), attempts, prefetch and partitions, a payload limit within
//!   [`MAX_PAYLOAD`], a safety wakeup of at least 1 ms. Everything below the front reads it
//!   without re-checking.
//! - Backends read only their own fields (the embedded store its cache and checkpoint
//!   settings, Redis its partitions and timeout) and the state machine's (lease,
//!   attempts).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::core::error::Error;
use crate::core::job::MAX_PAYLOAD;
use crate::core::kind::{Defaults, JobOptions, Spec, MIN_LEASE};

#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) lease: Duration,
    pub(crate) max_attempts: u32,
    pub(crate) max_payload: usize,
    pub(crate) backoff: (Duration, Duration),
    /// Per-kind defaults ([`Builder::kind`](crate::Builder::kind)).
    pub(crate) kinds: BTreeMap<String, JobOptions>,
    pub(crate) prefetch: usize,
    pub(crate) cache_size: usize,
    pub(crate) quick_repair: bool,
    pub(crate) partitions: usize,
    pub(crate) redis_timeout: Option<Duration>,
    /// Replicas that must acknowledge each write, and how long `WAIT` waits for them.
    pub(crate) min_replicas: Option<(u32, Duration)>,
    /// The CA certificates (PEM) `rediss://` servers are checked against.
    #[cfg(feature = "redis-tls")]
    pub(crate) tls_ca: Option<std::sync::Arc<[u8]>>,
    pub(crate) safety_wakeup: Duration,
    /// PostgreSQL: the bound of every call, connecting included.
    #[cfg(feature = "postgres")]
    pub(crate) postgres_timeout: Option<Duration>,
    /// PostgreSQL: the schema the queue's tables live in.
    #[cfg(feature = "postgres")]
    pub(crate) postgres_schema: String,
    pub(crate) timer: Option<wheel_timer::Timer>,
    /// What the queue is called in its metrics' `queue` label (`metrics.rs`): the Redis
    /// queue's name, or the embedded store's file name without its extension.
    pub(crate) name: String,
}

impl Default for Config {
    /// The builder's defaults: see [`Builder::new`](crate::Builder::new).
    fn default() -> Config {
        Config {
            lease: Duration::from_secs(30),
            max_attempts: 5,
            max_payload: 1 << 20,
            backoff: (Duration::from_secs(1), Duration::from_secs(3600)),
            kinds: BTreeMap::new(),
            prefetch: 64,
            cache_size: 64 << 20,
            quick_repair: true,
            partitions: 1,
            redis_timeout: Some(Duration::from_secs(1)),
            min_replicas: None,
            #[cfg(feature = "redis-tls")]
            tls_ca: None,
            safety_wakeup: Duration::from_secs(5),
            #[cfg(feature = "postgres")]
            postgres_timeout: Some(Duration::from_secs(5)),
            #[cfg(feature = "postgres")]
            postgres_schema: "wheel_jobs".to_owned(),
            timer: None,
            name: "jobs".to_owned(),
        }
    }
}

impl Config {
    /// The wheel consumers and workers arm their timers on: the builder's, or the current
    /// runtime's default timer.
    pub(crate) fn timer(&self) -> wheel_timer::Timer {
        self.timer
            .clone()
            .unwrap_or_else(wheel_timer::default_timer)
    }

    /// This configuration as a queue uses it, or why it cannot be used.
    pub(crate) fn checked(&self) -> Result<Config, Error> {
        if self.lease.is_zero() {
            return Err(Error::invalid_config("the lease must not be zero"));
        }
        if self.max_attempts == 0 {
            return Err(Error::invalid_config("max_attempts must be at least 1"));
        }
        if self.prefetch == 0 {
            return Err(Error::invalid_config("prefetch must be at least 1"));
        }
        if self.partitions == 0 {
            return Err(Error::invalid_config("partitions must be at least 1"));
        }
        if self.max_payload > MAX_PAYLOAD {
            return Err(Error::invalid_config("max_payload must be at most 512 MiB"));
        }
        if self.safety_wakeup < Duration::from_millis(1) {
            return Err(Error::invalid_config(
                "the safety wakeup must be at least 1 ms",
            ));
        }
        if self
            .min_replicas
            .is_some_and(|(_, wait)| wait < Duration::from_millis(1))
        {
            return Err(Error::invalid_config(
                "the min_replicas timeout must be at least 1 ms",
            ));
        }
        let mut c = self.clone();
        c.lease = c.lease.max(MIN_LEASE);
        for (kind, options) in &c.kinds {
            if kind.is_empty() {
                // Jobs without a kind take the queue's own defaults everywhere (plain
                // schedules, series occurrences, records older than kinds): options for ""
                // would apply to some of them only.
                return Err(Error::invalid_config(
                    "the kind \"\" takes the queue's own defaults: set them with max_attempts, \
                     backoff and lease, not with kind(\"\", ..)",
                ));
            }
            if options.key_name().is_some() {
                return Err(Error::invalid_config_owned(format!(
                    "kind {kind:?}: a kind's defaults cannot set a key, only its limits \
                     (key_limit, key_rate): a key belongs to one job"
                )));
            }
            let resolved = c.defaults().resolve(&options.clone().of_kind(kind.clone()));
            if let Err(e) = resolved {
                return Err(Error::invalid_config_owned(format!("kind {kind:?}: {e}")));
            }
        }
        Ok(c)
    }

    /// What jobs' options resolve from: the queue's lease, attempts and backoff, and the
    /// kinds' defaults.
    pub(crate) fn defaults(&self) -> Defaults {
        Defaults {
            spec: Spec {
                kind: String::new(),
                priority: 0,
                max_attempts: self.max_attempts,
                backoff: self.backoff,
                lease: self.lease,
                hold_off: Duration::ZERO,
                key: None,
            },
            kinds: self.kinds.clone(),
        }
    }
}
