//! [`Consumer`], the stream of due jobs (each a [`Delivery`], `delivery.rs`).
//!
//! # Ground rules
//!
//! - A consumer claims only when polled and nothing is buffered: up to `prefetch` due jobs
//!   per claim, leased from that moment. A buffered job is handed out only while its lease
//!   lasts by the local monotonic clock, counted from just before the claim was sent (so
//!   never later than the store's lease start): one whose lease passed may already be
//!   someone else's, so it is dropped (it comes again, to whoever claims it next). The
//!   lease is at least `MIN_LEASE` (1 s), far above a claim's own commit time, so a claim's
//!   jobs are not lost to the wait for that commit.
//! - After a failed claim the next one waits a backoff (50 ms doubling, at most `MAX_BACKOFF`);
//!   a `close` ends that wait at once, as it ends an idle one.
//! - Idle, it arms **one** wheel-timer sleep for the next due time the claim reported (the
//!   next `run_at` or lease end), capped at a safety wakeup (by default 3.75 to 5 s,
//!   `Builder::safety_wakeup`, jittered per sleep so idle consumers do not read the store
//!   in step) so a wall-clock
//!   step forward or a lost Redis notification is noticed; a schedule of an earlier job in
//!   this process wakes it through `core/wakeup.rs`.
//!   There is no polling loop.
//! - The backend's clock decides what is due, so a wheel tick firing a little early on a
//!   skewed wall clock only re-arms the sleep: never an early delivery.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use futures_core::Stream;

use tokio::sync::Notify;

use crate::backend::{BoxFuture, ClaimKinds, Claimed};
use crate::core::error::Error;
use crate::core::state;
use crate::core::wakeup::Slot;
use crate::queue::delivery::Delivery;
use crate::queue::hub::Hub;

/// The longest backoff after storage errors.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The safety wakeup of an idle consumer: between 3/4 of `max` and all of it, drawn from
/// `seed`, so many idle consumers do not all read the store in step.
fn safety_wait(max: Duration, seed: u64) -> Duration {
    let share = u32::try_from(state::mix(seed) % 1024).expect("below 1024");
    max - (max / 4 / 1024) * share
}

/// A stream of due jobs, from [`JobQueue::consume`](crate::JobQueue::consume).
///
/// Yields each job no earlier than its `run_at`, leased to this consumer: ack it when done,
/// [`retry`](Delivery::retry) it, or let the lease lapse (dropping the [`Delivery`]) to have it
/// delivered again with `attempt + 1`. Jobs due while no process had the store open come at
/// once. The stream ends when the queue is closed; a storage error is yielded as an item and
/// the next poll tries again after a backoff.
///
/// Up to [`prefetch`](crate::Builder::prefetch) jobs are claimed at a time and buffered here;
/// a buffered job whose lease ended before it was handed out is dropped, not yielded (it is
/// delivered again, maybe elsewhere). Dropping the consumer leaves buffered jobs leased until
/// their lease ends. So does dropping it, or a [`next`](Self::next) future, while a claim is
/// in flight (say, a `select!` on shutdown): the jobs that claim leased are held by nobody
/// until the lease ends, then delivered again with their attempt spent. To stop without
/// that, close the queue ([`JobQueue::close`](crate::JobQueue::close) ends the stream) or
/// use [`JobQueue::run`](crate::JobQueue::run), which never drops a claim halfway.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), wheel_jobs::Error> {
/// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-consume-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// let queue = wheel_jobs::JobQueue::open(dir.join("jobs.redb")).await?;
/// queue.schedule("greet", Duration::from_millis(20), "hello").await?;
/// let mut deliveries = queue.consume();
/// let delivery = deliveries.next().await.expect("open queue")?;
/// assert_eq!(delivery.payload(), b"hello");
/// assert!(delivery.ack().await?);
/// # queue.close().await?;
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok(())
/// # }
/// ```
#[must_use = "streams do nothing unless polled"]
pub struct Consumer {
    inner: Arc<Hub>,
    slot: Arc<Slot>,
    kind: ClaimKinds,
    /// Claimed jobs and when their lease ends on the local clock (`None`: beyond it).
    buffered: VecDeque<(Claimed, Option<Instant>)>,
    fetch: Option<Fetch>,
    errors: u32,
    done: bool,
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("buffered", &self.buffered.len())
            .field("done", &self.done)
            .finish()
    }
}

/// A [`fetch`] in flight.
pub(crate) type Fetch = BoxFuture<'static, Result<(Vec<Claimed>, Instant), Error>>;

/// `Err(closed)`, with no claim in flight, once `close` began: checked after a wait's
/// wakeup is enabled, so a later `close` wakes that wait.
fn stop_if_closing(inner: &Hub, slot: &Slot) -> Result<(), Error> {
    if inner.drain.closing() {
        slot.set(0);
        return Err(Error::closed());
    }
    Ok(())
}

/// Claims up to `max` due jobs of the kinds `kind` names, sleeping on one wheel timer until
/// some are due; with them, the local time just before the claim that leased them was
/// sent. A notice on `refresh` ends an idle wait with no jobs (a worker whose claim a cap
/// cut short has room for more kinds: it claims anew).
pub(crate) async fn fetch(
    inner: Arc<Hub>,
    slot: Arc<Slot>,
    kind: ClaimKinds,
    max: usize,
    errors: u32,
    refresh: Option<Arc<Notify>>,
) -> Result<(Vec<Claimed>, Instant), Error> {
    let timer = inner.config.timer();
    if errors > 0 {
        // `close` wakes this like an idle wait, so it never waits out a backoff.
        let backoff = Duration::from_millis(50).saturating_mul(1 << errors.min(7));
        let sleep = timer.sleep(backoff.min(MAX_BACKOFF));
        tokio::pin!(sleep);
        loop {
            let notified = inner.wakeup.notify().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            stop_if_closing(&inner, &slot)?;
            tokio::select! {
                _ = &mut sleep => break,
                _ = &mut notified => {}
            }
        }
    }
    loop {
        let notified = inner.wakeup.notify().notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        // After `enable`: a `close` that marked the queue closing before this read is seen
        // here, one after it wakes `notified`.
        stop_if_closing(&inner, &slot)?;
        slot.set(u64::MAX);
        let sent = Instant::now();
        let batch = match inner.backend.claim(max, kind.clone()).await {
            Ok(batch) => batch,
            Err(err) => {
                slot.set(0);
                return Err(err);
            }
        };
        inner.metrics.died(batch.died);
        for job in &batch.jobs {
            // A redelivery's run_at may be long past: the lease it lost counts in it.
            let late = (job.attempt == 1)
                .then(|| Duration::from_nanos(batch.now.saturating_sub(job.run_at)));
            inner.metrics.delivered(late);
        }
        if !batch.jobs.is_empty() {
            slot.set(0);
            return Ok((batch.jobs, sent));
        }
        let next = batch.next_due.unwrap_or(u64::MAX);
        slot.set(next);
        let seed = batch.now ^ (Arc::as_ptr(&slot) as u64);
        let wait = Duration::from_nanos(next.saturating_sub(batch.now))
            .min(safety_wait(inner.config.safety_wakeup, seed));
        let refreshed = async {
            match &refresh {
                Some(refresh) => refresh.notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = timer.sleep(wait) => {}
            _ = &mut notified => {}
            () = refreshed => {
                slot.set(0);
                return Ok((Vec::new(), sent));
            }
        }
    }
}

impl Consumer {
    pub(crate) fn new(inner: Arc<Hub>, kind: ClaimKinds) -> Consumer {
        let slot = Arc::new(inner.wakeup.register());
        Consumer {
            inner,
            slot,
            kind,
            buffered: VecDeque::new(),
            fetch: None,
            errors: 0,
            done: false,
        }
    }

    /// The next delivery; `None` once the queue is closed. The same as
    /// `StreamExt::next`, without importing it.
    pub async fn next(&mut self) -> Option<Result<Delivery, Error>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }
}

impl Stream for Consumer {
    type Item = Result<Delivery, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some((job, lease_end)) = this.buffered.pop_front() {
                if lease_end.is_none_or(|end| Instant::now() < end) {
                    return Poll::Ready(Some(Ok(Delivery::new(this.inner.clone(), job, None))));
                }
                // Its lease passed while it waited here: another consumer may hold it now.
                tracing::debug!(job = %job.id, "wheel-jobs: dropping a prefetched job whose lease ended");
                continue;
            }
            if this.done {
                return Poll::Ready(None);
            }
            let fetch = this.fetch.get_or_insert_with(|| {
                let max = this.inner.config.prefetch;
                Box::pin(fetch(
                    this.inner.clone(),
                    this.slot.clone(),
                    this.kind.clone(),
                    max,
                    this.errors,
                    None,
                ))
            });
            let result = ready!(fetch.as_mut().poll(cx));
            this.fetch = None;
            match result {
                Ok((jobs, sent)) => {
                    this.errors = 0;
                    this.buffered.extend(jobs.into_iter().map(|job| {
                        let lease_end = sent.checked_add(job.spec.lease);
                        (job, lease_end)
                    }));
                }
                Err(err) if err.is_closed() => this.done = true,
                Err(err) => {
                    this.errors = this.errors.saturating_add(1);
                    return Poll::Ready(Some(Err(err)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Backend, ClaimBatch, KindFilter};
    use crate::core::state::Retry;
    use crate::{JobInfo, JobQueue, Scheduled, When};
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

    /// A store that is never reachable: every claim fails with `is_unavailable`.
    #[derive(Debug, Default)]
    struct Unreachable {
        claims: Arc<AtomicU64>,
    }

    fn down<'a, T: Send + 'a>() -> BoxFuture<'a, Result<T, Error>> {
        Box::pin(async { Err(Error::unavailable("down")) })
    }

    impl Backend for Unreachable {
        fn schedule(
            &self,
            _: crate::backend::NewJob,
        ) -> BoxFuture<'_, Result<(Scheduled, u64), Error>> {
            down()
        }
        fn schedule_many(
            &self,
            _: Vec<crate::backend::NewJob>,
        ) -> BoxFuture<'_, Result<Vec<(Scheduled, u64)>, Error>> {
            down()
        }
        fn import(
            &self,
            _: Vec<crate::backend::Import>,
        ) -> BoxFuture<'_, Result<Vec<bool>, Error>> {
            down()
        }
        fn cancel(&self, _: String) -> BoxFuture<'_, Result<bool, Error>> {
            down()
        }
        fn reschedule(&self, _: String, _: When) -> BoxFuture<'_, Result<Option<u64>, Error>> {
            down()
        }
        fn get(&self, _: String) -> BoxFuture<'_, Result<Option<JobInfo>, Error>> {
            down()
        }
        fn pending(&self) -> BoxFuture<'_, Result<u64, Error>> {
            down()
        }
        fn running(&self) -> BoxFuture<'_, Result<u64, Error>> {
            down()
        }
        fn claim(&self, _: usize, _: ClaimKinds) -> BoxFuture<'_, Result<ClaimBatch, Error>> {
            self.claims.fetch_add(1, SeqCst);
            down()
        }
        fn ack(&self, _: String, _: u64) -> BoxFuture<'_, Result<bool, Error>> {
            down()
        }
        fn retry(
            &self,
            _: String,
            _: u64,
            _: Duration,
        ) -> BoxFuture<'_, Result<(Retry, u64), Error>> {
            down()
        }
        fn extend(&self, _: String, _: u64, _: Duration) -> BoxFuture<'_, Result<bool, Error>> {
            down()
        }
        fn remove_dead(&self, _: String) -> BoxFuture<'_, Result<bool, Error>> {
            down()
        }
        fn purge_dead(&self, _: usize) -> BoxFuture<'_, Result<u64, Error>> {
            down()
        }
        fn close(&self) -> BoxFuture<'_, Result<(), Error>> {
            Box::pin(async { Ok(()) })
        }
        fn schedule_recurring(
            &self,
            _: String,
            _: crate::Recurrence,
            _: Vec<u8>,
            _: crate::CatchUp,
            _: crate::core::kind::Spec,
        ) -> BoxFuture<'_, Result<(crate::Recurring, Option<u64>), Error>> {
            down()
        }
        fn cancel_recurring(&self, _: String) -> BoxFuture<'_, Result<bool, Error>> {
            down()
        }
        fn list_recurring(&self) -> BoxFuture<'_, Result<Vec<crate::RecurringInfo>, Error>> {
            down()
        }
        fn fail(
            &self,
            _: String,
            _: u64,
            _: Duration,
            _: String,
        ) -> BoxFuture<'_, Result<(Retry, u64), Error>> {
            down()
        }
        fn counts(&self) -> BoxFuture<'_, Result<crate::core::job::Counts, Error>> {
            down()
        }
        fn list(
            &self,
            _: crate::JobState,
            _: Option<(u64, String)>,
            _: usize,
            _: bool,
            _: KindFilter,
        ) -> BoxFuture<'_, Result<Vec<(u64, JobInfo)>, Error>> {
            down()
        }
        fn revive(&self, _: String, _: When) -> BoxFuture<'_, Result<Option<u64>, Error>> {
            down()
        }
        fn revive_dead(
            &self,
            _: usize,
            _: When,
        ) -> BoxFuture<'_, Result<(u64, Option<u64>), Error>> {
            down()
        }
        fn set_paused(&self, _: bool) -> BoxFuture<'_, Result<(), Error>> {
            down()
        }
    }

    /// Regression: `close` used to wait out `run`'s backoff after failed claims (up to 5 s).
    /// On a paused clock that wait would show as the clock jumping to the backoff's end.
    #[tokio::test(start_paused = true)]
    async fn close_ends_a_claim_backoff_at_once() {
        let backend = Unreachable::default();
        let claims = backend.claims.clone();
        let config = JobQueue::builder().config();
        let queue = JobQueue::with_backend(Box::new(backend), config, Arc::default());
        let worker = tokio::spawn({
            let queue = queue.clone();
            async move { queue.run(1, |_| async { Ok::<(), Error>(()) }).await }
        });
        // Eight failed claims: the backoff is now at its cap.
        while claims.load(SeqCst) < 8 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let before = tokio::time::Instant::now();
        queue.close().await.unwrap();
        assert_eq!(
            before.elapsed(),
            Duration::ZERO,
            "close waited on the paused clock"
        );
        worker.await.unwrap().unwrap();
        assert_eq!(claims.load(SeqCst), 8, "no claim after close");
    }

    /// A claim's wait for its own commit must not eat its lease: short leases are raised.
    #[test]
    fn short_leases_are_raised_to_the_minimum() {
        for (asked, got) in [
            (Duration::from_nanos(1), crate::MIN_LEASE),
            (Duration::from_millis(300), crate::MIN_LEASE),
            (Duration::from_secs(30), Duration::from_secs(30)),
        ] {
            let config = JobQueue::builder().lease(asked).checked().unwrap();
            assert_eq!(config.lease, got, "{asked:?}");
        }
        let zero = JobQueue::builder().lease(Duration::ZERO).checked();
        assert!(zero.unwrap_err().is_invalid_config());
    }

    #[test]
    fn the_safety_wakeup_is_jittered_within_its_bounds() {
        let max = Duration::from_secs(5);
        let waits: Vec<Duration> = (0..1000u64).map(|s| safety_wait(max, s)).collect();
        for w in &waits {
            assert!(*w <= max && *w >= max * 3 / 4, "{w:?}");
        }
        let distinct: std::collections::HashSet<_> = waits.iter().collect();
        assert!(distinct.len() > 500, "spread: {}", distinct.len());
    }
}
