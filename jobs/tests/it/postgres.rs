//! The behavioural suite on PostgreSQL (feature `postgres`), and the cases only PostgreSQL
//! has: transactional enqueue and completion, wake-ups across handles on commit, the
//! schema's versions, hostile names.
//!
//! The server is the test binary's own (`support/postgres.rs`: `initdb` into a temporary
//! directory, stopped when the binary exits); every harness opens a fresh queue name in it.

run_shared_suite!(crate::support::postgres::harness());

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use wheel_jobs::sqlx::{self, Row};
use wheel_jobs::{Builder, JobQueue, JobState, Scheduled};

use crate::suite::{hour_ticks, idle_consumer};
use crate::support::{ms, next, Harness};

/// The test server's URL (its unix socket).
pub(crate) fn url() -> String {
    crate::support::postgres::shared().url()
}

/// A name no other test (of this run or an earlier one) uses.
pub(crate) fn fresh(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{prefix}_{}_{}_{}",
        std::process::id(),
        nanos,
        N.fetch_add(1, SeqCst)
    )
}

pub(crate) async fn pool() -> sqlx::PgPool {
    sqlx::PgPool::connect(&url()).await.expect("test pool")
}

/// Waits until no connection named `application_name` is left on the server (a killed
/// child's last commit lands before the checks read); fails past `deadline`.
pub(crate) async fn connections_gone(
    pool: &sqlx::PgPool,
    application_name: &str,
    deadline: std::time::Instant,
) {
    loop {
        let left: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
                .bind(application_name)
                .fetch_one(pool)
                .await
                .unwrap();
        if left == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the children's connections stay"
        );
        tokio::time::sleep(ms(5)).await;
    }
}

/// A fresh `orders` table: (oid, status).
async fn orders(pool: &sqlx::PgPool) -> String {
    let table = fresh("orders");
    sqlx::query(&format!(
        "CREATE TABLE {table} (oid bigint PRIMARY KEY, status text NOT NULL)"
    ))
    .execute(pool)
    .await
    .unwrap();
    table
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_order_and_its_job_commit_or_roll_back_together() {
    let pool = pool().await;
    let table = orders(&pool).await;
    let queue = Builder::new()
        .postgres_pool(pool.clone(), &fresh("shop"))
        .await
        .unwrap();
    let insert = format!("INSERT INTO {table} (oid, status) VALUES ($1, 'unpaid')");
    let in_48h = Duration::from_secs(48 * 3600);

    // Rolled back: neither the order nor the job.
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(&insert)
        .bind(1_i64)
        .execute(&mut *tx)
        .await
        .unwrap();
    let created = queue
        .schedule_in(&mut tx, "rate:1", in_48h, "5")
        .await
        .unwrap();
    assert_eq!(created, Scheduled::Created);
    tx.rollback().await.unwrap();
    assert_eq!(queue.get("rate:1").await.unwrap(), None);
    assert_eq!(queue.pending().await.unwrap(), 0);

    // Committed: both.
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(&insert)
        .bind(2_i64)
        .execute(&mut *tx)
        .await
        .unwrap();
    queue
        .schedule_in(&mut tx, "unpaid-timeout:2", Duration::from_secs(1800), "2")
        .await
        .unwrap();
    // Not visible outside the transaction before its commit.
    assert_eq!(queue.get("unpaid-timeout:2").await.unwrap(), None);
    tx.commit().await.unwrap();
    let job = queue
        .get("unpaid-timeout:2")
        .await
        .unwrap()
        .expect("committed");
    assert_eq!(job.state(), JobState::Pending);
    assert_eq!(queue.pending().await.unwrap(), 1);

    // "Paid" cancels the timeout in the payment's transaction; a rollback keeps it.
    let pay = format!("UPDATE {table} SET status = 'paid' WHERE oid = $1");
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(&pay)
        .bind(2_i64)
        .execute(&mut *tx)
        .await
        .unwrap();
    assert!(queue.cancel_in(&mut tx, "unpaid-timeout:2").await.unwrap());
    tx.rollback().await.unwrap();
    assert!(queue.get("unpaid-timeout:2").await.unwrap().is_some());
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(&pay)
        .bind(2_i64)
        .execute(&mut *tx)
        .await
        .unwrap();
    assert!(queue.cancel_in(&mut tx, "unpaid-timeout:2").await.unwrap());
    tx.commit().await.unwrap();
    assert_eq!(queue.get("unpaid-timeout:2").await.unwrap(), None);
    let status: String = sqlx::query(&format!("SELECT status FROM {table} WHERE oid = 2"))
        .fetch_one(&pool)
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "paid");
    assert_eq!(queue.counts().await.unwrap().pending, 0);

    // The transactional forms' futures can be spawned.
    fn assert_send<T: Send>(_: &T) {}
    let mut conn = pool.acquire().await.unwrap();
    let scheduling = queue.schedule_in(&mut conn, "s", Duration::ZERO, "p");
    assert_send(&scheduling);
    drop(scheduling);
    assert_send(&queue.cancel_in(&mut conn, "s"));
    assert_send(&queue.reschedule_in(&mut conn, "s", Duration::ZERO));
    drop(conn);

    // Moved in a transaction.
    let mut tx = pool.begin().await.unwrap();
    queue
        .schedule_in(&mut tx, "later", in_48h, "p")
        .await
        .unwrap();
    assert!(queue
        .reschedule_in(&mut tx, "later", Duration::ZERO)
        .await
        .unwrap());
    tx.commit().await.unwrap();
    let mut consumer = queue.consume();
    assert_eq!(next(&mut consumer).await.id(), "later");
    queue.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_wakes_an_idle_consumer_of_another_handle() {
    let pool = pool().await;
    let name = fresh("wake");
    let timer = hour_ticks();
    let mut builder = Builder::new();
    builder
        .timer(timer.clone())
        .safety_wakeup(Duration::from_secs(3600));
    let sleeper = builder.postgres(&url(), &name).await.unwrap();
    let writer = Builder::new()
        .postgres_pool(pool.clone(), &name)
        .await
        .unwrap();
    let waiting = idle_consumer(&sleeper, &timer).await;
    let mut tx = pool.begin().await.unwrap();
    writer
        .schedule_in(&mut tx, "woken", Duration::ZERO, "p")
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let woken = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the commit's notification wakes the consumer")
        .unwrap();
    assert_eq!(woken, "woken");
    sleeper.close().await.unwrap();
}

/// Only a job due within a minute of its commit sends a wake-up: one 48 h ahead (through
/// `schedule_in`, a plain schedule, a reschedule) sends none, so its transaction does not
/// queue behind every other notifying commit. Notifications come in commit order, so the
/// first one of this queue is the due job's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_wakes_no_one_for_a_job_due_in_48_hours() {
    let pool = pool().await;
    let name = fresh("horizon");
    let queue = Builder::new()
        .postgres_pool(pool.clone(), &name)
        .await
        .unwrap();
    let mut listener = sqlx::postgres::PgListener::connect(&url()).await.unwrap();
    listener.listen("wheel_jobs:wake").await.unwrap();
    let in_48h = Duration::from_secs(48 * 3600);
    let mut tx = pool.begin().await.unwrap();
    queue
        .schedule_in(&mut tx, "rate:1", in_48h, "5")
        .await
        .unwrap();
    tx.commit().await.unwrap();
    queue.schedule("rate:2", in_48h, "5").await.unwrap();
    assert!(queue.reschedule("rate:1", in_48h * 2).await.unwrap());
    queue.schedule("due", Duration::ZERO, "p").await.unwrap();
    let due = queue.get("due").await.unwrap().unwrap().run_at();
    let due = due
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let first = loop {
        let note = tokio::time::timeout(Duration::from_secs(30), listener.recv())
            .await
            .expect("the due job's wake-up")
            .unwrap();
        let (at, queue_name) = note.payload().split_once(' ').unwrap();
        if queue_name == name {
            break at.parse::<u128>().unwrap();
        }
    };
    assert_eq!(
        first, due,
        "the first wake-up of the queue is the due job's"
    );
    queue.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_in_commits_the_effect_with_the_ack_and_fails_on_a_lost_lease() {
    let pool = pool().await;
    let table = orders(&pool).await;
    sqlx::query(&format!("INSERT INTO {table} VALUES (7, 'finished')"))
        .execute(&pool)
        .await
        .unwrap();
    let queue = Builder::new()
        .postgres_pool(pool.clone(), &fresh("ack"))
        .await
        .unwrap();
    queue.schedule("rate:7", Duration::ZERO, "5").await.unwrap();
    let rate = format!("UPDATE {table} SET status = 'rated' WHERE oid = 7");
    let mut consumer = queue.consume();
    let first = next(&mut consumer).await;
    assert_eq!(first.attempt(), 1);

    // Rolled back after a good ack_in: the job stays leased to this delivery.
    let mut tx = pool.begin().await.unwrap();
    assert!(first.ack_in(&mut tx).await.unwrap());
    tx.rollback().await.unwrap();
    assert_eq!(
        queue.get("rate:7").await.unwrap().unwrap().state(),
        JobState::Running
    );

    // The lease is lost: the job was given back and delivered again.
    assert!(first.retry(ms(0)).await.unwrap());
    let second = next(&mut consumer).await;
    assert_eq!(second.attempt(), 2);
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(&rate).execute(&mut *tx).await.unwrap();
    assert!(!first.ack_in(&mut tx).await.unwrap(), "a stale delivery");
    tx.rollback().await.unwrap();

    // The holder's effect and ack commit together.
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(&rate).execute(&mut *tx).await.unwrap();
    assert!(second.ack_in(&mut tx).await.unwrap());
    tx.commit().await.unwrap();
    assert_eq!(queue.get("rate:7").await.unwrap(), None);
    assert!(!second.ack().await.unwrap(), "already acked");
    let status: String = sqlx::query(&format!("SELECT status FROM {table} WHERE oid = 7"))
        .fetch_one(&pool)
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "rated");
    let counts = queue.counts().await.unwrap();
    assert_eq!((counts.pending, counts.running, counts.dead), (0, 0, 0));
    queue.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_forms_need_a_postgres_queue() {
    let dir = crate::support::temp_dir();
    let embedded = JobQueue::open(dir.path().join("jobs.redb")).await.unwrap();
    let pool = pool().await;
    let mut conn = pool.acquire().await.unwrap();
    let err = embedded
        .schedule_in(&mut conn, "x", Duration::ZERO, "p")
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    embedded.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_ids_and_queue_names_are_data() {
    let hostile_queue = format!("'; DROP TABLE wheel_jobs.jobs; -- \"{}\"", fresh("q"));
    let queue = Builder::new()
        .postgres(&url(), &hostile_queue)
        .await
        .unwrap();
    let ids = [
        "x'); DROP TABLE \"wheel_jobs\".\"jobs\"; --",
        "\"; DELETE FROM wheel_jobs.dead; --",
        "$1 $2 \\ % _ @ ' \"",
        "名前@2026-12-01T12:00:00Z",
    ];
    for id in ids {
        assert_eq!(
            queue.schedule(id, Duration::ZERO, id).await.unwrap(),
            Scheduled::Created,
            "{id}"
        );
        assert_eq!(
            queue.get(id).await.unwrap().unwrap().payload(),
            id.as_bytes()
        );
    }
    let page = queue
        .list(JobState::Pending, &wheel_jobs::ListOptions::new())
        .await
        .unwrap();
    assert_eq!(page.jobs().len(), ids.len());
    let mut consumer = queue.consume();
    for _ in ids {
        let delivery = next(&mut consumer).await;
        assert!(ids.contains(&delivery.id()));
        assert!(delivery.ack().await.unwrap());
    }
    assert_eq!(queue.counts().await.unwrap().pending, 0);
    // A NUL, which PostgreSQL's text refuses, is refused as input, changing nothing.
    let err = queue
        .schedule("a\0b", Duration::ZERO, "p")
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    // The tables are all there: another queue works.
    let other = crate::support::postgres::harness();
    let plain = other.open(&Builder::new()).await.unwrap();
    plain
        .schedule("still-here", Duration::ZERO, "p")
        .await
        .unwrap();
    assert_eq!(plain.pending().await.unwrap(), 1);
    plain.close().await.unwrap();
    queue.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_is_refused_naming_both_versions() {
    let schema = fresh("wj_newer");
    let mut builder = Builder::new();
    builder.postgres_schema(&schema);
    let queue = builder.postgres(&url(), "orders").await.unwrap();
    queue.schedule("kept", Duration::ZERO, "p").await.unwrap();
    queue.close().await.unwrap();
    let pool = pool().await;
    sqlx::query(&format!(
        "UPDATE \"{schema}\".schema_version SET version = 99"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let err = builder.postgres(&url(), "orders").await.unwrap_err();
    assert!(err.is_invalid_config(), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("version 99") && text.contains("version 4"),
        "{text}"
    );
    sqlx::query(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(&pool)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_processes_opening_at_once_migrate_once() {
    let schema = fresh("wj_race");
    let mut opens = Vec::new();
    for i in 0..8 {
        let schema = schema.clone();
        opens.push(tokio::spawn(async move {
            Builder::new()
                .postgres_schema(&schema)
                .postgres(&url(), &format!("q{i}"))
                .await
        }));
    }
    for open in opens {
        let queue = open.await.unwrap().expect("every open succeeds");
        queue.schedule("j", Duration::ZERO, "p").await.unwrap();
        assert_eq!(queue.pending().await.unwrap(), 1);
        queue.close().await.unwrap();
    }
    let pool = pool().await;
    sqlx::query(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(&pool)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_names_and_an_unreachable_server_are_clear_errors() {
    for schema in ["Bad", "pg_x", "a;b", ""] {
        let err = Builder::new()
            .postgres_schema(schema)
            .postgres(&url(), "q")
            .await
            .unwrap_err();
        assert!(err.is_invalid_config(), "{schema:?}: {err}");
    }
    let err = Builder::new().postgres(&url(), "").await.unwrap_err();
    assert!(err.is_invalid_config(), "{err}");
    let err = Builder::new().postgres("not a url", "q").await.unwrap_err();
    assert!(err.is_invalid_config(), "{err}");
    // Nothing listens on port 1: unavailable, within the timeout.
    let err = Builder::new()
        .postgres_timeout(Some(ms(500)))
        .postgres("postgres://nobody@127.0.0.1:1/db", "q")
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err}");
}

/// The test server's URL with another user (and password).
fn url_as(user: &str) -> String {
    let url = url();
    let (scheme, rest) = url.split_once("://").expect("a postgres:// URL");
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{user}@{host}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_user_is_unauthorized_at_once() {
    let err = Builder::new()
        .postgres_timeout(None)
        .postgres(&url_as("no_such_role_wheel_jobs:secret"), "q")
        .await
        .unwrap_err();
    assert!(err.is_unauthorized(), "{err}");
    // Not retried until a timeout: there is none, and the answer came.
    assert!(!err.is_unavailable());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_handles_compete_and_each_job_is_acked_once() {
    const JOBS: usize = 5_000;
    let name = fresh("compete");
    let a = Builder::new().postgres(&url(), &name).await.unwrap();
    let b = Builder::new().postgres(&url(), &name).await.unwrap();
    let jobs = (0..JOBS).map(|i| (format!("job-{i}"), Duration::ZERO, "p"));
    let created = a.schedule_many(jobs).await.unwrap();
    assert!(created.iter().all(|s| *s == Scheduled::Created));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(char, String)>();
    let mut workers = Vec::new();
    for (who, q) in [('a', a.clone()), ('b', b.clone())] {
        let tx = tx.clone();
        workers.push(tokio::spawn(async move {
            q.run(32, move |d| {
                let tx = tx.clone();
                async move {
                    tx.send((who, d.id().to_owned())).unwrap();
                    Ok::<(), String>(())
                }
            })
            .await
        }));
    }
    let mut seen = std::collections::HashMap::new();
    let mut by = std::collections::HashMap::new();
    for _ in 0..JOBS {
        let (who, id) = rx.recv().await.unwrap();
        *seen.entry(id).or_insert(0) += 1;
        *by.entry(who).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), JOBS, "each job once");
    assert!(seen.values().all(|&n| n == 1));
    assert_eq!(by.len(), 2, "both handles took part: {by:?}");
    // Every ack lands: nothing pending or running is left, and the counters agree.
    loop {
        let counts = a.counts().await.unwrap();
        if counts.running == 0 {
            assert_eq!((counts.pending, counts.dead), (0, 0));
            break;
        }
        tokio::time::sleep(ms(20)).await;
    }
    a.close().await.unwrap();
    b.close().await.unwrap();
    for w in workers {
        w.await.unwrap().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_handler_acks_in_its_own_transaction() {
    let pool = pool().await;
    let table = orders(&pool).await;
    sqlx::query(&format!("INSERT INTO {table} VALUES (9, 'finished')"))
        .execute(&pool)
        .await
        .unwrap();
    let queue = Builder::new()
        .postgres_pool(pool.clone(), &fresh("run_ack_in"))
        .await
        .unwrap();
    queue.schedule("rate:9", Duration::ZERO, "9").await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = {
        let (queue, pool, table) = (queue.clone(), pool.clone(), table.clone());
        tokio::spawn(async move {
            queue
                .run(4, move |job| {
                    let (pool, table, tx) = (pool.clone(), table.clone(), tx.clone());
                    async move {
                        let mut t = pool.begin().await.map_err(|e| e.to_string())?;
                        sqlx::query(&format!(
                            "UPDATE {table} SET status = 'rated' WHERE oid = 9"
                        ))
                        .execute(&mut *t)
                        .await
                        .map_err(|e| e.to_string())?;
                        if job.ack_in(&mut t).await.map_err(|e| e.to_string())? {
                            t.commit().await.map_err(|e| e.to_string())?;
                        }
                        tx.send(job.id().to_owned()).unwrap();
                        Ok::<(), String>(())
                    }
                })
                .await
        })
    };
    assert_eq!(rx.recv().await.unwrap(), "rate:9");
    let status: String = sqlx::query(&format!("SELECT status FROM {table} WHERE oid = 9"))
        .fetch_one(&pool)
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "rated");
    assert_eq!(queue.get("rate:9").await.unwrap(), None);
    queue.close().await.unwrap();
    worker.await.unwrap().unwrap();
}

/// Waits until a statement of another connection waits on a lock `holder`'s backend holds.
async fn blocked_by(pool: &sqlx::PgPool, holder: i32) {
    loop {
        let waiting: i64 = sqlx::query(
            "SELECT count(*) FROM pg_locks l WHERE NOT l.granted \
             AND $1 = ANY(pg_blocking_pids(l.pid))",
        )
        .bind(holder)
        .fetch_one(pool)
        .await
        .unwrap()
        .get(0);
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_waiting_on_a_kill_answers_exists_and_leaves_the_job_dead() {
    let pool = pool().await;
    let name = fresh("kill");
    let queue = Builder::new()
        .postgres_pool(pool.clone(), &name)
        .await
        .unwrap();
    queue.schedule("x", Duration::ZERO, "p").await.unwrap();

    // What a claim's kill does to `x`, left uncommitted.
    let mut tx = pool.begin().await.unwrap();
    let holder: i32 = sqlx::query("SELECT pg_backend_pid()")
        .fetch_one(&mut *tx)
        .await
        .unwrap()
        .get(0);
    sqlx::query(
        "WITH killed AS (DELETE FROM wheel_jobs.jobs WHERE queue = $1 AND id = 'x' \
           RETURNING queue, id, run_at, attempt, last_error, payload) \
         INSERT INTO wheel_jobs.dead (queue, id, run_at, attempt, died_at, last_error, payload) \
         SELECT queue, id, run_at, attempt, run_at, last_error, payload FROM killed",
    )
    .bind(&name)
    .execute(&mut *tx)
    .await
    .unwrap();

    // A Keep reads `x` pending in its snapshot and answers at once, without touching it.
    assert_eq!(
        queue.schedule("x", Duration::ZERO, "k").await.unwrap(),
        Scheduled::Exists
    );
    // A Replace of the pending `x` waits on the kill's row.
    let scheduling = {
        let queue = queue.clone();
        let replace = wheel_jobs::JobOptions::new().dedup(wheel_jobs::Dedup::Replace);
        tokio::spawn(async move {
            queue
                .schedule_with("x", Duration::ZERO, "q", &replace)
                .await
        })
    };
    blocked_by(&pool, holder).await;
    tx.commit().await.unwrap();
    assert_eq!(scheduling.await.unwrap().unwrap(), Scheduled::Exists);
    assert_eq!(
        queue.get("x").await.unwrap().unwrap().state(),
        JobState::Dead
    );
    let rows = |table: &'static str| {
        let (pool, name) = (pool.clone(), name.clone());
        async move {
            let n: i64 = sqlx::query(&format!(
                "SELECT count(*) FROM wheel_jobs.{table} WHERE queue = $1"
            ))
            .bind(&name)
            .fetch_one(&pool)
            .await
            .unwrap()
            .get(0);
            n as u64
        }
    };
    let counts = queue.counts().await.unwrap();
    assert_eq!(
        (counts.pending + counts.running, counts.dead),
        (rows("jobs").await, rows("dead").await)
    );
    assert_eq!((counts.pending, counts.dead), (0, 1));
    queue.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_waits_for_a_call_under_way_and_refuses_new_ones() {
    let pool = pool().await;
    let name = fresh("closing");
    let queue = Builder::new()
        .postgres_pool(pool.clone(), &name)
        .await
        .unwrap();
    queue.schedule("x", Duration::ZERO, "p").await.unwrap();

    // An application's transaction holding the job's row: a cancel of it waits.
    let mut tx = pool.begin().await.unwrap();
    let holder: i32 = sqlx::query("SELECT pg_backend_pid()")
        .fetch_one(&mut *tx)
        .await
        .unwrap()
        .get(0);
    sqlx::query("SELECT 1 FROM wheel_jobs.jobs WHERE queue = $1 AND id = 'x' FOR UPDATE")
        .bind(&name)
        .execute(&mut *tx)
        .await
        .unwrap();
    let cancelling = {
        let queue = queue.clone();
        tokio::spawn(async move { queue.cancel("x").await })
    };
    blocked_by(&pool, holder).await;
    let closing = {
        let queue = queue.clone();
        tokio::spawn(async move { queue.close().await })
    };
    // `close` refuses new calls at once but is still waiting for the cancel.
    loop {
        match queue.pending().await {
            Err(err) if err.is_closed() => break,
            Ok(_) => tokio::task::yield_now().await,
            Err(err) => panic!("{err}"),
        }
    }
    assert!(
        !closing.is_finished(),
        "close returned before the cancel ended"
    );
    tx.commit().await.unwrap();
    assert!(
        cancelling.await.unwrap().unwrap(),
        "the cancel ran to its end"
    );
    closing.await.unwrap().unwrap();
    // Nothing of the handle touches the tables now: the schema's rows are as it left them.
    let left: i64 = sqlx::query("SELECT count(*) FROM wheel_jobs.jobs WHERE queue = $1")
        .bind(&name)
        .fetch_one(&pool)
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_schedule_in_stalls_only_its_own_id() {
    let pool = pool().await;
    let queue = Builder::new()
        .postgres_pool(pool.clone(), &fresh("stall"))
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    let holder: i32 = sqlx::query("SELECT pg_backend_pid()")
        .fetch_one(&mut *tx)
        .await
        .unwrap()
        .get(0);
    queue
        .schedule_in(&mut tx, "x", Duration::ZERO, "p")
        .await
        .unwrap();
    // The same id waits for the open transaction...
    let same = {
        let queue = queue.clone();
        tokio::spawn(async move { queue.schedule("x", Duration::ZERO, "q").await })
    };
    blocked_by(&pool, holder).await;
    // ...and another id, though it may share the waiting batch, does not.
    assert_eq!(
        queue.schedule("y", Duration::ZERO, "q").await.unwrap(),
        Scheduled::Created
    );
    tx.commit().await.unwrap();
    assert_eq!(same.await.unwrap().unwrap(), Scheduled::Exists);
    let counts = queue.counts().await.unwrap();
    assert_eq!(counts.pending, 2);
    queue.close().await.unwrap();
}
