//! The order auto-rating scenario, with a crash in the middle.
//!
//! ```text
//! cargo run --release -p wheel-jobs --example jobs
//! ```
//!
//! A shop rates an order 5 stars automatically some time after delivery, unless the customer
//! rated it first. This example schedules 3,000 auto-ratings due over the next 8 seconds
//! (scaled down from 48 hours), cancels 10 % of them (customers who rated first), and
//! starts a worker **process** that rates orders as they fall due. Midway it kills the
//! worker with SIGKILL, starts a fresh one on the same store, and at the end checks, from
//! the ratings the workers wrote:
//!
//! - every order not cancelled was rated exactly once, and no cancelled order was;
//! - the store holds nothing but the next occurrence of the daily digest (every order job
//!   acked, none dead).
//!
//! Beside the one-off ratings, the shop sends a daily digest at 20:00 Shanghai time: a
//! recurring series (`schedule_recurring`) whose one pending occurrence survives the kill
//! like any job; the example prints when it runs next. Whichever worker claims an
//! occurrence creates the next one in the same step, so no process runs a scheduler.
//!
//! Delivery is at-least-once: jobs the killed worker had leased but not acked are delivered
//! again once their lease (2 s here) ends. The handler is idempotent, keyed by the job id
//! (it skips orders already rated), which turns that into exactly-once *effects*; the report
//! counts those redeliveries. It exits non-zero if a check fails.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use clap::Parser;
use wheel_jobs::{JobQueue, Recurrence, Scheduled};

/// The order auto-rating scenario with a worker killed midway (see the module docs).
#[derive(Parser, Debug)]
#[command(name = "jobs")]
struct Args {
    /// Internal: run as the worker process on the store in DIR.
    #[arg(long, value_name = "DIR", hide = true)]
    worker: Option<PathBuf>,
}

const ORDERS: usize = 3_000;
const SPREAD: Duration = Duration::from_secs(8);
const LEASE: Duration = Duration::from_secs(2);
const DIGEST: &str = "digest";

fn order_id(n: usize) -> String {
    format!("rate:order-{n:05}")
}

/// The worker process: rate due orders until the store is empty, then exit.
async fn worker(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let queue = JobQueue::builder()
        .lease(LEASE)
        .open(dir.join("jobs.redb"))
        .await?;
    // The ratings written so far (by earlier workers too): the handler's idempotency key.
    let log_path = dir.join("ratings.log");
    let rated: HashSet<String> = match std::fs::File::open(&log_path) {
        Ok(file) => BufReader::new(file)
            .lines()
            .map_while(Result::ok)
            .filter_map(|l| {
                l.strip_prefix("rated ")
                    .and_then(|r| r.split(' ').next())
                    .map(str::to_owned)
            })
            .collect(),
        Err(_) => HashSet::new(),
    };
    let rated = Arc::new(Mutex::new(rated));
    let log = Arc::new(Mutex::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?,
    ));

    let run = {
        let queue = queue.clone();
        tokio::spawn(async move {
            queue
                .run(32, move |job| {
                    let (rated, log) = (rated.clone(), log.clone());
                    async move {
                        if job.id().starts_with("digest@") {
                            // Only if the run happens to span 20:00 in Shanghai.
                            println!("\nsending the daily digest of {:?}", job.run_at());
                            return Ok(());
                        }
                        let late = SystemTime::now()
                            .duration_since(job.run_at())
                            .unwrap_or_default();
                        // Idempotent effect: rate each order once, whatever the deliveries.
                        let line = if rated.lock().unwrap().insert(job.id().to_owned()) {
                            format!(
                                "rated {} {} {}\n",
                                job.id(),
                                job.attempt(),
                                late.as_micros()
                            )
                        } else {
                            format!("skipped {} {}\n", job.id(), job.attempt())
                        };
                        log.lock().unwrap().write_all(line.as_bytes())?;
                        // Then tell the customer (a slow call): a kill here loses the ack.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        Ok::<(), std::io::Error>(())
                    }
                })
                .await
        })
    };
    // Done when nothing is left but the series' own pending occurrences.
    let series = queue.list_recurring().await?.len() as u64;
    while queue.pending().await? > series || queue.running().await? > 0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    queue.close().await?;
    run.await??;
    Ok(())
}

struct Log {
    rated: HashMap<String, u32>,
    skipped: usize,
    lateness_us: Vec<u64>,
}

fn read_log(path: &Path) -> Log {
    let mut log = Log {
        rated: HashMap::new(),
        skipped: 0,
        lateness_us: Vec::new(),
    };
    let Ok(file) = std::fs::File::open(path) else {
        return log;
    };
    for line in BufReader::new(file).lines().map_while(Result::ok) {
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            ["rated", id, attempt, late] => {
                *log.rated.entry((*id).to_owned()).or_insert(0) += 1;
                if *attempt == "1" {
                    log.lateness_us.extend(late.parse::<u64>().ok());
                }
            }
            ["skipped", ..] => log.skipped += 1,
            _ => {} // a line cut by the kill: its order is rated again by the next worker
        }
    }
    log
}

/// A wall-clock time in RFC 3339 UTC.
fn utc(at: Option<SystemTime>) -> String {
    let Some(at) = at else {
        return "never".to_owned();
    };
    let nanos = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    jiff::Timestamp::from_nanosecond(nanos as i128)
        .map_or_else(|_| format!("{at:?}"), |t| t.to_string())
}

fn spawn_worker(dir: &Path) -> std::io::Result<Child> {
    Command::new(std::env::current_exe()?)
        .arg("--worker")
        .arg(dir)
        .spawn()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = Args::parse().worker {
        return worker(&dir).await;
    }

    let dir = tempfile::tempdir()?;
    let dir_path: PathBuf = dir.path().to_owned();
    let queue = JobQueue::builder()
        .lease(LEASE)
        .open(dir_path.join("jobs.redb"))
        .await?;
    // Due from 1 s on, so the first ones are not already late when the worker starts.
    let start = SystemTime::now() + Duration::from_secs(1);
    let jobs = (0..ORDERS).map(|n| {
        let due = start + SPREAD.mul_f64(((n as u64 * 2_654_435_761) % 10_000) as f64 / 10_000.0);
        (order_id(n), due, "5 stars")
    });
    assert!(queue
        .schedule_many(jobs)
        .await?
        .iter()
        .all(|s| *s == Scheduled::Created));
    // Customers rating first, concurrently: their cancels share commits.
    let mut cancels = tokio::task::JoinSet::new();
    for n in (0..ORDERS).step_by(10) {
        let queue = queue.clone();
        cancels.spawn(async move { (order_id(n), queue.cancel(&order_id(n)).await) });
    }
    let mut cancelled = HashSet::new();
    while let Some(done) = cancels.join_next().await {
        let (id, removed) = done?;
        if removed? {
            cancelled.insert(id);
        }
    }
    let expected = ORDERS - cancelled.len();
    println!(
        "scheduled {ORDERS} auto-ratings due over {SPREAD:?}; {} customers rated first (cancelled)",
        cancelled.len()
    );
    // The daily digest: one series, one pending occurrence at a time, in the shop's zone.
    let evening = Recurrence::cron("0 20 * * *")?.in_tz("Asia/Shanghai")?;
    queue
        .schedule_recurring(DIGEST, evening, "yesterday's orders")
        .await?;
    for series in queue.list_recurring().await? {
        println!(
            "recurring {:?}: {}, next run {}",
            series.name(),
            series.recurrence(),
            utc(series.next_run())
        );
    }
    queue.close().await?;

    let log_path = dir_path.join("ratings.log");
    let began = Instant::now();
    let mut child = spawn_worker(&dir_path)?;
    let mut workers = 1;
    let mut killed_at = None;
    let status = loop {
        let rated = read_log(&log_path).rated.len();
        print!(
            "\r  worker #{workers} (pid {:>6}): {rated:>5} / {expected} orders rated, {:>4.1} s   ",
            child.id(),
            began.elapsed().as_secs_f64()
        );
        std::io::stdout().flush()?;
        if killed_at.is_none() && rated >= expected * 2 / 5 {
            child.kill()?; // SIGKILL: no chance to ack what it holds
            child.wait()?;
            killed_at = Some(rated);
            println!("\n  killed worker #{workers} with SIGKILL after {rated} ratings; starting a new one");
            child = spawn_worker(&dir_path)?;
            workers += 1;
        }
        if let Some(status) = child.try_wait()? {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    println!();
    if !status.success() {
        return Err(format!("worker #{workers} failed: {status}").into());
    }

    // The report.
    let log = read_log(&log_path);
    let queue = JobQueue::open(dir_path.join("jobs.redb")).await?;
    let (pending, running) = (queue.pending().await?, queue.running().await?);
    let digest = queue.list_recurring().await?;
    let mut left = 0;
    let mut failures = Vec::new();
    for n in 0..ORDERS {
        let id = order_id(n);
        let times = log.rated.get(&id).copied().unwrap_or(0);
        match (cancelled.contains(&id), times) {
            (true, 0) | (false, 1) => {}
            (true, t) => failures.push(format!("{id} was cancelled but rated {t} times")),
            (false, t) => failures.push(format!("{id} rated {t} times")),
        }
        if queue.get(&id).await?.is_some() {
            left += 1;
        }
    }
    queue.close().await?;
    let mut late = log.lateness_us;
    late.sort_unstable();
    let pct = |p: f64| {
        late.get(((late.len().saturating_sub(1)) as f64 * p) as usize)
            .map_or(0.0, |us| *us as f64 / 1e3)
    };
    println!(
        "report after {:.1} s and {workers} worker processes:",
        began.elapsed().as_secs_f64()
    );
    println!(
        "  rated exactly once: {} of {expected}; cancelled and never rated: {}",
        log.rated.values().filter(|&&t| t == 1).count(),
        cancelled
            .iter()
            .filter(|id| !log.rated.contains_key(*id))
            .count()
    );
    println!(
        "  redeliveries after the kill (effect skipped by the idempotent handler): {}",
        log.skipped
    );
    println!("  left in the store: {pending} pending, {running} running, {left} jobs in total");
    println!(
        "  lateness of first deliveries after run_at: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
    match digest.as_slice() {
        [series] => println!(
            "  the digest series survived the kill: next run {}",
            utc(series.next_run())
        ),
        other => failures.push(format!("the digest series is gone: {other:?}")),
    }
    if pending != 1 || running > 0 || left > 0 {
        failures.push("the store holds more than the digest's next occurrence".to_owned());
    }
    if killed_at.is_none() {
        failures.push("the worker was never killed".to_owned());
    }
    if failures.is_empty() {
        println!("OK: every order ran, none twice");
        Ok(())
    } else {
        for f in &failures {
            eprintln!("FAILED: {f}");
        }
        std::process::exit(1);
    }
}
