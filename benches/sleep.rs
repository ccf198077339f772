//! Create + first poll + drop of a 1 s sleep (the never-firing timeout case), ours beside
//! tokio's and pingora-timeout's, on 1 and 2 threads.
//!
//! `cargo bench --bench sleep`. Two-thread figures are time per operation per thread with
//! both threads running at once (throughput = 2 / figure).

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::{Arc, Barrier};
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};

const DELAY: Duration = Duration::from_secs(1);

fn poll_once<F: Future>(f: F) {
    let mut f = pin!(f);
    black_box(
        f.as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending(),
    );
}

/// The operations compared, each run inside a runtime context.
#[derive(Clone, Copy)]
enum Op {
    WheelTimer,
    WheelFree,
    Tokio,
    Pingora,
}

fn run(op: Op, timer: &wheel_timer::Timer, iters: u64) {
    match op {
        Op::WheelTimer => (0..iters).for_each(|_| poll_once(timer.sleep(DELAY))),
        Op::WheelFree => (0..iters).for_each(|_| poll_once(wheel_timer::sleep_wheel(DELAY))),
        Op::Tokio => (0..iters).for_each(|_| poll_once(tokio::time::sleep(DELAY))),
        Op::Pingora => {
            (0..iters).for_each(|_| poll_once(pingora_timeout::fast_timeout::fast_sleep(DELAY)))
        }
    }
}

const OPS: [(&str, Op); 4] = [
    ("wheel_timer/Timer::sleep", Op::WheelTimer),
    ("wheel_timer/sleep_wheel", Op::WheelFree),
    ("tokio/sleep", Op::Tokio),
    ("pingora/fast_sleep", Op::Pingora),
];

fn one_thread(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _enter = rt.enter();
    let timer = wheel_timer::Timer::new();
    let mut group = c.benchmark_group("sleep_create_poll_drop_1thread");
    for (name, op) in OPS {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                run(op, &timer, iters);
                start.elapsed()
            })
        });
    }
    group.finish();
}

fn two_threads(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let timer = {
        let _enter = rt.enter();
        wheel_timer::Timer::new()
    };
    let mut group = c.benchmark_group("sleep_create_poll_drop_2threads");
    for (name, op) in OPS {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let barrier = Arc::new(Barrier::new(2));
                let threads: Vec<_> = (0..2)
                    .map(|_| {
                        let (handle, timer, barrier) =
                            (rt.handle().clone(), timer.clone(), barrier.clone());
                        std::thread::spawn(move || {
                            let _enter = handle.enter();
                            barrier.wait();
                            let start = Instant::now();
                            run(op, &timer, iters);
                            start.elapsed()
                        })
                    })
                    .collect();
                threads
                    .into_iter()
                    .map(|t| t.join().unwrap())
                    .max()
                    .unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, one_thread, two_threads);
criterion_main!(benches);
