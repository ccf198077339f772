//! A Tokio-integrated hierarchical hashed timing wheel: sleeps, timeouts, callback tasks and
//! idle-connection tracking for programs that hold hundreds of thousands to millions of
//! timers.
//!
//! # Usage
//!
//! The free functions are drop-in replacements for `tokio::time`'s, served by one default
//! wheel per runtime:
//!
//! ```
//! use std::time::Duration;
//! use wheel_timer::{sleep_wheel, timeout_wheel};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! sleep_wheel(Duration::from_millis(10)).await;
//! let answer = timeout_wheel(Duration::from_secs(1), async { 42 }).await;
//! assert_eq!(answer, Ok(42));
//! # }
//! ```
//!
//! A [`Timer`] of your own chooses the tick, the wheel size and the sharding, and is what the
//! hot paths should hold (it skips the per-call lookup of the runtime's default timer):
//!
//! ```
//! use std::time::Duration;
//! use wheel_timer::Timer;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), wheel_timer::Error> {
//! let timer = Timer::builder().tick(Duration::from_millis(1)).slots(1024).build()?;
//! let mut sleep = std::pin::pin!(timer.sleep(Duration::from_secs(30)));
//! // Every packet pushes the deadline back, in O(1) and without a new allocation.
//! sleep.as_mut().reset(tokio::time::Instant::now() + Duration::from_millis(5));
//! sleep.await;
//! # Ok(())
//! # }
//! ```
//!
//! Deadlines are [`tokio::time::Instant`]s, so `#[tokio::test(start_paused = true)]` and
//! `tokio::time::advance` drive the wheel as they drive tokio's own timers: the wheel turns
//! where tokio fires its own sleeps, so a sleep that `advance` makes due has been woken when
//! `advance` returns, and auto-advance reaches even a `Duration::MAX` deadline (saturated
//! 146 years out; tokio saturates its own at 30 years).
//!
//! Delayed work is a callback with a cancel handle ([`Timer::schedule`], Netty's
//! `newTimeout`), periodic work an [`Interval`] or [`Timer::schedule_repeating`]:
//!
//! ```
//! use std::time::Duration;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), wheel_timer::Error> {
//! let timer = wheel_timer::Timer::new();
//! let auto_rate = timer.schedule(Duration::from_secs(48 * 3600), || println!("rated 5 stars"))?;
//! assert!(auto_rate.cancel(), "the customer rated first");
//! let mut every_second = timer.interval(Duration::from_secs(1));
//! every_second.tick().await; // the first tick is immediate
//! # Ok(())
//! # }
//! ```
//!
//! Idle connections go in an [`IdleTracker`]: every packet touches the connection's key (or
//! its [`IdleHandle`]: two atomic loads and at most one `fetch_max` per tracker tick, no
//! lock), and keys idle for the timeout come out of its [`Expirations`] stream in batches;
//! [`IdleStream`] does it for a socket — read, write or all idle ([`IdleKind`]) — failing its
//! I/O with `TimedOut` once idle, or reporting each idle event and staying usable
//! ([`IdleMode`]).
//!
//! ```
//! use std::time::Duration;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let timer = wheel_timer::Timer::new();
//! let (tracker, mut offline) = wheel_timer::IdleTracker::new(&timer, Duration::from_millis(20));
//! tracker.touch("alice");
//! assert_eq!(offline.next_batch().await, Some(vec!["alice"]));
//! # }
//! ```
//!
//! # Ecosystem
//!
//! - [`time`]: `tokio::time`'s names, so a switch is one import.
//! - [`DelayQueue`]: tokio-util's keyed delay queue on the wheel.
//! - `hyper::WheelTimer` (feature `hyper`): hyper 1.x's `Timer` on the wheel.
//! - `tower::TimeoutLayer` (feature `tower`): tower's timeout middleware on the wheel.
//! - [`Sleep`], [`Timeout`] and [`Interval`] spend tokio's cooperative budget as tokio's own
//!   timers do.
//!
//! # Comparison
//!
//! | | `tokio::time` | tokio-util `DelayQueue` | Netty `HashedWheelTimer` | wheel-timer |
//! |---|---|---|---|---|
//! | structure | 6 × 64 wheel, 1 ms | copy of tokio's wheel | one ring + rounds | 1024-slot level 0 + 64-slot levels |
//! | sharing | one mutex per runtime | `&mut self` only | MPSC queues to one thread | one lock per thread-shard |
//! | timers beyond one rotation | cascade | cascade | re-scanned every rotation | cascade, O(1) per level |
//! | idle wakeups | none | spurious at level boundaries | every tick | none |
//! | `Sleep` size | 112 B | — | — | 40 B |
//!
//! # Performance
//!
//! Every operation is O(1) and allocation-free in steady state; a pending timer costs 40
//! bytes inside the wheel and a [`Sleep`] is 40 bytes (tokio's is 112). Threads register in
//! their own shard, so they share no lock on the hot path, and the driver sleeps straight to
//! the next occupied bucket (no wakeups while idle). Figures beside tokio, tokio-util and
//! pingora-timeout, with the commands that produce them, are in the README's "Performance"
//! section (`cargo bench`, `cargo run --release -p wheel-bench --bin compare`).
//!
//! # Correctness
//!
//! A timer never fires before its deadline: deadlines round up to the next tick and a tick
//! fires only once tokio's clock has reached its start. It fires within one tick after it on
//! a running driver (plus scheduling delay on a real clock). The wheel is checked against a
//! `BTreeMap` model by a property test, the public API by paused-clock tests mirroring
//! tokio's own time tests, and the cross-thread state machines by loom models (see
//! `docs/ARCHITECTURE.md`).
//!
//! # Implementation notes
//!
//! Varghese & Lauck's scheme 7 (hierarchical wheels), as in Kafka and tokio: level 0 has
//! `slots` buckets of one tick; level *l* ≥ 1 has 64 buckets of `slots · 64^(l−1)` ticks. With
//! the default 1 ms tick and 1024 slots:
//!
//! | level | bucket width | reaches |
//! |---|---|---|
//! | 0 | 1 ms | 1.02 s |
//! | 1 | 1.02 s | 65.5 s |
//! | 2 | 65.5 s | 69.9 min |
//! | 3 | 69.9 min | 3.1 days |
//! | 4 | 3.1 days | 199 days |
//! | 5 … 9 | … | 146 years (the saturation point) |
//!
//! An entry goes to the level of the highest bit in which its tick differs from the wheel's
//! current tick, and cascades down at most once per level; occupancy bitmaps find the next
//! due bucket without scanning, so the driver sleeps straight to it.
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

mod callback;
mod clock;
mod default;
pub mod delay_queue;
mod dispatch;
mod driver;
mod error;
#[cfg(feature = "hyper")]
pub mod hyper;
mod idle;
mod interval;
mod loom;
#[cfg(all(test, wheel_loom))]
mod loom_tests;
mod shard;
mod sleep;
mod stash;
mod stats;
mod task;
pub mod time;
mod timeout;
mod timer;
#[cfg(feature = "tower")]
pub mod tower;
mod wheel;

pub use callback::TimerTask;
pub use default::{default_timer, sleep_wheel, sleep_wheel_until, timeout_wheel, timeout_wheel_at};
pub use delay_queue::DelayQueue;
pub use error::{Elapsed, Error};
pub use idle::{
    Expirations, Idle, IdleHandle, IdleKind, IdleMode, IdleStream, IdleStreamBuilder, IdleTracker,
    IdleTrackerBuilder,
};
pub use interval::{interval_wheel, interval_wheel_at, Interval, MissedTickBehavior};
pub use sleep::Sleep;
pub use stats::Stats;
pub use timeout::Timeout;
pub use timer::{Builder, Timer};

/// The README's examples, compiled and run as doctests so that they cannot rot.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
