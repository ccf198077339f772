//! Holding many timers: insert N = 1M pending timers (create + first poll, kept), then cancel
//! them all (drop), ours beside tokio sleeps and `tokio_util::time::DelayQueue`.
//!
//! `cargo bench --bench hold`. Criterion reports time per operation (and operations/s),
//! averaged over whole rounds of N operations; `WHEEL_BENCH_CPU=1` makes it the bench
//! thread's CPU time, steadier on a loaded machine.
//!
//! - Deadlines are spread at random over 10–70 s (idle-timeout-like, never due during a
//!   round).
//! - Two cancellation orders: `fifo` (insertion order: caches and prefetchers see sequential
//!   memory) and `random` (as connections end independently; every timer's entry, and the
//!   next round's free slots, are then at random addresses among N, so each operation pays
//!   cache and TLB misses — on this machine that dominates every peer's figure).
//! - `insert` is create + first poll (which registers) + store; `cancel` is the drop (for
//!   `DelayQueue`, `insert` / `remove`, which need `&mut` and so cannot be shared).
//! - tokio's `Sleep` is `!Unpin`, so holding many means boxing each (`Box::pin`); ours is
//!   `Unpin` and is held in place. `Timer::sleep boxed` holds ours exactly like tokio's, for
//!   an apples-to-apples figure that includes the same allocation.
//! - All on the bench thread, inside a two-worker multi-thread runtime (the real clock).

mod common;

use std::pin::Pin;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use tokio_util::time::{delay_queue, DelayQueue};
use wheel_timer::{Sleep, Timer};

use common::{poll_pinned, SplitMix};

const N: usize = 1_000_000;

#[derive(Clone, Copy)]
enum Phase {
    Insert,
    Cancel,
}

#[derive(Clone, Copy)]
enum Peer {
    Wheel,
    WheelBoxed,
    Tokio,
    DelayQueue,
}

const PEERS: [(&str, Peer); 4] = [
    ("wheel_timer/Timer::sleep", Peer::Wheel),
    ("wheel_timer/Timer::sleep boxed", Peer::WheelBoxed),
    ("tokio/sleep boxed", Peer::Tokio),
    ("tokio_util/DelayQueue", Peer::DelayQueue),
];

/// What one round works on; the vectors keep their capacity across rounds so no round times
/// their growth.
struct Bench {
    timer: Timer,
    delays: Vec<Duration>,
    /// Cancellation orders: `0..N`, and a random permutation of it.
    fifo: Vec<usize>,
    random: Vec<usize>,
    wheel: Vec<Option<Sleep>>,
    wheel_boxed: Vec<Option<Pin<Box<Sleep>>>>,
    tokio: Vec<Option<Pin<Box<tokio::time::Sleep>>>>,
    queue: DelayQueue<()>,
    keys: Vec<Option<delay_queue::Key>>,
}

impl Bench {
    fn new() -> Bench {
        let mut rng = SplitMix(0x686f6c64);
        let delays = (0..N)
            .map(|_| Duration::from_millis(10_000 + rng.below(60_000)))
            .collect();
        let fifo: Vec<usize> = (0..N).collect();
        let mut random = fifo.clone();
        rng.shuffle(&mut random);
        Bench {
            timer: Timer::new(),
            delays,
            fifo,
            random,
            wheel: Vec::with_capacity(N),
            wheel_boxed: Vec::with_capacity(N),
            tokio: Vec::with_capacity(N),
            queue: DelayQueue::with_capacity(N),
            keys: Vec::with_capacity(N),
        }
    }

    /// One round of `peer`: N inserts, then N cancels in `random` or insertion order; returns
    /// their times.
    fn round(&mut self, peer: Peer, random: bool) -> (Duration, Duration) {
        let order = if random { &self.random } else { &self.fifo };
        let start = common::Stopwatch::start();
        match peer {
            Peer::Wheel => {
                for &d in &self.delays {
                    let mut sleep = self.timer.sleep(d);
                    assert!(poll_pinned(Pin::new(&mut sleep)));
                    self.wheel.push(Some(sleep));
                }
            }
            Peer::WheelBoxed => {
                for &d in &self.delays {
                    let mut sleep = Box::pin(self.timer.sleep(d));
                    assert!(poll_pinned(sleep.as_mut()));
                    self.wheel_boxed.push(Some(sleep));
                }
            }
            Peer::Tokio => {
                for &d in &self.delays {
                    let mut sleep = Box::pin(tokio::time::sleep(d));
                    assert!(poll_pinned(sleep.as_mut()));
                    self.tokio.push(Some(sleep));
                }
            }
            Peer::DelayQueue => {
                for &d in &self.delays {
                    self.keys.push(Some(self.queue.insert((), d)));
                }
            }
        }
        let inserted = start.elapsed();
        if let Peer::Wheel | Peer::WheelBoxed = peer {
            assert_eq!(self.timer.pending(), N);
        }
        let start = common::Stopwatch::start();
        match peer {
            Peer::Wheel => order.iter().for_each(|&i| drop(self.wheel[i].take())),
            Peer::WheelBoxed => order.iter().for_each(|&i| drop(self.wheel_boxed[i].take())),
            Peer::Tokio => order.iter().for_each(|&i| drop(self.tokio[i].take())),
            Peer::DelayQueue => order.iter().for_each(|&i| {
                let key = self.keys[i].take().expect("inserted above");
                self.queue.remove(&key);
            }),
        }
        let cancelled = start.elapsed();
        assert_eq!(self.timer.pending(), 0);
        assert!(self.queue.is_empty());
        self.wheel.clear();
        self.wheel_boxed.clear();
        self.tokio.clear();
        self.keys.clear();
        (inserted, cancelled)
    }
}

fn hold(c: &mut Criterion) {
    let rt = common::runtime();
    let _enter = rt.enter();
    let mut bench = Bench::new();
    let scenarios = [
        (false, Phase::Insert, "hold_1M_fifo_insert"),
        (false, Phase::Cancel, "hold_1M_fifo_cancel"),
        (true, Phase::Insert, "hold_1M_random_insert"),
        (true, Phase::Cancel, "hold_1M_random_cancel"),
    ];
    for (random, phase, group_name) in scenarios {
        let mut group = c.benchmark_group(group_name);
        common::rounds(&mut group);
        for (name, peer) in PEERS {
            group.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    common::per_op(iters, N, || {
                        let (insert, cancel) = bench.round(peer, random);
                        match phase {
                            Phase::Insert => insert,
                            Phase::Cancel => cancel,
                        }
                    })
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, hold);
criterion_main!(benches);
