//! [`Batcher`]: concurrent calls coalesced into one transaction and one commit (group
//! commit, as `redis/batcher.rs` does for script calls).
//!
//! # Ground rules
//!
//! - A caller waits at most `postgres_timeout` for its answer, queueing included: a batch
//!   stuck behind a slow one fails its callers in time (`is_unavailable`), like any call.
//! - A request whose caller stopped waiting before its batch was sent is left out of it:
//!   nobody would learn its outcome, so it is never applied.
//! - One task per batcher runs one statement at a time on one pooled connection: under load
//!   the requests that arrive during a statement share the next one.
//! - The batch's `run` answers every reply it is given (with [`answer`] for all at once, or
//!   one by one: a batch stalled on one contested row answers the others first).

use std::time::Duration;

use crate::core::error::Error;

pub(super) type Reply<T> = tokio::sync::oneshot::Sender<Result<T, Error>>;

/// The most requests one statement carries.
pub(super) const MAX_BATCH: usize = 512;

pub(super) struct Batcher<Req, Resp> {
    requests: tokio::sync::mpsc::UnboundedSender<(Req, Reply<Resp>)>,
    timeout: Option<Duration>,
    pub(super) task: tokio::task::JoinHandle<()>,
}

impl<Req: Send + 'static, Resp: Send + 'static> Batcher<Req, Resp> {
    /// A batcher whose callers wait at most `timeout` for `run` to answer their request
    /// (`run` gets the requests and their replies, in the same order).
    pub(super) fn new<F, Fut>(timeout: Option<Duration>, run: F) -> Self
    where
        F: Fn(Vec<Req>, Vec<Reply<Resp>>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let (requests, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Req, Reply<Resp>)>();
        let task = tokio::spawn(async move {
            let mut batch = Vec::with_capacity(MAX_BATCH);
            while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
                let (reqs, replies): (Vec<Req>, Vec<Reply<Resp>>) = batch
                    .drain(..)
                    .filter(|(_, reply)| !reply.is_closed())
                    .unzip();
                if reqs.is_empty() {
                    continue;
                }
                run(reqs, replies).await;
            }
        });
        Batcher {
            requests,
            timeout,
            task,
        }
    }

    pub(super) async fn call(&self, req: Req) -> Result<Resp, Error> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.requests.send((req, tx)).map_err(|_| Error::closed())?;
        let answer = match self.timeout {
            Some(t) => tokio::time::timeout(t, rx)
                .await
                .map_err(|_| Error::unavailable(timed_out(t)))?,
            None => rx.await,
        };
        answer.map_err(|_| Error::closed())?
    }
}

/// Answers `replies` with `result`'s answers in order, or all with its error.
pub(super) fn answer<T>(replies: Vec<Reply<T>>, result: Result<Vec<T>, Error>) {
    match result {
        Ok(answers) if answers.len() == replies.len() => {
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(Ok(answer));
            }
        }
        Ok(_) => {
            let err = Error::storage("short batch reply from postgres");
            replies
                .into_iter()
                .for_each(|r| drop(r.send(Err(err.clone()))));
        }
        Err(err) => replies
            .into_iter()
            .for_each(|r| drop(r.send(Err(err.clone())))),
    }
}

/// The message of a call that outlived `postgres_timeout`.
pub(super) fn timed_out(t: Duration) -> String {
    format!("no answer from postgres within {t:?} (postgres_timeout)")
}
