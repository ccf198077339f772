//! Faults under a PostgreSQL queue (feature `postgres`): a kill -9 of the server under load
//! and its restart, a stopped server (SIGSTOP), and competing consumers in several processes,
//! one of them SIGKILLed.
//!
//! A test that kills or stops the server starts one of its own (`PgServer::start`); the
//! test of competing processes runs on the binary's shared server. The child processes are this test
//! binary run again (`kill.rs`'s `spawn_child`). Every wait is a poll of a condition with a
//! deadline ([`DEADLINE`]), so a test that goes wrong fails instead of hanging.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use wheel_jobs::sqlx::postgres::{PgPool, PgPoolOptions};
use wheel_jobs::sqlx::{self, Row};
use wheel_jobs::{Builder, Error, JobQueue, When};

use crate::kill::{child_role, runtime, spawn_child};
use crate::support::postgres::{fresh_queue, shared, PgServer};
use crate::support::{ms, next};

/// How long any one wait of these tests may take before it fails the test.
const DEADLINE: Duration = Duration::from_secs(120);

/// The server's clock in nanoseconds since the epoch, as SQL (the backend's own "now").
const SERVER_NOW: &str = "(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint";

/// `t` in nanoseconds since the epoch, as the backend stores times.
fn nanos(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        .try_into()
        .unwrap()
}

/// Polls `check` every 20 ms until it returns `Some`, failing with `what` after
/// [`DEADLINE`].
async fn until<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(Instant::now() < deadline, "not within {DEADLINE:?}: {what}");
        tokio::time::sleep(ms(20)).await;
    }
}

/// A pool for the tests' own statements, which outlives restarts of the server (a broken
/// connection is dropped when next acquired).
async fn test_pool(url: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(Duration::from_secs(2))
        .connect(url)
        .await
        .expect("test pool")
}

/// `sql`'s single `bigint` answer, retried while the server comes back after a restart.
async fn scalar(pool: &PgPool, sql: &str) -> i64 {
    until(sql, move || async move {
        sqlx::query(sql)
            .fetch_one(pool)
            .await
            .ok()
            .map(|r| r.get(0))
    })
    .await
}

// ===== kill -9 of the server under load =====

/// One schedule that returned `Ok`.
struct Acknowledged {
    id: String,
    /// The wall-clock time it was scheduled for, for a `When::At` schedule.
    at: Option<SystemTime>,
}

/// Schedules `t<task>-<n>` from one task until `stop`, due 0 to 390 ms from now (by the
/// server's clock, or at a wall-clock time every other one), recording those that returned
/// `Ok` and the errors of the others.
async fn schedule_until(
    queue: JobQueue,
    task: usize,
    stop: Arc<AtomicBool>,
    oks: Arc<Mutex<Vec<Acknowledged>>>,
    errors: Arc<Mutex<Vec<Error>>>,
) {
    for n in 0.. {
        if stop.load(SeqCst) {
            return;
        }
        let id = format!("t{task}-{n}");
        let delay = ms((n * 37 % 400) as u64 / 10 * 10);
        let at = (n % 2 == 1).then(|| SystemTime::now() + delay);
        let when = match at {
            Some(t) => When::At(t),
            None => When::After(delay),
        };
        match queue.schedule(&id, when, id.as_bytes()).await {
            Ok(_) => oks.lock().unwrap().push(Acknowledged { id, at }),
            Err(err) => {
                errors.lock().unwrap().push(err);
                // A back-off while the server is away, not a synchronization.
                tokio::time::sleep(ms(20)).await;
            }
        }
    }
}

/// The ids of `ids` that are neither in `queue`'s jobs (pending or leased) nor acked (a row
/// in `acks`), read in one statement: one snapshot, so a job acked meanwhile is seen in one
/// place or the other.
async fn missing(pool: &PgPool, queue: &str, ids: &[String]) -> Vec<String> {
    let sql = "SELECT i FROM unnest($1::text[]) AS i \
               WHERE NOT EXISTS (SELECT 1 FROM wheel_jobs.jobs j WHERE j.queue = $2 AND j.id = i) \
               AND NOT EXISTS (SELECT 1 FROM acks a WHERE a.id = i) ORDER BY i";
    until("the missing ids can be read", move || async move {
        sqlx::query(sql)
            .bind(ids)
            .bind(queue)
            .fetch_all(pool)
            .await
            .ok()
            .map(|rows| rows.iter().map(|r| r.get::<String, _>(0)).collect())
    })
    .await
}

/// Creates `acks`, a row per delivery a [`spawn_recording_worker`] acked. No key on `id`: a
/// second effect of one job would be a second row.
async fn create_acks(pool: &PgPool) {
    sqlx::query(
        "CREATE TABLE acks (id text NOT NULL, run_at bigint NOT NULL, ran_at bigint NOT NULL, \
         attempt int NOT NULL)",
    )
    .execute(pool)
    .await
    .unwrap();
}

/// A `run` worker whose handler inserts the delivery's row in `acks` and acks it in the
/// same transaction, and what it saw.
struct Recording {
    worker: tokio::task::JoinHandle<Result<(), Error>>,
    /// Deliveries acked.
    handled: Arc<AtomicUsize>,
    /// Deliveries handed out before their run_at by this process's clock.
    early: Arc<Mutex<Vec<String>>>,
}

/// Spawns `queue.run(8, …)` recording in `acks` (with the run_at, and the server's clock
/// in the transaction as `ran_at`) each delivery it acks.
fn spawn_recording_worker(queue: &JobQueue, pool: &PgPool) -> Recording {
    let early = Arc::new(Mutex::new(Vec::<String>::new()));
    let handled = Arc::new(AtomicUsize::new(0));
    let insert =
        format!("INSERT INTO acks (id, run_at, ran_at, attempt) VALUES ($1, $2, {SERVER_NOW}, $3)");
    let worker = {
        let (queue, pool, early, handled) =
            (queue.clone(), pool.clone(), early.clone(), handled.clone());
        tokio::spawn(async move {
            queue
                .run(8, move |d| {
                    let (pool, early, handled) = (pool.clone(), early.clone(), handled.clone());
                    let insert = insert.clone();
                    async move {
                        if SystemTime::now() < d.run_at() {
                            early.lock().unwrap().push(d.id().to_owned());
                        }
                        let mut tx = pool.begin().await.map_err(|e| e.to_string())?;
                        sqlx::query(&insert)
                            .bind(d.id())
                            .bind(nanos(d.run_at()))
                            .bind(d.attempt() as i32)
                            .execute(&mut *tx)
                            .await
                            .map_err(|e| e.to_string())?;
                        if d.ack_in(&mut tx).await.map_err(|e| e.to_string())? {
                            tx.commit().await.map_err(|e| e.to_string())?;
                            handled.fetch_add(1, SeqCst);
                        }
                        Ok::<(), String>(())
                    }
                })
                .await
        })
    };
    Recording {
        worker,
        handled,
        early,
    }
}

/// What no delivery recorded in `acks` may show: an effect committed twice, a run before
/// its run_at by the server's clock, or (by this process's) in `early`.
async fn assert_once_and_never_early(pool: &PgPool, early: &Mutex<Vec<String>>) {
    let twice = scalar(
        pool,
        "SELECT count(*) FROM (SELECT id FROM acks GROUP BY id HAVING count(*) > 1) d",
    )
    .await;
    assert_eq!(twice, 0, "jobs whose effect committed twice");
    let early_by_server = scalar(pool, "SELECT count(*) FROM acks WHERE ran_at < run_at").await;
    assert_eq!(early_by_server, 0, "jobs that ran before their run_at");
    assert_eq!(*early.lock().unwrap(), Vec::<String>::new(), "early");
}

/// kill -9 of the server (and every backend process) twice while 16 tasks schedule and a
/// `run` worker acks each job in the transaction that records it (`acks`): after each
/// restart every schedule that returned `Ok` before the kill is there (pending, leased, or
/// acked), the calls made while the server is down fail with `is_unavailable`, and the
/// same `run` worker resumes by itself and drains the queue. Nothing ran before its run_at
/// (by the server's clock, checked in the handler's transaction), a job scheduled for a
/// wall-clock time kept it, and no job's effect committed twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_server_killed_under_load_loses_no_acknowledged_schedule_and_run_resumes() {
    const ROUNDS: usize = 2;
    const SCHEDULERS: usize = 16;
    let mut server = PgServer::start();
    let url = server.url();
    let name = fresh_queue();
    let queue = Builder::new()
        .postgres_timeout(Some(Duration::from_secs(1)))
        .lease(wheel_jobs::MIN_LEASE)
        .backoff(ms(50), ms(500))
        // Deliveries cut short by the kills spend attempts: none of them may go dead.
        .max_attempts(1000)
        .postgres(&url, &name)
        .await
        .unwrap();
    let pool = test_pool(&url).await;
    create_acks(&pool).await;

    let stop = Arc::new(AtomicBool::new(false));
    let oks = Arc::new(Mutex::new(Vec::new()));
    let errors = Arc::new(Mutex::new(Vec::new()));
    let schedulers: Vec<_> = (0..SCHEDULERS)
        .map(|t| {
            let (queue, stop, oks, errors) =
                (queue.clone(), stop.clone(), oks.clone(), errors.clone());
            tokio::spawn(schedule_until(queue, t, stop, oks, errors))
        })
        .collect();
    let Recording {
        worker,
        handled,
        early,
    } = spawn_recording_worker(&queue, &pool);

    let (oks_r, handled_r, pool_r, queue_r) = (&oks, &handled, &pool, &queue);
    for round in 1..=ROUNDS {
        // Under load: schedules and acks flowing (since the last restart).
        let (scheduled, acked) = (oks.lock().unwrap().len(), handled.load(SeqCst));
        until("schedules and acks before the kill", move || async move {
            let ok = oks_r.lock().unwrap().len() >= scheduled + 300;
            (ok && handled_r.load(SeqCst) >= acked + 100).then_some(())
        })
        .await;
        let before: Vec<String> = oks.lock().unwrap().iter().map(|s| s.id.clone()).collect();
        tokio::task::block_in_place(|| server.kill());
        let started = Instant::now();
        // An id per round: a schedule the client gave up on may still commit after the
        // restart (its batch retries), and run; the same id in the next round would then
        // run twice, legitimately, and look like a duplicate effect.
        let down = queue
            .schedule(&format!("while-down-{round}"), Duration::ZERO, "p")
            .await;
        let err = down.expect_err("a schedule on a killed server");
        assert!(
            err.is_unavailable(),
            "round {round}: {err} (after {:?})",
            started.elapsed()
        );
        tokio::task::block_in_place(|| server.restart());
        let lost = missing(&pool, &name, &before).await;
        assert!(
            lost.is_empty(),
            "round {round}: {} of {} acknowledged schedules lost by the kill: {:?}",
            lost.len(),
            before.len(),
            &lost[..lost.len().min(20)]
        );
        let acked = handled.load(SeqCst);
        // The schedulers and the worker work again, on the same handle.
        let scheduled = before.len();
        until("schedules and acks after the restart", move || async move {
            (oks_r.lock().unwrap().len() >= scheduled + 100 && handled_r.load(SeqCst) > acked)
                .then_some(())
        })
        .await;
    }
    stop.store(true, SeqCst);
    for s in schedulers {
        s.await.unwrap();
    }

    // The same worker drains the queue: every acknowledged schedule ran, exactly once.
    let all: Vec<String> = oks.lock().unwrap().iter().map(|s| s.id.clone()).collect();
    let all_r = &all;
    until("every acknowledged schedule acked", move || async move {
        missing_acks(pool_r, all_r).await.is_empty().then_some(())
    })
    .await;
    until("the queue drained", move || async move {
        let counts = queue_r.counts().await.ok()?;
        (counts.pending == 0 && counts.running == 0).then_some(counts)
    })
    .await;
    assert!(!worker.is_finished(), "the worker stopped: {worker:?}");
    let counts = queue.counts().await.unwrap();
    assert_eq!(counts.dead, 0, "{counts:?}");
    assert_once_and_never_early(&pool, &early).await;
    // A job scheduled for a wall-clock time was delivered with that time as its run_at, at its
    // first attempt (a handler whose transaction the kill broke fails, and its retry moves
    // the job's run_at by the backoff).
    let at: Vec<(String, i64)> = oks
        .lock()
        .unwrap()
        .iter()
        .filter_map(|s| Some((s.id.clone(), nanos(s.at?))))
        .collect();
    let (ids, dues): (Vec<String>, Vec<i64>) = at.into_iter().unzip();
    let moved: i64 = sqlx::query(
        "SELECT count(*) FROM acks a JOIN unnest($1::text[], $2::bigint[]) AS s(id, due) \
         ON a.id = s.id WHERE a.attempt = 1 AND a.run_at <> s.due",
    )
    .bind(&ids)
    .bind(&dues)
    .fetch_one(&pool)
    .await
    .unwrap()
    .get(0);
    assert_eq!(moved, 0, "jobs delivered with another run_at than asked");
    // Every failed call while the server was away is `is_unavailable`.
    let errors = std::mem::take(&mut *errors.lock().unwrap());
    let other: Vec<String> = errors
        .iter()
        .filter(|e| !e.is_unavailable())
        .map(|e| e.to_string())
        .collect();
    assert!(other.is_empty(), "errors not `is_unavailable`: {other:?}");
    eprintln!(
        "{} schedules acknowledged, {} failed, over {ROUNDS} kills",
        all.len(),
        errors.len()
    );
    queue.close().await.unwrap();
    worker.await.unwrap().unwrap();
}

/// kill -9 of the server while a `run` worker takes the occurrences of a series due every
/// 100 ms: after the restart the series goes on by itself (occurrences due after the
/// restart are delivered and acked), no occurrence's effect committed twice or ran early,
/// and the series is back to one pending occurrence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_recurring_series_goes_on_after_a_server_kill_without_a_duplicate_occurrence() {
    let mut server = PgServer::start();
    let url = server.url();
    let queue = Builder::new()
        .postgres_timeout(Some(Duration::from_secs(1)))
        .lease(wheel_jobs::MIN_LEASE)
        .backoff(ms(50), ms(500))
        .max_attempts(1000)
        .postgres(&url, &fresh_queue())
        .await
        .unwrap();
    let pool = test_pool(&url).await;
    create_acks(&pool).await;
    let every = wheel_jobs::Recurrence::every(ms(100)).unwrap();
    queue.schedule_recurring("tick", every, "t").await.unwrap();
    let Recording {
        worker,
        handled,
        early,
    } = spawn_recording_worker(&queue, &pool);
    let (handled_r, pool_r, queue_r) = (&handled, &pool, &queue);
    until("occurrences before the kill", move || async move {
        (handled_r.load(SeqCst) >= 5).then_some(())
    })
    .await;
    tokio::task::block_in_place(|| server.kill_and_restart());
    let after = format!(
        "SELECT count(*) FROM acks WHERE run_at > {}",
        nanos(SystemTime::now())
    );
    let after_r = &after;
    until("occurrences due after the restart", move || async move {
        (scalar(pool_r, after_r).await >= 5).then_some(())
    })
    .await;
    // Occurrences given back around the kill come again; then one is pending, as ever.
    until("one pending occurrence", move || async move {
        let counts = queue_r.counts().await.ok()?;
        (counts.pending == 1 && counts.running == 0 && counts.dead == 0).then_some(())
    })
    .await;
    let series = queue.list_recurring().await.unwrap();
    assert_eq!(series.len(), 1, "{series:?}");
    assert!(series[0].next_run().is_some(), "{series:?}");
    let others = scalar(
        &pool,
        "SELECT count(*) FROM acks WHERE id NOT LIKE 'tick@%'",
    )
    .await;
    assert_eq!(others, 0, "only occurrences of the series ran");
    queue.close().await.unwrap();
    worker.await.unwrap().unwrap();
    assert_once_and_never_early(&pool, &early).await;
}

/// The ids of `ids` with no row in `acks`.
async fn missing_acks(pool: &PgPool, ids: &[String]) -> Vec<String> {
    let sql = "SELECT i FROM unnest($1::text[]) AS i \
               WHERE NOT EXISTS (SELECT 1 FROM acks a WHERE a.id = i)";
    sqlx::query(sql)
        .bind(ids)
        .fetch_all(pool)
        .await
        .map(|rows| rows.iter().map(|r| r.get::<String, _>(0)).collect())
        .unwrap_or_else(|_| ids.to_vec())
}

// ===== a stopped server =====

/// `result` is an `is_unavailable` error, within ten times the timeout (a hang detector,
/// not a timing check).
#[track_caller]
fn unavailable<T: std::fmt::Debug>(what: &str, result: Result<T, Error>, took: Duration) {
    let err = result.expect_err(what);
    assert!(err.is_unavailable(), "{what}: {err} after {took:?}");
    assert!(
        took < 10 * STOP_TIMEOUT,
        "{what}: failed only after {took:?}: {err}"
    );
}

/// The `postgres_timeout` of the stopped-server test.
const STOP_TIMEOUT: Duration = Duration::from_secs(1);

/// A server stopped by SIGSTOP (its connections open, nothing answering): a schedule, a
/// claim, an ack, a read, the counts, opening another queue and a burst of 64 calls at
/// once each fail with `is_unavailable` within the `postgres_timeout`; after SIGCONT the same queue schedules,
/// claims and acks again without being reopened, and a `run` worker whose claims failed
/// through the stop runs the next job by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_postgres_server_is_unavailable_and_the_same_queue_works_after_sigcont() {
    let server = PgServer::start();
    let queue = Builder::new()
        .postgres_timeout(Some(STOP_TIMEOUT))
        // "held" stays leased to this test across the stop (the server's clock runs on).
        .lease(Duration::from_secs(600))
        .postgres(&server.url(), &fresh_queue())
        .await
        .unwrap();
    queue.schedule("held", Duration::ZERO, "p").await.unwrap();
    let mut consumer = queue.consume();
    let held = next(&mut consumer).await;
    // A `run` worker on another queue of the server, claiming every 100 ms while idle: its
    // claims fail through the stop, and it goes on by itself after it.
    let other = Builder::new()
        .postgres_timeout(Some(STOP_TIMEOUT))
        .safety_wakeup(ms(100))
        .postgres(&server.url(), &fresh_queue())
        .await
        .unwrap();
    let (ran, mut ran_rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = crate::support::spawn_reporting_worker(other.clone(), 2, ran);

    // Each call's result and how long it took; the assertions come after SIGCONT.
    server.signal("-STOP");
    let t = Instant::now();
    let schedule = (
        queue.schedule("during", Duration::ZERO, "p").await,
        t.elapsed(),
    );
    let t = Instant::now();
    let claimed = consumer.next().await.expect("the consumer goes on");
    let claim = (claimed.map(|d| d.id().to_owned()), t.elapsed());
    let t = Instant::now();
    let ack = (held.ack().await, t.elapsed());
    let t = Instant::now();
    let get = (queue.get("held").await, t.elapsed());
    let t = Instant::now();
    let counts = (queue.counts().await, t.elapsed());
    let t = Instant::now();
    let mut builder = Builder::new();
    builder.postgres_timeout(Some(STOP_TIMEOUT));
    let opened = (builder.postgres(&server.url(), "other").await, t.elapsed());
    // A burst of calls at once, more than the pool has connections.
    let burst: Vec<_> = (0..32)
        .flat_map(|i| {
            let (a, b) = (queue.clone(), queue.clone());
            [
                tokio::spawn(async move {
                    let t = Instant::now();
                    let id = format!("burst-{i}");
                    (
                        a.schedule(&id, Duration::ZERO, "p").await.map(drop),
                        t.elapsed(),
                    )
                }),
                tokio::spawn(async move {
                    let t = Instant::now();
                    (b.get("held").await.map(drop), t.elapsed())
                }),
            ]
        })
        .collect();
    let mut bursts = Vec::new();
    for call in burst {
        bursts.push(call.await.unwrap());
    }
    server.signal("-CONT");

    unavailable("schedule", schedule.0, schedule.1);
    unavailable("claim", claim.0, claim.1);
    unavailable("ack", ack.0, ack.1);
    unavailable("get", get.0, get.1);
    unavailable("counts", counts.0, counts.1);
    unavailable("open", opened.0, opened.1);
    for (result, took) in bursts {
        unavailable("a call of the burst", result, took);
    }
    eprintln!(
        "stopped: schedule {:?}, claim {:?}, ack {:?}, get {:?}, counts {:?}, open {:?}",
        schedule.1, claim.1, ack.1, get.1, counts.1, opened.1
    );

    // The same handle, consumer and delivery work again. The calls that timed out may or
    // may not have been applied (their statements ran once the server went on).
    queue.schedule("after", Duration::ZERO, "p").await.unwrap();
    held.ack().await.expect("an ack after SIGCONT");
    assert_eq!(queue.get("held").await.unwrap(), None, "acked");
    let mut seen = HashSet::new();
    while !seen.contains("after") {
        let d = tokio::time::timeout(DEADLINE, next(&mut consumer))
            .await
            .expect("a delivery after SIGCONT");
        assert!(d.ack().await.unwrap(), "{}", d.id());
        assert!(seen.insert(d.id().to_owned()), "{} twice", d.id());
    }
    assert!(
        seen.iter()
            .all(|id| id == "after" || id == "during" || id.starts_with("burst-")),
        "{seen:?}"
    );
    let counts = queue.counts().await.unwrap();
    assert_eq!((counts.running, counts.dead), (0, 0), "{counts:?}");
    queue.close().await.unwrap();

    other
        .schedule("for-run", Duration::ZERO, "p")
        .await
        .unwrap();
    let ran = tokio::time::timeout(DEADLINE, ran_rx.recv()).await;
    assert_eq!(ran.expect("the worker ran it").as_deref(), Some("for-run"));
    other.close().await.unwrap();
    worker.await.unwrap().unwrap();
}

// ===== competing consumers in several processes =====

/// The effects table of the queue `queue`.
fn effects(queue: &str) -> String {
    format!("effects_{queue}")
}

/// Child: `run` on the queue `queue` whose handler inserts the job's effect row and acks
/// in the same transaction; a second effect of one id counts in `dups` instead of failing.
async fn consume_with_effects(url: &str, queue: &str) {
    let jobs = Builder::new()
        .lease(wheel_jobs::MIN_LEASE)
        .postgres(url, queue)
        .await
        .unwrap();
    let pool = test_pool(url).await;
    let insert = format!(
        "INSERT INTO {t} (id, pid) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET dups = {t}.dups + 1",
        t = effects(queue)
    );
    println!("\nready"); // on a line of its own: libtest printed "test … " without a newline
    let pid = std::process::id() as i32;
    jobs.run(8, move |d| {
        let (pool, insert) = (pool.clone(), insert.clone());
        async move {
            let mut tx = pool.begin().await.map_err(|e| e.to_string())?;
            sqlx::query(&insert)
                .bind(d.id())
                .bind(pid)
                .execute(&mut *tx)
                .await
                .map_err(|e| e.to_string())?;
            if d.ack_in(&mut tx).await.map_err(|e| e.to_string())? {
                tx.commit().await.map_err(|e| e.to_string())?;
            }
            Ok::<(), String>(())
        }
    })
    .await
    .unwrap();
}

/// Three processes run one queue; the parent schedules 2,000 due jobs and SIGKILLs one
/// process once each has handled some: every job's effect (written in the transaction of
/// its ack) exists exactly once, every process handled some, and the queue ends empty.
#[test]
fn competing_postgres_consumers_in_three_processes_take_each_job_once_through_a_kill() {
    const TEST: &str = "postgres_faults::competing_postgres_consumers_in_three_processes_take_each_job_once_through_a_kill";
    const JOBS: usize = 2_000;
    if let Some((queue, url)) = child_role() {
        runtime().block_on(consume_with_effects(url.to_str().unwrap(), &queue));
        return;
    }
    let url = shared().url();
    let name = fresh_queue();
    let table = effects(&name);
    let rt = runtime();
    let (queue, pool) = rt.block_on(async {
        let pool = test_pool(&url).await;
        sqlx::query(&format!(
            "CREATE TABLE {table} (id text PRIMARY KEY, pid int NOT NULL, dups int NOT NULL DEFAULT 0)"
        ))
        .execute(&pool)
        .await
        .unwrap();
        let queue = Builder::new().postgres(&url, &name).await.unwrap();
        (queue, pool)
    });
    let mut children: Vec<_> = (0..3)
        .map(|_| spawn_child(TEST, &name, Path::new(&url)).0)
        .collect();
    let pids: Vec<i32> = children.iter().map(|c| c.pid() as i32).collect();
    let by_pid = |pool: PgPool| {
        let table = table.clone();
        async move {
            sqlx::query(&format!("SELECT pid, count(*) FROM {table} GROUP BY pid"))
                .fetch_all(&pool)
                .await
                .unwrap()
                .iter()
                .map(|r| (r.get::<i32, _>(0), r.get::<i64, _>(1)))
                .collect::<HashMap<i32, i64>>()
        }
    };
    let (by_pid, pool_r, pids_r, queue_r) = (&by_pid, &pool, &pids, &queue);
    rt.block_on(async {
        let ids: Vec<String> = (0..JOBS).map(|i| format!("job-{i:04}")).collect();
        for chunk in ids.chunks(100) {
            let jobs = chunk.iter().map(|id| (id.clone(), Duration::ZERO, "p"));
            queue.schedule_many(jobs).await.unwrap();
        }
        // Midway, once every process has handled some: SIGKILL the first, leases and all.
        until("every process handled some", move || async move {
            let seen = by_pid(pool_r.clone()).await;
            pids_r.iter().all(|p| seen.contains_key(p)).then_some(())
        })
        .await;
        children[0].kill();
        let count = format!("SELECT count(*) FROM {table}");
        let count_r = &count;
        until("every job's effect", move || async move {
            let n = scalar(pool_r, count_r).await;
            (n as usize >= JOBS).then_some(())
        })
        .await;
        let counts = until("the queue drained", move || async move {
            let counts = queue_r.counts().await.unwrap();
            (counts.pending == 0 && counts.running == 0).then_some(counts)
        })
        .await;
        assert_eq!(counts.dead, 0, "{counts:?}");
        let present = scalar_bound(
            &pool,
            &format!("SELECT count(*) FROM {table} WHERE id = ANY($1)"),
            &ids,
        )
        .await;
        assert_eq!(present as usize, JOBS, "every job's effect");
        let total = scalar(&pool, &count).await;
        assert_eq!(total as usize, JOBS, "no other effect");
        let dups = scalar(
            &pool,
            &format!("SELECT coalesce(sum(dups), 0)::bigint FROM {table}"),
        )
        .await;
        assert_eq!(dups, 0, "effects committed twice");
        let seen = by_pid(pool.clone()).await;
        assert_eq!(
            seen.keys().copied().collect::<HashSet<_>>(),
            pids.iter().copied().collect::<HashSet<_>>(),
            "each process handled some, and no one else: {seen:?}"
        );
        eprintln!("effects by process (the first killed midway): {seen:?}");
        queue.close().await.unwrap();
    });
}

/// `sql`'s single `bigint` answer with `ids` bound as `$1`.
async fn scalar_bound(pool: &PgPool, sql: &str, ids: &[String]) -> i64 {
    sqlx::query(sql)
        .bind(ids)
        .fetch_one(pool)
        .await
        .unwrap()
        .get(0)
}

// ===== a client process killed inside its transaction =====

/// Child: on the queue `queue`, in one transaction, does `step` ("order": inserts order 1;
/// "job": inserts order 1 and schedules its timeout; "effect": takes the due job, writes its
/// effect and acks it with `ack_in`), prints the step's name on a line of its own and
/// waits, the transaction open, to be killed.
async fn hold_open_transaction(url: &str, step: &str, queue: &str) {
    let jobs = Builder::new()
        .lease(wheel_jobs::MIN_LEASE)
        .postgres(url, queue)
        .await
        .unwrap();
    let pool = test_pool(url).await;
    println!("\nready");
    let mut tx = pool.begin().await.unwrap();
    if step == "effect" {
        let mut consumer = jobs.consume();
        let delivery = next(&mut consumer).await;
        sqlx::query(&format!("INSERT INTO {} (id) VALUES ($1)", effects(queue)))
            .bind(delivery.id())
            .execute(&mut *tx)
            .await
            .unwrap();
        assert!(delivery.ack_in(&mut tx).await.unwrap());
    } else {
        sqlx::query(&format!(
            "INSERT INTO {} (oid, status) VALUES (1, 'unpaid')",
            orders_of(queue)
        ))
        .execute(&mut *tx)
        .await
        .unwrap();
        if step == "job" {
            let in_30_min = Duration::from_secs(1800);
            jobs.schedule_in(&mut tx, "unpaid-timeout:1", in_30_min, "1")
                .await
                .unwrap();
        }
    }
    println!("\n{step}");
    std::future::pending::<()>().await;
}

/// In a child process of the two tests below: holds its transaction open until killed
/// (`hold_open_transaction`, its role "step:queue"). `false` in the parent.
fn run_as_transaction_child() -> bool {
    let Some((role, url)) = child_role() else {
        return false;
    };
    let (step, queue) = role.split_once(':').unwrap();
    runtime().block_on(hold_open_transaction(url.to_str().unwrap(), step, queue));
    true
}

/// The parent's queue `name` (leases of `MIN_LEASE`, as the child's) and a pool on which
/// `create` made the test's table.
async fn queue_and_table(url: &str, name: &str, create: &str) -> (JobQueue, PgPool) {
    let pool = test_pool(url).await;
    sqlx::query(create).execute(&pool).await.unwrap();
    let queue = Builder::new()
        .lease(wheel_jobs::MIN_LEASE)
        .postgres(url, name)
        .await
        .unwrap();
    (queue, pool)
}

/// The orders table of the queue `queue`.
fn orders_of(queue: &str) -> String {
    format!("orders_{queue}")
}

/// Waits for the child's line `step`, then SIGKILLs it.
fn kill_after(
    mut child: crate::kill::Killed,
    lines: std::sync::mpsc::Receiver<String>,
    step: &str,
) {
    while lines.recv_timeout(DEADLINE).expect("child output") != step {}
    child.kill();
}

/// The seed's case, killed: a client process SIGKILLed after inserting the order (and
/// again after also scheduling its timeout), its transaction open, leaves neither the
/// order nor the job; the same transaction run again then commits both.
#[test]
fn a_postgres_client_killed_between_the_order_and_its_job_leaves_neither() {
    const TEST: &str =
        "postgres_faults::a_postgres_client_killed_between_the_order_and_its_job_leaves_neither";
    if run_as_transaction_child() {
        return;
    }
    let (rt, url, name) = (runtime(), shared().url(), fresh_queue());
    let orders = orders_of(&name);
    let create = format!("CREATE TABLE {orders} (oid bigint PRIMARY KEY, status text)");
    let (queue, pool) = rt.block_on(queue_and_table(&url, &name, &create));
    for step in ["order", "job"] {
        let (child, lines) = spawn_child(TEST, &format!("{step}:{name}"), Path::new(&url));
        kill_after(child, lines, step);
        rt.block_on(async {
            let count = format!("SELECT count(*) FROM {orders}");
            assert_eq!(
                scalar(&pool, &count).await,
                0,
                "killed after {step}: no order"
            );
            assert_eq!(queue.get("unpaid-timeout:1").await.unwrap(), None, "{step}");
            assert_eq!(queue.counts().await.unwrap().pending, 0, "{step}");
        });
    }
    rt.block_on(async {
        // Nothing was left locked: the same order and job commit (once the server has
        // noticed the killed connections and released their locks).
        let mut tx = pool.begin().await.unwrap();
        let insert = format!("INSERT INTO {orders} (oid, status) VALUES (1, 'unpaid')");
        sqlx::query(&insert).execute(&mut *tx).await.unwrap();
        let created = queue
            .schedule_in(&mut tx, "unpaid-timeout:1", Duration::from_secs(1800), "1")
            .await
            .unwrap();
        assert_eq!(created, wheel_jobs::Scheduled::Created);
        tx.commit().await.unwrap();
        assert!(queue.get("unpaid-timeout:1").await.unwrap().is_some());
        assert_eq!(queue.counts().await.unwrap().pending, 1);
        queue.close().await.unwrap();
    });
}

/// A worker process SIGKILLed between its effect and its commit (the effect written and
/// the job acked with `ack_in` in one open transaction): neither the effect nor the ack
/// happened, the job is delivered again once its lease ends, and its second run's effect
/// and ack commit once.
#[test]
fn a_postgres_worker_killed_between_its_effect_and_its_commit_leaves_neither() {
    const TEST: &str =
        "postgres_faults::a_postgres_worker_killed_between_its_effect_and_its_commit_leaves_neither";
    if run_as_transaction_child() {
        return;
    }
    let (rt, url, name) = (runtime(), shared().url(), fresh_queue());
    let table = effects(&name);
    let create = format!("CREATE TABLE {table} (id text PRIMARY KEY)");
    let (queue, pool) = rt.block_on(async {
        let (queue, pool) = queue_and_table(&url, &name, &create).await;
        queue
            .schedule("charge:1", Duration::ZERO, "1")
            .await
            .unwrap();
        (queue, pool)
    });
    let (child, lines) = spawn_child(TEST, &format!("effect:{name}"), Path::new(&url));
    kill_after(child, lines, "effect");
    rt.block_on(async {
        let count = format!("SELECT count(*) FROM {table}");
        assert_eq!(scalar(&pool, &count).await, 0, "the killed effect");
        assert!(
            queue.get("charge:1").await.unwrap().is_some(),
            "the killed ack"
        );
        let mut consumer = queue.consume();
        let again = next(&mut consumer).await;
        assert_eq!((again.id(), again.attempt()), ("charge:1", 2));
        let mut tx = pool.begin().await.unwrap();
        let insert = format!("INSERT INTO {table} (id) VALUES ($1)");
        sqlx::query(&insert)
            .bind(again.id())
            .execute(&mut *tx)
            .await
            .unwrap();
        assert!(again.ack_in(&mut tx).await.unwrap());
        tx.commit().await.unwrap();
        assert_eq!(scalar(&pool, &count).await, 1, "one effect");
        assert_eq!(queue.get("charge:1").await.unwrap(), None);
        let counts = queue.counts().await.unwrap();
        assert_eq!((counts.pending, counts.running, counts.dead), (0, 0, 0));
        queue.close().await.unwrap();
    });
}

/// A queue `orders` in a fresh schema (`prefix`), leased for 600 s if `long_lease`, whose
/// gate rebalance (`gate_timers`) always fails, counting its calls in the sequence
/// `timer_calls` (which no rollback undoes), with a gate of `kind` whose timer is due, which
/// every claim of that kind reports; the queue, a pool on its database and the schema's
/// quoted name.
async fn failing_rebalance(
    prefix: &str,
    kind: &str,
    long_lease: bool,
) -> (JobQueue, PgPool, String) {
    let schema = crate::postgres::fresh(prefix);
    let url = shared().url();
    let pool = test_pool(&url).await;
    let mut builder = Builder::new();
    builder.postgres_schema(&schema);
    if long_lease {
        builder.lease(Duration::from_secs(600));
    }
    let queue = builder.postgres(&url, "orders").await.unwrap();
    let quoted = format!("\"{schema}\"");
    let setup = format!(
        "CREATE SEQUENCE {quoted}.timer_calls; \
         CREATE OR REPLACE FUNCTION {quoted}.gate_timers(q text, kinds text[], most integer) \
         RETURNS integer LANGUAGE plpgsql AS $$ BEGIN \
         PERFORM nextval('{quoted}.timer_calls'); RAISE EXCEPTION 'gate_timers fails'; END $$; \
         INSERT INTO {quoted}.gates (queue, kind, key, wake_at) VALUES ('orders', '{kind}', 'k', 1);"
    );
    sqlx::Executor::execute(&pool, setup.as_str())
        .await
        .unwrap();
    (queue, pool, quoted)
}

/// How many times `failing_rebalance`'s `gate_timers` was called.
async fn rebalances(pool: &PgPool, quoted: &str) -> i64 {
    scalar(
        pool,
        &format!("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {quoted}.timer_calls"),
    )
    .await
}

/// A claim whose statement saw a gate's timer due delivers the jobs it leased even when the
/// rebalance after it (`gate_timers`) fails: logged, as after a merged claim; the jobs do
/// not wait out their leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_gate_rebalance_fails_still_delivers_its_jobs() {
    let (queue, pool, quoted) = failing_rebalance("wj_timers", "", true).await;
    queue.schedule("job", Duration::ZERO, "p").await.unwrap();
    let mut consumer = queue.consume();
    let d = tokio::time::timeout(DEADLINE, next(&mut consumer))
        .await
        .expect("delivered although the rebalance after its claim failed");
    assert_eq!((d.id(), d.attempt()), ("job", 1));
    assert!(d.ack().await.unwrap());
    let calls = rebalances(&pool, &quoted).await;
    assert!(calls >= 1, "{calls}");
    drop(consumer);
    queue.close().await.unwrap();
    sqlx::Executor::execute(&pool, format!("DROP SCHEMA {quoted} CASCADE").as_str())
        .await
        .unwrap();
}

/// A gate rebalance (`gate_timers`) that fails after every claim, its gate's timer due and
/// reported by each claim of `kind` (`None`: `consume()`, a claim of every kind, its own
/// statement; `Some`: `consume_kind`, a claim merged in `claims.rs`): an idle consumer
/// looks again after a pause, not at once in a loop (it claimed 823 times in one second,
/// each claim answering "look again at once"). The bound is a count of rebalances in a
/// one-second window, generous (a pause of `REBALANCE_RETRY`, 1 s, allows one or two).
async fn an_idle_consumer_whose_gate_rebalance_fails_pauses(kind: Option<&str>) {
    let (queue, pool, quoted) = failing_rebalance("wj_spin", kind.unwrap_or(""), true).await;
    let mut consumer = match kind {
        None => queue.consume(),
        Some(kind) => queue.consume_kind(kind),
    };
    // Idle: nothing to deliver; the consumer claims and waits for one second.
    let idle = tokio::time::timeout(Duration::from_secs(1), consumer.next()).await;
    assert!(
        idle.is_err(),
        "nothing to deliver: {:?}",
        idle.map(|d| d.map(|d| d.map(|d| d.id().to_owned())))
    );
    let calls = rebalances(&pool, &quoted).await;
    assert!(
        (1..=20).contains(&calls),
        "{calls} rebalances in one second of an idle consumer"
    );
    drop(consumer);
    queue.close().await.unwrap();
    sqlx::Executor::execute(&pool, format!("DROP SCHEMA {quoted} CASCADE").as_str())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_consumer_whose_gate_rebalance_fails_pauses_between_claims() {
    an_idle_consumer_whose_gate_rebalance_fails_pauses(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_consumer_whose_merged_claims_gate_rebalance_fails_pauses_between_claims() {
    an_idle_consumer_whose_gate_rebalance_fails_pauses(Some("x")).await;
}

/// A gate rebalance that fails after every claim (as above), its gate's timer of the kind
/// `x` due: a job of the kind `x` scheduled 200 ms ahead is delivered about when due, not
/// about `REBALANCE_RETRY` (1 s) late, by `consume()` (a statement of its own) and by
/// `consume_kind("x")` (merged): only the timer's look waits. The bound is generous: it
/// bounds a stall, not speed.
async fn a_failed_rebalance_delays_no_job_due_soon(kind: Option<&str>) {
    let (queue, pool, quoted) = failing_rebalance("wj_soon", "x", false).await;
    let mut consumer = match kind {
        None => queue.consume(),
        Some(kind) => queue.consume_kind(kind),
    };
    // An idle claim first (it sees the timer, its rebalance fails).
    assert!(
        tokio::time::timeout(Duration::from_millis(300), consumer.next())
            .await
            .is_err()
    );
    let options = wheel_jobs::JobOptions::kind("x");
    queue
        .schedule_with("x:soon", Duration::from_millis(200), "j", &options)
        .await
        .unwrap();
    let d = tokio::time::timeout(Duration::from_secs(5), consumer.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let late = SystemTime::now().duration_since(d.run_at()).unwrap();
    assert!(
        late < Duration::from_millis(500),
        "{kind:?}: x:soon delivered {late:?} after its run_at"
    );
    drop(consumer);
    queue.close().await.unwrap();
    sqlx::Executor::execute(&pool, format!("DROP SCHEMA {quoted} CASCADE").as_str())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_rebalance_delays_no_job_due_soon_for_every_kind() {
    a_failed_rebalance_delays_no_job_due_soon(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_rebalance_delays_no_job_due_soon_for_its_kind() {
    a_failed_rebalance_delays_no_job_due_soon(Some("x")).await;
}
