//! The loop behind [`JobQueue::run`](crate::JobQueue::run), `run_kind` and
//! [`Worker::run`](crate::Worker::run): the worker on top of the consumer.
//!
//! # Ground rules
//!
//! - One loop claims for every kind it runs (`routes.rs` `Routes`): a claim names every kind
//!   (`run`) or the declared kinds with room, each at most min(its free cap, the free
//!   permits); a job goes to its kind's handler with its cap's permit, given back with the
//!   slot's when the handler returns. A kind at its cap is left out of the claim; when every
//!   kind with work is, the loop waits for a cap's permit (`freed`), and a claim a cap cut
//!   short ends its idle wait on one (`fetch`'s `refresh`), so a capped kind's due jobs never
//!   wait for another kind's next job.
//! - At most `concurrency` handlers run at once, each a task in one `JoinSet` holding a
//!   semaphore permit; the loop claims exactly as many jobs as there are free permits, so no
//!   job waits leased in a buffer. A task gives its permit back when the handler returns,
//!   before its ack or retry: the next claim then shares a commit with those acks instead
//!   of waiting for them. Tasks still acking are bounded too (`2 × concurrency` tasks).
//!   Before it counts the free permits for a claim, the loop yields once, so handlers
//!   already done give theirs back to that claim: without it the permits split into two
//!   halves taking turns, and each claim was of half the concurrency (on PostgreSQL, four
//!   `run_kind` loops of 12 claimed 6.4 jobs per claim, a statement and a commit each,
//!   before their claims shared statements).
//! - One claim is in flight at a time and is never dropped half-way: a claim's reply is the
//!   only record of the leases it took, so losing it would strand jobs until their lease
//!   ends.
//! - While a handler runs, its lease is renewed every third of a lease (`keep_leased`), the
//!   handler polled meanwhile; so only a process that stopped renewing loses its jobs.
//! - Ok acks; Err and panics (caught around every poll of the handler's future) fail the
//!   delivery with the builder's backoff, the error's text (or `panicked: <message>`) kept
//!   as the job's last error. Dropping the `run` future aborts the handlers; their jobs stay
//!   leased and are redelivered when the lease ends.
//! - `close` drains (`hub.rs`'s `Drain`): it marks the queue closing, which stops every
//!   claim (a `fetch` checks the mark after enabling its wakeup, and `close` wakes them
//!   all), then waits until every `run` loop has joined its handlers, so their acks commit
//!   before the store closes. A `close` from inside a handler skips the wait (it would wait
//!   for itself).

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::backend::Claimed;
use crate::core::error::{panic_message, Error};
use crate::core::job::capped_error;
use crate::queue::consumer::{fetch, Fetch};
use crate::queue::delivery::{ack, backoff, retry, Delivery, Renewal};
use crate::queue::hub::{in_handler, Drain, Hub};
use crate::queue::routes::{boxed, Handler, Route, Routes};

/// Runs `future`, turning a panic in any of its polls into `Err`.
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let future = self.0.as_mut();
        match catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(out)) => Poll::Ready(Ok(out)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

async fn handle(
    inner: Arc<Hub>,
    handler: Handler,
    job: Claimed,
    slot: OwnedSemaphorePermit,
    cap: Option<(OwnedSemaphorePermit, Arc<Notify>)>,
) {
    let (id, token, attempt) = (job.id.clone(), job.token, job.attempt);
    let (job_backoff, lease) = (job.spec.backoff, job.spec.lease);
    let renewal = Arc::new(Renewal::default());
    let delivery = Delivery::new(inner.clone(), job, Some(renewal.clone()));
    let started = Instant::now();
    let outcome = match catch_unwind(AssertUnwindSafe(|| handler(delivery))) {
        Ok(future) => {
            let run = in_handler(CatchUnwind(Box::pin(future)));
            keep_leased(&inner, &id, token, lease, &renewal, run).await
        }
        Err(panic) => Err(panic),
    };
    inner.metrics.handled(started.elapsed());
    // The handler is done: its slot can take the next job while this one's ack commits.
    drop(slot);
    if let Some((permit, freed)) = cap {
        // Its kind has room again: a claim its cap cut short looks again.
        drop(permit);
        freed.notify_one();
    }
    let failure = match outcome {
        Ok(Ok(())) => {
            if let Err(err) = ack(&inner, &id, token).await {
                tracing::warn!(job = %id, attempt, error = %err, "wheel-jobs: ack failed; the job will run again");
            }
            return;
        }
        Ok(Err(err)) => err,
        Err(panic) => capped_error(format_args!("panicked: {}", panic_message(&*panic))),
    };
    let (first, max) = job_backoff;
    let after = backoff(first, max, attempt, token);
    tracing::warn!(job = %id, attempt, error = %failure, retry_in = ?after, "wheel-jobs: job failed");
    if let Err(err) = retry(&inner, &id, token, after, Some(failure)).await {
        tracing::warn!(job = %id, attempt, error = %err, "wheel-jobs: retry failed; the job runs again when its lease ends");
    }
}

/// Polls a handler's `run` to its end, renewing its job's lease every third of a lease
/// meanwhile (as BullMQ renews its locks), so a handler slower than one lease is not run a
/// second time while it still works. A renewal never shortens a lease the handler extended
/// itself, and stops once the handler acked or retried. A renewal that finds the lease gone
/// (`false`: the job was delivered again or removed) stops the renewals and is logged; the
/// handler goes on, and its ack will change nothing. An unreachable store is tried again at
/// the next third; a closed or failed one ends the renewals.
async fn keep_leased<T>(
    inner: &Hub,
    id: &str,
    token: u64,
    lease: Duration,
    renewal: &Renewal,
    run: impl Future<Output = T>,
) -> T {
    let timer = inner.config.timer();
    tokio::pin!(run);
    loop {
        tokio::select! {
            biased;
            out = &mut run => return out,
            () = timer.sleep(lease / 3) => {}
        }
        if renewal.settled.load(SeqCst) {
            return run.await;
        }
        // To one lease from now, or to where the handler's own latest extend put it if that
        // is later: re-asserted at every renewal, so a renewal that raced the handler's
        // extend to the store (and landed second) is undone a third of a lease later.
        let own = *renewal
            .extended_until
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let by = own.map_or(lease, |until| {
            until.saturating_duration_since(Instant::now()).max(lease)
        });
        // The handler keeps running while the renewal commits.
        let renew = inner.backend.extend(id.to_owned(), token, by);
        let renewed = tokio::select! {
            biased;
            out = &mut run => return out,
            renewed = renew => renewed,
        };
        match renewed {
            Ok(true) => {}
            // Settled meanwhile by the handler's own ack or retry: nothing was lost.
            Ok(false) if renewal.settled.load(SeqCst) => return run.await,
            Ok(false) => {
                tracing::warn!(job = %id, "wheel-jobs: the lease was lost while the handler ran; the job may run again elsewhere");
                return run.await;
            }
            Err(err) if err.is_unavailable() => {
                tracing::warn!(job = %id, error = %err, "wheel-jobs: renewing the lease failed; trying again");
            }
            Err(err) => {
                tracing::debug!(job = %id, error = %err, "wheel-jobs: no more lease renewals");
                return run.await;
            }
        }
    }
}

/// The loop behind [`JobQueue::run`](crate::JobQueue::run) (see its docs), on `inner`'s
/// store, claiming the jobs of the kind `kind` (every kind for `None`); `concurrency` is at
/// least 1.
pub(crate) fn run<F, Fut, E>(
    inner: Arc<Hub>,
    kind: Option<String>,
    concurrency: usize,
    handler: F,
) -> impl Future<Output = Result<(), Error>> + Send
where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: fmt::Display + Send + 'static,
{
    let handler = boxed(handler);
    let routes = match kind {
        None => Routes::All(handler),
        Some(kind) => Routes::Kinds(BTreeMap::from([(kind, Route { handler, cap: None })])),
    };
    run_routes(inner, routes, concurrency)
}

/// The loop of [`run`] and of a [`Worker`](crate::Worker): claims the jobs `routes` names
/// (each kind up to its cap) and runs each with its kind's handler; `concurrency` is at
/// least 1.
pub(crate) async fn run_routes(
    inner: Arc<Hub>,
    routes: Routes,
    concurrency: usize,
) -> Result<(), Error> {
    let Some(_running) = Drain::enter(&inner) else {
        return Ok(());
    };
    let slot = Arc::new(inner.wakeup.register());
    // A capped kind's permit came back (`handle`).
    let freed = Arc::new(Notify::new());
    let permits = Arc::new(Semaphore::new(concurrency));
    let mut tasks = JoinSet::new();
    let mut claim: Option<Fetch> = None;
    let mut held: Vec<OwnedSemaphorePermit> = Vec::new();
    let mut unavailable = 0;
    loop {
        if claim.is_none() && tasks.len() < 2 * concurrency {
            while let Ok(permit) = permits.clone().try_acquire_owned() {
                held.push(permit);
            }
            if let (false, (Some(kinds), capped)) = (held.is_empty(), routes.claim(held.len())) {
                // A claim a cap cut short ends its idle wait when a capped kind has room
                // again, so that kind's due jobs do not wait for the other kinds' next job.
                let refresh = capped.then(|| freed.clone());
                let fetching = fetch(
                    inner.clone(),
                    slot.clone(),
                    kinds,
                    held.len(),
                    unavailable,
                    refresh,
                );
                claim = Some(Box::pin(fetching));
            }
        }
        tokio::select! {
            permit = permits.clone().acquire_owned(), if claim.is_none() && tasks.len() < 2 * concurrency => {
                held.push(permit.expect("the semaphore is never closed"));
                // The handler that gave this permit back woke this loop first (tokio runs
                // a task its waker woke next): let the handlers already ready return
                // theirs before claiming, so the claim takes their jobs too rather than
                // one job now and the rest in the next claim (twice the claims per job).
                tokio::task::yield_now().await;
            }
            () = freed.notified(), if claim.is_none() && !held.is_empty() => {
                // Every kind with work was at its cap: one has room now.
            }
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                if let Err(err) = done {
                    tracing::error!(error = %err, "wheel-jobs: a handler task failed");
                }
            }
            claimed = async { claim.as_mut().expect("a claim in flight").await }, if claim.is_some() => {
                claim = None;
                match claimed {
                    Ok((jobs, _)) => {
                        unavailable = 0;
                        let handed_out = !jobs.is_empty();
                        for job in jobs {
                            let Some((handler, cap)) = routes.route(&job.spec.kind) else {
                                tracing::error!(job = %job.id, kind = %job.spec.kind, "wheel-jobs: a claim returned a job of a kind it did not ask for; it runs again when its lease ends");
                                continue;
                            };
                            let permit = held.pop().expect("a permit per claimed job");
                            let cap = cap.map(|cap| (cap, freed.clone()));
                            // Everything the handler (and its ack or failure) logs names the job.
                            let span = tracing::info_span!("wheel_jobs.job", job = %job.id, attempt = job.attempt);
                            let handled = handle(inner.clone(), handler, job, permit, cap);
                            tasks.spawn(handled.instrument(span));
                        }
                        held.clear(); // fewer jobs than permits: give the rest back
                        if handed_out {
                            // The next claim takes the permits free at the top of the loop:
                            // let the handlers just spawned that are already done give theirs
                            // back first. Otherwise the permits split into two halves that
                            // take turns (one claimed while the other's handlers run), each
                            // claim half the concurrency: twice the claims per job.
                            tokio::task::yield_now().await;
                        }
                    }
                    Err(err) if err.is_closed() => {
                        while tasks.join_next().await.is_some() {}
                        return Ok(());
                    }
                    Err(err) if err.is_unavailable() => {
                        // The next claim backs off (fetch sleeps on its error count).
                        tracing::warn!(error = %err, "wheel-jobs: store unavailable; retrying");
                        held.clear();
                        unavailable += 1;
                    }
                    Err(err) => return Err(err),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write;
    use std::sync::atomic::AtomicU64;
    use std::sync::Mutex;
    use std::time::Duration;

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    /// Writes down every span created: its name and fields.
    #[derive(Default)]
    struct Spans {
        seen: Arc<Mutex<Vec<String>>>,
        ids: AtomicU64,
    }

    struct Fields<'a>(&'a mut String);

    impl Visit for Fields<'_> {
        fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    impl Subscriber for Spans {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, span: &Attributes<'_>) -> Id {
            let mut text = span.metadata().name().to_owned();
            span.record(&mut Fields(&mut text));
            self.seen.lock().unwrap().push(text);
            Id::from_u64(self.ids.fetch_add(1, SeqCst) + 1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, _: &Event<'_>) {}
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    #[tokio::test(flavor = "current_thread")]
    async fn run_wraps_each_handler_in_a_span_naming_the_job() {
        let spans = Spans::default();
        let seen = spans.seen.clone();
        // This thread only: the runtime and its tasks run here.
        let _guard = tracing::subscriber::set_default(spans);
        let dir = tempfile::tempdir().unwrap();
        let queue = crate::JobQueue::open(dir.path().join("jobs.redb"))
            .await
            .unwrap();
        queue.schedule("job-7", Duration::ZERO, "p").await.unwrap();
        let (done, mut ran) = tokio::sync::mpsc::unbounded_channel();
        let worker = queue.clone();
        let running = tokio::spawn(async move {
            worker
                .run(1, move |job| {
                    let done = done.clone();
                    async move {
                        done.send(job.id().to_owned()).unwrap();
                        Ok::<(), String>(())
                    }
                })
                .await
        });
        assert_eq!(ran.recv().await.as_deref(), Some("job-7"));
        queue.close().await.unwrap();
        running.await.unwrap().unwrap();
        let seen = seen.lock().unwrap();
        assert!(
            seen.iter()
                .any(|s| s == "wheel_jobs.job job=job-7 attempt=1"),
            "{seen:?}"
        );
    }
}
