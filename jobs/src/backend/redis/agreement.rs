//! The Lua that mirrors `core/state/mod.rs`'s rules, run against the Rust it mirrors on the same
//! cases, on a real `redis-server` (started here on a unix socket; the redis tests need it
//! on PATH): every job state a script can meet, attempts around `max_attempts`, the right
//! and a wrong token. Each case builds one job both ways (a [`Machine`], and the keys the
//! scripts keep), applies the operation to both, and checks the outcome, the state left and
//! the last error agree:
//!
//! - `claim.lua` ↔ [`Machine::claim`] and [`Machine::claim_error`]
//! - `acks.lua` (through `ack.lua`) ↔ [`Machine::ack`]
//! - `retry.lua` ↔ [`Machine::retry`]
//! - `extend.lua` ↔ [`Machine::extend`]
//! - `cancel.lua` ↔ [`Machine::cancel`]
//! - `revive.lua` ↔ [`Machine::revive`]
//!
//! and `import.lua` (a copy's jobs, no transition) writes a pending or dead job exactly as
//! [`store`] lays it out, and leaves an existing id alone.

use std::time::Duration;

use ::redis::{Commands, Connection, FromRedisValue, Script, Value};

use super::keys::Keys;
use super::scripts::ClaimReply;
use crate::core::state::{Claim, Machine, Retry, Status, LEASE_EXPIRED};

/// A `redis-server` of the test's own, SIGKILLed on drop.
struct Server {
    dir: tempfile::TempDir,
    child: std::process::Child,
}

impl Server {
    fn start() -> Server {
        let dir = tempfile::tempdir().expect("temporary directory");
        let socket = dir.path().join("redis.sock");
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                "0",
                "--save",
                "",
                "--appendonly",
                "no",
                "--unixsocket",
            ])
            .arg(&socket)
            .arg("--dir")
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server on PATH (apt-get install redis-server)");
        let server = Server { dir, child };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while server.connect().is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        server
    }

    fn connect(&self) -> ::redis::RedisResult<Connection> {
        let socket = self.dir.path().join("redis.sock");
        let client = ::redis::Client::open(format!("redis+unix://{}", socket.display()))?;
        let mut conn = client.get_connection()?;
        ::redis::cmd("PING").query::<String>(&mut conn)?;
        Ok(conn)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const ID: &str = "job";
const RUN_AT: u64 = 1_000_000;
const TOKEN: u64 = 7;
const MAX_ATTEMPTS: [u32; 3] = [1, 2, 3];

/// Every state a script can meet, with `attempt`: pending, running under `TOKEN` (its lease
/// ended: a claim takes it), dead.
fn jobs(attempt: u32) -> [Machine; 3] {
    let job = |status| Machine {
        run_at: RUN_AT,
        attempt,
        status,
    };
    [
        job(Status::Pending),
        job(Status::Running {
            token: TOKEN,
            until: 1_000,
        }),
        job(Status::Dead { at: 5_000 }),
    ]
}

/// Stores `job` as the scripts keep it (`schedule.lua`'s header: meta, the state's index,
/// the counters), on an empty server.
fn store(conn: &mut Connection, k: &Keys, job: Machine) {
    let _: () = ::redis::cmd("FLUSHALL").query(conn).unwrap();
    let (letter, token, index, counter, score) = match job.status {
        Status::Pending => ("p", 0, &k.due, "pending", job.run_at / 1000),
        Status::Running { token, until } => ("r", token, &k.running, "running", until / 1000),
        Status::Dead { at } => ("d", 0, &k.dead, "dead", at / 1000),
    };
    let meta = format!("{letter}:{}:{token}:{}", job.attempt, job.run_at);
    let _: () = conn.hset(&k.meta, ID, meta).unwrap();
    let _: () = conn.hset(&k.payload, ID, "p").unwrap();
    let _: () = conn.zadd(index, ID, score).unwrap();
    let _: () = conn.hset(&k.counts, counter, 1).unwrap();
}

/// The job as the scripts left it: its state letter and attempt, or `None` if it is gone.
fn stored(conn: &mut Connection, k: &Keys) -> Option<(char, u32)> {
    let meta: Option<String> = conn.hget(&k.meta, ID).unwrap();
    let meta = meta?;
    let mut fields = meta.split(':');
    let state = fields.next().unwrap().chars().next().unwrap();
    Some((state, fields.next().unwrap().parse().unwrap()))
}

/// The state letter the scripts keep for `job`.
fn letter(job: &Machine) -> char {
    match job.status {
        Status::Pending => 'p',
        Status::Running { .. } => 'r',
        Status::Dead { .. } => 'd',
    }
}

fn last_error(conn: &mut Connection, k: &Keys) -> Option<String> {
    conn.hget(&k.errors, ID).unwrap()
}

fn script(parts: &[&str]) -> Script {
    Script::new(&parts.concat())
}

#[test]
fn the_scripts_agree_with_the_state_machine_they_mirror() {
    let server = Server::start();
    let mut conn = server.connect().unwrap();
    let k = Keys::new("q", "PUBLISH");
    let series = include_str!("lua/series.lua");
    let acks = include_str!("lua/acks.lua");
    let claim = script(&[acks, series, include_str!("lua/claim.lua")]);
    let ack = script(&[acks, include_str!("lua/ack.lua")]);
    let retry = script(&[include_str!("lua/retry.lua")]);
    let extend = script(&[include_str!("lua/extend.lua")]);
    let cancel = script(&[series, include_str!("lua/cancel.lua")]);
    let revive = script(&[include_str!("lua/revive.lua")]);
    let mut cases = 0;
    for attempt in 0..=3 {
        for max in MAX_ATTEMPTS {
            for job in jobs(attempt) {
                let case = format!("{job:?} max_attempts {max}");

                // A claim, of a due job only (a dead one is in no index a claim reads).
                if job.status != (Status::Dead { at: 5_000 }) {
                    store(&mut conn, &k, job);
                    let mut rust = job;
                    let error = rust.claim_error();
                    let outcome = rust.claim(u64::MAX, u64::MAX, 1, max);
                    let reply: Value = claim
                        .key(&k.meta)
                        .key(&k.payload)
                        .key(&k.due)
                        .key(&k.counts)
                        .key(&k.seq)
                        .key(&k.dead)
                        .key(&k.series)
                        .key(&k.series_payload)
                        .key(&k.series_next)
                        .key(&k.errors)
                        .key(&k.running)
                        .arg(10)
                        .arg(30_000_000)
                        .arg(max)
                        .invoke(&mut conn)
                        .unwrap();
                    let reply = ClaimReply::from_redis_value(reply).unwrap();
                    match outcome {
                        Claim::Deliver => {
                            assert_eq!(reply.jobs.len(), 1, "{case}");
                            assert_eq!(reply.jobs[0].attempt, rust.attempt, "{case}");
                            assert_eq!(reply.died, 0, "{case}");
                        }
                        Claim::Died => {
                            assert!(reply.jobs.is_empty(), "{case}");
                            assert_eq!(reply.died, 1, "{case}");
                        }
                        Claim::NotDue => panic!("{case}: every case is due"),
                    }
                    let left = stored(&mut conn, &k);
                    assert_eq!(left, Some((letter(&rust), rust.attempt)), "claim {case}");
                    assert_eq!(last_error(&mut conn, &k).as_deref(), error, "claim {case}");
                    assert_eq!(
                        error.is_some(),
                        matches!(job.status, Status::Running { .. })
                    );
                    assert!(error.is_none_or(|e| e == LEASE_EXPIRED));
                    cases += 1;
                }

                for token in [TOKEN, TOKEN + 1] {
                    let case = format!("{case} token {token}");
                    // An ack.
                    store(&mut conn, &k, job);
                    let acked: Vec<u64> = ack
                        .key(&k.meta)
                        .key(&k.payload)
                        .key(&k.counts)
                        .key(&k.errors)
                        .key(&k.running)
                        .arg(ID)
                        .arg(token)
                        .invoke(&mut conn)
                        .unwrap();
                    let valid = job.ack(token);
                    assert_eq!(acked, [u64::from(valid)], "ack {case}");
                    let left = stored(&mut conn, &k);
                    let expect = (!valid).then_some((letter(&job), job.attempt));
                    assert_eq!(left, expect, "ack {case}");

                    // A retry, with an error (a failure).
                    store(&mut conn, &k, job);
                    let mut rust = job;
                    let outcome = rust.retry(token, u64::MAX, RUN_AT, max);
                    let (code, _): (u64, String) = retry
                        .key(&k.meta)
                        .key(&k.due)
                        .key(&k.counts)
                        .key(&k.dead)
                        .key(&k.errors)
                        .key(&k.running)
                        .arg(ID)
                        .arg(token)
                        .arg(0)
                        .arg(max)
                        .arg(&k.wake)
                        .arg("PUBLISH")
                        .arg("boom")
                        .invoke(&mut conn)
                        .unwrap();
                    let expect = match outcome {
                        Retry::Stale => 0,
                        Retry::Pending => 1,
                        Retry::Died => 2,
                    };
                    assert_eq!(code, expect, "retry {case}");
                    let left = stored(&mut conn, &k);
                    assert_eq!(left, Some((letter(&rust), rust.attempt)), "retry {case}");
                    let error = last_error(&mut conn, &k);
                    let failed = outcome != Retry::Stale;
                    assert_eq!(error.as_deref(), failed.then_some("boom"), "retry {case}");

                    // An extend.
                    store(&mut conn, &k, job);
                    let mut rust = job;
                    let extended = rust.extend(token, u64::MAX);
                    let done: u64 = extend
                        .key(&k.meta)
                        .key(&k.running)
                        .arg(ID)
                        .arg(token)
                        .arg(60_000_000)
                        .invoke(&mut conn)
                        .unwrap();
                    assert_eq!(done, u64::from(extended), "extend {case}");
                    let left = stored(&mut conn, &k);
                    assert_eq!(left, Some((letter(&rust), rust.attempt)), "extend {case}");
                    cases += 3;
                }

                // A cancel.
                store(&mut conn, &k, job);
                let removed: u64 = cancel
                    .key(&k.meta)
                    .key(&k.payload)
                    .key(&k.due)
                    .key(&k.counts)
                    .key(&k.series)
                    .key(&k.errors)
                    .arg(ID)
                    .invoke(&mut conn)
                    .unwrap();
                assert_eq!(removed, u64::from(job.cancel()), "cancel {case}");
                let left = stored(&mut conn, &k);
                let expect = (!job.cancel()).then_some((letter(&job), job.attempt));
                assert_eq!(left, expect, "cancel {case}");

                // A revive, by id.
                store(&mut conn, &k, job);
                let mut rust = job;
                let revived = rust.revive(RUN_AT);
                let (n, _): (u64, Value) = revive
                    .key(&k.meta)
                    .key(&k.due)
                    .key(&k.counts)
                    .key(&k.dead)
                    .arg("id")
                    .arg(ID)
                    .arg("after")
                    .arg(0)
                    .arg("")
                    .arg(&k.wake)
                    .arg("PUBLISH")
                    .invoke(&mut conn)
                    .unwrap();
                assert_eq!(n, u64::from(revived), "revive {case}");
                let left = stored(&mut conn, &k);
                assert_eq!(left, Some((letter(&rust), rust.attempt)), "revive {case}");
                cases += 2;
            }
        }
    }
    assert_eq!(cases, 4 * 3 * (2 + 3 * 6 + 2 * 3));
}

#[test]
fn import_writes_a_job_as_the_scripts_keep_it_and_leaves_an_existing_one() {
    let server = Server::start();
    let mut conn = server.connect().unwrap();
    let k = Keys::new("q", "PUBLISH");
    let import = script(&[include_str!("lua/import.lua")]);
    let call = |conn: &mut Connection, job: &Machine, error: Option<&str>| -> Vec<u64> {
        let (letter, score) = match job.status {
            Status::Dead { at } => ("d", at / 1000),
            _ => ("p", job.run_at.div_ceil(1000)),
        };
        import
            .key(&k.meta)
            .key(&k.payload)
            .key(&k.due)
            .key(&k.counts)
            .key(&k.dead)
            .key(&k.errors)
            .arg(&k.wake)
            .arg("PUBLISH")
            .arg(ID)
            .arg(letter)
            .arg(job.attempt)
            .arg(job.run_at)
            .arg(score)
            .arg(if error.is_some() { "1" } else { "0" })
            .arg(error.unwrap_or(""))
            .arg("p")
            .invoke(conn)
            .unwrap()
    };
    // Every key the scripts keep for the one job, as `(key, field or member, value)`.
    let dump = |conn: &mut Connection| -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for hash in [&k.meta, &k.payload, &k.counts, &k.errors] {
            let all: Vec<(String, String)> = conn.hgetall(hash).unwrap();
            out.extend(all.into_iter().map(|(f, v)| (hash.clone(), f, v)));
        }
        for index in [&k.due, &k.dead, &k.running] {
            let all: Vec<(String, String)> = conn.zrange_withscores(index, 0, -1).unwrap();
            out.extend(all.into_iter().map(|(m, s)| (index.clone(), m, s)));
        }
        out.sort();
        out
    };
    for attempt in 0..=3 {
        for job in jobs(attempt) {
            if matches!(job.status, Status::Running { .. }) {
                continue; // a copy writes a running job as pending
            }
            let case = format!("{job:?}");
            store(&mut conn, &k, job);
            let _: () = conn.hset(&k.errors, ID, "boom").unwrap();
            let laid_out = dump(&mut conn);
            let _: () = ::redis::cmd("FLUSHALL").query(&mut conn).unwrap();
            assert_eq!(call(&mut conn, &job, Some("boom")), [1], "{case}");
            assert_eq!(dump(&mut conn), laid_out, "{case}");
            // Again, or over another job of the id: nothing changes.
            let other = Machine {
                attempt: attempt + 1,
                ..jobs(0)[2]
            };
            assert_eq!(call(&mut conn, &other, None), [0], "{case}");
            assert_eq!(dump(&mut conn), laid_out, "{case}");
        }
    }
}
