//! `--postgres URL`: the phases of the PostgreSQL benchmark, as
//! `bench/peers/graphile-worker/bench.mjs` and `bench/peers/pg-boss/bench.mjs` run them on
//! the same server, with N (`--n`, default 20,000):
//!
//! 1. single schedules: N `schedule` calls with 64 in flight, due in an hour;
//! 2. bulk schedules: N jobs through `schedule_many`, 10,000 per call, due in an hour;
//! 3. deliveries + acks: N jobs already due, then `run(50)` with a no-op handler, timed until
//!    the queue's counts show no job left (every ack committed);
//! 4. lateness: N jobs due evenly over 10 s, `run(50)` started before the first is due, the
//!    first due after a lead of 1 s plus twice the time phase 2's rate needs to load them;
//!    lateness is the handler's start minus the job's `run_at`;
//! 5. sparse: the same with 1,000 jobs over 10 s;
//! 6. transactional enqueue: N transactions with 64 in flight (a pool of 64 connections),
//!    each inserting an order row and committing, without and then with a `schedule_in` of
//!    the order's job in the same transaction.
//!
//! Each phase runs on a queue of its own (a pool of 10 connections, the default), in the
//! schema `wheel_bench`, whose tables are emptied between phases (`TRUNCATE`, as the
//! graphile-worker harness empties its jobs table). With each phase: the database's CPU per
//! job, read as `pg-common.mjs` reads it (`wheel_bench::cpu::server_cpu`): the server must
//! run on this machine and the URL's user must be a superuser, or the figure is left out.
//!
//! `--hold-snapshot SECS` measures instead what a `REPEATABLE READ` transaction left open
//! in another session does to deliveries + acks: rounds of N due jobs drained by `run(50)`
//! on one queue,
//! for SECS before the transaction begins, SECS while it is open and SECS after it ends,
//! each round's rate printed with the jobs table's dead tuples and size.
//! `--autovacuum-tuned` first sets the per-table autovacuum settings docs/guide/postgres.md
//! recommends ([`TUNED`]); without it they are reset to the server's defaults.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use wheel_jobs::sqlx::{self, postgres::PgPoolOptions, Connection, PgConnection, PgPool};
use wheel_jobs::JobQueue;

use super::{percentile, unique};

/// The schema every phase's queue lives in.
const SCHEMA: &str = "wheel_bench";

/// Handlers at once: the peers' concurrency (graphile-worker `concurrency: 50`, pg-boss 5 x
/// 10).
const CONCURRENCY: usize = 50;

/// Jobs per `schedule_many` call, as the peers' `addJobs` / `insert` calls.
const CHUNK: usize = 10_000;

const PAYLOAD: &[u8] = b"payload-16-bytes";

/// The per-table autovacuum settings `--autovacuum-tuned` gives the tables every job
/// passes through (`jobs`, `count_deltas`): what docs/guide/postgres.md ("Vacuum")
/// recommends.
pub const TUNED: &[(&str, &str)] = &[
    ("autovacuum_vacuum_scale_factor", "0.01"),
    ("autovacuum_vacuum_threshold", "1000"),
    ("autovacuum_vacuum_cost_limit", "2000"),
];
const TUNED_TABLES: [&str; 2] = ["jobs", "count_deltas"];

/// The database's CPU time so far, if this process can read it (see the module docs).
struct ServerCpu(Option<u32>);

impl ServerCpu {
    async fn new(admin: &PgPool) -> ServerCpu {
        let pid = async {
            let dir: String = sqlx::query_scalar("SHOW data_directory")
                .fetch_one(admin)
                .await
                .ok()?;
            let pid = std::fs::read_to_string(format!("{dir}/postmaster.pid")).ok()?;
            pid.lines().next()?.trim().parse().ok()
        };
        ServerCpu(pid.await)
    }

    fn now(&self) -> Option<Duration> {
        wheel_bench::cpu::server_cpu(self.0?)
    }

    /// ", database CPU X ms per job" since `before`, or nothing.
    fn per_job(&self, before: Option<Duration>, jobs: usize) -> String {
        match (before, self.now()) {
            (Some(b), Some(a)) => format!(
                ", database CPU {:.3} ms per job",
                (a - b).as_secs_f64() * 1e3 / jobs as f64
            ),
            _ => String::new(),
        }
    }
}

struct Bench {
    url: String,
    admin: PgPool,
    cpu: ServerCpu,
    n: usize,
}

impl Bench {
    async fn queue(&self, phase: &str) -> JobQueue {
        JobQueue::builder()
            .postgres_schema(SCHEMA)
            .postgres(&self.url, &unique(phase))
            .await
            .expect("open the queue on postgres")
    }

    /// Empties the schema's tables between phases.
    async fn empty(&self) {
        sqlx::query(&format!(
            "TRUNCATE {SCHEMA}.jobs, {SCHEMA}.dead, {SCHEMA}.counts, {SCHEMA}.count_deltas, \
             {SCHEMA}.series, {SCHEMA}.queues, {SCHEMA}.bench_orders"
        ))
        .execute(&self.admin)
        .await
        .expect("truncate");
    }
}

/// Loads `n` jobs with `schedule_many`, 10,000 per call, due at `at(i)`.
async fn load(queue: &JobQueue, n: usize, at: impl Fn(usize) -> SystemTime) {
    for base in (0..n).step_by(CHUNK) {
        let jobs = (base..(base + CHUNK).min(n)).map(|i| (format!("job-{i:08}"), at(i), PAYLOAD));
        queue.schedule_many(jobs).await.expect("schedule_many");
    }
}

/// `run(50)` with a no-op handler started, then `load`; returns once `n` jobs were handled
/// and the queue's counts show none left (their acks committed), with the time since the
/// start and each job's lateness.
async fn work(
    queue: &JobQueue,
    n: u64,
    load: impl std::future::Future<Output = ()>,
) -> (Duration, Vec<Duration>) {
    let lateness = Arc::new(Mutex::new(Vec::with_capacity(n as usize)));
    let handled = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let worker = {
        let (queue, lateness, handled) = (queue.clone(), lateness.clone(), handled.clone());
        tokio::spawn(async move {
            queue
                .run(CONCURRENCY, move |job| {
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
    load.await;
    while handled.load(Relaxed) < n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    loop {
        let counts = queue.counts().await.expect("counts");
        if counts.pending == 0 && counts.running == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let took = start.elapsed();
    queue.close().await.expect("close");
    worker.await.expect("worker").expect("run");
    let lateness = std::mem::take(&mut *lateness.lock().unwrap());
    (took, lateness)
}

fn lateness(late: &mut [Duration]) -> String {
    late.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    format!(
        "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        ms(percentile(late, 0.5)),
        ms(percentile(late, 0.99)),
        ms(*late.last().expect("some jobs"))
    )
}

/// `total` calls of `call(i)`, 64 in flight; returns calls per second.
async fn in_flight<F, Fut>(total: usize, call: F) -> f64
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let call = Arc::new(call);
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (call, next) = (call.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Relaxed);
                    if i >= total {
                        return;
                    }
                    call(i).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    total as f64 / start.elapsed().as_secs_f64()
}

async fn connect(url: &str, n: usize) -> Bench {
    let admin = PgPoolOptions::new()
        .max_connections(2)
        .connect(url)
        .await
        .expect("connect to postgres");
    // The schema and its tables, as a queue's first open makes them.
    JobQueue::builder()
        .postgres_schema(SCHEMA)
        .postgres(url, "bench-setup")
        .await
        .expect("open a queue")
        .close()
        .await
        .expect("close");
    sqlx::query(&format!(
        "CREATE TABLE IF NOT EXISTS {SCHEMA}.bench_orders (oid bigint PRIMARY KEY, status text NOT NULL)"
    ))
    .execute(&admin)
    .await
    .expect("orders table");
    let cpu = ServerCpu::new(&admin).await;
    Bench {
        url: url.to_owned(),
        admin,
        cpu,
        n,
    }
}

/// `--postgres URL`: the phases in the module docs, N jobs each.
pub async fn measure(url: &str, n: usize) {
    let b = connect(url, n).await;
    let version: String = sqlx::query_scalar("SELECT version()")
        .fetch_one(&b.admin)
        .await
        .expect("version");
    println!(
        "wheel-jobs (postgres), N = {n}, load average {}, {version}",
        wheel_bench::cpu::load_average()
    );
    b.empty().await;

    let queue = b.queue("single").await;
    let before = b.cpu.now();
    let q = queue.clone();
    let rate = in_flight(n, move |i| {
        let q = q.clone();
        async move {
            q.schedule(&format!("job-{i:08}"), Duration::from_secs(3600), PAYLOAD)
                .await
                .expect("schedule");
        }
    })
    .await;
    println!(
        "single schedules, 64 in flight: {rate:.0} jobs/s{}",
        b.cpu.per_job(before, n)
    );
    queue.close().await.expect("close");
    drop(queue);
    b.empty().await;

    let queue = b.queue("bulk").await;
    let before = b.cpu.now();
    let start = Instant::now();
    let hour = SystemTime::now() + Duration::from_secs(3600);
    load(&queue, n, |_| hour).await;
    let bulk_rate = n as f64 / start.elapsed().as_secs_f64();
    println!(
        "bulk schedules (schedule_many, 10,000 per call): {bulk_rate:.0} jobs/s{}",
        b.cpu.per_job(before, n)
    );
    queue.close().await.expect("close");
    drop(queue);
    b.empty().await;

    let queue = b.queue("drain").await;
    let now = SystemTime::now();
    load(&queue, n, |_| now).await;
    let before = b.cpu.now();
    let (took, _) = work(&queue, n as u64, async {}).await;
    println!(
        "deliveries + acks, {n} due, run({CONCURRENCY}): {:.0} jobs/s{}",
        n as f64 / took.as_secs_f64(),
        b.cpu.per_job(before, n)
    );
    drop(queue);
    b.empty().await;

    for total in [n, 1000] {
        let queue = b.queue(&format!("late{total}")).await;
        // Enough lead for the loads (at the bulk rate measured above, twice over) plus a
        // second, as the peers give theirs.
        let lead = 1.0 + 2.0 * total as f64 / bulk_rate;
        let first = SystemTime::now() + Duration::from_secs_f64(lead);
        let step = Duration::from_secs(10) / total as u32;
        let before = b.cpu.now();
        let loading = load(&queue, total, |i| first + step * i as u32);
        let (_, mut late) = work(&queue, total as u64, loading).await;
        println!(
            "lateness, {total} jobs due over 10 s: {}{}",
            lateness(&mut late),
            b.cpu.per_job(before, total)
        );
        drop(queue);
        b.empty().await;
    }

    transactional(&b).await;
}

/// Phase 6: an order row alone per transaction, then an order row and its job.
async fn transactional(b: &Bench) {
    let n = b.n;
    let app = PgPoolOptions::new()
        .max_connections(64)
        .connect(&b.url)
        .await
        .expect("the application's pool");
    let queue = b.queue("orders").await;
    let insert = format!("INSERT INTO {SCHEMA}.bench_orders (oid, status) VALUES ($1, 'unpaid')");
    let mut rates = Vec::new();
    for with_job in [false, true] {
        let before = b.cpu.now();
        let (app, queue, insert) = (app.clone(), queue.clone(), insert.clone());
        let offset = if with_job { n } else { 0 };
        let rate = in_flight(n, move |i| {
            let (app, queue, insert) = (app.clone(), queue.clone(), insert.clone());
            async move {
                let oid = (offset + i) as i64;
                let mut tx = app.begin().await.expect("begin");
                sqlx::query(&insert)
                    .bind(oid)
                    .execute(&mut *tx)
                    .await
                    .expect("insert the order");
                if with_job {
                    queue
                        .schedule_in(
                            &mut tx,
                            &format!("unpaid-timeout:{oid}"),
                            Duration::from_secs(48 * 3600),
                            oid.to_string(),
                        )
                        .await
                        .expect("schedule_in");
                }
                tx.commit().await.expect("commit");
            }
        })
        .await;
        println!(
            "transactions of 64 in flight (a pool of 64), {}: {rate:.0}/s{}",
            if with_job {
                "an order row and its job (schedule_in)"
            } else {
                "an order row alone"
            },
            b.cpu.per_job(before, n)
        );
        rates.push(rate);
    }
    println!(
        "transactional enqueue: the order and its job commit at {:.2}x the rate of the order alone",
        rates[1] / rates[0]
    );
    queue.close().await.expect("close");
    app.close().await;
}

/// Dead tuples and the size (MiB) of the jobs table with its indexes, as the server's
/// statistics have them now.
async fn table_state(admin: &PgPool) -> (i64, f64) {
    let (dead, bytes): (i64, i64) = sqlx::query_as(&format!(
        "SELECT n_dead_tup, pg_total_relation_size('{SCHEMA}.jobs') FROM pg_stat_user_tables \
         WHERE schemaname = '{SCHEMA}' AND relname = 'jobs'"
    ))
    .fetch_one(admin)
    .await
    .expect("table statistics");
    (dead, bytes as f64 / (1 << 20) as f64)
}

/// `--hold-snapshot SECS`: deliveries + acks/s before, during and after a `REPEATABLE READ`
/// transaction held open in another session (see the module docs).
pub async fn hold_snapshot(url: &str, n: usize, secs: u64, tuned: bool) {
    let b = connect(url, n).await;
    b.empty().await;
    for table in TUNED_TABLES {
        let statement = if tuned {
            let set: Vec<String> = TUNED.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            format!("ALTER TABLE {SCHEMA}.{table} SET ({})", set.join(", "))
        } else {
            let reset: Vec<&str> = TUNED.iter().map(|(k, _)| *k).collect();
            format!("ALTER TABLE {SCHEMA}.{table} RESET ({})", reset.join(", "))
        };
        sqlx::query(&statement)
            .execute(&b.admin)
            .await
            .expect("autovacuum settings");
    }
    println!(
        "wheel-jobs (postgres), hold a REPEATABLE READ snapshot for {secs} s, rounds of {n} due jobs, \
         run({CONCURRENCY}), autovacuum {}, load average {}",
        if tuned { "tuned (TUNED)" } else { "server defaults" },
        wheel_bench::cpu::load_average()
    );
    let span = Duration::from_secs(secs);
    let start = Instant::now();
    let mut rates: [Vec<f64>; 3] = Default::default();
    let mut holder: Option<tokio::task::JoinHandle<()>> = None;
    let name = unique("vacuum");
    loop {
        let at = start.elapsed();
        let period = if at < span {
            0
        } else if at < 2 * span {
            1
        } else if at < 3 * span {
            2
        } else {
            break;
        };
        if period == 1 && holder.is_none() {
            let mut conn = PgConnection::connect(url).await.expect("connect");
            sqlx::raw_sql("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1;")
                .execute(&mut conn)
                .await
                .expect("begin");
            let left = 2 * span - start.elapsed().min(2 * span);
            println!(
                "t = {:.0} s: the snapshot is held from here",
                at.as_secs_f64()
            );
            holder = Some(tokio::spawn(async move {
                tokio::time::sleep(left).await;
                sqlx::query("COMMIT")
                    .execute(&mut conn)
                    .await
                    .expect("commit");
                conn.close().await.expect("close");
            }));
        }
        if period == 2 {
            if let Some(h) = holder.take() {
                h.await.expect("holder");
                println!("t = {:.0} s: released", start.elapsed().as_secs_f64());
            }
        }
        // One queue for every round, as a service has: what a round leaves dead sits in
        // the index range the next round's claims scan.
        let queue = JobQueue::builder()
            .postgres_schema(SCHEMA)
            .postgres(&b.url, &name)
            .await
            .expect("open the queue on postgres");
        let now = SystemTime::now();
        load(&queue, n, |_| now).await;
        let (took, _) = work(&queue, n as u64, async {}).await;
        drop(queue);
        let rate = n as f64 / took.as_secs_f64();
        rates[period].push(rate);
        let (dead, mib) = table_state(&b.admin).await;
        let (vacuums, autovacuums): (i64, i64) = sqlx::query_as(&format!(
            "SELECT vacuum_count, autovacuum_count FROM pg_stat_user_tables \
             WHERE schemaname = '{SCHEMA}' AND relname = 'jobs'"
        ))
        .fetch_one(&b.admin)
        .await
        .expect("vacuum counts");
        println!(
            "t = {:>3.0} s, {}: {rate:.0} deliveries + acks/s; jobs table {dead} dead tuples, {mib:.1} MiB \
             with indexes, {} vacuums so far",
            start.elapsed().as_secs_f64(),
            ["before", "held  ", "after "][period],
            vacuums + autovacuums
        );
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let [mut before, mut held, mut after] = rates;
    let (before, held, after) = (median(&mut before), median(&mut held), median(&mut after));
    println!(
        "median deliveries + acks/s: before {before:.0}, held {held:.0} ({:.2}x), after {after:.0} ({:.2}x)",
        held / before,
        after / before
    );
}
