//! Durable delayed jobs on a [`wheel_timer`]: "auto-rate this order 48 h after delivery unless
//! the customer rates it", surviving restarts and `kill -9`.
//!
//! # Usage
//!
//! ```
//! use std::time::Duration;
//! use wheel_jobs::{JobQueue, JobState, Scheduled};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), wheel_jobs::Error> {
//! # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-lib-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! # let path = dir.join("jobs.redb");
//! let queue = JobQueue::builder().lease(Duration::from_secs(30)).max_attempts(5).open(&path).await?;
//!
//! // Durable once this returns; a retried call after a timeout is harmless.
//! let created = queue.schedule("rate:order-42", Duration::from_secs(48 * 3600), "5 stars").await?;
//! assert_eq!(created, Scheduled::Created);
//! let info = queue.get("rate:order-42").await?.expect("just scheduled");
//! assert_eq!(info.state(), JobState::Pending);
//!
//! // The customer rated first.
//! assert!(queue.cancel("rate:order-42").await?);
//!
//! // Workers: at most 16 handlers at once; Ok acks, Err or a panic retries with backoff.
//! let worker = queue.clone();
//! tokio::spawn(async move {
//!     worker.run(16, |job| async move {
//!         println!("rating {} with {:?}", job.id(), job.payload());
//!         Ok::<(), std::io::Error>(())
//!     }).await
//! });
//! # queue.close().await?;
//! # std::fs::remove_dir_all(&dir).unwrap();
//! # Ok(())
//! # }
//! ```
//!
//! Lower level, [`JobQueue::consume`] is a stream of [`Delivery`]s to
//! [`ack`](Delivery::ack), [`retry`](Delivery::retry) or [`extend`](Delivery::extend) by hand.
//!
//! Recurring work ("the digest at 20:00 Shanghai time, every day") is a series:
//! [`JobQueue::schedule_recurring`] with a [`Recurrence`] (a cron expression in a zone, or an
//! interval). Its occurrences are ordinary jobs, and the claim that first takes one creates
//! the next in the same atomic step, so no process runs a scheduler and a crash neither
//! loses the series nor duplicates an occurrence; [`CatchUp`] says what runs after a
//! downtime, and [`RecurringOptions`] gives its occurrences a kind, a priority and
//! attempts of their own ([`JobQueue::schedule_recurring_with`]).
//!
//! # Operating a queue
//!
//! [`JobQueue::counts`] reads the jobs per state, the paused flag and the next due time from
//! counters the store keeps (never a scan); [`JobQueue::list`] returns a page of one state's
//! jobs (pending ones by due time, running ones by lease end, dead ones most recently dead
//! first), resumable
//! with its [`Cursor`]; [`JobInfo::last_error`] says why a job's last attempt failed
//! ([`Delivery::fail`], a `run` handler's `Err` or panic, or "lease expired");
//! [`JobQueue::revive`] sends a dead job back; [`JobQueue::pause`] stops every claim, in
//! every process, until [`JobQueue::resume`]. With the `serde` feature,
//! `JobQueue::typed::<T>()` schedules and runs `T`s stored as JSON; with `metrics`, a queue
//! reports counters, gauges and histograms through the `metrics` facade (names in the
//! README), and `run` wraps each handler in a `tracing` span with the job's id and attempt.
//! With `console`, `console::router` is a web console for a queue (counts, rates, a page
//! per state's list, a job with its last error, revive, cancel, pause) to mount in an axum
//! app; the `wheel-jobs` command (`jobs/cli`) serves it and does the same from a terminal.
//!
//! # Guarantees
//!
//! - **Durable schedules.** [`JobQueue::schedule`] returns once the job is fsync'd.
//!   Concurrent calls share one commit (group commit), so durability does not cost an fsync
//!   per job under load.
//! - **Never early, on time after restarts.** Due times are wall-clock ([`When`]); a job is
//!   delivered no earlier than its `run_at`, and jobs that fell due while no process had the
//!   store open are delivered as soon as it is opened and consumed.
//! - **At-least-once.** A delivered job is owned by one consumer at a time under a lease
//!   with a token. If the lease ends first (crash, slow handler), it is delivered again with
//!   `attempt + 1`, and the old delivery's ack returns `false` and changes nothing. After
//!   [`max_attempts`](Builder::max_attempts) deliveries the job is [`JobState::Dead`].
//!   Exactly-once *effects* need handlers that are idempotent, keyed by the job id.
//! - **Bounded store and memory.** Acked jobs are deleted; dead ones stay until
//!   [`JobQueue::remove_dead`] / [`JobQueue::purge_dead`] (or [`JobQueue::revive`]). Nothing loads the queue into
//!   memory: pending jobs live in an on-disk B-tree ordered by due time behind a bounded page
//!   cache, and opening reads a few counters whatever the queue's size.
//! - **No polling loop.** An idle consumer arms one wheel-timer sleep for the next due job
//!   or lease end; scheduling an earlier job wakes it.
//!
//! # Storage
//!
//! The embedded store is one [redb](https://docs.rs/redb) file (pure Rust, checksummed
//! copy-on-write B-trees, fsync per commit, quick repair after a crash). The file is locked:
//! one process (and one open queue) at a time; [`Error::is_locked`] otherwise. The design is
//! backend-neutral: the state machine, the API and the test suite do not depend on redb.
//!
//! With the `redis` feature, `Builder::redis` (and `redis_cluster`, with
//! `partitions`) puts the same queue on a Redis server shared by many processes: each
//! state change is one Lua script using the server's clock, the due index holds ids only,
//! concurrent schedules and acks share one call, and schedules of earlier jobs wake idle
//! consumers over pub/sub. An unreachable server gives [`Error::is_unavailable`] within
//! `redis_timeout`, and [`JobQueue::run`] retries by itself. `Builder::redis_sentinel`
//! follows failovers, `Builder::min_replicas` waits for replicas, and the `redis-tls`
//! feature adds `rediss://` URLs (rustls); refused credentials, ACLs or certificates give
//! [`Error::is_unauthorized`].
//!
//! With the `postgres` feature, `Builder::postgres` (or `Builder::postgres_pool`, on the
//! application's own sqlx pool) puts the same queue in a schema of a PostgreSQL database
//! (`wheel_jobs` unless `Builder::postgres_schema` names another), created and migrated
//! by the library: each state change is one statement using the server's clock, claims
//! take due jobs with `FOR UPDATE SKIP LOCKED`, concurrent schedules and acks share a
//! commit, and a commit that makes a job due wakes idle consumers over `LISTEN`. Its
//! point is the application's own transaction: `JobQueue::schedule_in`, `cancel_in` and
//! `reschedule_in` take a `&mut PgConnection` (a transaction), so an order and its job
//! commit together or not at all, and `Delivery::ack_in` acknowledges a job in the
//! transaction that writes its effects (exactly-once effects in that database). An
//! unreachable server gives [`Error::is_unavailable`] within `postgres_timeout`.
//!
//! # Performance
//!
//! One durable commit serves every request waiting for it, so throughput grows with
//! concurrency: on a 2-vCPU VM, ~38,000 durable schedules/s from 64 concurrent schedulers,
//! ~100,000 from 1,024, ~600,000 jobs/s through [`JobQueue::schedule_many`], ~86,000
//! deliveries + acks/s through [`JobQueue::run`] (claims are fsync'd too, so a slow disk
//! lowers this: ~25,000 with a 4 ms fsync); a store of 10M pending jobs opens in
//! milliseconds with 6 MiB RSS. Figures and the command that reproduces them
//! (`cargo run --release -p wheel-bench --bin jobs -- --big`) are in the README's
//! "Durable jobs" section.
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

// Layers, bottom up (a module imports only from the layers below it; docs/ARCHITECTURE.md,
// "wheel-jobs"): core (values and pure rules) → backend (the trait, and under it one folder
// per store: embedded, redis, postgres) → queue (the front: JobQueue, builder, consumer,
// worker) → console (reads only through JobQueue).
mod backend;
#[cfg(feature = "console")]
pub mod console;
mod core;
mod queue;

pub use crate::core::error::Error;
pub use crate::core::job::{
    Counts, JobInfo, JobState, KindCounts, Scheduled, When, MAX_ERROR_LEN, MAX_ID_LEN, MAX_PAYLOAD,
};
pub use crate::core::kind::{
    Dedup, JobOptions, MAX_KEY_LEN, MAX_KIND_LEN, MAX_RATE_PERIOD, MIN_LEASE,
};
pub use crate::core::list::{Cursor, ListOptions, Page};
pub use crate::core::recurrence::Recurrence;
pub use crate::core::series::{CatchUp, Recurring, RecurringInfo, RecurringOptions};
pub use crate::queue::builder::Builder;
pub use crate::queue::consumer::Consumer;
pub use crate::queue::copy::Copied;
pub use crate::queue::delivery::Delivery;
pub use crate::queue::kinds::Worker;
#[cfg(feature = "serde")]
pub use crate::queue::typed::{TypedDelivery, TypedQueue};
pub use crate::queue::JobQueue;
/// The sqlx this crate was built with (feature `postgres`): its `PgPool`, `PgConnection`
/// and `Transaction` are what `Builder::postgres_pool` and the transactional forms take.
#[cfg(feature = "postgres")]
pub use sqlx;
