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

    /// Whether jobs come in due order across the whole queue (a partitioned queue orders
    /// them within a partition and within one claim only).
    fn ordered(&self) -> bool {
        true
    }
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

/// The Redis backend: a queue on a fresh server, in one or several partitions.
#[cfg(feature = "redis")]
pub struct RedisHarness {
    pub server: RedisServer,
    partitions: usize,
}

#[cfg(feature = "redis")]
pub fn redis() -> RedisHarness {
    RedisHarness {
        server: RedisServer::start(),
        partitions: 1,
    }
}

#[cfg(feature = "redis")]
pub fn redis_partitioned() -> RedisHarness {
    RedisHarness {
        server: RedisServer::start(),
        partitions: 3,
    }
}

#[cfg(feature = "redis")]
impl Harness for RedisHarness {
    fn open<'a>(&'a self, builder: &'a Builder) -> BoxFuture<'a, Result<JobQueue, Error>> {
        Box::pin(async move {
            let mut builder = builder.clone();
            if self.partitions > 1 {
                builder.partitions(self.partitions);
            }
            builder.redis(&self.server.url(), "test").await
        })
    }

    fn ordered(&self) -> bool {
        self.partitions == 1
    }
}

/// A 3-master Redis Cluster on 127.0.0.1 (free TCP ports), made with `redis-cli --cluster
/// create`, SIGKILLed on drop.
#[cfg(feature = "redis")]
pub struct RedisCluster {
    _dir: tempfile::TempDir,
    children: Vec<std::process::Child>,
    pub nodes: Vec<String>,
}

#[cfg(feature = "redis")]
impl RedisCluster {
    pub fn start() -> RedisCluster {
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut children = Vec::new();
        let mut addrs = Vec::new();
        for i in 0..3 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let node_dir = dir.path().join(format!("node{i}"));
            std::fs::create_dir(&node_dir).unwrap();
            let child = std::process::Command::new("redis-server")
                .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
                .args([
                    "--cluster-enabled",
                    "yes",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .arg("--dir")
                .arg(&node_dir)
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("redis-server (apt-get install redis-server)");
            children.push(child);
            addrs.push(format!("127.0.0.1:{port}"));
        }
        let cluster = RedisCluster {
            _dir: dir,
            children,
            nodes: addrs.iter().map(|a| format!("redis://{a}")).collect(),
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        for addr in &addrs {
            while std::net::TcpStream::connect(addr).is_err() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "redis-server did not start"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let status = std::process::Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(std::process::Stdio::null())
            .status()
            .expect("redis-cli");
        assert!(status.success(), "redis-cli --cluster create failed");
        // Wait until every node agrees the cluster is up.
        for addr in &addrs {
            let (host, port) = addr.split_once(':').unwrap();
            loop {
                let out = std::process::Command::new("redis-cli")
                    .args(["-h", host, "-p", port, "cluster", "info"])
                    .output()
                    .expect("redis-cli");
                if String::from_utf8_lossy(&out.stdout).contains("cluster_state:ok") {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "the cluster did not come up"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        cluster
    }
}

#[cfg(feature = "redis")]
impl RedisCluster {
    /// `redis-cli -c` on the first node (following redirections to the key's node).
    pub fn cli(&self, args: &[&str]) -> String {
        let out = std::process::Command::new("redis-cli")
            .args(["-c", "-u", &self.nodes[0]])
            .args(args)
            .output()
            .expect("redis-cli");
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Subscribers of the sharded channel `channel`, summed over the nodes (only the node
    /// owning its slot can have any).
    pub fn shard_subscribers(&self, channel: &str) -> u64 {
        self.nodes
            .iter()
            .map(|node| {
                let out = std::process::Command::new("redis-cli")
                    .args(["-u", node, "PUBSUB", "SHARDNUMSUB", channel])
                    .output()
                    .expect("redis-cli");
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                text.lines()
                    .nth(1)
                    .and_then(|n| n.trim().parse().ok())
                    .unwrap_or(0)
            })
            .sum()
    }

    /// Stops (`SIGSTOP`) or resumes (`SIGCONT`) node `i`: a node that stops answering.
    pub fn signal(&self, i: usize, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([signal, &self.children[i].id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }
}

#[cfg(feature = "redis")]
impl Drop for RedisCluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
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
