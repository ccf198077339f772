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
//!
//! Each case runs for a job stored without its spec (format 1's, and an occurrence of a
//! series stored without one: the queue's plain attempts and lease apply) and for jobs stored with one
//! (`lua/kinds.lua`: own kind, priority, attempts and lease, the queue's then another), and
//! after every script [`audit`] checks the indexes and counters the scripts keep beside
//! the jobs: each job in its state's set of its level or kind only, `levels` naming exactly
//! the sets in use, the counters (in all and per kind) those of the jobs.

use std::collections::{BTreeMap, BTreeSet};
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

/// How a case's job is stored: `None` without its spec (the queue's plain one applies),
/// or with its kind and priority (and the case's max attempts, and a lease of its own).
const SPECS: [Option<(&str, i8)>; 4] = [None, Some(("", 0)), Some(("img:x", -2)), Some(("k", 5))];

/// The plain lease a claim is given, and a job's own (microseconds).
const PLAIN_LEASE_US: u64 = 30_000_000;
const OWN_LEASE_US: u64 = 7_000_000;

/// The meta tail of a job stored with `spec` and `max` attempts (`scripts::spec_tail`).
fn tail(spec: Option<(&str, i8)>, max: u32) -> String {
    match spec {
        None => String::new(),
        Some((kind, p)) => format!(
            ":{p}:{max}:{}:1000000000:60000000000\x1f{kind}",
            OWN_LEASE_US * 1000
        ),
    }
}

/// The queue's plain tail a script is given: `max` attempts for a job stored without its
/// spec; for one stored with it another count, which must not be used.
fn plain_tail(spec: Option<(&str, i8)>, max: u32) -> String {
    let plain = if spec.is_none() { max } else { 100 };
    format!(
        ":0:{plain}:{}:1000000000:60000000000\x1f",
        PLAIN_LEASE_US * 1000
    )
}

/// The due set of (priority, kind) and the running set of a kind (`lua/kinds.lua`).
fn due_key(k: &Keys, p: i8, kind: &str) -> String {
    if p == 0 && kind.is_empty() {
        k.due.clone()
    } else {
        format!("{}:{p}:{kind}", k.due)
    }
}

fn running_key(k: &Keys, kind: &str) -> String {
    if kind.is_empty() {
        k.running.clone()
    } else {
        format!("{}:{kind}", k.running)
    }
}

fn dead_key(k: &Keys, kind: &str) -> String {
    if kind.is_empty() {
        k.dead.clone()
    } else {
        format!("{}:{kind}", k.dead)
    }
}

/// The level (priority, kind) of a meta string.
fn level_of(meta: &str) -> (i8, String) {
    let mut fields = meta.splitn(5, ':');
    let tail = fields.nth(4).unwrap_or("");
    if tail.is_empty() {
        return (0, String::new());
    }
    let (numbers, kind) = tail.split_once('\x1f').unwrap();
    (
        numbers.split(':').next().unwrap().parse().unwrap(),
        kind.to_owned(),
    )
}

/// Checks that the indexes and counters agree with the jobs' metas: each job in exactly the
/// set of its state and level or kind (dead jobs: their kind's dead set), nothing else in
/// any set (but the running pin), `levels` naming exactly the non-plain sets with jobs,
/// every counter right.
fn audit(conn: &mut Connection, k: &Keys, case: &str) {
    let metas: BTreeMap<String, String> = conn.hgetall(&k.meta).unwrap();
    let mut expect: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    let mut levels: BTreeSet<String> = BTreeSet::new();
    for (id, meta) in &metas {
        let (p, kind) = level_of(meta);
        let (index, state) = match &meta[..1] {
            "p" => (due_key(k, p, &kind), "pending"),
            "r" => (running_key(k, &kind), "running"),
            _ => (dead_key(k, &kind), "dead"),
        };
        match state {
            "pending" if (p, kind.as_str()) != (0, "") => {
                levels.insert(format!("d:{p}:{kind}"));
            }
            "running" if !kind.is_empty() => {
                levels.insert(format!("r:{kind}"));
            }
            "dead" if !kind.is_empty() => {
                levels.insert(format!("x:{kind}"));
            }
            _ => {}
        }
        expect.entry(index).or_default().insert(id.clone());
        *counts.entry(state.to_owned()).or_default() += 1;
        if !kind.is_empty() {
            *counts.entry(format!("{state}:{kind}")).or_default() += 1;
        }
    }
    let mut actual: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let keys: Vec<String> = conn.keys("{q}:*").unwrap();
    for key in keys {
        let is_index = key == k.dead
            || key.starts_with(&format!("{}:", k.dead))
            || key == k.due
            || key.starts_with(&format!("{}:", k.due))
            || key == k.running
            || key.starts_with(&format!("{}:", k.running));
        if !is_index {
            continue;
        }
        let members: Vec<String> = conn.zrange(&key, 0, -1).unwrap();
        let jobs: BTreeSet<String> = members.into_iter().filter(|m| m.len() <= 256).collect();
        if !jobs.is_empty() {
            actual.insert(key, jobs);
        }
    }
    assert_eq!(actual, expect, "indexes after {case}");
    let recorded: BTreeSet<String> = conn.zrange(&k.levels, 0, -1).unwrap();
    assert_eq!(recorded, levels, "levels after {case}");
    let mut stored: BTreeMap<String, i64> = conn.hgetall(&k.counts).unwrap();
    let successors = stored.remove("successors");
    let stored: BTreeMap<String, i64> = stored.into_iter().filter(|(_, n)| *n != 0).collect();
    assert_eq!(stored, counts, "counts after {case}");
    // Successors (`lua/next.lua`): each beside a pending or running job of its id, with its
    // payload, and nothing else; in no index and no counter (checked above: those are the
    // jobs' only).
    let next: BTreeMap<String, String> = conn.hgetall(&k.next).unwrap();
    let next_payload: BTreeMap<String, String> = conn.hgetall(&k.next_payload).unwrap();
    assert_eq!(
        next.keys().collect::<Vec<_>>(),
        next_payload.keys().collect::<Vec<_>>(),
        "successor payloads after {case}"
    );
    let waiting = (!next.is_empty()).then_some(next.len() as i64);
    assert_eq!(successors, waiting, "the successors' count after {case}");
    for id in next.keys() {
        let state = metas.get(id).map(|m| &m[..1]);
        assert!(
            matches!(state, Some("p" | "r")),
            "the successor of {id} beside {state:?} after {case}"
        );
    }
}

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

/// Stores `job` as the scripts keep it (`schedule.lua`'s and `kinds.lua`'s headers: meta
/// with the spec's `tail`, the state's index of its level or kind, `levels`, the
/// counters), on an empty server.
fn store(conn: &mut Connection, k: &Keys, job: Machine, tail: &str) {
    let _: () = ::redis::cmd("FLUSHALL").query(conn).unwrap();
    put(conn, k, ID, job, tail);
}

/// Adds the job `id` as the scripts keep it, beside what the server holds.
fn put(conn: &mut Connection, k: &Keys, id: &str, job: Machine, tail: &str) {
    let meta =
        |letter: &str, token: u64| format!("{letter}:{}:{token}:{}{tail}", job.attempt, job.run_at);
    let (meta, counter, score) = match job.status {
        Status::Pending => (meta("p", 0), "pending", job.run_at.div_ceil(1000)),
        Status::Running { token, until } => (meta("r", token), "running", until / 1000),
        Status::Dead { at } => (meta("d", 0), "dead", at / 1000),
    };
    let (p, kind) = level_of(&meta);
    let index = match job.status {
        Status::Pending => {
            if (p, kind.as_str()) != (0, "") {
                let _: () = conn.zadd(&k.levels, format!("d:{p}:{kind}"), p).unwrap();
            }
            due_key(k, p, &kind)
        }
        Status::Running { .. } => {
            if !kind.is_empty() {
                let _: () = conn.zadd(&k.levels, format!("r:{kind}"), 1000).unwrap();
            }
            running_key(k, &kind)
        }
        Status::Dead { .. } => {
            if !kind.is_empty() {
                let _: () = conn.zadd(&k.levels, format!("x:{kind}"), 2000).unwrap();
            }
            dead_key(k, &kind)
        }
    };
    let _: () = conn.hset(&k.meta, id, meta).unwrap();
    let _: () = conn.hset(&k.payload, id, "p").unwrap();
    let _: () = conn.zadd(index, id, score).unwrap();
    let _: () = conn.hincr(&k.counts, counter, 1).unwrap();
    if !kind.is_empty() {
        let _: () = conn
            .hincr(&k.counts, format!("{counter}:{kind}"), 1)
            .unwrap();
    }
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
    let kinds = include_str!("lua/kinds.lua");
    let series = include_str!("lua/series.lua");
    let held = include_str!("lua/held.lua");
    let acks = include_str!("lua/acks.lua");
    let next = include_str!("lua/next.lua");
    let gates = include_str!("lua/gates.lua");
    let ack = script(&[kinds, gates, held, next, acks, include_str!("lua/ack.lua")]);
    let retry = script(&[kinds, gates, held, next, include_str!("lua/retry.lua")]);
    let extend = script(&[kinds, include_str!("lua/extend.lua")]);
    let cancel = script(&[
        kinds,
        gates,
        series,
        held,
        next,
        include_str!("lua/cancel.lua"),
    ]);
    let revive = script(&[kinds, gates, include_str!("lua/revive.lua")]);
    let mut cases = 0;
    for spec in SPECS {
        for attempt in 0..=3 {
            for max in MAX_ATTEMPTS {
                for job in jobs(attempt) {
                    let case = format!("{job:?} max_attempts {max} spec {spec:?}");
                    let tail = tail(spec, max);
                    let plain = plain_tail(spec, max);
                    let lease = if spec.is_some() {
                        OWN_LEASE_US
                    } else {
                        PLAIN_LEASE_US
                    };
                    let kind = spec.map_or("", |s| s.0);

                    // A claim, of a due job only (a dead one is in no index a claim reads).
                    if job.status != (Status::Dead { at: 5_000 }) {
                        store(&mut conn, &k, job, &tail);
                        let mut rust = job;
                        let error = rust.claim_error();
                        let outcome = rust.claim(u64::MAX, u64::MAX, 1, max);
                        let reply = claim_as(&mut conn, &k, 10, &plain, &["*"]);
                        match outcome {
                            Claim::Deliver => {
                                assert_eq!(reply.jobs.len(), 1, "{case}");
                                assert_eq!(reply.jobs[0].attempt, rust.attempt, "{case}");
                                assert_eq!(reply.died, 0, "{case}");
                                assert_eq!(reply.jobs[0].spec.kind, kind, "{case}");
                                let own = &reply.jobs[0].spec;
                                assert_eq!(own.max_attempts, max, "{case}");
                                assert_eq!(own.lease, Duration::from_micros(lease), "{case}");
                                assert_eq!(own.priority, spec.map_or(0, |s| s.1), "{case}");
                                // Leased for the job's own lease.
                                let end: f64 = conn.zscore(running_key(&k, kind), ID).unwrap();
                                assert_eq!(end as u64, reply.now / 1000 + lease, "lease {case}");
                            }
                            Claim::Died => {
                                assert!(reply.jobs.is_empty(), "{case}");
                                assert_eq!(reply.died, 1, "{case}");
                            }
                            Claim::NotDue => panic!("{case}: every case is due"),
                        }
                        let left = stored(&mut conn, &k);
                        assert_eq!(left, Some((letter(&rust), rust.attempt)), "claim {case}");
                        audit(&mut conn, &k, &format!("claim {case}"));
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
                        store(&mut conn, &k, job, &tail);
                        let acked = ack_with(&mut conn, &k, &ack, token);
                        let valid = job.ack(token);
                        assert_eq!(acked, [u64::from(valid)], "ack {case}");
                        let left = stored(&mut conn, &k);
                        let expect = (!valid).then_some((letter(&job), job.attempt));
                        assert_eq!(left, expect, "ack {case}");
                        audit(&mut conn, &k, &format!("ack {case}"));

                        // A retry, with an error (a failure): the job's own max attempts.
                        store(&mut conn, &k, job, &tail);
                        let mut rust = job;
                        let outcome = rust.retry(token, u64::MAX, RUN_AT, max);
                        let plain_max = if spec.is_some() { 100 } else { max };
                        let code = retry_with(&mut conn, &k, &retry, token, plain_max);
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
                        audit(&mut conn, &k, &format!("retry {case}"));

                        // An extend.
                        store(&mut conn, &k, job, &tail);
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
                        audit(&mut conn, &k, &format!("extend {case}"));
                        cases += 3;
                    }

                    // A cancel.
                    store(&mut conn, &k, job, &tail);
                    let removed = cancel_with(&mut conn, &k, &cancel);
                    assert_eq!(removed, u64::from(job.cancel()), "cancel {case}");
                    let left = stored(&mut conn, &k);
                    let expect = (!job.cancel()).then_some((letter(&job), job.attempt));
                    assert_eq!(left, expect, "cancel {case}");
                    audit(&mut conn, &k, &format!("cancel {case}"));

                    // A revive, by id: back to its own level.
                    store(&mut conn, &k, job, &tail);
                    let mut rust = job;
                    let revived = rust.revive(RUN_AT);
                    let (n, _): (u64, Value) = revive
                        .key(&k.meta)
                        .key(&k.due)
                        .key(&k.counts)
                        .key(&k.dead)
                        .key(&k.levels)
                        .key(&k.gate_timers)
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
                    audit(&mut conn, &k, &format!("revive {case}"));
                    cases += 2;
                }
            }
        }
    }
    assert_eq!(cases, SPECS.len() * 4 * 3 * (2 + 3 * 6 + 2 * 3));
}

/// One `schedule.lua` batch creating `x` of kind `k` then replacing `y`, the last stored job
/// of `k`, into kind `k2`: the replace's tidy of `y`'s old level must see `x` (written
/// before it), so `levels` keeps `k`'s level and a claim delivers both jobs.
/// `schedule.lua` as the queue sends it (`scripts/jobs.rs`).
fn schedule_script() -> Script {
    script(&[
        include_str!("lua/kinds.lua"),
        include_str!("lua/gates.lua"),
        include_str!("lua/series.lua"),
        include_str!("lua/held.lua"),
        include_str!("lua/next.lua"),
        include_str!("lua/schedule.lua"),
    ])
}

/// One `schedule.lua` batch: per job its id, spec tail and mode ('k', 'r' or 'w'), due at
/// `RUN_AT`, its payload its id; the answers (outcome, ns) in order.
fn schedule_batch(
    conn: &mut Connection,
    k: &Keys,
    schedule: &Script,
    jobs: &[(&str, &str, &str)],
) -> Vec<(i64, String)> {
    let mut call = schedule.prepare_invoke();
    call.key(&k.meta)
        .key(&k.payload)
        .key(&k.due)
        .key(&k.counts)
        .key(&k.levels)
        .key(&k.held)
        .key(&k.held_until)
        .key(&k.series)
        .key(&k.next)
        .key(&k.next_payload)
        .key(&k.gate_timers)
        .arg(&k.wake)
        .arg("PUBLISH");
    for (id, tail, mode) in jobs {
        call.arg(*id)
            .arg("at")
            .arg(RUN_AT)
            .arg(RUN_AT.div_ceil(1000))
            .arg(*id)
            .arg(*tail)
            .arg(*mode);
    }
    call.invoke(conn).unwrap()
}

#[test]
fn a_replace_after_a_create_in_one_batch_keeps_the_created_jobs_level() {
    let server = Server::start();
    let mut conn = server.connect().unwrap();
    let k = Keys::new("q", "PUBLISH");
    let schedule = schedule_script();
    let _: () = ::redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    put(
        &mut conn,
        &k,
        "y",
        pending(RUN_AT),
        &tail(Some(("k", 1)), 3),
    );
    audit(&mut conn, &k, "y stored");
    let answers = schedule_batch(
        &mut conn,
        &k,
        &schedule,
        &[
            ("x", &tail(Some(("k", 1)), 3), "k"),
            ("y", &tail(Some(("k2", 1)), 3), "r"),
        ],
    );
    assert_eq!(
        answers,
        [(1, RUN_AT.to_string()), (2, RUN_AT.to_string())],
        "x created, y replaced"
    );
    audit(&mut conn, &k, "create x of k, replace y from k to k2");
    let mut got: Vec<String> = claim_with(&mut conn, &k, 10, &["*"])
        .jobs
        .into_iter()
        .map(|j| j.id)
        .collect();
    got.sort();
    assert_eq!(got, ["x", "y"]);
    audit(&mut conn, &k, "claim of both");
}

#[test]
fn import_writes_a_job_as_the_scripts_keep_it_and_leaves_an_existing_one() {
    let server = Server::start();
    let mut conn = server.connect().unwrap();
    let k = Keys::new("q", "PUBLISH");
    let import = script(&[
        include_str!("lua/kinds.lua"),
        include_str!("lua/gates.lua"),
        include_str!("lua/held.lua"),
        include_str!("lua/import.lua"),
    ]);
    let call =
        |conn: &mut Connection, job: &Machine, error: Option<&str>, tail: &str| -> Vec<u64> {
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
                .key(&k.levels)
                .key(&k.held)
                .key(&k.held_until)
                .key(&k.gate_timers)
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
                .arg(tail)
                .invoke(conn)
                .unwrap()
        };
    // Every key the scripts keep for the one job (its level's and kind's included), as
    // `(key, field or member, value)`.
    let dump = |conn: &mut Connection| -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        let keys: Vec<String> = conn.keys("{q}:*").unwrap();
        for key in keys {
            let kind: String = ::redis::cmd("TYPE").arg(&key).query(conn).unwrap();
            let all: Vec<(String, String)> = if kind == "hash" {
                conn.hgetall(&key).unwrap()
            } else {
                conn.zrange_withscores(&key, 0, -1).unwrap()
            };
            out.extend(all.into_iter().map(|(m, v)| (key.clone(), m, v)));
        }
        out.sort();
        out
    };
    for spec in SPECS {
        for attempt in 0..=3 {
            for job in jobs(attempt) {
                if matches!(job.status, Status::Running { .. }) {
                    continue; // a copy writes a running job as pending
                }
                let case = format!("{job:?} spec {spec:?}");
                let tail = tail(spec, 3);
                store(&mut conn, &k, job, &tail);
                let _: () = conn.hset(&k.errors, ID, "boom").unwrap();
                let laid_out = dump(&mut conn);
                let _: () = ::redis::cmd("FLUSHALL").query(&mut conn).unwrap();
                assert_eq!(call(&mut conn, &job, Some("boom"), &tail), [1], "{case}");
                assert_eq!(dump(&mut conn), laid_out, "{case}");
                audit(&mut conn, &k, &case);
                // Again, or over another job of the id: nothing changes.
                let other = Machine {
                    attempt: attempt + 1,
                    ..jobs(0)[2]
                };
                assert_eq!(call(&mut conn, &other, None, ""), [0], "{case}");
                assert_eq!(dump(&mut conn), laid_out, "{case}");
            }
        }
    }
}

/// `ack.lua` of the job under `token`: its answer.
fn ack_with(conn: &mut Connection, k: &Keys, ack: &Script, token: u64) -> Vec<u64> {
    ack.key(&k.meta)
        .key(&k.payload)
        .key(&k.counts)
        .key(&k.errors)
        .key(&k.running)
        .key(&k.levels)
        .key(&k.held)
        .key(&k.held_until)
        .key(&k.due)
        .key(&k.next)
        .key(&k.next_payload)
        .key(&k.gate_timers)
        .arg(&k.wake)
        .arg("PUBLISH")
        .arg(ID)
        .arg(token)
        .invoke(conn)
        .unwrap()
}

/// `retry.lua`, a failure ("boom") of the job under `token`, due again at once, for a queue
/// whose plain spec has `plain_max` attempts: its outcome code.
fn retry_with(conn: &mut Connection, k: &Keys, retry: &Script, token: u64, plain_max: u32) -> u64 {
    let (code, _): (u64, String) = retry
        .key(&k.meta)
        .key(&k.due)
        .key(&k.counts)
        .key(&k.dead)
        .key(&k.errors)
        .key(&k.running)
        .key(&k.levels)
        .key(&k.payload)
        .key(&k.next)
        .key(&k.next_payload)
        .key(&k.gate_timers)
        .arg(ID)
        .arg(token)
        .arg(0)
        .arg(plain_max)
        .arg(&k.wake)
        .arg("PUBLISH")
        .arg("boom")
        .invoke(conn)
        .unwrap();
    code
}

/// `cancel.lua` of the job: its answer.
fn cancel_with(conn: &mut Connection, k: &Keys, cancel: &Script) -> u64 {
    cancel
        .key(&k.meta)
        .key(&k.payload)
        .key(&k.due)
        .key(&k.counts)
        .key(&k.series)
        .key(&k.errors)
        .key(&k.levels)
        .key(&k.next)
        .key(&k.next_payload)
        .key(&k.gate_timers)
        .arg(ID)
        .arg(&k.wake)
        .arg("PUBLISH")
        .invoke(conn)
        .unwrap()
}

/// `claim.lua` of up to `max` jobs of the kinds `filter` names (`["*"]`, or the number of
/// kinds, then each kind and its most).
fn claim_with(conn: &mut Connection, k: &Keys, max: usize, filter: &[&str]) -> ClaimReply {
    claim_as(conn, k, max, &plain_tail(None, 3), filter)
}

/// [`claim_with`] for a queue whose plain spec is the meta tail `plain`.
fn claim_as(
    conn: &mut Connection,
    k: &Keys,
    max: usize,
    plain: &str,
    filter: &[&str],
) -> ClaimReply {
    ClaimReply::from_redis_value(claim_value(conn, k, max, plain, filter)).unwrap()
}

/// [`claim_as`]'s reply as the server sent it.
fn claim_value(conn: &mut Connection, k: &Keys, max: usize, plain: &str, filter: &[&str]) -> Value {
    claim_result(conn, k, max, plain, filter).unwrap()
}

/// [`claim_value`], or the error the script raised.
fn claim_result(
    conn: &mut Connection,
    k: &Keys,
    max: usize,
    plain: &str,
    filter: &[&str],
) -> ::redis::RedisResult<Value> {
    let claim = script(&[
        include_str!("lua/kinds.lua"),
        include_str!("lua/gates.lua"),
        include_str!("lua/held.lua"),
        include_str!("lua/next.lua"),
        include_str!("lua/acks.lua"),
        include_str!("lua/series.lua"),
        include_str!("lua/claim.lua"),
    ]);
    claim
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
        .key(&k.levels)
        .key(&k.held)
        .key(&k.held_until)
        .key(&k.next)
        .key(&k.next_payload)
        .key(&k.gate_timers)
        .arg(max)
        .arg(plain)
        .arg(filter[0])
        .arg(&k.wake)
        .arg("PUBLISH")
        .arg(&filter[1..])
        .invoke(conn)
}

/// A pending job due at `run_at` nanoseconds.
fn pending(run_at: u64) -> Machine {
    Machine {
        run_at,
        attempt: 0,
        status: Status::Pending,
    }
}

#[test]
fn a_claim_merges_the_kinds_of_one_priority_by_run_at_then_id() {
    let server = Server::start();
    let mut conn = server.connect().unwrap();
    let k = Keys::new("q", "PUBLISH");
    // Six kinds at priority 1, one at 2 (first whatever its run_at), jobs interleaved in
    // time, equal run_ats across kinds (then by id), more jobs per kind than a merge's first
    // chunk so refills are met, and some not yet due.
    let _: () = ::redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    let mut expect: Vec<(u64, String)> = Vec::new();
    for kind in 0..6u64 {
        for n in 0..40u64 {
            let run_at = 1_000_000 * (1 + (n * 7 + kind * 3) % 50);
            let id = format!("j{}-{kind}", 99 - n);
            put(
                &mut conn,
                &k,
                &id,
                pending(run_at),
                &tail(Some((&format!("k{kind}"), 1)), 3),
            );
            expect.push((run_at, id));
        }
        let future = format!("later-{kind}");
        let far = pending(u64::MAX / 2);
        put(
            &mut conn,
            &k,
            &future,
            far,
            &tail(Some((&format!("k{kind}"), 1)), 3),
        );
    }
    expect.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| a.1.as_bytes().cmp(b.1.as_bytes()))
    });
    put(
        &mut conn,
        &k,
        "top",
        pending(60_000_000),
        &tail(Some(("k0", 2)), 3),
    );
    let mut expect: Vec<String> = expect.into_iter().map(|(_, id)| id).collect();
    expect.insert(0, "top".to_owned());
    let mut got = Vec::new();
    for max in [1, 5, 30, 200, 512] {
        let reply = claim_with(&mut conn, &k, max, &["*"]);
        assert!(reply.jobs.len() <= max);
        got.extend(reply.jobs.into_iter().map(|j| j.id));
        audit(&mut conn, &k, &format!("claim of {max}"));
    }
    assert_eq!(got, expect);
}

#[test]
fn a_claim_of_kinds_in_turn_sends_each_spec_once_and_settles_the_acks_it_carries() {
    let server = Server::start();
    let mut conn = server.connect().unwrap();
    let k = Keys::new("q", "PUBLISH");
    let _: () = ::redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    // Kinds a, b, c at priority 1 and d at 0, due in turns (a0, b0, c0, a1, ...): a claim's
    // jobs change spec from one to the next.
    for n in 0..4u64 {
        for kind in ["a", "b", "c"] {
            let id = format!("{kind}{n}");
            put(
                &mut conn,
                &k,
                &id,
                pending(RUN_AT + n * 1000),
                &tail(Some((kind, 1)), 3),
            );
        }
    }
    for n in 0..2u64 {
        put(
            &mut conn,
            &k,
            &format!("d{n}"),
            pending(RUN_AT),
            &tail(Some(("d", 0)), 3),
        );
    }
    let plain = plain_tail(None, 3);
    let raw = claim_value(&mut conn, &k, 7, &plain, &["*"]);
    let Value::Array(items) = &raw else {
        panic!("a claim reply is an array: {raw:?}")
    };
    // Each job's spec tail: a text the first time the reply sends it, then its position
    // among those sent.
    let tails: Vec<&Value> = items[5..].iter().skip(5).step_by(6).collect();
    assert_eq!(tails.len(), 7);
    assert!(tails[..3]
        .iter()
        .all(|t| matches!(t, Value::BulkString(b) if b.starts_with(b":1:"))));
    assert_eq!(
        tails[3..6],
        [&Value::Int(1), &Value::Int(2), &Value::Int(3)]
    );
    assert_eq!(tails[6], &Value::Int(1));
    let first = ClaimReply::from_redis_value(raw).unwrap();
    let ids: Vec<&str> = first.jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, ["a0", "b0", "c0", "a1", "b1", "c1", "a2"]);
    for job in &first.jobs {
        assert_eq!(
            (job.spec.kind.as_str(), job.spec.priority),
            (&job.id[..1], 1)
        );
        assert_eq!(job.spec.lease, Duration::from_micros(OWN_LEASE_US));
    }
    audit(&mut conn, &k, "a claim of three kinds in turn");
    // The acks of all seven ride on the next claim, which leases more of a, b and c (their
    // running sets stay) and the d jobs: counters and sets as the jobs left them.
    let pairs = |jobs: &[crate::backend::Claimed]| -> Vec<String> {
        jobs.iter()
            .flat_map(|j| [j.id.clone(), j.token.to_string()])
            .collect()
    };
    let acks = pairs(&first.jobs);
    let mut args = vec!["*"];
    args.extend(acks.iter().map(String::as_str));
    let second = claim_as(&mut conn, &k, 100, &plain, &args);
    assert_eq!(second.acked, [true; 7]);
    let mut ids: Vec<&str> = second.jobs.iter().map(|j| j.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["a3", "b2", "b3", "c2", "c3", "d0", "d1"]);
    for job in &second.jobs {
        let p = if job.id.starts_with('d') { 0 } else { 1 };
        assert_eq!(
            (job.spec.kind.as_str(), job.spec.priority),
            (&job.id[..1], p)
        );
    }
    audit(&mut conn, &k, "a claim carrying acks of three kinds");
    // Their acks on a paused queue: applied, nothing leased, every kind's running set and
    // its level gone with its last job.
    let _: () = conn.hset(&k.counts, "paused", 1).unwrap();
    let acks = pairs(&second.jobs);
    let mut args = vec!["*"];
    args.extend(acks.iter().map(String::as_str));
    let third = claim_as(&mut conn, &k, 100, &plain, &args);
    assert_eq!(third.acked, [true; 7]);
    assert!(third.jobs.is_empty());
    let _: () = conn.hdel(&k.counts, "paused").unwrap();
    audit(&mut conn, &k, "a paused claim carrying the last acks");
    let levels: Vec<String> = conn.zrange(&k.levels, 0, -1).unwrap();
    assert!(levels.is_empty(), "levels left: {levels:?}");
}

/// Not a check of behaviour but a count (run with `--ignored --nocapture`): what the server
/// does per job in a drain of 4,000 due jobs, claimed 27 at a time (what a steady `run(50)`
/// claims, `guide/kinds.md`) with each claim's acks carried by the next, for jobs of the plain
/// spec, of three priorities, and of four kinds times three priorities (the `jobs --kinds`
/// bench's `plain`, `priorities` and `kinds, one run`): commands the scripts ran per job and
/// script calls, from `INFO commandstats`, and the server's CPU per job (noisy). Every job is
/// delivered once, every ack holds, and the keys are as the jobs left them.
#[test]
#[ignore = "a measurement: prints what a drain costs the server"]
fn a_drain_counts_what_the_server_does_per_job() {
    const N: usize = 4000;
    const PER_CLAIM: usize = 27;
    const KINDS: [&str; 4] = ["rate", "remind", "capture", "digest"];
    let plain = plain_tail(None, 3);
    for layout in ["plain", "priorities", "kinds"] {
        let server = Server::start();
        let mut conn = server.connect().unwrap();
        let k = Keys::new("q", "PUBLISH");
        for i in 0..N {
            let p = [-1, 0, 1][i % 3];
            let spec = match layout {
                "plain" => ("", 0),
                "priorities" => ("", p),
                _ => (KINDS[(i / 3) % 4], p),
            };
            put(
                &mut conn,
                &k,
                &format!("job-{i:08}"),
                pending(RUN_AT),
                &tail(Some(spec), 3),
            );
        }
        let _: () = ::redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut conn)
            .unwrap();
        let cpu = |conn: &mut Connection| -> f64 {
            let info: String = ::redis::cmd("INFO").arg("cpu").query(conn).unwrap();
            info.lines()
                .filter(|l| l.starts_with("used_cpu_sys:") || l.starts_with("used_cpu_user:"))
                .map(|l| l.split(':').nth(1).unwrap().trim().parse::<f64>().unwrap())
                .sum()
        };
        let started = cpu(&mut conn);
        let mut delivered = BTreeSet::new();
        let mut acks: Vec<String> = Vec::new();
        let mut claims = 0;
        loop {
            let mut args = vec!["*"];
            args.extend(acks.iter().map(String::as_str));
            let reply = claim_as(&mut conn, &k, PER_CLAIM, &plain, &args);
            claims += 1;
            assert!(reply.acked.iter().all(|a| *a), "an ack that did not hold");
            if reply.jobs.is_empty() {
                break;
            }
            acks = reply
                .jobs
                .iter()
                .flat_map(|j| [j.id.clone(), j.token.to_string()])
                .collect();
            for job in reply.jobs {
                assert!(delivered.insert(job.id), "a job delivered twice");
            }
        }
        let cpu_us = (cpu(&mut conn) - started) * 1e6 / N as f64;
        assert_eq!(delivered.len(), N);
        let stats: String = ::redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut conn)
            .unwrap();
        let mut commands = 0;
        for line in stats.lines() {
            let Some((name, fields)) = line
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            let calls: u64 = fields
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))
                .unwrap()
                .parse()
                .unwrap();
            if !matches!(name, "evalsha" | "eval" | "info" | "config" | "script") {
                commands += calls;
            }
        }
        audit(&mut conn, &k, &format!("the drain of {layout}"));
        println!(
            "{layout:<10} {claims} claims of {N} jobs; {:.2} commands per job in the scripts; \
             server CPU {cpu_us:.1} µs per job",
            commands as f64 / N as f64
        );
    }
}

#[test]
fn a_claim_of_several_kinds_takes_each_up_to_its_most_by_priority_across_them() {
    let server = Server::start();
    let mut conn = server.connect().unwrap();
    let k = Keys::new("q", "PUBLISH");
    let _: () = ::redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    // Kinds a, b (two priorities) and c (not claimed), 10 due jobs each per level; the
    // plain kind "" with 3.
    for n in 0..10u64 {
        let at = RUN_AT + n * 1_000;
        for (kind, p) in [("a", 0), ("b", 0), ("b", 5), ("c", 9)] {
            let id = format!("{kind}{p}-{n}");
            put(&mut conn, &k, &id, pending(at), &tail(Some((kind, p)), 3));
        }
        if n < 3 {
            put(&mut conn, &k, &format!("plain-{n}"), pending(at), "");
        }
    }
    let reply = claim_with(&mut conn, &k, 50, &["3", "", "10", "a", "2", "b", "4"]);
    let mut ids: Vec<String> = reply.jobs.iter().map(|j| j.id.clone()).collect();
    audit(&mut conn, &k, "claim of a, b and \"\"");
    // b's priority 5 first (its most, 4, all there), then priority 0 by run_at: a's 2 and
    // the plain 3; nothing of c, nothing more of a or b.
    assert_eq!(
        ids.drain(..4).collect::<Vec<_>>(),
        ["b5-0", "b5-1", "b5-2", "b5-3"]
    );
    ids.sort();
    assert_eq!(ids, ["a0-0", "a0-1", "plain-0", "plain-1", "plain-2"]);
    // The total cuts too: 3 in all, the highest priority first.
    let reply = claim_with(&mut conn, &k, 3, &["2", "a", "10", "b", "10"]);
    let ids: Vec<String> = reply.jobs.iter().map(|j| j.id.clone()).collect();
    assert_eq!(ids, ["b5-4", "b5-5", "b5-6"]);
    audit(&mut conn, &k, "claim of 3");
}

#[test]
fn a_kind_claim_reports_the_lease_end_of_the_jobs_it_just_leased_as_next_due() {
    let server = Server::start();
    let mut conn = server.connect().unwrap();
    let k = Keys::new("q", "PUBLISH");
    let _: () = ::redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    // The only jobs of kind x: no running set of x exists before this claim.
    put(
        &mut conn,
        &k,
        "a",
        pending(RUN_AT),
        &tail(Some(("x", 0)), 3),
    );
    put(
        &mut conn,
        &k,
        "b",
        pending(RUN_AT),
        &tail(Some(("x", 0)), 3),
    );
    let reply = claim_with(&mut conn, &k, 10, &["1", "x", "10"]);
    assert_eq!(reply.jobs.len(), 2);
    let end: f64 = conn.zscore(running_key(&k, "x"), "a").unwrap();
    assert_eq!(reply.next_due, Some(end as u64 * 1000));
    // The same for a claim of every kind.
    let _: () = ::redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    put(
        &mut conn,
        &k,
        "a",
        pending(RUN_AT),
        &tail(Some(("x", 0)), 3),
    );
    let reply = claim_with(&mut conn, &k, 10, &["*"]);
    let end: f64 = conn.zscore(running_key(&k, "x"), "a").unwrap();
    assert_eq!(reply.next_due, Some(end as u64 * 1000));
}

#[test]
fn a_series_adopts_no_job_of_another_kind_and_a_claim_delivers_none_outside_its_kinds() {
    let server = Server::start();
    let mut conn = server.connect().unwrap();
    let k = Keys::new("q", "PUBLISH");
    let set = script(&[
        include_str!("lua/kinds.lua"),
        include_str!("lua/series.lua"),
        include_str!("lua/recurring_set.lua"),
    ]);
    let _: () = ::redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    // Occurrences far ahead (after the server's time); the first one's id is taken by a
    // never-delivered job of kind x, the second's by one of kind "" at priority 3, the
    // third's by one of the plain level (kind "", priority 0) stored with a spec.
    let (t1, t2, t3) = (
        "4102444800000000000",
        "4102444801000000000",
        "4102444802000000000",
    );
    put(
        &mut conn,
        &k,
        "s@a",
        pending(RUN_AT),
        &tail(Some(("x", 0)), 3),
    );
    put(
        &mut conn,
        &k,
        "s@b",
        pending(RUN_AT),
        &tail(Some(("", 3)), 3),
    );
    put(
        &mut conn,
        &k,
        "s@c",
        pending(RUN_AT),
        &tail(Some(("", 0)), 3),
    );
    let (_, head, _): (u64, String, String) = set
        .key(&k.meta)
        .key(&k.payload)
        .key(&k.due)
        .key(&k.counts)
        .key(&k.series)
        .key(&k.series_payload)
        .key(&k.series_next)
        .key(&k.levels)
        .key(&k.seq)
        .arg("s")
        .arg("rule")
        .arg(1)
        .arg("payload")
        .arg(format!("{t1}=a,{t2}=b,{t3}=c,4102444803000000000=d"))
        .arg(&k.wake)
        .arg("PUBLISH")
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(
        head, t3,
        "passed over: kind x, priority 3; adopted: the plain level"
    );
    let meta: String = conn.hget(&k.meta, "s@a").unwrap();
    assert!(meta.ends_with("\x1fx"), "left as it was: {meta}");
    audit(&mut conn, &k, "recurring_set");

    // A head of kind x (as one adopted before this rule would be), due, superseded by a
    // later occurrence due too: a claim of kind x delivers no job of another kind.
    let _: () = ::redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    put(
        &mut conn,
        &k,
        "s@a",
        pending(RUN_AT),
        &tail(Some(("x", 0)), 3),
    );
    let _: () = conn
        .hset(&k.series, "s", format!("1|0|{RUN_AT}|a||rule"))
        .unwrap();
    let _: () = conn.hset(&k.series_payload, "s", "payload").unwrap();
    let _: () = conn
        .hset(&k.series_next, "s", format!("{}=b,{t3}=c", RUN_AT * 2))
        .unwrap();
    let reply = claim_with(&mut conn, &k, 10, &["1", "x", "10"]);
    for job in &reply.jobs {
        assert_eq!(
            job.spec.kind, "x",
            "{} delivered to a consumer of x",
            job.id
        );
    }
    let reply = claim_with(&mut conn, &k, 10, &["1", "x", "10"]);
    assert!(reply.jobs.iter().all(|job| job.spec.kind == "x"));
    audit(&mut conn, &k, "claim of x");
}

/// `recurring_set.lua` with the series spec `tail` and the occurrences `list`; the head's
/// time.
fn set_series(conn: &mut Connection, k: &Keys, runs: u32, list: &str, tail: &str) -> String {
    let set = script(&[
        include_str!("lua/kinds.lua"),
        include_str!("lua/series.lua"),
        include_str!("lua/recurring_set.lua"),
    ]);
    let (_, head, _): (u64, String, String) = set
        .key(&k.meta)
        .key(&k.payload)
        .key(&k.due)
        .key(&k.counts)
        .key(&k.series)
        .key(&k.series_payload)
        .key(&k.series_next)
        .key(&k.levels)
        .key(&k.seq)
        .arg("s")
        .arg("rule")
        .arg(runs)
        .arg("payload")
        .arg(list)
        .arg(&k.wake)
        .arg("PUBLISH")
        .arg(tail)
        .invoke(conn)
        .unwrap();
    head
}

#[test]
fn a_series_of_a_kind_makes_and_moves_its_heads_in_its_levels_sets() {
    let server = Server::start();
    let mut conn = server.connect().unwrap();
    let k = Keys::new("q", "PUBLISH");
    let _: () = ::redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    let (t1, t2, t3) = (
        "4102444800000000000",
        "4102444801000000000",
        "4102444802000000000",
    );
    // The first occurrence's id is taken by a job of the plain level, the second's by one
    // of the series' level with a key: neither is adopted. The third is free.
    put(
        &mut conn,
        &k,
        "s@a",
        pending(RUN_AT),
        &tail(Some(("", 0)), 3),
    );
    let keyed = tail(Some(("x", 2)), 3).replace("\x1f", "\x1e0:0:0:tenant\x1f");
    put(&mut conn, &k, "s@b", pending(RUN_AT), &keyed);
    let x = tail(Some(("x", 2)), 3);
    let list = format!("{t1}=a,{t2}=b,{t3}=c,4102444803000000000=d");
    let head = set_series(&mut conn, &k, 1, &list, &x);
    assert_eq!(head, t3, "passed over: the plain level, a keyed job");
    let meta: String = conn.hget(&k.meta, "s@c").unwrap();
    assert_eq!(meta, format!("p:0:0:{t3}{x}"));
    let in_x: Option<f64> = conn.zscore(due_key(&k, 2, "x"), "s@c").unwrap();
    assert!(in_x.is_some());
    audit(&mut conn, &k, "recurring_set of x");
    // A job of the series' level without a key is adopted.
    let _: () = ::redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    put(&mut conn, &k, "s@a", pending(RUN_AT), &x);
    assert_eq!(set_series(&mut conn, &k, 1, &list, &x), t1, "adopted");
    audit(&mut conn, &k, "recurring_set adopting");
    // Set again with the same rule and another spec: the head moves to y's set.
    let y = tail(Some(("y", -1)), 5);
    assert_eq!(set_series(&mut conn, &k, 1, &list, &y), t1, "kept");
    let meta: String = conn.hget(&k.meta, "s@a").unwrap();
    assert!(meta.ends_with(&y), "{meta:?}");
    let in_y: Option<f64> = conn.zscore(due_key(&k, -1, "y"), "s@a").unwrap();
    assert!(in_y.is_some());
    audit(&mut conn, &k, "recurring_set again");

    // A due head of y superseded (Latest) by a later occurrence due too: a claim of "" does
    // not read it; one of y leases the later one, of y, and makes the next, of y.
    let _: () = ::redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    put(&mut conn, &k, "s@a", pending(RUN_AT), &y);
    let record = format!("1|1|{RUN_AT}|a||{y}\x1f|rule");
    let _: () = conn.hset(&k.series, "s", record).unwrap();
    let _: () = conn.hset(&k.series_payload, "s", "payload").unwrap();
    let _: () = conn
        .hset(&k.series_next, "s", format!("{}=b,{t3}=c", RUN_AT * 2))
        .unwrap();
    let reply = claim_with(&mut conn, &k, 10, &["1", "", "10"]);
    assert!(reply.jobs.is_empty());
    let reply = claim_with(&mut conn, &k, 10, &["2", "y", "10", "x", "10"]);
    let got: Vec<(&str, &str, i8, u32)> = reply
        .jobs
        .iter()
        .map(|j| {
            (
                j.id.as_str(),
                j.spec.kind.as_str(),
                j.spec.priority,
                j.spec.max_attempts,
            )
        })
        .collect();
    assert_eq!(got, [("s@b", "y", -1, 5)]);
    let meta: String = conn.hget(&k.meta, "s@c").unwrap();
    assert_eq!(meta, format!("p:0:0:{t3}{y}"));
    let record: String = conn.hget(&k.series, "s").unwrap();
    assert!(
        record.ends_with(&format!("|c|{}|{y}\x1f|rule", RUN_AT * 2)),
        "{record:?}"
    );
    audit(&mut conn, &k, "claim of y");
}

#[test]
fn dead_jobs_are_kept_per_kind_listed_revived_and_purged_oldest_first_across_kinds() {
    let server = Server::start();
    let mut conn = server.connect().unwrap();
    let k = Keys::new("q", "PUBLISH");
    let kinds = include_str!("lua/kinds.lua");
    let list = script(&[kinds, include_str!("lua/list.lua")]);
    let revive = script(&[
        kinds,
        include_str!("lua/gates.lua"),
        include_str!("lua/revive.lua"),
    ]);
    let remove = script(&[kinds, include_str!("lua/remove_dead.lua")]);
    let dead = |at: u64| Machine {
        run_at: RUN_AT,
        attempt: 3,
        status: Status::Dead { at },
    };
    let fill = |conn: &mut Connection| {
        let _: () = ::redis::cmd("FLUSHALL").query(conn).unwrap();
        // Deaths interleaved across kinds "", x and y; x has many, y few.
        for n in 0..30u64 {
            let (kind, id) = match n % 5 {
                0 => ("", format!("p{n:02}")),
                4 => ("y", format!("y{n:02}")),
                _ => ("x", format!("x{n:02}")),
            };
            let tail = if kind.is_empty() {
                String::new()
            } else {
                tail(Some((kind, 0)), 3)
            };
            put(conn, &k, &id, dead(1_000_000 * (n + 1)), &tail);
        }
    };
    let page = |conn: &mut Connection, filter: &str, limit: usize, after: (&str, &str)| {
        let out: Vec<Value> = list
            .key(&k.meta)
            .key(&k.payload)
            .key(&k.errors)
            .key(&k.dead)
            .key(&k.levels)
            .key(&k.gate_timers)
            .arg("dead")
            .arg(limit)
            .arg(after.0)
            .arg(after.1)
            .arg("0")
            .arg(filter)
            .invoke(conn)
            .unwrap();
        out.chunks(5)
            .map(|e| {
                let id = String::from_redis_value(e[0].clone()).unwrap();
                let score = String::from_redis_value(e[1].clone()).unwrap();
                (id, score)
            })
            .collect::<Vec<_>>()
    };
    fill(&mut conn);
    audit(&mut conn, &k, "dead jobs");
    // Every kind: newest deaths first, paged.
    let all: Vec<String> = (0..30u64)
        .rev()
        .map(|n| match n % 5 {
            0 => format!("p{n:02}"),
            4 => format!("y{n:02}"),
            _ => format!("x{n:02}"),
        })
        .collect();
    let mut got = Vec::new();
    let mut after = (String::new(), String::new());
    loop {
        let p = page(&mut conn, "*", 7, (&after.1, &after.0));
        if p.is_empty() {
            break;
        }
        after = p.last().cloned().unwrap();
        got.extend(p.into_iter().map(|(id, _)| id));
    }
    assert_eq!(got, all);
    for (filter, kind) in [("=y", 'y'), ("=x", 'x'), ("=", 'p')] {
        let got: Vec<String> = page(&mut conn, filter, 100, ("", ""))
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        let want: Vec<String> = all
            .iter()
            .filter(|id| id.starts_with(kind))
            .cloned()
            .collect();
        assert_eq!(got, want, "{filter}");
    }
    // Revive by limit: the oldest deaths of every kind.
    let (n, _): (u64, Value) = revive
        .key(&k.meta)
        .key(&k.due)
        .key(&k.counts)
        .key(&k.dead)
        .key(&k.levels)
        .key(&k.gate_timers)
        .arg("limit")
        .arg(6)
        .arg("after")
        .arg(0)
        .arg("")
        .arg(&k.wake)
        .arg("PUBLISH")
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(n, 6);
    let left: Vec<String> = page(&mut conn, "*", 100, ("", ""))
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(left, all[..24]);
    audit(&mut conn, &k, "revive by limit");
    // Purge by limit: the oldest deaths of every kind, until every dead set is gone.
    let removed: u64 = remove
        .key(&k.meta)
        .key(&k.payload)
        .key(&k.dead)
        .key(&k.counts)
        .key(&k.errors)
        .key(&k.levels)
        .arg("limit")
        .arg(20)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(removed, 20);
    let left: Vec<String> = page(&mut conn, "*", 100, ("", ""))
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(left, all[..4]);
    audit(&mut conn, &k, "purge by limit");
    for id in &all[..4] {
        let removed: u64 = remove
            .key(&k.meta)
            .key(&k.payload)
            .key(&k.dead)
            .key(&k.counts)
            .key(&k.errors)
            .key(&k.levels)
            .arg("id")
            .arg(id)
            .invoke(&mut conn)
            .unwrap();
        assert_eq!(removed, 1);
        audit(&mut conn, &k, &format!("remove {id}"));
    }
}

/// The successor of `ID` (`lua/next.lua`): due at `SUCC_RUN_AT`, of the spec tail given, its
/// payload "next".
fn put_successor(conn: &mut Connection, k: &Keys, tail: &str) {
    let _: () = conn
        .hset(&k.next, ID, format!("{SUCC_RUN_AT}{tail}"))
        .unwrap();
    let _: () = conn.hset(&k.next_payload, ID, "next").unwrap();
    let _: () = conn.hincr(&k.counts, "successors", 1).unwrap();
}

const SUCC_RUN_AT: u64 = 3_000_000;

/// Whether `ID` has a successor waiting.
fn has_successor(conn: &mut Connection, k: &Keys) -> bool {
    conn.hexists(&k.next, ID).unwrap()
}

/// The job `ID` is its successor now: pending at attempt 0, its payload, due at `run_at`
/// in its own level's due set.
fn assert_handed_over(conn: &mut Connection, k: &Keys, succ_tail: &str, run_at: u64, case: &str) {
    let meta: String = conn.hget(&k.meta, ID).unwrap();
    assert_eq!(meta, format!("p:0:0:{run_at}{succ_tail}"), "{case}");
    let payload: String = conn.hget(&k.payload, ID).unwrap();
    assert_eq!(payload, "next", "{case}");
    assert!(!has_successor(conn, k), "{case}");
    let (p, kind) = level_of(&meta);
    let score: f64 = conn.zscore(due_key(k, p, &kind), ID).unwrap();
    assert_eq!(score as u64, run_at.div_ceil(1000), "{case}");
}

/// Every transition of a job with a successor, against the state machine it mirrors: the
/// same outcome and state as without one while the job goes on (claim, retry with attempts
/// left, stale tokens), the successor still waiting; an ack or a death (a retry or a
/// claim's kill at the last attempt) hands the id over to it (pending, attempt 0, its own
/// spec and payload, the dead job's last error, no dead job); a cancel removes it, with a
/// pending job or beside a running one. Every set, `levels` and counter audited after each.
#[test]
fn successors_follow_acks_and_deaths_and_wait_through_the_rest() {
    let server = Server::start();
    let mut conn = server.connect().unwrap();
    let k = Keys::new("q", "PUBLISH");
    let kinds = include_str!("lua/kinds.lua");
    let series = include_str!("lua/series.lua");
    let held = include_str!("lua/held.lua");
    let next = include_str!("lua/next.lua");
    let acks = include_str!("lua/acks.lua");
    let gates = include_str!("lua/gates.lua");
    let ack = script(&[kinds, gates, held, next, acks, include_str!("lua/ack.lua")]);
    let retry = script(&[kinds, gates, held, next, include_str!("lua/retry.lua")]);
    let cancel = script(&[
        kinds,
        gates,
        series,
        held,
        next,
        include_str!("lua/cancel.lua"),
    ]);
    let mut cases = 0;
    for spec in SPECS {
        for attempt in 0..=3 {
            for max in MAX_ATTEMPTS {
                // A dead job never has a successor.
                for job in jobs(attempt).into_iter().take(2) {
                    let tail = tail(spec, max);
                    let plain = plain_tail(spec, max);
                    let plain_max = if spec.is_some() { 100 } else { max };
                    // The successor of the job's own level, and of another kind and level.
                    for succ_tail in [tail.clone(), self::tail(Some(("s", 3)), 2)] {
                        let case = format!(
                            "{job:?} max_attempts {max} spec {spec:?} successor {succ_tail:?}"
                        );
                        let setup = |conn: &mut Connection| {
                            store(conn, &k, job, &tail);
                            put_successor(conn, &k, &succ_tail);
                        };

                        // A claim: delivered as without one (the successor waits), or a kill
                        // that hands over.
                        setup(&mut conn);
                        let mut rust = job;
                        let error = rust.claim_error();
                        let outcome = rust.claim(u64::MAX, u64::MAX, 1, max);
                        let reply = claim_as(&mut conn, &k, 10, &plain, &["1", "k", "10"]);
                        let reply_all = if spec.is_some_and(|s| s.0 == "k") {
                            reply
                        } else {
                            claim_as(&mut conn, &k, 10, &plain, &["*"])
                        };
                        match outcome {
                            Claim::Deliver => {
                                assert_eq!(reply_all.jobs.len(), 1, "claim {case}");
                                assert_eq!(reply_all.jobs[0].payload, b"p", "claim {case}");
                                let left = stored(&mut conn, &k);
                                assert_eq!(left, Some(('r', rust.attempt)), "claim {case}");
                                assert!(has_successor(&mut conn, &k), "claim {case}");
                            }
                            Claim::Died => {
                                // The successor may be claimed by the same call's later
                                // reads only if it was due among the claimed kinds: not
                                // here, since the kill comes last in its claim.
                                assert_eq!(reply_all.died, 1, "claim {case}");
                                assert!(reply_all.jobs.is_empty(), "claim {case}");
                                assert_handed_over(
                                    &mut conn,
                                    &k,
                                    &succ_tail,
                                    SUCC_RUN_AT,
                                    &format!("claim {case}"),
                                );
                            }
                            Claim::NotDue => panic!("{case}: every case is due"),
                        }
                        audit(&mut conn, &k, &format!("claim {case}"));
                        assert_eq!(last_error(&mut conn, &k).as_deref(), error, "claim {case}");
                        cases += 1;

                        for token in [TOKEN, TOKEN + 1] {
                            let case = format!("{case} token {token}");
                            setup(&mut conn);
                            let acked = ack_with(&mut conn, &k, &ack, token);
                            let valid = job.ack(token);
                            assert_eq!(acked, [u64::from(valid)], "ack {case}");
                            if valid {
                                assert_handed_over(
                                    &mut conn,
                                    &k,
                                    &succ_tail,
                                    SUCC_RUN_AT,
                                    &format!("ack {case}"),
                                );
                                assert_eq!(last_error(&mut conn, &k), None, "ack {case}");
                            } else {
                                let left = stored(&mut conn, &k);
                                assert_eq!(left, Some((letter(&job), job.attempt)), "ack {case}");
                                assert!(has_successor(&mut conn, &k), "ack {case}");
                            }
                            audit(&mut conn, &k, &format!("ack {case}"));

                            setup(&mut conn);
                            let mut rust = job;
                            let outcome = rust.retry(token, u64::MAX, RUN_AT, max);
                            let code = retry_with(&mut conn, &k, &retry, token, plain_max);
                            match outcome {
                                Retry::Stale | Retry::Pending => {
                                    assert_eq!(
                                        code,
                                        u64::from(outcome == Retry::Pending),
                                        "retry {case}"
                                    );
                                    let left = stored(&mut conn, &k);
                                    assert_eq!(
                                        left,
                                        Some((letter(&rust), rust.attempt)),
                                        "retry {case}"
                                    );
                                    assert!(has_successor(&mut conn, &k), "retry {case}");
                                }
                                Retry::Died => {
                                    assert_eq!(code, 2, "retry {case}");
                                    assert_handed_over(
                                        &mut conn,
                                        &k,
                                        &succ_tail,
                                        SUCC_RUN_AT,
                                        &format!("retry {case}"),
                                    );
                                    assert_eq!(
                                        last_error(&mut conn, &k).as_deref(),
                                        Some("boom"),
                                        "retry {case}"
                                    );
                                }
                            }
                            audit(&mut conn, &k, &format!("retry {case}"));
                            cases += 2;
                        }

                        // A cancel: a pending job goes with its successor; a running one
                        // stays, its successor goes.
                        setup(&mut conn);
                        assert_eq!(cancel_with(&mut conn, &k, &cancel), 1, "cancel {case}");
                        let left = stored(&mut conn, &k);
                        let expect = (!job.cancel()).then_some((letter(&job), job.attempt));
                        assert_eq!(left, expect, "cancel {case}");
                        assert!(!has_successor(&mut conn, &k), "cancel {case}");
                        audit(&mut conn, &k, &format!("cancel {case}"));
                        assert_eq!(
                            cancel_with(&mut conn, &k, &cancel),
                            0,
                            "cancel again {case}"
                        );
                        cases += 1;
                    }
                }
            }
        }
    }
    assert!(cases > 500, "{cases}");
}

/// `schedule.lua`'s `'w'` mode (`AllowWhileRunning`) on every state it can meet, its
/// successors and their counter audited after each: a running job gets one successor (a
/// second schedule of the id in the same batch is `Exists`), a pending or dead job and a
/// running series occurrence none; and a `Replace` of a job pending again after a retry,
/// with a successor waiting, takes the new values and drops the successor (the counter of
/// the others' kept in step).
#[test]
fn allow_while_running_schedules_follow_running_jobs_only_and_a_replace_drops_a_successor() {
    let server = Server::start();
    let mut conn = server.connect().unwrap();
    let k = Keys::new("q", "PUBLISH");
    let schedule = schedule_script();
    let at = RUN_AT.to_string();
    let old_at = (RUN_AT / 2).to_string();
    for spec in SPECS {
        for max in MAX_ATTEMPTS {
            let tail = tail(spec, max);
            let own = self::tail(Some(("s", 3)), 2);
            for job in jobs(1) {
                let job = Machine {
                    run_at: RUN_AT / 2,
                    ..job
                };
                let case = format!("{job:?} max_attempts {max} spec {spec:?}");
                store(&mut conn, &k, job, &tail);
                let answers = schedule_batch(
                    &mut conn,
                    &k,
                    &schedule,
                    &[(ID, &own, "w"), (ID, &own, "w")],
                );
                audit(&mut conn, &k, &format!("w w {case}"));
                assert_eq!(stored(&mut conn, &k), Some((letter(&job), 1)), "{case}");
                if letter(&job) == 'r' {
                    assert_eq!(
                        answers,
                        [(4, at.clone()), (0, old_at.clone())],
                        "the first a successor, the second exists: {case}"
                    );
                    let next: String = conn.hget(&k.next, ID).unwrap();
                    assert_eq!(next, format!("{RUN_AT}{own}"), "{case}");
                    let payload: String = conn.hget(&k.next_payload, ID).unwrap();
                    assert_eq!(payload, ID, "{case}");
                } else {
                    assert_eq!(
                        answers,
                        [(0, old_at.clone()), (0, old_at.clone())],
                        "{case}"
                    );
                    assert!(!has_successor(&mut conn, &k), "{case}");
                }
            }

            // A running occurrence of a series: the client sends its AllowWhileRunning as 'k'
            // (`scripts/jobs.rs`, by the id's shape, as every backend decides), so it exists.
            let case = format!("series occurrence max_attempts {max} spec {spec:?}");
            let _: () = ::redis::cmd("FLUSHALL").query(&mut conn).unwrap();
            let occurrence = "daily@2024-01-01T00:00:00Z";
            assert!(crate::core::series::occurrence_series(occurrence).is_some());
            put(&mut conn, &k, occurrence, jobs(1)[1], &tail);
            let _: () = conn.hset(&k.series, "daily", "record").unwrap();
            let answers = schedule_batch(&mut conn, &k, &schedule, &[(occurrence, &own, "k")]);
            assert_eq!(answers, [(0, RUN_AT.to_string())], "{case}");
            let next: BTreeMap<String, String> = conn.hgetall(&k.next).unwrap();
            assert!(next.is_empty(), "{case}");
            audit(&mut conn, &k, &case);

            // A replace of a job pending again after a retry (attempt 1, its last error
            // kept), with a successor waiting, beside another running job with one.
            for replace_tail in [tail.clone(), own.clone()] {
                let case =
                    format!("replace into {replace_tail:?} max_attempts {max} spec {spec:?}");
                store(&mut conn, &k, jobs(1)[0], &tail);
                let _: () = conn.hset(&k.errors, ID, "boom").unwrap();
                put_successor(&mut conn, &k, &own);
                put(&mut conn, &k, "other", jobs(1)[1], &tail);
                let _: () = conn
                    .hset(&k.next, "other", format!("{SUCC_RUN_AT}{own}"))
                    .unwrap();
                let _: () = conn.hset(&k.next_payload, "other", "next").unwrap();
                let _: () = conn.hincr(&k.counts, "successors", 1).unwrap();
                audit(&mut conn, &k, &format!("setup {case}"));
                // The replace, then an AllowWhileRunning of the now pending job: exists.
                let answers = schedule_batch(
                    &mut conn,
                    &k,
                    &schedule,
                    &[(ID, &replace_tail, "r"), (ID, &own, "w")],
                );
                assert_eq!(answers, [(2, at.clone()), (0, at.clone())], "{case}");
                audit(&mut conn, &k, &case);
                assert!(
                    !has_successor(&mut conn, &k),
                    "the successor dropped: {case}"
                );
                let meta: String = conn.hget(&k.meta, ID).unwrap();
                assert_eq!(meta, format!("p:1:0:{RUN_AT}{replace_tail}"), "{case}");
                let payload: String = conn.hget(&k.payload, ID).unwrap();
                assert_eq!(payload, ID, "{case}");
                assert_eq!(last_error(&mut conn, &k).as_deref(), Some("boom"), "{case}");
                let count: Option<i64> = conn.hget(&k.counts, "successors").unwrap();
                assert_eq!(count, Some(1), "the other's successor counted: {case}");

                // The other's gone too: the counter field goes with the last one.
                let _: () = conn.hdel(&k.next, "other").unwrap();
                let _: () = conn.hdel(&k.next_payload, "other").unwrap();
                let _: () = conn.hdel(&k.counts, "successors").unwrap();
                put_successor(&mut conn, &k, &own);
                let answers = schedule_batch(&mut conn, &k, &schedule, &[(ID, &replace_tail, "r")]);
                assert_eq!(answers, [(2, at.clone())], "again {case}");
                audit(&mut conn, &k, &format!("again {case}"));
                let count: Option<i64> = conn.hget(&k.counts, "successors").unwrap();
                assert_eq!(count, None, "no successor counted: {case}");
            }
        }
    }
}

/// A claim that fails after applying the acks it carries (a key edited by hand, of the wrong
/// type) leaves those acks as an ack script would: the scripts are not rolled back, so the
/// acks' counters and running sets are written before the error is raised.
#[test]
fn a_claim_that_fails_after_its_acks_leaves_their_counters_right() {
    let server = Server::start();
    let mut conn = server.connect().unwrap();
    let k = Keys::new("q", "PUBLISH");
    put(
        &mut conn,
        &k,
        "a0",
        pending(RUN_AT),
        &tail(Some(("a", 1)), 3),
    );
    put(
        &mut conn,
        &k,
        "b0",
        pending(RUN_AT),
        &tail(Some(("b", 1)), 3),
    );
    let first = claim_with(&mut conn, &k, 10, &["*"]);
    assert_eq!(first.jobs.len(), 2);
    audit(&mut conn, &k, "claim of a0 and b0");
    // A level whose set is no sorted set: the claim carrying the acks fails at its reads.
    let bad = format!("{}:1:k", k.due);
    let _: () = conn.set(&bad, "not a zset").unwrap();
    let _: () = conn.zadd(&k.levels, "d:1:k", 1).unwrap();
    let mut args = vec!["*".to_owned()];
    for job in &first.jobs {
        args.extend([job.id.clone(), job.token.to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let failed = claim_result(&mut conn, &k, 10, &plain_tail(None, 3), &args);
    let err = failed.expect_err("the claim fails on the edited key");
    assert_eq!(err.code(), Some("WRONGTYPE"), "{err}");
    let _: () = conn.del(&bad).unwrap();
    let _: () = conn.zrem(&k.levels, "d:1:k").unwrap();
    let metas: BTreeMap<String, String> = conn.hgetall(&k.meta).unwrap();
    assert!(
        metas.is_empty(),
        "the acks were applied before the error: {metas:?}"
    );
    audit(&mut conn, &k, "a claim that failed after its acks");
}

/// Names in `levels` of no form a script writes (hand edits) are skipped by a claim, which
/// delivers each job once.
#[test]
fn a_stray_level_name_fails_no_claim() {
    let server = Server::start();
    let mut conn = server.connect().unwrap();
    let k = Keys::new("q", "PUBLISH");
    put(
        &mut conn,
        &k,
        "a0",
        pending(RUN_AT),
        &tail(Some(("a", 1)), 3),
    );
    put(&mut conn, &k, "p0", pending(RUN_AT), "");
    let stray = [
        "d:x:k", "d:nan:k", "d:inf:k", "d:1.5:k", "d:", "dx1:a", "rx", "r:",
    ];
    for name in stray {
        let _: () = conn.zadd(&k.levels, name, 1).unwrap();
    }
    let reply = claim_with(&mut conn, &k, 10, &["*"]);
    let mut ids: Vec<&str> = reply.jobs.iter().map(|j| j.id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["a0", "p0"]);
    // The plain running set's expired lease, read once though "r:" names it too.
    let run = Machine {
        run_at: RUN_AT,
        attempt: 1,
        status: Status::Running {
            token: TOKEN,
            until: 1_000,
        },
    };
    put(&mut conn, &k, "r0", run, "");
    let reply = claim_with(&mut conn, &k, 10, &["*"]);
    assert_eq!(
        reply.jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
        ["r0"]
    );
    for name in stray {
        let _: () = conn.zrem(&k.levels, name).unwrap();
    }
    audit(&mut conn, &k, "claims past stray level names");
}

/// A running set that holds jobs but is missing from `levels` (a hand edit) is noted there
/// again by the next claim that leases a job of its kind.
#[test]
fn a_claim_notes_a_running_set_missing_from_levels() {
    let server = Server::start();
    let mut conn = server.connect().unwrap();
    let k = Keys::new("q", "PUBLISH");
    for n in 0..2u64 {
        put(
            &mut conn,
            &k,
            &format!("x{n}"),
            pending(RUN_AT + n),
            &tail(Some(("x", 0)), 3),
        );
    }
    let first = claim_with(&mut conn, &k, 1, &["*"]);
    assert_eq!(first.jobs.len(), 1);
    let _: () = conn.zrem(&k.levels, "r:x").unwrap();
    let second = claim_with(&mut conn, &k, 1, &["*"]);
    assert_eq!(second.jobs.len(), 1);
    audit(
        &mut conn,
        &k,
        "a claim into a running set missing from levels",
    );
}
