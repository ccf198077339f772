//! Harnesses (one per backend) and helpers shared by the test modules.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use wheel_jobs::{Builder, Consumer, Delivery, Error, JobQueue};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A backend under test: opens fresh, empty queues and reopens them.
pub trait Harness: Send + Sync + 'static {
    /// Opens the harness's queue with `builder`'s settings (the same store every time).
    fn open<'a>(&'a self, builder: &'a Builder) -> BoxFuture<'a, Result<JobQueue, Error>>;
}

/// The embedded store in a temporary directory, removed on drop.
pub struct EmbeddedHarness {
    pub dir: tempfile::TempDir,
}

impl EmbeddedHarness {
    pub fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("jobs.redb")
    }
}

pub fn embedded() -> EmbeddedHarness {
    EmbeddedHarness {
        dir: tempfile::tempdir().expect("temporary directory"),
    }
}

impl Harness for EmbeddedHarness {
    fn open<'a>(&'a self, builder: &'a Builder) -> BoxFuture<'a, Result<JobQueue, Error>> {
        Box::pin(async move { builder.open(self.path()).await })
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
