//! The dedup modes' storage on PostgreSQL (feature `postgres`): the tombstones of `held`
//! (written by `ack_in` in the caller's transaction, deleted by a schedule once expired and
//! at most 64 per claim, earliest first; never imported), and Replace / HoldOff schedules
//! and acks racing in three processes, one of them SIGKILLed.
//!
//! Every queue is on the test binary's shared server (`support/postgres.rs`), in the
//! default schema `wheel_jobs`.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant, SystemTime};

use wheel_jobs::sqlx::{self, Row};
use wheel_jobs::{Builder, Dedup, JobOptions, JobQueue, Scheduled};

use crate::kill::{child_role, runtime, spawn_child, Killed};
use crate::postgres::{connections_gone, fresh, pool, url};
use crate::support::{ms, next};

const HOUR: Duration = Duration::from_secs(3600);

/// The server's clock in nanoseconds since the epoch, as SQL (the backend's own "now").
const NOW: &str = "(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint";

async fn open(queue: &str) -> JobQueue {
    // No assertion here is about time: a bound far above the default's 5 s keeps a claim
    // on a machine saturated by parallel tests from failing as "unavailable".
    Builder::new()
        .postgres_timeout(Some(Duration::from_secs(120)))
        .postgres(&url(), queue)
        .await
        .unwrap()
}

/// The tombstones of `queue`: id and until, earliest first.
async fn tombstones(pool: &sqlx::PgPool, queue: &str) -> Vec<(String, i64)> {
    sqlx::query("SELECT id, until FROM wheel_jobs.held WHERE queue = $1 ORDER BY until, id")
        .bind(queue)
        .fetch_all(pool)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// Writes tombstones for `ids` of `queue` ending `offset_ns` from the server's now (plus
/// the id's index, so their order is known).
async fn put_tombstones(pool: &sqlx::PgPool, queue: &str, ids: &[String], offset_ns: i64) {
    sqlx::query(&format!(
        "INSERT INTO wheel_jobs.held (queue, id, until) \
         SELECT $1, i.id, {NOW} + $3 + i.n FROM unnest($2::text[]) WITH ORDINALITY AS i(id, n)"
    ))
    .bind(queue)
    .bind(ids)
    .bind(offset_ns)
    .execute(pool)
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_claims_delete_at_most_64_expired_tombstones_earliest_first() {
    let name = fresh("dq");
    let pool = pool().await;
    let queue = open(&name).await;
    // Many more than a few claims can take: some are left whatever the consumer did. (Full
    // runs found every one of them swept, and once a claim among 64 × 2,000 ran past 120 s;
    // not reproduced alone. Suspected: the sweep's `IN (… LIMIT … FOR UPDATE SKIP LOCKED)`
    // subquery run again per row by a nested-loop plan; it is now a CTE computed once.)
    const EXPIRED: usize = 64 * 200 + 8;
    let expired: Vec<String> = (0..EXPIRED).map(|i| format!("old-{i:05}")).collect();
    put_tombstones(&pool, &name, &expired, -3_600_000_000_000).await;
    put_tombstones(&pool, &name, &["live".to_owned()], 3_600_000_000_000).await;
    // Claims until one swept (each claim sweeps in its own statement). Twice, in full runs
    // on a saturated machine, a single delivery's claims failed the bound below (which side
    // was not printed then; it is now); not reproduced alone or under a parallel load of
    // this module. Up to three rounds, so one claim that skipped every row does not fail it.
    let mut left = Vec::new();
    for round in 0..3 {
        queue
            .schedule(&format!("due-{round}"), Duration::ZERO, "p")
            .await
            .unwrap();
        let mut consumer = queue.consume();
        assert_eq!(next(&mut consumer).await.id(), format!("due-{round}"));
        drop(consumer);
        left = tombstones(&pool, &name).await;
        if left.len() - 1 < EXPIRED {
            break;
        }
    }
    // However many claims the consumer made (at least one), each took 64, earliest first.
    let expired_left = left.len() - 1;
    assert!(
        0 < expired_left && expired_left < EXPIRED,
        "a claim deleted some: {expired_left} of {EXPIRED} left"
    );
    assert_eq!(expired_left % 64, 8, "64 per claim: {expired_left} left");
    let want: Vec<&str> = expired[EXPIRED - expired_left..]
        .iter()
        .map(String::as_str)
        .chain(["live"])
        .collect();
    let got: Vec<&str> = left.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(got, want, "the latest ones and the live one stay");
    queue.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_ack_in_writes_the_tombstone_in_the_callers_transaction() {
    let name = fresh("dq");
    let pool = pool().await;
    let queue = open(&name).await;
    let held = JobOptions::new().dedup(Dedup::HoldOff(HOUR));
    queue
        .schedule_with("t", Duration::ZERO, "p", &held)
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let d = next(&mut consumer).await;
    let mut tx = pool.begin().await.unwrap();
    assert!(d.ack_in(&mut tx).await.unwrap());
    assert!(
        tombstones(&pool, &name).await.is_empty(),
        "invisible before the commit"
    );
    tx.rollback().await.unwrap();
    assert!(tombstones(&pool, &name).await.is_empty(), "rolled back");
    assert_eq!(
        queue.schedule("t", Duration::ZERO, "x").await.unwrap(),
        Scheduled::Exists,
        "still running"
    );
    let mut tx = pool.begin().await.unwrap();
    assert!(d.ack_in(&mut tx).await.unwrap());
    tx.commit().await.unwrap();
    let [(id, until)] = &tombstones(&pool, &name).await[..] else {
        panic!("one tombstone");
    };
    assert_eq!(id, "t");
    let until = SystemTime::UNIX_EPOCH + Duration::from_nanos(*until as u64);
    assert_eq!(
        queue.schedule("t", Duration::ZERO, "x").await.unwrap(),
        Scheduled::HeldOff { until }
    );
    // In a transaction too, with nothing stored.
    let mut tx = pool.begin().await.unwrap();
    let answer = queue
        .schedule_in_with(&mut tx, "t", Duration::ZERO, "x", &JobOptions::new())
        .await
        .unwrap();
    assert_eq!(answer, Scheduled::HeldOff { until });
    tx.commit().await.unwrap();
    assert!(queue.get("t").await.unwrap().is_none());
    queue.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_expired_tombstones_give_way_and_imports_skip_held_ids() {
    let (from_name, to_name) = (fresh("dq"), fresh("dq"));
    let pool = pool().await;
    let (from, to) = (open(&from_name).await, open(&to_name).await);
    // A schedule meeting an expired tombstone creates the job and deletes it.
    put_tombstones(&pool, &to_name, &["stale".to_owned()], -1_000_000_000).await;
    assert_eq!(
        to.schedule("stale", HOUR, "p").await.unwrap(),
        Scheduled::Created
    );
    assert!(tombstones(&pool, &to_name).await.is_empty());

    // The source: a job with a hold-off, one acked with a hold-off (a tombstone of its
    // own), and jobs whose ids the target holds off (live) or held off (expired).
    let held = JobOptions::new().dedup(Dedup::HoldOff(ms(1500)));
    from.schedule_with("kept", HOUR, "k", &held).await.unwrap();
    from.schedule_with("gone", Duration::ZERO, "g", &held)
        .await
        .unwrap();
    let mut consumer = from.consume();
    assert!(next(&mut consumer).await.ack().await.unwrap());
    drop(consumer);
    assert_eq!(tombstones(&pool, &from_name).await.len(), 1);
    for id in ["live", "expired"] {
        from.schedule(id, HOUR, id).await.unwrap();
    }
    put_tombstones(&pool, &to_name, &["live".to_owned()], 3_600_000_000_000).await;
    put_tombstones(&pool, &to_name, &["expired".to_owned()], -1_000_000_000).await;

    let copied = from.copy_to(&to).await.unwrap();
    assert_eq!(copied.jobs, 2, "{copied:?}");
    assert!(to.get("live").await.unwrap().is_none(), "held off: skipped");
    assert_eq!(
        to.get("expired").await.unwrap().unwrap().payload(),
        b"expired"
    );
    let hold_off: Option<i64> =
        sqlx::query("SELECT hold_off FROM wheel_jobs.jobs WHERE queue = $1 AND id = 'kept'")
            .bind(&to_name)
            .fetch_one(&pool)
            .await
            .unwrap()
            .get(0);
    assert_eq!(
        hold_off,
        Some(1_500_000_000),
        "the spec's hold-off is copied"
    );
    let target: HashSet<String> = tombstones(&pool, &to_name)
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert!(!target.contains("gone"), "tombstones are not copied");
    from.close().await.unwrap();
    to.close().await.unwrap();
}

/// A Replace (or Keep) in an open transaction that finds the job running answers Exists
/// without locking its row: the worker's ack goes through before that transaction ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_schedule_in_a_transaction_leaves_a_running_job_unlocked() {
    let name = fresh("dq");
    let pool = pool().await;
    let queue = open(&name).await;
    queue.schedule("r", Duration::ZERO, "p").await.unwrap();
    let mut consumer = queue.consume();
    let d = next(&mut consumer).await;
    let mut tx = pool.begin().await.unwrap();
    for options in [JobOptions::new().dedup(Dedup::Replace), JobOptions::new()] {
        let answer = queue
            .schedule_in_with(&mut tx, "r", Duration::ZERO, "x", &options)
            .await
            .unwrap();
        assert_eq!(answer, Scheduled::Exists);
    }
    // Before the fix the ack waited on the open transaction's row lock for good.
    let acked = tokio::time::timeout(Duration::from_secs(60), d.ack())
        .await
        .expect("the ack waited on the open transaction");
    assert!(acked.unwrap());
    tx.commit().await.unwrap();
    assert!(queue.get("r").await.unwrap().is_none());
    drop(consumer);
    queue.close().await.unwrap();
}

/// Waits until two statements wait, directly or through one other, on `holder`'s backend.
async fn two_blocked_by(pool: &sqlx::PgPool, holder: i32) {
    loop {
        let waiting: i64 = sqlx::query(
            "SELECT count(*) FROM pg_stat_activity a WHERE $1 = ANY(pg_blocking_pids(a.pid)) \
             OR EXISTS (SELECT 1 FROM unnest(pg_blocking_pids(a.pid)) b \
             WHERE $1 = ANY(pg_blocking_pids(b)))",
        )
        .bind(holder)
        .fetch_one(pool)
        .await
        .unwrap()
        .get(0);
        if waiting >= 2 {
            return;
        }
        tokio::time::sleep(ms(5)).await;
    }
}

/// A Replace waiting on the insert of an id a series is making its occurrence (its
/// statement's snapshot saw no such head) answers Exists once the series commits, and the
/// occurrence keeps the series' time and payload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_replace_leaves_an_occurrence_placed_while_it_waited() {
    let name = fresh("dq");
    let pool = pool().await;
    let queue = open(&name).await;
    // Epoch-aligned: the same first occurrence for years.
    let rule = wheel_jobs::Recurrence::every(Duration::from_secs(3 * 365 * 86400)).unwrap();
    queue
        .schedule_recurring("s", rule.clone(), "p")
        .await
        .unwrap();
    let page = queue
        .list(
            wheel_jobs::JobState::Pending,
            &wheel_jobs::ListOptions::new(),
        )
        .await
        .unwrap();
    let (id, run_at) = (page.jobs()[0].id().to_owned(), page.jobs()[0].run_at());
    assert!(queue.cancel_recurring("s").await.unwrap());
    assert!(queue.get(&id).await.unwrap().is_none());
    // A series row in an open transaction: the setter inserts the occurrence, then waits
    // on it to write its own row.
    let mut gate = pool.begin().await.unwrap();
    let gate_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *gate)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO wheel_jobs.series (queue, name, runs, rule, payload) VALUES ($1, 's', 0, 'x', '')",
    )
    .bind(&name)
    .execute(&mut *gate)
    .await
    .unwrap();
    let setter = {
        let queue = queue.clone();
        tokio::spawn(async move { queue.schedule_recurring("s", rule, "p").await })
    };
    blocked_by_one(&pool, gate_pid).await;
    let replace = {
        let (pool, queue, id) = (pool.clone(), queue.clone(), id.clone());
        tokio::spawn(async move {
            let mut tx = pool.begin().await.unwrap();
            let options = JobOptions::new()
                .dedup(Dedup::Replace)
                .of_kind("other")
                .priority(5);
            let answer = queue
                .schedule_in_with(&mut tx, &id, Duration::ZERO, "moved", &options)
                .await
                .unwrap();
            tx.commit().await.unwrap();
            answer
        })
    };
    two_blocked_by(&pool, gate_pid).await;
    gate.rollback().await.unwrap();
    setter.await.unwrap().unwrap();
    assert_eq!(replace.await.unwrap(), Scheduled::Exists);
    let job = queue.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (job.run_at(), job.payload(), job.kind()),
        (run_at, &b"p"[..], "")
    );
    let counts = queue.counts().await.unwrap();
    assert_eq!(counts.pending, 1);
    assert!(
        counts.kinds.get("other").is_none_or(|k| k.pending == 0),
        "{counts:?}"
    );
    queue.close().await.unwrap();
}

/// Waits until a statement waits on `holder`'s backend.
async fn blocked_by_one(pool: &sqlx::PgPool, holder: i32) {
    loop {
        let waiting: i64 = sqlx::query(
            "SELECT count(*) FROM pg_stat_activity a WHERE $1 = ANY(pg_blocking_pids(a.pid))",
        )
        .bind(holder)
        .fetch_one(pool)
        .await
        .unwrap()
        .get(0);
        if waiting >= 1 {
            return;
        }
        tokio::time::sleep(ms(5)).await;
    }
}

// ===== racing processes =====

const IDS: usize = 20;
/// Schedules per scheduler task of a child.
const ROUNDS: usize = 120;
const TASKS: usize = 6;

/// The ids whose HoldOff schedules hold off for an hour (the others for 40 ms): once one of
/// their jobs is acked, every later schedule of the id is certain to answer HeldOff.
const HOUR_IDS: usize = 4;

/// The wall clock in nanoseconds, as the lines print it (the server runs on this machine).
fn wall() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// The acks' effects, one row per acked payload, written in the ack's transaction: the
/// job's hold-off and the server's clock before (`t1`) and after (`t2`) its `ack_in`.
fn effects(queue: &str) -> String {
    format!("effects_{queue}")
}

/// Child: `TASKS` tasks schedule `ROUNDS` times each on the same 20 ids (Keep, Replace
/// and HoldOff mixed, printing `try` before and `answer` after each), while 4 workers ack
/// every delivery with `ack_in`, recording its payload in the same transaction; `done` once
/// the schedulers finished, then it acks until killed.
async fn race_child(url: &str, name: &str) {
    let queue = Builder::new()
        .lease(wheel_jobs::MIN_LEASE)
        .postgres(url, name)
        .await
        .unwrap();
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    let insert = format!(
        "INSERT INTO {t} (payload, id, hold, t1) VALUES ($1, $2, $3, {NOW}) \
         ON CONFLICT (payload) DO UPDATE SET dups = {t}.dups + 1",
        t = effects(name)
    );
    let after = format!("UPDATE {} SET t2 = {NOW} WHERE payload = $1", effects(name));
    println!("\nready"); // on a line of its own: libtest printed "test … " without a newline
    let pid = std::process::id();
    let worker = {
        let queue = queue.clone();
        tokio::spawn(async move {
            queue
                .run(4, move |d| {
                    let (pool, insert, after) = (pool.clone(), insert.clone(), after.clone());
                    async move {
                        let mut tx = pool.begin().await.map_err(|e| e.to_string())?;
                        let payload = String::from_utf8_lossy(d.payload()).into_owned();
                        // The payload ends with the hold-off its write stored, in ms.
                        let hold: i64 = payload.rsplit('-').next().unwrap().parse().unwrap();
                        sqlx::query(&insert)
                            .bind(&payload)
                            .bind(d.id())
                            .bind(hold * 1_000_000)
                            .execute(&mut *tx)
                            .await
                            .map_err(|e| e.to_string())?;
                        if d.ack_in(&mut tx).await.map_err(|e| e.to_string())? {
                            sqlx::query(&after)
                                .bind(&payload)
                                .execute(&mut *tx)
                                .await
                                .map_err(|e| e.to_string())?;
                            tx.commit().await.map_err(|e| e.to_string())?;
                        }
                        Ok::<(), String>(())
                    }
                })
                .await
        })
    };
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let queue = queue.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..ROUNDS {
                let k = (t * 7 + n * 3) % IDS;
                let id = format!("id-{k}");
                let hold = if k < HOUR_IDS { HOUR } else { ms(40) };
                let (options, when, stored) = match (t + n) % 3 {
                    0 => (JobOptions::new(), ms(0), 0),
                    1 => (
                        JobOptions::new().dedup(Dedup::Replace),
                        ms(((t + n) % 4) as u64 * 10),
                        0,
                    ),
                    _ => (
                        JobOptions::new().dedup(Dedup::HoldOff(hold)),
                        ms(0),
                        hold.as_millis(),
                    ),
                };
                let payload = format!("{pid}-{t}-{n}-{stored}");
                println!("try {id} {payload} {}", wall());
                let outcome = queue
                    .schedule_with(&id, when, payload.as_str(), &options)
                    .await
                    .unwrap();
                let (code, until) = match outcome {
                    Scheduled::Created => ("created", 0),
                    Scheduled::Replaced => ("replaced", 0),
                    Scheduled::Exists => ("exists", 0),
                    Scheduled::HeldOff { until } => (
                        "held",
                        until
                            .duration_since(SystemTime::UNIX_EPOCH)
                            .unwrap()
                            .as_nanos() as u64,
                    ),
                    other => panic!("an outcome this test does not know: {other:?}"),
                };
                println!("answer {id} {payload} {code} {until} {}", wall());
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    println!("done");
    worker.await.unwrap().unwrap();
}

/// One child's lines so far: its answers (id, payload, outcome), the payloads it tried
/// (id, payload), and whether it said `done`.
#[derive(Default)]
struct Lines {
    answers: Vec<(String, String, String)>,
    tried: Vec<(String, String)>,
    /// Per payload: when it was tried, and (answered) the HeldOff's end and when.
    tried_at: HashMap<String, u64>,
    held_until: HashMap<String, u64>,
    answered_at: HashMap<String, u64>,
    done: bool,
}

impl Lines {
    fn drain(&mut self, rx: &Receiver<String>) {
        while let Ok(line) = rx.try_recv() {
            self.take(&line);
        }
    }

    /// Reads to the end of a child's output (it was killed).
    fn finish(&mut self, rx: &Receiver<String>) {
        while let Ok(line) = rx.recv_timeout(Duration::from_secs(30)) {
            self.take(&line);
        }
    }

    fn take(&mut self, line: &str) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[..] {
            ["try", id, payload, at] => {
                self.tried.push((id.into(), payload.into()));
                self.tried_at.insert(payload.into(), at.parse().unwrap());
            }
            ["answer", id, payload, code, until, at] => {
                self.answers.push((id.into(), payload.into(), code.into()));
                self.held_until
                    .insert(payload.into(), until.parse().unwrap());
                self.answered_at.insert(payload.into(), at.parse().unwrap());
            }
            ["done"] => self.done = true,
            _ => {}
        }
    }
}

/// Three processes schedule (Keep, Replace, HoldOff) and ack on the same 20 ids; the first
/// is SIGKILLed mid-flight. Afterwards: no id is both a job and dead; counts agree with the
/// rows; every created job was acked or is there (up to the killed process' unanswered
/// schedules); every answered Replaced is the job's payload, was acked, or may have been
/// followed by another write of its id that took (one not over before it began); each
/// tombstone and each HeldOff answer ends where an ack of its id put it (the server's clock
/// during the ack plus the job's hold-off), and a HeldOff answer came from a schedule tried
/// before that end; every ack whose hold-off is not over has its tombstone, and a schedule
/// of an id held off for an hour answers HeldOff with it.
#[test]
fn postgres_dedup_races_in_three_processes_through_a_kill() {
    const TEST: &str = "postgres_dedup::postgres_dedup_races_in_three_processes_through_a_kill";
    if let Some((name, url)) = child_role() {
        runtime().block_on(race_child(url.to_str().unwrap(), &name));
        return;
    }
    let name = fresh("dq");
    // The children's connections carry the queue's name: the checks wait until every one
    // of them is gone, so no statement of a killed child commits while they read.
    let url = format!("{}&application_name={name}", url());
    let rt = runtime();
    let pool = rt.block_on(async {
        let pool = pool().await;
        sqlx::query(&format!(
            "CREATE TABLE {} (payload text PRIMARY KEY, id text NOT NULL, dups int NOT NULL DEFAULT 0, \
             hold bigint NOT NULL, t1 bigint NOT NULL, t2 bigint)",
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
    // Mid-flight: once the first has answered a quarter of its schedules.
    while lines[0].answers.len() < TASKS * ROUNDS / 4 {
        assert!(Instant::now() < deadline, "the first child stalled");
        lines[0].drain(&outputs[0]);
        std::thread::sleep(ms(5));
    }
    children[0].kill();
    lines[0].finish(&outputs[0]);
    assert!(!lines[0].done, "killed mid-flight");
    while !(lines[1].done && lines[2].done) {
        assert!(Instant::now() < deadline, "the others did not finish");
        for i in 1..3 {
            lines[i].drain(&outputs[i]);
        }
        std::thread::sleep(ms(5));
    }
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
        let jobs: HashMap<String, String> = sqlx::query(
            "SELECT id, convert_from(payload, 'UTF8') FROM wheel_jobs.jobs WHERE queue = $1 \
             UNION ALL SELECT id, convert_from(payload, 'UTF8') FROM wheel_jobs.dead WHERE queue = $1",
        )
        .bind(&name)
        .fetch_all(&pool)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
        let rows: i64 = sqlx::query(
            "SELECT (SELECT count(*) FROM wheel_jobs.jobs WHERE queue = $1) \
             + (SELECT count(*) FROM wheel_jobs.dead WHERE queue = $1)",
        )
        .bind(&name)
        .fetch_one(&pool)
        .await
        .unwrap()
        .get(0);
        assert_eq!(rows as usize, jobs.len(), "no id is both a job and dead");
        let queue = open(&name).await;
        let counts = queue.counts().await.unwrap();
        assert_eq!(
            (counts.pending + counts.running + counts.dead) as usize,
            jobs.len(),
            "counts agree with the rows: {counts:?}"
        );
        queue.close().await.unwrap();

        let acked: Vec<(String, String, i32)> =
            sqlx::query(&format!("SELECT payload, id, dups FROM {}", effects(&name)))
                .fetch_all(&pool)
                .await
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect();
        // Each ack's tombstone window: (id, hold, earliest until, latest until).
        let windows: Vec<(String, i64, i64, i64)> = sqlx::query(&format!(
            "SELECT id, hold, t1 + hold, t2 + hold FROM {} WHERE hold > 0",
            effects(&name)
        ))
        .fetch_all(&pool)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
        let server_now: i64 = sqlx::query_scalar(&format!("SELECT {NOW}"))
            .fetch_one(&pool)
            .await
            .unwrap();
        assert!(acked.iter().all(|(_, _, dups)| *dups == 0), "acked twice");
        let acked_payloads: HashSet<&str> = acked.iter().map(|(p, _, _)| p.as_str()).collect();
        let acked_ids: HashSet<&str> = acked.iter().map(|(_, id, _)| id.as_str()).collect();

        let answers: Vec<&(String, String, String)> =
            lines.iter().flat_map(|l| &l.answers).collect();
        let answered: HashSet<&str> = answers.iter().map(|(_, p, _)| p.as_str()).collect();
        // The killed child's schedules without an answer: they may or may not have landed.
        let unanswered: Vec<&(String, String)> = lines[0]
            .tried
            .iter()
            .filter(|(_, p)| !answered.contains(p.as_str()))
            .collect();
        assert!(unanswered.len() <= TASKS, "one in flight per task");

        // Every job created was acked or is there; the unanswered ones may add to that.
        let created = answers.iter().filter(|(_, _, c)| c == "created").count();
        let (there, gone) = (jobs.len(), acked.len());
        assert!(
            created <= gone + there && gone + there <= created + unanswered.len(),
            "created {created}, acked {gone}, there {there}, unanswered {}",
            unanswered.len()
        );
        // Each job's payload is that of a write that was answered, or in flight.
        for (id, payload) in &jobs {
            let written = answers
                .iter()
                .any(|(i, p, c)| i == id && p == payload && (c == "created" || c == "replaced"))
                || unanswered.iter().any(|(i, p)| i == id && p == payload);
            assert!(written, "{id}: {payload} was never written");
        }
        // Every acked payload was written to its id.
        for (payload, id, _) in &acked {
            let written = answers
                .iter()
                .any(|(i, p, c)| i == id && p == payload && (c == "created" || c == "replaced"))
                || unanswered.iter().any(|(i, p)| i == id && p == payload);
            assert!(written, "{id}: acked {payload} was never written");
        }
        // A replace that answered Replaced is not lost: its payload is there or was acked,
        // or another write of its id came after it.
        let tried_at: HashMap<&str, u64> = lines
            .iter()
            .flat_map(|l| l.tried_at.iter().map(|(p, t)| (p.as_str(), *t)))
            .collect();
        let answered_at: HashMap<&str, u64> = lines
            .iter()
            .flat_map(|l| l.answered_at.iter().map(|(p, t)| (p.as_str(), *t)))
            .collect();
        let held_until: HashMap<&str, u64> = lines
            .iter()
            .flat_map(|l| l.held_until.iter().map(|(p, t)| (p.as_str(), *t)))
            .collect();
        for (id, payload, _) in answers.iter().filter(|(_, _, c)| c == "replaced") {
            let kept = jobs.get(id) == Some(payload) || acked_payloads.contains(payload.as_str());
            // Superseded: another write of the id that took (or may have, in flight) and was
            // not over before this one began, so it may have come after it. With some hundred
            // writes of each id spread over seconds, most are over long before.
            let began = tried_at[payload.as_str()];
            let superseded = answers.iter().any(|(i, p, c)| {
                i == id
                    && p != payload
                    && answered_at[p.as_str()] > began
                    && (c == "created" || c == "replaced")
            }) || unanswered.iter().any(|(i, _)| i == id);
            assert!(kept || superseded, "{id}: the replace by {payload} was lost");
        }
        // Each tombstone, and each HeldOff answer, ends as an ack of its id with a hold-off
        // said it would (its clock when it acked, plus the hold-off).
        let of_an_ack = |id: &str, until: i64| {
            windows
                .iter()
                .any(|(i, _, from, to)| i == id && *from <= until && until <= *to)
        };
        let stones = tombstones(&pool, &name).await;
        for (id, until) in &stones {
            assert!(acked_ids.contains(id.as_str()), "{id}: a tombstone without an ack");
            assert!(of_an_ack(id, *until), "{id}: a tombstone to {until} no ack wrote");
        }
        for (id, payload, _) in answers.iter().filter(|(_, _, c)| c == "held") {
            let until = held_until[payload.as_str()] as i64;
            assert!(of_an_ack(id, until), "{id}: held off to {until} by no ack");
            assert!(
                (tried_at[payload.as_str()] as i64) < until,
                "{id}: {payload} held off after the window's end"
            );
        }
        // Every ack with a hold-off not yet over left its tombstone, which holds the id off.
        let queue = open(&name).await;
        for (id, hold, from, to) in &windows {
            if *to > server_now {
                let until = stones.iter().find(|(i, _)| i == id).map(|(_, u)| *u);
                assert!(
                    until.is_some_and(|u| *from <= u && u <= *to),
                    "{id}: acked with a hold-off of {hold} ns, its tombstone is {until:?}"
                );
            }
            if *from > server_now + 60_000_000_000 {
                let until = SystemTime::UNIX_EPOCH
                    + Duration::from_nanos(stones.iter().find(|(i, _)| i == id).unwrap().1 as u64);
                assert_eq!(
                    queue.schedule(id, Duration::ZERO, "late").await.unwrap(),
                    Scheduled::HeldOff { until },
                    "{id}"
                );
            }
        }
        queue.close().await.unwrap();
        let by_code = |code: &str| answers.iter().filter(|(_, _, c)| c == code).count();
        eprintln!(
            "answers: created {} replaced {} exists {} held {}; acked {}; left {}",
            by_code("created"),
            by_code("replaced"),
            by_code("exists"),
            by_code("held"),
            acked.len(),
            jobs.len()
        );
        assert!(by_code("replaced") > 0, "a replace met a pending job");
    });
}
