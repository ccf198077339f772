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

/// Persistence that loses nothing the server acknowledged: it fsyncs its append-only
/// file before it answers.
#[cfg(feature = "redis")]
pub const DURABLE: [&str; 6] = [
    "--save",
    "",
    "--appendonly",
    "yes",
    "--appendfsync",
    "always",
];

/// A `redis-server` of our own on a unix socket in a temporary directory, SIGKILLed on drop.
#[cfg(feature = "redis")]
pub struct RedisServer {
    pub dir: tempfile::TempDir,
    args: Vec<String>,
    child: Option<std::process::Child>,
    /// A TCP port on 127.0.0.1 it listens on too (`on_port`), kept across restarts.
    pub port: Option<u16>,
    /// Its TLS port on 127.0.0.1 (`start_tls`), kept across restarts.
    #[cfg_attr(not(feature = "redis-tls"), allow(dead_code))]
    pub tls_port: Option<u16>,
    /// A sentinel's configuration file (which it rewrites): the server runs as a sentinel.
    sentinel_conf: Option<std::path::PathBuf>,
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

#[cfg(feature = "redis")]
impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The Redis backend: a queue on a fresh server, in one or several partitions.
#[cfg(feature = "redis")]
pub struct RedisHarness {
    /// Kept for its lifetime: the server stops when the harness is dropped.
    _server: RedisServer,
    partitions: usize,
    url: String,
}

#[cfg(feature = "redis")]
impl RedisHarness {
    fn on(server: RedisServer, partitions: usize) -> RedisHarness {
        RedisHarness {
            url: server.url(),
            _server: server,
            partitions,
        }
    }

    /// The URL its queues open (with the user's credentials where it has one).
    #[allow(dead_code)] // used by the command's tests, which share this file
    pub fn url(&self) -> &str {
        &self.url
    }
}

#[cfg(feature = "redis")]
pub fn redis() -> RedisHarness {
    RedisHarness::on(RedisServer::start(), 1)
}

#[cfg(feature = "redis")]
pub fn redis_partitioned() -> RedisHarness {
    RedisHarness::on(RedisServer::start(), 3)
}

/// The ACL rule (`ACL SETUSER` arguments after the user name) that lets a user run a queue
/// named `name`, in one partition or several, and nothing else: its keys, its wake
/// channels, and the commands the client and its scripts send.
#[cfg(feature = "redis")]
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

/// [`queue_acl`] and what a cluster client needs besides: the slot map, and the sharded
/// wake channels.
#[cfg(feature = "redis-tls")]
pub fn cluster_acl(name: &str) -> Vec<String> {
    let mut rule = queue_acl(name);
    rule.extend(
        [
            "+cluster|slots",
            "+command|info",
            "+spublish",
            "+ssubscribe",
        ]
        .map(str::to_owned),
    );
    rule
}

/// The Redis backend on 3 partitions, connecting (over TCP) as a user allowed only
/// [`queue_acl`] for the queue `test`.
#[cfg(feature = "redis")]
pub fn redis_acl_partitioned() -> RedisHarness {
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
            builder.redis(&self.url, "test").await
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
    /// `redis-cli`'s TLS arguments for the nodes (none without TLS).
    cli_tls: Vec<String>,
}

#[cfg(feature = "redis")]
impl RedisCluster {
    pub fn start() -> RedisCluster {
        RedisCluster::start_with(&[], None)
    }

    /// With `args` on every node, and TLS only (client, bus and `redis-cli`) if `tls`:
    /// then the nodes' URLs are `rediss://`.
    pub fn start_with(args: &[&str], tls: Option<&TestCa>) -> RedisCluster {
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut children = Vec::new();
        let mut addrs = Vec::new();
        let tls_args: Vec<String> = tls.map_or_else(Vec::new, |ca| {
            let mut args = ["--tls-cluster", "yes", "--tls-replication", "yes"]
                .map(str::to_owned)
                .to_vec();
            args.extend(ca.server_args());
            args
        });
        for i in 0..3 {
            let port = free_port().to_string();
            let node_dir = dir.path().join(format!("node{i}"));
            std::fs::create_dir(&node_dir).unwrap();
            let mut command = std::process::Command::new("redis-server");
            command.args(["--bind", "127.0.0.1"]);
            if tls.is_some() {
                command.args(["--port", "0", "--tls-port", &port]);
            } else {
                command.args(["--port", &port]);
            }
            let child = command
                .args([
                    "--cluster-enabled",
                    "yes",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .args(&tls_args)
                .args(args)
                .arg("--dir")
                .arg(&node_dir)
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("redis-server (apt-get install redis-server)");
            children.push(child);
            addrs.push(format!("127.0.0.1:{port}"));
        }
        let scheme = if tls.is_some() { "rediss" } else { "redis" };
        let cli_tls: Vec<String> = tls.map_or_else(Vec::new, |ca| {
            vec!["--tls".to_owned(), "--cacert".to_owned(), ca.file("ca.crt")]
        });
        let cluster = RedisCluster {
            _dir: dir,
            children,
            nodes: addrs.iter().map(|a| format!("{scheme}://{a}")).collect(),
            cli_tls: cli_tls.clone(),
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
            .args(&cli_tls)
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
                    .args(&cli_tls)
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
            .args(&self.cli_tls)
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
        send_signal(&self.children[i], signal);
    }
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

#[cfg(feature = "redis")]
impl Drop for RedisCluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A free TCP port on 127.0.0.1 (free when asked: a server started at once gets it).
#[cfg(feature = "redis")]
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A certificate authority made for one test, and a server certificate it signed for
/// `localhost` and 127.0.0.1, as PEM files (`ca.crt`, `server.crt`, `server.key`) in a
/// temporary directory.
#[cfg(feature = "redis")]
#[cfg_attr(not(feature = "redis-tls"), allow(dead_code))]
pub struct TestCa {
    pub dir: tempfile::TempDir,
    /// The CA certificate, PEM: what a client trusts.
    pub ca_pem: Vec<u8>,
}

#[cfg(feature = "redis")]
#[cfg_attr(not(feature = "redis-tls"), allow(dead_code))]
impl TestCa {
    pub fn new() -> TestCa {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose, SanType,
        };
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "wheel-jobs test CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate().expect("CA key");
        let ca_cert = ca.self_signed(&ca_key).expect("CA certificate");
        let issuer = Issuer::new(ca, ca_key);

        let mut server =
            CertificateParams::new(vec!["localhost".to_owned()]).expect("server parameters");
        server
            .subject_alt_names
            .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
        server
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        server.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        // Cluster nodes present it as a client too, on the cluster bus.
        server.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let server_key = KeyPair::generate().expect("server key");
        let server_cert = server
            .signed_by(&server_key, &issuer)
            .expect("server certificate");

        let dir = tempfile::tempdir().expect("temporary directory");
        for (name, pem) in [
            ("ca.crt", ca_cert.pem()),
            ("server.crt", server_cert.pem()),
            ("server.key", server_key.serialize_pem()),
        ] {
            std::fs::write(dir.path().join(name), pem).expect("write a PEM file");
        }
        TestCa {
            dir,
            ca_pem: ca_cert.pem().into_bytes(),
        }
    }

    /// The redis-server arguments for serving TLS with its certificate, to clients
    /// without certificates of their own.
    pub fn server_args(&self) -> Vec<String> {
        vec![
            "--tls-cert-file".to_owned(),
            self.file("server.crt"),
            "--tls-key-file".to_owned(),
            self.file("server.key"),
            "--tls-ca-cert-file".to_owned(),
            self.file("ca.crt"),
            "--tls-auth-clients".to_owned(),
            "no".to_owned(),
        ]
    }

    /// The path of one of its files, as a redis-server argument.
    pub fn file(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
}

/// A primary, a replica and three sentinels on 127.0.0.1, watching the primary as
/// [`SentinelSet::MASTER`]; every process SIGKILLed on drop. Data nodes fsync their
/// append-only file at every write, so a node restarted after a SIGKILL has lost nothing
/// it acknowledged: whatever goes missing went missing in replication.
#[cfg(feature = "redis")]
pub struct SentinelSet {
    /// The data nodes, the first one the primary at the start.
    pub nodes: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
}

#[cfg(feature = "redis")]
impl SentinelSet {
    pub const MASTER: &str = "jobs-primary";

    pub fn start() -> SentinelSet {
        let persistent = DURABLE;
        let primary = RedisServer::on_port(&persistent);
        let primary_port = primary.port.expect("a TCP port").to_string();
        let mut replica_args = persistent.to_vec();
        replica_args.extend(["--replicaof", "127.0.0.1", &primary_port]);
        let replica = RedisServer::on_port(&replica_args);
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            // Sentinel rewrites its configuration file: one of its own, in its directory.
            let dir = tempfile::tempdir().expect("temporary directory");
            let conf = dir.path().join("sentinel.conf");
            let port = free_port();
            std::fs::write(
                &conf,
                format!(
                    "sentinel monitor {m} 127.0.0.1 {primary_port} 2\n\
                     sentinel down-after-milliseconds {m} 1000\n\
                     sentinel failover-timeout {m} 3000\n",
                    m = Self::MASTER,
                ),
            )
            .expect("write sentinel.conf");
            let port_text = port.to_string();
            let mut sentinel = RedisServer {
                dir,
                args: ["--bind", "127.0.0.1", "--port", &port_text]
                    .map(str::to_owned)
                    .to_vec(),
                child: None,
                port: Some(port),
                tls_port: None,
                sentinel_conf: Some(conf),
            };
            sentinel.restart();
            sentinels.push(sentinel);
        }
        let set = SentinelSet {
            nodes: vec![primary, replica],
            sentinels,
        };
        set.wait_until_settled(&primary_port);
        set
    }

    /// The sentinels' addresses, `redis://127.0.0.1:port`.
    pub fn sentinel_urls(&self) -> Vec<String> {
        let port = |s: &RedisServer| s.port.expect("a TCP port");
        self.sentinels
            .iter()
            .map(|s| format!("redis://127.0.0.1:{}", port(s)))
            .collect()
    }

    /// The primary's port as the first sentinel tells it.
    pub fn primary_port(&self) -> String {
        let reply = self.sentinels[0].cli(&["SENTINEL", "get-master-addr-by-name", Self::MASTER]);
        reply.lines().nth(1).expect("a primary port").to_owned()
    }

    /// The data node listening on `port`.
    pub fn node(&mut self, port: &str) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port.is_some_and(|p| p.to_string() == port))
            .expect("a data node on that port")
    }

    /// `SENTINEL FAILOVER`: the primary hands over to the replica (the old primary turns
    /// replica of the new one). Returns once every sentinel names the new primary and
    /// every data node agrees.
    pub fn failover(&self) {
        let old = self.primary_port();
        let reply = self.sentinels[0].cli(&["SENTINEL", "FAILOVER", Self::MASTER]);
        assert_eq!(reply, "OK", "SENTINEL FAILOVER");
        self.wait_for_new_primary(&old);
    }

    /// Waits until every sentinel names a primary other than the one on `old` (ports).
    pub fn wait_for_new_primary(&self, old: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let named: Vec<String> = self
                .sentinels
                .iter()
                .map(|s| {
                    let reply = s.cli(&["SENTINEL", "get-master-addr-by-name", Self::MASTER]);
                    reply.lines().nth(1).unwrap_or_default().to_owned()
                })
                .collect();
            if named.iter().all(|p| p != old && *p == named[0]) {
                let new = named[0].clone();
                let role = self.node_cli(&new, &["ROLE"]);
                if role.starts_with("master") {
                    return new;
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the sentinels did not fail over: {named:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `redis-cli` on the data node listening on `port`.
    pub fn node_cli(&self, port: &str, args: &[&str]) -> String {
        let node = self
            .nodes
            .iter()
            .find(|n| n.port.is_some_and(|p| p.to_string() == port))
            .expect("a data node on that port");
        node.cli(args)
    }

    /// Waits until the replica is in sync with the primary on `primary` and every
    /// sentinel knows the replica and the two other sentinels.
    fn wait_until_settled(&self, primary: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let synced = self
                .nodes
                .iter()
                .filter(|n| n.port.is_some_and(|p| p.to_string() != primary))
                .all(|n| {
                    n.cli(&["INFO", "replication"])
                        .contains("master_link_status:up")
                });
            let known = self.sentinels.iter().all(|s| {
                let master = s.cli(&["SENTINEL", "MASTER", Self::MASTER]);
                let field = |name: &str| {
                    let mut lines = master.lines();
                    lines.find(|l| *l == name);
                    lines.next().unwrap_or_default().to_owned()
                };
                field("num-slaves") == "1" && field("num-other-sentinels") == "2"
            });
            if synced && known {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the sentinel set did not settle"
            );
            std::thread::sleep(Duration::from_millis(50));
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
