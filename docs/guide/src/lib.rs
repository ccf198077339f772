//! The workspace's README, `jobs/README.md` and the guide's chapters, included as doc
//! comments so that `cargo test` compiles and runs every Rust example in them. The crate
//! has no code of its own; see `docs/guide/README.md` for the guide.
//!
//! The Redis, console and PostgreSQL chapters compile with this crate's features of the
//! same names (`cargo test -p wheel-guide --features redis,console,postgres`): turning
//! them on for a plain `cargo test` would turn on wheel-jobs' Redis, browser and
//! PostgreSQL tests, which need servers.
#![forbid(unsafe_code)]

/// The workspace README's examples.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// `jobs/README.md`, the `wheel-jobs` crate's page on crates.io.
#[doc = include_str!("../../../jobs/README.md")]
#[cfg(doctest)]
pub struct JobsReadmeDoctests;

/// The guide's index.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct GuideIndexDoctests;

/// Chapter: the timer.
#[doc = include_str!("../timer.md")]
#[cfg(doctest)]
pub struct TimerDoctests;

/// Chapter: idle connections.
#[doc = include_str!("../idle.md")]
#[cfg(doctest)]
pub struct IdleDoctests;

/// Chapter: moving from `tokio::time`.
#[doc = include_str!("../tokio-swap.md")]
#[cfg(doctest)]
pub struct TokioSwapDoctests;

/// Chapter: durable jobs.
#[doc = include_str!("../jobs.md")]
#[cfg(doctest)]
pub struct JobsDoctests;

/// Chapter: recurring schedules.
#[doc = include_str!("../recurring.md")]
#[cfg(doctest)]
pub struct RecurringDoctests;

/// Chapter: many kinds of jobs.
#[doc = include_str!("../kinds.md")]
#[cfg(doctest)]
pub struct KindsDoctests;

/// Chapter: operating a queue.
#[doc = include_str!("../operating.md")]
#[cfg(doctest)]
pub struct OperatingDoctests;

/// Chapter: the `wheel-jobs` command and the web console (feature `console`).
#[doc = include_str!("../console.md")]
#[cfg(all(doctest, feature = "console"))]
pub struct ConsoleDoctests;

/// Chapter: Redis in production (feature `redis`).
#[doc = include_str!("../redis.md")]
#[cfg(all(doctest, feature = "redis"))]
pub struct RedisDoctests;

/// Chapter: PostgreSQL, the job and the order in one commit (feature `postgres`).
#[doc = include_str!("../postgres.md")]
#[cfg(all(doctest, feature = "postgres"))]
pub struct PostgresDoctests;

/// Chapter: performance.
#[doc = include_str!("../performance.md")]
#[cfg(doctest)]
pub struct PerformanceDoctests;
