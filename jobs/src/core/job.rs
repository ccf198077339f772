//! The job's values: what the queue's calls take and return ([`When`], [`Scheduled`],
//! [`JobState`], [`JobInfo`], [`Counts`]), the limits on ids and payloads and their validation, and
//! wall-clock conversion.
//!
//! # Ground rules
//!
//! - The bottom of the crate: imports nothing of it but [`Error`], so every layer above
//!   (backends, consumers, the front) shares these values without reaching up.
//! - Stored times are wall-clock nanoseconds since the Unix epoch in a `u64`, saturating:
//!   0 before 1970, `u64::MAX` after 2554 ([`nanos`], [`system_time`], [`add`]).
//! - Ids are 1 to [`MAX_ID_LEN`] bytes and payloads at most the queue's `max_payload`
//!   ([`check_id`], [`check_payload`]); the front checks them once for every backend.
//! - A job's last error is at most [`MAX_ERROR_LEN`] bytes ([`capped_error`]), cut by the
//!   front before any backend sees it: a failure costs one bounded string, whatever the
//!   handler's error.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::core::error::Error;
use crate::core::kind::Spec;

/// The longest job id, in bytes.
pub const MAX_ID_LEN: usize = 256;

/// The largest [`Builder::max_payload`](crate::Builder::max_payload): Redis's limit for one
/// string, and well inside the embedded store's 4 GiB per value (and per log record).
pub const MAX_PAYLOAD: usize = 512 << 20;

/// When a job is due: a delay from now, or a wall-clock time.
///
/// Both are stored as wall-clock time, so a job keeps its due time across restarts. A time
/// in the past means "due at once"; `Duration::MAX` and times beyond the year 2554 saturate
/// there (nanoseconds since the Unix epoch in a `u64`), which is as good as never.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use wheel_jobs::When;
///
/// let in_two_days: When = Duration::from_secs(48 * 3600).into();
/// let at_eight: When = (SystemTime::now() + Duration::from_secs(60)).into();
/// assert_ne!(in_two_days, at_eight);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// This long after the store's clock reads the request.
    After(Duration),
    /// At this wall-clock time.
    At(SystemTime),
}

impl From<Duration> for When {
    fn from(delay: Duration) -> When {
        When::After(delay)
    }
}

impl From<SystemTime> for When {
    fn from(at: SystemTime) -> When {
        When::At(at)
    }
}

impl When {
    /// Nanoseconds since the Unix epoch, given the store's `now` in the same unit.
    pub(crate) fn resolve(self, now: u64) -> u64 {
        match self {
            When::After(delay) => add(now, delay),
            When::At(at) => nanos(at),
        }
    }
}

/// Wall-clock nanoseconds since the Unix epoch, saturating (0 before 1970, `u64::MAX` after 2554).
pub(crate) fn nanos(at: SystemTime) -> u64 {
    match at.duration_since(UNIX_EPOCH) {
        Ok(since) => u64::try_from(since.as_nanos()).unwrap_or(u64::MAX),
        Err(_) => 0,
    }
}

pub(crate) fn system_time(nanos: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(nanos)
}

/// `start + by` in nanoseconds, saturating at `u64::MAX` (the year 2554).
pub(crate) fn add(start: u64, by: std::time::Duration) -> u64 {
    start.saturating_add(u64::try_from(by.as_nanos()).unwrap_or(u64::MAX))
}

/// What [`JobQueue::schedule`](crate::JobQueue::schedule) did. Non-exhaustive: a later
/// version may add outcomes (as the dedup modes added `Replaced` and `HeldOff`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scheduled {
    /// A new job was stored.
    Created,
    /// A job with this id is already pending, running or dead; it was left unchanged. A
    /// schedule retried after a timeout or a crash is therefore safe.
    Exists,
    /// A pending job with this id took the new run_at, payload and options
    /// ([`Dedup::Replace`](crate::Dedup::Replace)); its attempts and last error stay.
    Replaced,
    /// A job with this id was acked with a hold-off ([`Dedup::HoldOff`](crate::Dedup::HoldOff))
    /// that lasts until `until`: nothing was stored. A schedule at or after `until` is
    /// accepted.
    HeldOff {
        /// When the hold-off ends.
        until: SystemTime,
    },
    /// A job with this id is running: the new run_at, payload and options were stored as its
    /// successor ([`Dedup::AllowWhileRunning`](crate::Dedup::AllowWhileRunning)), to become
    /// the pending job once the running one is acked or dies.
    Successor,
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// Waiting for its `run_at` (or for a retry).
    Pending,
    /// Delivered to a consumer, under a lease.
    Running,
    /// Out of attempts; kept until [`JobQueue::remove_dead`](crate::JobQueue::remove_dead) or
    /// [`JobQueue::purge_dead`](crate::JobQueue::purge_dead).
    Dead,
}

/// A snapshot of one job, from [`JobQueue::get`](crate::JobQueue::get) or a page of
/// [`JobQueue::list`](crate::JobQueue::list).
#[derive(Clone, PartialEq, Eq)]
pub struct JobInfo {
    id: String,
    state: JobState,
    run_at: u64,
    attempt: u32,
    last_error: Option<String>,
    payload: Vec<u8>,
    spec: Spec,
    /// The run_at of the successor waiting for this running job, if any.
    successor: Option<u64>,
}

impl JobInfo {
    /// A snapshot as a backend read it: `run_at` in wall-clock nanoseconds.
    pub(crate) fn new(
        id: String,
        state: JobState,
        run_at: u64,
        attempt: u32,
        last_error: Option<String>,
        payload: Vec<u8>,
        spec: Spec,
    ) -> JobInfo {
        JobInfo {
            id,
            state,
            run_at,
            attempt,
            last_error,
            payload,
            spec,
            successor: None,
        }
    }

    /// This snapshot with the run_at of the successor waiting for the job
    /// ([`Dedup::AllowWhileRunning`](crate::Dedup::AllowWhileRunning)).
    pub(crate) fn with_successor(mut self, run_at: Option<u64>) -> JobInfo {
        self.successor = run_at;
        self
    }

    /// The job's kind: `""` for a job scheduled without one.
    pub fn kind(&self) -> &str {
        &self.spec.kind
    }

    /// The job's priority: among due jobs, higher is claimed first.
    pub fn priority(&self) -> i8 {
        self.spec.priority
    }

    /// The job's key ([`JobOptions::key`](crate::JobOptions::key)), if it has one.
    pub fn key(&self) -> Option<&str> {
        self.spec.key.as_ref().map(|k| k.key.as_str())
    }

    /// The most jobs of its kind and key running at once
    /// ([`JobOptions::key_limit`](crate::JobOptions::key_limit)), if it has a key with a
    /// limit.
    pub fn key_limit(&self) -> Option<u32> {
        self.spec
            .key
            .as_ref()
            .map(|k| k.limit)
            .filter(|&limit| limit > 0)
    }

    /// The most starts of its kind and key per period
    /// ([`JobOptions::key_rate`](crate::JobOptions::key_rate)), if it has a key with a
    /// rate.
    pub fn key_rate(&self) -> Option<(u32, Duration)> {
        self.spec.key.as_ref().and_then(|k| k.rate)
    }

    /// How many deliveries the job gets before it is dead (its own, resolved when it was
    /// scheduled).
    pub fn max_attempts(&self) -> u32 {
        self.spec.max_attempts
    }

    /// What the job is stored with.
    pub(crate) fn spec(&self) -> &Spec {
        &self.spec
    }

    /// The job's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Pending, running or dead.
    pub fn state(&self) -> JobState {
        self.state
    }

    /// When the job is (or was last) due.
    pub fn run_at(&self) -> SystemTime {
        system_time(self.run_at)
    }

    /// Deliveries so far: 0 before the first (and again after a
    /// [`revive`](crate::JobQueue::revive)).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Why the last failed attempt failed: the error given to
    /// [`Delivery::fail`](crate::Delivery::fail) (so a `run` handler's `Err` or panic
    /// message), or `"lease expired"` if a delivery's lease ended before it was settled.
    /// At most [`MAX_ERROR_LEN`] bytes. Kept while the job is pending again, running again
    /// or dead, and after a revive; `None` if no attempt failed.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// The job's payload.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// When the successor stored beside this running job is due
    /// ([`Dedup::AllowWhileRunning`](crate::Dedup::AllowWhileRunning)): it becomes the
    /// pending job once this one is acked or dies. `None` if no successor waits.
    pub fn successor(&self) -> Option<SystemTime> {
        self.successor.map(system_time)
    }
}

impl fmt::Debug for JobInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobInfo")
            .field("id", &self.id)
            .field("state", &self.state)
            .field("kind", &self.spec.kind)
            .field("priority", &self.spec.priority)
            .field("key", &self.key())
            .field("run_at", &self.run_at())
            .field("attempt", &self.attempt)
            .field("last_error", &self.last_error)
            .field("payload_len", &self.payload.len())
            .field("successor", &self.successor())
            .finish()
    }
}

/// How many jobs a queue holds in each state, whether it is paused, and when its next
/// pending job is due, from [`JobQueue::counts`](crate::JobQueue::counts).
///
/// The counts come from counters the store keeps beside the jobs (updated by every change),
/// never from a scan. On a partitioned Redis queue they are summed over the partitions, each
/// read on its own, so under load the sum may mix moments a few microseconds apart.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counts {
    /// Jobs waiting for their `run_at` (or for a retry), due ones included.
    pub pending: u64,
    /// Jobs delivered and not yet acked, retried or failed (see
    /// [`JobQueue::running`](crate::JobQueue::running)).
    pub running: u64,
    /// Jobs out of attempts, kept until removed or revived.
    pub dead: u64,
    /// Whether consumers are stopped from claiming ([`JobQueue::pause`](crate::JobQueue::pause)).
    pub paused: bool,
    /// The earliest `run_at` of a pending job (in the past if jobs are due and not yet
    /// claimed, say while paused); `None` if nothing is pending.
    pub next_due: Option<SystemTime>,
    /// The same counts per kind, for every kind with a job in any state (`""` is the kind
    /// of jobs scheduled without one), in kind order.
    pub kinds: BTreeMap<String, KindCounts>,
}

impl Counts {
    /// A snapshot as a backend read it: `next_due` in wall-clock nanoseconds.
    pub(crate) fn new(
        pending: u64,
        running: u64,
        dead: u64,
        paused: bool,
        next_due: Option<u64>,
    ) -> Counts {
        Counts {
            pending,
            running,
            dead,
            paused,
            next_due: next_due.map(system_time),
            kinds: BTreeMap::new(),
        }
    }

    /// The snapshot with its per-kind counts (kinds with no job left out).
    pub(crate) fn with_kinds(
        mut self,
        kinds: impl IntoIterator<Item = (String, KindCounts)>,
    ) -> Counts {
        self.kinds = kinds
            .into_iter()
            .filter(|(_, c)| c.pending + c.running + c.dead > 0)
            .collect();
        self
    }
}

/// How many jobs of one kind are in each state, in [`Counts::kinds`](crate::Counts::kinds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KindCounts {
    /// Jobs of the kind waiting for their `run_at`.
    pub pending: u64,
    /// Jobs of the kind leased to consumers.
    pub running: u64,
    /// Jobs of the kind out of attempts.
    pub dead: u64,
}

impl KindCounts {
    pub(crate) fn new(pending: u64, running: u64, dead: u64) -> KindCounts {
        KindCounts {
            pending,
            running,
            dead,
        }
    }
}

/// The longest [`JobInfo::last_error`] kept, in bytes: a longer message is cut at a character
/// boundary and ends with `…`.
pub const MAX_ERROR_LEN: usize = 4096;

/// `error`'s text, cut to at most [`MAX_ERROR_LEN`] bytes at a character boundary (ending in
/// `…` when cut). A huge `Display` is never built whole: writing stops at the cap.
pub(crate) fn capped_error(error: impl fmt::Display) -> String {
    use fmt::Write;
    struct Capped {
        text: String,
        cut: bool,
    }
    impl Write for Capped {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            let room = MAX_ERROR_LEN - self.text.len();
            if s.len() <= room {
                self.text.push_str(s);
                return Ok(());
            }
            let mut end = room;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            self.text.push_str(&s[..end]);
            self.cut = true;
            // Stops the formatting: nothing more fits.
            Err(fmt::Error)
        }
    }
    let mut out = Capped {
        text: String::new(),
        cut: false,
    };
    // An `Err` here is the stop above, or the `Display` failing: either way keep the text.
    let _ = write!(out, "{error}");
    let Capped { mut text, cut } = out;
    if cut {
        let mut end = text.len().min(MAX_ERROR_LEN - '…'.len_utf8());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// `Ok` if `id` is a valid job id: 1 to [`MAX_ID_LEN`] bytes.
pub(crate) fn check_id(id: &str) -> Result<(), Error> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(Error::invalid_id(id.len(), MAX_ID_LEN));
    }
    Ok(())
}

/// `Ok` if `payload` fits in `max` bytes.
pub(crate) fn check_payload(payload: &[u8], max: usize) -> Result<(), Error> {
    if payload.len() > max {
        return Err(Error::payload_too_large(payload.len(), max));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_capped_at_a_char_boundary() {
        assert_eq!(capped_error("boom"), "boom");
        assert_eq!(capped_error(""), "");
        let exact = "x".repeat(MAX_ERROR_LEN);
        assert_eq!(capped_error(&exact), exact);
        for long in [
            "x".repeat(MAX_ERROR_LEN + 1),
            "é".repeat(MAX_ERROR_LEN),
            "日本".repeat(5000),
        ] {
            let capped = capped_error(&long);
            assert!(capped.len() <= MAX_ERROR_LEN, "{}", capped.len());
            assert!(capped.ends_with('…'));
            assert!(long.starts_with(capped.trim_end_matches('…')));
        }
        /// A `Display` writing far more than the cap, in small pieces.
        struct Chatty;
        impl fmt::Display for Chatty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                for _ in 0..1_000_000 {
                    f.write_str("ab")?;
                }
                Ok(())
            }
        }
        let capped = capped_error(Chatty);
        assert!(capped.len() <= MAX_ERROR_LEN && capped.ends_with('…'));
    }

    #[test]
    fn time_saturates() {
        assert_eq!(add(5, std::time::Duration::MAX), u64::MAX);
        assert_eq!(
            add(u64::MAX - 1, std::time::Duration::from_nanos(5)),
            u64::MAX
        );
        assert_eq!(add(5, std::time::Duration::from_nanos(5)), 10);
    }
}
