//! A `redis-server` of the test's own on loopback (a unix socket, and TCP ports of
//! 127.0.0.1 where asked), and the Redis backend's harnesses on it.

use std::time::Duration;

use wheel_jobs::{Builder, Error, JobQueue};

use super::tls::TestCa;
use super::{free_port, send_signal, temp_dir, BoxFuture, Harness};

/// Persistence that loses nothing the server acknowledged: it fsyncs its append-only
/// file before it answers.
pub const DURABLE: [&str; 6] = [
    "--save",
    "",
    "--appendonly",
    "yes",
    "--appendfsync",
    "always",
];

/// A `redis-server` of our own on a unix socket in a temporary directory, SIGKILLed on drop.
pub struct RedisServer {
    pub dir: tempfile::TempDir,
    pub(super) args: Vec<String>,
    pub(super) child: Option<std::process::Child>,
    /// A TCP port on 127.0.0.1 it listens on too (`on_port`), kept across restarts.
    pub port: Option<u16>,
    /// Its TLS port on 127.0.0.1 (`start_tls`), kept across restarts.
    #[cfg_attr(not(feature = "redis-tls"), allow(dead_code))]
    pub tls_port: Option<u16>,
    /// A sentinel's configuration file (which it rewrites): the server runs as a sentinel.
    pub(super) sentinel_conf: Option<std::path::PathBuf>,
}

impl RedisServer {
    /// No persistence.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&["--save", "", "--appendonly", "no"])
    }

    /// With the given persistence settings.
    pub fn start_with(args: &[&str]) -> RedisServer {
        let mut server = RedisServer {
            dir: temp_dir(),
            args: args.iter().map(|a| a.to_string()).collect(),
            child: None,
            port: None,
            tls_port: None,
            sentinel_conf: None,
        };
        server.restart();
        server
    }

    /// With the given settings, listening on a free TCP port of 127.0.0.1 as well (what
    /// replication and Sentinel need).
    pub fn on_port(args: &[&str]) -> RedisServer {
        let port = free_port();
        let mut all = vec!["--bind", "127.0.0.1"];
        let port_text = port.to_string();
        all.extend(["--port", &port_text]);
        all.extend(args);
        let mut server = RedisServer::start_with(&all);
        server.port = Some(port);
        server
    }

    /// No persistence; TLS on a free port of 127.0.0.1 with `ca`'s server certificate, for
    /// clients without certificates of their own. The unix socket stays plain.
    #[cfg_attr(not(feature = "redis-tls"), allow(dead_code))]
    pub fn start_tls(ca: &TestCa) -> RedisServer {
        let port = free_port().to_string();
        let mut args = vec!["--save", "", "--appendonly", "no", "--bind", "127.0.0.1"];
        args.extend(["--tls-port", &port]);
        let tls = ca.server_args();
        args.extend(tls.iter().map(String::as_str));
        let mut server = RedisServer::start_with(&args);
        let port = port.parse().expect("a port");
        server.tls_port = Some(port);
        server
    }

    fn socket(&self) -> std::path::PathBuf {
        self.dir.path().join("redis.sock")
    }

    /// Starts the server (again, on the same directory and socket) and waits for it.
    pub fn restart(&mut self) {
        let mut command = std::process::Command::new("redis-server");
        if let Some(conf) = &self.sentinel_conf {
            // The configuration file comes first.
            command.arg(conf).arg("--sentinel");
        }
        let child = command
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
                // Still loading the append-only file answers -LOADING: wait for +PONG, or
                // -NOAUTH from a server whose default user needs a password.
                let up = |r: &[u8]| r.starts_with(b"+PONG") || r.starts_with(b"-NOAUTH");
                if s.write_all(b"PING\r\n").is_ok()
                    && s.read(&mut reply).is_ok_and(|n| up(&reply[..n]))
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

    /// Sends `signal` (`-STOP`, `-CONT`) to the running server.
    pub fn signal(&self, signal: &str) {
        send_signal(self.child.as_ref().expect("a running server"), signal);
    }

    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket().display())
    }

    /// `redis-cli` on the server's unix socket; its output, trimmed.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = std::process::Command::new("redis-cli")
            .arg("-s")
            .arg(self.socket())
            .args(args)
            .output()
            .expect("redis-cli");
        assert!(out.status.success(), "redis-cli {args:?} failed");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The Redis backend: a queue on a fresh server, in one or several partitions.
pub struct RedisHarness {
    /// Kept for its lifetime: the server stops when the harness is dropped.
    _server: RedisServer,
    partitions: usize,
    url: String,
}

impl RedisHarness {
    fn on(server: RedisServer, partitions: usize) -> RedisHarness {
        RedisHarness {
            url: server.url(),
            _server: server,
            partitions,
        }
    }

    /// The URL its queues open (with the user's credentials where it has one).
    #[allow(dead_code)] // used by the command's tests, which share this folder
    pub fn url(&self) -> &str {
        &self.url
    }
}

/// One partition.
pub fn harness() -> RedisHarness {
    RedisHarness::on(RedisServer::start(), 1)
}

/// 3 partitions on one server.
pub fn partitioned() -> RedisHarness {
    RedisHarness::on(RedisServer::start(), 3)
}

/// The ACL rule (`ACL SETUSER` arguments after the user name) that lets a user run a queue
/// named `name`, in one partition or several, and nothing else: its keys, its wake
/// channels, and the commands the client and its scripts send.
pub fn queue_acl(name: &str) -> Vec<String> {
    let mut rule = vec![
        "resetkeys".to_owned(),
        format!("~{{{name}}}:*"),
        format!("~{{{name}:*}}:*"),
        "resetchannels".to_owned(),
        format!("&{{{name}}}:wake"),
        format!("&{{{name}:*}}:wake"),
        "-@all".to_owned(),
    ];
    rule.extend(
        [
            "+evalsha",
            "+script|load",
            "+hget",
            "+hgetall",
            "+subscribe",
            "+ping",
            // What the scripts call.
            "+time",
            "+hmget",
            "+hset",
            "+hdel",
            "+hexists",
            "+hincrby",
            "+incr",
            "+incrby",
            "+zadd",
            "+zcard",
            "+zcount",
            "+zrange",
            "+zrangebyscore",
            "+zrevrange",
            "+zrem",
            "+publish",
        ]
        .map(str::to_owned),
    );
    rule
}

/// The Redis backend on 3 partitions, connecting (over TCP) as a user allowed only
/// [`queue_acl`] for the queue `test`.
pub fn acl_partitioned() -> RedisHarness {
    acl_on(3)
}

/// [`acl_partitioned`] on one partition: the queue's gates (`lua/gates.lua`, refused on
/// several partitions) run their commands as that user too.
pub fn acl_single() -> RedisHarness {
    acl_on(1)
}

fn acl_on(partitions: usize) -> RedisHarness {
    let mut args = vec![
        "--save",
        "",
        "--appendonly",
        "no",
        "--user",
        "worker",
        "on",
        ">secret",
    ];
    let rule = queue_acl("test");
    args.extend(rule.iter().map(String::as_str));
    let server = RedisServer::on_port(&args);
    let port = server.port.expect("a TCP port");
    RedisHarness {
        url: format!("redis://worker:secret@127.0.0.1:{port}"),
        _server: server,
        partitions,
    }
}

impl Harness for RedisHarness {
    fn open<'a>(&'a self, builder: &'a Builder) -> BoxFuture<'a, Result<JobQueue, Error>> {
        Box::pin(async move {
            let mut builder = builder.clone();
            if self.partitions > 1 {
                builder.partitions(self.partitions);
            }
            builder.redis(&self.url, "test").await
        })
    }

    fn ordered(&self) -> bool {
        self.partitions == 1
    }

    fn limits_keys(&self) -> bool {
        self.partitions == 1
    }
}
