//! What the tests start, one file per thing, and what every backend shares.
//!
//! This module holds the [`Harness`] trait (a backend under test: it opens fresh, empty
//! queues on what it started, and reopens them), temporary directories, free ports and the
//! helpers every test module uses. Each file beside it starts one thing:
//!
//! - `embedded.rs`: the embedded store in a temporary directory;
//! - `redis.rs`: a `redis-server` of the test's own on loopback, and the Redis harnesses;
//! - `cluster.rs`: a 3-master Redis Cluster;
//! - `sentinel.rs`: a primary, a replica and three sentinels;
//! - `tls.rs`: a test certificate authority and the server certificate it signs;
//! - `postgres.rs`: a PostgreSQL server of the binary's own in a temporary directory, shared
//!   by the tests (a queue each), and the PostgreSQL harness.
//!
//! # Adding a backend
//!
//! 1. One new file here, `support/<backend>.rs`: what the backend needs started, a type
//!    implementing [`Harness`] on it, and a `harness()` making a fresh one; plus its `mod`
//!    line below.
//! 2. One line in the backend list: the test module `tests/it/<backend>.rs` (a `mod` line in
//!    `main.rs`) opens with `run_shared_suite!(crate::support::<backend>::harness());`, which
//!    runs every test of `suite/` on it under the module's name. The console's suite and the
//!    command's take one line each the same way (`console_suite!`, `cli_suite!`).
//!
//! The command's tests (`jobs/cli/tests`) include this folder too, by `#[path]`.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use wheel_jobs::{Builder, Consumer, Delivery, Error, JobQueue};

#[cfg(feature = "redis")]
pub mod cluster;
pub mod embedded;
#[cfg(feature = "postgres")]
#[allow(dead_code)] // the command's tests, which share this folder, use a part of it
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "redis")]
pub mod sentinel;
#[cfg(any(feature = "redis", feature = "postgres"))]
#[allow(dead_code)] // the TLS tests of each backend use a part of it, the command's none
pub mod tls;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A backend under test: opens fresh, empty queues and reopens them.
pub trait Harness: Send + Sync + 'static {
    /// Opens the harness's queue with `builder`'s settings (the same store every time).
    fn open<'a>(&'a self, builder: &'a Builder) -> BoxFuture<'a, Result<JobQueue, Error>>;

    /// Whether jobs come in due order across the whole queue (a partitioned queue orders
    /// them within a partition and within one claim only).
    fn ordered(&self) -> bool {
        true
    }

    /// Whether the queue keeps key limits (`JobOptions::key_limit` and `key_rate`): a
    /// partitioned Redis queue places jobs by id, so it refuses them.
    fn limits_keys(&self) -> bool {
        true
    }
}

/// The next delivery, which must come: a closed queue or an error fails the test.
#[track_caller]
pub fn next(consumer: &mut Consumer) -> impl Future<Output = Delivery> + '_ {
    let caller = std::panic::Location::caller();
    async move {
        match consumer.next().await {
            Some(Ok(delivery)) => {
                assert!(
                    SystemTime::now() >= delivery.run_at(),
                    "{caller}: {} delivered before its run_at",
                    delivery.id()
                );
                delivery
            }
            Some(Err(err)) => panic!("{caller}: consumer failed: {err}"),
            None => panic!("{caller}: consumer ended"),
        }
    }
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A temporary directory, removed on drop.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temporary directory")
}

/// `kill -<signal>` of a child process.
#[cfg(feature = "redis")]
fn send_signal(child: &std::process::Child, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill {signal} failed");
}

/// A free TCP port on 127.0.0.1 (free when asked: a server started at once gets it).
#[cfg(any(feature = "redis", feature = "postgres"))]
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Spawns `queue.run(concurrency, …)` with a handler that sends each delivered id to `ids`
/// and acks it.
pub fn spawn_reporting_worker(
    queue: JobQueue,
    concurrency: usize,
    ids: tokio::sync::mpsc::UnboundedSender<String>,
) -> tokio::task::JoinHandle<Result<(), Error>> {
    tokio::spawn(async move {
        queue
            .run(concurrency, move |d| {
                let ids = ids.clone();
                async move {
                    ids.send(d.id().to_owned()).unwrap();
                    Ok::<(), String>(())
                }
            })
            .await
    })
}

/// The last error of the job "failed" that [`busy_and_failed`] leaves dead.
#[allow(dead_code)] // for the console's tests (feature `console`) and the command's
pub const FAILED_WITH: &str = "card declined <b>05</b>\n  at charge (billing.rs:42)";

/// Puts "busy" (running) and "failed" (dead, its last error [`FAILED_WITH`]) in `queue`,
/// which must allow one attempt and lease for long enough that "busy" stays running for
/// the test.
#[allow(dead_code)] // for the console's tests (feature `console`) and the command's
pub async fn busy_and_failed(queue: &JobQueue) {
    queue.schedule("busy", Duration::ZERO, "b").await.unwrap();
    queue.schedule("failed", Duration::ZERO, "f").await.unwrap();
    let mut consumer = queue.consume();
    for _ in 0..2 {
        let delivery = next(&mut consumer).await;
        if delivery.id() == "failed" {
            assert!(delivery.fail(ms(0), FAILED_WITH).await.unwrap());
        }
    }
}
