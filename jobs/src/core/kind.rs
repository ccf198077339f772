//! Kinds and per-job options: [`JobOptions`] (what a caller asks for, per job or per kind)
//! and [`Spec`] (what a job is stored with, every option resolved).
//!
//! # Ground rules
//!
//! - Options resolve once, at schedule time: the job's own, else its kind's defaults
//!   ([`Builder::kind`](crate::Builder::kind)), else the queue's. The result is stored on the
//!   job, so changing a default never changes a job already scheduled (River and Oban do the
//!   same).
//! - A kind is 0 to [`MAX_KIND_LEN`] bytes with no control character; `""` is the kind of
//!   every job scheduled without one. Priorities are `i8`, higher first, 0 by default.
//! - A resolved lease is at least [`MIN_LEASE`], as the builder's is.
//! - A [`Dedup`] mode acts on the schedule call that carries it (job's, else kind's, else
//!   [`Dedup::Keep`]) and is not stored, but for the hold-off of [`Dedup::HoldOff`]: the ack
//!   of the job needs it, so it is part of the [`Spec`] (`hold_off`, zero for none).
//! - A job's key ([`JobOptions::key`]) is its own, never a kind's; the limits of its key
//!   (`key_limit`, `key_rate`) resolve like the other options and are stored with it
//!   ([`Keyed`]). A key is 1 to [`MAX_KEY_LEN`] bytes with no control character.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::core::error::Error;

/// The longest kind name, in bytes.
pub const MAX_KIND_LEN: usize = 64;

/// The longest key ([`JobOptions::key`]), in bytes.
pub const MAX_KEY_LEN: usize = 256;

/// The longest period of a key's rate ([`JobOptions::key_rate`]): a longer one is lowered
/// to this (a year).
pub const MAX_RATE_PERIOD: Duration = Duration::from_secs(365 * 24 * 3600);

/// The shortest lease: [`Builder::lease`](crate::Builder::lease) raises a shorter
/// (non-zero) one to this.
///
/// A lease starts when the store reads the claim that takes it, and the claim is committed
/// (fsync'd, maybe behind a batch of other writes) before its jobs are handed out. A
/// consumer never hands out a job whose lease may have ended, so a lease shorter than a
/// commit would be spent waiting for that commit: the job dropped, its attempt gone. One
/// second is far above a commit's time even on a slow disk.
pub const MIN_LEASE: Duration = Duration::from_secs(1);

/// What a schedule does when a job with its id exists, or was acked recently.
///
/// The mode is taken from the job's options, else its kind's defaults, else [`Keep`](Self::Keep).
/// It acts on the one schedule call that carries it; only the hold-off of
/// [`HoldOff`](Self::HoldOff) is stored with the job (its ack needs it).
///
/// Every backend builds every mode, each schedule one atomic step (a redb transaction, a
/// Redis script, a PostgreSQL transaction).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dedup {
    /// An existing pending, running or dead job with the id wins
    /// ([`Scheduled::Exists`](crate::Scheduled::Exists)): a retried schedule is harmless.
    #[default]
    Keep,
    /// Debounce: an existing *pending* job takes the new run_at, payload and options
    /// ([`Scheduled::Replaced`](crate::Scheduled::Replaced)); its attempts and last error
    /// stay. A running or dead job, or the pending occurrence of a recurring series, wins as
    /// with `Keep` ([`Scheduled::Exists`](crate::Scheduled::Exists)).
    Replace,
    /// Throttle: schedules as `Keep` does, and once the job is acked its id is refused for
    /// this long ([`Scheduled::HeldOff`](crate::Scheduled::HeldOff)), whatever the mode of
    /// the refused schedule. A zero duration holds nothing off. A job cancelled, dead or
    /// removed holds nothing off either.
    HoldOff(Duration),
    /// A new job may wait while the old one runs (river#1183): a schedule meeting a
    /// *running* job with the id stores the new run_at, payload and options as its
    /// **successor** ([`Scheduled::Successor`](crate::Scheduled::Successor)), not yet
    /// pending, not counted, shown by [`JobInfo::successor`](crate::JobInfo::successor).
    /// When the running job is acked, the successor becomes the pending job (attempt 0; if
    /// the acked job had a hold-off, not due before it ends, and no tombstone is left).
    /// While it retries, the successor waits. When it dies (its last attempt failed, or its
    /// lease ended at its last attempt), the successor becomes the pending job carrying the
    /// dead one's last error, and no dead job is kept (the death is still counted by the
    /// metrics). [`cancel`](crate::JobQueue::cancel) of the id removes a waiting successor.
    /// A [`Replace`](Self::Replace) of a job pending again after a retry, with a successor
    /// waiting, takes the job's values and drops the successor: the newest schedule wins.
    /// An absent id is created; a pending or dead job, a running one that already has a
    /// successor, and a series' occurrence win as with `Keep`
    /// ([`Scheduled::Exists`](crate::Scheduled::Exists)).
    AllowWhileRunning,
}

/// Options for one job, or the defaults of one kind: its kind, priority, attempts, backoff
/// and lease. Each unset option comes from the kind's defaults
/// ([`Builder::kind`](crate::Builder::kind)), then from the queue's builder.
///
/// The options are resolved when the job is scheduled and stored with it: changing a
/// default later does not change a job already scheduled.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use wheel_jobs::JobOptions;
///
/// let capture = JobOptions::kind("capture")
///     .priority(10)
///     .max_attempts(3)
///     .backoff(Duration::from_secs(5), Duration::from_secs(60))
///     .lease(Duration::from_secs(120));
/// assert_eq!(capture.kind_name(), Some("capture"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobOptions {
    kind: Option<String>,
    priority: Option<i8>,
    max_attempts: Option<u32>,
    backoff: Option<(Duration, Duration)>,
    lease: Option<Duration>,
    dedup: Option<Dedup>,
    key: Option<String>,
    key_limit: Option<u32>,
    key_rate: Option<(u32, Duration)>,
}

impl JobOptions {
    /// No option set: every one comes from the defaults.
    pub fn new() -> JobOptions {
        JobOptions::default()
    }

    /// Options for a job of `kind` (the kind's defaults fill in the rest).
    pub fn kind(kind: impl Into<String>) -> JobOptions {
        JobOptions {
            kind: Some(kind.into()),
            ..JobOptions::default()
        }
    }

    /// The same options for a job of `kind`.
    pub fn of_kind(mut self, kind: impl Into<String>) -> JobOptions {
        self.kind = Some(kind.into());
        self
    }

    /// Among due jobs, higher priorities are claimed first (default 0).
    pub fn priority(mut self, priority: i8) -> JobOptions {
        self.priority = Some(priority);
        self
    }

    /// Deliveries before the job is dead (at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> JobOptions {
        self.max_attempts = Some(attempts);
        self
    }

    /// The retry delay after a failed attempt: `first`, doubling per attempt, at most `max`.
    pub fn backoff(mut self, first: Duration, max: Duration) -> JobOptions {
        self.backoff = Some((first, max));
        self
    }

    /// How long a delivery is leased before it is redelivered (non-zero; raised to
    /// [`MIN_LEASE`]).
    pub fn lease(mut self, lease: Duration) -> JobOptions {
        self.lease = Some(lease);
        self
    }

    /// What a schedule does when the id exists or was acked recently (default
    /// [`Dedup::Keep`]).
    pub fn dedup(mut self, dedup: Dedup) -> JobOptions {
        self.dedup = Some(dedup);
        self
    }

    /// The job's key: a tenant, a user, anything whose jobs are limited together by
    /// [`key_limit`](Self::key_limit) and [`key_rate`](Self::key_rate) (1 to
    /// [`MAX_KEY_LEN`] bytes, no control character). Stored with the job and shown by
    /// [`JobInfo::key`](crate::JobInfo::key) and [`Delivery::key`](crate::Delivery::key).
    /// A job's own option only: a kind's defaults cannot set a key
    /// ([`Error::is_invalid_config`](crate::Error::is_invalid_config) at open).
    pub fn key(mut self, key: impl Into<String>) -> JobOptions {
        self.key = Some(key.into());
        self
    }

    /// At most `jobs` jobs of one kind and key running at once, across every process (at
    /// least 1). A key's other jobs stay pending until one of its running jobs is acked,
    /// retried, dead or its lease ends at its last attempt; a lease ending earlier keeps its
    /// slot for the redelivery. Acts on jobs with a [`key`](Self::key) only.
    pub fn key_limit(mut self, jobs: u32) -> JobOptions {
        self.key_limit = Some(jobs);
        self
    }

    /// At most `starts` jobs of one kind and key started per `per` (a window opens at the
    /// first start after the last one ended), across every process. `starts` at least 1,
    /// `per` at least 1 ms and at most [`MAX_RATE_PERIOD`] (lowered to it). A redelivery
    /// after a lease ended is not a new start. Acts on jobs with a [`key`](Self::key) only.
    pub fn key_rate(mut self, starts: u32, per: Duration) -> JobOptions {
        self.key_rate = Some((starts, per));
        self
    }

    /// The kind these options name, if any.
    pub fn kind_name(&self) -> Option<&str> {
        self.kind.as_deref()
    }

    /// The key these options set, if any.
    pub fn key_name(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// Options that resolve to `spec`'s kind, priority, attempts, backoff and lease
    /// whatever the defaults (a copy of a series into another queue keeps what its
    /// occurrences were made with).
    pub(crate) fn of_spec(spec: &Spec) -> JobOptions {
        JobOptions {
            kind: Some(spec.kind.clone()),
            priority: Some(spec.priority),
            max_attempts: Some(spec.max_attempts),
            backoff: Some(spec.backoff),
            lease: Some(spec.lease),
            ..JobOptions::default()
        }
    }
}

/// A job's key and the limits of its `(kind, key)`, resolved when it was scheduled.
///
/// A keyed job is **gated** when its key has a limit or a rate: then the store keeps, per
/// `(kind, key)`, how many of its jobs run and start, and lets at most as many of the key's
/// pending jobs be claimable as its limits allow (ARCHITECTURE, "Fairness per key").
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Keyed {
    pub(crate) key: String,
    /// At most this many running; 0 for no limit.
    pub(crate) limit: u32,
    /// At most `.0` starts per `.1` (`.0` ≥ 1, 1 ms ≤ `.1` ≤ [`MAX_RATE_PERIOD`]).
    pub(crate) rate: Option<(u32, Duration)>,
}

impl Keyed {
    /// Whether the key has a limit or a rate.
    pub(crate) fn gated(&self) -> bool {
        self.limit > 0 || self.rate.is_some()
    }
}

/// What a job is stored with: its kind and every option resolved.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Spec {
    pub(crate) kind: String,
    pub(crate) priority: i8,
    pub(crate) max_attempts: u32,
    /// The retry delay: first, doubling per attempt, at most the second.
    pub(crate) backoff: (Duration, Duration),
    pub(crate) lease: Duration,
    /// How long the id is refused after an ack ([`Dedup::HoldOff`]); zero for no hold-off.
    pub(crate) hold_off: Duration,
    /// The job's key and its limits, if it has a key.
    pub(crate) key: Option<Keyed>,
}

impl Spec {
    /// The job's key and limits, if its key has a limit or a rate.
    pub(crate) fn gate(&self) -> Option<&Keyed> {
        self.key.as_ref().filter(|k| k.gated())
    }
}

/// The defaults a [`Spec`] resolves from: the queue's own and its kinds'.
#[derive(Debug, Clone)]
pub(crate) struct Defaults {
    pub(crate) spec: Spec,
    pub(crate) kinds: BTreeMap<String, JobOptions>,
}

impl Defaults {
    /// The spec of a job scheduled with `options`: the job's own options, else its kind's,
    /// else the queue's; or why the options cannot be used.
    pub(crate) fn resolve(&self, options: &JobOptions) -> Result<Spec, Error> {
        let kind = options.kind.clone().unwrap_or_default();
        check_kind(&kind)?;
        let of_kind = self.kinds.get(&kind);
        // The job's own option, else its kind's, else the queue's.
        macro_rules! pick {
            ($field:ident) => {
                options
                    .$field
                    .or_else(|| of_kind.and_then(|o| o.$field))
                    .unwrap_or(self.spec.$field)
            };
        }
        let hold_off = match self.dedup_of(options) {
            Dedup::HoldOff(d) => d,
            _ => Duration::ZERO,
        };
        let key = match &options.key {
            None => None,
            Some(key) => {
                check_key(key)?;
                let limit = options
                    .key_limit
                    .or_else(|| of_kind.and_then(|o| o.key_limit));
                let rate = options
                    .key_rate
                    .or_else(|| of_kind.and_then(|o| o.key_rate));
                Some(Keyed {
                    key: key.clone(),
                    limit: check_limit(limit)?,
                    rate: check_rate(rate)?,
                })
            }
        };
        if options.key.is_none() {
            // Limits without a key limit nothing, but bad ones are still refused.
            check_limit(options.key_limit)?;
            check_rate(options.key_rate)?;
        }
        let spec = Spec {
            key,
            hold_off,
            priority: pick!(priority),
            max_attempts: pick!(max_attempts),
            backoff: pick!(backoff),
            lease: pick!(lease),
            kind,
        };
        check_spec(spec)
    }

    /// The dedup mode of a schedule with `options`: the job's own, else its kind's, else
    /// [`Dedup::Keep`].
    pub(crate) fn dedup_of(&self, options: &JobOptions) -> Dedup {
        let kind = options.kind.as_deref().unwrap_or_default();
        options
            .dedup
            .or_else(|| self.kinds.get(kind).and_then(|o| o.dedup))
            .unwrap_or_default()
    }

    /// The spec a recurring series' occurrences are made with: `options` resolved as a
    /// job's, without a key or a dedup mode of its own (refused: a series makes its
    /// occurrences one at a time under ids of its own, and a head waiting for a key's slot
    /// would stall it); a kind's default dedup mode does not apply.
    pub(crate) fn resolve_series(&self, options: &JobOptions) -> Result<Spec, Error> {
        if options.key.is_some() || options.key_limit.is_some() || options.key_rate.is_some() {
            return Err(Error::invalid_input(
                "a recurring series' occurrences take no key, key_limit or key_rate",
            ));
        }
        if options.dedup.is_some() {
            return Err(Error::invalid_input(
                "a recurring series' occurrences take no dedup mode: their ids are the series'",
            ));
        }
        let mut spec = self.resolve(options)?;
        spec.hold_off = Duration::ZERO;
        Ok(spec)
    }

    /// The spec of a job scheduled without options (kind `""`).
    pub(crate) fn plain(&self) -> &Spec {
        &self.spec
    }
}

/// `Ok` if `kind` is a valid kind: at most [`MAX_KIND_LEN`] bytes, no control character.
pub(crate) fn check_kind(kind: &str) -> Result<(), Error> {
    if kind.len() > MAX_KIND_LEN {
        return Err(Error::invalid_input(format!(
            "a kind is at most {MAX_KIND_LEN} bytes, this one {}",
            kind.len()
        )));
    }
    if kind.chars().any(char::is_control) {
        return Err(Error::invalid_input(
            "a kind must not contain control characters",
        ));
    }
    Ok(())
}

/// `Ok` if `key` is a valid key: 1 to [`MAX_KEY_LEN`] bytes, no control character.
pub(crate) fn check_key(key: &str) -> Result<(), Error> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(Error::invalid_input(format!(
            "a key is 1 to {MAX_KEY_LEN} bytes, this one {}",
            key.len()
        )));
    }
    if key.chars().any(char::is_control) {
        return Err(Error::invalid_input(
            "a key must not contain control characters",
        ));
    }
    Ok(())
}

/// A key limit as stored (0 for none), or why it cannot be used.
fn check_limit(limit: Option<u32>) -> Result<u32, Error> {
    match limit {
        Some(0) => Err(Error::invalid_input("key_limit must be at least 1")),
        limit => Ok(limit.unwrap_or(0)),
    }
}

/// A key rate with its period lowered to [`MAX_RATE_PERIOD`], or why it cannot be used.
fn check_rate(rate: Option<(u32, Duration)>) -> Result<Option<(u32, Duration)>, Error> {
    match rate {
        None => Ok(None),
        Some((0, _)) => Err(Error::invalid_input("key_rate needs at least 1 start")),
        Some((_, per)) if per < Duration::from_millis(1) => Err(Error::invalid_input(
            "key_rate's period must be at least 1 ms",
        )),
        Some((starts, per)) => Ok(Some((starts, per.min(MAX_RATE_PERIOD)))),
    }
}

/// Panics unless `kind` is a valid kind ([`check_kind`]): for the calls that take a kind and
/// return no `Result` (a claim of an invalid kind would wait forever, or fail on every try).
#[track_caller]
pub(crate) fn assert_kind(call: &str, kind: &str) {
    if let Err(err) = check_kind(kind) {
        panic!("wheel-jobs: {call} needs a valid kind: {err}");
    }
}

/// `spec` with its lease raised to [`MIN_LEASE`], or why it cannot be used.
pub(crate) fn check_spec(mut spec: Spec) -> Result<Spec, Error> {
    if spec.max_attempts == 0 {
        return Err(Error::invalid_input("max_attempts must be at least 1"));
    }
    if spec.lease.is_zero() {
        return Err(Error::invalid_input("the lease must not be zero"));
    }
    spec.lease = spec.lease.max(MIN_LEASE);
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> Defaults {
        let mut kinds = BTreeMap::new();
        kinds.insert(
            "capture".to_owned(),
            JobOptions::new().max_attempts(3).priority(5),
        );
        kinds.insert(
            "digest".to_owned(),
            JobOptions::new().dedup(Dedup::HoldOff(Duration::from_secs(60))),
        );
        Defaults {
            spec: Spec {
                kind: String::new(),
                priority: 0,
                max_attempts: 25,
                backoff: (Duration::from_secs(1), Duration::from_secs(60)),
                lease: Duration::from_secs(30),
                hold_off: Duration::ZERO,
                key: None,
            },
            kinds,
        }
    }

    #[test]
    fn a_job_beats_its_kind_and_its_kind_beats_the_queue() {
        let d = defaults();
        let plain = d.resolve(&JobOptions::new()).unwrap();
        assert_eq!(&plain, d.plain());
        let capture = d.resolve(&JobOptions::kind("capture")).unwrap();
        assert_eq!((capture.max_attempts, capture.priority), (3, 5));
        assert_eq!(capture.lease, Duration::from_secs(30));
        let own = d
            .resolve(&JobOptions::kind("capture").priority(-3).max_attempts(7))
            .unwrap();
        assert_eq!((own.max_attempts, own.priority), (7, -3));
        let other = d.resolve(&JobOptions::kind("remind")).unwrap();
        assert_eq!((other.kind.as_str(), other.max_attempts), ("remind", 25));
    }

    #[test]
    fn dedup_comes_from_the_job_then_its_kind_then_keep() {
        let d = defaults();
        let minute = Duration::from_secs(60);
        assert_eq!(d.dedup_of(&JobOptions::new()), Dedup::Keep);
        assert_eq!(d.dedup_of(&JobOptions::kind("capture")), Dedup::Keep);
        assert_eq!(
            d.dedup_of(&JobOptions::kind("digest")),
            Dedup::HoldOff(minute)
        );
        let own = JobOptions::kind("digest").dedup(Dedup::Replace);
        assert_eq!(d.dedup_of(&own), Dedup::Replace);
        assert_eq!(d.resolve(&own).unwrap().hold_off, Duration::ZERO);
        let held = d.resolve(&JobOptions::kind("digest")).unwrap();
        assert_eq!(held.hold_off, minute);
        let plain = JobOptions::new().dedup(Dedup::HoldOff(Duration::from_millis(5)));
        assert_eq!(
            d.resolve(&plain).unwrap().hold_off,
            Duration::from_millis(5)
        );
        assert_eq!(d.plain().hold_off, Duration::ZERO);
    }

    #[test]
    fn bad_options_are_refused() {
        let d = defaults();
        for bad in [
            JobOptions::new().max_attempts(0),
            JobOptions::new().lease(Duration::ZERO),
            JobOptions::kind("x".repeat(MAX_KIND_LEN + 1)),
            JobOptions::kind("a\nb"),
            JobOptions::kind("nul\0"),
        ] {
            let err = d.resolve(&bad).unwrap_err();
            assert!(err.is_invalid_input(), "{bad:?}: {err}");
        }
        let short = d
            .resolve(&JobOptions::new().lease(Duration::from_millis(1)))
            .unwrap();
        assert_eq!(short.lease, MIN_LEASE);
        assert!(d
            .resolve(&JobOptions::kind("x".repeat(MAX_KIND_LEN)))
            .is_ok());
    }

    #[test]
    fn a_key_and_its_limits_resolve_from_the_job_then_its_kind() {
        let mut d = defaults();
        let minute = Duration::from_secs(60);
        d.kinds.insert(
            "sync".to_owned(),
            JobOptions::new().key_limit(2).key_rate(10, minute),
        );
        let spec = d
            .resolve(&JobOptions::kind("sync").key("tenant-a"))
            .unwrap();
        let keyed = spec.key.clone().unwrap();
        assert_eq!(
            (keyed.key.as_str(), keyed.limit, keyed.rate),
            ("tenant-a", 2, Some((10, minute)))
        );
        assert!(spec.gate().is_some());
        let own = d
            .resolve(&JobOptions::kind("sync").key("a").key_limit(5))
            .unwrap();
        assert_eq!(own.key.unwrap().limit, 5);
        let open = d.resolve(&JobOptions::new().key("a")).unwrap();
        assert_eq!(open.key.as_ref().map(|k| k.gated()), Some(false));
        assert!(open.gate().is_none(), "a key without limits is not gated");
        let unkeyed = d.resolve(&JobOptions::kind("sync")).unwrap();
        assert_eq!(unkeyed.key, None, "limits without a key limit nothing");
        let long = d
            .resolve(&JobOptions::new().key("a").key_rate(1, Duration::MAX))
            .unwrap();
        assert_eq!(long.key.unwrap().rate, Some((1, MAX_RATE_PERIOD)));
    }

    #[test]
    fn bad_keys_and_limits_are_refused() {
        let d = defaults();
        for bad in [
            JobOptions::new().key(""),
            JobOptions::new().key("k".repeat(MAX_KEY_LEN + 1)),
            JobOptions::new().key("a\nb"),
            JobOptions::new().key("a").key_limit(0),
            JobOptions::new()
                .key("a")
                .key_rate(0, Duration::from_secs(1)),
            JobOptions::new()
                .key("a")
                .key_rate(1, Duration::from_micros(999)),
            JobOptions::new().key_limit(0),
        ] {
            let err = d.resolve(&bad).unwrap_err();
            assert!(err.is_invalid_input(), "{bad:?}: {err}");
        }
        assert!(d
            .resolve(&JobOptions::new().key("k".repeat(MAX_KEY_LEN)))
            .is_ok());
    }
}
