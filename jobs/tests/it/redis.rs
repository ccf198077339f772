//! The behavioural suite on Redis (feature `redis`), each test on a `redis-server` of its own.

run_shared_suite!(crate::support::redis::harness());

mod dedup;
mod failover;
mod fold;
mod keys;
mod outage;
mod recurring;
mod security;
mod successor;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

use wheel_jobs::{Delivery, JobOptions, JobQueue, JobState, Recurrence, Scheduled};

use crate::support::redis::{RedisServer, DURABLE};
use crate::support::{ms, next, spawn_reporting_worker};

async fn queue(server: &RedisServer, configure: impl FnOnce(&mut wheel_jobs::Builder)) -> JobQueue {
    let mut builder = JobQueue::builder();
    configure(&mut builder);
    builder
        .redis(&server.url(), "orders")
        .await
        .expect("open on redis")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_queues_compete_and_each_job_is_acked_once() {
    const JOBS: usize = 10_000;
    let server = RedisServer::start();
    let (a, b) = (queue(&server, |_| {}).await, queue(&server, |_| {}).await);
    let jobs = (0..JOBS).map(|i| (format!("job-{i}"), Duration::ZERO, "p"));
    assert!(a
        .schedule_many(jobs)
        .await
        .unwrap()
        .iter()
        .all(|s| *s == Scheduled::Created));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(char, String)>();
    let mut workers = Vec::new();
    for (name, q) in [('a', a.clone()), ('b', b.clone())] {
        let tx = tx.clone();
        workers.push(tokio::spawn(async move {
            q.run(32, move |d| {
                let tx = tx.clone();
                async move {
                    tx.send((name, d.id().to_owned())).unwrap();
                    Ok::<(), String>(())
                }
            })
            .await
        }));
    }
    let mut seen = HashMap::new();
    let mut by = HashMap::new();
    for _ in 0..JOBS {
        let (who, id) = rx.recv().await.unwrap();
        *seen.entry(id).or_insert(0) += 1;
        *by.entry(who).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), JOBS, "each job once");
    assert_eq!(by.len(), 2, "both consumers took part: {by:?}");
    drain_and_close(&a, &b, workers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_consumers_jobs_go_to_the_other_after_the_lease() {
    let server = RedisServer::start();
    let a = queue(&server, |b| {
        b.lease(ms(200));
    })
    .await;
    let b = queue(&server, |_| {}).await;
    let ids: Vec<String> = (0..5).map(|i| format!("job-{i}")).collect();
    for id in &ids {
        a.schedule(id, Duration::ZERO, "p").await.unwrap();
    }
    let mut first = a.consume();
    let mut held: Vec<Delivery> = Vec::new();
    for _ in 0..5 {
        held.push(next(&mut first).await);
    }
    drop(first); // the consumer is gone; its five leases run out
    let mut other = b.consume();
    let mut got = HashSet::new();
    for _ in 0..5 {
        let d = next(&mut other).await;
        assert_eq!(d.attempt(), 2, "redelivered after the lease");
        got.insert(d.id().to_owned());
        assert!(d.ack().await.unwrap());
    }
    assert_eq!(got, ids.iter().cloned().collect());
    for late in held {
        assert!(
            !late.ack().await.unwrap(),
            "a late ack from the dropped consumer changes nothing"
        );
    }
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_schedules_survive_a_redis_kill_9_and_workers_resume() {
    let mut server = RedisServer::start_with(&DURABLE);
    let q = queue(&server, |_| {}).await;
    // A worker that runs across the crash.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let worker = spawn_reporting_worker(q.clone(), 8, tx);
    let mut acknowledged = Vec::new();
    for i in 0..200 {
        let id = format!("before-{i}");
        q.schedule(&id, Duration::from_secs(3600), "p")
            .await
            .unwrap();
        acknowledged.push(id);
    }
    server.kill(); // SIGKILL
    let err = q
        .schedule("while-down", Duration::ZERO, "p")
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err}");
    server.restart();
    // The connection manager reconnects by itself; calls fail as unavailable until then.
    let mut tries = 0;
    loop {
        match q.get("before-0").await {
            Ok(info) => {
                assert!(info.is_some());
                break;
            }
            Err(err) if err.is_unavailable() && tries < 1000 => {
                tries += 1;
                tokio::time::sleep(ms(10)).await;
            }
            Err(err) => panic!("{err}"),
        }
    }
    for id in &acknowledged {
        assert!(
            q.get(id).await.unwrap().is_some(),
            "{id} was acknowledged, then lost"
        );
        assert!(q.reschedule(id, Duration::ZERO).await.unwrap());
    }
    // The worker that lived through the crash resumes by itself and runs each job once.
    let mut delivered = HashSet::new();
    for _ in 0..acknowledged.len() {
        let id = rx.recv().await.unwrap();
        assert!(id.starts_with("before-"), "{id}");
        assert!(delivered.insert(id));
    }
    while q.running().await.unwrap() > 0 {
        tokio::time::sleep(ms(5)).await;
    }
    assert_eq!(q.pending().await.unwrap(), 0);
    q.close().await.unwrap();
    worker.await.unwrap().unwrap();
}

/// The whole suite again with each queue split into 3 partitions on one server.
mod partitioned {
    run_shared_suite!(crate::support::redis::partitioned());
}

/// The whole suite again, partitioned, as a user limited by ACL to what a queue needs.
mod acl {
    run_shared_suite!(crate::support::redis::acl_partitioned());
}

/// The `keys` group on one partition as a user limited by ACL: every command the gates'
/// scripts send is one the queue's ACL (`guide/redis.md`) allows.
mod acl_single {
    run_keys_suite!(crate::support::redis::acl_single());
}

/// A queue in 3 partitions on a 3-master cluster: the partitions land on different nodes,
/// and two competing queues deliver every job exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_queue_works_across_cluster_nodes() {
    const JOBS: usize = 3_000;
    let cluster = crate::support::cluster::RedisCluster::start();
    let open = || async {
        JobQueue::builder()
            .partitions(3)
            .lease(ms(500))
            .redis_cluster(&cluster.nodes, "orders")
            .await
            .unwrap()
    };
    let (a, b) = (open().await, open().await);
    let jobs = (0..JOBS).map(|i| (format!("job-{i}"), ms((i % 50) as u64), "p"));
    assert!(a
        .schedule_many(jobs)
        .await
        .unwrap()
        .iter()
        .all(|s| *s == Scheduled::Created));
    assert_eq!(b.pending().await.unwrap(), JOBS as u64);
    // The three partitions' slots are spread over the nodes.
    let mut nodes_used = HashSet::new();
    for i in 0..3 {
        let out = std::process::Command::new("redis-cli")
            .args([
                "-c",
                "-u",
                &cluster.nodes[0],
                "cluster",
                "keyslot",
                &format!("{{orders:{i}}}:due"),
            ])
            .output()
            .unwrap();
        let slot: u16 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        nodes_used.insert(slot * 3 / 16384); // redis-cli splits the slots in three equal ranges
    }
    assert!(nodes_used.len() > 1, "partitions on more than one node");

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let mut workers = Vec::new();
    for q in [a.clone(), b.clone()] {
        workers.push(spawn_reporting_worker(q, 16, tx.clone()));
    }
    let mut seen = HashMap::new();
    for _ in 0..JOBS {
        *seen.entry(rx.recv().await.unwrap()).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), JOBS, "each job once");
    drain_and_close(&a, &b, workers).await;
}

/// The client's clock does not decide what is due. Under a paused tokio clock, which jumps
/// ahead whenever the runtime idles, the consumer's wheel timer keeps firing "early" by the
/// wall clock; every claim still goes by the server's `TIME`, so the job comes no earlier
/// than its run_at (`next` asserts it), while the client's clock ran far ahead.
#[tokio::test(start_paused = true)]
async fn a_skewed_client_clock_still_delivers_by_the_server_time() {
    let server = RedisServer::start();
    let q = queue(&server, |b| {
        b.redis_timeout(None);
    })
    .await;
    let client_start = tokio::time::Instant::now();
    q.schedule("job", ms(200), "p").await.unwrap();
    let run_at = q.get("job").await.unwrap().unwrap().run_at();
    let mut consumer = q.consume();
    let d = next(&mut consumer).await;
    assert_eq!((d.id(), d.run_at()), ("job", run_at));
    let client_elapsed = tokio::time::Instant::now() - client_start;
    assert!(
        client_elapsed >= ms(200),
        "the client's clock reached the due time too ({client_elapsed:?})"
    );
    assert!(d.ack().await.unwrap());
    q.close().await.unwrap();
}

/// A queue opened with another partition count than its first process used would route ids
/// to other keys and see another, empty queue: the open is refused instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_with_another_partition_count_is_refused() {
    let server = RedisServer::start();
    let open = |n: usize| {
        let url = server.url();
        async move {
            JobQueue::builder()
                .partitions(n)
                .redis(&url, "orders")
                .await
        }
    };
    // A name that is another queue's partition would share its keys: refused.
    for name in ["orders:0", "orders:12"] {
        let err = JobQueue::builder()
            .redis(&server.url(), name)
            .await
            .expect_err("a partition's name");
        assert!(err.is_invalid_config(), "{name}: {err}");
    }
    let app = open(3).await.unwrap();
    app.schedule("a", Duration::from_secs(3600), "")
        .await
        .unwrap();
    for n in [1, 2] {
        let err = open(n).await.expect_err("another partition count");
        assert!(err.is_invalid_config(), "{err}");
        assert!(
            err.to_string().contains("has 3 partition(s)")
                && err.to_string().contains("partitions(3)"),
            "{err}"
        );
    }
    let again = open(3).await.unwrap();
    assert_eq!(again.pending().await.unwrap(), 1);
    again.close().await.unwrap();
    app.close().await.unwrap();
}

/// One partition failing its claims (here its due index is not a sorted set: a WRONGTYPE
/// error, standing for a node that is down) must not cost the leases already taken on the
/// others: every job of the healthy partitions is delivered, on its first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_partition_does_not_cost_the_jobs_of_the_others() {
    const JOBS: usize = 30;
    let server = RedisServer::start();
    let q = JobQueue::builder()
        .partitions(3)
        .redis(&server.url(), "q")
        .await
        .unwrap();
    for i in 0..JOBS {
        q.schedule(&format!("job-{i}"), Duration::ZERO, "p")
            .await
            .unwrap();
    }
    let broken: usize = server.cli(&["ZCARD", "{q:2}:due"]).parse().unwrap();
    assert!(broken > 0 && broken < JOBS, "jobs on every side: {broken}");
    server.cli(&["DEL", "{q:2}:due"]);
    server.cli(&["SET", "{q:2}:due", "x"]);
    let healthy = JOBS - broken;
    let mut consumer = q.consume();
    let mut delivered = HashSet::new();
    let mut errors = 0;
    // With the default 30 s lease a lost lease would hold its job past this bound.
    tokio::time::timeout(Duration::from_secs(20), async {
        while delivered.len() < healthy {
            match consumer.next().await.expect("open queue") {
                Ok(d) => {
                    assert_eq!(d.attempt(), 1, "{} delivered on its first claim", d.id());
                    assert!(delivered.insert(d.id().to_owned()), "{} twice", d.id());
                    assert!(d.ack().await.unwrap());
                }
                Err(err) => {
                    assert!(err.is_storage(), "{err}");
                    errors += 1;
                }
            }
        }
    })
    .await
    .expect("every job of the healthy partitions delivered");
    assert_eq!(delivered.len(), healthy);
    eprintln!("{errors} claims failed on the broken partition alone");
    q.close().await.unwrap();
}

/// A server busy with a long script answers BUSY: a transient condition (`is_unavailable`),
/// so `run` backs off and carries on rather than stopping for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_server_is_unavailable_and_run_resumes() {
    let server = RedisServer::start_with(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--busy-reply-threshold",
        "100",
    ]);
    let q = queue(&server, |_| {}).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut run = spawn_reporting_worker(q.clone(), 4, tx);
    // Due while the server is busy: the worker's claim meets BUSY.
    q.schedule("job", ms(300), "p").await.unwrap();
    let mut busy = std::process::Command::new("redis-cli")
        .arg("-s")
        .arg(server.dir.path().join("redis.sock"))
        .args([
            "EVAL",
            "local s=tonumber(redis.call('TIME')[1]) while tonumber(redis.call('TIME')[1]) < s+2 do end return 1",
            "0",
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let err = loop {
        match q.get("job").await {
            Err(err) => break err,
            Ok(_) => tokio::time::sleep(ms(10)).await,
        }
    };
    assert!(err.is_unavailable(), "BUSY is transient: {err}");
    tokio::select! {
        got = rx.recv() => assert_eq!(got.as_deref(), Some("job")),
        stopped = &mut run => panic!("run stopped: {stopped:?}"),
        _ = tokio::time::sleep(Duration::from_secs(30)) => panic!("never delivered"),
    }
    busy.wait().unwrap();
    q.close().await.unwrap();
    run.await.unwrap().unwrap();
}

/// `min_replicas` covers a series' changes as it covers a schedule's: on a server without
/// replicas, setting or cancelling a series fails `is_unavailable` (the change may or may
/// not be on the primary: unconfirmed), like a schedule, while reads answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn series_changes_wait_for_min_replicas() {
    let server = RedisServer::start();
    let q = queue(&server, |b| {
        b.min_replicas(1, ms(20));
    })
    .await;
    let err = q.schedule("job", ms(0), "p").await.unwrap_err();
    assert!(err.is_unavailable(), "{err}");
    let every = Recurrence::every(Duration::from_secs(60)).unwrap();
    let err = q.schedule_recurring("s", every, "p").await.unwrap_err();
    assert!(err.is_unavailable(), "{err}");
    let err = q.cancel_recurring("s").await.unwrap_err();
    assert!(err.is_unavailable(), "{err}");
    q.list_recurring().await.unwrap();
    q.close().await.unwrap();
}

/// With `min_replicas` and the only replica connected but not acknowledging (stopped, as
/// during its first full sync or right after a failover), a schedule fails
/// `is_unavailable` saying how many replicas acknowledged of how many were asked, once the
/// `WAIT` timeout has run out: the client waits for the `WAIT` (its bound is
/// `redis_timeout` plus that timeout) instead of giving up at `redis_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_does_not_acknowledge_is_reported_with_the_count() {
    let primary = RedisServer::on_port(&["--save", "", "--appendonly", "no"]);
    let port = primary.port.expect("a tcp port").to_string();
    let replica = RedisServer::start_with(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--replicaof",
        "127.0.0.1",
        &port,
    ]);
    let in_sync = std::time::Instant::now();
    while !primary
        .cli(&["INFO", "replication"])
        .contains("state=online")
    {
        assert!(
            in_sync.elapsed() < Duration::from_secs(30),
            "the replica never synced"
        );
        tokio::time::sleep(ms(20)).await;
    }
    let wait = ms(1500);
    let q = queue(&primary, |b| {
        b.redis_timeout(Some(ms(500))).min_replicas(1, wait);
    })
    .await;
    assert_eq!(
        q.schedule("acknowledged", ms(0), "p").await.unwrap(),
        Scheduled::Created
    );
    replica.signal("-STOP");
    let started = std::time::Instant::now();
    let err = q.schedule("unconfirmed", ms(0), "p").await.unwrap_err();
    let waited = started.elapsed();
    replica.signal("-CONT");
    assert!(err.is_unavailable(), "{err}");
    assert!(
        err.to_string()
            .contains("0 of the 1 replicas asked for acknowledged it within 1.5s"),
        "{err}"
    );
    // The server's WAIT answered after its whole timeout, past redis_timeout.
    assert!(waited >= wait, "{waited:?}: {err}");
    q.close().await.unwrap();
}

/// A queue on `server` with the series `s` every 100 ms; its first occurrence's time.
async fn series_every_100ms(server: &RedisServer) -> (JobQueue, std::time::SystemTime) {
    let q = queue(server, |_| {}).await;
    q.schedule_recurring("s", Recurrence::every(ms(100)).unwrap(), "p")
        .await
        .unwrap();
    let head = q.list_recurring().await.unwrap()[0].next_run().unwrap();
    (q, head)
}

/// Runs a series script (`kinds.lua`, `series.lua`, then `body`) on the queue `orders` by `EVAL`, as
/// another process of this or an older version would: `keys` named without their
/// `{orders}:` prefix. Its reply as redis-cli prints it.
fn eval_series_script(server: &RedisServer, body: &str, keys: &[&str], args: &[&str]) -> String {
    let script = format!(
        "{}{}{body}",
        include_str!("../../src/backend/redis/lua/kinds.lua"),
        include_str!("../../src/backend/redis/lua/series.lua")
    );
    let keys: Vec<String> = keys.iter().map(|k| format!("{{orders}}:{k}")).collect();
    let count = keys.len().to_string();
    let mut line = vec!["EVAL", &script, &count];
    line.extend(keys.iter().map(String::as_str));
    line.extend(args);
    server.cli(&line)
}

/// One claim of up to 10 jobs (lease 30 s, 25 attempts) on the queue `orders` by `EVAL` of
/// its script, as a consumer would send it; its reply as redis-cli prints it.
fn eval_claim(server: &RedisServer) -> String {
    let claim = concat!(
        include_str!("../../src/backend/redis/lua/gates.lua"),
        include_str!("../../src/backend/redis/lua/held.lua"),
        include_str!("../../src/backend/redis/lua/next.lua"),
        include_str!("../../src/backend/redis/lua/acks.lua"),
        include_str!("../../src/backend/redis/lua/claim.lua")
    );
    let keys = [
        "meta",
        "payload",
        "due",
        "counts",
        "seq",
        "dead",
        "series",
        "series_payload",
        "series_next",
        "errors",
        "running",
        "levels",
        "held",
        "held_until",
        "next",
        "next_payload",
        "gate_timers",
    ];
    // The plain spec's tail (`scripts::spec_tail`): priority 0, 25 attempts, lease 30 s,
    // backoff 1 s to 1 h, kind "". Every kind ("*").
    let plain = ":0:25:30000000000:1000000000:3600000000000\x1f";
    eval_series_script(
        server,
        claim,
        &keys,
        &["10", plain, "*", "{orders}:wake", "PUBLISH"],
    )
}

/// `recurring_set.lua` handed a list computed before a claim moved the series (its Rust
/// half reads the server's time a round trip earlier): the entry the claim delivered (acked
/// since, so its id is free) and one already past are not the new head; the first entry
/// after both the last delivery and the script's own time is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_list_never_makes_a_delivered_occurrence_again() {
    let server = RedisServer::start();
    let (q, _) = series_every_100ms(&server).await;
    let mut consumer = q.consume();
    let d = next(&mut consumer).await;
    let ran = d.run_at();
    assert!(d.ack().await.unwrap());
    drop(consumer);
    // So that the script's clock is past `ran + 5 ms`.
    tokio::time::sleep(ms(10)).await;
    let entry = |at: std::time::SystemTime| {
        let ns = at.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        format!("{ns}={}", jiff::Timestamp::try_from(at).unwrap())
    };
    let hour = Duration::from_secs(3600);
    let list = [ran, ran + ms(5), ran + hour, ran + 2 * hour]
        .map(entry)
        .join(",");
    let set = include_str!("../../src/backend/redis/lua/recurring_set.lua");
    let keys = [
        "meta",
        "payload",
        "due",
        "counts",
        "series",
        "series_payload",
        "series_next",
        "levels",
        "seq",
    ];
    let args = [
        "s",
        "every 50ms",
        "1",
        "p",
        &list,
        "{orders}:wake",
        "PUBLISH",
    ];
    eval_series_script(&server, set, &keys, &args);
    let info = &q.list_recurring().await.unwrap()[0];
    assert_eq!(info.last_run(), Some(ran));
    assert_eq!(info.next_run(), Some(ran + hour));
    assert_eq!(q.pending().await.unwrap(), 1);
    q.close().await.unwrap();
}

/// One call of `claim.lua` after a downtime under `Latest`: the head is superseded by the
/// latest occurrence due, and that one is leased by the same call (left pending, it could
/// be superseded again by every claim that comes more than an interval after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_claim_runs_the_occurrence_that_supersedes_the_head() {
    let server = RedisServer::start();
    let (q, head) = series_every_100ms(&server).await;
    q.close().await.unwrap();
    tokio::time::sleep(ms(350)).await;
    let reply = eval_claim(&server);
    let leased: Vec<&str> = reply.lines().filter(|l| l.starts_with("s@")).collect();
    assert_eq!(leased.len(), 1, "{reply}");
    let at: jiff::Timestamp = leased[0]["s@".len()..].parse().unwrap();
    let at = std::time::SystemTime::from(at);
    // At least 250 ms after the head: the head and two more were due.
    assert!(
        at >= head + 2 * ms(100),
        "the latest due, not the head {head:?}: {reply}"
    );
    let q = queue(&server, |_| {}).await;
    assert_eq!(
        (q.pending().await.unwrap(), q.running().await.unwrap()),
        (1, 1)
    );
    let info = &q.list_recurring().await.unwrap()[0];
    assert_eq!(info.last_run(), Some(at));
    assert_eq!(info.next_run(), Some(at + ms(100)));
    q.close().await.unwrap();
}

/// A series head superseded in a claim by the next occurrence, whose job a user scheduled by
/// hand and which the same claim's batch holds under its own entry too (due before the head
/// or with it): leased once, not twice, and the counts stay true.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_made_superseding_occurrence_is_leased_once_in_one_claim() {
    for hand_first in [true, false] {
        let server = RedisServer::start();
        let q = queue(&server, |_| {}).await;
        let every = Recurrence::every(Duration::from_secs(1)).unwrap();
        q.schedule_recurring("s", every, "p").await.unwrap();
        let head = q.list_recurring().await.unwrap()[0].next_run().unwrap();
        let next = head + Duration::from_secs(1);
        let id = format!("s@{}", jiff::Timestamp::try_from(next).unwrap());
        let at = if hand_first { head - ms(500) } else { next };
        q.schedule(&id, at, "hand").await.unwrap();
        q.close().await.unwrap();
        // Past the head and `next`, well before the one after (2 s after the head).
        let wait = next + ms(300);
        tokio::time::sleep(wait.duration_since(SystemTime::now()).unwrap_or_default()).await;
        let reply = eval_claim(&server);
        let leased: Vec<&str> = reply.lines().filter(|l| l.starts_with("s@")).collect();
        assert_eq!(leased, [id.as_str()], "hand first {hand_first}: {reply}");
        let q = queue(&server, |_| {}).await;
        // The hand-made job running; the occurrence after it pending, as the series' head.
        assert_eq!(
            (q.pending().await.unwrap(), q.running().await.unwrap()),
            (1, 1),
            "hand first {hand_first}: {reply}"
        );
        let info = &q.list_recurring().await.unwrap()[0];
        assert_eq!(info.next_run(), Some(next + Duration::from_secs(1)));
        q.close().await.unwrap();
    }
}

/// A series whose stored recurrence no longer parses (here a sub-millisecond interval an
/// earlier version stored) with its list of next occurrences run out: the claim's note
/// cannot be filled, so the series lets go of its pending occurrence, which runs as an
/// ordinary job, instead of staying first in line undelivered for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_recurrence_that_no_longer_parses_lets_its_occurrence_run() {
    let server = RedisServer::start();
    let (q, head) = series_every_100ms(&server).await;
    let record = server.cli(&["HGET", "{orders}:series", "s"]);
    let (kept, _) = record.rsplit_once('|').unwrap();
    server.cli(&[
        "HSET",
        "{orders}:series",
        "s",
        &format!("{kept}|every 500us"),
    ]);
    server.cli(&["HSET", "{orders}:series_next", "s", ""]);
    assert!(q.list_recurring().await.unwrap().is_empty());
    let mut consumer = q.consume();
    let d = tokio::time::timeout(Duration::from_secs(60), next(&mut consumer))
        .await
        .expect("the occurrence never ran");
    assert_eq!(d.run_at(), head);
    assert!(d.ack().await.unwrap());
    assert_eq!(q.pending().await.unwrap(), 0);
    assert!(q.cancel_recurring("s").await.unwrap());
    q.close().await.unwrap();
}

/// `CatchUp::All` with a backlog far longer than a series' stored list (2 s of an
/// occurrence a millisecond): every missed occurrence runs, in order, while the list the
/// scripts read and rewrite at each claim stays bounded (about 64 occurrences), not the
/// backlog's length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_backlog_under_all_runs_in_order_with_a_bounded_list() {
    let server = RedisServer::start();
    let q = queue(&server, |_| {}).await;
    let all = wheel_jobs::CatchUp::All { max: 1_000_000 };
    q.schedule_recurring_with("b", Recurrence::every(ms(1)).unwrap(), "p", all)
        .await
        .unwrap();
    let head = q.list_recurring().await.unwrap()[0].next_run().unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut consumer = q.consume();
    for i in 0..300 {
        let d = tokio::time::timeout(Duration::from_secs(60), next(&mut consumer))
            .await
            .unwrap_or_else(|_| panic!("stalled after {i} occurrences"));
        assert_eq!(d.run_at(), head + i * ms(1), "{}", d.id());
        assert!(d.ack().await.unwrap());
    }
    let listed = server.cli(&["HGET", "{orders}:series_next", "b"]);
    let entries = listed.matches('=').count();
    assert!(entries <= 80, "{entries} occurrences stored");
    drop(consumer);
    q.close().await.unwrap();
}

/// A cluster node that stops answering (SIGSTOP, like a network partition) fails the calls
/// on its partitions with `is_unavailable` after `redis_timeout`, instead of hanging them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_cluster_node_times_out_as_unavailable() {
    let cluster = crate::support::cluster::RedisCluster::start();
    let q = JobQueue::builder()
        .partitions(3)
        .redis_timeout(Some(ms(300)))
        .redis_cluster(&cluster.nodes, "orders")
        .await
        .unwrap();
    for i in 0..30 {
        q.schedule(&format!("job-{i}"), Duration::from_secs(3600), "p")
            .await
            .unwrap();
    }
    cluster.signal(1, "-STOP");
    // `pending` reads every partition; the 3 partitions span more than one node (checked in
    // `a_partitioned_queue_works_across_cluster_nodes`), so some read meets the frozen one.
    // The bound only guards against the hang this test is about.
    let outcome = tokio::time::timeout(Duration::from_secs(30), q.pending()).await;
    cluster.signal(1, "-CONT");
    let err = outcome
        .expect("the call on the frozen node hangs")
        .expect_err("a partition is on the frozen node");
    assert!(err.is_unavailable(), "{err}");
}

/// Script calls the server ran so far (`EVAL` and `EVALSHA`).
fn script_calls(server: &RedisServer) -> u64 {
    server
        .cli(&["INFO", "commandstats"])
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// A big `schedule_many` is split into script calls of at most 512 jobs, so no single
/// script blocks the server for the whole load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_many_is_split_into_bounded_script_calls() {
    const N: usize = 1_300;
    let server = RedisServer::start();
    let q = queue(&server, |_| {}).await;
    let before = script_calls(&server);
    let jobs = (0..N).map(|i| (format!("job-{i}"), Duration::from_secs(3600), "p"));
    assert_eq!(q.schedule_many(jobs).await.unwrap().len(), N);
    let calls = script_calls(&server) - before;
    assert!(calls >= N.div_ceil(512) as u64, "{calls} script calls");
    assert_eq!(q.pending().await.unwrap(), N as u64);
    q.close().await.unwrap();
}

/// A purge of many dead jobs deletes them in script calls of at most 512 jobs, not one
/// script over the whole batch the queue asks for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_dead_is_split_into_bounded_script_calls() {
    const N: usize = 1_300;
    let server = RedisServer::start();
    let q = queue(&server, |b| {
        b.max_attempts(1).prefetch(N);
    })
    .await;
    let jobs = (0..N).map(|i| (format!("job-{i}"), Duration::ZERO, "p"));
    q.schedule_many(jobs).await.unwrap();
    let mut consumer = q.consume();
    for _ in 0..N {
        assert!(next(&mut consumer).await.fail(ms(0), "no").await.unwrap());
    }
    drop(consumer);
    assert_eq!(q.counts().await.unwrap().dead, N as u64);
    // Loads the script, so that the calls counted below are the purge's own.
    assert!(!q.remove_dead("nobody").await.unwrap());
    let before = script_calls(&server);
    assert_eq!(q.purge_dead().await.unwrap(), N as u64);
    let calls = script_calls(&server) - before;
    assert!(calls >= N.div_ceil(512) as u64, "{calls} script calls");
    assert_eq!(q.counts().await.unwrap().dead, 0);
    q.close().await.unwrap();
}

/// A claim leases at most 512 jobs per script call whatever the prefetch: a claim of
/// thousands would block the server, and a reply that outlasts the timeout would strand
/// every lease it took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_leases_a_bounded_batch_per_script_call() {
    const N: usize = 1_300;
    let server = RedisServer::start();
    let q = queue(&server, |b| {
        b.prefetch(5_000);
    })
    .await;
    let jobs = (0..N).map(|i| (format!("job-{i}"), Duration::ZERO, "p"));
    q.schedule_many(jobs).await.unwrap();
    let mut consumer = q.consume();
    let first = next(&mut consumer).await;
    assert_eq!(
        q.running().await.unwrap(),
        512,
        "one claim, one script call, 512 leases"
    );
    assert!(first.ack().await.unwrap());
    let mut delivered = 1;
    while delivered < N {
        assert!(next(&mut consumer).await.ack().await.unwrap());
        delivered += 1;
    }
    assert_eq!(q.pending().await.unwrap() + q.running().await.unwrap(), 0);
    q.close().await.unwrap();
}

/// Waits until the queue `a` shares with `b` holds nothing pending or running, closes both
/// handles and checks that every worker ended cleanly.
async fn drain_and_close(
    a: &JobQueue,
    b: &JobQueue,
    workers: Vec<tokio::task::JoinHandle<Result<(), wheel_jobs::Error>>>,
) {
    while a.pending().await.unwrap() + a.running().await.unwrap() > 0 {
        tokio::time::sleep(ms(5)).await;
    }
    a.close().await.unwrap();
    b.close().await.unwrap();
    for w in workers {
        w.await.unwrap().unwrap();
    }
}

/// A safety wakeup far beyond any bound below: a consumer that gets a job in time was woken
/// by a notification, not by its safety wakeup.
const NO_SAFETY_WAKEUP: Duration = Duration::from_secs(3600);

/// A notification lost while the wake subscription was down (Redis restarted) must not
/// strand an idle consumer until its safety wakeup: the resubscription wakes it to look
/// again (the Redisson failure, redisson#5575).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_consumer_looks_again_after_its_wake_subscription_reconnects() {
    let mut server = RedisServer::start();
    let consumer = queue(&server, |b| {
        b.safety_wakeup(NO_SAFETY_WAKEUP);
    })
    .await;
    let scheduler = queue(&server, |_| {}).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = spawn_reporting_worker(consumer.clone(), 4, tx);
    // Setup, not a bound: let the worker find nothing and go to sleep, and keep the server
    // down long enough that the subscriber's reconnect backs off past the schedule below.
    tokio::time::sleep(ms(200)).await;
    server.kill();
    tokio::time::sleep(ms(500)).await;
    server.restart();
    // Published before the consumer's process has subscribed again: nobody hears it.
    let mut tries = 0;
    while let Err(err) = scheduler.schedule("job", Duration::ZERO, "p").await {
        assert!(err.is_unavailable() && tries < 1000, "{err}");
        tries += 1;
        tokio::time::sleep(ms(10)).await;
    }
    let got = tokio::time::timeout(Duration::from_secs(60), rx.recv())
        .await
        .expect("the idle consumer waits for its safety wakeup");
    assert_eq!(got.as_deref(), Some("job"));
    consumer.close().await.unwrap();
    scheduler.close().await.unwrap();
    worker.await.unwrap().unwrap();
}

/// On a cluster every partition's wake channel is a sharded channel subscribed on the node
/// that owns its slot, and a job scheduled by another process on any partition, on any node,
/// wakes an idle consumer: it is delivered long before the consumer's safety wakeup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_earlier_job_on_any_cluster_partition_wakes_an_idle_consumer() {
    let cluster = crate::support::cluster::RedisCluster::start();
    let open = |name: &'static str| {
        let nodes = cluster.nodes.clone();
        async move {
            JobQueue::builder()
                .partitions(3)
                .safety_wakeup(NO_SAFETY_WAKEUP)
                .redis_cluster(&nodes, name)
                .await
                .unwrap()
        }
    };
    // One id per partition, found by where a probe queue stores them.
    let probe = open("probe").await;
    for i in 0..30 {
        probe
            .schedule(&format!("job-{i}"), Duration::from_secs(3600), "p")
            .await
            .unwrap();
    }
    let ids: Vec<String> = (0..3)
        .map(|i| {
            let keys = cluster.cli(&["HKEYS", &format!("{{probe:{i}}}:meta")]);
            keys.lines()
                .next()
                .expect("a job in every partition")
                .to_owned()
        })
        .collect();
    probe.close().await.unwrap();

    let consumer = open("orders").await;
    let scheduler = open("orders").await;
    // Each channel is subscribed on its slot's owner (both handles subscribe); the bound
    // only guards against a hang.
    for i in 0..3 {
        let channel = format!("{{orders:{i}}}:wake");
        tokio::time::timeout(Duration::from_secs(30), async {
            while cluster.shard_subscribers(&channel) < 2 {
                tokio::time::sleep(ms(10)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{channel} is not subscribed on its node"));
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = spawn_reporting_worker(consumer.clone(), 4, tx);
    for id in &ids {
        // Setup, not a bound: let the worker find nothing and go to sleep.
        tokio::time::sleep(ms(100)).await;
        scheduler.schedule(id, Duration::ZERO, "p").await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(60), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("{id}: the idle consumer waits for its safety wakeup"));
        assert_eq!(got.as_deref(), Some(id.as_str()));
    }
    consumer.close().await.unwrap();
    scheduler.close().await.unwrap();
    worker.await.unwrap().unwrap();
}

/// A consumer that found nothing due before a job an hour away skips its claims until then
/// (the backend's idle note), unless something changed: a job scheduled since, by another
/// process or this one, voids the note and is delivered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_earlier_job_voids_a_consumers_note_that_nothing_is_due() {
    let server = RedisServer::start();
    let consumer = queue(&server, |b| {
        b.safety_wakeup(NO_SAFETY_WAKEUP);
    })
    .await;
    let elsewhere = queue(&server, |_| {}).await;
    consumer
        .schedule("later", Duration::from_secs(3600), "p")
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = spawn_reporting_worker(consumer.clone(), 4, tx);
    for (who, id) in [(&elsewhere, "from-elsewhere"), (&consumer, "from-here")] {
        // Setup, not a bound: let the worker claim nothing and note "nothing before an hour".
        tokio::time::sleep(ms(200)).await;
        who.schedule(id, Duration::ZERO, "p").await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(60), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("{id}: the consumer trusted its stale note"));
        assert_eq!(got.as_deref(), Some(id));
    }
    assert_eq!(consumer.pending().await.unwrap(), 1, "only `later` is left");
    consumer.close().await.unwrap();
    elsewhere.close().await.unwrap();
    worker.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_from_one_process_stops_the_others_and_its_resume_wakes_them() {
    let server = RedisServer::start();
    let timer = crate::suite::hour_ticks();
    let a = queue(&server, |b| {
        b.timer(timer.clone());
    })
    .await;
    let b = queue(&server, |_| {}).await;
    b.pause().await.unwrap();
    assert!(a.counts().await.unwrap().paused);
    b.schedule("job", Duration::ZERO, "p").await.unwrap();
    // `a`'s consumer claims after the pause (and after the schedule's wake message): it
    // leases nothing and sleeps an hour.
    let waiting = crate::suite::idle_consumer(&a, &timer).await;
    assert_eq!(a.get("job").await.unwrap().unwrap().attempt(), 0);
    b.resume().await.unwrap();
    // Only the resume's wake message can deliver it before the hour is up.
    let woken = tokio::time::timeout(Duration::from_secs(30), waiting).await;
    assert_eq!(
        woken.expect("the resume wakes the other process").unwrap(),
        "job"
    );
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// A queue whose layout hash records another keyspace format (an older one, or none: from
/// before formats were recorded; or one from a later version) is refused at open, and the
/// error names the format found and the one this version reads: nothing is misread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyspace_of_another_format_is_refused_naming_the_format_found() {
    let server = RedisServer::start();
    let q = queue(&server, |_| {}).await;
    q.schedule("job", Duration::from_secs(3600), "p")
        .await
        .unwrap();
    q.close().await.unwrap();
    assert_eq!(server.cli(&["HGET", "{orders}:layout", "format"]), "2");
    // Format 1 is upgraded at open instead (`an_older_keyspace_is_upgraded_and_reads_as_the_plain_spec`).
    for (set, found) in [(Some("0"), "0"), (None, "0"), (Some("3"), "3")] {
        match set {
            Some(format) => server.cli(&["HSET", "{orders}:layout", "format", format]),
            None => server.cli(&["HDEL", "{orders}:layout", "format"]),
        };
        let err = JobQueue::builder()
            .redis(&server.url(), "orders")
            .await
            .expect_err("refused");
        assert!(err.is_storage(), "{err}");
        let text = err.to_string();
        assert!(
            text.contains(&format!("format {found}")) && text.contains("format 2 only"),
            "{text}"
        );
    }
}

/// A queue written by format 1 (no spec stored with its jobs, one due set, counters of
/// all jobs): the open records format 2 (which a process of the older version then refuses,
/// as it refuses every other format), and its jobs read, list, count and run as jobs of the
/// plain spec of the queue being opened (its attempts, its lease), kind "".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_keyspace_is_upgraded_and_reads_as_the_plain_spec() {
    let server = RedisServer::start();
    let now = SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let due_ns = (now.as_nanos() - 1_000_000_000).to_string();
    let due_us = (now.as_micros() - 1_000_000).to_string();
    // What format 1 wrote for a pending job due a second ago and a dead job (keys.rs,
    // schedule.lua and claim.lua of that version).
    for line in [
        vec!["HSET", "{orders}:layout", "partitions", "1", "format", "1"],
        vec!["HSET", "{orders}:meta", "old", &format!("p:0:0:{due_ns}")],
        vec!["HSET", "{orders}:meta", "gone", &format!("d:3:0:{due_ns}")],
        vec!["HSET", "{orders}:payload", "old", "p", "gone", "q"],
        vec!["ZADD", "{orders}:due", &due_us, "old"],
        vec!["ZADD", "{orders}:dead", &due_us, "gone"],
        vec!["HSET", "{orders}:counts", "pending", "1", "dead", "1"],
    ] {
        server.cli(&line);
    }
    let q = queue(&server, |b| {
        b.max_attempts(7).lease(Duration::from_secs(40));
    })
    .await;
    assert_eq!(server.cli(&["HGET", "{orders}:layout", "format"]), "2");
    let old = q.get("old").await.unwrap().expect("the old job");
    assert_eq!(
        (
            old.kind(),
            old.priority(),
            old.max_attempts(),
            old.attempt()
        ),
        ("", 0, 7, 0)
    );
    let gone = q.get("gone").await.unwrap().expect("the old dead job");
    assert_eq!((gone.state(), gone.max_attempts()), (JobState::Dead, 7));
    let counts = q.counts().await.unwrap();
    assert_eq!((counts.pending, counts.dead), (1, 1));
    let plain = counts.kinds.get("").copied().unwrap_or_default();
    assert_eq!(
        (plain.pending, plain.running, plain.dead),
        (1, 0, 1),
        "{counts:?}"
    );
    assert_eq!(counts.kinds.len(), 1, "{counts:?}");
    // Claimed as a job of kind "", by a consumer of every kind and by one of kind "".
    let mut consumer = q.consume_kind("");
    let d = next(&mut consumer).await;
    assert_eq!((d.id(), d.kind(), d.attempt()), ("old", "", 1));
    // Leased for the queue's lease (40 s), as a job of the plain spec.
    let lease_end: f64 = server
        .cli(&["ZSCORE", "{orders}:running", "old"])
        .parse()
        .unwrap();
    let claimed_us = SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as f64;
    assert!(lease_end > claimed_us + 30e6, "{lease_end} {claimed_us}");
    assert!(d.ack().await.unwrap());
    let counts = q.counts().await.unwrap();
    assert_eq!((counts.pending, counts.running, counts.dead), (0, 0, 1));
    q.close().await.unwrap();
}

/// A claim of one kind reads nothing of another kind's: kind b's due set and running set
/// are not even read (`OBJECT IDLETIME` keeps counting), b's expired lease of a job out of
/// its attempts is neither redelivered nor killed; and it takes its own kind's due jobs by
/// priority (highest first), then run_at, then id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_one_kind_touches_no_other_kinds_jobs_and_takes_priorities_first() {
    let server = RedisServer::start();
    let q = queue(&server, |b| {
        b.lease(Duration::from_secs(1));
    })
    .await;
    let b = JobOptions::kind("b").max_attempts(1);
    q.schedule_with("b-held", Duration::ZERO, "p", &b)
        .await
        .unwrap();
    let mut bs = q.consume_kind("b");
    let held = next(&mut bs).await;
    assert_eq!((held.id(), held.attempt()), ("b-held", 1));
    // Leased and let go: its lease ends in a second, with its one attempt spent.
    drop(held);
    drop(bs);
    for i in 0..100 {
        q.schedule_with(&format!("b-{i:03}"), Duration::ZERO, "p", &b)
            .await
            .unwrap();
    }
    let now = SystemTime::now();
    let a = |p: i8| JobOptions::kind("a").priority(p);
    for (id, at, p) in [
        ("a-low", now - Duration::from_secs(3), -1),
        ("a-mid-later", now - Duration::from_secs(1), 0),
        ("a-mid-same-2", now - Duration::from_secs(2), 0),
        ("a-mid-same-1", now - Duration::from_secs(2), 0),
        ("a-high", now, 5),
        ("a-future", now + Duration::from_secs(3600), 9),
    ] {
        q.schedule_with(id, at, "p", &a(p)).await.unwrap();
    }
    // Long enough for b's lease to end and for its keys' idle time to count whole seconds.
    tokio::time::sleep(Duration::from_millis(3200)).await;
    let mut consumer = q.consume_kind("a");
    let mut order = Vec::new();
    for _ in 0..5 {
        let d = next(&mut consumer).await;
        assert_eq!(d.kind(), "a");
        order.push(d.id().to_owned());
        assert!(d.ack().await.unwrap());
    }
    assert_eq!(
        order,
        [
            "a-high",
            "a-mid-same-1",
            "a-mid-same-2",
            "a-mid-later",
            "a-low"
        ]
    );
    for key in ["{orders}:due:0:b", "{orders}:running:b"] {
        let idle: u64 = server.cli(&["OBJECT", "IDLETIME", key]).parse().unwrap();
        assert!(
            idle >= 2,
            "{key} was read by a claim of kind a: idle {idle} s"
        );
    }
    let held = q.get("b-held").await.unwrap().unwrap();
    assert_eq!((held.state(), held.attempt()), (JobState::Running, 1));
    assert_eq!(server.cli(&["ZCARD", "{orders}:due:0:b"]), "100");
    let counts = q.counts().await.unwrap();
    let of = |kind: &str| counts.kinds.get(kind).copied().unwrap_or_default();
    assert_eq!(
        (of("b").pending, of("b").running, of("b").dead),
        (100, 1, 0)
    );
    assert_eq!((of("a").pending, of("a").running), (1, 0));
    // Kind b's own claim kills its expired job by b's own attempts (1), then runs the rest.
    let mut bs = q.consume_kind("b");
    let d = next(&mut bs).await;
    assert_eq!(d.id(), "b-000");
    let counts = q.counts().await.unwrap();
    assert_eq!(counts.kinds["b"].dead, 1, "{counts:?}");
    q.close().await.unwrap();
}

/// Lists read every due set of a state's kinds and merge them: pending jobs in `(run_at,
/// id)` order whatever their priority and kind, a kind's page only its own, across pages by
/// the cursor; running and dead jobs the same by kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_merge_the_levels_and_filter_by_kind() {
    let server = RedisServer::start();
    let q = queue(&server, |_| {}).await;
    let base = SystemTime::now() + Duration::from_secs(3600);
    let at = |s: u64| base + Duration::from_secs(s);
    let jobs = [
        ("a1", 1, "a", 5),
        ("b2", 2, "b", 0),
        ("p3", 3, "", 0),
        ("a4", 4, "a", -3),
        ("b5", 5, "b", 7),
        ("a6", 6, "a", 5),
        ("q7", 7, "", 2),
    ];
    for (id, s, kind, p) in jobs {
        let options = JobOptions::kind(kind).priority(p);
        q.schedule_with(id, at(s), "p", &options).await.unwrap();
    }
    // Every kind, two to a page: run_at order across the seven due sets.
    let mut seen = Vec::new();
    let mut options = wheel_jobs::ListOptions::new();
    options.limit(2);
    loop {
        let page = q.list(JobState::Pending, &options).await.unwrap();
        seen.extend(page.jobs().iter().map(|j| j.id().to_owned()));
        match page.cursor() {
            Some(cursor) => {
                options.after(cursor);
            }
            None => break,
        }
    }
    assert_eq!(seen, ["a1", "b2", "p3", "a4", "b5", "a6", "q7"]);
    for (kind, expect) in [
        ("a", vec!["a1", "a4", "a6"]),
        ("b", vec!["b2", "b5"]),
        ("", vec!["p3", "q7"]),
        ("none", vec![]),
    ] {
        let mut seen = Vec::new();
        let mut options = wheel_jobs::ListOptions::new();
        options.limit(1).kind(kind);
        loop {
            let page = q.list(JobState::Pending, &options).await.unwrap();
            for job in page.jobs() {
                assert_eq!(job.kind(), kind);
                seen.push(job.id().to_owned());
            }
            match page.cursor() {
                Some(cursor) => {
                    options.after(cursor);
                }
                None => break,
            }
        }
        assert_eq!(seen, expect, "kind {kind:?}");
    }
    // Running and dead by kind: one due job of each kind leased, one of kind b dead.
    for (id, kind) in [("ra", "a"), ("rb", "b"), ("db", "b")] {
        let options = JobOptions::kind(kind).max_attempts(1);
        q.schedule_with(id, Duration::ZERO, "p", &options)
            .await
            .unwrap();
    }
    let mut bs = q.consume_kind("b");
    let mut held = Vec::new();
    for _ in 0..2 {
        let d = next(&mut bs).await;
        if d.id() == "db" {
            assert!(d.fail(Duration::ZERO, "boom").await.unwrap());
        } else {
            held.push(d);
        }
    }
    let mut a = q.consume_kind("a");
    held.push(next(&mut a).await);
    let ids = |state, kind: Option<&str>| {
        let q = q.clone();
        let kind = kind.map(str::to_owned);
        async move {
            let mut options = wheel_jobs::ListOptions::new();
            if let Some(kind) = &kind {
                options.kind(kind);
            }
            let page = q.list(state, &options).await.unwrap();
            let mut ids: Vec<String> = page.jobs().iter().map(|j| j.id().to_owned()).collect();
            ids.sort();
            ids
        }
    };
    assert_eq!(ids(JobState::Running, None).await, ["ra", "rb"]);
    assert_eq!(ids(JobState::Running, Some("a")).await, ["ra"]);
    assert_eq!(ids(JobState::Running, Some("")).await, Vec::<String>::new());
    assert_eq!(ids(JobState::Dead, Some("b")).await, ["db"]);
    assert_eq!(ids(JobState::Dead, Some("a")).await, Vec::<String>::new());
    let counts = q.counts().await.unwrap();
    let of = |kind: &str| counts.kinds.get(kind).copied().unwrap_or_default();
    assert_eq!((of("a").pending, of("a").running, of("a").dead), (3, 1, 0));
    assert_eq!((of("b").pending, of("b").running, of("b").dead), (2, 1, 1));
    assert_eq!((of("").pending, of("").running, of("").dead), (2, 0, 0));
    for d in held {
        assert!(d.ack().await.unwrap());
    }
    q.close().await.unwrap();
}
