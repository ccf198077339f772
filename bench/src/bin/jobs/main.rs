//! Throughput and lateness of the embedded job store, and what 10M pending jobs cost.
//!
//! ```text
//! cargo run --release -p wheel-bench --bin jobs            # about 40 s
//! cargo run --release -p wheel-bench --bin jobs -- --big   # adds the 10M-job store (minutes, ~1 GB of disk)
//! cargo run --release -p wheel-bench --bin jobs -- --redis redis+unix:///tmp/redis.sock
//! cargo run --release -p wheel-bench --bin jobs -- --redis redis://127.0.0.1:6379 --min-replicas 1
//! cargo run --release -p wheel-bench --bin jobs -- --redis redis+unix:///tmp/redis.sock --big   # adds 1M pending jobs
//! cargo run --release -p wheel-bench --bin jobs -- --postgres postgres://postgres@127.0.0.1:5432/postgres
//! cargo run --release -p wheel-bench --bin jobs -- --postgres postgres://postgres@127.0.0.1:5432/postgres --hold-snapshot 60
//! ```
//!
//! `--kinds` measures what kinds and priorities cost against the plain path instead
//! (`kinds.rs`), on the embedded store or the `--redis` / `--postgres` URL given:
//!
//! ```text
//! cargo run --release -p wheel-bench --bin jobs -- --kinds [--n 20000 --rounds 3] [--only plain,keys-room]
//! cargo run --release -p wheel-bench --bin jobs -- --fair [--n 100000 --rounds 2]
//! ```
//!
//! `--postgres URL` runs the phases of the PostgreSQL benchmark instead, the ones the
//! graphile-worker and pg-boss harnesses in `bench/peers/` run (`postgres.rs` lists them).
//!
//! `--min-replicas N` (with `--redis`, a primary with N replicas) measures only schedules/s,
//! without and with `Builder::min_replicas(N, 1 s)`, alternated over three rounds.
//!
//! `--concurrency N` sets the handlers `run` may run at once in the delivery and lateness
//! phases (default 256 on the embedded store; 50 on Redis, BullMQ's concurrency in
//! `bench/peers/bullmq/bench.mjs`). On Redis each phase also prints, per job, what the
//! server counted (`INFO`): script calls, which are all the requests this client sends
//! (one command each, never pipelined; the few other commands are this harness's), and
//! reads (requests that arrive together are one read).
//!
//! Prints, from one run: durable schedules per second with 1 and 64 concurrent schedulers
//! (each `schedule` returns after its fsync'd group commit); deliveries + acks per second
//! through `run` with 100k jobs already due; lateness after `run_at` (p50/p99/max) of 100k
//! jobs due over 10 s; and with `--big`, the time to open a store of 10M pending jobs and
//! the process's RSS after opening it and consuming its first due job, then the latency
//! (p50/p99 of 2,000 calls one after another) of `get`, `counts` and a 50-job `list` page
//! (the first, and one resumed from a cursor) on that store; on Redis, the same latencies
//! with 1M pending jobs. Goals:
//! ≥ 50,000 schedules/s with 64 schedulers, ≥ 50,000 deliveries + acks/s, p99 lateness
//! ≤ 10 ms, open ≤ 1 s.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use clap::Parser;
use wheel_jobs::JobQueue;

mod kinds;
mod postgres;

/// Throughput and lateness of the job store (see the module docs for what each phase does).
#[derive(Parser, Debug)]
#[command(name = "jobs")]
struct Args {
    /// Also build a store of 10M pending jobs and time opening it (minutes, ~1 GB of disk).
    #[arg(long)]
    big: bool,
    /// Measure on the Redis server at this URL instead of the embedded store.
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// With `--redis`: measure only schedules/s, without and with `min_replicas(N, 1 s)`,
    /// alternated over 3 rounds (the server needs N replicas).
    #[arg(long, value_name = "N")]
    min_replicas: Option<u32>,
    /// Measure the PostgreSQL phases (`postgres.rs`) on the server at this URL.
    #[arg(long, value_name = "URL")]
    postgres: Option<String>,
    /// With `--postgres` or `--kinds`: jobs per phase.
    #[arg(long, value_name = "N", default_value_t = 20_000)]
    n: usize,
    /// Measure instead what kinds and priorities cost against the plain path (`kinds.rs`),
    /// on the embedded store, or on `--redis URL` or `--postgres URL`.
    #[arg(long)]
    kinds: bool,
    /// Measure instead how late tenant B's 100 jobs start behind tenant A's N, with and
    /// without a key limit (`kinds.rs`, `fair`).
    #[arg(long)]
    fair: bool,
    /// With `--kinds`: only these variants, comma-separated (`kinds.rs` names them).
    #[arg(long, value_name = "LIST")]
    only: Option<String>,
    /// With `--kinds`: rounds, each running every variant in turn.
    #[arg(long, value_name = "N", default_value_t = 3)]
    rounds: usize,
    /// With `--postgres`: measure only deliveries + acks/s before, during and after a
    /// REPEATABLE READ transaction held open this many seconds in another session.
    #[arg(long, value_name = "SECS")]
    hold_snapshot: Option<u64>,
    /// With `--hold-snapshot`: the per-table autovacuum settings docs/guide/postgres.md
    /// recommends, instead of the server's defaults.
    #[arg(long)]
    autovacuum_tuned: bool,
    /// Handlers `run` may run at once [default: 256 embedded, 50 on Redis].
    #[arg(long, value_name = "N")]
    concurrency: Option<usize>,
    /// Measure one quick_repair mode only (for interleaved A/B runs) [default: both].
    #[arg(long, value_name = "BOOL")]
    quick_repair: Option<bool>,
    /// Internal: open the big store at PATH in this (child) process and report.
    #[arg(long, value_name = "PATH", hide = true)]
    open: Option<String>,
    /// Internal: schedule into PATH from 64 tasks until killed.
    #[arg(long, value_name = "PATH", hide = true)]
    crash: Option<String>,
    /// Internal: time get, counts and list on the big store at PATH in this process.
    #[arg(long, value_name = "PATH", hide = true)]
    operate: Option<String>,
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Where the queue lives: `None` for the embedded store, else a Redis URL (`--redis URL`).
static REDIS: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

async fn fresh(dir: &std::path::Path, name: &str, quick_repair: bool) -> JobQueue {
    if let Some(url) = REDIS.get().cloned().flatten() {
        return JobQueue::builder()
            .redis(&url, &unique(name))
            .await
            .expect("redis");
    }
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(dir.join(format!("{name}.wal")));
    JobQueue::builder()
        .quick_repair(quick_repair)
        .open(path)
        .await
        .expect("open")
}

/// A queue name no earlier run used.
fn unique(name: &str) -> String {
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH);
    format!("{name}-{}", now.unwrap().as_nanos())
}

/// `--min-replicas N`: schedules/s with 1 and 64 schedulers, without and with
/// `min_replicas(N, 1 s)`, alternated over 3 rounds; the medians and their ratios.
async fn replicated(url: &str, replicas: u32) {
    let mut runs: [[Vec<f64>; 2]; 2] = Default::default();
    for _ in 0..3 {
        for (with, min) in [0, replicas].into_iter().enumerate() {
            let queue = JobQueue::builder()
                .min_replicas(min, Duration::from_secs(1))
                .redis(url, &unique("replicas"))
                .await
                .expect("redis");
            runs[with][0].push(schedules(&queue, 1, 500).await);
            runs[with][1].push(schedules(&queue, 64, 1_000).await);
            queue.close().await.unwrap();
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for (i, schedulers) in [1, 64].into_iter().enumerate() {
        let without = median(&mut runs[0][i]);
        let with = median(&mut runs[1][i]);
        println!(
            "schedules/s, {schedulers} schedulers, median of 3: without min_replicas {without:.0}, \
             with min_replicas({replicas}, 1 s) {with:.0} ({:.2}x)",
            with / without
        );
    }
}

async fn schedules(queue: &JobQueue, schedulers: usize, per: usize) -> f64 {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for s in 0..schedulers {
        let queue = queue.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                let id = format!("s{schedulers}-{s}-{i}");
                queue
                    .schedule(&id, Duration::from_secs(3600), &b"payload-16-bytes"[..])
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (schedulers * per) as f64 / start.elapsed().as_secs_f64()
}

/// Loads `n` jobs with `schedule_many`, due at `at(i)`.
async fn load(queue: &JobQueue, n: usize, at: impl Fn(usize) -> SystemTime) {
    const CHUNK: usize = 10_000;
    for base in (0..n).step_by(CHUNK) {
        let jobs = (base..(base + CHUNK).min(n))
            .map(|i| (format!("job-{i:08}"), at(i), &b"payload-16-bytes"[..]));
        queue.schedule_many(jobs).await.unwrap();
    }
}

/// Handlers at once in the delivery and lateness phases (`--concurrency`).
static CONCURRENCY: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

/// Runs a no-op worker until `n` jobs were handled and acked; returns the lateness of each.
/// Waits on a local counter, not by asking the store, so the server counts only the
/// worker's own requests.
async fn drain(queue: &JobQueue, n: u64) -> (Duration, Vec<Duration>) {
    let concurrency = *CONCURRENCY.get().expect("set in main");
    let lateness = Arc::new(Mutex::new(Vec::with_capacity(n as usize)));
    let handled = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let worker = {
        let (queue, lateness, handled) = (queue.clone(), lateness.clone(), handled.clone());
        tokio::spawn(async move {
            queue
                .run(concurrency, move |job| {
                    let late = SystemTime::now()
                        .duration_since(job.run_at())
                        .unwrap_or_default();
                    lateness.lock().unwrap().push(late);
                    handled.fetch_add(1, Relaxed);
                    async { Ok::<(), String>(()) }
                })
                .await
        })
    };
    while handled.load(Relaxed) < n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // The last acks may still be in flight.
    while queue.running().await.unwrap() > 0 || queue.pending().await.unwrap() > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let took = start.elapsed();
    worker.abort();
    let lateness = std::mem::take(&mut *lateness.lock().unwrap());
    (took, lateness)
}

/// The disk's fsync latency: what one durable commit costs at the least.
fn fsync_ms(dir: &std::path::Path) -> f64 {
    use std::os::unix::fs::FileExt;
    let path = dir.join("fsync.probe");
    let file = std::fs::File::create(&path).unwrap();
    let mut times: Vec<f64> = (0..200)
        .map(|i| {
            let start = Instant::now();
            file.write_all_at(&[i as u8; 4096], (i % 16) * 4096)
                .unwrap();
            file.sync_data().unwrap();
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let _ = std::fs::remove_file(path);
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// `--open PATH` (a child process): open a big store, take its first due job, report.
async fn open_only(path: &str) {
    let start = Instant::now();
    let queue = JobQueue::open(path).await.expect("open");
    let opened = start.elapsed();
    let pending = queue.pending().await.unwrap();
    let mut consumer = queue.consume();
    let first = consumer.next().await.unwrap().unwrap();
    let first_delivery = start.elapsed();
    first.ack().await.unwrap();
    println!(
        "open {:.1} ms, first delivery {:.1} ms, pending {pending}, RSS {} MiB",
        opened.as_secs_f64() * 1e3,
        first_delivery.as_secs_f64() * 1e3,
        rss_kib() / 1024
    );
    queue.close().await.unwrap();
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// p50/p99 of `calls` runs of `call`, one after another, in µs (after a tenth as many to
/// warm the caches).
async fn latency<F, Fut>(calls: usize, mut call: F) -> (f64, f64)
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for i in 0..calls / 10 {
        call(i).await;
    }
    let mut took = Vec::with_capacity(calls);
    for i in 0..calls {
        let start = Instant::now();
        call(i).await;
        took.push(start.elapsed());
    }
    took.sort();
    (
        micros(percentile(&took, 0.5)),
        micros(percentile(&took, 0.99)),
    )
}

/// What operating a queue of about `jobs` pending jobs (ids `job-00000000`… as `load` makes
/// them) costs: p50/p99 of `get`, `counts` and a 50-job page of `list`, first and resumed.
async fn operate(queue: &JobQueue, jobs: usize, what: &str) {
    use wheel_jobs::{JobState, ListOptions};
    const CALLS: usize = 2_000;
    let get = latency(CALLS, |i| async move {
        // Spread over the whole store (a multiplicative hash of the call number).
        let n = (i as u64).wrapping_mul(2_654_435_761) % jobs as u64;
        queue.get(&format!("job-{n:08}")).await.unwrap();
    })
    .await;
    let counts = latency(CALLS, |_| async {
        queue.counts().await.unwrap();
    })
    .await;
    let mut first_page = ListOptions::new();
    first_page.limit(50);
    let first = latency(CALLS, |_| async {
        let page = queue.list(JobState::Pending, &first_page).await.unwrap();
        assert_eq!(page.jobs().len(), 50);
    })
    .await;
    let page = queue.list(JobState::Pending, &first_page).await.unwrap();
    let mut next_page = first_page.clone();
    next_page.after(page.cursor().expect("more than 50 jobs"));
    let resumed = latency(CALLS, |_| async {
        let page = queue.list(JobState::Pending, &next_page).await.unwrap();
        assert_eq!(page.jobs().len(), 50);
    })
    .await;
    let pending = queue.counts().await.unwrap().pending;
    println!(
        "{what} ({pending} pending), p50 / p99 of {CALLS} calls in a row: get {:.0} / {:.0} µs, \
         counts {:.0} / {:.0} µs, list 50 (first page) {:.0} / {:.0} µs, list 50 (after a \
         cursor) {:.0} / {:.0} µs",
        get.0, get.1, counts.0, counts.1, first.0, first.1, resumed.0, resumed.1
    );
}

/// Redis only: the server's memory in use (`INFO memory` used_memory), in bytes.
async fn used_memory() -> Option<u64> {
    if let Some(url) = REDIS.get().cloned().flatten() {
        let client = redis::Client::open(url).ok()?;
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut conn)
            .await
            .ok()?;
        return info
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok());
    }
    None
}

/// Redis only: what the server has served so far: script calls, client reads, and the
/// microseconds it spent in scripts.
async fn script_calls() -> Option<[u64; 3]> {
    if let Some(url) = REDIS.get().cloned().flatten() {
        let client = redis::Client::open(url).ok()?;
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        let info: String = redis::cmd("INFO")
            .arg("all")
            .query_async(&mut conn)
            .await
            .ok()?;
        let field = |prefix: &str| -> u64 {
            info.lines()
                .find_map(|l| l.strip_prefix(prefix))
                .and_then(|rest| rest.trim().split(',').next()?.parse().ok())
                .unwrap_or(0)
        };
        // Commands run inside scripts are counted in their script's time too: sum the
        // top-level ones only (scripts, and what this client sends besides).
        let usec = |name: &str| -> u64 {
            info.lines()
                .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:")))
                .and_then(|rest| rest.split("usec=").nth(1)?.split(',').next()?.parse().ok())
                .unwrap_or(0)
        };
        return Some([
            field("cmdstat_evalsha:calls=") + field("cmdstat_eval:calls="),
            field("total_reads_processed:"),
            usec("evalsha") + usec("eval"),
        ]);
    }
    None
}

/// " (per job: 0.12 script calls, …)" on Redis, nothing on the embedded store.
async fn round_trips(before: Option<[u64; 3]>, jobs: usize) -> String {
    match (before, script_calls().await) {
        (Some(b), Some(a)) => {
            let per = |i: usize| (a[i] - b[i]) as f64 / jobs as f64;
            format!(
                " (per job: {:.3} script calls = client requests, {:.3} server reads, {:.2} µs in scripts)",
                per(0),
                per(1),
                per(2)
            )
        }
        _ => String::new(),
    }
}

async fn measure(dir: &std::path::Path, quick_repair: bool) {
    let queue = fresh(dir, "one.redb", quick_repair).await;
    let one = schedules(&queue, 1, 500).await;
    queue.close().await.unwrap();
    let queue = fresh(dir, "many.redb", quick_repair).await;
    let calls = script_calls().await;
    let many = schedules(&queue, 64, 1_000).await;
    let many_trips = round_trips(calls, 64_000).await;
    let more = schedules(&queue, 1024, 100).await;
    queue.close().await.unwrap();
    println!(
        "schedules/s (each answered once durable): 1 scheduler {one:.0}, 64 schedulers {many:.0} ({:.0}x){many_trips}, 1024 schedulers {more:.0}",
        many / one
    );
    let queue = fresh(dir, "bulk.redb", quick_repair).await;
    let memory = used_memory().await;
    let calls = script_calls().await;
    let start = Instant::now();
    load(&queue, 100_000, |_| {
        SystemTime::now() + Duration::from_secs(3600)
    })
    .await;
    println!(
        "schedule_many (10k per call): {:.0} jobs/s{}",
        100_000.0 / start.elapsed().as_secs_f64(),
        round_trips(calls, 100_000).await
    );
    if let (Some(before), Some(after)) = (memory, used_memory().await) {
        println!(
            "redis memory per pending job (16-byte payload, 12-byte id): {:.0} bytes",
            after.saturating_sub(before) as f64 / 100_000.0
        );
    }
    queue.close().await.unwrap();

    let queue = fresh(dir, "due.redb", quick_repair).await;
    let past = SystemTime::now() - Duration::from_secs(1);
    load(&queue, 100_000, |_| past).await;
    let calls = script_calls().await;
    let (took, _) = drain(&queue, 100_000).await;
    println!(
        "deliveries + acks/s (100k due, run({}), no-op handler): {:.0}{}",
        CONCURRENCY.get().expect("set in main"),
        100_000.0 / took.as_secs_f64(),
        round_trips(calls, 100_000).await
    );
    queue.close().await.unwrap();

    for (jobs, lead) in [(100_000u64, 3u64), (1_000, 1)] {
        let queue = fresh(dir, "late.redb", quick_repair).await;
        let start = SystemTime::now() + Duration::from_secs(lead);
        let step = Duration::from_secs(10) / jobs as u32;
        load(&queue, jobs as usize, |i| start + step * i as u32).await;
        assert!(
            SystemTime::now() < start,
            "loading took longer than the head start"
        );
        let calls = script_calls().await;
        let (_, mut late) = drain(&queue, jobs).await;
        late.sort();
        println!(
            "lateness after run_at ({jobs} jobs due over 10 s): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms{}",
            percentile(&late, 0.5).as_secs_f64() * 1e3,
            percentile(&late, 0.99).as_secs_f64() * 1e3,
            late.last().unwrap().as_secs_f64() * 1e3,
            round_trips(calls, jobs as usize).await
        );
        queue.close().await.unwrap();
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    if let Some(path) = &args.open {
        return open_only(path).await;
    }
    if let Some(path) = &args.operate {
        let queue = JobQueue::open(path).await.expect("open");
        operate(&queue, 10_000_000, "10M jobs (embedded)").await;
        return queue.close().await.unwrap();
    }
    if let Some(path) = &args.crash {
        // Schedule from 64 tasks until SIGKILLed by the parent.
        let queue = JobQueue::open(path).await.expect("open");
        println!("ready");
        schedules(&queue, 64, usize::MAX / 128).await;
        return;
    }
    if args.kinds || args.fair {
        let dir = tempfile::tempdir_in(std::env::var("BENCH_DIR").unwrap_or_else(|_| ".".into()))
            .expect("a temporary directory");
        let (place, concurrency) = match (&args.redis, &args.postgres) {
            (Some(url), _) => (kinds::Place::Redis(url.clone()), 50),
            (None, Some(url)) => (kinds::Place::Postgres(url.clone()), 50),
            (None, None) => (kinds::Place::Embedded(dir.path().to_owned()), 256),
        };
        let concurrency = args.concurrency.unwrap_or(concurrency);
        if args.fair {
            return kinds::fair(place, args.n, args.rounds, concurrency).await;
        }
        return kinds::measure(
            place,
            args.n,
            args.rounds,
            concurrency,
            args.only.as_deref(),
        )
        .await;
    }
    if let Some(url) = &args.postgres {
        return match args.hold_snapshot {
            Some(secs) => postgres::hold_snapshot(url, args.n, secs, args.autovacuum_tuned).await,
            None => postgres::measure(url, args.n).await,
        };
    }
    let big = args.big;
    let dir =
        tempfile::tempdir_in(std::env::var("BENCH_DIR").unwrap_or_else(|_| ".".into())).unwrap();

    println!(
        "this disk: fsync of a 4 KiB write, median of 200: {:.2} ms",
        fsync_ms(dir.path())
    );
    let redis = args.redis.clone();
    REDIS.set(redis.clone()).unwrap();
    let concurrency = match args.concurrency {
        Some(n) => n,
        None if redis.is_some() => 50,
        None => 256,
    };
    CONCURRENCY.set(concurrency).unwrap();
    if redis.is_some() {
        println!("-- redis backend: {}", redis.as_deref().unwrap_or_default());
        if let (Some(url), Some(replicas)) = (&redis, args.min_replicas) {
            return replicated(url, replicas).await;
        }
        measure(dir.path(), false).await;
        if big {
            const BIG: usize = 1_000_000;
            let queue = fresh(dir.path(), "big", false).await;
            let now = SystemTime::now();
            // Due over 30 days from an hour from now: none is claimed meanwhile.
            load(&queue, BIG, |i| {
                now + Duration::from_secs(3600 + (i as u64 * 2_654_435_761) % (30 * 86_400))
            })
            .await;
            operate(&queue, BIG, "1M jobs (redis)").await;
            queue.close().await.unwrap();
        }
        return;
    }
    let modes = match args.quick_repair {
        Some(mode) => vec![mode],
        None => vec![true, false],
    };
    for quick_repair in modes {
        println!(
            "-- quick_repair({quick_repair}){}",
            if quick_repair { " (the default)" } else { "" }
        );
        measure(dir.path(), quick_repair).await;
    }

    if big {
        const BIG: usize = 10_000_000;
        let path = dir.path().join("big.redb");
        let queue = JobQueue::open(&path).await.unwrap();
        let now = SystemTime::now();
        let built = Instant::now();
        // One job due now, the rest over the next 30 days.
        load(&queue, BIG, |i| {
            now + Duration::from_secs((i as u64 * 2_654_435_761) % (30 * 86_400))
        })
        .await;
        println!(
            "built {BIG} pending jobs in {:.0} s",
            built.elapsed().as_secs_f64()
        );
        queue.close().await.unwrap();
        let size = std::fs::metadata(&path).map(|m| m.len() >> 20).unwrap_or(0);
        for _ in 0..3 {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--open", path.to_str().unwrap()])
                .output()
                .unwrap();
            print!(
                "10M pending jobs ({size} MiB file), fresh process: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        // Before the crash below adds jobs. (Each `--open` above claimed a prefetch of the
        // jobs already due and acked one: they are running until their lease ends.)
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--operate", path.to_str().unwrap()])
            .output()
            .unwrap();
        print!("{}", String::from_utf8_lossy(&out.stdout));
        // Then a writer SIGKILLed in the middle of its commits, and the first open after it.
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--crash", path.to_str().unwrap()])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut ready,
        )
        .unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        child.kill().unwrap();
        child.wait().unwrap();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--open", path.to_str().unwrap()])
            .output()
            .unwrap();
        print!(
            "10M pending jobs, first open after a writer was SIGKILLed mid-commit: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}
