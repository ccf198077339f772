//! Public-API tests of wheel-jobs (one binary, one module per concern).
//!
//! `suite` is the behavioural suite, written once against a [`support::Harness`] and run here
//! for the embedded store (`embedded`); another backend runs the same suite by adding a
//! harness and one `behaviour_suite!` line.

mod support;
#[macro_use]
mod suite;
#[macro_use]
mod recurring;
#[cfg(feature = "console")]
mod console;
mod embedded;
mod kill;
#[cfg(feature = "metrics")]
mod metrics;
#[cfg(feature = "redis")]
mod redis;
