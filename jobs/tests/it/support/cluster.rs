//! A 3-master Redis Cluster on loopback, with or without TLS, and the ACL rule a
//! cluster client needs.

use std::time::Duration;

use super::tls::TestCa;
use super::{free_port, send_signal, temp_dir};

/// A 3-master Redis Cluster on 127.0.0.1 (free TCP ports), made with `redis-cli --cluster
/// create`, SIGKILLed on drop.
pub struct RedisCluster {
    _dir: tempfile::TempDir,
    children: Vec<std::process::Child>,
    pub nodes: Vec<String>,
    /// `redis-cli`'s TLS arguments for the nodes (none without TLS).
    cli_tls: Vec<String>,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        RedisCluster::start_with(&[], None)
    }

    /// With `args` on every node, and TLS only (client, bus and `redis-cli`) if `tls`:
    /// then the nodes' URLs are `rediss://`.
    pub fn start_with(args: &[&str], tls: Option<&TestCa>) -> RedisCluster {
        let dir = temp_dir();
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

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// [`queue_acl`](super::redis::queue_acl) and what a cluster client needs besides: the
/// slot map, and the sharded wake channels.
#[cfg(feature = "redis-tls")]
pub fn cluster_acl(name: &str) -> Vec<String> {
    let mut rule = super::redis::queue_acl(name);
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
