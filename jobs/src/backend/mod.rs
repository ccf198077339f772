//! The seam between the queue API and a store: the [`Backend`] trait every store implements.
//!
//! # Ground rules
//!
//! - A backend owns the clock: it resolves [`When`] and reads "now" for claims, leases and
//!   retries itself (the embedded store from its process's wall clock, a shared server from
//!   the server's), so clients with skewed clocks never deliver early.
//! - Every method is one atomic step of the state machine in [`crate::core::state`]: it
//!   happens entirely or not at all, and a returned `Ok` means it is durable.
//! - Validation of ids and payload sizes happens above, in the front (`queue/`), once for
//!   all backends.
//! - A backend imports only `core` (values and pure rules) and this trait; nothing above
//!   names a backend but the builder's `open`, `redis`, `redis_cluster` and `postgres`, and
//!   the transactional forms of PostgreSQL (`queue/sql.rs`, through [`Backend::postgres`]).
//! - Futures are boxed so a queue can hold any backend as one `Box<dyn Backend>`; one
//!   allocation per call is noise beside a store round trip.

pub(crate) mod embedded;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "redis")]
pub(crate) mod redis;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::core::error::Error;
use crate::core::job::{Counts, JobInfo, JobState, Scheduled, When};
use crate::core::kind::{Dedup, Spec};
use crate::core::recurrence::Recurrence;
use crate::core::series::{CatchUp, Recurring, RecurringInfo};
use crate::core::state::Retry;

pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A job handed out by a claim, leased to the claimer under `token`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claimed {
    pub(crate) id: String,
    pub(crate) payload: Vec<u8>,
    pub(crate) attempt: u32,
    pub(crate) run_at: u64,
    pub(crate) token: u64,
    /// What the job was stored with: its kind, priority, attempts, backoff and lease.
    pub(crate) spec: Spec,
}

/// A job to schedule: its id, when it is due, its payload, its resolved options and what
/// the schedule does if the id exists ([`Dedup`]; the hold-off of `HoldOff` is also in
/// `spec.hold_off`, stored with the job).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewJob {
    pub(crate) id: String,
    pub(crate) when: When,
    pub(crate) payload: Vec<u8>,
    pub(crate) spec: Spec,
    pub(crate) dedup: Dedup,
}

/// Which jobs a list takes: every kind (`None`), or one.
pub(crate) type KindFilter = Option<String>;

/// Which jobs a claim takes, and how many of each: every kind (`run`, `consume`), or a set
/// of kinds (a [`Worker`](crate::Worker), `run_kind`, `consume_kind`), each with the most
/// jobs of it this claim may lease (the worker's free slots of that kind). A claim's own
/// `max` bounds the total either way.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum ClaimKinds {
    All,
    /// Sorted by kind, each kind once, each most at least 1.
    Some(Vec<(String, usize)>),
}

impl From<Option<String>> for ClaimKinds {
    fn from(kind: Option<String>) -> ClaimKinds {
        ClaimKinds::of(kind.as_deref())
    }
}

impl ClaimKinds {
    /// The one kind `kind`, as many as the claim's `max`.
    pub(crate) fn one(kind: &str) -> ClaimKinds {
        ClaimKinds::Some(vec![(kind.to_owned(), usize::MAX)])
    }

    /// Whether the claim takes jobs of `kind`.
    pub(crate) fn takes(&self, kind: &str) -> bool {
        match self {
            ClaimKinds::All => true,
            ClaimKinds::Some(kinds) => kinds
                .binary_search_by(|(k, _)| k.as_str().cmp(kind))
                .is_ok(),
        }
    }

    /// The most jobs of `kind` a claim of `max` in all takes (0 for a kind it does not take).
    pub(crate) fn most(&self, kind: &str, max: usize) -> usize {
        match self {
            ClaimKinds::All => max,
            ClaimKinds::Some(kinds) => kinds
                .binary_search_by(|(k, _)| k.as_str().cmp(kind))
                .map_or(0, |i| kinds[i].1.min(max)),
        }
    }

    /// The kind `kind` names, as many as the claim's `max`; every kind for `None`.
    pub(crate) fn of(kind: Option<&str>) -> ClaimKinds {
        kind.map_or(ClaimKinds::All, ClaimKinds::one)
    }
}

/// What one claim returned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ClaimBatch {
    /// Leased to the caller, in due order.
    pub(crate) jobs: Vec<Claimed>,
    /// The first key of due work after the claim: the next run_at or lease end.
    pub(crate) next_due: Option<u64>,
    /// The backend's clock at the claim, nanoseconds since the Unix epoch.
    pub(crate) now: u64,
    /// Jobs the claim killed (their last lease had ended): for the metrics.
    pub(crate) died: u64,
}

/// A job as a copy between queues writes it (`queue/copy.rs`): exactly as the source holds
/// it, pending at `run_at` or dead since `died_at`, with its attempts, last error and
/// payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Import {
    pub(crate) id: String,
    pub(crate) run_at: u64,
    pub(crate) attempt: u32,
    pub(crate) last_error: Option<String>,
    pub(crate) payload: Vec<u8>,
    /// `Some(death time)` for a dead job, `None` for a pending one.
    pub(crate) died_at: Option<u64>,
    pub(crate) spec: Spec,
}

/// A store of jobs. See the module docs for the rules every implementation follows.
pub(crate) trait Backend: Send + Sync + fmt::Debug + 'static {
    /// Creates the job, with its spec, unless the id exists (or, with [`Dedup::Replace`],
    /// replaces a pending one's run_at, payload and spec) or is held off after an ack
    /// ([`Dedup::HoldOff`]), or, with [`Dedup::AllowWhileRunning`] on a running job without
    /// one, stores the job as its successor (`Scheduled::Successor`: every ack, retry,
    /// death, lease-expiry kill, `cancel` and `get` of the id then follows the rules on
    /// `Dedup::AllowWhileRunning`); returns the outcome and the job's run_at (for `HeldOff`,
    /// the end of the hold-off).
    fn schedule(&self, job: NewJob) -> BoxFuture<'_, Result<(Scheduled, u64), Error>>;

    /// [`schedule`](Self::schedule) for many jobs in one atomic step, answers in order.
    fn schedule_many(
        &self,
        jobs: Vec<NewJob>,
    ) -> BoxFuture<'_, Result<Vec<(Scheduled, u64)>, Error>>;

    /// Writes each job exactly as given unless its id exists (pending, running or dead),
    /// in one atomic step per store call (on Redis per partition and script call, as
    /// [`schedule_many`](Self::schedule_many)); answers in order, `true` where it wrote.
    /// The counters follow, and a pending job wakes idle consumers like a schedule.
    fn import(&self, jobs: Vec<Import>) -> BoxFuture<'_, Result<Vec<bool>, Error>>;

    /// Removes a pending job.
    fn cancel(&self, id: String) -> BoxFuture<'_, Result<bool, Error>>;

    /// Moves a pending job; `Some(new run_at)` if it moved.
    fn reschedule(&self, id: String, when: When) -> BoxFuture<'_, Result<Option<u64>, Error>>;

    fn get(&self, id: String) -> BoxFuture<'_, Result<Option<JobInfo>, Error>>;

    fn pending(&self) -> BoxFuture<'_, Result<u64, Error>>;

    /// Jobs leased to consumers.
    fn running(&self) -> BoxFuture<'_, Result<u64, Error>>;

    /// Leases up to `max` due jobs of the kinds `kinds` names, and of each at most its own
    /// most (redelivering expired leases of those kinds first, killing jobs out of their own
    /// attempts, each lease the job's own), highest priority first across those kinds, then
    /// earliest due, then by id; and reports the next due time among those kinds (never
    /// later than it: a backend may report an earlier time it must look again at, as
    /// PostgreSQL does for the kind `""`). Jobs of other kinds are neither touched nor
    /// delivered, all in one atomic step (one transaction, script or statement).
    fn claim(&self, max: usize, kinds: ClaimKinds) -> BoxFuture<'_, Result<ClaimBatch, Error>>;

    fn ack(&self, id: String, token: u64) -> BoxFuture<'_, Result<bool, Error>>;

    /// Gives a leased job back to run `after` from now; the outcome and the new run_at.
    fn retry(
        &self,
        id: String,
        token: u64,
        after: Duration,
    ) -> BoxFuture<'_, Result<(Retry, u64), Error>>;

    fn extend(&self, id: String, token: u64, by: Duration) -> BoxFuture<'_, Result<bool, Error>>;

    /// Deletes a dead job.
    fn remove_dead(&self, id: String) -> BoxFuture<'_, Result<bool, Error>>;

    /// Deletes up to `limit` dead jobs; returns how many.
    fn purge_dead(&self, limit: usize) -> BoxFuture<'_, Result<u64, Error>>;

    /// Finishes the work already accepted and releases the store.
    fn close(&self) -> BoxFuture<'_, Result<(), Error>>;

    /// Creates the series `name`, or replaces its recurrence, payload, catch-up policy and
    /// spec (what its occurrences are made with: kind, priority, attempts, backoff, lease;
    /// no key, no hold-off) and its pending occurrence, in one atomic step
    /// (`core/series.rs` has the rules); the outcome and the new head's time (`None`: the
    /// recurrence has no occurrence left).
    fn schedule_recurring(
        &self,
        name: String,
        rule: Recurrence,
        payload: Vec<u8>,
        catch_up: CatchUp,
        spec: Spec,
    ) -> BoxFuture<'_, Result<(Recurring, Option<u64>), Error>>;

    /// Deletes the series and its pending occurrence; `true` if it existed.
    fn cancel_recurring(&self, name: String) -> BoxFuture<'_, Result<bool, Error>>;

    /// Every series, in name order.
    fn list_recurring(&self) -> BoxFuture<'_, Result<Vec<RecurringInfo>, Error>>;
    /// [`retry`](Self::retry) that also records `error` (already capped) as the job's last
    /// error, kept whether the job is pending again or dead.
    fn fail(
        &self,
        id: String,
        token: u64,
        after: Duration,
        error: String,
    ) -> BoxFuture<'_, Result<(Retry, u64), Error>>;

    /// The per-state counters (in all and per kind), whether claims are paused, and the
    /// earliest pending `run_at` (the head of the due index): never a scan.
    fn counts(&self) -> BoxFuture<'_, Result<Counts, Error>>;

    /// Up to `limit` jobs in `state`, in that state's list order, after the position `after`
    /// (a job's `listed_at` and id; `core/state`), each with its own position: pending and
    /// by `(run_at, id)`, running by `(lease end, id)`, dead by `(death time, id)`
    /// descending. A range read of one index: O(limit). With `kind`, only jobs of that kind:
    /// a backend without an index of that state by kind reads past other kinds' jobs
    /// (ARCHITECTURE says which).
    fn list(
        &self,
        state: JobState,
        after: Option<(u64, String)>,
        limit: usize,
        payloads: bool,
        kind: KindFilter,
    ) -> BoxFuture<'_, Result<Vec<(u64, JobInfo)>, Error>>;

    /// Makes a dead job pending again at `when`, its attempts counted from 0 and its last
    /// error kept; `Some(run_at)` if it was dead.
    fn revive(&self, id: String, when: When) -> BoxFuture<'_, Result<Option<u64>, Error>>;

    /// [`revive`](Self::revive) for up to `limit` dead jobs, oldest deaths first: how many,
    /// and the earliest run_at they were given (`None` if none).
    fn revive_dead(
        &self,
        limit: usize,
        when: When,
    ) -> BoxFuture<'_, Result<(u64, Option<u64>), Error>>;

    /// Stops every claim of the queue, in any process, until the same call with `false`;
    /// durable once it returns. A claim while paused leases nothing and reports nothing due.
    /// Unpausing tells other processes' idle consumers (the local ones the front wakes).
    fn set_paused(&self, paused: bool) -> BoxFuture<'_, Result<(), Error>>;

    /// The PostgreSQL backend, for the transactional forms that run on the caller's
    /// connection (`JobQueue::schedule_in`, `Delivery::ack_in`); `None` elsewhere.
    #[cfg(feature = "postgres")]
    fn postgres(&self) -> Option<&postgres::Postgres> {
        None
    }
}
