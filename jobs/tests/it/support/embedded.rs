//! The embedded store: a file in a temporary directory of the test's own.

use wheel_jobs::{Builder, Error, JobQueue};

use super::{temp_dir, BoxFuture, Harness};

/// The embedded store in a temporary directory, removed on drop.
pub struct EmbeddedHarness {
    pub dir: tempfile::TempDir,
}

impl EmbeddedHarness {
    pub fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("jobs.redb")
    }
}

/// A fresh store.
pub fn harness() -> EmbeddedHarness {
    EmbeddedHarness { dir: temp_dir() }
}

impl Harness for EmbeddedHarness {
    fn open<'a>(&'a self, builder: &'a Builder) -> BoxFuture<'a, Result<JobQueue, Error>> {
        Box::pin(async move { builder.open(self.path()).await })
    }
}
