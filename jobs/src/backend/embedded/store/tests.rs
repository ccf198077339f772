//! The store (tables, indexes, counts) against a trivially correct model of the whole queue:
//! a map of jobs scanned linearly, with the rules written out plainly. Random operation
//! sequences on an in-memory redb; every reply, the counts and every job compared after
//! each step. The same on a file store with its write-ahead log, where a `Crash` step
//! copies the database and the log as they are on disk mid-run (what `kill -9` leaves),
//! reopens the copy (replaying the log) and carries on with it against the same model.
//! Jobs have kinds, priorities, their own attempts and leases; claims name a kind or none.
//! Schedules carry a dedup mode (keep, replace, hold-off, allow-while-running); the hold-off
//! tombstones an ack leaves and the successors waiting for running jobs (the `next` table
//! and each record's bit) are compared with the model's after each step too.

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use proptest::prelude::*;

use super::tables::{DIED, DIED_BY_KIND, HELD, HELD_UNTIL, NEXT, SERIES};
use super::*;
use crate::backend::{ClaimBatch, ClaimKinds, NewJob};
use crate::core::job::{self, Scheduled};
use crate::core::job::{JobInfo, JobState, KindCounts, When};
use crate::core::kind::Dedup;
use crate::core::recurrence::Recurrence;
use crate::core::series::{CatchUp, Recurring, RecurringInfo};
use crate::core::state::Retry;

const LEASE: u64 = 10;
const MAX_ATTEMPTS: u32 = 2;

#[derive(Debug, Clone)]
struct RefJob {
    run_at: u64,
    attempt: u32,
    holder: Option<(u64, u64)>,
    dead: bool,
    died_at: u64,
    error: Option<String>,
    payload: Vec<u8>,
    spec: Spec,
    /// The successor waiting for it: run_at, payload, spec.
    next: Option<(u64, Vec<u8>, Spec)>,
}

impl RefJob {
    /// A new pending job (attempt 0): a schedule's, or a successor taking over.
    fn new(run_at: u64, payload: Vec<u8>, spec: Spec, error: Option<String>) -> RefJob {
        RefJob {
            run_at,
            attempt: 0,
            holder: None,
            dead: false,
            died_at: 0,
            error,
            payload,
            spec,
            next: None,
        }
    }

    /// The successor that takes this job's place (acked or dead), not due before
    /// `not_before`, with `error`.
    fn successor(&mut self, not_before: u64, error: Option<String>) -> Option<RefJob> {
        let (run_at, payload, spec) = self.next.take()?;
        Some(RefJob::new(run_at.max(not_before), payload, spec, error))
    }

    fn due(&self) -> Option<u64> {
        if self.dead {
            None
        } else {
            Some(self.holder.map_or(self.run_at, |(_, until)| until))
        }
    }
}

/// The kinds of the model's jobs.
const KINDS: [&str; 3] = ["", "a", "b"];

/// A spec from its choices: kind, priority, max_attempts, lease.
fn spec_of((kind, priority, attempts, lease): (u8, u8, u8, u8)) -> Spec {
    Spec {
        kind: KINDS[usize::from(kind)].to_owned(),
        priority: [-1, 0, 3][usize::from(priority)],
        max_attempts: u32::from(attempts) + 1,
        backoff: (Duration::from_nanos(1), Duration::from_nanos(8)),
        lease: Duration::from_nanos([LEASE, 25][usize::from(lease)]),
        hold_off: Duration::ZERO,
        key: None,
    }
}

/// The hold-off of `HoldOff` in the model: some tens of its nanosecond steps.
const HOLD_OFF: u64 = 20;

/// A dedup mode from its choice.
fn dedup_of(mode: u8) -> Dedup {
    match mode {
        0 => Dedup::Keep,
        1 => Dedup::Replace,
        2 => Dedup::HoldOff(Duration::from_nanos(HOLD_OFF)),
        3 => Dedup::HoldOff(Duration::ZERO),
        _ => Dedup::AllowWhileRunning,
    }
}

#[derive(Debug, Clone)]
enum Step {
    Advance(u64),
    ScheduleAt(u8, u64),
    ScheduleAfter(u8, u64),
    /// A schedule at a time with a spec of its own (`spec_of`).
    ScheduleWith(u8, u64, (u8, u8, u8, u8)),
    /// A schedule at a time with a spec of its own and a dedup mode (`dedup_of`).
    ScheduleDedup(u8, u64, (u8, u8, u8, u8), u8),
    /// A claim of one kind (`KINDS`).
    ClaimKind(usize, u8),
    Cancel(u8),
    Reschedule(u8, u64),
    Claim(usize),
    Ack(u8, bool),
    Retry(u8, bool, u64),
    /// A retry with an error (`Delivery::fail`).
    Fail(u8, bool, u64),
    Extend(u8, bool, u64),
    RemoveDead(u8),
    PurgeDead(usize),
    Revive(u8, u64),
    ReviveDead(usize, u64),
    Pause(bool),
    Crash,
    /// The next step's change is a checkpoint rather than a log record.
    Checkpoint,
}

fn step() -> impl Strategy<Value = Step> {
    let id = 0..5u8;
    prop_oneof![
        (0..15u64).prop_map(Step::Advance),
        (id.clone(), 0..60u64).prop_map(|(i, at)| Step::ScheduleAt(i, at)),
        (id.clone(), 0..30u64).prop_map(|(i, after)| Step::ScheduleAfter(i, after)),
        (id.clone(), 0..60u64, (0..3u8, 0..3u8, 0..3u8, 0..2u8))
            .prop_map(|(i, at, spec)| Step::ScheduleWith(i, at, spec)),
        (
            id.clone(),
            0..60u64,
            (0..3u8, 0..3u8, 0..3u8, 0..2u8),
            0..5u8
        )
            .prop_map(|(i, at, spec, mode)| Step::ScheduleDedup(i, at, spec, mode)),
        (
            id.clone(),
            0..60u64,
            (0..3u8, 0..3u8, 0..3u8, 0..2u8),
            1..3u8
        )
            .prop_map(|(i, at, spec, mode)| Step::ScheduleDedup(i, at, spec, mode)),
        (id.clone(), 0..60u64, (0..3u8, 0..3u8, 0..3u8, 0..2u8))
            .prop_map(|(i, at, spec)| Step::ScheduleDedup(i, at, spec, 4)),
        (1..4usize, 0..3u8).prop_map(|(max, kind)| Step::ClaimKind(max, kind)),
        id.clone().prop_map(Step::Cancel),
        (id.clone(), 0..60u64).prop_map(|(i, at)| Step::Reschedule(i, at)),
        (1..4usize).prop_map(Step::Claim),
        (1..4usize).prop_map(Step::Claim),
        (id.clone(), any::<bool>()).prop_map(|(i, c)| Step::Ack(i, c)),
        (id.clone(), any::<bool>(), 0..20u64).prop_map(|(i, c, a)| Step::Retry(i, c, a)),
        (id.clone(), any::<bool>(), 0..20u64).prop_map(|(i, c, a)| Step::Fail(i, c, a)),
        (id.clone(), any::<bool>(), 0..30u64).prop_map(|(i, c, b)| Step::Extend(i, c, b)),
        id.clone().prop_map(Step::RemoveDead),
        (1..3usize).prop_map(Step::PurgeDead),
        (id.clone(), 0..60u64).prop_map(|(i, at)| Step::Revive(i, at)),
        (1..3usize, 0..60u64).prop_map(|(n, at)| Step::ReviveDead(n, at)),
        any::<bool>().prop_map(Step::Pause),
        Just(Step::Crash),
        Just(Step::Checkpoint),
    ]
}

fn name(i: u8) -> String {
    format!("j{i}")
}

fn at(nanos: u64) -> When {
    When::At(UNIX_EPOCH + Duration::from_nanos(nanos))
}

fn config() -> Config {
    let mut builder = crate::JobQueue::builder();
    builder.max_attempts(MAX_ATTEMPTS);
    let mut config = builder.config();
    config.lease = Duration::from_nanos(LEASE);
    config
}

fn store() -> Store {
    let db = redb::Database::builder()
        .create_with_backend(redb::backends::InMemoryBackend::new())
        .expect("in-memory redb");
    Store::open(db, &config(), None).expect("open")
}

/// The store at `dir/s{n}.redb` with its log `dir/s{n}.redb.wal`.
fn file_store(dir: &std::path::Path, n: u32) -> Store {
    let path = dir.join(format!("s{n}.redb"));
    let db = redb::Database::builder().create(&path).expect("redb");
    let wal = Wal::open(&dir.join(format!("s{n}.redb.wal"))).expect("wal");
    Store::open(db, &config(), Some(wal)).expect("open")
}

/// What `kill -9` of store `n` would leave, opened as store `n + 1`.
fn crash(store: Store, dir: &std::path::Path, n: u32) -> Store {
    for ext in ["redb", "redb.wal"] {
        std::fs::copy(
            dir.join(format!("s{n}.{ext}")),
            dir.join(format!("s{}.{ext}", n + 1)),
        )
        .expect("copy");
    }
    drop(store);
    file_store(dir, n + 1)
}

fn nanos_of(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).expect("a test lease")
}

/// A schedule of a plain job.
fn schedule(id: &str, when: When, payload: &[u8]) -> Op {
    Op::Schedule(NewJob {
        id: id.to_owned(),
        when,
        payload: payload.to_vec(),
        spec: config().defaults().plain().clone(),
        dedup: Dedup::Keep,
    })
}

fn one(store: &mut Store, op: Op, now: u64) -> Reply {
    let mut replies = store.apply_at(vec![op], now).expect("apply");
    assert_eq!(replies.len(), 1);
    replies.pop().unwrap()
}

fn run(steps: Vec<Step>, on_file: bool) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut crashes = 0;
    let mut store = if on_file {
        file_store(dir.path(), 0)
    } else {
        store()
    };
    let mut model: BTreeMap<String, RefJob> = BTreeMap::new();
    let mut tokens: BTreeMap<String, u64> = BTreeMap::new();
    // Hold-off tombstones: id → end of the hold-off.
    let mut held: BTreeMap<String, u64> = BTreeMap::new();
    let mut now = 100u64;
    let mut paused = false;
    for step in steps {
        let token_for = |id: &str, current: bool| {
            let token = tokens.get(id).copied().unwrap_or(0);
            if current {
                token
            } else {
                token ^ 1
            }
        };
        let holds = |model: &BTreeMap<String, RefJob>, id: &str, token: u64| {
            model
                .get(id)
                .and_then(|j| j.holder)
                .is_some_and(|(t, _)| t == token)
        };
        match step {
            Step::Advance(by) => now += by,
            Step::ScheduleAt(i, _)
            | Step::ScheduleAfter(i, _)
            | Step::ScheduleWith(i, ..)
            | Step::ScheduleDedup(i, ..) => {
                let (when, run_at, mut spec, dedup) = match step {
                    Step::ScheduleAt(_, t) => (at(t), t, store.plain.clone(), Dedup::Keep),
                    Step::ScheduleAfter(_, a) => (
                        When::After(Duration::from_nanos(a)),
                        now + a,
                        store.plain.clone(),
                        Dedup::Keep,
                    ),
                    Step::ScheduleWith(_, t, pick) => (at(t), t, spec_of(pick), Dedup::Keep),
                    Step::ScheduleDedup(_, t, pick, mode) => {
                        (at(t), t, spec_of(pick), dedup_of(mode))
                    }
                    _ => unreachable!(),
                };
                if let Dedup::HoldOff(d) = dedup {
                    spec.hold_off = d;
                }
                let id = name(i);
                let payload = vec![i, (now % 251) as u8, 3];
                let reply = one(
                    &mut store,
                    Op::Schedule(NewJob {
                        id: id.clone(),
                        when,
                        payload: payload.clone(),
                        spec: spec.clone(),
                        dedup,
                    }),
                    now,
                );
                // A tombstone refuses the id until its end, then is gone.
                let until = held.get(&id).copied().filter(|&until| now < until);
                let expect = match (until, model.get_mut(&id)) {
                    (Some(until), _) => {
                        let until_at = UNIX_EPOCH + Duration::from_nanos(until);
                        Reply::Scheduled(Scheduled::HeldOff { until: until_at }, until)
                    }
                    (None, Some(job))
                        if dedup == Dedup::Replace && !job.dead && job.holder.is_none() =>
                    {
                        held.remove(&id);
                        (job.run_at, job.payload, job.spec) = (run_at, payload, spec);
                        // The newest schedule wins: a successor waiting (after a retry) goes.
                        job.next = None;
                        Reply::Scheduled(Scheduled::Replaced, run_at)
                    }
                    (None, Some(job))
                        if dedup == Dedup::AllowWhileRunning
                            && job.holder.is_some()
                            && job.next.is_none() =>
                    {
                        held.remove(&id);
                        job.next = Some((run_at, payload, spec));
                        Reply::Scheduled(Scheduled::Successor, run_at)
                    }
                    (None, Some(job)) => {
                        held.remove(&id);
                        Reply::Scheduled(Scheduled::Exists, job.run_at)
                    }
                    (None, None) => {
                        held.remove(&id);
                        model.insert(id, RefJob::new(run_at, payload, spec, None));
                        Reply::Scheduled(Scheduled::Created, run_at)
                    }
                };
                prop_assert_eq!(reply, expect);
            }
            Step::Cancel(i) => {
                let id = name(i);
                let removed = match model.get_mut(&id) {
                    Some(j) if !j.dead && j.holder.is_none() => {
                        model.remove(&id);
                        true
                    }
                    // A running job's successor goes; the job runs on.
                    Some(j) => j.next.take().is_some(),
                    None => false,
                };
                prop_assert_eq!(
                    one(&mut store, Op::Cancel { id }, now),
                    Reply::Bool(removed)
                );
            }
            Step::Reschedule(i, t) => {
                let id = name(i);
                let expect = match model.get_mut(&id) {
                    Some(job) if !job.dead && job.holder.is_none() => {
                        job.run_at = t;
                        Some(t)
                    }
                    _ => None,
                };
                prop_assert_eq!(
                    one(&mut store, Op::Reschedule { id, when: at(t) }, now),
                    Reply::Moved(expect)
                );
            }
            Step::Claim(max) | Step::ClaimKind(max, _) => {
                let kind = match step {
                    Step::ClaimKind(_, k) => Some(KINDS[usize::from(k)]),
                    _ => None,
                };
                let op = Op::Claim {
                    max,
                    kind: kind.map(str::to_owned).into(),
                };
                let Reply::Claimed(batch, handed) = one(&mut store, op, now) else {
                    return Err(TestCaseError::fail("claim reply"));
                };
                if !paused {
                    // A claim deletes the expired tombstones (at most 64: the model has 5).
                    held.retain(|_, until| now < *until);
                }
                if paused {
                    prop_assert_eq!(handed, None);
                    prop_assert_eq!(
                        batch,
                        ClaimBatch {
                            jobs: Vec::new(),
                            next_due: None,
                            now,
                            died: 0,
                        }
                    );
                    continue;
                }
                let of_kind = |j: &RefJob| kind.is_none_or(|k| k == j.spec.kind);
                // Expired leases first, by (kind, lease end, id); then due pending jobs by
                // priority (highest first), run_at, id.
                let mut leases: Vec<(String, u64, String)> = model
                    .iter()
                    .filter(|(_, j)| of_kind(j) && !j.dead)
                    .filter_map(|(id, j)| {
                        let (_, until) = j.holder?;
                        (until <= now).then(|| (j.spec.kind.clone(), until, id.clone()))
                    })
                    .collect();
                leases.sort();
                let mut pending: Vec<(i8, u64, String)> = model
                    .iter()
                    .filter(|(_, j)| of_kind(j) && !j.dead && j.holder.is_none())
                    .filter(|(_, j)| j.run_at <= now)
                    .map(|(id, j)| (-j.spec.priority, j.run_at, id.clone()))
                    .collect();
                pending.sort();
                let due = leases
                    .into_iter()
                    .map(|(_, _, id)| id)
                    .chain(pending.into_iter().map(|(_, _, id)| id));
                let mut delivered = Vec::new();
                let mut died = 0;
                let mut handed_over: Option<u64> = None;
                for id in due.take(max) {
                    let job = model.get_mut(&id).unwrap();
                    if job.holder.is_some() {
                        job.error = Some(state::LEASE_EXPIRED.to_owned());
                    }
                    if job.attempt >= job.spec.max_attempts {
                        died += 1;
                        if let Some(next) = job.successor(0, job.error.clone()) {
                            handed_over =
                                Some(handed_over.map_or(next.run_at, |h| h.min(next.run_at)));
                            *job = next;
                            continue;
                        }
                        job.dead = true;
                        job.died_at = now;
                        job.holder = None;
                    } else {
                        job.attempt += 1;
                        delivered.push((
                            id.clone(),
                            job.attempt,
                            job.run_at,
                            job.payload.clone(),
                            job.spec.clone(),
                        ));
                    }
                }
                let got: Vec<_> = batch
                    .jobs
                    .iter()
                    .map(|c| {
                        let spec = c.spec.clone();
                        (c.id.clone(), c.attempt, c.run_at, c.payload.clone(), spec)
                    })
                    .collect();
                prop_assert_eq!(&got, &delivered);
                for claimed in &batch.jobs {
                    let job = model.get_mut(&claimed.id).unwrap();
                    job.holder = Some((claimed.token, now + nanos_of(job.spec.lease)));
                    let old = tokens.insert(claimed.id.clone(), claimed.token);
                    prop_assert_ne!(old, Some(claimed.token), "a claim hands out a fresh token");
                }
                prop_assert_eq!(batch.now, now);
                prop_assert_eq!(batch.died, died);
                prop_assert_eq!(handed, handed_over, "the earliest successor handed over");
                let next_due = model
                    .values()
                    .filter(|j| of_kind(j))
                    .filter_map(RefJob::due)
                    .min();
                prop_assert_eq!(batch.next_due, next_due);
            }
            Step::Ack(i, current) => {
                let id = name(i);
                let token = token_for(&id, current);
                let valid = holds(&model, &id, token);
                let mut successor = None;
                if valid {
                    let mut job = model.remove(&id).unwrap();
                    let hold_off = nanos_of(job.spec.hold_off);
                    let not_before = if hold_off > 0 { now + hold_off } else { 0 };
                    if let Some(next) = job.successor(not_before, None) {
                        successor = Some(next.run_at);
                        model.insert(id.clone(), next);
                    } else if hold_off > 0 {
                        held.insert(id.clone(), now + hold_off);
                    }
                }
                prop_assert_eq!(
                    one(&mut store, Op::Ack { id, token }, now),
                    Reply::Acked(valid, successor)
                );
            }
            Step::Retry(i, current, after) | Step::Fail(i, current, after) => {
                let id = name(i);
                let token = token_for(&id, current);
                let error = matches!(step, Step::Fail(..)).then(|| format!("failed at {now}"));
                let mut successor = None;
                let outcome = if holds(&model, &id, token) {
                    let job = model.get_mut(&id).unwrap();
                    job.holder = None;
                    if error.is_some() {
                        job.error.clone_from(&error);
                    }
                    if job.attempt >= job.spec.max_attempts {
                        if let Some(next) = job.successor(0, job.error.clone()) {
                            successor = Some(next.run_at);
                            *job = next;
                        } else {
                            job.dead = true;
                            job.died_at = now;
                        }
                        Retry::Died
                    } else {
                        job.run_at = now + after;
                        Retry::Pending
                    }
                } else {
                    Retry::Stale
                };
                let reply = one(
                    &mut store,
                    Op::Retry {
                        id,
                        token,
                        after: Duration::from_nanos(after),
                        error,
                    },
                    now,
                );
                prop_assert_eq!(reply, Reply::Retried(outcome, now + after, successor));
            }
            Step::Extend(i, current, by) => {
                let id = name(i);
                let token = token_for(&id, current);
                let valid = holds(&model, &id, token);
                if valid {
                    model.get_mut(&id).unwrap().holder = Some((token, now + by));
                }
                let reply = one(
                    &mut store,
                    Op::Extend {
                        id,
                        token,
                        by: Duration::from_nanos(by),
                    },
                    now,
                );
                prop_assert_eq!(reply, Reply::Bool(valid));
            }
            Step::RemoveDead(i) => {
                let id = name(i);
                let dead = model.get(&id).is_some_and(|j| j.dead);
                if dead {
                    model.remove(&id);
                }
                prop_assert_eq!(
                    one(&mut store, Op::RemoveDead { id }, now),
                    Reply::Bool(dead)
                );
            }
            Step::Revive(i, t) => {
                let id = name(i);
                let expect = match model.get_mut(&id) {
                    Some(job) if job.dead => {
                        (job.dead, job.attempt, job.run_at) = (false, 0, t);
                        Some(t)
                    }
                    _ => None,
                };
                prop_assert_eq!(
                    one(&mut store, Op::Revive { id, when: at(t) }, now),
                    Reply::Moved(expect)
                );
            }
            Step::ReviveDead(limit, t) => {
                // Oldest deaths first.
                let mut dead: Vec<(u64, String)> = model
                    .iter()
                    .filter(|(_, j)| j.dead)
                    .map(|(id, j)| (j.died_at, id.clone()))
                    .collect();
                dead.sort();
                dead.truncate(limit);
                for (_, id) in &dead {
                    let job = model.get_mut(id).unwrap();
                    (job.dead, job.attempt, job.run_at) = (false, 0, t);
                }
                prop_assert_eq!(
                    one(&mut store, Op::ReviveDead { limit, when: at(t) }, now),
                    Reply::Revived(dead.len() as u64, t)
                );
            }
            Step::Pause(p) => {
                let changed = paused != p;
                paused = p;
                prop_assert_eq!(
                    one(&mut store, Op::Pause { paused: p }, now),
                    Reply::Bool(changed)
                );
            }
            Step::Crash if on_file => {
                store = crash(store, dir.path(), crashes);
                crashes += 1;
            }
            Step::Crash => {}
            Step::Checkpoint => {
                store.checkpoint_every = Duration::ZERO;
                continue;
            }
            Step::PurgeDead(limit) => {
                // Oldest deaths first.
                let mut dead: Vec<(u64, String)> = model
                    .iter()
                    .filter(|(_, j)| j.dead)
                    .map(|(id, j)| (j.died_at, id.clone()))
                    .collect();
                dead.sort();
                let dead: Vec<String> = dead.into_iter().take(limit).map(|(_, id)| id).collect();
                for id in &dead {
                    model.remove(id);
                }
                prop_assert_eq!(
                    one(&mut store, Op::PurgeDead { limit }, now),
                    Reply::Count(dead.len() as u64)
                );
            }
        }
        // Counts and every job agree after every step.
        let counts = store.counts();
        let pending = model
            .values()
            .filter(|j| !j.dead && j.holder.is_none())
            .count() as u64;
        let leased = model.values().filter(|j| j.holder.is_some()).count() as u64;
        let dead = model.values().filter(|j| j.dead).count() as u64;
        prop_assert_eq!(
            (counts.pending, counts.running, counts.dead),
            (pending, leased, dead)
        );
        let gets = (0..5).map(|i| Op::Get { id: name(i) }).collect();
        let replies = store.apply_at(gets, now).expect("gets");
        for (i, reply) in (0..5).zip(replies) {
            let expect = model.get(&name(i)).map(|j| {
                let state = if j.dead {
                    JobState::Dead
                } else if j.holder.is_some() {
                    JobState::Running
                } else {
                    JobState::Pending
                };
                JobInfo::new(
                    name(i),
                    state,
                    j.run_at,
                    j.attempt,
                    j.error.clone(),
                    j.payload.clone(),
                    j.spec.clone(),
                )
                .with_successor(j.next.as_ref().map(|(at, _, _)| *at))
            });
            prop_assert_eq!(reply, Reply::Info(expect));
        }
        check_counts_and_lists(&mut store, &model, paused, now)?;
        prop_assert_eq!(held_tables(&store), held.clone());
        let successors: BTreeMap<String, (u64, Vec<u8>, Spec)> = model
            .iter()
            .filter_map(|(id, j)| Some((id.clone(), j.next.clone()?)))
            .collect();
        prop_assert_eq!(next_table(&store), successors);
        store.checkpoint_every = CHECKPOINT_EVERY;
    }
    Ok(())
}

fn state_of(j: &RefJob) -> JobState {
    if j.dead {
        JobState::Dead
    } else if j.holder.is_some() {
        JobState::Running
    } else {
        JobState::Pending
    }
}

/// The tombstones as `held` holds them, after checking that `held_until` indexes exactly
/// those.
fn held_tables(store: &Store) -> BTreeMap<String, u64> {
    use redb::ReadableTable;
    let txn = redb::ReadableDatabase::begin_read(&store.db).expect("read");
    let held: BTreeMap<String, u64> = txn
        .open_table(HELD)
        .expect("held")
        .iter()
        .expect("iter")
        .map(|entry| {
            let (id, until) = entry.expect("a tombstone");
            (id.value().to_owned(), until.value())
        })
        .collect();
    let by_until: Vec<(u64, String)> = txn
        .open_table(HELD_UNTIL)
        .expect("held_until")
        .iter()
        .expect("iter")
        .map(|entry| {
            let (key, _) = entry.expect("a key");
            let (until, id) = key.value();
            (until, id.to_owned())
        })
        .collect();
    let mut expect: Vec<(u64, String)> = held.iter().map(|(id, u)| (*u, id.clone())).collect();
    expect.sort();
    assert_eq!(by_until, expect, "held_until indexes held");
    held
}

/// The successors as `next` holds them (each pending at attempt 0 without an error), after
/// checking that exactly their jobs' records have the `next` bit, and that those jobs are
/// running or pending (a dead job never has one).
fn next_table(store: &Store) -> BTreeMap<String, (u64, Vec<u8>, Spec)> {
    use crate::backend::embedded::record::Record;
    use crate::core::state::Status;
    use redb::ReadableTable;
    let txn = redb::ReadableDatabase::begin_read(&store.db).expect("read");
    let next: BTreeMap<String, (u64, Vec<u8>, Spec)> = txn
        .open_table(NEXT)
        .expect("next")
        .iter()
        .expect("iter")
        .map(|entry| {
            let (id, value) = entry.expect("a successor");
            let record = Record::decode(value.value(), &store.plain).expect("a record");
            assert_eq!(
                (
                    record.job.attempt,
                    record.job.status,
                    record.error,
                    record.next
                ),
                (0, Status::Pending, None, false),
                "a successor is a new pending job"
            );
            let spec = record.spec.into_owned();
            (
                id.value().to_owned(),
                (record.job.run_at, record.payload.to_vec(), spec),
            )
        })
        .collect();
    let marked: Vec<String> = txn
        .open_table(tables::JOBS)
        .expect("jobs")
        .iter()
        .expect("iter")
        .filter_map(|entry| {
            let (id, value) = entry.expect("a job");
            let record = Record::decode(value.value(), &store.plain).expect("a record");
            if record.next {
                assert!(!matches!(record.job.status, Status::Dead { .. }), "dead");
            }
            record.next.then(|| id.value().to_owned())
        })
        .collect();
    assert_eq!(
        marked,
        next.keys().cloned().collect::<Vec<_>>(),
        "the bit marks exactly the jobs with a successor"
    );
    next
}

/// The keys of `died_by_kind`, in order.
fn died_by_kind(txn: &redb::ReadTransaction) -> Vec<(String, u64, String)> {
    use redb::ReadableTable;
    let table = txn.open_table(DIED_BY_KIND).expect("died_by_kind");
    table
        .iter()
        .expect("iter")
        .map(|entry| {
            let (key, _) = entry.expect("a key");
            let (kind, at, id) = key.value();
            (kind.to_owned(), at, id.to_owned())
        })
        .collect()
}

/// `counts` (per kind too) and every state's list, of every kind and of each, read two jobs
/// a page, against the model.
fn check_counts_and_lists(
    store: &mut Store,
    model: &BTreeMap<String, RefJob>,
    paused: bool,
    now: u64,
) -> Result<(), TestCaseError> {
    let next_due = model
        .values()
        .filter(|j| state_of(j) == JobState::Pending)
        .map(|j| j.run_at)
        .min();
    let count = |state: JobState, kind: Option<&str>| {
        model
            .values()
            .filter(|j| state_of(j) == state && kind.is_none_or(|k| k == j.spec.kind))
            .count() as u64
    };
    let expect = job::Counts::new(
        count(JobState::Pending, None),
        count(JobState::Running, None),
        count(JobState::Dead, None),
        paused,
        next_due,
    )
    .with_kinds(KINDS.iter().map(|k| {
        let of = |state| count(state, Some(k));
        let counts = KindCounts::new(
            of(JobState::Pending),
            of(JobState::Running),
            of(JobState::Dead),
        );
        (k.to_string(), counts)
    }));
    prop_assert_eq!(one(store, Op::Counts, now), Reply::Counts(expect));
    // The per-kind dead index holds the dead jobs, each under its kind, and nothing else.
    let mut dead: Vec<(String, u64, String)> = model
        .iter()
        .filter(|(_, j)| j.dead)
        .map(|(id, j)| (j.spec.kind.clone(), j.died_at, id.clone()))
        .collect();
    dead.sort();
    let txn = redb::ReadableDatabase::begin_read(&store.db).expect("read");
    prop_assert_eq!(died_by_kind(&txn), dead);
    drop(txn);
    let filters = [None, Some(""), Some("a"), Some("b")];
    for (state, kind) in [JobState::Pending, JobState::Running, JobState::Dead]
        .into_iter()
        .flat_map(|s| filters.map(|k| (s, k)))
    {
        let mut expect: Vec<(u64, String)> = model
            .iter()
            .filter(|(_, j)| state_of(j) == state && kind.is_none_or(|k| k == j.spec.kind))
            .map(|(id, j)| {
                let at = match j.holder {
                    _ if j.dead => j.died_at,
                    Some((_, until)) => until,
                    None => j.run_at,
                };
                (at, id.clone())
            })
            .collect();
        expect.sort();
        if state == JobState::Dead {
            expect.reverse();
        }
        let mut got = Vec::new();
        let mut after = None;
        loop {
            let op = Op::List {
                state,
                after: after.clone(),
                limit: 2,
                payloads: true,
                kind: kind.map(str::to_owned),
            };
            let Reply::Listed(page) = one(store, op, now) else {
                return Err(TestCaseError::fail("list reply"));
            };
            for (at, info) in &page {
                prop_assert_eq!(info.state(), state);
                got.push((*at, info.id().to_owned()));
            }
            match page.last() {
                Some((at, info)) if page.len() == 2 => after = Some((*at, info.id().to_owned())),
                _ => break,
            }
        }
        prop_assert_eq!(got, expect, "{:?} list of {:?}", state, kind);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn store_matches_model(steps in proptest::collection::vec(step(), 1..60)) {
        run(steps, false)?;
    }
}

proptest! {
    // Each step is an fsync here.
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn a_file_store_survives_crashes_by_its_log(steps in proptest::collection::vec(step(), 1..60)) {
        run(steps, true)?;
    }
}

/// A changed batch that logged nothing (purging a dead-set id with no job, which only an
/// inconsistent file holds) wrote a record with an empty body, and replay stopped there:
/// every later acknowledged change was lost to a crash. An empty record is now read past.
#[test]
fn an_empty_record_hides_no_later_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = file_store(dir.path(), 0);
    store.checkpoint_every = Duration::from_secs(3600);
    {
        let txn = store.db.begin_write().unwrap();
        txn.open_table(DIED)
            .unwrap()
            .insert((0, "ghost"), ())
            .unwrap();
        txn.commit().unwrap();
    }
    let schedule = |id: &str| schedule(id, at(10), b"");
    let now = 1_000_000;
    one(&mut store, schedule("before"), now);
    let logged = store.wal.as_ref().unwrap().len();
    assert_eq!(
        one(&mut store, Op::PurgeDead { limit: 10 }, now),
        Reply::Count(1)
    );
    assert!(
        store.wal.as_ref().unwrap().len() > logged,
        "the purge was logged"
    );
    one(&mut store, schedule("after"), now);
    let mut store = crash(store, dir.path(), 0);
    for id in ["before", "after"] {
        let reply = one(&mut store, Op::Get { id: id.to_owned() }, now);
        assert!(
            matches!(reply, Reply::Info(Some(_))),
            "{id} lost: {reply:?}"
        );
    }
}

/// A store of another format (an older one, never published, or one from a later version)
/// is refused at open, and the error names the format found and the one this code reads:
/// nothing is converted or misread.
#[test]
fn a_store_of_another_format_is_refused_naming_the_format_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s0.redb");
    let mut store = file_store(dir.path(), 0);
    one(&mut store, schedule("a", at(5), b"p"), 1);
    store.close().expect("close");
    for found in [3, FORMAT + 1] {
        {
            let db = redb::Database::builder().create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(META)
                .unwrap()
                .insert("format", found)
                .unwrap();
            txn.commit().unwrap();
        }
        let db = redb::Database::builder().create(&path).unwrap();
        let wal = Wal::open(&dir.path().join("s0.redb.wal")).unwrap();
        let err = Store::open(db, &config(), Some(wal))
            .err()
            .expect("refused");
        assert!(err.is_storage(), "{err}");
        let text = err.to_string();
        assert!(
            text.contains(&format!("format {found}")) && text.contains(&format!("format {FORMAT}")),
            "{text}"
        );
    }
}

/// A store of format 4 (before kinds), written table by table as that version wrote it, with
/// version 2 records and a log record of its epoch not yet checkpointed: opening upgrades it
/// in place, replays the log onto the new indexes, and every job reads as a plain one.
#[test]
fn a_format_4_store_and_its_log_are_upgraded_at_open() {
    use crate::backend::embedded::record::tests::encode_v2;
    use crate::backend::embedded::wal;
    use crate::core::state::{Machine, Status};
    use redb::{ReadableDatabase, ReadableTable, TableDefinition};
    const OLD_DUE: TableDefinition<'_, (u64, &str), ()> = TableDefinition::new("due");
    const OLD_RUNNING: TableDefinition<'_, (u64, &str), ()> = TableDefinition::new("running");
    const OWNER: u64 = 0x5eed;
    let dir = tempfile::tempdir().expect("tempdir");
    let job = |run_at, attempt, status| Machine {
        run_at,
        attempt,
        status,
    };
    {
        let db = redb::Database::builder()
            .create(dir.path().join("s0.redb"))
            .unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut jobs = txn.open_table(tables::JOBS).unwrap();
            let mut due = txn.open_table(OLD_DUE).unwrap();
            let mut running = txn.open_table(OLD_RUNNING).unwrap();
            let mut died = txn.open_table(DIED).unwrap();
            txn.open_table(SERIES).unwrap();
            let pending = encode_v2(&job(5, 1, Status::Pending), Some("oh"), b"p");
            let leased = Status::Running {
                token: 7,
                until: 50,
            };
            let leased = encode_v2(&job(1, 1, leased), None, b"r");
            let dead = encode_v2(&job(1, 2, Status::Dead { at: 3 }), None, b"d");
            jobs.insert("p", pending.as_slice()).unwrap();
            jobs.insert("r", leased.as_slice()).unwrap();
            jobs.insert("d", dead.as_slice()).unwrap();
            due.insert((5, "p"), ()).unwrap();
            running.insert((50, "r"), ()).unwrap();
            died.insert((3, "d"), ()).unwrap();
            let mut meta = txn.open_table(META).unwrap();
            for (key, value) in [
                ("format", 4),
                ("pending", 1),
                ("running", 1),
                ("dead", 1),
                ("epoch", 3),
                ("owner", OWNER),
            ] {
                meta.insert(key, value).unwrap();
            }
        }
        txn.commit().unwrap();
    }
    {
        let mut log = Wal::open(&dir.path().join("s0.redb.wal")).unwrap();
        log.replay(OWNER, 3, u64::MAX, |_| Ok(())).unwrap();
        let mut body = Vec::new();
        let written = encode_v2(&job(7, 0, Status::Pending), None, b"w");
        wal::push_change(&mut body, "w", Some(&written));
        log.append(3, &body, true).unwrap();
    }
    let mut store = file_store(dir.path(), 0);
    let plain = store.plain.clone();
    let now = 100;
    let expect = job::Counts::new(2, 1, 1, false, Some(5))
        .with_kinds([(String::new(), KindCounts::new(2, 1, 1))]);
    assert_eq!(
        one(&mut store, Op::Counts, now),
        Reply::Counts(expect.clone())
    );
    let Reply::Info(Some(info)) = one(&mut store, Op::Get { id: "p".into() }, now) else {
        panic!("p is there");
    };
    assert_eq!(
        info,
        JobInfo::new(
            "p".into(),
            JobState::Pending,
            5,
            1,
            Some("oh".into()),
            b"p".to_vec(),
            plain.clone()
        )
    );
    let list = Op::List {
        state: JobState::Pending,
        after: None,
        limit: 10,
        payloads: false,
        kind: Some(String::new()),
    };
    let Reply::Listed(listed) = one(&mut store, list, now) else {
        panic!("a list");
    };
    let ids: Vec<_> = listed.iter().map(|(at, j)| (*at, j.id())).collect();
    assert_eq!(ids, [(5, "p"), (7, "w")]);
    // Format 4's dead jobs are filed under kind "" by the upgrade.
    let dead = Op::List {
        state: JobState::Dead,
        after: None,
        limit: 10,
        payloads: false,
        kind: Some(String::new()),
    };
    let Reply::Listed(listed) = one(&mut store, dead, now) else {
        panic!("a list");
    };
    let ids: Vec<_> = listed.iter().map(|(at, j)| (*at, j.id())).collect();
    assert_eq!(ids, [(3, "d")]);
    // Reopened without a crash, the upgraded store opens as format 6 (`FORMAT`) with nothing to
    // redo.
    store.close().unwrap();
    {
        let db = redb::Database::builder()
            .create(dir.path().join("s0.redb"))
            .unwrap();
        let txn = db.begin_read().unwrap();
        let format = txn
            .open_table(META)
            .unwrap()
            .get("format")
            .unwrap()
            .unwrap()
            .value();
        assert_eq!(format, FORMAT);
        // Format 4's indexes are the plain group's: kept as they were.
        let due = txn.open_table(tables::PLAIN_DUE).unwrap();
        let keys: Vec<(u64, String)> = due
            .iter()
            .unwrap()
            .map(|e| {
                let (k, _) = e.unwrap();
                let (at, id) = k.value();
                (at, id.to_owned())
            })
            .collect();
        assert_eq!(keys, [(5, "p".to_owned()), (7, "w".to_owned())]);
        assert_eq!(died_by_kind(&txn), [(String::new(), 3, "d".to_owned())]);
    }
    let mut store = file_store(dir.path(), 0);
    assert_eq!(one(&mut store, Op::Counts, now), Reply::Counts(expect));
    let other = Op::Claim {
        max: 10,
        kind: ClaimKinds::one("x"),
    };
    let Reply::Claimed(batch, _) = one(&mut store, other, now) else {
        panic!("a claim");
    };
    assert_eq!((batch.jobs.len(), batch.next_due), (0, None));
    let Reply::Claimed(batch, _) = one(
        &mut store,
        Op::Claim {
            max: 10,
            kind: ClaimKinds::All,
        },
        now,
    ) else {
        panic!("a claim");
    };
    let got: Vec<_> = batch
        .jobs
        .iter()
        .map(|c| (c.id.as_str(), c.attempt, &c.spec))
        .collect();
    assert_eq!(got, [("r", 2, &plain), ("p", 2, &plain), ("w", 1, &plain)]);
    // The claimed jobs were rewritten in the current version; a crash keeps them so.
    let mut store = crash(store, dir.path(), 0);
    assert_eq!(
        store.counts(),
        Tally {
            pending: 0,
            running: 3,
            dead: 1
        }
    );
    let Reply::Info(Some(info)) = one(&mut store, Op::Get { id: "r".into() }, now) else {
        panic!("r is there");
    };
    assert_eq!(
        (info.attempt(), info.last_error()),
        (2, Some(state::LEASE_EXPIRED))
    );
}

/// A job's own spec survives a crash by the log, and a claim uses its own lease and
/// attempts: a lease-expiry redelivery of a one-attempt job kills it, whatever the queue's
/// `max_attempts`.
#[test]
fn own_specs_survive_a_crash_and_rule_the_claim() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = file_store(dir.path(), 0);
    store.checkpoint_every = Duration::from_secs(3600);
    let spec = Spec {
        kind: "mail".into(),
        priority: 5,
        max_attempts: 1,
        backoff: (Duration::from_nanos(3), Duration::from_nanos(9)),
        lease: Duration::from_nanos(40),
        hold_off: Duration::ZERO,
        key: None,
    };
    let op = Op::Schedule(NewJob {
        id: "m".into(),
        when: at(10),
        payload: b"x".to_vec(),
        spec: spec.clone(),
        dedup: Dedup::Keep,
    });
    one(&mut store, op, 0);
    one(&mut store, schedule("plain", at(1), b""), 0);
    let mut store = crash(store, dir.path(), 0);
    let claim = |kind: Option<&str>| Op::Claim {
        max: 10,
        kind: kind.map(str::to_owned).into(),
    };
    let Reply::Claimed(batch, _) = one(&mut store, claim(None), 20) else {
        panic!("a claim");
    };
    // Priority 5 before the plain job due earlier; each leased for its own lease.
    let got: Vec<_> = batch
        .jobs
        .iter()
        .map(|c| (c.id.as_str(), &c.spec))
        .collect();
    assert_eq!(got, [("m", &spec), ("plain", &store.plain)]);
    assert_eq!(batch.next_due, Some(20 + LEASE));
    let Reply::Claimed(batch, _) = one(&mut store, claim(Some("mail")), 20) else {
        panic!("a claim");
    };
    assert_eq!(
        batch.next_due,
        Some(60),
        "mail's own lease; the plain one is not counted"
    );
    let mut store = crash(store, dir.path(), 1);
    let Reply::Claimed(batch, _) = one(&mut store, claim(Some("mail")), 60) else {
        panic!("a claim");
    };
    assert_eq!(
        (batch.jobs.len(), batch.died),
        (0, 1),
        "one attempt of its own"
    );
    assert_eq!(store.counts().running, 1, "the plain job's lease untouched");
    let expect = job::Counts::new(0, 1, 1, false, None).with_kinds([
        (String::new(), KindCounts::new(0, 1, 0)),
        ("mail".to_owned(), KindCounts::new(0, 0, 1)),
    ]);
    assert_eq!(one(&mut store, Op::Counts, 60), Reply::Counts(expect));
}

// ===== recurring series =====

/// A millisecond in the store's nanoseconds: recurrences are in whole milliseconds at least.
const MS: u64 = 1_000_000;

/// `every 10ms`: the series tests' times are in milliseconds (`t * MS`).
fn set_every_10(name: &str) -> Op {
    Op::SetRecurring {
        name: name.to_owned(),
        rule: Recurrence::every(Duration::from_millis(10)).unwrap(),
        payload: b"s".to_vec(),
        catch_up: CatchUp::Latest,
        spec: config().defaults().plain().clone(),
    }
}

/// `cancel_recurring("s")`: whether it existed.
fn cancel_s(store: &mut Store, now: u64) -> bool {
    let name = "s".to_owned();
    one(store, Op::CancelRecurring { name }, now) == Reply::Bool(true)
}

fn list(store: &mut Store, now: u64) -> Vec<RecurringInfo> {
    match one(store, Op::ListRecurring, now) {
        Reply::RecurringList(list) => list,
        other => panic!("{other:?}"),
    }
}

/// A series' changes are in the log records of their batch: a crash before any checkpoint
/// keeps the series, its moved head and the claimed occurrence together.
#[test]
fn series_changes_survive_a_crash_by_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = file_store(dir.path(), 0);
    store.checkpoint_every = Duration::from_secs(3600);
    assert_eq!(
        one(&mut store, set_every_10("s"), 100 * MS),
        Reply::Recurring(Recurring::Created, Some(110 * MS))
    );
    let Reply::Claimed(batch, _) = one(
        &mut store,
        Op::Claim {
            max: 10,
            kind: ClaimKinds::All,
        },
        112 * MS,
    ) else {
        panic!("a claim");
    };
    assert_eq!(batch.jobs.len(), 1);
    assert_eq!(batch.jobs[0].run_at, 110 * MS);
    let before = list(&mut store, 112 * MS);
    let mut store = crash(store, dir.path(), 0);
    assert_eq!(list(&mut store, 112 * MS), before);
    assert_eq!(
        before[0].next_run(),
        Some(UNIX_EPOCH + Duration::from_millis(120))
    );
    assert_eq!(store.counts().pending, 1);
    assert_eq!(store.counts().running, 1);
    assert!(cancel_s(&mut store, 112 * MS));
    assert_eq!(store.counts().pending, 0);
    let mut store = crash(store, dir.path(), 1);
    assert!(list(&mut store, 112 * MS).is_empty());
}

/// Claims the one due occurrence at `now` and acks it (its job is gone); returns its time.
fn run_one(store: &mut Store, now: u64) -> u64 {
    let Reply::Claimed(batch, _) = one(
        store,
        Op::Claim {
            max: 10,
            kind: ClaimKinds::All,
        },
        now,
    ) else {
        panic!("a claim");
    };
    assert_eq!(batch.jobs.len(), 1, "{batch:?}");
    let job = &batch.jobs[0];
    let (id, token) = (job.id.clone(), job.token);
    one(store, Op::Ack { id, token }, now);
    job.run_at
}

/// A series is never given a head at or before its last delivery, even by a clock that
/// went back: that occurrence's job is acked and gone, and its free id proves nothing.
#[test]
fn a_clock_gone_back_does_not_make_a_delivered_occurrence_again() {
    let mut store = store();
    one(&mut store, set_every_10("s"), 100 * MS);
    assert_eq!(run_one(&mut store, 112 * MS), 110 * MS);
    let every_5 = Op::SetRecurring {
        name: "s".into(),
        rule: Recurrence::every(Duration::from_millis(5)).unwrap(),
        payload: b"s".to_vec(),
        catch_up: CatchUp::Latest,
        spec: config().defaults().plain().clone(),
    };
    // At 103 the first occurrence after now would be 105, then 110: both at or before 110.
    assert_eq!(
        one(&mut store, every_5, 103 * MS),
        Reply::Recurring(Recurring::Updated, Some(115 * MS))
    );
    assert_eq!(store.counts().pending, 1);
    assert_eq!(
        list(&mut store, 103 * MS)[0].last_run(),
        Some(UNIX_EPOCH + Duration::from_millis(110))
    );
}

/// Under `Latest` the claim that finds a head superseded runs the occurrence that
/// supersedes it in the same step: left pending for another claim, it would be superseded
/// in turn whenever claims come further apart than the interval, and nothing would run.
#[test]
fn a_superseded_head_is_replaced_by_its_successor_in_the_same_claim() {
    let mut store = store();
    one(&mut store, set_every_10("s"), 100 * MS);
    let Reply::Claimed(batch, _) = one(
        &mut store,
        Op::Claim {
            max: 10,
            kind: ClaimKinds::All,
        },
        135 * MS,
    ) else {
        panic!("a claim");
    };
    let ids: Vec<_> = batch
        .jobs
        .iter()
        .map(|j| (j.id.as_str(), j.run_at))
        .collect();
    assert_eq!(ids, [("s@1970-01-01T00:00:00.13Z", 130 * MS)]);
    assert_eq!((store.counts().pending, store.counts().running), (1, 1));
    let info = &list(&mut store, 135 * MS)[0];
    assert_eq!(
        info.last_run(),
        Some(UNIX_EPOCH + Duration::from_millis(130))
    );
    assert_eq!(
        info.next_run(),
        Some(UNIX_EPOCH + Duration::from_millis(140))
    );
}

/// The ids and kinds a claim of `kind` (every kind for `None`) hands out at `now`.
fn claim_kinds(store: &mut Store, kind: Option<&str>, now: u64) -> Vec<(String, String)> {
    let op = Op::Claim {
        max: 10,
        kind: kind.map(str::to_owned).into(),
    };
    let Reply::Claimed(batch, _) = one(store, op, now) else {
        panic!("a claim");
    };
    batch
        .jobs
        .into_iter()
        .map(|j| (j.id, j.spec.kind))
        .collect()
}

fn spec_of_kind(kind: &str) -> Spec {
    config()
        .defaults()
        .resolve(&crate::JobOptions::kind(kind))
        .expect("a kind")
}

/// A pending job at an occurrence's id is adopted as the series' head only if it is of the
/// plain group, as occurrences are: a job of kind x is claimed by x's claimers only, and
/// as a head it would move the series only when one of them runs.
#[test]
fn only_a_plain_job_is_adopted_as_a_series_head() {
    let mut store = store();
    let id = crate::core::series::occurrence_id("s", 110 * MS);
    let op = Op::Schedule(NewJob {
        id: id.clone(),
        when: at(110 * MS),
        payload: b"x".to_vec(),
        spec: spec_of_kind("x"),
        dedup: Dedup::Keep,
    });
    assert_eq!(
        one(&mut store, op, 100 * MS),
        Reply::Scheduled(Scheduled::Created, 110 * MS)
    );
    assert_eq!(
        one(&mut store, set_every_10("s"), 100 * MS),
        Reply::Recurring(Recurring::Created, Some(120 * MS))
    );
    // x's job is x's, an ordinary job; the series' head is of kind "".
    assert_eq!(claim_kinds(&mut store, Some(""), 115 * MS), []);
    assert_eq!(
        claim_kinds(&mut store, Some("x"), 125 * MS),
        [(id, "x".to_owned())]
    );
    let head = crate::core::series::occurrence_id("s", 120 * MS);
    assert_eq!(
        claim_kinds(&mut store, Some(""), 125 * MS),
        [(head, String::new())]
    );
    assert_eq!(
        list(&mut store, 125 * MS)[0].next_run(),
        Some(UNIX_EPOCH + Duration::from_millis(130))
    );
}

/// A claim of kind x never hands out a job of another kind, even the occurrence a
/// superseded head of kind x (adopted by an earlier version) gives in its place: that one
/// stays pending for the claimers of its kind.
#[test]
fn a_claim_of_one_kind_never_gets_an_occurrence_in_its_heads_place() {
    let mut store = store();
    one(&mut store, set_every_10("s"), 100 * MS);
    // What an earlier version left: the head, of kind x.
    let head = crate::core::series::occurrence_id("s", 110 * MS);
    let txn = store.db.begin_write().expect("txn");
    {
        let mut t = Tables::open(&txn, &store.plain).expect("tables");
        let stored = t.load(&head).expect("load").expect("the head");
        let x = spec_of_kind("x");
        let record = Record {
            job: stored.job,
            spec: std::borrow::Cow::Borrowed(&x),
            error: None,
            payload: &stored.payload,
            next: false,
            waiting: false,
        };
        t.set(&mut store.counts, &head, Some(&stored), Some(record))
            .expect("set");
    }
    txn.commit().expect("commit");

    // Superseded at 135 by the occurrence at 130, which is of kind "".
    assert_eq!(claim_kinds(&mut store, Some("x"), 135 * MS), []);
    let instead = crate::core::series::occurrence_id("s", 130 * MS);
    let Reply::Info(Some(job)) = one(
        &mut store,
        Op::Get {
            id: instead.clone(),
        },
        135 * MS,
    ) else {
        panic!("{instead} left pending");
    };
    assert_eq!((job.state(), job.kind()), (JobState::Pending, ""));
    assert_eq!(
        claim_kinds(&mut store, Some(""), 135 * MS),
        [(instead, String::new())]
    );
    assert_eq!(
        list(&mut store, 135 * MS)[0].last_run(),
        Some(UNIX_EPOCH + Duration::from_millis(130))
    );
}

/// A series whose stored recurrence no longer parses (here a sub-millisecond interval an
/// earlier version stored) fails no claim: its pending occurrence runs as an ordinary job,
/// the series is left without one, and it is not listed.
#[test]
fn a_stored_recurrence_that_no_longer_parses_fails_no_claim() {
    let mut store = store();
    one(&mut store, set_every_10("s"), 100 * MS);
    {
        let txn = store.db.begin_write().unwrap();
        {
            let mut table = txn.open_table(SERIES).unwrap();
            let bytes = table.get("s").unwrap().unwrap().value().to_vec();
            let mut record = series::Record::decode(&bytes).unwrap();
            record.rule = "every 500us".into();
            table.insert("s", record.encode().as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    assert!(list(&mut store, 105 * MS).is_empty());
    let Reply::Claimed(batch, _) = one(
        &mut store,
        Op::Claim {
            max: 10,
            kind: ClaimKinds::All,
        },
        112 * MS,
    ) else {
        panic!("a claim");
    };
    assert_eq!(batch.jobs.len(), 1);
    assert_eq!(batch.jobs[0].run_at, 110 * MS);
    assert_eq!((store.counts().pending, store.counts().running), (0, 1));
    assert!(cancel_s(&mut store, 112 * MS));
}

/// A replace and a hold-off's tombstone replay from the log after a crash: the replaced
/// job keeps its new time and payload, the acked id stays refused until its hold-off ends,
/// and a claim after that end deletes the tombstone.
#[test]
fn replace_and_hold_off_survive_a_crash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = file_store(dir.path(), 0);
    store.checkpoint_every = Duration::from_secs(3600);
    let plain = store.plain.clone();
    let new = |id: &str, t: u64, payload: &[u8], dedup: Dedup| {
        let mut spec = plain.clone();
        if let Dedup::HoldOff(d) = dedup {
            spec.hold_off = d;
        }
        Op::Schedule(NewJob {
            id: id.into(),
            when: at(t),
            payload: payload.to_vec(),
            spec,
            dedup,
        })
    };
    let hold = Dedup::HoldOff(Duration::from_nanos(50));
    one(&mut store, new("r", 40, b"old", Dedup::Keep), 0);
    one(&mut store, new("h", 5, b"h", hold), 0);
    assert_eq!(
        one(&mut store, new("r", 30, b"new", Dedup::Replace), 1),
        Reply::Scheduled(Scheduled::Replaced, 30)
    );
    let Reply::Claimed(batch, _) = one(
        &mut store,
        Op::Claim {
            max: 1,
            kind: ClaimKinds::All,
        },
        10,
    ) else {
        panic!("a claim");
    };
    assert_eq!(batch.jobs[0].id, "h");
    let token = batch.jobs[0].token;
    let ack = Op::Ack {
        id: "h".into(),
        token,
    };
    assert_eq!(one(&mut store, ack, 10), Reply::Acked(true, None));
    let mut store = crash(store, dir.path(), 0);
    let Reply::Info(Some(r)) = one(&mut store, Op::Get { id: "r".into() }, 11) else {
        panic!("r is there");
    };
    assert_eq!((r.payload(), job::nanos(r.run_at())), (&b"new"[..], 30));
    assert_eq!(
        one(&mut store, Op::Get { id: "h".into() }, 11),
        Reply::Info(None)
    );
    let until = UNIX_EPOCH + Duration::from_nanos(60);
    for dedup in [Dedup::Keep, Dedup::Replace, hold] {
        assert_eq!(
            one(&mut store, new("h", 70, b"again", dedup), 59),
            Reply::Scheduled(Scheduled::HeldOff { until }, 60),
            "{dedup:?}"
        );
    }
    assert_eq!(held_tables(&store).len(), 1);
    one(
        &mut store,
        Op::Claim {
            max: 0,
            kind: ClaimKinds::All,
        },
        60,
    );
    assert!(held_tables(&store).is_empty(), "the claim deleted it");
    let mut store = crash(store, dir.path(), 1);
    assert!(held_tables(&store).is_empty(), "and the log says so");
    assert_eq!(
        one(&mut store, new("h", 70, b"again", Dedup::Keep), 60),
        Reply::Scheduled(Scheduled::Created, 70)
    );
    assert_eq!(store.counts().pending, 2, "tombstones are never counted");
}

/// Replace leaves a running or dead job, and a series' pending occurrence, as it is; it
/// keeps a pending job's attempts and last error.
#[test]
fn replace_moves_only_a_pending_job() {
    let mut store = store();
    let plain = store.plain.clone();
    let replace = |id: &str, t: u64| {
        Op::Schedule(NewJob {
            id: id.into(),
            when: at(t),
            payload: b"new".to_vec(),
            spec: plain.clone(),
            dedup: Dedup::Replace,
        })
    };
    one(&mut store, schedule("run", at(1), b"old"), 0);
    let claim = |max| Op::Claim {
        max,
        kind: ClaimKinds::All,
    };
    let Reply::Claimed(batch, _) = one(&mut store, claim(1), 5) else {
        panic!("a claim");
    };
    assert_eq!(
        one(&mut store, replace("run", 50), 6),
        Reply::Scheduled(Scheduled::Exists, 1)
    );
    // Failed once: pending again with an error and attempt 1, then replaced.
    let fail = Op::Retry {
        id: "run".into(),
        token: batch.jobs[0].token,
        after: Duration::from_nanos(3),
        error: Some("boom".into()),
    };
    one(&mut store, fail, 6);
    assert_eq!(
        one(&mut store, replace("run", 50), 7),
        Reply::Scheduled(Scheduled::Replaced, 50)
    );
    let Reply::Info(Some(info)) = one(&mut store, Op::Get { id: "run".into() }, 7) else {
        panic!("run is there");
    };
    assert_eq!(
        (info.attempt(), info.last_error(), info.payload()),
        (1, Some("boom"), &b"new"[..])
    );
    // Out of attempts: dead, then left alone.
    let Reply::Claimed(batch, _) = one(&mut store, claim(1), 50) else {
        panic!("a claim");
    };
    let fail = Op::Retry {
        id: "run".into(),
        token: batch.jobs[0].token,
        after: Duration::ZERO,
        error: None,
    };
    assert_eq!(
        one(&mut store, fail, 51),
        Reply::Retried(Retry::Died, 51, None)
    );
    assert!(matches!(
        one(&mut store, replace("run", 60), 52),
        Reply::Scheduled(Scheduled::Exists, _)
    ));
    let Reply::Info(Some(info)) = one(&mut store, Op::Get { id: "run".into() }, 52) else {
        panic!("run is there");
    };
    assert_eq!(info.state(), JobState::Dead);
    // A series' pending occurrence keeps its time.
    let rule = Recurrence::every(Duration::from_secs(60)).expect("a rule");
    let set = Op::SetRecurring {
        name: "s".into(),
        rule,
        payload: b"tick".to_vec(),
        catch_up: CatchUp::default(),
        spec: config().defaults().plain().clone(),
    };
    let Reply::Recurring(_, Some(head)) = one(&mut store, set, 100 * MS) else {
        panic!("a head");
    };
    let id = crate::core::series::occurrence_id("s", head);
    assert_eq!(
        one(&mut store, replace(&id, 200 * MS), 100 * MS),
        Reply::Scheduled(Scheduled::Exists, head)
    );
}

/// A successor, its record bit and each handover are in the log: a crash after the
/// schedule keeps the successor beside its running job, and one after the ack (or after the
/// claim that killed the job at its last attempt) finds the successor pending in its place.
#[test]
fn successors_and_their_handovers_survive_a_crash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = file_store(dir.path(), 0);
    store.checkpoint_every = Duration::from_secs(3600);
    let mut once = store.plain.clone();
    once.max_attempts = 1;
    let new = |id: &str, t: u64, payload: &[u8], spec: &Spec, dedup: Dedup| {
        Op::Schedule(NewJob {
            id: id.into(),
            when: at(t),
            payload: payload.to_vec(),
            spec: spec.clone(),
            dedup,
        })
    };
    let plain = store.plain.clone();
    let allow = Dedup::AllowWhileRunning;
    one(&mut store, new("a", 0, b"a1", &plain, Dedup::Keep), 0);
    one(&mut store, new("k", 0, b"k1", &once, Dedup::Keep), 0);
    let Reply::Claimed(batch, _) = one(
        &mut store,
        Op::Claim {
            max: 2,
            kind: ClaimKinds::All,
        },
        1,
    ) else {
        panic!("a claim");
    };
    assert_eq!(batch.jobs.len(), 2);
    for (id, t) in [("a", 7), ("k", 9)] {
        assert_eq!(
            one(&mut store, new(id, t, b"next", &plain, allow), 2),
            Reply::Scheduled(Scheduled::Successor, t)
        );
    }
    let mut store = crash(store, dir.path(), 0);
    assert_eq!(next_table(&store).len(), 2, "both successors replayed");
    let Reply::Info(Some(a)) = one(&mut store, Op::Get { id: "a".into() }, 3) else {
        panic!("a is there");
    };
    let seven = UNIX_EPOCH + Duration::from_nanos(7);
    assert_eq!((a.state(), a.successor()), (JobState::Running, Some(seven)));
    let ack = Op::Ack {
        id: "a".into(),
        token: batch.jobs[0].token,
    };
    assert_eq!(one(&mut store, ack, 3), Reply::Acked(true, Some(7)));
    // k's lease (30 s) ends; the claim finds it at its last attempt and hands over.
    let after_lease = 1 + nanos_of(plain.lease);
    let Reply::Claimed(killed, handed) = one(
        &mut store,
        Op::Claim {
            max: 1,
            kind: ClaimKinds::All,
        },
        after_lease,
    ) else {
        panic!("a claim");
    };
    assert_eq!((killed.jobs.len(), killed.died, handed), (0, 1, Some(9)));
    let mut store = crash(store, dir.path(), 1);
    assert!(next_table(&store).is_empty(), "both handed over");
    for (id, t, error) in [("a", 7, None), ("k", 9, Some(state::LEASE_EXPIRED))] {
        let Reply::Info(Some(job)) = one(&mut store, Op::Get { id: id.into() }, after_lease) else {
            panic!("{id} is there");
        };
        assert_eq!(
            (job.state(), job.payload(), job.attempt(), job.last_error()),
            (JobState::Pending, &b"next"[..], 0, error),
            "{id}"
        );
        assert_eq!(job::nanos(job.run_at()), t);
        assert_eq!(job.successor(), None);
    }
    assert_eq!(store.counts().dead, 0);
}

mod gates;
mod recurring;
