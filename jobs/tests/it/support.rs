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

/// A `redis-server` of our own on a unix socket in a temporary directory, SIGKILLed on drop.
#[cfg(feature = "redis")]
pub struct RedisServer {
    pub dir: tempfile::TempDir,
    args: Vec<String>,
    child: Option<std::process::Child>,
}

#[cfg(feature = "redis")]
impl RedisServer {
    /// No persistence.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&["--save", "", "--appendonly", "no"])
    }

    /// With the given persistence settings.
    pub fn start_with(args: &[&str]) -> RedisServer {
        let mut server = RedisServer {
            dir: tempfile::tempdir().expect("temporary directory"),
            args: args.iter().map(|a| a.to_string()).collect(),
            child: None,
        };
        server.restart();
        server
    }

    fn socket(&self) -> std::path::PathBuf {
        self.dir.path().join("redis.sock")
    }

    /// Starts the server (again, on the same directory and socket) and waits for it.
    pub fn restart(&mut self) {
        let child = std::process::Command::new("redis-server")
            .args(["--port", "0", "--unixsocket"])
            .arg(self.socket())
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.args)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|err| {
                panic!(
                    "cannot start redis-server ({err}): the redis tests need it on PATH; \
                     install it with `apt-get install redis-server` (Debian/Ubuntu)"
                )
            });
        self.child = Some(child);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(mut s) = std::os::unix::net::UnixStream::connect(self.socket()) {
                use std::io::{Read, Write};
                let mut reply = [0u8; 64];
                // Still loading the append-only file answers -LOADING: wait for +PONG.
                if s.write_all(b"PING\r\n").is_ok()
                    && s.read(&mut reply)
                        .is_ok_and(|n| reply[..n].starts_with(b"+PONG"))
                {
                    return;
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(self.socket());
    }

    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket().display())
    }
}

#[cfg(feature = "redis")]
impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The Redis backend: a queue on a fresh server.
#[cfg(feature = "redis")]
pub struct RedisHarness {
    pub server: RedisServer,
}

#[cfg(feature = "redis")]
pub fn redis() -> RedisHarness {
    RedisHarness {
        server: RedisServer::start(),
    }
}

#[cfg(feature = "redis")]
impl Harness for RedisHarness {
    fn open<'a>(&'a self, builder: &'a Builder) -> BoxFuture<'a, Result<JobQueue, Error>> {
        Box::pin(async move { builder.redis(&self.server.url(), "test").await })
    }
}
