//! Successors (`Dedup::AllowWhileRunning`) on PostgreSQL (feature `postgres`): the `next_`
//! columns of a job's row after each path (stored, kept through a retry, handed over by an
//! ack, a death and a lease-expiry kill, dropped by a cancel and a Replace), the counts per
//! kind across a handover, `ack_in` handing over in the caller's transaction, an open
//! `schedule_in` of a successor holding up its own job's ack only, a cancel racing a
//! handover, the wake-up
//! of another handle's idle consumer, and AllowWhileRunning schedules racing acks, retries
//! and deaths in three processes, one of them SIGKILLed.
//!
//! Every queue is on the test binary's shared server (`support/postgres.rs`), in the
//! default schema `wheel_jobs`.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use wheel_jobs::sqlx::{self, Row};
use wheel_jobs::{Builder, Dedup, JobOptions, JobQueue, JobState, Scheduled, MIN_LEASE};

use crate::kill::{child_role, runtime, spawn_child, Killed};
use crate::postgres::{connections_gone, fresh, pool, url};
use crate::suite::{hour_ticks, idle_consumer};
use crate::support::{ms, next};

const HOUR: Duration = Duration::from_secs(3600);

fn allow() -> JobOptions {
    JobOptions::new().dedup(Dedup::AllowWhileRunning)
}

async fn open(queue: &str) -> JobQueue {
    Builder::new()
        .lease(MIN_LEASE)
        .postgres(&url(), queue)
        .await
        .unwrap()
}

/// One job's row as stored: running, payload, attempt, last error, kind, and its
/// successor's payload and kind.
#[derive(Debug, PartialEq, Eq)]
struct Stored {
    running: bool,
    payload: String,
    attempt: i32,
    last_error: Option<String>,
    kind: String,
    next: Option<(String, String)>,
}

async fn row(pool: &sqlx::PgPool, queue: &str, id: &str) -> Option<Stored> {
    sqlx::query(
        "SELECT token IS NOT NULL, convert_from(payload, 'UTF8'), attempt, last_error, kind, \
         convert_from(next_payload, 'UTF8'), next_kind FROM wheel_jobs.jobs WHERE queue = $1 AND id = $2",
    )
    .bind(queue)
    .bind(id)
    .fetch_optional(pool)
    .await
    .unwrap()
    .map(|r| Stored {
        running: r.get(0),
        payload: r.get(1),
        attempt: r.get(2),
        last_error: r.get(3),
        kind: r.get(4),
        next: r
            .get::<Option<String>, _>(5)
            .map(|p| (p, r.get::<Option<String>, _>(6).unwrap())),
    })
}

/// The storage invariants of `queue`: every row's successor columns are all set or all NULL
/// (the flag and the successor in sync), no id is both a job and dead, and the counts (per
/// state and per kind) agree with the rows.
async fn check_shape(pool: &sqlx::PgPool, queue: &JobQueue, name: &str) {
    let torn: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM wheel_jobs.jobs WHERE queue = $1 AND NOT ( \
         (next_payload IS NULL) = (next_run_at IS NULL) AND (next_payload IS NULL) = (next_kind IS NULL) \
         AND (next_payload IS NULL) = (next_priority IS NULL))",
    )
    .bind(name)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(torn, 0, "a successor half stored");
    let both: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM wheel_jobs.jobs j JOIN wheel_jobs.dead d USING (queue, id) WHERE queue = $1",
    )
    .bind(name)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(both, 0, "an id both a job and dead");
    let rows: Vec<(String, i64, i64, i64)> = sqlx::query(
        "SELECT kind, sum(p)::bigint, sum(r)::bigint, sum(d)::bigint FROM ( \
         SELECT kind, (token IS NULL)::int AS p, (token IS NOT NULL)::int AS r, 0 AS d \
         FROM wheel_jobs.jobs WHERE queue = $1 \
         UNION ALL SELECT kind, 0, 0, 1 FROM wheel_jobs.dead WHERE queue = $1) x GROUP BY kind",
    )
    .bind(name)
    .fetch_all(pool)
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect();
    let counts = queue.counts().await.unwrap();
    let (p, r, d) = rows.iter().fold((0, 0, 0), |(p, r, d), x| {
        (p + x.1 as u64, r + x.2 as u64, d + x.3 as u64)
    });
    assert_eq!(
        (counts.pending, counts.running, counts.dead),
        (p, r, d),
        "{counts:?}"
    );
    for (kind, p, r, d) in &rows {
        let k = counts.kinds.get(kind).copied().unwrap_or_default();
        assert_eq!(
            (k.pending, k.running, k.dead),
            (*p as u64, *r as u64, *d as u64),
            "kind {kind:?}: {counts:?}"
        );
    }
}

/// Each path of a successor, as the row shows it: stored beside the running job (not
/// counted), kept through a retry (pending again, then running again), handed over by an
/// ack (its own kind counted), dropped by a cancel, handed over by a death (no dead row)
/// and by the kill of an ended lease, dropped by a Replace of the retried job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_the_successor_columns_follow_each_path() {
    let name = fresh("sc");
    let pool = pool().await;
    let queue = open(&name).await;
    let mut consumer = queue.consume();
    queue
        .schedule_with(
            "a",
            Duration::ZERO,
            "v1",
            &JobOptions::new().max_attempts(3),
        )
        .await
        .unwrap();
    let d = next(&mut consumer).await;
    let once = JobOptions::kind("k2").max_attempts(1);
    assert_eq!(
        queue
            .schedule_with(
                "a",
                Duration::ZERO,
                "v2",
                &once.clone().dedup(Dedup::AllowWhileRunning)
            )
            .await
            .unwrap(),
        Scheduled::Successor
    );
    let r = row(&pool, &name, "a").await.unwrap();
    assert_eq!(
        (r.running, r.payload.as_str(), r.next.clone()),
        (true, "v1", Some(("v2".into(), "k2".into())))
    );
    check_shape(&pool, &queue, &name).await;

    // Retry: pending again with its successor, then running again with it.
    assert!(d.retry(Duration::ZERO).await.unwrap());
    let r = row(&pool, &name, "a").await.unwrap();
    assert_eq!((r.running, r.next.is_some()), (false, true), "{r:?}");
    check_shape(&pool, &queue, &name).await;
    let d = next(&mut consumer).await;
    assert_eq!((d.payload(), d.attempt()), (&b"v1"[..], 2));
    assert!(row(&pool, &name, "a").await.unwrap().next.is_some());

    // Ack: the successor is the job, of its own kind.
    assert!(d.ack().await.unwrap());
    let r = row(&pool, &name, "a").await.unwrap();
    assert_eq!(
        r,
        Stored {
            running: false,
            payload: "v2".into(),
            attempt: 0,
            last_error: None,
            kind: "k2".into(),
            next: None,
        }
    );
    check_shape(&pool, &queue, &name).await;

    // Cancel of a running job's successor: the job runs on, alone.
    let d = next(&mut consumer).await;
    assert_eq!(d.payload(), b"v2");
    assert_eq!(
        queue.schedule_with("a", HOUR, "x", &allow()).await.unwrap(),
        Scheduled::Successor
    );
    assert!(queue.cancel("a").await.unwrap());
    let r = row(&pool, &name, "a").await.unwrap();
    assert_eq!((r.running, r.payload.as_str(), r.next), (true, "v2", None));
    check_shape(&pool, &queue, &name).await;

    // Death (v2 had one attempt): the successor takes over with the error; no dead row.
    assert_eq!(
        queue
            .schedule_with(
                "a",
                Duration::ZERO,
                "v3",
                &once.clone().dedup(Dedup::AllowWhileRunning)
            )
            .await
            .unwrap(),
        Scheduled::Successor
    );
    assert!(d.fail(ms(0), "boom").await.unwrap());
    let r = row(&pool, &name, "a").await.unwrap();
    assert_eq!(
        (
            r.running,
            r.payload.as_str(),
            r.attempt,
            r.last_error.as_deref(),
            r.next
        ),
        (false, "v3", 0, Some("boom"), None)
    );
    check_shape(&pool, &queue, &name).await;
    assert_eq!(queue.counts().await.unwrap().dead, 0);

    // The lease of v3's only attempt ends: the claim that finds it hands over to v4.
    let d = next(&mut consumer).await;
    assert_eq!(d.payload(), b"v3");
    assert_eq!(
        queue
            .schedule_with(
                "a",
                Duration::ZERO,
                "v4",
                &JobOptions::new()
                    .max_attempts(3)
                    .dedup(Dedup::AllowWhileRunning)
            )
            .await
            .unwrap(),
        Scheduled::Successor
    );
    tokio::time::sleep(MIN_LEASE + ms(200)).await;
    let taken = next(&mut consumer).await;
    assert_eq!((taken.payload(), taken.attempt()), (&b"v4"[..], 1));
    let r = row(&pool, &name, "a").await.unwrap();
    assert_eq!(
        (r.running, r.kind.as_str(), r.last_error.as_deref(), r.next),
        (true, "", Some("lease expired"), None)
    );
    assert!(!d.ack().await.unwrap(), "the old lease is gone");
    check_shape(&pool, &queue, &name).await;

    // A Replace of the job pending again after a retry drops its successor.
    assert_eq!(
        queue
            .schedule_with("a", HOUR, "v5", &allow())
            .await
            .unwrap(),
        Scheduled::Successor
    );
    assert!(taken.retry(HOUR).await.unwrap());
    assert!(row(&pool, &name, "a").await.unwrap().next.is_some());
    assert_eq!(
        queue
            .schedule_with("a", HOUR, "v6", &JobOptions::new().dedup(Dedup::Replace))
            .await
            .unwrap(),
        Scheduled::Replaced
    );
    let r = row(&pool, &name, "a").await.unwrap();
    assert_eq!((r.payload.as_str(), r.attempt, r.next), ("v6", 1, None));
    check_shape(&pool, &queue, &name).await;
    let dead: i64 = sqlx::query_scalar("SELECT count(*) FROM wheel_jobs.dead WHERE queue = $1")
        .bind(&name)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(dead, 0);
    queue.close().await.unwrap();
}

/// `ack_in` hands over in the caller's transaction: nobody sees it before the commit, a
/// rollback leaves the job running with its successor (redelivered once its lease ends,
/// the successor still waiting), and a commit makes the successor the pending job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_ack_in_hands_over_in_the_callers_transaction() {
    let name = fresh("sc");
    let pool = pool().await;
    let queue = open(&name).await;
    let mut consumer = queue.consume();
    queue.schedule("t", Duration::ZERO, "v1").await.unwrap();
    let d = next(&mut consumer).await;
    assert_eq!(
        queue
            .schedule_with("t", HOUR, "v2", &allow())
            .await
            .unwrap(),
        Scheduled::Successor
    );
    let mut tx = pool.begin().await.unwrap();
    assert!(d.ack_in(&mut tx).await.unwrap());
    let seen = row(&pool, &name, "t").await.unwrap();
    assert_eq!(
        (seen.running, seen.payload.as_str(), seen.next.map(|n| n.0)),
        (true, "v1", Some("v2".to_owned())),
        "not before the commit"
    );
    tx.rollback().await.unwrap();
    let after = row(&pool, &name, "t").await.unwrap();
    assert_eq!(
        (after.running, after.next.map(|n| n.0)),
        (true, Some("v2".to_owned()))
    );
    check_shape(&pool, &queue, &name).await;

    // The lease ends: the job is delivered again, its successor still waiting.
    let again = next(&mut consumer).await;
    assert_eq!((again.payload(), again.attempt()), (&b"v1"[..], 2));
    let mut tx = pool.begin().await.unwrap();
    assert!(again.ack_in(&mut tx).await.unwrap());
    tx.commit().await.unwrap();
    let job = queue.get("t").await.unwrap().unwrap();
    assert_eq!(
        (job.state(), job.payload(), job.attempt(), job.successor()),
        (JobState::Pending, &b"v2"[..], 0, None)
    );
    check_shape(&pool, &queue, &name).await;
    queue.close().await.unwrap();
}

/// A `schedule_in` storing a successor holds the running job's row until its caller
/// commits: that job's ack waits for the commit, and the ack of another job of the same
/// handle (its settlements share one batcher) answers meanwhile. Then the commit lets the
/// first ack hand over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_open_successor_schedule_holds_up_only_its_own_jobs_ack() {
    let name = fresh("sc");
    let pool = pool().await;
    let queue = Builder::new()
        .lease(HOUR)
        .postgres_timeout(Some(Duration::from_secs(120)))
        .postgres(&url(), &name)
        .await
        .unwrap();
    queue.schedule("a", Duration::ZERO, "a1").await.unwrap();
    queue.schedule("b", Duration::ZERO, "b1").await.unwrap();
    let mut consumer = queue.consume();
    let (first, second) = (next(&mut consumer).await, next(&mut consumer).await);
    drop(consumer);
    let (a, b) = if first.id() == "a" {
        (first, second)
    } else {
        (second, first)
    };
    assert_eq!((a.id(), b.id()), ("a", "b"));

    let mut tx = pool.begin().await.unwrap();
    let holder: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(
        queue
            .schedule_in_with(&mut tx, "a", Duration::ZERO, "a2", &allow())
            .await
            .unwrap(),
        Scheduled::Successor
    );
    let acking = tokio::spawn(async move { a.ack().await });
    // The ack of a waits on the caller's row lock (seen by the server) before b's is sent.
    while sqlx::query_scalar::<_, i64>(
        "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
    )
    .bind(holder)
    .fetch_one(&pool)
    .await
    .unwrap()
        == 0
    {
        assert!(!acking.is_finished(), "a's ack ended before the commit");
        tokio::time::sleep(ms(10)).await;
    }
    // The bound only turns an ack stuck behind a's (until the commit below) into a failure.
    let b_acked = tokio::time::timeout(Duration::from_secs(30), b.ack()).await;
    assert!(b_acked.expect("b's ack waits for a's").unwrap());
    assert!(queue.get("b").await.unwrap().is_none());
    assert!(!acking.is_finished(), "a's ack waits for the commit");

    tx.commit().await.unwrap();
    assert!(acking.await.unwrap().unwrap());
    let job = queue.get("a").await.unwrap().unwrap();
    assert_eq!(
        (job.state(), job.payload(), job.attempt(), job.successor()),
        (JobState::Pending, &b"a2"[..], 0, None)
    );
    check_shape(&pool, &queue, &name).await;
    queue.close().await.unwrap();
}

/// A cancel waiting on the row of an ack that hands over (in the caller's open transaction)
/// finds, once the ack commits, the successor pending under the id and cancels it: true,
/// as if it had come before the ack (it would then have removed the successor), never a
/// false with the job left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_cancel_racing_a_handover_cancels_the_successor() {
    let name = fresh("sc");
    let pool = pool().await;
    let queue = Builder::new()
        .lease(HOUR)
        .postgres_timeout(Some(Duration::from_secs(120)))
        .postgres(&url(), &name)
        .await
        .unwrap();
    queue.schedule("c", Duration::ZERO, "c1").await.unwrap();
    let mut consumer = queue.consume();
    let d = next(&mut consumer).await;
    drop(consumer);
    assert_eq!(
        queue
            .schedule_with("c", HOUR, "c2", &allow())
            .await
            .unwrap(),
        Scheduled::Successor
    );
    let mut tx = pool.begin().await.unwrap();
    let holder: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert!(d.ack_in(&mut tx).await.unwrap());
    let canceller = queue.clone();
    let cancelling = tokio::spawn(async move { canceller.cancel("c").await });
    while sqlx::query_scalar::<_, i64>(
        "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
    )
    .bind(holder)
    .fetch_one(&pool)
    .await
    .unwrap()
        == 0
    {
        assert!(
            !cancelling.is_finished(),
            "the cancel ended before the commit"
        );
        tokio::time::sleep(ms(10)).await;
    }
    tx.commit().await.unwrap();
    assert!(cancelling.await.unwrap().unwrap());
    assert!(queue.get("c").await.unwrap().is_none());
    check_shape(&pool, &queue, &name).await;
    queue.close().await.unwrap();
}

/// An ack that makes a due successor pending wakes an idle consumer of another handle (its
/// own listener: as across processes), sleeping on one-hour ticks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_handover_wakes_another_handles_idle_consumer() {
    let name = fresh("sc");
    let first = open(&name).await;
    first.schedule("w", Duration::ZERO, "v1").await.unwrap();
    let mut consumer = first.consume();
    let d = next(&mut consumer).await;
    drop(consumer);
    assert_eq!(
        first
            .schedule_with("w", Duration::ZERO, "v2", &allow())
            .await
            .unwrap(),
        Scheduled::Successor
    );
    let timer = hour_ticks();
    let mut builder = Builder::new();
    builder.timer(timer.clone());
    let other = builder.postgres(&url(), &name).await.unwrap();
    let waiting = idle_consumer(&other, &timer).await;
    assert!(d.ack().await.unwrap());
    // The bound only turns a missing wakeup (a hang until the hourly tick) into a failure.
    let woken = tokio::time::timeout(Duration::from_secs(30), waiting).await;
    assert_eq!(woken.expect("only the wakeup can deliver it").unwrap(), "w");
    other.close().await.unwrap();
    first.close().await.unwrap();
}

// ===== racing processes =====

/// The ids the children race on: even ones have one attempt (their deaths and ended leases
/// hand over), odd ones five.
const IDS: usize = 6;
const TASKS: usize = 4;
const ROUNDS: usize = 100;

fn effects(queue: &str) -> String {
    format!("effects_{queue}")
}

/// Child: `TASKS` tasks schedule AllowWhileRunning jobs due now `ROUNDS` times each on
/// `IDS` ids (printing `answer <payload> <outcome>` once answered), while 3 workers take
/// each delivery: every fourth payload of an even id fails (a death), every fourth first
/// delivery of an odd id is retried (its successor waits), the rest are acked with
/// `ack_in`, the payload recorded in the same transaction (a second ack of it would count
/// in `dups`). Workers print `failing <payload>` before a failure. `done` once the
/// schedulers finished, then it works until killed.
async fn race_child(url: &str, name: &str) {
    let queue = Builder::new()
        .lease(MIN_LEASE)
        .postgres(url, name)
        .await
        .unwrap();
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    let insert = format!(
        "INSERT INTO {t} (payload) VALUES ($1) ON CONFLICT (payload) DO UPDATE SET dups = {t}.dups + 1",
        t = effects(name)
    );
    println!("\nready");
    let pid = std::process::id();
    let mut workers = Vec::new();
    for _ in 0..3 {
        let (queue, pool, insert) = (queue.clone(), pool.clone(), insert.clone());
        workers.push(tokio::spawn(async move {
            let mut consumer = queue.consume();
            while let Some(d) = consumer.next().await {
                let d = d.unwrap();
                let payload = String::from_utf8_lossy(d.payload()).into_owned();
                let n: usize = payload.rsplit('-').next().unwrap().parse().unwrap();
                let even = d
                    .id()
                    .trim_start_matches("id-")
                    .parse::<usize>()
                    .unwrap()
                    .is_multiple_of(2);
                if even && n.is_multiple_of(4) {
                    println!("failing {payload}");
                    let _failed = d.fail(ms(0), "boom").await.unwrap();
                } else if !even && n.is_multiple_of(4) && d.attempt() == 1 {
                    let _retried = d.retry(Duration::ZERO).await.unwrap();
                } else {
                    let mut tx = pool.begin().await.unwrap();
                    sqlx::query(&insert)
                        .bind(&payload)
                        .execute(&mut *tx)
                        .await
                        .unwrap();
                    if d.ack_in(&mut tx).await.unwrap() {
                        tx.commit().await.unwrap();
                    }
                }
            }
        }));
    }
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let queue = queue.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..ROUNDS {
                let k = (t * 5 + n) % IDS;
                let id = format!("id-{k}");
                let attempts = if k.is_multiple_of(2) { 1 } else { 5 };
                let options = allow().max_attempts(attempts);
                let payload = format!("{pid}-{t}-{n}");
                let outcome = queue
                    .schedule_with(&id, Duration::ZERO, payload.as_str(), &options)
                    .await
                    .unwrap();
                let code = match outcome {
                    Scheduled::Created | Scheduled::Successor => "stored",
                    Scheduled::Exists => "exists",
                    other => panic!("an outcome this test does not know: {other:?}"),
                };
                println!("answer {payload} {code}");
                if n.is_multiple_of(8) {
                    tokio::time::sleep(ms(2)).await;
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    println!("done");
    for w in workers {
        w.await.unwrap();
    }
}

/// One child's lines so far.
#[derive(Default)]
struct Lines {
    stored: Vec<String>,
    answered: usize,
    failing: HashSet<String>,
    done: bool,
}

impl Lines {
    fn drain(&mut self, rx: &Receiver<String>) {
        while let Ok(line) = rx.try_recv() {
            self.take(&line);
        }
    }

    fn finish(&mut self, rx: &Receiver<String>) {
        while let Ok(line) = rx.recv_timeout(Duration::from_secs(30)) {
            self.take(&line);
        }
    }

    fn take(&mut self, line: &str) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[..] {
            ["answer", payload, code] => {
                self.answered += 1;
                if code == "stored" {
                    self.stored.push(payload.into());
                }
            }
            ["failing", payload] => {
                self.failing.insert(payload.into());
            }
            ["done"] => self.done = true,
            _ => {}
        }
    }
}

/// Three processes schedule AllowWhileRunning jobs on the same 6 ids while their workers
/// ack (in a transaction recording the payload), retry and fail them; the first is
/// SIGKILLed mid-flight, and the others redeliver its leases (killing, at their last
/// attempt, those of the even ids, which hands over). Afterwards: the successor columns
/// are whole, no id is both a job and dead, the counts agree with the rows; no payload was
/// acked twice, nor acked and still stored; every payload answered Created or Successor was
/// acked, failed, or is still stored (as a job, a successor or dead), but for at most one
/// per worker of the killed child (held by it when it died, then killed at its last
/// attempt), each of an even id.
#[test]
fn postgres_successors_race_in_three_processes_through_a_kill() {
    const TEST: &str =
        "postgres_successor::postgres_successors_race_in_three_processes_through_a_kill";
    if let Some((name, url)) = child_role() {
        runtime().block_on(race_child(url.to_str().unwrap(), &name));
        return;
    }
    let name = fresh("sr");
    // The children's connections carry the queue's name: the checks wait until every one
    // of them is gone, so no statement of a killed child commits while they read.
    let url = format!("{}&application_name={name}", url());
    let rt = runtime();
    let pool = rt.block_on(async {
        let pool = pool().await;
        sqlx::query(&format!(
            "CREATE TABLE {} (payload text PRIMARY KEY, dups int NOT NULL DEFAULT 0)",
            effects(&name)
        ))
        .execute(&pool)
        .await
        .unwrap();
        pool
    });
    let (mut children, outputs): (Vec<Killed>, Vec<Receiver<String>>) = (0..3)
        .map(|_| spawn_child(TEST, &name, std::path::Path::new(&url)))
        .unzip();
    let mut lines: Vec<Lines> = (0..3).map(|_| Lines::default()).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while lines[0].answered < TASKS * ROUNDS / 3 {
        assert!(Instant::now() < deadline, "the first child stalled");
        lines[0].drain(&outputs[0]);
        std::thread::sleep(ms(5));
    }
    children[0].kill();
    lines[0].finish(&outputs[0]);
    assert!(!lines[0].done, "killed mid-flight");
    // The others finish, and work on until the dead child's leases (one second) ended and
    // were taken again.
    while !(lines[1].done && lines[2].done) {
        assert!(Instant::now() < deadline, "the others did not finish");
        for i in 1..3 {
            lines[i].drain(&outputs[i]);
        }
        std::thread::sleep(ms(5));
    }
    std::thread::sleep(MIN_LEASE * 3);
    for (child, (lines, rx)) in children
        .iter_mut()
        .zip(lines.iter_mut().zip(&outputs))
        .skip(1)
    {
        child.kill();
        lines.finish(rx);
    }

    rt.block_on(async {
        connections_gone(&pool, &name, deadline).await;
        let queue = open(&name).await;
        check_shape(&pool, &queue, &name).await;
        queue.close().await.unwrap();

        let acked: HashMap<String, i32> =
            sqlx::query(&format!("SELECT payload, dups FROM {}", effects(&name)))
                .fetch_all(&pool)
                .await
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
        assert!(acked.values().all(|d| *d == 0), "acked twice");
        let stored_now: Vec<String> = sqlx::query(
            "SELECT convert_from(payload, 'UTF8') FROM wheel_jobs.jobs WHERE queue = $1 \
             UNION ALL SELECT convert_from(next_payload, 'UTF8') FROM wheel_jobs.jobs \
             WHERE queue = $1 AND next_payload IS NOT NULL \
             UNION ALL SELECT convert_from(payload, 'UTF8') FROM wheel_jobs.dead WHERE queue = $1",
        )
        .bind(&name)
        .fetch_all(&pool)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
        let stored_now: HashSet<String> = stored_now.into_iter().collect();
        for payload in &stored_now {
            assert!(
                !acked.contains_key(payload),
                "{payload} was acked and is still stored"
            );
        }
        let failing: HashSet<&String> = lines.iter().flat_map(|l| &l.failing).collect();
        let answered: Vec<&String> = lines.iter().flat_map(|l| &l.stored).collect();
        let mut lost = Vec::new();
        for payload in &answered {
            if !(acked.contains_key(*payload)
                || stored_now.contains(*payload)
                || failing.contains(payload))
            {
                lost.push(payload.as_str());
            }
        }
        // Held by the killed child's workers when it died, killed at their last attempt.
        assert!(lost.len() <= 3, "lost {lost:?}");
        for payload in &lost {
            let parts: Vec<usize> = payload
                .split('-')
                .skip(1)
                .map(|x| x.parse().unwrap())
                .collect();
            let k = (parts[0] * 5 + parts[1]) % IDS;
            assert_eq!(k % 2, 0, "{payload} of id-{k} (five attempts) was lost");
        }
        let pids_of_first: HashSet<&str> = lines[0]
            .stored
            .iter()
            .map(|p| p.split('-').next().unwrap())
            .collect();
        eprintln!(
            "{} stored, {} acked, {} failing, {} still stored, {} lost with the kill (child {:?})",
            answered.len(),
            acked.len(),
            failing.len(),
            stored_now.len(),
            lost.len(),
            pids_of_first
        );
        assert!(acked.len() > TASKS, "the children acked something");
    });
}
