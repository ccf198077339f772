//! A peer for wheel-jobs' bench (`bench/src/bin/jobs.rs`): apalis 0.7.4 with its SQLite
//! backend (apalis-sql 0.7.4, sqlx 0.8), the same shapes of work on the same machine.
//!
//! ```text
//! cargo run --release -- [DIR] [normal]   # DIR default /tmp; `normal`: synchronous=NORMAL
//! ```
//!
//! Every connection uses WAL journaling and `synchronous=FULL` (each commit fsync'd, like a
//! wheel-jobs group commit) unless `normal` is given (apalis' own `setup` asks for NORMAL:
//! commits are not fsync'd, survive a process crash but not a power loss).
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apalis::prelude::*;
use apalis_sql::sqlite::SqliteStorage;
use apalis_sql::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use apalis_sql::Config;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Job {
    /// When it was meant to run, ms since the epoch (apalis' run_at is in whole seconds).
    due_ms: i64,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

async fn fresh(dir: &str, name: &str, normal: bool) -> SqliteStorage<Job> {
    let path = format!("{dir}/{name}");
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{path}{ext}"));
    }
    let options = SqliteConnectOptions::from_str(&format!("sqlite://{path}"))
        .unwrap()
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(if normal { SqliteSynchronous::Normal } else { SqliteSynchronous::Full });
    let pool = SqlitePoolOptions::new().max_connections(10).connect_with(options).await.unwrap();
    SqliteStorage::setup(&pool).await.unwrap();
    if !normal {
        // setup() set NORMAL on one pooled connection: put FULL back on all of them.
        for _ in 0..10 {
            apalis_sql::sqlx::query("PRAGMA synchronous = FULL;").execute(&pool).await.unwrap();
        }
    }
    let config = Config::new("bench")
        .set_buffer_size(100)
        .set_poll_interval(Duration::from_millis(10));
    SqliteStorage::new_with_config(pool, config)
}

async fn schedules(storage: &SqliteStorage<Job>, schedulers: usize, per: usize) -> f64 {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..schedulers {
        let mut storage = storage.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..per {
                let due = chrono::Utc::now().timestamp() + 3600;
                storage.schedule(Job { due_ms: due * 1000 }, due).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (schedulers * per) as f64 / start.elapsed().as_secs_f64()
}

/// Runs a no-op worker (concurrency 256) until `n` jobs were handled; returns lateness (ms).
async fn drain(storage: SqliteStorage<Job>, n: u64) -> (Duration, Vec<i64>) {
    let handled = Arc::new(AtomicU64::new(0));
    let lateness = Arc::new(Mutex::new(Vec::with_capacity(n as usize)));
    let start = Instant::now();
    let worker = {
        let (handled, lateness) = (handled.clone(), lateness.clone());
        WorkerBuilder::new("bench-worker")
            .concurrency(256)
            .backend(storage.clone())
            .build_fn(move |job: Job| {
                let (handled, lateness) = (handled.clone(), lateness.clone());
                async move {
                    lateness.lock().unwrap().push(now_ms() - job.due_ms);
                    handled.fetch_add(1, Relaxed);
                    Ok::<(), Error>(())
                }
            })
    };
    let worker = worker.on_event(|e| {
        if std::env::var_os("AP_DEBUG").is_some() {
            eprintln!("event: {e:?}");
        }
    });
    let run = tokio::spawn(worker.run());
    // Done when every job was handled and acked (status Done).
    let mut polls = 0u64;
    loop {
        tokio::time::sleep(Duration::from_millis(5)).await;
        polls += 1;
        if std::env::var_os("AP_DEBUG").is_some() && polls % 200 == 0 {
            eprintln!("handled {}", handled.load(Relaxed));
        }
        if handled.load(Relaxed) >= n {
            let (done,): (i64,) = apalis_sql::sqlx::query_as("SELECT COUNT(*) FROM Jobs WHERE status = 'Done'")
                .fetch_one(storage.pool())
                .await
                .unwrap();
            if done as u64 >= n {
                break;
            }
        }
    }
    let took = start.elapsed();
    run.abort();
    let late = std::mem::take(&mut *lateness.lock().unwrap());
    (took, late)
}

async fn load(storage: &SqliteStorage<Job>, n: usize, due_ms: impl Fn(usize) -> i64) {
    // One transaction per 10k jobs, like wheel-jobs' schedule_many (apalis has no bulk call).
    for base in (0..n).step_by(10_000) {
        let mut tx = storage.pool().begin().await.unwrap();
        for i in base..(base + 10_000).min(n) {
            let due = due_ms(i);
            let job = serde_json::to_string(&Job { due_ms: due }).unwrap();
            apalis_sql::sqlx::query(
                "INSERT INTO Jobs VALUES (?1, ?2, 'bench', 'Pending', 0, 25, ?3, NULL, NULL, NULL, NULL, 0)",
            )
            .bind(job)
            .bind(TaskId::new().to_string())
            .bind(due.div_euclid(1000))
            .execute(&mut *tx)
            .await
            .unwrap();
        }
        tx.commit().await.unwrap();
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = args.get(1).cloned().unwrap_or_else(|| "/tmp".into());
    let normal = args.iter().any(|a| a == "normal");
    println!("apalis 0.7.4 + SQLite (WAL, synchronous={})", if normal { "NORMAL" } else { "FULL" });

    let s = fresh(&dir, "ap-one.db", normal).await;
    let one = schedules(&s, 1, 300).await;
    let s = fresh(&dir, "ap-many.db", normal).await;
    let many = schedules(&s, 64, 200).await;
    println!("schedules/s: 1 scheduler {one:.0}, 64 schedulers {many:.0}");

    let s = fresh(&dir, "ap-bulk.db", normal).await;
    let start = Instant::now();
    load(&s, 100_000, |_| now_ms() + 3_600_000).await;
    println!("bulk insert, 10k per transaction: {:.0} jobs/s", 100_000.0 / start.elapsed().as_secs_f64());

    let n: usize = std::env::var("AP_DUE").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let s = fresh(&dir, "ap-due.db", normal).await;
    let past = now_ms() - 2_000;
    load(&s, n, |_| past).await;
    let (took, _) = drain(s, n as u64).await;
    println!("deliveries + acks/s ({n} due, concurrency 256, no-op handler): {:.0}", n as f64 / took.as_secs_f64());

    let late_n: usize = std::env::var("AP_LATE").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let s = fresh(&dir, "ap-late.db", normal).await;
    let start = now_ms() + 3_000;
    let step = 10_000.0 / late_n as f64;
    load(&s, late_n, |i| start + (i as f64 * step) as i64).await;
    let (_, mut late) = drain(s, late_n as u64).await;
    late.sort();
    let p = |q: f64| late[((late.len() - 1) as f64 * q).round() as usize];
    println!(
        "lateness after due time ({late_n} jobs due over 10 s): p50 {} ms, p99 {} ms, max {} ms",
        p(0.5),
        p(0.99),
        late.last().unwrap()
    );
}
