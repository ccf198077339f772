//! Credentials, ACLs and TLS: a refusal either way fails `open` at once with
//! `is_unauthorized`, never as `is_unavailable` retried for good.

use std::time::Duration;

use wheel_jobs::{Error, JobQueue};

use crate::support::redis::{queue_acl, RedisServer};
use crate::support::spawn_reporting_worker;

/// A guard against the hang these tests are about, not a bound on anything.
const HANG: Duration = Duration::from_secs(30);

/// A server with the user `worker` (password `secret`) allowed only what the queue `name`
/// needs; the default user needs a password too, so a URL without one is refused.
fn acl_server(name: &str) -> RedisServer {
    let mut args = vec!["--save", "", "--appendonly", "no"];
    args.extend(["--user", "worker", "on", ">secret"]);
    let rule = queue_acl(name);
    args.extend(rule.iter().map(String::as_str));
    args.extend(["--user", "default", "on", ">admin", "~*", "&*", "+@all"]);
    RedisServer::on_port(&args)
}

/// `open`'s outcome, which must come well within [`HANG`].
async fn open(url: &str, name: &str) -> Result<JobQueue, Error> {
    tokio::time::timeout(HANG, JobQueue::builder().redis(url, name))
        .await
        .expect("open hangs")
}

/// `run` (a spawned worker) ends with the refusal well within [`HANG`], not retrying it.
async fn stops_unauthorized(run: tokio::task::JoinHandle<Result<(), Error>>) {
    let err = tokio::time::timeout(HANG, run)
        .await
        .expect("run retries a refusal")
        .unwrap()
        .unwrap_err();
    assert!(err.is_unauthorized(), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_or_none_fails_open_as_unauthorized() {
    let server = acl_server("orders");
    let port = server.port.expect("a TCP port");
    for url in [
        format!("redis://worker:wrong@127.0.0.1:{port}"),
        format!("redis://nobody:secret@127.0.0.1:{port}"),
        format!("redis://127.0.0.1:{port}"),
    ] {
        let err = open(&url, "orders").await.unwrap_err();
        assert!(err.is_unauthorized(), "{url}: {err}");
    }
}

/// The ACL user may touch only its queue's keys: a queue of another name fails `open`; and
/// once an operator takes the keys away, calls are refused and `run` stops with the
/// refusal instead of retrying it for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_that_denies_the_queue_fails_open_and_stops_run() {
    let server = acl_server("orders");
    let port = server.port.expect("a TCP port");
    let url = format!("redis://worker:secret@127.0.0.1:{port}");
    let err = open(&url, "invoices").await.unwrap_err();
    assert!(err.is_unauthorized(), "{err}");

    let q = open(&url, "orders").await.unwrap();
    q.schedule("job", Duration::from_secs(3600), "p")
        .await
        .unwrap();
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let run = spawn_reporting_worker(q.clone(), 1, tx);
    server.cli(&[
        "--user",
        "default",
        "--pass",
        "admin",
        "ACL",
        "SETUSER",
        "worker",
        "resetkeys",
    ]);
    let err = q.schedule("job", Duration::ZERO, "p").await.unwrap_err();
    assert!(err.is_unauthorized(), "{err}");
    stops_unauthorized(run).await;
    q.close().await.unwrap();
}

/// An ACL that lacks a command the scripts call (an operator's rule from an older version)
/// is a refusal too: the server words it as a script error, not `NOPERM`, and `run` still
/// stops with `is_unauthorized` instead of claiming in a loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_the_scripts_need_taken_away_stops_run() {
    let server = acl_server("orders");
    let port = server.port.expect("a TCP port");
    let url = format!("redis://worker:secret@127.0.0.1:{port}");
    let q = open(&url, "orders").await.unwrap();
    q.schedule("job", Duration::ZERO, "p").await.unwrap();
    server.cli(&[
        "--user", "default", "--pass", "admin", "ACL", "SETUSER", "worker", "-hexists",
    ]);
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let run = spawn_reporting_worker(q.clone(), 1, tx);
    stops_unauthorized(run).await;
    q.close().await.unwrap();
}

#[cfg(feature = "redis-tls")]
mod tls {
    use super::*;
    use crate::support::cluster::RedisCluster;
    use crate::support::ms;
    use crate::support::tls::TestCa;
    use wheel_jobs::Scheduled;

    /// `redis_timeout` for these tests: a TLS handshake in a debug build (rustls and ring
    /// unoptimized), on a machine busy with the rest of the suite, can pass the default 1 s;
    /// what they check is TLS, not that bound (the outage tests check it).
    const TLS_TIMEOUT: Option<Duration> = Some(Duration::from_secs(10));

    /// A queue over TLS works end to end, the wake subscription included: an idle
    /// consumer is woken by another handle's schedule long before its safety wakeup.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_queue_over_tls_checks_the_server_and_works() {
        let ca = TestCa::new();
        let server = RedisServer::start_tls(&ca);
        let url = format!("rediss://localhost:{}", server.tls_port.unwrap());
        let open = || async {
            JobQueue::builder()
                .redis_tls_ca(ca.ca_pem.clone())
                .redis_timeout(TLS_TIMEOUT)
                .safety_wakeup(Duration::from_secs(3600))
                .redis(&url, "orders")
                .await
                .unwrap()
        };
        let (consumer, scheduler) = (open().await, open().await);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let worker = spawn_reporting_worker(consumer.clone(), 2, tx);
        // Setup, not a bound: let the worker find nothing and go to sleep.
        tokio::time::sleep(ms(200)).await;
        let created = scheduler
            .schedule("job", Duration::ZERO, "p")
            .await
            .unwrap();
        assert_eq!(created, Scheduled::Created);
        let got = tokio::time::timeout(HANG, rx.recv())
            .await
            .expect("the idle consumer was not woken over TLS");
        assert_eq!(got.as_deref(), Some("job"));
        consumer.close().await.unwrap();
        scheduler.close().await.unwrap();
        worker.await.unwrap().unwrap();
    }

    /// A server whose certificate another CA signed (or that only the system's roots would
    /// have to vouch for) is refused at once: `is_unauthorized`, not a retried outage.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_certificate_from_another_ca_fails_open_as_unauthorized() {
        let ca = TestCa::new();
        let server = RedisServer::start_tls(&ca);
        let url = format!("rediss://localhost:{}", server.tls_port.unwrap());
        let other = TestCa::new();
        let mut builder = JobQueue::builder();
        let with_other_ca = builder
            .redis_tls_ca(other.ca_pem.clone())
            .redis_timeout(TLS_TIMEOUT)
            .redis(&url, "q");
        let err = tokio::time::timeout(HANG, with_other_ca)
            .await
            .expect("open hangs")
            .unwrap_err();
        assert!(err.is_unauthorized(), "{err}");
        let err = super::open(&url, "q").await.unwrap_err();
        assert!(err.is_unauthorized(), "system roots: {err}");
    }

    /// A partitioned queue on a 3-node cluster that speaks only TLS, as a user limited by
    /// ACL to the queue: every job delivered once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cluster_over_tls_as_an_acl_user_delivers_every_job() {
        const JOBS: usize = 300;
        let ca = TestCa::new();
        let mut args = vec!["--user", "worker", "on", ">secret"];
        let rule = crate::support::cluster::cluster_acl("orders");
        args.extend(rule.iter().map(String::as_str));
        let cluster = RedisCluster::start_with(&args, Some(&ca));
        let nodes: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| n.replace("rediss://", "rediss://worker:secret@"))
            .collect();
        let q = JobQueue::builder()
            .partitions(3)
            .redis_tls_ca(ca.ca_pem.clone())
            .redis_timeout(TLS_TIMEOUT)
            .redis_cluster(&nodes, "orders")
            .await
            .unwrap();
        let jobs = (0..JOBS).map(|i| (format!("job-{i}"), Duration::ZERO, "p"));
        assert_eq!(q.schedule_many(jobs).await.unwrap().len(), JOBS);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let worker = spawn_reporting_worker(q.clone(), 8, tx);
        let mut seen = std::collections::HashSet::new();
        while seen.len() < JOBS {
            let id = tokio::time::timeout(HANG, rx.recv())
                .await
                .expect("every job delivered")
                .unwrap();
            assert!(seen.insert(id), "each job once");
        }
        while q.running().await.unwrap() > 0 {
            tokio::time::sleep(ms(5)).await;
        }
        q.close().await.unwrap();
        worker.await.unwrap().unwrap();
    }
}
