//! The `wheel-jobs` binary, run as a child process: every subcommand on each backend with
//! `--json` parsed back (`cases.rs`), `serve` (`serve.rs`), `copy` (`copy.rs`), and the
//! error exits (`errors.rs`).

// The jobs crate's test harnesses (a temporary store, a redis-server of the test's own);
// this binary uses only some of what they offer.
#[allow(dead_code)]
#[path = "../../../tests/it/support/mod.rs"]
mod support;

mod run;
#[macro_use]
mod cases;
mod copy;
mod errors;
mod serve;

mod embedded {
    cli_suite!(crate::support::embedded::harness());
}

#[cfg(feature = "redis")]
mod redis {
    cli_suite!(crate::support::redis::harness());
}

#[cfg(feature = "postgres")]
mod postgres {
    cli_suite!(crate::support::postgres::harness());
}
