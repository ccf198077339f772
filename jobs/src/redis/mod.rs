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
//! - A schedule, reschedule or retry that makes a job the first due one publishes its
//!   score on `{name}:wake`; every `JobQueue` subscribes and wakes its idle consumers. On a
//!   cluster the message is sharded (`SPUBLISH`/`SSUBSCRIBE`, Redis ≥ 7): it stays on the
//!   node that owns the partition's slot, and each partition's channel is subscribed on
//!   that node (followed by the client across failovers and resharding), so no partition
//!   depends on one node's subscription. Every (re)subscription wakes the idle consumers
//!   too, since messages sent while it was down are lost; a message lost any other way
//!   only delays a consumer until its safety wakeup (`Builder::safety_wakeup`, 5 s).
//! - Concurrent schedules and acks are coalesced by a `Batcher` into one script call (up
//!   to 512 jobs), claims take a batch per call: under load a job costs well under one
//!   round trip. `schedule_many` too writes at most 512 jobs per script call, and a claim
//!   leases at most 512 per partition per call, whatever the prefetch or `run`'s
//!   concurrency, so no script blocks the server for long.
//! - Connection failures, timeouts (`redis_timeout`, on single servers and cluster nodes
//!   alike) and transient server replies (`BUSY`, `LOADING`, `TRYAGAIN`, `CLUSTERDOWN`,
//!   `MASTERDOWN`) are `Error::is_unavailable`; the connection manager reconnects.
//! - A claim on a partitioned queue claims each partition on its own: one failing
//!   partition never costs the leases taken on the others.
//! - A claim that leased fewer jobs than asked for (and so saw nothing else due) leaves an
//!   `Idle` note: nothing is due before its `until`, unless something changed since. Every
//!   change that can make a job due earlier bumps `epoch` after its reply (schedule,
//!   reschedule and retry from this process; a wake message or resubscription from
//!   others); the note keeps the epoch read before its claim was sent. The next claim with
//!   the same epoch, before `until` by the note's server time plus the local monotonic
//!   time since, answers "nothing, next at `until`" without a round trip: the empty claim
//!   `run` makes right after each short one costs nothing. It can only delay a claim by
//!   that estimate, never deliver early: what is due is still decided by the server's
//!   `TIME`.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::ConnectionManager;
use ::redis::{Client, Script, Value};

mod batcher;
mod wake;

use self::batcher::{Batcher, MAX_BATCH};
use self::wake::{has_spublish, subscribe, subscribe_cluster, Heard, Wake};
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
    /// `PUBLISH`, or `SPUBLISH` on a cluster that has it: how the scripts send on `wake`.
    publish: &'static str,
}

impl Keys {
    fn new(tag: &str, publish: &'static str) -> Keys {
        Keys {
            meta: format!("{{{tag}}}:meta"),
            payload: format!("{{{tag}}}:payload"),
            due: format!("{{{tag}}}:due"),
            counts: format!("{{{tag}}}:counts"),
            seq: format!("{{{tag}}}:seq"),
            dead: format!("{{{tag}}}:dead"),
            wake: format!("{{{tag}}}:wake"),
            publish,
        }
    }
}

/// One server, or a cluster (scripts are routed by their keys' slot).
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(::redis::cluster_async::ClusterConnection),
}

impl ::redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a ::redis::Cmd,
    ) -> ::redis::RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a ::redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> ::redis::RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// One partition of a queue: its own keys (its own hash tag, so its own cluster slot) and
/// its own schedule and ack batchers.
struct Partition {
    keys: Arc<Keys>,
    schedules: Batcher<(String, When, Vec<u8>), (Scheduled, u64)>,
    acks: Batcher<(String, u64), bool>,
}

pub(crate) struct Redis {
    name: String,
    conn: Conn,
    scripts: Arc<Scripts>,
    parts: Vec<Partition>,
    next_claim: std::sync::atomic::AtomicUsize,
    lease_us: u64,
    max_attempts: u32,
    closed: AtomicBool,
    subscriber: tokio::task::JoinHandle<()>,
    /// Bumped after every change that may make a job due earlier (see the ground rules).
    epoch: Arc<AtomicU64>,
    idle: std::sync::Mutex<Option<Idle>>,
}

/// What the last short claim learnt: nothing due before `until` (server ns), as of
/// `epoch`, when the server's clock read `now` and the local one `sent` (or later).
#[derive(Clone, Copy)]
struct Idle {
    epoch: u64,
    until: u64,
    now: u64,
    sent: std::time::Instant,
}

/// A job to schedule: id, due time, payload.
type NewJob = (String, When, Vec<u8>);

impl fmt::Debug for Redis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redis")
            .field("queue", &self.name)
            .field("partitions", &self.parts.len())
            .finish()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.subscriber.abort();
        for part in &self.parts {
            part.schedules.task.abort();
            part.acks.task.abort();
        }
    }
}

/// Server replies that mean "not now" rather than "never": a script running too long
/// (`BUSY`), a server loading its data after a restart (`LOADING`), a cluster resharding or
/// failing over (`TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`).
const TRANSIENT: [&str; 5] = ["BUSY", "LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN"];

fn redis_error(err: ::redis::RedisError) -> Error {
    if err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout()
        || err.code().is_some_and(|code| TRANSIENT.contains(&code))
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

/// A stable hash (FNV-1a): every process must route an id to the same partition.
fn fnv(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Where the queue lives.
pub(crate) enum Target<'a> {
    Server(&'a str),
    Cluster(&'a [String]),
}

impl Redis {
    pub(crate) async fn open(
        target: Target<'_>,
        name: &str,
        config: &Config,
        wakeup: Arc<Wakeup>,
    ) -> Result<Redis, Error> {
        if name.is_empty() || name.contains(['{', '}']) {
            return Err(Error::invalid_config(
                "the queue name must be non-empty, without braces",
            ));
        }
        let bad_url =
            |e: ::redis::RedisError| Error::invalid_config_owned(format!("bad redis url: {e}"));
        let (conn, wake) = match target {
            Target::Server(url) => {
                let client = Client::open(url).map_err(bad_url)?;
                let manager = ::redis::aio::ConnectionManagerConfig::new()
                    .set_response_timeout(config.redis_timeout)
                    .set_connection_timeout(config.redis_timeout);
                let conn = ConnectionManager::new_with_config(client.clone(), manager)
                    .await
                    .map_err(redis_error)?;
                (Conn::Single(conn), Wake::Plain(client))
            }
            Target::Cluster(urls) => {
                if urls.is_empty() {
                    return Err(Error::invalid_config("no cluster node given"));
                }
                let builder = || {
                    let mut builder = ::redis::cluster::ClusterClient::builder(
                        urls.iter().map(String::as_str).collect::<Vec<_>>(),
                    );
                    if let Some(timeout) = config.redis_timeout {
                        // A node that stops answering fails the call (`is_unavailable`)
                        // instead of hanging it.
                        builder = builder
                            .response_timeout(timeout)
                            .connection_timeout(timeout);
                    }
                    builder
                };
                let client = builder().build().map_err(bad_url)?;
                let mut conn = client.get_async_connection().await.map_err(redis_error)?;
                // Subscriptions need RESP3 pushes; the client routes each sharded channel
                // to the node owning its slot and moves it when the slot moves.
                let sharded = has_spublish(&mut conn).await?;
                let (push, pushes) = tokio::sync::mpsc::unbounded_channel();
                let subscriber = builder()
                    .use_protocol(::redis::ProtocolVersion::RESP3)
                    .push_sender(push)
                    .build()
                    .map_err(bad_url)?;
                let wake = Wake::Cluster {
                    client: Box::new(subscriber),
                    pushes,
                    sharded,
                };
                (Conn::Cluster(conn), wake)
            }
        };
        let publish = match wake {
            Wake::Cluster { sharded: true, .. } => "SPUBLISH",
            _ => "PUBLISH",
        };
        let scripts = Arc::new(Scripts::load());
        let n = config.partitions;
        let parts: Vec<Partition> = (0..n)
            .map(|i| {
                let tag = if n == 1 {
                    name.to_owned()
                } else {
                    format!("{name}:{i}")
                };
                let keys = Arc::new(Keys::new(&tag, publish));
                let schedules = {
                    let (conn, keys, scripts) = (conn.clone(), keys.clone(), scripts.clone());
                    Batcher::new(move |jobs| {
                        schedule_jobs(conn.clone(), keys.clone(), scripts.clone(), jobs)
                    })
                };
                let acks = {
                    let (conn, keys, scripts) = (conn.clone(), keys.clone(), scripts.clone());
                    Batcher::new(move |acks| {
                        ack_jobs(conn.clone(), keys.clone(), scripts.clone(), acks)
                    })
                };
                Partition {
                    keys,
                    schedules,
                    acks,
                }
            })
            .collect();
        let channels = parts.iter().map(|p| p.keys.wake.clone()).collect();
        let epoch = Arc::new(AtomicU64::new(0));
        let heard = Heard {
            wakeup: Arc::downgrade(&wakeup),
            epoch: epoch.clone(),
        };
        let subscriber = tokio::spawn(match wake {
            Wake::Plain(client) => {
                Box::pin(subscribe(client, channels, heard)) as BoxFuture<'static, ()>
            }
            Wake::Cluster {
                client,
                pushes,
                sharded,
            } => Box::pin(subscribe_cluster(client, pushes, sharded, channels, heard)),
        });
        Ok(Redis {
            name: name.to_owned(),
            conn,
            scripts,
            parts,
            next_claim: std::sync::atomic::AtomicUsize::new(0),
            lease_us: micros(config.lease),
            max_attempts: config.max_attempts,
            closed: AtomicBool::new(false),
            subscriber,
            epoch,
            idle: std::sync::Mutex::new(None),
        })
    }

    fn conn(&self) -> Result<Conn, Error> {
        if self.closed.load(SeqCst) {
            return Err(Error::closed());
        }
        Ok(self.conn.clone())
    }

    /// Something may now be due earlier than an `Idle` note says.
    fn changed(&self) {
        self.epoch.fetch_add(1, SeqCst);
    }

    /// The answer of a claim that the last short claim already knows: nothing due yet.
    fn known_idle(&self) -> Option<ClaimBatch> {
        let idle = (*self.idle.lock().expect("idle note"))?;
        if idle.epoch != self.epoch.load(SeqCst) {
            return None;
        }
        let elapsed = u64::try_from(idle.sent.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let now = idle.now.saturating_add(elapsed);
        (now < idle.until).then_some(ClaimBatch {
            jobs: Vec::new(),
            next_due: Some(idle.until),
            now,
        })
    }

    fn part(&self, id: &str) -> &Partition {
        &self.parts[(fnv(id) % self.parts.len() as u64) as usize]
    }

    async fn count(&self, field: &str) -> Result<u64, Error> {
        let mut total = 0;
        for part in &self.parts {
            let mut conn = self.conn()?;
            let n: Option<i64> = ::redis::cmd("HGET")
                .arg(&part.keys.counts)
                .arg(field)
                .query_async(&mut conn)
                .await
                .map_err(redis_error)?;
            total += n.unwrap_or(0).max(0) as u64;
        }
        Ok(total)
    }

    /// Claims from one partition: the jobs, and (server now, next due) in that server's ns.
    async fn claim_part(
        &self,
        part: &Partition,
        max: usize,
    ) -> Result<(Vec<Claimed>, u64, Option<u64>), Error> {
        let mut conn = self.conn()?;
        let k = &part.keys;
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
        Ok((jobs, now_us.saturating_mul(1000), next_due))
    }
}

async fn schedule_jobs(
    mut conn: Conn,
    keys: Arc<Keys>,
    scripts: Arc<Scripts>,
    jobs: Vec<(String, When, Vec<u8>)>,
) -> Result<Vec<(Scheduled, u64)>, Error> {
    let mut call = scripts.schedule.prepare_invoke();
    call.key(&keys.meta)
        .key(&keys.payload)
        .key(&keys.due)
        .key(&keys.counts);
    call.arg(&keys.wake).arg(keys.publish);
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
    mut conn: Conn,
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

impl Backend for Redis {
    fn schedule(
        &self,
        id: String,
        when: When,
        payload: Vec<u8>,
    ) -> BoxFuture<'_, Result<(Scheduled, u64), Error>> {
        Box::pin(async move {
            self.conn()?;
            let scheduled = self.part(&id).schedules.call((id, when, payload)).await;
            // Even a failed call may have committed (a timeout after the script ran).
            self.changed();
            scheduled
        })
    }

    fn schedule_many(
        &self,
        jobs: Vec<(String, When, Vec<u8>)>,
    ) -> BoxFuture<'_, Result<Vec<(Scheduled, u64)>, Error>> {
        Box::pin(async move {
            let n = jobs.len();
            // Group by partition, one call each, answers back in the callers' order.
            let mut groups: Vec<(Vec<usize>, Vec<NewJob>)> = (0..self.parts.len())
                .map(|_| (Vec::new(), Vec::new()))
                .collect();
            for (i, job) in jobs.into_iter().enumerate() {
                let p = (fnv(&job.0) % self.parts.len() as u64) as usize;
                groups[p].0.push(i);
                groups[p].1.push(job);
            }
            let mut out = vec![(Scheduled::Exists, 0); n];
            for (part, (positions, jobs)) in self.parts.iter().zip(groups) {
                if jobs.is_empty() {
                    continue;
                }
                // At most MAX_BATCH jobs per script: a script blocks the whole server
                // while it runs, so one huge batch would stall every other client (and
                // outlast `redis_timeout`, failing a call that did commit).
                let mut jobs = jobs.into_iter();
                let mut positions = positions.into_iter();
                loop {
                    let chunk: Vec<NewJob> = jobs.by_ref().take(MAX_BATCH).collect();
                    if chunk.is_empty() {
                        break;
                    }
                    let answers =
                        schedule_jobs(self.conn()?, part.keys.clone(), self.scripts.clone(), chunk)
                            .await;
                    self.changed();
                    let answers = answers?;
                    for (answer, i) in answers.into_iter().zip(positions.by_ref()) {
                        out[i] = answer;
                    }
                }
            }
            Ok(out)
        })
    }

    fn cancel(&self, id: String) -> BoxFuture<'_, Result<bool, Error>> {
        Box::pin(async move {
            let mut conn = self.conn()?;
            let k = &self.part(&id).keys;
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
            let k = &self.part(&id).keys;
            let (mode, value, score) = when_args(when);
            let mut call = self.scripts.reschedule.prepare_invoke();
            call.key(&k.meta).key(&k.due);
            call.arg(&id)
                .arg(mode)
                .arg(value)
                .arg(score)
                .arg(&k.wake)
                .arg(k.publish);
            let reply = call.invoke_async(&mut conn).await;
            self.changed();
            let reply: Value = reply.map_err(redis_error)?;
            match reply {
                Value::Nil => Ok(None),
                other => Ok(Some(int(&other)?)),
            }
        })
    }

    fn get(&self, id: String) -> BoxFuture<'_, Result<Option<JobInfo>, Error>> {
        Box::pin(async move {
            let mut conn = self.conn()?;
            let k = &self.part(&id).keys;
            let mut call = self.scripts.get.prepare_invoke();
            call.key(&k.meta).key(&k.payload).arg(&id);
            let reply: Value = call.invoke_async(&mut conn).await.map_err(redis_error)?;
            if reply == Value::Nil {
                return Ok(None);
            }
            let mut parts = array(reply)?.into_iter();
            let meta = text(parts.next().unwrap_or(Value::Nil))?;
            let payload = bytes(parts.next().unwrap_or(Value::Nil))?;
            let corrupt = || Error::storage(format!("corrupt job record {meta:?}"));
            let fields: Vec<&str> = meta.split(':').collect();
            let [state, attempt, _, run_at] = fields.as_slice() else {
                return Err(corrupt());
            };
            let state = match *state {
                "p" => JobState::Pending,
                "l" => JobState::Running,
                "d" => JobState::Dead,
                _ => return Err(corrupt()),
            };
            Ok(Some(JobInfo {
                state,
                run_at: run_at.parse().map_err(|_| corrupt())?,
                attempt: attempt.parse().map_err(|_| corrupt())?,
                payload,
            }))
        })
    }

    fn pending(&self) -> BoxFuture<'_, Result<u64, Error>> {
        Box::pin(self.count("pending"))
    }

    fn running(&self) -> BoxFuture<'_, Result<u64, Error>> {
        Box::pin(self.count("leased"))
    }

    fn claim(&self, max: usize) -> BoxFuture<'_, Result<ClaimBatch, Error>> {
        Box::pin(async move {
            // Partitions in rotation, so every one is served; stop once `max` jobs came.
            // Each partition is claimed on its own: one that fails (its node down) must not
            // cost the leases already taken on the others, so their jobs are handed out and
            // the error is returned only when nothing was claimed.
            if let Some(idle) = self.known_idle() {
                return Ok(idle);
            }
            let epoch = self.epoch.load(SeqCst);
            let sent = std::time::Instant::now();
            let n = self.parts.len();
            let first = self.next_claim.fetch_add(1, SeqCst);
            let mut jobs = Vec::new();
            let mut wait: Option<u64> = None;
            let mut now = 0;
            let mut failed: Option<Error> = None;
            // Whether some partition may hold more due jobs than it gave.
            let mut more = false;
            for i in 0..n {
                let part = &self.parts[(first + i) % n];
                // At most MAX_BATCH per script: a script blocks the whole server while it
                // runs, and a reply that outlasts `redis_timeout` would strand the leases
                // it took. A larger `max` (prefetch, `run`'s concurrency) just claims again.
                let want = (max - jobs.len()).min(MAX_BATCH);
                let (claimed, part_now, next) = match self.claim_part(part, want).await {
                    Ok(claim) => claim,
                    Err(err) => {
                        failed.get_or_insert(err);
                        continue;
                    }
                };
                more |= claimed.len() >= want;
                jobs.extend(claimed);
                now = part_now;
                // Each partition's next due time against its own server's clock.
                if let Some(next) = next {
                    let w = next.saturating_sub(part_now);
                    wait = Some(wait.map_or(w, |x| x.min(w)));
                }
                if jobs.len() >= max {
                    wait = Some(0);
                    break;
                }
            }
            let complete = failed.is_none();
            if let Some(err) = failed {
                if jobs.is_empty() {
                    return Err(err);
                }
                tracing::warn!(error = %err, claimed = jobs.len(), "wheel-jobs: a partition failed to claim; delivering what the others gave");
            }
            // Due order across the partitions claimed together (run_at, then id).
            jobs.sort_by(|x, y| (x.run_at, &x.id).cmp(&(y.run_at, &y.id)));
            let next_due = wait.map(|w| now.saturating_add(w));
            let note = match next_due {
                Some(until) if complete && !more && jobs.len() < max => Some(Idle {
                    epoch,
                    until,
                    now,
                    sent,
                }),
                _ => None,
            };
            *self.idle.lock().expect("idle note") = note;
            Ok(ClaimBatch {
                jobs,
                next_due,
                now,
            })
        })
    }

    fn ack(&self, id: String, token: u64) -> BoxFuture<'_, Result<bool, Error>> {
        Box::pin(async move {
            self.conn()?;
            self.part(&id).acks.call((id, token)).await
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
            let k = &self.part(&id).keys;
            let mut call = self.scripts.retry.prepare_invoke();
            call.key(&k.meta).key(&k.due).key(&k.counts).key(&k.dead);
            call.arg(&id)
                .arg(token)
                .arg(micros(after.min(MAX_AFTER)))
                .arg(self.max_attempts)
                .arg(&k.wake)
                .arg(k.publish);
            let reply = call.invoke_async(&mut conn).await;
            self.changed();
            let reply: Value = reply.map_err(redis_error)?;
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
            let k = &self.part(&id).keys;
            let mut call = self.scripts.extend.prepare_invoke();
            call.key(&k.meta)
                .key(&k.due)
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
            let k = &self.part(&id).keys;
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
            let mut removed = 0;
            for part in &self.parts {
                let mut conn = self.conn()?;
                let k = &part.keys;
                let mut call = self.scripts.remove_dead.prepare_invoke();
                call.key(&k.meta)
                    .key(&k.payload)
                    .key(&k.dead)
                    .key(&k.counts)
                    .arg("limit")
                    .arg(limit);
                let n: u64 = call.invoke_async(&mut conn).await.map_err(redis_error)?;
                removed += n;
            }
            Ok(removed)
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
