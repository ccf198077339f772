//! The PostgreSQL server the postgres tests start (`support/postgres.rs`): its settings, its
//! two listeners, a kill -9 and crash recovery on the same data directory, and its cleanup.

use std::path::Path;
use std::process::Command;

use crate::support::postgres::{fresh_queue, shared, PgServer};

/// `psql` on `url`; its output, or its error.
fn psql(url: &str, sql: &str) -> Result<String, String> {
    let out = Command::new("psql")
        .args([
            "-X",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            url,
            "-c",
            sql,
        ])
        .env("PGCONNECT_TIMEOUT", "2")
        .output()
        .expect("psql");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn durable_defaults_on_a_unix_socket_and_a_loopback_port() {
    let server = PgServer::start();
    assert_eq!(server.psql("SHOW fsync"), "on");
    assert_eq!(server.psql("SHOW synchronous_commit"), "on");
    assert_eq!(server.psql("SHOW wal_level"), "replica");
    // The socket's connection has no server address; the TCP one has 127.0.0.1.
    assert_eq!(server.psql("SELECT inet_server_addr() IS NULL"), "t");
    let socket = server.dir().join(format!(".s.PGSQL.{}", server.port()));
    assert!(socket.exists(), "{} missing", socket.display());
    assert_eq!(
        psql(
            &server.tcp_url(),
            "SELECT host(inet_server_addr()), current_user"
        )
        .unwrap(),
        "127.0.0.1|postgres"
    );
}

#[test]
fn a_setting_given_at_start_is_kept_across_a_restart() {
    let mut server = PgServer::start_with(&["idle_in_transaction_session_timeout=7s"]);
    assert_eq!(
        server.psql("SHOW idle_in_transaction_session_timeout"),
        "7s"
    );
    server.kill_and_restart();
    assert_eq!(
        server.psql("SHOW idle_in_transaction_session_timeout"),
        "7s"
    );
}

#[test]
fn kill_9_loses_no_commit_and_the_restart_recovers() {
    let mut server = PgServer::start();
    server.psql("CREATE TABLE t (n int PRIMARY KEY)");
    for n in 0..50 {
        server.psql(&format!("INSERT INTO t VALUES ({n})"));
    }
    let url = server.tcp_url();
    server.kill();
    assert!(psql(&url, "SELECT 1").is_err(), "a killed server answered");
    assert!(!server.dir().join("data/postmaster.pid").exists());
    server.restart();
    assert_eq!(server.psql("SELECT count(*), sum(n) FROM t"), "50|1225");
    // It recovered from the write-ahead log: it had not shut down.
    let log = std::fs::read_to_string(server.dir().join("log")).unwrap();
    assert!(
        log.contains("database system was interrupted") && log.contains("redo done"),
        "no crash recovery in the log:\n{log}"
    );
    server.psql("INSERT INTO t VALUES (50)");
    server.kill_and_restart();
    assert_eq!(server.psql("SELECT count(*) FROM t"), "51");
}

#[test]
fn a_stopped_server_answers_no_one_until_continued() {
    let server = PgServer::start();
    server.signal("-STOP");
    let stopped = psql(&server.tcp_url(), "SELECT 1");
    server.signal("-CONT");
    assert!(stopped.is_err(), "a stopped server answered: {stopped:?}");
    assert_eq!(psql(&server.tcp_url(), "SELECT 1").unwrap(), "1");
}

#[test]
fn dropping_the_server_stops_it_and_removes_its_directory() {
    let server = PgServer::start();
    let dir = server.dir().to_owned();
    let url = server.tcp_url();
    let pid = std::fs::read_to_string(dir.join("data/postmaster.pid")).unwrap();
    let pid = pid.lines().next().unwrap().to_owned();
    drop(server);
    assert!(!dir.exists(), "{} left behind", dir.display());
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "postmaster {pid} still runs"
    );
    assert!(psql(&url, "SELECT 1").is_err());
}

#[test]
fn the_shared_server_is_one_per_binary_and_queues_keep_apart() {
    assert_eq!(shared().port(), shared().port());
    assert_eq!(shared().psql("SELECT 1"), "1");
    assert_eq!(psql(&shared().tcp_url(), "SELECT 2").unwrap(), "2");
    assert_ne!(fresh_queue(), fresh_queue());
}

#[test]
#[should_panic(expected = "unrecognized configuration parameter \"no_such_setting\"")]
fn a_server_that_cannot_start_fails_the_test_with_its_log() {
    PgServer::start_with(&["no_such_setting=1"]);
}
