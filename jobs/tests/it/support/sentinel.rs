//! A Sentinel deployment on loopback: a primary, a replica and three sentinels.

use std::time::Duration;

use super::redis::{RedisServer, DURABLE};
use super::{free_port, temp_dir};

/// A primary, a replica and three sentinels on 127.0.0.1, watching the primary as
/// [`SentinelSet::MASTER`]; every process SIGKILLed on drop. Data nodes fsync their
/// append-only file at every write, so a node restarted after a SIGKILL has lost nothing
/// it acknowledged: whatever goes missing went missing in replication.
pub struct SentinelSet {
    /// The data nodes, the first one the primary at the start.
    pub nodes: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
}

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
            let dir = temp_dir();
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
