//! The Redis backend (feature `redis`): the same queue across processes and machines.
//!
//! # Ground rules
//!
//! - Every state change is one Lua script (`lua/*.lua`, each headed by its keys, arguments,
//!   return value and why it is atomic; `scripts/` holds one typed call per script). The
//!   state machine is `core/state/mod.rs`'s, written out in Lua: states `p`/`r`/`d` (pending, running, dead), attempts
//!   counted at claim, tokens checked by ack, retry and extend, dead after `max_attempts`.
//! - Keys of one queue share the hash tag `{name}`, so every script touches one cluster slot.
//!   The due index is a sorted set of pending **ids** per (priority, kind) in use, scored by
//!   run_at microseconds, the running index one of running ids per kind in use, scored by
//!   lease end (each job in its state's index of its level or kind only, as on the embedded
//!   store: `lua/claim.lua`, `lua/kinds.lua`); payloads live in their own hash, so cancel by
//!   id is O(log n).
//! - Each job stores its spec (kind, priority, attempts, backoff, lease, hold-off, key and
//!   its limits) in its meta string; one stored without (a series' occurrence, a job of keyspace format 1) is
//!   of the plain spec of the queue reading it. A claim leases each job for its own lease
//!   and kills it at its own attempts; a claim of one kind reads only that kind's sets.
//! - Dedup modes (`lua/schedule.lua`, `lua/held.lua`): a `Replace` schedule of a pending job
//!   (not a series' pending occurrence) rewrites it in the schedule's script, moving it
//!   between due sets, levels and per-kind counters, its attempts and last error kept. Every
//!   ack path (`ack.lua`, and the acks folded into `claim.lua`, both through `acks.lua`)
//!   writes the tombstone of a job with a hold-off in the same script as the ack: `held` (id
//!   → until ns) and `held_until` (scored by until µs), declared keys of the partition's
//!   tag. A schedule (each job of a batch in order) or an import meeting one before its
//!   until stores nothing; one at or after it deletes it; each claim deletes at most 64
//!   expired ones, earliest first. Tombstones are not jobs: `get`, counts and lists never
//!   see them. A hold-off is capped at 100 years (`HELD_MAX_US` in `lua/held.lua`: the
//!   server's time plus it stays exact in a Lua double), where the embedded store saturates
//!   its until at `u64::MAX` nanoseconds (the year 2554): a longer one holds its id off for
//!   100 years after the ack here.
//! - `Dedup::AllowWhileRunning` (`lua/next.lua`): a schedule meeting a running job without
//!   one stores its successor (run_at and spec tail as resolved, payload) in `next` and
//!   `next_payload`, declared keys of the partition's tag, and counts it in the counts
//!   hash's `successors` field (gone at 0). Every ack path reads that field once per batch
//!   (HEXISTS, O(1)) and looks the acked ids up only if some successor waits; the ack that
//!   finds one makes it the pending job in the same script (due set, `levels`, per-kind
//!   counters; not before the acked job's hold-off ends, no tombstone) and publishes its
//!   score as a schedule does. A death (`retry.lua` at the last attempt, a claim's kill) does
//!   the same, keeping the dead job's last error and storing no dead job (the claim still
//!   counts the death). A retry leaves it waiting; a `Replace` of the job pending again
//!   after the retry drops it in the schedule's script (the newest schedule wins); `cancel`
//!   removes it (with a pending job,
//!   or alone beside a running one); `get` shows its run_at. Successors are no jobs: never
//!   listed, counted or copied.
//! - Fairness per key (`lua/gates.lua`): a job whose key has a limit or a rate is in its
//!   `(kind, key)` gate, admitted (in its due set, claimable) or waiting (in the gate's own
//!   sets only, still pending: counted, listed, cancelled and moved as any). Every script
//!   that moves a job moves its gate's counts in the same script and rebalances the gates it
//!   touched at its end, publishing what it admits as a schedule does; a claim first
//!   rebalances the gates whose rate window ended (`gate_timers`) and reports the next such
//!   end as due. A queue of several partitions refuses gated jobs (`invalid_config`): a
//!   key's jobs would spread over partitions no one script sees.
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
//!   `redis_timeout` bounds every request, a batched call's wait for its batch, and a
//!   claim across all its partitions, so no call outlives it by more than scheduling
//!   delay, whatever the client's reconnect logic is doing.
//! - An ack on a partition whose last claim saw a job due within 20 ms is parked and
//!   carried by that partition's next claim (`fold.rs`): a steady consumer pays one
//!   request per job. A parked ack no claim took goes out through its batcher after the
//!   window, or at `close`; with `min_replicas` none is parked.
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
//!
//! # Files
//!
//! `conn.rs` connects (a server or a cluster) and sets the timeouts; `keys.rs` names each
//! partition's keys and routes ids; `scripts/` runs the scripts (one typed function each); `reply.rs` maps errors
//! and decodes replies; `series/` gives recurring series their occurrences (`series/record.rs`
//! decodes what `lua/series.lua` stores); `batcher.rs` coalesces concurrent schedules and acks; `fold.rs`
//! parks acks for the next claim; `wake.rs`
//! subscribes to wake messages; `backend.rs` is the [`Backend`](crate::backend::Backend)
//! implementation; this file holds the [`Redis`] value and opens it.

#[cfg(test)]
mod agreement;
mod backend;
mod batcher;
mod conn;
mod fold;
mod keys;
mod primary;
mod reply;
mod scripts;
mod series;
mod wake;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use self::batcher::Batcher;
use self::conn::{connect, Conn};
use self::fold::Folds;
use self::keys::{partition_of, tag, Keys};
use self::reply::redis_error;
use self::scripts::{spec_tail, ClaimReply, Scripts};
use self::wake::{subscribe, subscribe_cluster, Heard, Wake};
use crate::backend::{BoxFuture, ClaimBatch, ClaimKinds, Claimed, NewJob};
use crate::core::config::Config;
use crate::core::error::Error;
use crate::core::job::Scheduled;
use crate::core::kind::{Spec, MIN_LEASE};
use crate::core::wakeup::Wakeup;

pub(crate) use self::conn::Target;

/// How long a claim waits before looking again at a series whose list ran out and could
/// not be refilled (nanoseconds).
const DRY_RETRY: u64 = 1_000_000_000;

/// One partition of a queue: its own keys (its own hash tag, so its own cluster slot) and
/// its own schedule and ack batchers, and the acks parked for its next claim.
struct Partition {
    keys: Arc<Keys>,
    schedules: Batcher<NewJob, (Scheduled, u64)>,
    acks: Batcher<(String, u64), bool>,
    folds: Folds,
}

pub(crate) struct Redis {
    name: String,
    conn: Conn,
    scripts: Scripts,
    parts: Vec<Partition>,
    next_claim: AtomicUsize,
    /// The spec of a job scheduled without options, and of one stored without its spec
    /// (a series' occurrence, a job of format 1); and its meta tail, which a claim takes.
    plain: Spec,
    plain_tail: String,
    /// `redis_timeout`: each request's bound, and a whole claim's across partitions.
    timeout: Option<std::time::Duration>,
    closed: AtomicBool,
    subscriber: tokio::task::JoinHandle<()>,
    /// Bumped after every change that may make a job due earlier (see the ground rules).
    epoch: Arc<AtomicU64>,
    /// Per set of kinds claimed (`None`: every kind), whatever their mosts: a claim of
    /// some kinds says nothing of another's jobs.
    idle: std::sync::Mutex<std::collections::HashMap<Option<Vec<String>>, Idle>>,
    rules: series::Rules,
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
        // Partition i of a queue `q` is the hash tag `{q:i}` (`keys.rs`): a queue named
        // `q:0` would share that partition's keys, its jobs and its paused flag.
        if name
            .rsplit_once(':')
            .is_some_and(|(_, tail)| !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(Error::invalid_config_owned(format!(
                "the queue name {name:?} ends in `:<digits>`, the name of another queue's \
                 partition: pick another"
            )));
        }
        let (conn, wake) = connect(target, config).await?;
        let publish = match wake {
            Wake::Cluster { sharded: true, .. } => "SPUBLISH",
            _ => "PUBLISH",
        };
        let scripts = Scripts;
        let n = config.partitions;
        let parts: Vec<Partition> = (0..n)
            .map(|i| {
                let keys = Arc::new(Keys::new(&tag(name, i, n), publish));
                let schedules = {
                    let (conn, keys, scripts) = (conn.writes(), keys.clone(), scripts.clone());
                    Batcher::new(conn::request_bound(config), move |jobs: Vec<NewJob>| {
                        let (mut conn, keys, scripts) =
                            (conn.clone(), keys.clone(), scripts.clone());
                        async move { scripts.schedule(&mut conn, &keys, &jobs).await }
                    })
                };
                let acks = {
                    let (conn, keys, scripts) = (conn.writes(), keys.clone(), scripts.clone());
                    Batcher::new(
                        conn::request_bound(config),
                        move |acks: Vec<(String, u64)>| {
                            let (mut conn, keys, scripts) =
                                (conn.clone(), keys.clone(), scripts.clone());
                            async move { scripts.ack(&mut conn, &keys, &acks).await }
                        },
                    )
                };
                Partition {
                    keys,
                    schedules,
                    acks,
                    // A job's own lease may be shorter than the queue's, never than
                    // MIN_LEASE: the window stays within a quarter of every lease.
                    folds: Folds::new(config.min_replicas.is_none(), MIN_LEASE),
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
            Wake::Plain(primary) => {
                Box::pin(subscribe(primary, channels, heard)) as BoxFuture<'static, ()>
            }
            Wake::Cluster {
                client,
                pushes,
                sharded,
            } => Box::pin(subscribe_cluster(client, pushes, sharded, channels, heard)),
        });
        let redis = Redis {
            name: name.to_owned(),
            conn,
            scripts,
            parts,
            next_claim: AtomicUsize::new(0),
            plain: config.defaults().plain().clone(),
            plain_tail: spec_tail(config.defaults().plain()),
            timeout: config.redis_timeout,
            closed: AtomicBool::new(false),
            subscriber,
            epoch,
            idle: std::sync::Mutex::new(std::collections::HashMap::new()),
            rules: series::Rules::default(),
        };
        // One read of every partition: credentials the server accepts only per command
        // (no password where it wants one) and an ACL that denies the queue's keys fail
        // `open`, not the first call.
        redis.count("pending").await?;
        // Another partition count routes ids to other keys ({name} vs {name:i}): such a
        // handle would see another, empty queue and pause a flag nobody reads. Another
        // format lays its keys out otherwise: nothing is converted or misread. Not waiting
        // for `min_replicas`: a record a failover loses is written again by the next open,
        // and a queue must open while its replicas catch up.
        let (recorded, format) = redis
            .scripts
            .layout(
                &mut redis.conn()?,
                &keys::layout(name),
                n,
                keys::FORMAT,
                keys::UPGRADES,
            )
            .await?;
        if format != keys::FORMAT {
            return Err(Error::storage(format!(
                "the Redis queue {name:?} is of keyspace format {format} (0: from before \
                 formats were recorded); this version of wheel-jobs reads format {} only",
                keys::FORMAT
            )));
        }
        if recorded != n {
            return Err(Error::invalid_config_owned(format!(
                "the Redis queue {name:?} has {recorded} partition(s), as its first process \
                 opened it, not {n}: open it with partitions({recorded}) everywhere"
            )));
        }
        Ok(redis)
    }

    fn conn(&self) -> Result<Conn, Error> {
        if self.closed.load(SeqCst) {
            return Err(Error::closed());
        }
        Ok(self.conn.clone())
    }

    /// [`conn`](Self::conn) for a call whose loss in a failover would lose or undo an
    /// answered change (not claims and lease extensions, which at worst deliver a job
    /// again): it waits for `min_replicas`.
    fn writer(&self) -> Result<Conn, Error> {
        Ok(self.conn()?.writes())
    }

    /// Something may now be due earlier than an `Idle` note says.
    fn changed(&self) {
        self.epoch.fetch_add(1, SeqCst);
    }

    /// The answer of a claim of the kinds `kinds` that the last short claim of those kinds
    /// already knows: nothing due yet.
    fn known_idle(&self, kinds: &Option<Vec<String>>) -> Option<ClaimBatch> {
        let idle = *self.idle.lock().expect("idle note").get(kinds)?;
        if idle.epoch != self.epoch.load(SeqCst) {
            return None;
        }
        let elapsed = u64::try_from(idle.sent.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let now = idle.now.saturating_add(elapsed);
        (now < idle.until).then_some(ClaimBatch {
            jobs: Vec::new(),
            next_due: Some(idle.until),
            now,
            died: 0,
        })
    }

    fn part(&self, id: &str) -> &Partition {
        &self.parts[partition_of(id, self.parts.len())]
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

    /// Claims from one partition: the jobs, (server now, next due) in that server's ns, and
    /// how many jobs it killed. Then gives the recurring series the claim noted their next
    /// occurrences. Fails with `is_unavailable` once `deadline` passes (the claim's
    /// `redis_timeout`, so partitions claimed one after the other cannot add up their
    /// timeouts).
    async fn claim_part(
        &self,
        part: &Partition,
        max: usize,
        kinds: &ClaimKinds,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<(Vec<Claimed>, u64, Option<u64>, u64), Error> {
        // Not `writer`: a claim that failed its `WAIT` would strand the leases it took
        // until they end, while one lost in a failover only delivers its jobs again.
        let mut conn = self.conn()?;
        let taken = part.folds.take();
        let acks = taken.pairs();
        let claim = self
            .scripts
            .claim(&mut conn, &part.keys, max, &self.plain_tail, kinds, &acks);
        let claimed: Result<ClaimReply, Error> = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, claim)
                .await
                .unwrap_or_else(|_| {
                    Err(Error::unavailable(
                        "the claim ran out of redis_timeout before this partition",
                    ))
                }),
            None => claim.await,
        };
        taken.answer(claimed.as_ref().map(|c| c.acked.as_slice()));
        let ClaimReply {
            jobs,
            now,
            next_due: next,
            notes,
            died,
            ..
        } = claimed?;
        // A dry head given its list may be due: look again at once. One whose fill failed
        // stays due, undelivered: look again in a second, not in a loop of claims against
        // a failing fill.
        let next = match self.fill_series(part, now, notes).await {
            (_, true) => Some(next.unwrap_or(now).max(now.saturating_add(DRY_RETRY))),
            (true, false) => Some(now),
            (false, false) => next,
        };
        part.folds
            .claimed(next.map(|next| next.saturating_sub(now)));
        Ok((jobs, now, next, died))
    }
}
