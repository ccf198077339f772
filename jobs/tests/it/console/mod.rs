//! The web console (feature `console`): every route and action through the router
//! in-process (`tower::ServiceExt::oneshot`), on each backend; the guard (token, host,
//! CSRF) and mounting; and one real browser (`browser.rs`). The backends: embedded, redis
//! (feature `redis`), postgres (feature `postgres`).

mod browser;
#[macro_use]
mod cases;
mod client;
mod guard;
mod rates;

mod embedded {
    console_suite!(crate::support::embedded::harness());
}

#[cfg(feature = "redis")]
mod redis {
    console_suite!(crate::support::redis::harness());
}

#[cfg(feature = "postgres")]
mod postgres {
    console_suite!(crate::support::postgres::harness());
}
