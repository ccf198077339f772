//! `--kinds`: what kinds and priorities cost against the plain path, on the backend the
//! other flags name (the embedded store by default, `--redis URL`, `--postgres URL`), with N
//! jobs per phase (`--n`) over R rounds (`--rounds`), the five variants alternated within
//! each round so the machine's noise falls on all of them alike:
//!
//! - `plain`: N due jobs through `schedule_many`, drained by one `run(c)`;
//! - `priorities`: the same jobs at priorities -1, 0 and 1 (`schedule_many_with`), drained
//!   by one `run(c)`, which claims the highest level first;
//! - `kinds, one run`: the same jobs spread over four kinds and the three priorities,
//!   drained by one `run(c)` (what storing and ordering kinds costs);
//! - `kinds`: the same jobs drained by four `run_kind(kind, c / 4)` workers (what routing
//!   them to a worker per kind costs on top: four claim loops of a quarter of the
//!   concurrency each);
//! - `kinds, one worker`: the same jobs drained by one `worker()` declaring the four kinds,
//!   each capped at c / 4 as the `run_kind` workers are, run with c (one claim loop whose
//!   claims name the four kinds).
//! - `keys, limited`: the same jobs of one kind over 100 keys, each key limited to c
//!   running (`key_limit`), drained by one `run(c)`: a key's jobs beyond its limit wait and
//!   are let through one by one as its jobs finish (what the waiting costs);
//! - `keys, room`: the same jobs over 1,000 keys, each limited to more than its share of
//!   the N jobs, drained by one `run(c)`: nothing waits (what counting a key's running and
//!   started jobs costs).
//!
//! `--only plain,keys-room` runs only the variants named (their flags: `plain`,
//! `priorities`, `kinds-one-run`, `kinds`, `kinds-one-worker`, `keys-limited`,
//! `keys-room`), `plain` always among them since ratios are to it. Each drain runs between
//! calls of `mark_drain_start` and `mark_drain_end`, so that a profiler can cut the run at
//! them: `valgrind --tool=callgrind --dump-before=*mark_drain_start
//! --dump-before=*mark_drain_end` writes each drain's cost (deliveries + acks only) in a
//! dump of its own.
//!
//! `--fair` measures fairness instead (`fair`): tenant A's N due jobs, then tenant B's 100,
//! drained by one `run(c)` whose handler takes 1 ms, once without limits and once with
//! `key_limit(c / 4)`: B's lateness (start − due) percentiles and how many of A's jobs had
//! started when B's last one did.
//!
//! Each phase first times N / 5 single schedules with 64 in flight (`schedule` for `plain`,
//! `schedule_with` with a kind and a priority for the others), due in an hour, then the
//! drain: deliveries + acks per second until the handlers saw N jobs and the queue's counts
//! show none left. Prints every round, then the medians and each variant's ratio to
//! `plain`: the median of the per-round ratios (each round's figure over that round's
//! `plain`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use wheel_jobs::{JobOptions, JobQueue};

use super::unique;

/// Where the queues of the phases live.
pub enum Place {
    Embedded(std::path::PathBuf),
    Redis(String),
    Postgres(String),
}

const KINDS: [&str; 4] = ["rate", "remind", "capture", "digest"];
const PRIORITIES: [i8; 3] = [-1, 0, 1];
const PAYLOAD: &[u8] = b"payload-16-bytes";
const CHUNK: usize = 10_000;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Plain,
    Priorities,
    KindsOneRun,
    Kinds,
    KindsOneWorker,
    KeysLimited,
    KeysRoom,
}

/// Keys of the `keys, limited` variant.
const KEYS: usize = 100;
/// Keys of the `keys, room` variant.
const ROOM_KEYS: usize = 1_000;

impl Variant {
    /// Its name in `--only`.
    fn flag(self) -> &'static str {
        match self {
            Variant::Plain => "plain",
            Variant::Priorities => "priorities",
            Variant::KindsOneRun => "kinds-one-run",
            Variant::Kinds => "kinds",
            Variant::KindsOneWorker => "kinds-one-worker",
            Variant::KeysLimited => "keys-limited",
            Variant::KeysRoom => "keys-room",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Variant::Plain => "plain",
            Variant::Priorities => "priorities",
            Variant::KindsOneRun => "kinds, one run",
            Variant::Kinds => "kinds",
            Variant::KindsOneWorker => "kinds, one worker",
            Variant::KeysLimited => "keys, limited",
            Variant::KeysRoom => "keys, room",
        }
    }

    /// The options job `i` is scheduled with (`None`: the plain `schedule`).
    fn options(self, i: usize, n: usize, concurrency: usize) -> Option<JobOptions> {
        let priority = PRIORITIES[i % PRIORITIES.len()];
        match self {
            Variant::KeysRoom => Some(
                JobOptions::kind("sync")
                    .key(format!("tenant-{}", i % ROOM_KEYS))
                    .key_limit((n / ROOM_KEYS + 1) as u32),
            ),
            Variant::KeysLimited => Some(
                JobOptions::kind("sync")
                    .key(format!("tenant-{}", i % KEYS))
                    .key_limit(concurrency as u32),
            ),
            Variant::Plain => None,
            Variant::Priorities => Some(JobOptions::new().priority(priority)),
            Variant::Kinds | Variant::KindsOneRun | Variant::KindsOneWorker => {
                Some(JobOptions::kind(KINDS[(i / 3) % KINDS.len()]).priority(priority))
            }
        }
    }
}

async fn open(place: &Place, phase: &str) -> JobQueue {
    match place {
        Place::Embedded(dir) => {
            let path = dir.join(format!("{}.redb", unique(phase)));
            JobQueue::open(path).await.expect("open")
        }
        Place::Redis(url) => JobQueue::builder()
            .redis(url, &unique(phase))
            .await
            .expect("redis"),
        Place::Postgres(url) => JobQueue::builder()
            .postgres_schema("wheel_bench_kinds")
            .postgres(url, &unique(phase))
            .await
            .expect("postgres"),
    }
}

/// Single schedules of `n` jobs, 64 in flight, due in an hour: jobs per second.
async fn schedules(queue: &JobQueue, variant: Variant, n: usize, concurrency: usize) -> f64 {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (queue, next) = (queue.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Relaxed);
                    if i >= n {
                        return;
                    }
                    let id = format!("single-{i:08}");
                    let hour = Duration::from_secs(3600);
                    let done = match variant.options(i, n, concurrency) {
                        None => queue.schedule(&id, hour, PAYLOAD).await,
                        Some(o) => queue.schedule_with(&id, hour, PAYLOAD, &o).await,
                    };
                    done.expect("schedule");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("scheduler");
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// Loads `n` due jobs, grouped by their options into `schedule_many(_with)` calls.
async fn load(queue: &JobQueue, variant: Variant, n: usize, concurrency: usize) {
    let now = SystemTime::now();
    for base in (0..n).step_by(CHUNK) {
        let ids: Vec<usize> = (base..(base + CHUNK).min(n)).collect();
        let mut groups: Vec<(Option<JobOptions>, Vec<usize>)> = Vec::new();
        for i in ids {
            let options = variant.options(i, n, concurrency);
            match groups.iter_mut().find(|(o, _)| *o == options) {
                Some((_, members)) => members.push(i),
                None => groups.push((options, vec![i])),
            }
        }
        for (options, members) in groups {
            let jobs = members
                .into_iter()
                .map(|i| (format!("job-{i:08}"), now, PAYLOAD));
            match options {
                None => queue.schedule_many(jobs).await,
                Some(o) => queue.schedule_many_with(jobs, &o).await,
            }
            .expect("schedule_many");
        }
    }
}

/// Called as a drain starts: a mark for profilers (module docs).
#[inline(never)]
fn mark_drain_start(variant: Variant) {
    // Not the body of `mark_drain_end`, or the linker folds the two into one symbol.
    std::hint::black_box(("start", variant.flag()));
}

/// Called as a drain ends: a mark for profilers (module docs).
#[inline(never)]
fn mark_drain_end(variant: Variant) {
    std::hint::black_box(("end", variant.flag()));
}

/// Drains the `n` due jobs with the variant's workers: deliveries + acks per second.
async fn drain(queue: &JobQueue, variant: Variant, n: u64, concurrency: usize) -> f64 {
    let handled = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut workers = Vec::new();
    let count = |handled: Arc<AtomicU64>| {
        move |_job| {
            handled.fetch_add(1, Relaxed);
            async { Ok::<(), String>(()) }
        }
    };
    if variant == Variant::Kinds {
        for kind in KINDS {
            let (queue, handler) = (queue.clone(), count(handled.clone()));
            let cap = (concurrency / KINDS.len()).max(1);
            workers.push(tokio::spawn(async move {
                queue.run_kind(kind, cap, handler).await
            }));
        }
    } else if variant == Variant::KindsOneWorker {
        let cap = (concurrency / KINDS.len()).max(1);
        let mut worker = queue.worker();
        for kind in KINDS {
            worker = worker.kind(kind, count(handled.clone())).cap(kind, cap);
        }
        workers.push(tokio::spawn(worker.run(cap * KINDS.len())));
    } else {
        let (queue, handler) = (queue.clone(), count(handled.clone()));
        workers.push(tokio::spawn(async move {
            queue.run(concurrency, handler).await
        }));
    }
    while handled.load(Relaxed) < n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    loop {
        let counts = queue.counts().await.expect("counts");
        if counts.pending + counts.running == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    for w in workers {
        w.abort();
    }
    rate
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The `--kinds` measurement (see the module docs), of the variants `only` names (every
/// one for `None`).
pub async fn measure(
    place: Place,
    n: usize,
    rounds: usize,
    concurrency: usize,
    only: Option<&str>,
) {
    let variants: Vec<Variant> = [
        Variant::Plain,
        Variant::Priorities,
        Variant::KindsOneRun,
        Variant::Kinds,
        Variant::KindsOneWorker,
        Variant::KeysLimited,
        Variant::KeysRoom,
    ]
    .into_iter()
    .filter(|v| {
        *v == Variant::Plain || only.is_none_or(|only| only.split(',').any(|f| f == v.flag()))
    })
    .collect();
    if let Some(only) = only {
        for f in only.split(',') {
            assert!(
                variants.iter().any(|v| v.flag() == f),
                "--only: no variant {f:?}"
            );
        }
    }
    let mut single = vec![Vec::new(); variants.len()];
    let mut drained = vec![Vec::new(); variants.len()];
    println!(
        "kinds and priorities against the plain path: N = {n}, {rounds} rounds, run({concurrency}), load average {}",
        wheel_bench::cpu::load_average()
    );
    for round in 0..rounds {
        // A different variant goes first in each round.
        for k in 0..variants.len() {
            let v = (round + k) % variants.len();
            let variant = variants[v];
            let queue = open(&place, variant.name()).await;
            let s = schedules(&queue, variant, n / 5, concurrency).await;
            queue.close().await.expect("close");
            let queue = open(&place, variant.name()).await;
            load(&queue, variant, n, concurrency).await;
            mark_drain_start(variant);
            let d = drain(&queue, variant, n as u64, concurrency).await;
            mark_drain_end(variant);
            queue.close().await.expect("close");
            println!(
                "round {}: {:<17} single schedules {s:>8.0}/s, deliveries + acks {d:>8.0}/s",
                round + 1,
                variant.name()
            );
            single[v].push(s);
            drained[v].push(d);
        }
    }
    // Each round's ratio to that round's plain figure, then their median: a burst of load
    // in one round moves one ratio, not the whole comparison.
    let ratios = |of: &[Vec<f64>], v: usize| {
        let mut r: Vec<f64> = of[v].iter().zip(&of[0]).map(|(x, p)| x / p).collect();
        median(&mut r)
    };
    for (v, variant) in variants.iter().enumerate() {
        let (rs, rd) = (ratios(&single, v), ratios(&drained, v));
        let (s, d) = (
            median(&mut single[v].clone()),
            median(&mut drained[v].clone()),
        );
        println!(
            "median {:<17} single schedules {s:>8.0}/s ({rs:.2}x plain), deliveries + acks {d:>8.0}/s ({rd:.2}x plain)",
            variant.name(),
        );
    }
}

/// Percentile `p` (0–100) of sorted `v`.
fn percentile(v: &[Duration], p: usize) -> Duration {
    v[(v.len() * p / 100).min(v.len() - 1)]
}

/// The `--fair` measurement (see the module docs).
pub async fn fair(place: Place, n: usize, rounds: usize, concurrency: usize) {
    const B: usize = 100;
    let limit = (concurrency / 4).max(1) as u32;
    println!(
        "fairness: tenant A {n} due jobs, then tenant B {B}; run({concurrency}), 1 ms per job; \
         {rounds} rounds; load average {}",
        wheel_bench::cpu::load_average()
    );
    for round in 0..rounds {
        for limited in [round % 2 == 1, round % 2 == 0] {
            let name = if limited { "key_limit" } else { "no limit" };
            let queue = open(&place, "fair").await;
            let options = |key: &str| {
                let o = JobOptions::kind("sync").key(key);
                if limited {
                    o.key_limit(limit)
                } else {
                    o
                }
            };
            let now = SystemTime::now();
            for base in (0..n).step_by(CHUNK) {
                let jobs =
                    (base..(base + CHUNK).min(n)).map(|i| (format!("a-{i:08}"), now, PAYLOAD));
                queue
                    .schedule_many_with(jobs, &options("a"))
                    .await
                    .expect("a");
            }
            let b_due = SystemTime::now();
            let jobs = (0..B).map(|i| (format!("b-{i:04}"), b_due, PAYLOAD));
            queue
                .schedule_many_with(jobs, &options("b"))
                .await
                .expect("b");
            let a_started = Arc::new(AtomicU64::new(0));
            let seen = Arc::new(std::sync::Mutex::new((Vec::new(), None::<u64>)));
            let worker = {
                let (a_started, seen) = (a_started.clone(), seen.clone());
                queue.run(concurrency, move |job| {
                    let (a_started, seen) = (a_started.clone(), seen.clone());
                    async move {
                        if job.key() == Some("a") {
                            a_started.fetch_add(1, Relaxed);
                        } else {
                            let late = SystemTime::now()
                                .duration_since(job.run_at())
                                .unwrap_or_default();
                            let mut s = seen.lock().unwrap();
                            s.0.push(late);
                            if s.0.len() == B {
                                s.1 = Some(a_started.load(Relaxed));
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        Ok::<(), String>(())
                    }
                })
            };
            let running = tokio::spawn(worker);
            while seen.lock().unwrap().1.is_none() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            running.abort();
            let (mut late, a_before) = {
                let s = seen.lock().unwrap();
                (s.0.clone(), s.1.unwrap_or_default())
            };
            late.sort();
            println!(
                "round {}: {name:<9} B's lateness p50 {:>8.1} ms, p99 {:>8.1} ms; A's started before B's last: {a_before}",
                round + 1,
                percentile(&late, 50).as_secs_f64() * 1e3,
                percentile(&late, 99).as_secs_f64() * 1e3,
            );
            queue.close().await.expect("close");
        }
    }
}
