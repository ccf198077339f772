//! Public-API tests of wheel-jobs (one binary, one module per concern).
//!
//! `suite/` is the shared suite, written once against a [`support::Harness`] and run on
//! every backend: the embedded store (`embedded`), Redis (`redis`) and PostgreSQL
//! (`postgres`). `support/` starts what the tests need, one file per thing; its module doc
//! says how a backend joins the suite.

mod support;
#[macro_use]
mod suite;
#[cfg(feature = "console")]
mod console;
mod copy;
mod embedded;
mod kill;
#[cfg(feature = "metrics")]
mod metrics;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
mod postgres_dedup;
#[cfg(feature = "postgres")]
mod postgres_faults;
#[cfg(feature = "postgres")]
mod postgres_keys;
#[cfg(feature = "postgres")]
mod postgres_kinds;
#[cfg(feature = "postgres")]
mod postgres_pool;
#[cfg(feature = "postgres")]
mod postgres_series;
#[cfg(feature = "postgres")]
mod postgres_server;
#[cfg(feature = "postgres")]
mod postgres_successor;
#[cfg(feature = "postgres")]
mod postgres_tls;
#[cfg(feature = "redis")]
mod redis;
