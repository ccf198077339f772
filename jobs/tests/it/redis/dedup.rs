//! The dedup modes' storage on Redis (`lua/held.lua`): the tombstone an ack leaves, its
//! bounded cleanup by claims, folded acks, copies, and processes racing Replace and HoldOff
//! schedules and acks on the same ids through a kill -9. The behaviour itself is the shared
//! suite's (`suite/dedup.rs`, `run_dedup_suite!` in `redis.rs`).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use wheel_jobs::{Dedup, JobOptions, JobQueue, JobState, ListOptions, Scheduled};

use super::{eval_claim, eval_series_script, queue, script_calls};
use crate::kill::{child_role, kill_in_turn, runtime, spawn_child};
use crate::support::redis::RedisServer;
use crate::support::{ms, next, temp_dir};

const HOUR: Duration = Duration::from_secs(3600);

fn hold_off(d: Duration) -> JobOptions {
    JobOptions::new().dedup(Dedup::HoldOff(d))
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}

/// An ack of a job with a hold-off leaves `{orders}:held` id → until ns and
/// `{orders}:held_until` id scored by until in microseconds (rounded up), beside the ack;
/// the job's meta keeps its hold-off after the spec; a job without one leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_leaves_its_tombstone_in_the_partition_tag() {
    let server = RedisServer::start();
    let q = queue(&server, |_| {}).await;
    let hold = Duration::from_nanos(3_600_000_000_001);
    q.schedule_with("t", Duration::ZERO, "p", &hold_off(hold))
        .await
        .unwrap();
    q.schedule("u", Duration::ZERO, "p").await.unwrap();
    let meta = server.cli(&["HGET", "{orders}:meta", "t"]);
    assert!(meta.ends_with(":3600000000001\x1f"), "{meta:?}");
    let plain = server.cli(&["HGET", "{orders}:meta", "u"]);
    assert_eq!(plain.matches(':').count(), 8, "no hold-off field: {plain}");
    let mut consumer = q.consume();
    for _ in 0..2 {
        assert!(next(&mut consumer).await.ack().await.unwrap());
    }
    let until = match q.schedule("t", Duration::ZERO, "p").await.unwrap() {
        Scheduled::HeldOff { until } => nanos(until),
        other => panic!("held off, not {other:?}"),
    };
    assert_eq!(until % 1000, 1, "the hold-off's nanoseconds kept");
    assert_eq!(
        server.cli(&["HGETALL", "{orders}:held"]),
        format!("t\n{until}")
    );
    assert_eq!(
        server.cli(&["ZRANGE", "{orders}:held_until", "0", "-1", "WITHSCORES"]),
        format!("t\n{}", until.div_ceil(1000))
    );
    assert_eq!(server.cli(&["HEXISTS", "{orders}:meta", "t"]), "0");
    assert_eq!(
        q.schedule("u", HOUR, "p").await.unwrap(),
        Scheduled::Created,
        "no hold-off, no tombstone"
    );
    q.close().await.unwrap();
}

/// A job stored before the hold-off field (a format-2 tail without it) reads and acks as
/// one without a hold-off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tail_without_the_field_holds_nothing_off() {
    let server = RedisServer::start();
    let q = queue(&server, |_| {}).await;
    let old = "p:0:0:1000:-2:7:60000000000:1000000000:60000000000\x1fmail";
    server.cli(&["HSET", "{orders}:meta", "old", old]);
    server.cli(&["HSET", "{orders}:payload", "old", "p"]);
    server.cli(&["ZADD", "{orders}:due:-2:mail", "1", "old"]);
    server.cli(&["ZADD", "{orders}:levels", "-2", "d:-2:mail"]);
    server.cli(&["HINCRBY", "{orders}:counts", "pending", "1"]);
    server.cli(&["HINCRBY", "{orders}:counts", "pending:mail", "1"]);
    let job = q.get("old").await.unwrap().unwrap();
    assert_eq!((job.kind(), job.priority()), ("mail", -2));
    let d = next(&mut q.consume()).await;
    assert_eq!(d.id(), "old");
    assert!(d.ack().await.unwrap());
    assert_eq!(server.cli(&["EXISTS", "{orders}:held"]), "0");
    assert_eq!(
        q.schedule("old", HOUR, "p").await.unwrap(),
        Scheduled::Created
    );
    q.close().await.unwrap();
}

/// One `schedule.lua` batch as the batcher sends for concurrent single schedules: create
/// `x` of kind `k` (due now), then Replace `y`, the last stored job of `k`, into kind `k2`.
/// `k`'s level stays recorded (`x` is written before the replace tidies `y`'s old level),
/// so a claim delivers `x`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replace_after_a_create_in_one_batch_leaves_the_created_job_claimable() {
    let server = RedisServer::start();
    let q = queue(&server, |_| {}).await;
    q.schedule_with("y", Duration::ZERO, "y", &JobOptions::kind("k"))
        .await
        .unwrap();
    let body = concat!(
        include_str!("../../../src/backend/redis/lua/gates.lua"),
        include_str!("../../../src/backend/redis/lua/held.lua"),
        include_str!("../../../src/backend/redis/lua/next.lua"),
        include_str!("../../../src/backend/redis/lua/schedule.lua")
    );
    let keys = [
        "meta",
        "payload",
        "due",
        "counts",
        "levels",
        "held",
        "held_until",
        "series",
        "next",
        "next_payload",
        "gate_timers",
    ];
    // A kind's spec tail (`scripts::spec_tail`): priority 0, 25 attempts, lease 30 s,
    // backoff 1 s to 1 h.
    let tail = |kind: &str| format!(":0:25:30000000000:1000000000:3600000000000\x1f{kind}");
    let now = nanos(SystemTime::now());
    let (ns, score) = (now.to_string(), now.div_ceil(1000).to_string());
    let (k, k2) = (tail("k"), tail("k2"));
    let mut args = vec!["{orders}:wake", "PUBLISH"];
    args.extend(["x", "at", &ns, &score, "x", &k, "k"]);
    args.extend(["y", "at", &ns, &score, "y", &k2, "r"]);
    assert_eq!(
        eval_series_script(&server, body, &keys, &args),
        format!("1\n{ns}\n2\n{ns}"),
        "x created, y replaced"
    );
    assert_eq!(
        server.cli(&["ZRANGE", "{orders}:levels", "0", "-1"]),
        "d:0:k\nd:0:k2"
    );
    eval_claim(&server);
    for id in ["x", "y"] {
        let job = q.get(id).await.unwrap().unwrap();
        assert_eq!(job.state(), JobState::Running, "{id} claimed");
    }
    q.close().await.unwrap();
}

/// 100 expired tombstones and one that holds: each claim deletes at most 64 expired ones,
/// the earliest first, and never one that still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_deletes_at_most_64_expired_tombstones_earliest_first() {
    let server = RedisServer::start();
    let q = queue(&server, |_| {}).await;
    q.close().await.unwrap();
    for i in 0..100u64 {
        // Expired long ago: 1 s after the epoch, and i µs.
        let until = 1_000_000_000 + i * 1000;
        let id = format!("x{i:03}");
        server.cli(&["HSET", "{orders}:held", &id, &until.to_string()]);
        server.cli(&[
            "ZADD",
            "{orders}:held_until",
            &(until / 1000).to_string(),
            &id,
        ]);
    }
    let later = nanos(SystemTime::now() + HOUR);
    server.cli(&["HSET", "{orders}:held", "holds", &later.to_string()]);
    server.cli(&[
        "ZADD",
        "{orders}:held_until",
        &later.div_ceil(1000).to_string(),
        "holds",
    ]);
    eval_claim(&server);
    assert_eq!(server.cli(&["HLEN", "{orders}:held"]), "37");
    assert_eq!(server.cli(&["ZCARD", "{orders}:held_until"]), "37");
    assert_eq!(
        server.cli(&["ZRANGE", "{orders}:held_until", "0", "0"]),
        "x064",
        "the earliest 64 went"
    );
    eval_claim(&server);
    assert_eq!(server.cli(&["HKEYS", "{orders}:held"]), "holds");
    assert_eq!(
        server.cli(&["ZRANGE", "{orders}:held_until", "0", "-1"]),
        "holds"
    );
    let q = queue(&server, |_| {}).await;
    assert!(matches!(
        q.schedule("holds", Duration::ZERO, "p").await.unwrap(),
        Scheduled::HeldOff { .. }
    ));
    q.close().await.unwrap();
}

/// A schedule or a copy meeting an expired tombstone deletes it and proceeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_tombstone_gives_way_to_a_schedule() {
    let server = RedisServer::start();
    let q = queue(&server, |_| {}).await;
    for id in ["a", "b"] {
        server.cli(&["HSET", "{orders}:held", id, "1000000000"]);
        server.cli(&["ZADD", "{orders}:held_until", "1000000", id]);
    }
    assert_eq!(
        q.schedule("a", HOUR, "p").await.unwrap(),
        Scheduled::Created
    );
    let dir = temp_dir();
    let source = JobQueue::open(dir.path().join("store")).await.unwrap();
    source.schedule("b", HOUR, "p").await.unwrap();
    assert_eq!(source.copy_to(&q).await.unwrap().jobs, 1);
    assert_eq!(
        server.cli(&["EXISTS", "{orders}:held", "{orders}:held_until"]),
        "0"
    );
    assert_eq!(q.pending().await.unwrap(), 2);
    source.close().await.unwrap();
    q.close().await.unwrap();
}

/// A copy skips an id held off in the destination and carries a job's hold-off: the copied
/// job, acked there, holds its id off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_skips_held_ids_and_carries_the_hold_off() {
    let server = RedisServer::start();
    let q = queue(&server, |_| {}).await;
    q.schedule_with("held", Duration::ZERO, "p", &hold_off(HOUR))
        .await
        .unwrap();
    let mut consumer = q.consume();
    assert!(next(&mut consumer).await.ack().await.unwrap());
    let dir = temp_dir();
    let source = JobQueue::open(dir.path().join("store")).await.unwrap();
    source.schedule("held", HOUR, "p").await.unwrap();
    source
        .schedule_with("carried", Duration::ZERO, "p", &hold_off(HOUR))
        .await
        .unwrap();
    let copied = source.copy_to(&q).await.unwrap();
    assert_eq!((copied.jobs, copied.existing), (1, 1));
    assert!(q.get("held").await.unwrap().is_none());
    let d = next(&mut consumer).await;
    assert_eq!(d.id(), "carried");
    assert!(d.ack().await.unwrap());
    assert!(matches!(
        q.schedule("carried", HOUR, "p").await.unwrap(),
        Scheduled::HeldOff { .. }
    ));
    source.close().await.unwrap();
    q.close().await.unwrap();
}

/// N sparse jobs with a hold-off, acked while the consumer goes on: the acks ride on the
/// next claims (about N script calls, not 2N) and each leaves its tombstone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn folded_acks_leave_their_tombstones() {
    const N: u64 = 40;
    let server = RedisServer::start();
    let q = queue(&server, |_| {}).await;
    let jobs = (0..N).map(|i| (format!("job-{i}"), ms(200 + 5 * i), "p"));
    q.schedule_many_with(jobs, &hold_off(HOUR)).await.unwrap();
    let before = script_calls(&server);
    let mut consumer = q.consume();
    let mut acks = Vec::new();
    for _ in 0..N {
        let d = next(&mut consumer).await;
        acks.push(tokio::spawn(async move { d.ack().await }));
    }
    for ack in acks {
        assert!(ack.await.unwrap().unwrap());
    }
    let calls = script_calls(&server) - before;
    assert!(calls < N + N / 2, "{calls} script calls for {N} jobs");
    assert_eq!(server.cli(&["HLEN", "{orders}:held"]), N.to_string());
    for i in 0..N {
        assert!(matches!(
            q.schedule(&format!("job-{i}"), HOUR, "p").await.unwrap(),
            Scheduled::HeldOff { .. }
        ));
    }
    q.close().await.unwrap();
}

/// The ids the processes race on: `k0`..`k9` take Keep and Replace schedules, `k10`..`k19`
/// HoldOff (an hour) and Replace ones.
const RACED: usize = 20;

/// Child: 8 tasks scheduling on the raced ids, and a consumer acking what comes, forever.
/// Prints `w <id> <payload> <outcome> <sent ns> <answered ns>` once a schedule returned,
/// `got <id> <payload>` at a delivery and `acked <id> <payload>` once its ack returned true.
/// A payload is `<child>.<task>.<n>.<mode>`, mode k (Keep), r (Replace) or h (HoldOff).
async fn race_forever(url: &str, child: &str) {
    let q = JobQueue::builder().redis(url, "race").await.unwrap();
    println!("\nready");
    let consumer = {
        let q = q.clone();
        tokio::spawn(async move {
            let mut consumer = q.consume();
            loop {
                let d = next(&mut consumer).await;
                let payload = String::from_utf8(d.payload().to_vec()).unwrap();
                println!("got {} {payload}", d.id());
                if d.ack().await.unwrap() {
                    println!("acked {} {payload}", d.id());
                }
            }
        })
    };
    let mut tasks = vec![consumer];
    for t in 0..8usize {
        let (q, child) = (q.clone(), child.to_owned());
        tasks.push(tokio::spawn(async move {
            for n in 0usize.. {
                let i = (t * 7 + n * 3) % RACED;
                let (mode, options) = match (n % 2, i < RACED / 2) {
                    (0, _) => ("r", JobOptions::new().dedup(Dedup::Replace)),
                    (_, true) => ("k", JobOptions::new()),
                    (_, false) => ("h", hold_off(HOUR)),
                };
                let payload = format!("{child}.{t}.{n}.{mode}");
                // Due now or a little later, so the consumers ack some mid-race.
                let when = ms((n % 3) as u64 * 10);
                let sent = nanos(SystemTime::now());
                let outcome = q
                    .schedule_with(&format!("k{i}"), when, payload.as_str(), &options)
                    .await
                    .unwrap();
                let answered = nanos(SystemTime::now());
                let outcome = match outcome {
                    Scheduled::Created => "c",
                    Scheduled::Replaced => "r",
                    Scheduled::Exists => "e",
                    Scheduled::HeldOff { .. } => "h",
                    other => panic!("an outcome this test does not know: {other:?}"),
                };
                println!("w k{i} {payload} {outcome} {sent} {answered}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// One answered schedule a child printed.
struct Write {
    payload: String,
    outcome: String,
    sent: u64,
    answered: u64,
}

/// Three processes race Replace, Keep and HoldOff schedules and acks on the same 20 ids;
/// one is SIGKILLed mid-race, then the others. Afterwards: each id is at most one job,
/// listed once and counted; a live job's payload is one a schedule wrote, and no answered
/// write of the id was sent after it was answered (no lost replace); every tombstone is of
/// an id whose held-off job was delivered (acked, or in flight when its process died);
/// every acked job with a hold-off left its tombstone and nothing was stored after it.
/// A last phase in this process, after the kills, on two ids of its own, makes sure the
/// checks meet a Replaced answer, an acked hold-off's tombstone and a HeldOff answer
/// whatever the race's timing.
#[test]
fn racing_dedup_processes_survive_kill_9() {
    const TEST: &str = "redis::dedup::racing_dedup_processes_survive_kill_9";
    if let Some((role, url)) = child_role() {
        runtime().block_on(race_forever(url.to_str().unwrap(), &role));
        return;
    }
    let server = RedisServer::start();
    let url = server.url();
    let mut children: Vec<_> = (0..3)
        .map(|c| spawn_child(TEST, &c.to_string(), Path::new(&url)))
        .collect();
    // The first mid-race, the others a while later: whatever each had in flight is cut.
    let lines = kill_in_turn(&mut children, ms(300));
    let mut writes: HashMap<String, Vec<Write>> = HashMap::new();
    let mut delivered: HashSet<(String, String)> = HashSet::new();
    let mut acked: Vec<(String, String)> = Vec::new();
    for line in &lines {
        let words: Vec<&str> = line.split(' ').collect();
        match words.as_slice() {
            ["w", id, payload, outcome, sent, answered] => {
                writes.entry(id.to_string()).or_default().push(Write {
                    payload: payload.to_string(),
                    outcome: outcome.to_string(),
                    sent: sent.parse().unwrap(),
                    answered: answered.parse().unwrap(),
                })
            }
            ["got", id, payload] => {
                delivered.insert((id.to_string(), payload.to_string()));
            }
            ["acked", id, payload] => acked.push((id.to_string(), payload.to_string())),
            _ => {}
        }
    }
    let answered: usize = writes.values().map(Vec::len).sum();
    assert!(answered > 0 && !acked.is_empty(), "a race happened");
    eprintln!(
        "{answered} schedules answered, {} acks, {} lines",
        acked.len(),
        lines.len()
    );
    // The last phase, on the keyspace the kills left: `z0` created then replaced; `z1` with
    // an hour's hold-off (of a kind of its own, so the race's jobs left due are not in the
    // way) delivered, acked, then scheduled again: held off. Recorded as a child's lines are.
    let last: [&str; 2] = ["z0", "z1"];
    runtime().block_on(async {
        let q = JobQueue::builder().redis(&url, "race").await.unwrap();
        let replace = JobOptions::new().dedup(Dedup::Replace);
        let held_kind = JobOptions::kind("last").dedup(Dedup::HoldOff(HOUR));
        let steps: [(&str, Duration, &str, &JobOptions, &str); 4] = [
            ("z0", HOUR, "last.0.0.k", &JobOptions::new(), "c"),
            ("z0", HOUR, "last.0.1.r", &replace, "r"),
            ("z1", Duration::ZERO, "last.0.2.h", &held_kind, "c"),
            ("z1", Duration::ZERO, "last.0.3.h", &held_kind, "h"),
        ];
        for (n, (id, when, payload, options, expect)) in steps.into_iter().enumerate() {
            let sent = nanos(SystemTime::now());
            let outcome = match q.schedule_with(id, when, payload, options).await.unwrap() {
                Scheduled::Created => "c",
                Scheduled::Replaced => "r",
                Scheduled::Exists => "e",
                Scheduled::HeldOff { .. } => "h",
                other => panic!("an outcome this test does not know: {other:?}"),
            };
            assert_eq!(outcome, expect, "last phase: {id} {payload}");
            writes.entry(id.to_owned()).or_default().push(Write {
                payload: payload.to_owned(),
                outcome: outcome.to_owned(),
                sent,
                answered: nanos(SystemTime::now()),
            });
            if n == 2 {
                let d = next(&mut q.consume_kind("last")).await;
                assert_eq!((d.id(), d.payload()), ("z1", payload.as_bytes()));
                delivered.insert((id.to_owned(), payload.to_owned()));
                assert!(d.ack().await.unwrap(), "z1 acked");
                acked.push((id.to_owned(), payload.to_owned()));
            }
        }
        q.close().await.unwrap();
    });
    let outcomes: HashSet<&str> = writes
        .values()
        .flatten()
        .map(|w| w.outcome.as_str())
        .collect();
    assert!(
        outcomes.contains("r") && outcomes.contains("h"),
        "Replaced and HeldOff answered: {outcomes:?}"
    );
    let held: HashMap<String, String> = server
        .cli(&["HGETALL", "{race}:held"])
        .lines()
        .collect::<Vec<_>>()
        .chunks(2)
        .map(|kv| (kv[0].to_owned(), kv[1].to_owned()))
        .collect();
    assert!(
        held.contains_key("z1"),
        "the last phase's ack left its tombstone"
    );
    assert_eq!(
        server.cli(&["ZCARD", "{race}:held_until"]),
        held.len().to_string(),
        "each tombstone indexed once"
    );
    runtime().block_on(async {
        let q = JobQueue::builder().redis(&url, "race").await.unwrap();
        let mut live = 0u64;
        // The ids a HoldOff was sent for: the race's `k10`..`k19`, and `z1`.
        let ids = (0..RACED)
            .map(|i| (format!("k{i}"), i >= RACED / 2))
            .chain(last.map(|id| (id.to_owned(), id == "z1")));
        for (id, held_off) in ids {
            let none = Vec::new();
            let ws = writes.get(&id).unwrap_or(&none);
            if let Some(job) = q.get(&id).await.unwrap() {
                live += 1;
                assert!(!held.contains_key(&id), "{id}: a job and a tombstone");
                let payload = std::str::from_utf8(job.payload()).unwrap();
                // Written by an answered schedule, or one in flight when its process died.
                if let Some(w) = ws.iter().find(|w| w.payload == payload) {
                    assert!(
                        matches!(w.outcome.as_str(), "c" | "r"),
                        "{id} holds {payload}, answered {}",
                        w.outcome
                    );
                    for later in ws.iter().filter(|l| l.sent > w.answered) {
                        assert!(
                            !matches!(later.outcome.as_str(), "c" | "r"),
                            "{id} holds {payload}, but {} was {} after it was answered",
                            later.payload,
                            later.outcome
                        );
                    }
                }
            }
            if let Some(until) = held.get(&id) {
                assert!(held_off, "{id}: a tombstone of an id never held off");
                // Checked against deliveries, not acks: a kill can cut an ack after its
                // script wrote the tombstone but before its process printed `acked`, while
                // a delivery is printed before its ack is sent.
                let by_ack = delivered
                    .iter()
                    .any(|(d, payload)| *d == id && payload.ends_with(".h"));
                assert!(
                    by_ack,
                    "{id}: a tombstone until {until} without a held-off delivery"
                );
            }
        }
        for (id, payload) in &acked {
            if payload.ends_with(".h") {
                let until = held
                    .get(id)
                    .unwrap_or_else(|| panic!("{id}: {payload} acked without its tombstone"));
                assert!(
                    q.get(id).await.unwrap().is_none(),
                    "{id}: stored after its hold-off"
                );
                assert!(
                    until.parse::<u64>().unwrap() > nanos(SystemTime::now()),
                    "{id}: an hour's hold-off"
                );
            }
        }
        let counts = q.counts().await.unwrap();
        assert_eq!(counts.pending + counts.running + counts.dead, live);
        let mut listed = HashSet::new();
        for state in [JobState::Pending, JobState::Running, JobState::Dead] {
            let page = q.list(state, ListOptions::new().limit(100)).await.unwrap();
            for job in page.jobs() {
                assert!(
                    listed.insert(job.id().to_owned()),
                    "{} listed twice",
                    job.id()
                );
            }
        }
        assert_eq!(listed.len() as u64, live, "each job listed once");
        q.close().await.unwrap();
    });
}

/// On a 3-master cluster, a queue in 3 partitions: Replace and HoldOff on ids of every
/// partition (each script's keys, tombstones included, in its partition's slot).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_modes_work_on_every_partition_of_a_cluster() {
    const IDS: usize = 30;
    let cluster = crate::support::cluster::RedisCluster::start();
    let q = JobQueue::builder()
        .partitions(3)
        .redis_cluster(&cluster.nodes, "orders")
        .await
        .unwrap();
    let replace = JobOptions::new().dedup(Dedup::Replace);
    for i in 0..IDS {
        q.schedule(&format!("r{i}"), HOUR, "old").await.unwrap();
    }
    let later = SystemTime::now() + 2 * HOUR;
    let jobs = (0..IDS).map(|i| (format!("r{i}"), later, "new"));
    let replaced = q.schedule_many_with(jobs, &replace).await.unwrap();
    assert!(
        replaced.iter().all(|s| *s == Scheduled::Replaced),
        "{replaced:?}"
    );
    let jobs = (0..IDS).map(|i| (format!("h{i}"), Duration::ZERO, "p"));
    q.schedule_many_with(jobs, &hold_off(HOUR)).await.unwrap();
    let mut consumer = q.consume();
    for _ in 0..IDS {
        let d = next(&mut consumer).await;
        assert!(d.id().starts_with('h'));
        assert!(d.ack().await.unwrap());
    }
    for i in 0..IDS {
        let job = q.get(&format!("r{i}")).await.unwrap().unwrap();
        assert_eq!((job.run_at(), job.payload()), (later, &b"new"[..]));
        assert!(matches!(
            q.schedule(&format!("h{i}"), HOUR, "p").await.unwrap(),
            Scheduled::HeldOff { .. }
        ));
    }
    assert_eq!(q.pending().await.unwrap(), IDS as u64);
    q.close().await.unwrap();
}
