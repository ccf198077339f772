//! Firing: N = 1M timers due across 1 s (1000 per 1 ms tick, registered in random order),
//! ours beside tokio's: how fast the driver expires them and what each wake costs.
//!
//! `cargo bench --bench fire`. Criterion reports time per expiration (and expirations/s),
//! averaged over whole rounds of N; registration and teardown are not timed.
//! `WHEEL_BENCH_CPU=1` makes it the bench thread's CPU time (which, on a `current_thread`
//! runtime, includes the drivers), steadier on a loaded machine.
//!
//! **Paused clock, on purpose.** Each round runs on a `current_thread` runtime with tokio's
//! clock paused: when every task is idle, tokio jumps the clock to the next timer it knows
//! (for ours, the driver's own tokio sleep to its next tick), so the second of deadlines is
//! replayed tick by tick with no idle waiting. The measured wall time is then exactly the CPU
//! work of firing — per-tick driver turns, wheel expiry, waking, and (for `tasks`) running the
//! woken tasks — which a real-clock run would bury under 1 s of sleeping. Both timers run
//! their normal code on the same runtime; only the clock is virtual.
//!
//! - `wakers`: each timer is a bare future polled once with a shared counting waker; the
//!   wake is one atomic add, so the figure is the driver's cost per expiration.
//! - `tasks`: each timer is awaited by its own spawned task, so the figure adds what a real
//!   program pays: scheduling and polling the woken task (the same for both timers).

mod common;

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use futures::task::AtomicWaker;
use tokio::time::Instant;
use wheel_timer::Timer;

use common::{per_op, SplitMix};

const N: usize = 1_000_000;

#[derive(Clone, Copy)]
enum Peer {
    Wheel,
    Tokio,
}

const PEERS: [(&str, Peer); 2] = [
    ("wheel_timer/Timer::sleep_until", Peer::Wheel),
    ("tokio/sleep_until", Peer::Tokio),
];

/// Counts completions and wakes the bench once `target` are in.
struct Countdown {
    count: AtomicUsize,
    target: usize,
    waiter: AtomicWaker,
}

impl Countdown {
    fn new(target: usize) -> Arc<Countdown> {
        Arc::new(Countdown {
            count: AtomicUsize::new(0),
            target,
            waiter: AtomicWaker::new(),
        })
    }

    fn hit(&self) {
        if self.count.fetch_add(1, Ordering::Relaxed) + 1 == self.target {
            self.waiter.wake();
        }
    }

    /// Completes once `target` hits are in.
    async fn done(&self) {
        poll_fn(|cx| {
            self.waiter.register(cx.waker());
            if self.count.load(Ordering::Relaxed) >= self.target {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }
}

impl Wake for Countdown {
    fn wake(self: Arc<Self>) {
        self.hit();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.hit();
    }
}

pin_project_lite::pin_project! {
    /// Polls the inner future, counting its first poll (the one that registers the timer).
    struct Registering<F> {
        #[pin]
        inner: F,
        registered: Option<Arc<Countdown>>,
    }
}

impl<F: Future> Future for Registering<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let out = this.inner.poll(cx);
        if let Some(registered) = this.registered.take() {
            registered.hit();
        }
        out
    }
}

/// Deadline offsets: one every 1 µs from 1 ms to 1001 ms, shuffled.
fn offsets() -> Vec<Duration> {
    let mut offsets: Vec<Duration> = (0..N as u64)
        .map(|i| Duration::from_micros(1000 + i * 1_000_000 / N as u64))
        .collect();
    SplitMix(0x66697265).shuffle(&mut offsets);
    offsets
}

/// Registers N bare timers with one counting waker, then times until all have fired.
async fn wakers_round(peer: Peer, timer: &Timer, offsets: &[Duration]) -> Duration {
    let start = Instant::now();
    let fired = Countdown::new(N);
    let waker = Waker::from(fired.clone());
    let mut cx = Context::from_waker(&waker);
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    match peer {
        Peer::Wheel => {
            ours = offsets
                .iter()
                .map(|&o| timer.sleep_until(start + o))
                .collect();
            for sleep in &mut ours {
                assert!(Pin::new(sleep).poll(&mut cx).is_pending());
            }
        }
        Peer::Tokio => {
            theirs = offsets
                .iter()
                .map(|&o| Box::pin(tokio::time::sleep_until(start + o)))
                .collect();
            for sleep in &mut theirs {
                assert!(sleep.as_mut().poll(&mut cx).is_pending());
            }
        }
    }
    let clock = common::Stopwatch::start();
    fired.done().await;
    let elapsed = clock.elapsed();
    assert!(Instant::now() >= start + Duration::from_millis(1000));
    drop((ours, theirs));
    elapsed
}

/// Spawns N tasks that each await one timer; times from all registered to all done.
async fn tasks_round(peer: Peer, timer: &Timer, offsets: &[Duration]) -> Duration {
    let start = Instant::now();
    let registered = Countdown::new(N);
    let done = Countdown::new(N);
    for &o in offsets {
        let (registered, done) = (Some(registered.clone()), done.clone());
        match peer {
            Peer::Wheel => {
                let inner = timer.sleep_until(start + o);
                tokio::spawn(async move {
                    Registering { inner, registered }.await;
                    done.hit();
                });
            }
            Peer::Tokio => {
                let inner = tokio::time::sleep_until(start + o);
                tokio::spawn(async move {
                    Registering { inner, registered }.await;
                    done.hit();
                });
            }
        }
    }
    registered.done().await;
    let clock = common::Stopwatch::start();
    done.done().await;
    let elapsed = clock.elapsed();
    assert!(Instant::now() >= start + Duration::from_millis(1000));
    elapsed
}

fn fire(c: &mut Criterion) {
    let offsets = offsets();
    for (group_name, tasks) in [("fire_1M_wakers", false), ("fire_1M_tasks", true)] {
        let mut group = c.benchmark_group(group_name);
        common::rounds(&mut group);
        for (name, peer) in PEERS {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
                .expect("build the paused runtime");
            let timer = rt.block_on(async { Timer::new() });
            group.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    per_op(iters, N, || {
                        rt.block_on(async {
                            if tasks {
                                tasks_round(peer, &timer, &offsets).await
                            } else {
                                wakers_round(peer, &timer, &offsets).await
                            }
                        })
                    })
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, fire);
criterion_main!(benches);
