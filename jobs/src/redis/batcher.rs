//! [`Batcher`]: concurrent calls coalesced into one script call.

use crate::error::Error;

pub(super) type Reply<T> = tokio::sync::oneshot::Sender<Result<T, Error>>;

/// Coalesces concurrent calls into one script invocation: a task takes every request
/// waiting (up to `MAX_BATCH`), runs them as one call and answers each. One round trip
/// then serves many jobs under load, and a lone call pays one task hop.
pub(super) struct Batcher<Req, Resp> {
    requests: tokio::sync::mpsc::UnboundedSender<(Req, Reply<Resp>)>,
    pub(super) task: tokio::task::JoinHandle<()>,
}

pub(super) const MAX_BATCH: usize = 512;

impl<Req: Send + 'static, Resp: Send + 'static> Batcher<Req, Resp> {
    pub(super) fn new<F, Fut>(run: F) -> Self
    where
        F: Fn(Vec<Req>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<Vec<Resp>, Error>> + Send,
    {
        let (requests, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Req, Reply<Resp>)>();
        let task = tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match rx.try_recv() {
                        Ok(next) => batch.push(next),
                        Err(_) => break,
                    }
                }
                let (reqs, replies): (Vec<Req>, Vec<Reply<Resp>>) = batch.into_iter().unzip();
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
        Batcher { requests, task }
    }

    pub(super) async fn call(&self, req: Req) -> Result<Resp, Error> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.requests.send((req, tx)).map_err(|_| Error::closed())?;
        rx.await.map_err(|_| Error::closed())?
    }
}
