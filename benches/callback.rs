//! Callback tasks, ours beside the tokio and tokio-util ways of doing the same work.
//!
//! `cargo bench --bench callback`.
//!
//! - `schedule_cancel`: schedule a callback 60 s out and cancel it (the common fate of a
//!   timeout). tokio: spawn a task that sleeps then calls, and abort it. tokio-util: a
//!   `DelayQueue` insert and remove (single-owner, runs no callback: the floor).
//! - `fire_10k`: schedule 10 000 callbacks due in 1 ms and wait until all have run; the
//!   figure includes that 1 ms. Ours with the default executor (blocking pool) and with
//!   callbacks as tokio tasks; tokio: 10 000 spawned tasks that sleep then call.

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use tokio::sync::Notify;
use wheel_timer::Timer;

const FAR: Duration = Duration::from_secs(60);
const FIRE: usize = 10_000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn schedule_cancel(c: &mut Criterion) {
    let rt = runtime();
    let _enter = rt.enter();
    let timer = Timer::new();
    let mut group = c.benchmark_group("schedule_cancel");
    group.bench_function("wheel_timer/schedule+cancel", |b| {
        b.iter(|| black_box(timer.schedule(FAR, || {}).unwrap().cancel()))
    });
    group.bench_function("tokio/spawn(sleep)+abort", |b| {
        b.iter(|| {
            tokio::spawn(async {
                tokio::time::sleep(FAR).await;
                black_box(());
            })
            .abort()
        })
    });
    group.bench_function("tokio_util/DelayQueue insert+remove", |b| {
        let mut queue = tokio_util::time::DelayQueue::new();
        b.iter(|| {
            let key = queue.insert((), FAR);
            black_box(queue.remove(&key));
        })
    });
    group.finish();
}

/// Runs `schedule` (which arranges for `FIRE` calls of `done` about 1 ms out) and waits
/// for the last call.
fn fire_all(
    rt: &tokio::runtime::Runtime,
    schedule: &dyn Fn(Arc<dyn Fn() + Send + Sync>),
) -> Duration {
    let count = Arc::new(AtomicUsize::new(0));
    let all = Arc::new(Notify::new());
    let (c, a) = (count.clone(), all.clone());
    let done: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        if c.fetch_add(1, Ordering::Relaxed) + 1 == FIRE {
            a.notify_one();
        }
    });
    let start = Instant::now();
    schedule(done);
    rt.block_on(all.notified());
    start.elapsed()
}

fn fire_10k(c: &mut Criterion) {
    let rt = runtime();
    let _enter = rt.enter();
    let blocking_pool = Timer::new();
    let tasks = Timer::builder()
        .executor(|job| drop(tokio::spawn(async move { job() })))
        .build()
        .unwrap();
    let mut group = c.benchmark_group("fire_10k");
    group.sample_size(20);
    for (name, timer) in [
        ("wheel_timer/schedule (blocking pool)", &blocking_pool),
        ("wheel_timer/schedule (tokio tasks)", &tasks),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        fire_all(&rt, &|done| {
                            for _ in 0..FIRE {
                                let done = done.clone();
                                let _ = timer
                                    .schedule(Duration::from_millis(1), move || done())
                                    .unwrap();
                            }
                        })
                    })
                    .sum()
            })
        });
    }
    group.bench_function("tokio/spawn(sleep; call)", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    fire_all(&rt, &|done| {
                        for _ in 0..FIRE {
                            let done = done.clone();
                            tokio::spawn(async move {
                                tokio::time::sleep(Duration::from_millis(1)).await;
                                done();
                            });
                        }
                    })
                })
                .sum()
        })
    });
    group.finish();
}

criterion_group!(benches, schedule_cancel, fire_10k);
criterion_main!(benches);
