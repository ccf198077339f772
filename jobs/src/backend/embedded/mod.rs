//! The embedded backend: one redb file, one writer thread, group commit.
//!
//! # Ground rules
//!
//! - One thread owns the [`Store`] (and so the file and its write-ahead log, `wal.rs`).
//!   Every operation, reads included, is a request on its channel; the thread takes every
//!   request waiting (up to `MAX_REQUESTS_PER_COMMIT`) and applies them in two transactions: first the
//!   extends and reads, logged without fsync and answered at once; then everything else
//!   (schedules, claims, acks, ...), in arrival order, made durable by one `fdatasync` of
//!   one log record (or, at a checkpoint, by redb's own durable commit). That is the group
//!   commit: a `schedule` or a claim is answered only after the fsync that made it durable,
//!   and 64 concurrent callers share each fsync instead of paying one each. A claim is durable before its jobs are handed
//!   out, so a crash never forgets a delivery (the attempt it spent counts). Moving the
//!   extends and reads ahead of the rest of their batch is safe: they are concurrent with
//!   it, so either order is one the callers could have seen.
//! - A failed batch (I/O error, corrupt page) fails every request in it and nothing of it
//!   is applied. A panic inside redb is caught and reported the same way, after which the
//!   thread stops: later calls fail with `is_closed` rather than trust a store in an unknown
//!   state.
//! - The file lock is held exactly as long as the thread runs: `close` waits for the thread
//!   to checkpoint (so the next open has no log to replay) and drop the database before it
//!   answers, so the path can be reopened at once. A store whose log could not be written
//!   is `broken`: the thread stops like after a panic, and the next open replays the log.
//! - The store and its log are created with mode 0600 (`open_private`): payloads are often
//!   personal data, and a umask cannot widen it.

mod record;
mod store;
mod wal;

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{
    AtomicBool, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use redb::DatabaseError;
use tokio::sync::oneshot;

use crate::backend::{Backend, BoxFuture, ClaimBatch, ClaimKinds, Import, KindFilter, NewJob};
use crate::core::config::Config;
use crate::core::error::{panic_message, Error};
use crate::core::job::{self, JobInfo, JobState, Scheduled, When};
use crate::core::recurrence::Recurrence;
use crate::core::series::{CatchUp, Recurring, RecurringInfo};
use crate::core::state::{Retry, Tally};
use crate::core::wakeup::Wakeup;
use store::{Op, Reply, Store};

/// Requests the writer thread applies in one transaction at most: bounds a commit's size and
/// latency.
const MAX_REQUESTS_PER_COMMIT: usize = 4096;

enum Request {
    /// Boxed: an op carries a whole spec (a key and its limits included), and a close
    /// should not be that size.
    Op(Box<Op>, oneshot::Sender<Result<Reply, Error>>),
    Close(oneshot::Sender<Result<(), Error>>),
}

pub(crate) struct Embedded {
    path: PathBuf,
    requests: mpsc::Sender<Request>,
    published: Arc<Published>,
    /// This process's idle consumers: an ack or a death (a failure's or a claim's kill)
    /// that makes a successor pending wakes them (the front knows only that the ack held
    /// its lease); the writer thread wakes them for the jobs a batch admitted from their
    /// key's queue (`store/gates.rs`).
    wakeup: Arc<Wakeup>,
}

/// What the writer thread publishes.
#[derive(Default)]
struct Published {
    /// Pending jobs as of the last commit.
    pending: AtomicU64,
    /// Running jobs as of the last commit.
    running: AtomicU64,
    /// Set when the thread stopped, or as soon as a failure is going to stop it.
    closed: AtomicBool,
    /// Why the thread stops, if a failure stops it (set before `closed`, and before the
    /// failing batch is answered): every later call gets this error, not `is_closed`, so a
    /// worker loop does not take a dead store for a clean close.
    failure: std::sync::Mutex<Option<Error>>,
}

impl fmt::Debug for Embedded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Embedded")
            .field("path", &self.path)
            .finish()
    }
}

/// Opens `path` for reading and writing, creating it if missing with mode 0600: jobs and
/// their payloads are the owner's alone (an existing file keeps the mode it has).
pub(crate) fn open_private(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
}

fn open_database(path: &std::path::Path, cache_size: usize) -> Result<redb::Database, Error> {
    let opened = catch_unwind(|| {
        let file = open_private(path)?;
        redb::Database::builder()
            .set_cache_size(cache_size)
            .create_with_backend(redb::backends::FileBackend::new(file)?)
    });
    match opened {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(DatabaseError::DatabaseAlreadyOpen)) => Err(Error::locked()),
        Ok(Err(err)) => Err(Error::storage(format!(
            "cannot open {}: {err}",
            path.display()
        ))),
        Err(panic) => Err(Error::storage(format!(
            "cannot open {}: {}",
            path.display(),
            panic_message(&*panic)
        ))),
    }
}

impl Published {
    /// Records that the store cannot go on (idempotent): from here on every call, `pending`
    /// and `running` included, gets the failure.
    fn fail(&self) {
        let mut failure = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        failure.get_or_insert_with(|| {
            Error::storage(
                "the store stopped after a failure it cannot recover from in place (see the \
                 earlier error); reopen the queue, which replays its log",
            )
        });
        drop(failure);
        self.closed.store(true, Release);
    }

    /// The error for a call the thread can no longer answer: the failure that stopped it,
    /// or `is_closed` after a close.
    fn gone(&self) -> Error {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(Error::closed)
    }

    fn publish(&self, counts: Tally) {
        self.pending.store(counts.pending, Relaxed);
        self.running.store(counts.running, Relaxed);
    }
}

impl Embedded {
    pub(crate) async fn open(
        path: PathBuf,
        config: &Config,
        wakeup: Arc<Wakeup>,
    ) -> Result<Embedded, Error> {
        let cache_size = config.cache_size;
        let config = config.clone();
        let (requests, receiver) = mpsc::channel();
        let published = Arc::new(Published::default());
        let (ready_tx, ready_rx) = oneshot::channel();
        let thread_path = path.clone();
        let thread_published = published.clone();
        let thread_wakeup = wakeup.clone();
        std::thread::Builder::new()
            .name("wheel-jobs-store".into())
            .spawn(move || {
                let opened = open_database(&thread_path, cache_size).and_then(|db| {
                    // Opened only once redb holds the file lock: one process per log too.
                    // Beside the store's real path, so that a store opened through a
                    // symbolic link after a crash still finds its log.
                    let real =
                        std::fs::canonicalize(&thread_path).unwrap_or_else(|_| thread_path.clone());
                    let mut wal_path = real.into_os_string();
                    wal_path.push(".wal");
                    let wal = wal::Wal::open(wal_path.as_ref()).map_err(|err| {
                        Error::storage(format!("cannot open {wal_path:?}: {err}"))
                    })?;
                    catch_unwind(AssertUnwindSafe(|| Store::open(db, &config, Some(wal))))
                        .unwrap_or_else(|panic| Err(Error::storage(panic_message(&*panic))))
                });
                match opened {
                    Ok(store) => {
                        thread_published.publish(store.counts());
                        if ready_tx.send(Ok(())).is_ok() {
                            serve(store, receiver, &thread_published, &thread_wakeup);
                        }
                    }
                    Err(err) => {
                        let _ = ready_tx.send(Err(err));
                    }
                }
            })
            .map_err(Error::storage)?;
        ready_rx
            .await
            .map_err(|_| Error::storage("the store thread stopped while opening"))??;
        Ok(Embedded {
            path,
            requests,
            published,
            wakeup,
        })
    }

    async fn call(&self, op: Op) -> Result<Reply, Error> {
        let (tx, rx) = oneshot::channel();
        self.requests
            .send(Request::Op(Box::new(op), tx))
            .map_err(|_| self.published.gone())?;
        rx.await.map_err(|_| self.published.gone())?
    }
}

/// The writer thread's loop: batch, apply, commit, answer.
fn serve(
    mut store: Store,
    receiver: mpsc::Receiver<Request>,
    published: &Published,
    wakeup: &Wakeup,
) {
    let mut closing = Vec::new();
    let mut panicked = false;
    while let Ok(first) = receiver.recv() {
        let mut ops = Vec::new();
        let mut replies = Vec::new();
        let mut next = Some(first);
        while let Some(request) = next.take() {
            match request {
                Request::Op(op, reply) => {
                    ops.push(*op);
                    replies.push(reply);
                }
                Request::Close(done) => closing.push(done),
            }
            if ops.len() < MAX_REQUESTS_PER_COMMIT && closing.is_empty() {
                next = receiver.try_recv().ok();
            }
        }
        // Extends and reads first, committed without fsync and answered at once; then the
        // rest (claims included) with one shared fsync.
        let (fast, slow): (Vec<_>, Vec<_>) = ops
            .into_iter()
            .zip(replies)
            .partition(|(op, _)| !op.needs_fsync());
        panicked = apply(&mut store, fast, published, wakeup)
            || apply(&mut store, slow, published, wakeup);
        if panicked || store.broken() || !closing.is_empty() {
            break;
        }
    }
    // After a failure (published by `apply`) the store's state is unknown: no checkpoint,
    // the next open replays the log. Either way the file is released (a checkpoint first,
    // after a clean stop) before the requests still queued hear that the thread stopped:
    // the failure advises a reopen, and a `close` promises one.
    let closed = if panicked || store.broken() {
        published.fail();
        let _ = catch_unwind(AssertUnwindSafe(|| drop(store)));
        Err(published.gone())
    } else {
        catch_unwind(AssertUnwindSafe(|| store.close()))
            .unwrap_or_else(|panic| Err(Error::storage(panic_message(&*panic))))
    };
    published.closed.store(true, Release);
    drop(receiver);
    for done in closing {
        let _ = done.send(closed.clone());
    }
}

/// Applies one group of requests in one transaction and answers them; `true` if the store
/// panicked (the thread must stop). Jobs the group admitted from their key's queue wake
/// this process's idle consumers as soon as its commit returns (after its fsync: every op
/// that can admit one needs it), before anyone hears of the group.
fn apply(
    store: &mut Store,
    group: Vec<(Op, oneshot::Sender<Result<Reply, Error>>)>,
    published: &Published,
    wakeup: &Wakeup,
) -> bool {
    if group.is_empty() {
        return false;
    }
    let (ops, replies): (Vec<_>, Vec<_>) = group.into_iter().unzip();
    let (answers, panicked) = match catch_unwind(AssertUnwindSafe(|| store.apply(ops))) {
        Ok(Ok(answers)) => {
            published.publish(store.counts());
            if let Some(at) = store.take_promoted() {
                wakeup.due_at(at);
            }
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(Ok(answer));
            }
            return false;
        }
        Ok(Err(err)) => (err, false),
        Err(panic) => (
            Error::storage(format!("the store panicked: {}", panic_message(&*panic))),
            true,
        ),
    };
    // A store that cannot go on says so to every later call before anyone hears of this
    // batch's failure.
    if panicked || store.broken() {
        published.fail();
    }
    for reply in replies {
        let _ = reply.send(Err(answers.clone()));
    }
    panicked
}

macro_rules! expect_reply {
    ($reply:expr, $variant:pat => $out:expr) => {
        match $reply {
            $variant => Ok($out),
            other => Err(Error::storage(format!("unexpected store reply {other:?}"))),
        }
    };
}

impl Embedded {
    /// A retry, or with an `error` a failure: one `Op::Retry`.
    async fn give_back(
        &self,
        id: String,
        token: u64,
        after: Duration,
        error: Option<String>,
    ) -> Result<(Retry, u64), Error> {
        let op = Op::Retry {
            id,
            token,
            after,
            error,
        };
        let (retry, run_at, successor) =
            expect_reply!(self.call(op).await?, Reply::Retried(r, at, s) => (r, at, s))?;
        if let Some(at) = successor {
            // Durable: the reply came after the commit.
            self.wakeup.due_at(at);
        }
        Ok((retry, run_at))
    }
}

impl Backend for Embedded {
    fn schedule(&self, job: NewJob) -> BoxFuture<'_, Result<(Scheduled, u64), Error>> {
        Box::pin(async move {
            expect_reply!(self.call(Op::Schedule(job)).await?, Reply::Scheduled(s, at) => (s, at))
        })
    }

    fn schedule_many(
        &self,
        jobs: Vec<NewJob>,
    ) -> BoxFuture<'_, Result<Vec<(Scheduled, u64)>, Error>> {
        Box::pin(async move {
            expect_reply!(self.call(Op::ScheduleMany { jobs }).await?, Reply::ScheduledMany(v) => v)
        })
    }

    fn import(&self, jobs: Vec<Import>) -> BoxFuture<'_, Result<Vec<bool>, Error>> {
        Box::pin(async move {
            expect_reply!(self.call(Op::Import { jobs }).await?, Reply::Imported(v) => v)
        })
    }

    fn cancel(&self, id: String) -> BoxFuture<'_, Result<bool, Error>> {
        Box::pin(
            async move { expect_reply!(self.call(Op::Cancel { id }).await?, Reply::Bool(b) => b) },
        )
    }

    fn reschedule(&self, id: String, when: When) -> BoxFuture<'_, Result<Option<u64>, Error>> {
        Box::pin(async move {
            expect_reply!(self.call(Op::Reschedule { id, when }).await?, Reply::Moved(m) => m)
        })
    }

    fn get(&self, id: String) -> BoxFuture<'_, Result<Option<JobInfo>, Error>> {
        Box::pin(
            async move { expect_reply!(self.call(Op::Get { id }).await?, Reply::Info(i) => i) },
        )
    }

    fn pending(&self) -> BoxFuture<'_, Result<u64, Error>> {
        Box::pin(async move {
            // The thread publishes the count after each commit; no request needed.
            if self.published.closed.load(Acquire) {
                return Err(self.published.gone());
            }
            Ok(self.published.pending.load(Relaxed))
        })
    }

    fn running(&self) -> BoxFuture<'_, Result<u64, Error>> {
        Box::pin(async move {
            if self.published.closed.load(Acquire) {
                return Err(self.published.gone());
            }
            Ok(self.published.running.load(Relaxed))
        })
    }

    fn claim(&self, max: usize, kind: ClaimKinds) -> BoxFuture<'_, Result<ClaimBatch, Error>> {
        Box::pin(async move {
            let (batch, handed) = expect_reply!(self.call(Op::Claim { max, kind }).await?, Reply::Claimed(c, h) => (c, h))?;
            if let Some(at) = handed {
                // A successor of a job the claim killed may be of a kind this claim does
                // not take (not in its `next_due`): wake the consumers sleeping past it.
                // Durable: the reply came after the commit.
                self.wakeup.due_at(at);
            }
            Ok(batch)
        })
    }

    fn ack(&self, id: String, token: u64) -> BoxFuture<'_, Result<bool, Error>> {
        Box::pin(async move {
            let (acked, successor) = expect_reply!(self.call(Op::Ack { id, token }).await?, Reply::Acked(b, s) => (b, s))?;
            if let Some(at) = successor {
                // Durable: the reply came after the commit.
                self.wakeup.due_at(at);
            }
            Ok(acked)
        })
    }

    fn retry(
        &self,
        id: String,
        token: u64,
        after: Duration,
    ) -> BoxFuture<'_, Result<(Retry, u64), Error>> {
        Box::pin(self.give_back(id, token, after, None))
    }

    fn extend(&self, id: String, token: u64, by: Duration) -> BoxFuture<'_, Result<bool, Error>> {
        Box::pin(async move {
            expect_reply!(self.call(Op::Extend { id, token, by }).await?, Reply::Bool(b) => b)
        })
    }

    fn remove_dead(&self, id: String) -> BoxFuture<'_, Result<bool, Error>> {
        Box::pin(async move {
            expect_reply!(self.call(Op::RemoveDead { id }).await?, Reply::Bool(b) => b)
        })
    }

    fn purge_dead(&self, limit: usize) -> BoxFuture<'_, Result<u64, Error>> {
        Box::pin(async move {
            expect_reply!(self.call(Op::PurgeDead { limit }).await?, Reply::Count(n) => n)
        })
    }

    fn schedule_recurring(
        &self,
        name: String,
        rule: Recurrence,
        payload: Vec<u8>,
        catch_up: CatchUp,
        spec: crate::core::kind::Spec,
    ) -> BoxFuture<'_, Result<(Recurring, Option<u64>), Error>> {
        Box::pin(async move {
            let op = Op::SetRecurring {
                name,
                rule,
                payload,
                catch_up,
                spec,
            };
            expect_reply!(self.call(op).await?, Reply::Recurring(r, head) => (r, head))
        })
    }

    fn cancel_recurring(&self, name: String) -> BoxFuture<'_, Result<bool, Error>> {
        Box::pin(async move {
            expect_reply!(self.call(Op::CancelRecurring { name }).await?, Reply::Bool(b) => b)
        })
    }

    fn list_recurring(&self) -> BoxFuture<'_, Result<Vec<RecurringInfo>, Error>> {
        Box::pin(async move {
            expect_reply!(self.call(Op::ListRecurring).await?, Reply::RecurringList(l) => l)
        })
    }

    fn close(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            // Already stopped: fine after a close, the failure after a failure.
            let stopped = || match self.published.gone() {
                err if err.is_closed() => Ok(()),
                err => Err(err),
            };
            if self.requests.send(Request::Close(tx)).is_err() {
                return stopped();
            }
            rx.await.unwrap_or_else(|_| stopped())
        })
    }

    fn fail(
        &self,
        id: String,
        token: u64,
        after: Duration,
        error: String,
    ) -> BoxFuture<'_, Result<(Retry, u64), Error>> {
        Box::pin(self.give_back(id, token, after, Some(error)))
    }

    fn counts(&self) -> BoxFuture<'_, Result<job::Counts, Error>> {
        Box::pin(async move { expect_reply!(self.call(Op::Counts).await?, Reply::Counts(c) => c) })
    }

    fn list(
        &self,
        state: JobState,
        after: Option<(u64, String)>,
        limit: usize,
        payloads: bool,
        kind: KindFilter,
    ) -> BoxFuture<'_, Result<Vec<(u64, JobInfo)>, Error>> {
        Box::pin(async move {
            let op = Op::List {
                state,
                after,
                limit,
                payloads,
                kind,
            };
            expect_reply!(self.call(op).await?, Reply::Listed(jobs) => jobs)
        })
    }

    fn revive(&self, id: String, when: When) -> BoxFuture<'_, Result<Option<u64>, Error>> {
        Box::pin(async move {
            expect_reply!(self.call(Op::Revive { id, when }).await?, Reply::Moved(m) => m)
        })
    }

    fn revive_dead(
        &self,
        limit: usize,
        when: When,
    ) -> BoxFuture<'_, Result<(u64, Option<u64>), Error>> {
        Box::pin(async move {
            let op = Op::ReviveDead { limit, when };
            expect_reply!(self.call(op).await?, Reply::Revived(n, at) => (n, (n > 0).then_some(at)))
        })
    }

    fn set_paused(&self, paused: bool) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            expect_reply!(self.call(Op::Pause { paused }).await?, Reply::Bool(_) => ())
        })
    }
}
