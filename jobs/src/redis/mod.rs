//! The Redis backend (feature `redis`): the same queue across processes and machines.
//!
//! # Ground rules
//!
//! - Every state change is one Lua script (the `.lua` files beside this one, each headed by
//!   its keys, arguments, return value and why it is atomic). The state machine is
//!   `model.rs`'s, written out in Lua: states `p`/`l`/`d`, attempts counted at claim,
//!   tokens checked by ack, retry and extend, dead after `max_attempts`.
//! - Keys of one queue share the hash tag `{name}`, so every script touches one cluster slot.
//!   The due index is a sorted set of **ids** (scored by due microseconds: run_at when
//!   pending, lease end when leased); payloads live in their own hash, so cancel by id is
//!   O(log n).
//! - Time is the server's (`TIME` inside the scripts): `When::After` delays, lease ends and
//!   "now" at a claim. A `When::At` is a wall-clock instant the caller chose; its score is
//!   rounded up to the microsecond, so it is never delivered early.
//! - A schedule, reschedule or retry that makes a job the first due one `PUBLISH`es its
//!   score on `{name}:wake`; every `JobQueue` subscribes and wakes its idle consumers. A
//!   lost message only delays a consumer until its safety wakeup (at most 5 s).
//! - Concurrent schedules and acks are coalesced by a `Batcher` into one script call (up
//!   to 512 jobs), claims take a batch per call: under load a job costs well under one
//!   round trip.
//! - Connection failures are `Error::is_unavailable`; the connection manager reconnects.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::ConnectionManager;
use ::redis::{Client, Script, Value};

use crate::backend::{Backend, BoxFuture, ClaimBatch, Claimed};
use crate::model::Retry;
use crate::queue::{nanos, Config};
use crate::wakeup::Wakeup;
use crate::{Error, JobInfo, JobState, Scheduled, When};

/// Delays past this are stored as `When::At` the saturation point: Lua's doubles hold
/// microseconds exactly only below 2^53 (year 2255).
const MAX_AFTER: Duration = Duration::from_secs(100 * 365 * 86_400);

struct Scripts {
    schedule: Script,
    cancel: Script,
    reschedule: Script,
    get: Script,
    claim: Script,
    ack: Script,
    retry: Script,
    extend: Script,
    remove_dead: Script,
}

impl Scripts {
    fn load() -> Scripts {
        Scripts {
            schedule: Script::new(include_str!("schedule.lua")),
            cancel: Script::new(include_str!("cancel.lua")),
            reschedule: Script::new(include_str!("reschedule.lua")),
            get: Script::new(include_str!("get.lua")),
            claim: Script::new(include_str!("claim.lua")),
            ack: Script::new(include_str!("ack.lua")),
            retry: Script::new(include_str!("retry.lua")),
            extend: Script::new(include_str!("extend.lua")),
            remove_dead: Script::new(include_str!("remove_dead.lua")),
        }
    }
}

struct Keys {
    meta: String,
    payload: String,
    due: String,
    counts: String,
    seq: String,
    dead: String,
    wake: String,
}

pub(crate) struct Redis {
    name: String,
    conn: ConnectionManager,
    keys: Arc<Keys>,
    scripts: Arc<Scripts>,
    lease_us: u64,
    max_attempts: u32,
    closed: AtomicBool,
    subscriber: tokio::task::JoinHandle<()>,
    schedules: Batcher<(String, When, Vec<u8>), (Scheduled, u64)>,
    acks: Batcher<(String, u64), bool>,
}

type Reply<T> = tokio::sync::oneshot::Sender<Result<T, Error>>;

/// Coalesces concurrent calls into one script invocation: a task takes every request
/// waiting (up to `MAX_BATCH`), runs them as one call and answers each. One round trip
/// then serves many jobs under load, and a lone call pays one task hop.
struct Batcher<Req, Resp> {
    requests: tokio::sync::mpsc::UnboundedSender<(Req, Reply<Resp>)>,
    task: tokio::task::JoinHandle<()>,
}

const MAX_BATCH: usize = 512;

impl<Req: Send + 'static, Resp: Send + 'static> Batcher<Req, Resp> {
    fn new<F, Fut>(run: F) -> Self
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

    async fn call(&self, req: Req) -> Result<Resp, Error> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.requests.send((req, tx)).map_err(|_| Error::closed())?;
        rx.await.map_err(|_| Error::closed())?
    }
}

impl fmt::Debug for Redis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redis").field("queue", &self.name).finish()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.subscriber.abort();
        self.schedules.task.abort();
        self.acks.task.abort();
    }
}

fn redis_error(err: ::redis::RedisError) -> Error {
    if err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout()
    {
        Error::unavailable(err)
    } else {
        Error::storage(err)
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The script arguments for a due time: mode, value, score.
fn when_args(when: When) -> (&'static str, String, String) {
    match when {
        When::After(d) if d <= MAX_AFTER => ("after", micros(d).to_string(), String::new()),
        When::After(_) => at_args(u64::MAX),
        When::At(t) => at_args(nanos(t)),
    }
}

fn at_args(ns: u64) -> (&'static str, String, String) {
    ("at", ns.to_string(), ns.div_ceil(1000).to_string())
}

fn int(v: &Value) -> Result<u64, Error> {
    match v {
        Value::Int(i) => {
            u64::try_from(*i).map_err(|_| Error::storage("negative integer from redis"))
        }
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| Error::storage("expected an integer from redis")),
        Value::SimpleString(s) => s
            .parse()
            .map_err(|_| Error::storage("expected an integer from redis")),
        _ => Err(Error::storage(format!(
            "expected an integer from redis, got {v:?}"
        ))),
    }
}

fn bytes(v: Value) -> Result<Vec<u8>, Error> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.into_bytes()),
        Value::Nil => Ok(Vec::new()),
        other => Err(Error::storage(format!(
            "expected bytes from redis, got {other:?}"
        ))),
    }
}

fn text(v: Value) -> Result<String, Error> {
    String::from_utf8(bytes(v)?).map_err(|_| Error::storage("non-UTF-8 text from redis"))
}

fn array(v: Value) -> Result<Vec<Value>, Error> {
    match v {
        Value::Array(items) => Ok(items),
        other => Err(Error::storage(format!(
            "expected an array from redis, got {other:?}"
        ))),
    }
}

/// A score (microseconds, possibly in exponent form) as nanoseconds, saturating.
fn score_ns(score: &str) -> Result<u64, Error> {
    let us: f64 = score
        .parse()
        .map_err(|_| Error::storage("bad score from redis"))?;
    Ok(if us >= (u64::MAX / 1000) as f64 {
        u64::MAX
    } else {
        us as u64 * 1000
    })
}

impl Redis {
    pub(crate) async fn open(
        url: &str,
        name: &str,
        config: &Config,
        wakeup: Arc<Wakeup>,
    ) -> Result<Redis, Error> {
        if name.is_empty() || name.contains(['{', '}']) {
            return Err(Error::invalid_config(
                "the queue name must be non-empty, without braces",
            ));
        }
        let client = Client::open(url)
            .map_err(|e| Error::invalid_config_owned(format!("bad redis url: {e}")))?;
        let conn = ConnectionManager::new(client.clone())
            .await
            .map_err(redis_error)?;
        let tag = format!("{{{name}}}");
        let keys = Keys {
            meta: format!("{tag}:meta"),
            payload: format!("{tag}:payload"),
            due: format!("{tag}:due"),
            counts: format!("{tag}:counts"),
            seq: format!("{tag}:seq"),
            dead: format!("{tag}:dead"),
            wake: format!("{tag}:wake"),
        };
        let subscriber = tokio::spawn(subscribe(
            client,
            keys.wake.clone(),
            Arc::downgrade(&wakeup),
        ));
        let (keys, scripts) = (Arc::new(keys), Arc::new(Scripts::load()));
        let schedules = {
            let (conn, keys, scripts) = (conn.clone(), keys.clone(), scripts.clone());
            Batcher::new(move |jobs| {
                schedule_jobs(conn.clone(), keys.clone(), scripts.clone(), jobs)
            })
        };
        let acks = {
            let (conn, keys, scripts) = (conn.clone(), keys.clone(), scripts.clone());
            Batcher::new(move |acks| ack_jobs(conn.clone(), keys.clone(), scripts.clone(), acks))
        };
        Ok(Redis {
            name: name.to_owned(),
            conn,
            keys,
            scripts,
            schedules,
            acks,
            lease_us: micros(config.lease),
            max_attempts: config.max_attempts,
            closed: AtomicBool::new(false),
            subscriber,
        })
    }

    fn conn(&self) -> Result<ConnectionManager, Error> {
        if self.closed.load(SeqCst) {
            return Err(Error::closed());
        }
        Ok(self.conn.clone())
    }
}

async fn schedule_jobs(
    mut conn: ConnectionManager,
    keys: Arc<Keys>,
    scripts: Arc<Scripts>,
    jobs: Vec<(String, When, Vec<u8>)>,
) -> Result<Vec<(Scheduled, u64)>, Error> {
    let mut call = scripts.schedule.prepare_invoke();
    call.key(&keys.meta)
        .key(&keys.payload)
        .key(&keys.due)
        .key(&keys.counts);
    call.arg(&keys.wake);
    for (id, when, payload) in &jobs {
        let (mode, value, score) = when_args(*when);
        call.arg(id)
            .arg(mode)
            .arg(value)
            .arg(score)
            .arg(payload.as_slice());
    }
    let reply: Value = call.invoke_async(&mut conn).await.map_err(redis_error)?;
    array(reply)?
        .into_iter()
        .map(|pair| {
            let pair = array(pair)?;
            let [created, run_at] = pair.as_slice() else {
                return Err(Error::storage("short schedule reply"));
            };
            let outcome = if int(created)? == 1 {
                Scheduled::Created
            } else {
                Scheduled::Exists
            };
            Ok((outcome, int(run_at)?))
        })
        .collect()
}

async fn ack_jobs(
    mut conn: ConnectionManager,
    keys: Arc<Keys>,
    scripts: Arc<Scripts>,
    acks: Vec<(String, u64)>,
) -> Result<Vec<bool>, Error> {
    let mut call = scripts.ack.prepare_invoke();
    call.key(&keys.meta)
        .key(&keys.payload)
        .key(&keys.due)
        .key(&keys.counts);
    for (id, token) in &acks {
        call.arg(id).arg(token);
    }
    let reply: Value = call.invoke_async(&mut conn).await.map_err(redis_error)?;
    array(reply)?.iter().map(|v| Ok(int(v)? == 1)).collect()
}

/// Listens on the queue's wake channel and wakes this process's idle consumers.
async fn subscribe(client: Client, channel: String, wakeup: std::sync::Weak<Wakeup>) {
    use futures_core::Stream;
    let mut backoff = Duration::from_millis(50);
    loop {
        if let Ok(mut pubsub) = client.get_async_pubsub().await {
            if pubsub.subscribe(&channel).await.is_ok() {
                backoff = Duration::from_millis(50);
                let mut messages = pubsub.on_message();
                while let Some(msg) =
                    std::future::poll_fn(|cx| std::pin::Pin::new(&mut messages).poll_next(cx)).await
                {
                    let Some(wakeup) = wakeup.upgrade() else {
                        return;
                    };
                    let due = msg
                        .get_payload::<String>()
                        .ok()
                        .and_then(|s| score_ns(&s).ok());
                    wakeup.due_at(due.unwrap_or(0));
                }
            }
        }
        if wakeup.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

impl Backend for Redis {
    fn schedule(
        &self,
        id: String,
        when: When,
        payload: Vec<u8>,
    ) -> BoxFuture<'_, Result<(Scheduled, u64), Error>> {
        Box::pin(async move {
            self.conn()?;
            self.schedules.call((id, when, payload)).await
        })
    }

    fn schedule_many(
        &self,
        jobs: Vec<(String, When, Vec<u8>)>,
    ) -> BoxFuture<'_, Result<Vec<(Scheduled, u64)>, Error>> {
        Box::pin(async move {
            let conn = self.conn()?;
            schedule_jobs(conn, self.keys.clone(), self.scripts.clone(), jobs).await
        })
    }

    fn cancel(&self, id: String) -> BoxFuture<'_, Result<bool, Error>> {
        Box::pin(async move {
            let mut conn = self.conn()?;
            let k = &self.keys;
            let mut call = self.scripts.cancel.prepare_invoke();
            call.key(&k.meta)
                .key(&k.payload)
                .key(&k.due)
                .key(&k.counts)
                .arg(&id);
            let removed: u64 = call.invoke_async(&mut conn).await.map_err(redis_error)?;
            Ok(removed == 1)
        })
    }

    fn reschedule(&self, id: String, when: When) -> BoxFuture<'_, Result<Option<u64>, Error>> {
        Box::pin(async move {
            let mut conn = self.conn()?;
            let (mode, value, score) = when_args(when);
            let mut call = self.scripts.reschedule.prepare_invoke();
            call.key(&self.keys.meta).key(&self.keys.due);
            call.arg(&id)
                .arg(mode)
                .arg(value)
                .arg(score)
                .arg(&self.keys.wake);
            let reply: Value = call.invoke_async(&mut conn).await.map_err(redis_error)?;
            match reply {
                Value::Nil => Ok(None),
                other => Ok(Some(int(&other)?)),
            }
        })
    }

    fn get(&self, id: String) -> BoxFuture<'_, Result<Option<JobInfo>, Error>> {
        Box::pin(async move {
            let mut conn = self.conn()?;
            let mut call = self.scripts.get.prepare_invoke();
            call.key(&self.keys.meta).key(&self.keys.payload).arg(&id);
            let reply: Value = call.invoke_async(&mut conn).await.map_err(redis_error)?;
            if reply == Value::Nil {
                return Ok(None);
            }
            let mut parts = array(reply)?.into_iter();
            let meta = text(parts.next().unwrap_or(Value::Nil))?;
            let payload = bytes(parts.next().unwrap_or(Value::Nil))?;
            let fields: Vec<&str> = meta.split(':').collect();
            let [state, attempt, _, run_at] = fields.as_slice() else {
                return Err(Error::storage(format!("corrupt job record {meta:?}")));
            };
            let state = match *state {
                "p" => JobState::Pending,
                "l" => JobState::Running,
                "d" => JobState::Dead,
                _ => return Err(Error::storage(format!("corrupt job record {meta:?}"))),
            };
            let parse = |s: &str| {
                s.parse::<u64>()
                    .map_err(|_| Error::storage(format!("corrupt job record {meta:?}")))
            };
            Ok(Some(JobInfo {
                state,
                run_at: parse(run_at)?,
                attempt: u32::try_from(parse(attempt)?).unwrap_or(u32::MAX),
                payload,
            }))
        })
    }

    fn pending(&self) -> BoxFuture<'_, Result<u64, Error>> {
        Box::pin(async move {
            let mut conn = self.conn()?;
            let n: Option<i64> = ::redis::cmd("HGET")
                .arg(&self.keys.counts)
                .arg("pending")
                .query_async(&mut conn)
                .await
                .map_err(redis_error)?;
            Ok(n.unwrap_or(0).max(0) as u64)
        })
    }

    fn running(&self) -> BoxFuture<'_, Result<u64, Error>> {
        Box::pin(async move {
            let mut conn = self.conn()?;
            let n: Option<i64> = ::redis::cmd("HGET")
                .arg(&self.keys.counts)
                .arg("leased")
                .query_async(&mut conn)
                .await
                .map_err(redis_error)?;
            Ok(n.unwrap_or(0).max(0) as u64)
        })
    }

    fn claim(&self, max: usize) -> BoxFuture<'_, Result<ClaimBatch, Error>> {
        Box::pin(async move {
            let mut conn = self.conn()?;
            let k = &self.keys;
            let mut call = self.scripts.claim.prepare_invoke();
            call.key(&k.meta)
                .key(&k.payload)
                .key(&k.due)
                .key(&k.counts)
                .key(&k.seq)
                .key(&k.dead);
            call.arg(max).arg(self.lease_us).arg(self.max_attempts);
            let reply: Value = call.invoke_async(&mut conn).await.map_err(redis_error)?;
            let mut items = array(reply)?.into_iter();
            let now_us = int(&items.next().unwrap_or(Value::Nil))?;
            let next = text(items.next().unwrap_or(Value::Nil))?;
            let next_due = if next.is_empty() {
                None
            } else {
                Some(score_ns(&next)?)
            };
            let rest: Vec<Value> = items.collect();
            let mut jobs = Vec::with_capacity(rest.len() / 5);
            for chunk in rest.chunks(5) {
                let [id, payload, attempt, run_at, token] = chunk else {
                    return Err(Error::storage("short claim reply"));
                };
                jobs.push(Claimed {
                    id: text(id.clone())?,
                    payload: bytes(payload.clone())?,
                    attempt: u32::try_from(int(attempt)?).unwrap_or(u32::MAX),
                    run_at: int(run_at)?,
                    token: int(token)?,
                });
            }
            Ok(ClaimBatch {
                jobs,
                next_due,
                now: now_us.saturating_mul(1000),
            })
        })
    }

    fn ack(&self, id: String, token: u64) -> BoxFuture<'_, Result<bool, Error>> {
        Box::pin(async move {
            self.conn()?;
            self.acks.call((id, token)).await
        })
    }

    fn retry(
        &self,
        id: String,
        token: u64,
        after: Duration,
    ) -> BoxFuture<'_, Result<(Retry, u64), Error>> {
        Box::pin(async move {
            let mut conn = self.conn()?;
            let k = &self.keys;
            let mut call = self.scripts.retry.prepare_invoke();
            call.key(&k.meta).key(&k.due).key(&k.counts).key(&k.dead);
            call.arg(&id)
                .arg(token)
                .arg(micros(after.min(MAX_AFTER)))
                .arg(self.max_attempts)
                .arg(&k.wake);
            let reply: Value = call.invoke_async(&mut conn).await.map_err(redis_error)?;
            let mut parts = array(reply)?.into_iter();
            let outcome = int(&parts.next().unwrap_or(Value::Nil))?;
            let run_at = text(parts.next().unwrap_or(Value::Nil))?;
            Ok(match outcome {
                1 => (
                    Retry::Pending,
                    run_at.parse().map_err(|_| Error::storage("bad run_at"))?,
                ),
                2 => (Retry::Died, 0),
                _ => (Retry::Stale, 0),
            })
        })
    }

    fn extend(&self, id: String, token: u64, by: Duration) -> BoxFuture<'_, Result<bool, Error>> {
        Box::pin(async move {
            let mut conn = self.conn()?;
            let mut call = self.scripts.extend.prepare_invoke();
            call.key(&self.keys.meta)
                .key(&self.keys.due)
                .arg(&id)
                .arg(token)
                .arg(micros(by.min(MAX_AFTER)));
            let done: u64 = call.invoke_async(&mut conn).await.map_err(redis_error)?;
            Ok(done == 1)
        })
    }

    fn remove_dead(&self, id: String) -> BoxFuture<'_, Result<bool, Error>> {
        Box::pin(async move {
            let mut conn = self.conn()?;
            let k = &self.keys;
            let mut call = self.scripts.remove_dead.prepare_invoke();
            call.key(&k.meta)
                .key(&k.payload)
                .key(&k.dead)
                .key(&k.counts)
                .arg("id")
                .arg(&id);
            let removed: u64 = call.invoke_async(&mut conn).await.map_err(redis_error)?;
            Ok(removed == 1)
        })
    }

    fn purge_dead(&self, limit: usize) -> BoxFuture<'_, Result<u64, Error>> {
        Box::pin(async move {
            let mut conn = self.conn()?;
            let k = &self.keys;
            let mut call = self.scripts.remove_dead.prepare_invoke();
            call.key(&k.meta)
                .key(&k.payload)
                .key(&k.dead)
                .key(&k.counts)
                .arg("limit")
                .arg(limit);
            call.invoke_async(&mut conn).await.map_err(redis_error)
        })
    }

    fn close(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            self.closed.store(true, SeqCst);
            self.subscriber.abort();
            Ok(())
        })
    }
}
