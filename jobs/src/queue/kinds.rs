//! One worker for several kinds: [`Worker`], the kinds it declared, each with its handler
//! and optional cap, run by the claim loop of `worker.rs` through their routes
//! (`routes.rs`).
//!
//! # Ground rules
//!
//! - A kind is declared once, valid, before its cap; a worker runs with at least one kind.
//!   Misuse panics where it is written (`#[track_caller]`), never at the first claim.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::core::error::Error;
use crate::core::kind::assert_kind;
use crate::queue::delivery::Delivery;
use crate::queue::hub::Hub;
use crate::queue::routes::{boxed, Route, Routes};
use crate::queue::worker;

/// A worker for several kinds of jobs, from [`JobQueue::worker`](crate::JobQueue::worker):
/// each declared kind with its own handler and optional concurrency cap, all claimed by one
/// loop. Each claim names the declared kinds that have room, so a worker of four kinds
/// makes one claim where four [`run_kind`](crate::JobQueue::run_kind) loops make four (on
/// PostgreSQL, the loops' claims in flight together share one statement).
///
/// A handler gets only its own kind's jobs; jobs of kinds the worker did not declare are
/// never claimed (they stay pending for the workers that handle them). Among the due jobs
/// of its kinds, a claim takes the highest priority first, across kinds, then the
/// earliest due, then the smallest id, each kind up to what its cap leaves.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use wheel_jobs::JobOptions;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), wheel_jobs::Error> {
/// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-worker-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// let queue = wheel_jobs::JobQueue::open(dir.join("jobs.redb")).await?;
/// queue.schedule_with("rate:7", Duration::ZERO, "5", &JobOptions::kind("rate")).await?;
/// queue.schedule_with("remind:7", Duration::ZERO, "", &JobOptions::kind("remind")).await?;
/// let (done, mut ran) = tokio::sync::mpsc::unbounded_channel();
/// let (rated, reminded) = (done.clone(), done);
/// let worker = queue
///     .worker()
///     .kind("rate", move |job| {
///         let done = rated.clone();
///         async move {
///             done.send(format!("rated {}", job.id())).ok();
///             Ok::<(), std::io::Error>(())
///         }
///     })
///     .kind("remind", move |job| {
///         let done = reminded.clone();
///         async move {
///             done.send(format!("reminded {}", job.id())).ok();
///             Ok::<(), std::io::Error>(())
///         }
///     })
///     .cap("remind", 2); // at most 2 reminders at once, of the 8 slots
/// tokio::spawn(worker.run(8));
/// let mut seen = vec![ran.recv().await.unwrap(), ran.recv().await.unwrap()];
/// seen.sort();
/// assert_eq!(seen, ["rated rate:7", "reminded remind:7"]);
/// # queue.close().await?;
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok(())
/// # }
/// ```
#[must_use = "a worker does nothing until it is `run`"]
pub struct Worker {
    inner: Arc<Hub>,
    routes: BTreeMap<String, Route>,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kinds: BTreeMap<&str, Option<usize>> = self
            .routes
            .iter()
            .map(|(kind, route)| {
                let cap = route.cap.as_ref().map(|cap| cap.available_permits());
                (kind.as_str(), cap)
            })
            .collect();
        f.debug_struct("Worker").field("kinds", &kinds).finish()
    }
}

impl Worker {
    pub(crate) fn new(inner: Arc<Hub>) -> Worker {
        Worker {
            inner,
            routes: BTreeMap::new(),
        }
    }

    /// Declares `kind`, its jobs handed to `handler` (as [`JobQueue::run`]'s handler: Ok
    /// acks, Err and panics fail the job with its backoff).
    ///
    /// [`JobQueue::run`]: crate::JobQueue::run
    ///
    /// # Panics
    ///
    /// Panics if `kind` was declared already, is longer than
    /// [`MAX_KIND_LEN`](crate::MAX_KIND_LEN) bytes or holds a control character (no job has
    /// such a kind).
    #[track_caller]
    pub fn kind<F, Fut, E>(mut self, kind: &str, handler: F) -> Worker
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Display + Send + 'static,
    {
        assert_kind("Worker::kind", kind);
        assert!(
            !self.routes.contains_key(kind),
            "wheel-jobs: Worker::kind: the kind {kind:?} is declared twice"
        );
        let route = Route {
            handler: boxed(handler),
            cap: None,
        };
        self.routes.insert(kind.to_owned(), route);
        self
    }

    /// Runs at most `n` handlers of `kind` at once (without a cap a kind may take every
    /// slot of the worker). The other kinds' jobs go on being claimed while `kind` is at
    /// its cap.
    ///
    /// # Panics
    ///
    /// Panics if `kind` was not declared with [`kind`](Self::kind) first, or `n` is 0.
    #[track_caller]
    pub fn cap(mut self, kind: &str, n: usize) -> Worker {
        assert!(n > 0, "wheel-jobs: Worker::cap needs a cap of at least 1");
        let Some(route) = self.routes.get_mut(kind) else {
            panic!(
                "wheel-jobs: Worker::cap: the kind {kind:?} is not declared (call `kind` first)"
            );
        };
        route.cap = Some(Arc::new(Semaphore::new(n)));
        self
    }

    /// Claims and runs the declared kinds' jobs, at most `concurrency` handlers at once in
    /// all (and each capped kind at most its cap), until the queue closes: as
    /// [`JobQueue::run`](crate::JobQueue::run) does for every kind, with its lease
    /// renewals, its failures and retries, and its drain on
    /// [`close`](crate::JobQueue::close).
    ///
    /// # Cancellation
    ///
    /// Dropping the future aborts the running handlers; their jobs stay leased and are
    /// redelivered when the lease ends.
    ///
    /// # Errors
    ///
    /// As [`JobQueue::run`](crate::JobQueue::run).
    ///
    /// # Panics
    ///
    /// Panics if `concurrency` is 0 or no kind was declared.
    #[track_caller]
    pub fn run(self, concurrency: usize) -> impl Future<Output = Result<(), Error>> + Send {
        assert!(
            concurrency > 0,
            "wheel-jobs: Worker::run needs a concurrency of at least 1"
        );
        assert!(
            !self.routes.is_empty(),
            "wheel-jobs: Worker::run needs at least one kind (declare them with `kind`)"
        );
        worker::run_routes(self.inner, Routes::Kinds(self.routes), concurrency)
    }
}

#[cfg(test)]
mod tests {
    use crate::queue::routes::{boxed, Routes};
    use crate::JobQueue;

    async fn queue() -> (JobQueue, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let queue = JobQueue::open(dir.path().join("jobs.redb")).await.unwrap();
        (queue, dir)
    }

    fn ok(_: crate::Delivery) -> std::future::Ready<Result<(), String>> {
        std::future::ready(Ok(()))
    }

    #[tokio::test]
    #[should_panic(expected = "Worker::kind: the kind \"a\" is declared twice")]
    async fn a_kind_declared_twice_panics() {
        let (queue, _dir) = queue().await;
        let _ = queue.worker().kind("a", ok).kind("a", ok);
    }

    #[tokio::test]
    #[should_panic(expected = "Worker::kind needs a valid kind")]
    async fn an_invalid_kind_panics() {
        let (queue, _dir) = queue().await;
        let _ = queue.worker().kind("bad\nkind", ok);
    }

    #[tokio::test]
    #[should_panic(expected = "Worker::cap: the kind \"b\" is not declared")]
    async fn a_cap_of_an_undeclared_kind_panics() {
        let (queue, _dir) = queue().await;
        let _ = queue.worker().kind("a", ok).cap("b", 1);
    }

    #[tokio::test]
    #[should_panic(expected = "Worker::cap needs a cap of at least 1")]
    async fn a_cap_of_zero_panics() {
        let (queue, _dir) = queue().await;
        let _ = queue.worker().kind("a", ok).cap("a", 0);
    }

    #[tokio::test]
    #[should_panic(expected = "Worker::run needs at least one kind")]
    async fn a_worker_without_kinds_panics_at_run() {
        let (queue, _dir) = queue().await;
        drop(queue.worker().run(1));
    }

    #[tokio::test]
    #[should_panic(expected = "Worker::run needs a concurrency of at least 1")]
    async fn a_worker_of_no_concurrency_panics_at_run() {
        let (queue, _dir) = queue().await;
        drop(queue.worker().kind("a", ok).run(0));
    }

    #[tokio::test]
    async fn a_claim_names_the_kinds_with_room_each_at_most_its_free_cap() {
        let (queue, _dir) = queue().await;
        let worker = queue
            .worker()
            .kind("a", ok)
            .kind("b", ok)
            .kind("c", ok)
            .cap("a", 2)
            .cap("b", 1);
        let routes = Routes::Kinds(worker.routes.clone());
        let some = |kinds: &[(&str, usize)]| {
            let kinds = kinds.iter().map(|(k, n)| (k.to_string(), *n)).collect();
            Some(crate::backend::ClaimKinds::Some(kinds))
        };
        assert_eq!(
            routes.claim(5),
            (some(&[("a", 2), ("b", 1), ("c", 5)]), true)
        );
        assert_eq!(
            routes.claim(1),
            (some(&[("a", 1), ("b", 1), ("c", 1)]), false)
        );
        // b at its cap: left out of the claim until its permit comes back.
        let (_, held) = routes.route("b").unwrap();
        assert_eq!(routes.claim(3), (some(&[("a", 2), ("c", 3)]), true));
        assert!(routes.route("b").is_none(), "no second permit of b");
        drop(held);
        assert_eq!(
            routes.claim(1),
            (some(&[("a", 1), ("b", 1), ("c", 1)]), false)
        );
        assert!(
            routes.route("d").is_none(),
            "an undeclared kind has no route"
        );
        let all = Routes::All(boxed(ok));
        assert_eq!(all.claim(3), (Some(crate::backend::ClaimKinds::All), false));
        queue.close().await.unwrap();
    }
}
