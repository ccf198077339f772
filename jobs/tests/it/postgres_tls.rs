//! PostgreSQL over TLS (feature `postgres`): a server of the test's own with `ssl=on` and a
//! certificate signed by a CA made in the test (`support/tls.rs`), reached on its TCP port
//! with sqlx's rustls. The right CA works end to end; a server certificate we refuse, a
//! server without TLS when the URL requires it, a wrong password, or a plain connection
//! the server refuses fails `open` at once with `is_unauthorized`: retrying cannot fix
//! any of them.

use std::time::Duration;

use wheel_jobs::{Builder, JobQueue, Scheduled};

use crate::support::postgres::{shared, PgServer};
use crate::support::tls::TestCa;
use crate::support::{ms, next, spawn_reporting_worker};

/// A bound on what must come at once, only to fail a hung test (not a timing check).
const HANG: Duration = Duration::from_secs(60);

/// `postgres_timeout` of these tests: far beyond a handshake, so an error that names
/// neither a timeout nor an outage came from the handshake itself, not from a pool that
/// retried until it gave up.
const TIMEOUT: Option<Duration> = Some(Duration::from_secs(30));

/// The URL of `server`'s TCP port by name (`localhost`, which its certificate names), with
/// `params` (`sslmode=…&…`).
fn tls_url(server: &PgServer, params: &str) -> String {
    format!(
        "postgres://postgres@localhost:{}/postgres?{params}",
        server.port()
    )
}

/// The server's client connections other than psql's own, as (with TLS, without).
fn client_connections(server: &PgServer) -> (u32, u32) {
    let out = server.psql(
        "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl) \
         FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()",
    );
    let (with, without) = out.split_once('|').expect("two counts");
    (with.parse().unwrap(), without.parse().unwrap())
}

/// `verify-full` with the CA that signed the server's certificate: schedule, an idle
/// consumer woken over the `LISTEN` connection, claim and ack all work, and every
/// connection the queue made (its pool and its listener) is encrypted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_verify_full_with_the_right_ca_schedules_claims_and_acks() {
    let ca = TestCa::new();
    let server = PgServer::start_tls(&ca);
    let url = tls_url(
        &server,
        &format!("sslmode=verify-full&sslrootcert={}", ca.file("ca.crt")),
    );
    let open = || async {
        Builder::new()
            .postgres_timeout(TIMEOUT)
            // Only the listener can wake the idle consumer in time.
            .safety_wakeup(Duration::from_secs(3600))
            .postgres(&url, "tls")
            .await
            .unwrap()
    };
    let (consumer, scheduler) = (open().await, open().await);

    // Claim and ack by hand.
    assert_eq!(
        scheduler.schedule("a", Duration::ZERO, "p").await.unwrap(),
        Scheduled::Created
    );
    let delivery = next(&mut consumer.consume()).await;
    assert_eq!(delivery.id(), "a");
    assert!(delivery.ack().await.unwrap(), "the lease was held");
    assert_eq!(consumer.get("a").await.unwrap(), None);

    // A worker gone idle is woken by the other handle's schedule.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = spawn_reporting_worker(consumer.clone(), 2, tx);
    // Setup, not a bound: let the worker find nothing and go to sleep.
    tokio::time::sleep(ms(200)).await;
    scheduler.schedule("b", Duration::ZERO, "p").await.unwrap();
    let got = tokio::time::timeout(HANG, rx.recv())
        .await
        .expect("the idle consumer was not woken over TLS");
    assert_eq!(got.as_deref(), Some("b"));

    let (with_tls, without) = client_connections(&server);
    // At least a pooled connection and the listener's.
    assert!(with_tls >= 2, "{with_tls} connections with TLS");
    assert_eq!(without, 0, "connections without TLS");

    consumer.close().await.unwrap();
    scheduler.close().await.unwrap();
    worker.await.unwrap().unwrap();
}

/// `open`'s error on `url`, which must come at once ([`HANG`] only catches a hang).
async fn open_error(url: &str) -> wheel_jobs::Error {
    let open = async {
        Builder::new()
            .postgres_timeout(TIMEOUT)
            .postgres(url, "q")
            .await
    };
    match tokio::time::timeout(HANG, open).await.expect("open hangs") {
        Ok(queue) => panic!("{url}: opened {queue:?}"),
        Err(err) => err,
    }
}

/// A server certificate signed by another CA than `sslrootcert`'s, or one that only the
/// built-in roots would have to vouch for, is refused: `is_unauthorized`, not an outage the
/// pool retries until `postgres_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_server_certificate_from_another_ca_is_unauthorized_at_once() {
    let ca = TestCa::new();
    let server = PgServer::start_tls(&ca);
    let other = TestCa::new();
    for mode in ["verify-full", "verify-ca"] {
        let url = tls_url(
            &server,
            &format!("sslmode={mode}&sslrootcert={}", other.file("ca.crt")),
        );
        let err = open_error(&url).await;
        assert!(err.is_unauthorized(), "{mode}, another CA: {err}");
        assert!(!err.is_unavailable(), "{mode}, another CA: {err}");
        let shown = err.to_string();
        assert!(shown.contains("certificate"), "{mode}, another CA: {shown}");
    }
    // No `sslrootcert`: the built-in roots, which know no test CA.
    let err = open_error(&tls_url(&server, "sslmode=verify-full")).await;
    assert!(err.is_unauthorized(), "built-in roots: {err}");
}

/// `sslmode=require` against a server that serves no TLS: refused at once, saying so, and
/// never sent in the clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sslmode_require_against_a_server_without_tls_is_a_clear_error() {
    let server = shared();
    let url = format!("{}?sslmode=require", server.tcp_url());
    let err = open_error(&url).await;
    assert!(err.is_unauthorized(), "{err}");
    assert!(!err.is_unavailable(), "{err}");
    let shown = err.to_string();
    assert!(shown.contains("does not support TLS"), "{shown}");
    // The same server without `sslmode=require` serves the queue (`prefer`, sqlx's
    // default, falls back to a plain connection).
    let queue: JobQueue = Builder::new()
        .postgres_timeout(TIMEOUT)
        .postgres(&server.tcp_url(), &crate::support::postgres::fresh_queue())
        .await
        .unwrap();
    queue.close().await.unwrap();
}

/// Credentials over TLS, on a server that takes TCP only over TLS and other roles by
/// password: the right password works; a wrong one, or a connection without TLS, is
/// refused at once with `is_unauthorized`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_wrong_password_or_no_tls_is_unauthorized_at_once() {
    let ca = TestCa::new();
    let server = PgServer::start_tls(&ca);
    server.psql("CREATE ROLE app LOGIN SUPERUSER PASSWORD 'right'");
    let verified = format!("sslmode=verify-full&sslrootcert={}", ca.file("ca.crt"));
    let as_app = |password: &str, params: &str| {
        format!(
            "postgres://app:{password}@localhost:{}/postgres?{params}",
            server.port()
        )
    };

    let queue = Builder::new()
        .postgres_timeout(TIMEOUT)
        .postgres(&as_app("right", &verified), "creds")
        .await
        .unwrap();
    queue.schedule("a", Duration::ZERO, "p").await.unwrap();
    let delivery = next(&mut queue.consume()).await;
    assert!(delivery.ack().await.unwrap(), "the lease was held");
    queue.close().await.unwrap();

    let err = open_error(&as_app("wrong", &verified)).await;
    assert!(err.is_unauthorized(), "a wrong password: {err}");
    assert!(!err.is_unavailable(), "a wrong password: {err}");
    assert!(err.to_string().contains("password"), "{err}");

    // The server has no line for a TCP connection without TLS, whoever asks.
    for url in [
        as_app("right", "sslmode=disable"),
        tls_url(&server, "sslmode=disable"),
    ] {
        let err = open_error(&url).await;
        assert!(err.is_unauthorized(), "{url}: {err}");
        assert!(err.to_string().contains("no encryption"), "{url}: {err}");
    }
}
