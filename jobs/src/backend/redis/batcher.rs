//! [`Batcher`]: concurrent calls coalesced into one script call.
//!
//! # Ground rules
//!
//! - A caller waits at most `redis_timeout` for its answer, queueing included: a batch
//!   stuck behind a slow one fails its callers in time (`is_unavailable`), like any call.
//! - A request whose caller stopped waiting (timed out, or dropped its future) before its
//!   batch was sent is left out of the batch: nobody would learn its outcome, so it is
//!   never applied.

use std::time::Duration;

use super::scripts::MAX_JOBS_PER_SCRIPT;
use crate::core::error::Error;

pub(super) type Reply<T> = tokio::sync::oneshot::Sender<Result<T, Error>>;

/// Coalesces concurrent calls into one script invocation: a task takes every request
/// waiting (up to `MAX_JOBS_PER_SCRIPT`), runs them as one call and answers each. One round trip
/// then serves many jobs under load, and a lone call pays one task hop.
pub(super) struct Batcher<Req, Resp> {
    requests: tokio::sync::mpsc::UnboundedSender<(Req, Reply<Resp>)>,
    timeout: Option<Duration>,
    pub(super) task: tokio::task::JoinHandle<()>,
}

impl<Req: Send + 'static, Resp: Send + 'static> Batcher<Req, Resp> {
    /// A batcher whose callers wait at most `timeout` for `run` to answer their request.
    pub(super) fn new<F, Fut>(timeout: Option<Duration>, run: F) -> Self
    where
        F: Fn(Vec<Req>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<Vec<Resp>, Error>> + Send,
    {
        let (requests, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Req, Reply<Resp>)>();
        let task = tokio::spawn(async move {
            let mut batch = Vec::with_capacity(MAX_JOBS_PER_SCRIPT);
            while rx.recv_many(&mut batch, MAX_JOBS_PER_SCRIPT).await > 0 {
                let (reqs, replies): (Vec<Req>, Vec<Reply<Resp>>) = batch
                    .drain(..)
                    .filter(|(_, reply)| !reply.is_closed())
                    .unzip();
                if reqs.is_empty() {
                    continue;
                }
                let answers = match run(reqs).await {
                    Ok(answers) if answers.len() == replies.len() => answers,
                    Ok(_) => {
                        let err = Error::storage("short batch reply from redis");
                        replies
                            .into_iter()
                            .for_each(|r| drop(r.send(Err(err.clone()))));
                        continue;
                    }
                    Err(err) => {
                        replies
                            .into_iter()
                            .for_each(|r| drop(r.send(Err(err.clone()))));
                        continue;
                    }
                };
                for (reply, answer) in replies.into_iter().zip(answers) {
                    let _ = reply.send(Ok(answer));
                }
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
            Some(t) => tokio::time::timeout(t, rx).await.map_err(|_| {
                Error::unavailable(format!("no answer from redis within {t:?} (redis_timeout)"))
            })?,
            None => rx.await,
        };
        answer.map_err(|_| Error::closed())?
    }
}
