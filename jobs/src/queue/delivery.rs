//! [`Delivery`]: one leased job, handed out by a [`Consumer`](crate::Consumer) or to a
//! [`JobQueue::run`](crate::JobQueue::run) handler, and the ack and retry calls the worker
//! shares with it.
//!
//! # Ground rules
//!
//! - A delivery is settled by token only: an ack, retry or fail after the lease was lost
//!   returns `false` and changes nothing (`core/state`).
//! - A `run` handler's own calls tell the loop that renews its lease ([`Renewal`]): a
//!   renewal never shortens a lease the handler extended, and stops once it settled.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::backend::Claimed;
use crate::core::error::Error;
use crate::core::job::{capped_error, system_time};
use crate::core::state::{self, Retry};
use crate::queue::hub::Hub;

/// One due job, leased to whoever holds this value.
///
/// At-least-once: the job is redelivered if the lease ends before an [`ack`](Self::ack), so a
/// handler can run more than once for one job (after a crash, or a handler slower than its
/// lease). For exactly-once *effects*, make the handler idempotent, keyed by
/// [`id`](Self::id): an ack after the lease was lost returns `false` and changes nothing.
pub struct Delivery {
    inner: Arc<Hub>,
    job: Claimed,
    /// For a delivery of [`JobQueue::run`](crate::JobQueue::run): what the handler's own
    /// calls tell the loop that renews its lease.
    renewal: Option<Arc<Renewal>>,
}

/// What a `run` handler did with its own [`Delivery`], for the loop renewing its lease
/// (`worker::keep_leased`): a renewal must never shorten a lease the handler extended, and
/// there is nothing to renew once the handler acked or retried.
#[derive(Debug, Default)]
pub(crate) struct Renewal {
    /// Where the handler's own latest `extend` put the lease's end, at the earliest
    /// (measured from before the call, so never later than the store's).
    pub(crate) extended_until: std::sync::Mutex<Option<Instant>>,
    /// Set once the handler's own `ack` or `retry` was answered.
    pub(crate) settled: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("id", &self.job.id)
            .field("attempt", &self.job.attempt)
            .field("run_at", &self.run_at())
            .field("payload_len", &self.job.payload.len())
            .finish()
    }
}

impl Delivery {
    pub(crate) fn new(inner: Arc<Hub>, job: Claimed, renewal: Option<Arc<Renewal>>) -> Delivery {
        Delivery {
            inner,
            job,
            renewal,
        }
    }

    /// The queue's shared state, for the transactional forms (`queue/sql.rs`).
    #[cfg(feature = "postgres")]
    pub(crate) fn hub(&self) -> &Arc<Hub> {
        &self.inner
    }

    /// The lease's token.
    #[cfg(feature = "postgres")]
    pub(crate) fn token(&self) -> u64 {
        self.job.token
    }

    /// Tells a `run` loop renewing this delivery's lease that it was settled (`answer`
    /// succeeded), so the renewals stop.
    pub(crate) fn settled<T>(&self, answer: Result<T, Error>) -> Result<T, Error> {
        if let (Some(renewal), Ok(_)) = (&self.renewal, &answer) {
            renewal
                .settled
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        answer
    }

    /// The job's id.
    pub fn id(&self) -> &str {
        &self.job.id
    }

    /// The job's payload.
    pub fn payload(&self) -> &[u8] {
        &self.job.payload
    }

    /// The job's kind: `""` for a job scheduled without one.
    pub fn kind(&self) -> &str {
        &self.job.spec.kind
    }

    /// The job's priority (higher is claimed first among due jobs).
    pub fn priority(&self) -> i8 {
        self.job.spec.priority
    }

    /// The job's key ([`JobOptions::key`](crate::JobOptions::key)), if it has one.
    pub fn key(&self) -> Option<&str> {
        self.job.spec.key.as_ref().map(|k| k.key.as_str())
    }

    /// 1 on the first delivery, then one more per redelivery or retry.
    pub fn attempt(&self) -> u32 {
        self.job.attempt
    }

    /// When the job was due (for a retry: when the retry was due).
    pub fn run_at(&self) -> SystemTime {
        system_time(self.job.run_at)
    }

    /// Marks the job done and deletes it: `true`. `false` if the lease had been lost (the job
    /// was delivered again to someone else, or is gone): nothing changes then.
    ///
    /// # Errors
    ///
    /// [`Error::is_storage`], [`Error::is_closed`]; the lease is then still held.
    pub async fn ack(&self) -> Result<bool, Error> {
        let answer = ack(&self.inner, &self.job.id, self.job.token).await;
        self.settled(answer)
    }

    /// Gives the job back, due again `after` from now: `true` if the lease was held. The
    /// attempt counts: if it was the last one ([`max_attempts`](crate::Builder::max_attempts)),
    /// the job is dead instead.
    ///
    /// # Errors
    ///
    /// [`Error::is_storage`], [`Error::is_closed`].
    pub async fn retry(&self, after: Duration) -> Result<bool, Error> {
        let answer = retry(&self.inner, &self.job.id, self.job.token, after, None).await;
        self.settled(answer)
    }

    /// [`retry`](Self::retry) because the attempt failed: `error` (its `Display`, cut to
    /// [`MAX_ERROR_LEN`](crate::MAX_ERROR_LEN) bytes) becomes the job's
    /// [`last_error`](crate::JobInfo::last_error), kept whether the job is pending again or,
    /// after its last attempt, dead. `true` if the lease was held; nothing is recorded
    /// otherwise. [`JobQueue::run`](crate::JobQueue::run) fails a handler's `Err` and panics
    /// this way.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_jobs::Error> {
    /// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-fail-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// let queue = wheel_jobs::JobQueue::open(dir.join("jobs.redb")).await?;
    /// queue.schedule("charge:7", Duration::ZERO, "").await?;
    /// let delivery = queue.consume().next().await.expect("open queue")?;
    /// assert!(delivery.fail(Duration::from_secs(60), "card declined").await?);
    /// let job = queue.get("charge:7").await?.expect("pending again");
    /// assert_eq!(job.last_error(), Some("card declined"));
    /// # queue.close().await?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_storage`], [`Error::is_closed`].
    pub async fn fail(&self, after: Duration, error: impl fmt::Display) -> Result<bool, Error> {
        let error = Some(capped_error(error));
        let answer = retry(&self.inner, &self.job.id, self.job.token, after, error).await;
        self.settled(answer)
    }

    /// Extends the lease to `by` from now: `true` if the lease was held.
    ///
    /// # Errors
    ///
    /// [`Error::is_storage`], [`Error::is_closed`].
    pub async fn extend(&self, by: Duration) -> Result<bool, Error> {
        let sent = Instant::now();
        let answer = self
            .inner
            .backend
            .extend(self.job.id.clone(), self.job.token, by)
            .await;
        if let (Some(renewal), Ok(true)) = (&self.renewal, &answer) {
            // The store sets the lease's end: the latest extend decides it. A sum too large
            // to represent is a lease that never ends in practice.
            let until = sent
                .checked_add(by)
                .unwrap_or_else(|| sent + Duration::from_secs(100 * 365 * 86_400));
            *renewal
                .extended_until
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(until);
        }
        answer
    }
}

/// Acks a leased job; `true` if the lease was held.
pub(crate) async fn ack(inner: &Hub, id: &str, token: u64) -> Result<bool, Error> {
    let acked = inner.backend.ack(id.to_owned(), token).await?;
    if acked {
        inner.metrics.acked();
    }
    Ok(acked)
}

/// Gives a leased job back (a retry, or with an `error` a failure); `true` if the lease was
/// held.
pub(crate) async fn retry(
    inner: &Hub,
    id: &str,
    token: u64,
    after: Duration,
    error: Option<String>,
) -> Result<bool, Error> {
    let failed = error.is_some();
    let (outcome, run_at) = match error {
        None => inner.backend.retry(id.to_owned(), token, after).await?,
        Some(error) => {
            inner
                .backend
                .fail(id.to_owned(), token, after, error)
                .await?
        }
    };
    if outcome != Retry::Stale {
        inner.metrics.settled(failed, outcome == Retry::Died);
    }
    if outcome == Retry::Pending {
        inner.wakeup.due_at(run_at);
    }
    Ok(outcome != Retry::Stale)
}

/// The backoff before attempt `attempt + 1`: `first · 2^(attempt−1)` capped at `max`, plus up
/// to 25 % jitter drawn from the lease token.
pub(crate) fn backoff(first: Duration, max: Duration, attempt: u32, token: u64) -> Duration {
    let doubled = first.saturating_mul(1u32 << attempt.saturating_sub(1).min(31));
    let base = doubled.min(max);
    let share = u32::try_from(state::mix(token) % 1024).expect("below 1024");
    let jitter = (base / 4096).saturating_mul(share);
    base.saturating_add(jitter)
}
