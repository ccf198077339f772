//! `kill -9`: the test binary re-runs itself as a child (the environment variable
//! `WHEEL_JOBS_KILL_CHILD` selects the role), which the test kills with SIGKILL at random
//! points, then reopens the store and checks what survived. `postgres_faults.rs` starts its
//! consumer processes with the same helpers.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, SystemTime};

use wheel_jobs::{Dedup, JobOptions, JobQueue, JobState, ListOptions, Scheduled};

use crate::support::{embedded, ms};

const ROLE: &str = "WHEEL_JOBS_KILL_CHILD";
const PATH: &str = "WHEEL_JOBS_KILL_PATH";

/// A small PRNG; the seed is printed so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn seed() -> u64 {
    let seed = std::env::var("WHEEL_JOBS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("kill test seed: WHEEL_JOBS_SEED={seed}");
    seed
}

/// A child process, SIGKILLed and reaped on drop (so a failing test leaves no orphan).
pub(crate) struct Killed(Child);

impl Killed {
    pub(crate) fn kill(&mut self) {
        self.0.kill().unwrap(); // SIGKILL
        self.0.wait().unwrap();
    }

    /// Its process id.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts this test binary running only `test` in the child role `role`; returns it once it
/// printed "ready", with the rest of its output lines.
pub(crate) fn spawn_child(test: &str, role: &str, path: &Path) -> (Killed, mpsc::Receiver<String>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(PATH, path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let child = Killed(child);
    while rx
        .recv_timeout(Duration::from_secs(60))
        .expect("child output")
        != "ready"
    {}
    (child, rx)
}

/// Kills racing children in turn and returns every line they printed: the first after
/// `gap` (mid-race), the others once a further `gap` has passed, so whatever each had in
/// flight is cut. A child that ends by itself fails the test.
#[cfg(feature = "redis")]
pub(crate) fn kill_in_turn(
    children: &mut [(Killed, mpsc::Receiver<String>)],
    gap: Duration,
) -> Vec<String> {
    let mut lines = Vec::new();
    let collect =
        |rx: &mpsc::Receiver<String>, lines: &mut Vec<String>, until: std::time::Instant| {
            while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
                match rx.recv_timeout(left) {
                    Ok(line) => lines.push(line),
                    Err(mpsc::RecvTimeoutError::Timeout) => break,
                    Err(mpsc::RecvTimeoutError::Disconnected) => panic!("a child ended by itself"),
                }
            }
        };
    let Some(((first, first_rx), rest)) = children.split_first_mut() else {
        return lines;
    };
    collect(first_rx, &mut lines, std::time::Instant::now() + gap);
    first.kill();
    lines.extend(first_rx.iter());
    let later = std::time::Instant::now() + gap;
    for (child, rx) in rest {
        collect(rx, &mut lines, later);
        child.kill();
        lines.extend(rx.iter());
    }
    lines
}

/// In a child: its role and path (or URL); `None` in the parent.
pub(crate) fn child_role() -> Option<(String, std::path::PathBuf)> {
    let role = std::env::var(ROLE).ok()?;
    Some((role, std::env::var(PATH).expect("path").into()))
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Child: schedules jobs from 16 tasks forever, printing each id once `schedule` returned.
async fn schedule_forever(path: &Path, round: &str) {
    let queue = JobQueue::open(path).await.unwrap();
    println!("\nready"); // on a line of its own: libtest printed "test … " without a newline
    let mut tasks = Vec::new();
    for t in 0..16 {
        let queue = queue.clone();
        let round = round.to_owned();
        tasks.push(tokio::spawn(async move {
            for n in 0.. {
                let id = format!("{round}-{t}-{n}");
                queue
                    .schedule(&id, Duration::ZERO, id.as_bytes())
                    .await
                    .unwrap();
                println!("scheduled {id}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[test]
fn schedules_survive_kill_9() {
    const TEST: &str = "kill::schedules_survive_kill_9";
    if let Some((role, path)) = child_role() {
        runtime().block_on(schedule_forever(&path, &role));
        return;
    }
    const ROUNDS: usize = 6;
    let mut rng = Rng(seed());
    let h = embedded::harness();
    let mut printed = Vec::new();
    let rt = runtime();
    for round in 0..ROUNDS {
        let (mut child, lines) = spawn_child(TEST, &format!("r{round}"), &h.path());
        let until = std::time::Instant::now() + ms(5 + rng.next() % 150);
        // Read while it runs so its pipe never fills, then kill it mid-flight.
        while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
            match lines.recv_timeout(left) {
                Ok(line) => printed.extend(line.strip_prefix("scheduled ").map(str::to_owned)),
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the child ended by itself"),
            }
        }
        child.kill();
        printed.extend(
            lines
                .iter()
                .filter_map(|l| l.strip_prefix("scheduled ").map(str::to_owned)),
        );

        // Every id printed so far is in the reopened store.
        rt.block_on(async {
            let queue = JobQueue::open(h.path())
                .await
                .expect("reopens after kill -9");
            for id in &printed {
                let info = queue.get(id).await.unwrap();
                assert!(
                    info.is_some(),
                    "round {round}: {id} was acknowledged, then lost"
                );
            }
            queue.close().await.unwrap();
        });
    }
    assert!(
        printed.len() > ROUNDS,
        "the children scheduled something ({})",
        printed.len()
    );
    eprintln!(
        "{} schedules acknowledged over {ROUNDS} kills",
        printed.len()
    );

    // Then every job (printed or committed just before the kill) is delivered exactly once.
    rt.block_on(async {
        let queue = JobQueue::open(h.path()).await.unwrap();
        let total = queue.pending().await.unwrap() as usize;
        assert!(total >= printed.len());
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let mut workers = Vec::new();
        for _ in 0..2 {
            let (queue, tx) = (queue.clone(), tx.clone());
            workers.push(tokio::spawn(async move {
                queue
                    .run(8, move |d| {
                        let tx = tx.clone();
                        async move {
                            assert_eq!(d.payload(), d.id().as_bytes());
                            tx.send(d.id().to_owned()).unwrap();
                            Ok::<(), String>(())
                        }
                    })
                    .await
            }));
        }
        let mut delivered = HashMap::new();
        for _ in 0..total {
            *delivered.entry(rx.recv().await.unwrap()).or_insert(0u32) += 1;
        }
        assert_eq!(delivered.len(), total, "no job delivered twice");
        for id in &printed {
            assert_eq!(delivered.get(id), Some(&1), "{id}");
        }
        while queue.pending().await.unwrap() > 0 {
            tokio::time::sleep(ms(5)).await;
        }
        queue.close().await.unwrap();
        for w in workers {
            w.await.unwrap().unwrap();
        }
    });
}

/// The ids the Replace children race on.
const RACED_IDS: usize = 20;

/// Child: 16 tasks replacing jobs on the same `RACED_IDS` ids forever (due in an hour, so
/// none runs), printing `replaced <id> <payload>` once each schedule returned.
async fn replace_forever(path: &Path, round: &str) {
    let queue = JobQueue::open(path).await.unwrap();
    println!("\nready");
    let replace = JobOptions::new().dedup(Dedup::Replace);
    let mut tasks = Vec::new();
    for t in 0..16usize {
        let (queue, round, replace) = (queue.clone(), round.to_owned(), replace.clone());
        tasks.push(tokio::spawn(async move {
            for n in 0usize.. {
                let id = format!("k{}", (t * 7 + n) % RACED_IDS);
                let payload = format!("{round}-{t}-{n}");
                let outcome = queue
                    .schedule_with(&id, Duration::from_secs(3600), payload.as_str(), &replace)
                    .await
                    .unwrap();
                assert!(
                    matches!(outcome, Scheduled::Created | Scheduled::Replaced),
                    "{outcome:?}"
                );
                println!("replaced {id} {payload}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// A payload `round-task-n` as its parts.
fn payload_parts(payload: &str) -> (usize, usize, usize) {
    let mut parts = payload.split('-').map(|p| p.parse::<usize>().unwrap());
    let mut part = || parts.next().unwrap();
    (part(), part(), part())
}

/// Processes racing `Dedup::Replace` schedules on the same ids, one after another (the
/// embedded store is one process's at a time), each SIGKILLed mid-race: after each reopen
/// every id is one pending job, its payload one a child scheduled, from the last round
/// that acknowledged a schedule of it.
#[test]
fn racing_replaces_survive_kill_9() {
    const TEST: &str = "kill::racing_replaces_survive_kill_9";
    if let Some((role, path)) = child_role() {
        let round = role.trim_start_matches('r').to_owned();
        runtime().block_on(replace_forever(&path, &round));
        return;
    }
    const ROUNDS: usize = 4;
    let mut rng = Rng(seed());
    let h = embedded::harness();
    let rt = runtime();
    // Per id, the last round that acknowledged a schedule of it; per (round, task), the
    // highest n it acknowledged.
    let mut last_round: HashMap<String, usize> = HashMap::new();
    let mut highest: HashMap<(usize, usize), usize> = HashMap::new();
    let mut acknowledged = 0usize;
    for round in 0..ROUNDS {
        let (mut child, lines) = spawn_child(TEST, &format!("r{round}"), &h.path());
        let until = std::time::Instant::now() + ms(20 + rng.next() % 150);
        let mut printed = Vec::new();
        while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
            match lines.recv_timeout(left) {
                Ok(line) => printed.push(line),
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the child ended by itself"),
            }
        }
        child.kill();
        printed.extend(lines.iter());
        for line in printed {
            let Some(rest) = line.strip_prefix("replaced ") else {
                continue;
            };
            let (id, payload) = rest.split_once(' ').unwrap();
            let (r, t, n) = payload_parts(payload);
            assert_eq!(r, round);
            last_round.insert(id.to_owned(), round);
            let top = highest.entry((r, t)).or_insert(n);
            *top = (*top).max(n);
            acknowledged += 1;
        }
        rt.block_on(async {
            let queue = JobQueue::open(h.path())
                .await
                .expect("reopens after kill -9");
            let mut live = 0u64;
            for i in 0..RACED_IDS {
                let id = format!("k{i}");
                let Some(job) = queue.get(&id).await.unwrap() else {
                    assert!(
                        !last_round.contains_key(&id),
                        "round {round}: {id} was acknowledged, then lost"
                    );
                    continue;
                };
                live += 1;
                assert_eq!(job.state(), JobState::Pending, "{id}");
                let payload = std::str::from_utf8(job.payload()).unwrap();
                let (r, t, n) = payload_parts(payload);
                // At most one schedule per task was in flight when it was killed.
                let top = highest.get(&(r, t)).copied();
                assert!(
                    top.is_some_and(|top| n <= top + 1) || n == 0,
                    "round {round}: {id} holds {payload}, which no child scheduled"
                );
                if let Some(&last) = last_round.get(&id) {
                    assert!(
                        r >= last,
                        "round {round}: {id} holds {payload}, older than round {last}'s \
                         acknowledged replace"
                    );
                }
            }
            let counts = queue.counts().await.unwrap();
            assert_eq!((counts.pending, counts.running, counts.dead), (live, 0, 0));
            let page = queue
                .list(JobState::Pending, &ListOptions::new())
                .await
                .unwrap();
            let ids: HashSet<&str> = page.jobs().iter().map(|j| j.id()).collect();
            assert_eq!(ids.len() as u64, live, "each id listed once");
            queue.close().await.unwrap();
        });
    }
    assert!(
        acknowledged > ROUNDS,
        "the children replaced something ({acknowledged})"
    );
    eprintln!("{acknowledged} replaces acknowledged over {ROUNDS} kills");
}

/// The ids the `AllowWhileRunning` children race on.
const SUCCESSOR_IDS: usize = 4;

/// Child: first, deterministically, job `d` (kind `last`, 2 attempts, payload
/// `<round>-9-0`) is delivered, retried and delivered again at its last attempt, given a
/// successor `<round>-9-1`, and held: no later claim of the child reads kind `last`, so the
/// parent's drain finds its lease ended and must hand over (no dead job). Then 8 tasks schedule `Dedup::AllowWhileRunning` jobs
/// (2 attempts) due now on `SUCCESSOR_IDS` ids forever, printing `stored <payload>` once a
/// schedule returned `Created` or `Successor` (else `exists <payload>`); and a consumer
/// acks each delivery (printing `delivered <payload>` first and `acked <payload>` once the
/// ack returned), but gives every fifth first delivery back with a retry (the successor
/// waits through it) and fails each second delivery, its last attempt, after scheduling a
/// successor for it (so each of those deaths hands over). Leases are `MIN_LEASE`, so the
/// parent redelivers what it held.
async fn allow_while_running_forever(path: &Path, round: &str) {
    let queue = JobQueue::builder()
        .lease(wheel_jobs::MIN_LEASE)
        .open(path)
        .await
        .unwrap();
    // The race's jobs are of kind `race`, which the race's consumer claims: no claim of
    // the child reads `d` again (claims read only their kinds), so `d` dies in the drain.
    let allow = JobOptions::kind("race")
        .dedup(Dedup::AllowWhileRunning)
        .max_attempts(2);
    let first = format!("{round}-9-0");
    let last = JobOptions::kind("last").max_attempts(2);
    let created = queue
        .schedule_with("d", Duration::ZERO, first.as_str(), &last)
        .await
        .unwrap();
    assert_eq!(created, Scheduled::Created);
    println!("stored {first}");
    let mut prelude = queue.consume_kind("last");
    let d = prelude.next().await.unwrap().unwrap();
    println!("delivered {first}");
    assert!(d.retry(Duration::ZERO).await.unwrap());
    let held = prelude.next().await.unwrap().unwrap();
    assert_eq!((held.payload(), held.attempt()), (first.as_bytes(), 2));
    let successor = format!("{round}-9-1");
    let outcome = queue
        .schedule_with("d", Duration::ZERO, successor.as_str(), &allow)
        .await
        .unwrap();
    assert_eq!(outcome, Scheduled::Successor);
    println!("stored {successor}");
    println!("\nready");
    let mut tasks = Vec::new();
    for t in 0..8usize {
        let (queue, round, allow) = (queue.clone(), round.to_owned(), allow.clone());
        tasks.push(tokio::spawn(async move {
            for n in 0usize.. {
                let id = format!("s{}", (t * 3 + n) % SUCCESSOR_IDS);
                let payload = format!("{round}-{t}-{n}");
                let outcome = queue
                    .schedule_with(&id, Duration::ZERO, payload.as_str(), &allow)
                    .await
                    .unwrap();
                if matches!(outcome, Scheduled::Created | Scheduled::Successor) {
                    println!("stored {payload}");
                } else {
                    println!("exists {payload}");
                }
                if n % 4 == 0 {
                    tokio::time::sleep(ms(1)).await;
                }
            }
        }));
    }
    let mut consumer = queue.consume_kind("race");
    let (mut seen, mut deaths) = (0u64, 0usize);
    while let Some(d) = consumer.next().await {
        let d = d.unwrap();
        let payload = std::str::from_utf8(d.payload()).unwrap().to_owned();
        println!("delivered {payload}");
        seen += 1;
        if d.attempt() == 2 {
            // Its last attempt: a successor waits (this one, or one stored before), so
            // the death hands over.
            // Numbered one by one, as the tasks' are: one at most is in flight at a kill.
            let next = format!("{round}-8-{deaths}");
            deaths += 1;
            let outcome = queue
                .schedule_with(d.id(), Duration::ZERO, next.as_str(), &allow)
                .await
                .unwrap();
            match outcome {
                Scheduled::Successor => println!("stored {next}"),
                Scheduled::Exists => println!("exists {next}"),
                other => panic!("{} is running: {other:?}", d.id()),
            }
            assert!(d.fail(Duration::ZERO, "boom").await.unwrap());
            println!("died {payload}");
        } else if seen.is_multiple_of(5) {
            assert!(d.retry(Duration::ZERO).await.unwrap());
        } else {
            assert!(d.ack().await.unwrap());
            println!("acked {payload}");
        }
    }
    drop(held);
    for t in tasks {
        t.await.unwrap();
    }
}

/// Processes racing `Dedup::AllowWhileRunning` schedules, acks, retries and deaths (each
/// with a successor waiting) on a few ids, one after another, each SIGKILLed mid-race (in
/// the middle of handovers). After each reopen: no job is dead, a successor waits only
/// beside a running or pending job, and a drain (redelivering the dead child's leases, then
/// the successors they hand over to) delivers each once every payload a child was told was
/// stored and never had delivered, and none whose ack was answered. The job `d` each child
/// held at its last attempt, with a successor, is killed by the drain's claim: its
/// successor runs in its place and no dead job is kept (certain by construction). A job of
/// the race the child held at its last attempt may die in the drain without a successor:
/// it must be one the child had been delivered.
#[test]
fn racing_successors_survive_kill_9() {
    const TEST: &str = "kill::racing_successors_survive_kill_9";
    if let Some((role, path)) = child_role() {
        let round = role.trim_start_matches('s').to_owned();
        runtime().block_on(allow_while_running_forever(&path, &round));
        return;
    }
    const ROUNDS: usize = 4;
    let mut rng = Rng(seed());
    let h = embedded::harness();
    let rt = runtime();
    let (mut stored_total, mut handed, mut died, mut killed_in_drain) = (0, 0, 0, 0);
    for round in 0..ROUNDS {
        let (mut child, lines) = spawn_child(TEST, &format!("s{round}"), &h.path());
        let until = std::time::Instant::now() + ms(50 + rng.next() % 200);
        let mut printed = Vec::new();
        while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
            match lines.recv_timeout(left) {
                Ok(line) => printed.push(line),
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the child ended by itself"),
            }
        }
        child.kill();
        printed.extend(lines.iter());
        let mut stored = HashSet::new();
        let mut acked = HashSet::new();
        let mut delivered = HashSet::new();
        // Per task, the highest n it had an answer for: one more may have been in flight.
        let mut highest: HashMap<usize, usize> = HashMap::new();
        for line in &printed {
            let answered = line.strip_prefix("stored ").map(|p| (p, true));
            if let Some((payload, was_stored)) =
                answered.or_else(|| line.strip_prefix("exists ").map(|p| (p, false)))
            {
                let (r, t, n) = payload_parts(payload);
                assert_eq!(r, round);
                let top = highest.entry(t).or_insert(n);
                *top = (*top).max(n);
                if was_stored {
                    stored.insert(payload.to_owned());
                }
            } else if let Some(payload) = line.strip_prefix("delivered ") {
                delivered.insert(payload.to_owned());
            } else if line.starts_with("died ") {
                died += 1;
            } else if let Some(payload) = line.strip_prefix("acked ") {
                assert!(acked.insert(payload.to_owned()), "{payload} acked twice");
            }
        }
        stored_total += stored.len();
        handed += acked.len();
        rt.block_on(async {
            let queue = JobQueue::builder()
                .lease(wheel_jobs::MIN_LEASE)
                .open(h.path())
                .await
                .expect("reopens after kill -9");
            let mut live = 0;
            for id in (0..SUCCESSOR_IDS)
                .map(|i| format!("s{i}"))
                .chain(["d".into()])
            {
                let Some(job) = queue.get(&id).await.unwrap() else {
                    continue;
                };
                if job.state() == JobState::Dead {
                    // Only a stall of the child longer than a lease kills a job there: then
                    // at its last attempt, without a successor (a death with one hands over).
                    let payload = std::str::from_utf8(job.payload()).unwrap();
                    assert_eq!(
                        (
                            id.as_str() != "d",
                            job.attempt(),
                            job.last_error(),
                            job.successor()
                        ),
                        (true, 2, Some("lease expired"), None),
                        "round {round}: a death kept a job: {job:?}"
                    );
                    assert!(delivered.contains(payload), "round {round}: {payload}");
                    assert!(queue.remove_dead(&id).await.unwrap());
                    continue;
                }
                live += 1;
            }
            let counts = queue.counts().await.unwrap();
            assert_eq!(counts.dead, 0, "round {round}: a death kept a job");
            assert_eq!(counts.pending + counts.running, live, "round {round}");
            let d = queue
                .get("d")
                .await
                .unwrap()
                .expect("d, held by the dead child");
            assert_eq!(
                (d.state(), d.attempt(), d.successor().is_some()),
                (JobState::Running, 2, true),
                "round {round}"
            );
            // Drain: the dead child's leases end within `MIN_LEASE` (a claim kills those at
            // their last attempt), and each ack or kill hands over to the successor waiting.
            let mut drained: HashMap<String, u32> = HashMap::new();
            let mut consumer = queue.consume();
            loop {
                let counts = queue.counts().await.unwrap();
                if counts.pending + counts.running == 0 {
                    break;
                }
                let d = tokio::time::timeout(Duration::from_secs(30), consumer.next())
                    .await
                    .expect("the drain goes on")
                    .unwrap()
                    .unwrap();
                let payload = std::str::from_utf8(d.payload()).unwrap().to_owned();
                assert!(d.ack().await.unwrap());
                *drained.entry(payload).or_default() += 1;
            }
            for (payload, times) in &drained {
                assert_eq!(*times, 1, "round {round}: {payload} drained {times} times");
                assert!(
                    !acked.contains(payload),
                    "round {round}: {payload} was acked, then delivered again"
                );
                let (r, t, n) = payload_parts(payload);
                assert!(
                    r == round && highest.get(&t).is_none_or(|&top| n <= top + 1),
                    "round {round}: {payload} was never scheduled"
                );
            }
            // Delivered without an answered ack: the ack may have been durable.
            for payload in &stored {
                assert!(
                    acked.contains(payload)
                        || drained.contains_key(payload)
                        || delivered.contains(payload),
                    "round {round}: {payload} was stored, then lost"
                );
            }
            // `d` died at its last attempt, in the drain's claim: its successor ran in its
            // place, and no dead job was kept.
            let (first, successor) = (format!("{round}-9-0"), format!("{round}-9-1"));
            assert!(
                !drained.contains_key(&first),
                "round {round}: d ran after its death"
            );
            assert!(
                drained.contains_key(&successor),
                "round {round}: d's successor did not run"
            );
            assert!(queue.get("d").await.unwrap().is_none(), "round {round}");
            for i in 0..SUCCESSOR_IDS {
                let id = format!("s{i}");
                let Some(job) = queue.get(&id).await.unwrap() else {
                    continue;
                };
                // Held by the child at its last attempt, without a successor: killed by
                // the drain's claim.
                let payload = std::str::from_utf8(job.payload()).unwrap();
                assert_eq!(
                    (
                        job.state(),
                        job.attempt(),
                        job.last_error(),
                        job.successor()
                    ),
                    (JobState::Dead, 2, Some("lease expired"), None),
                    "round {round}: {id}"
                );
                assert!(delivered.contains(payload), "round {round}: {payload}");
                assert!(queue.remove_dead(&id).await.unwrap());
                killed_in_drain += 1;
            }
            queue.close().await.unwrap();
        });
    }
    eprintln!(
        "{stored_total} stored, {handed} acked, {died} died with a successor over {ROUNDS} \
         kills (and {ROUNDS} killed by a drain's claim with one), {killed_in_drain} killed \
         by a drain's claim without one"
    );
}

/// Child: consumes with a short lease, acks the first `ACKED` jobs (printing each once the
/// ack returned), then hangs in the middle of the next handler.
async fn consume_then_hang(queue: JobQueue) {
    println!("\nready");
    let mut consumer = queue.consume();
    let mut acked = 0;
    while let Some(d) = consumer.next().await {
        let d = d.unwrap();
        println!("start {} {}", d.id(), d.attempt());
        if acked < ACKED {
            assert!(d.ack().await.unwrap());
            acked += 1;
            println!("acked {}", d.id());
        } else {
            std::future::pending::<()>().await;
        }
    }
}

const ACKED: usize = 5;
const JOBS: usize = 20;

/// Parent: waits until the child acked `ACKED` jobs and started the next handler, kills it
/// there, and returns the acked ids and the id it was handling.
fn kill_mid_handler(mut child: Killed, lines: mpsc::Receiver<String>) -> (HashSet<String>, String) {
    let mut acked = HashSet::new();
    let hung = loop {
        let line = lines
            .recv_timeout(Duration::from_secs(60))
            .expect("child output");
        if let Some(id) = line.strip_prefix("acked ") {
            acked.insert(id.to_owned());
        } else if let Some(rest) = line.strip_prefix("start ") {
            if acked.len() == ACKED {
                break rest.split(' ').next().unwrap().to_owned();
            }
        }
    };
    child.kill(); // in the middle of the handler
    (acked, hung)
}

/// Parent, after the kill: every job the child did not ack comes back exactly once, the one
/// it was handling with attempt 2; the acked ones never.
async fn check_redelivery(queue: &JobQueue, acked: &HashSet<String>, hung: &str) {
    let info = queue
        .get(hung)
        .await
        .unwrap()
        .expect("an unacked job stays");
    assert_eq!(info.attempt(), 1, "leased by the dead child");
    for id in acked {
        assert_eq!(queue.get(id).await.unwrap(), None, "{id} was acked");
    }
    let mut consumer = queue.consume();
    let mut delivered = HashMap::new();
    for _ in 0..JOBS - ACKED {
        let d = crate::support::next(&mut consumer).await;
        assert!(
            !acked.contains(d.id()),
            "{} was acked, then delivered again",
            d.id()
        );
        delivered.insert(d.id().to_owned(), d.attempt());
        assert!(d.ack().await.unwrap());
    }
    assert_eq!(
        delivered.len(),
        JOBS - ACKED,
        "each remaining job exactly once"
    );
    assert_eq!(
        delivered.get(hung),
        Some(&2),
        "redelivered after the dead consumer's lease"
    );
    assert_eq!(queue.pending().await.unwrap(), 0);
}

async fn schedule_jobs(queue: &JobQueue) {
    for i in 0..JOBS {
        queue
            .schedule(&format!("job-{i:02}"), Duration::ZERO, "p")
            .await
            .unwrap();
    }
}

#[test]
fn a_consumer_killed_mid_handler_has_its_jobs_redelivered() {
    const TEST: &str = "kill::a_consumer_killed_mid_handler_has_its_jobs_redelivered";
    if let Some((_, path)) = child_role() {
        runtime().block_on(async {
            // One job per claim: the claim of the job the child hangs in is the last write
            // before the kill, so the check below sees only what the claim itself made
            // durable (no later ack's commit carries it to disk).
            let queue = JobQueue::builder()
                .lease(ms(300))
                .prefetch(1)
                .open(&path)
                .await
                .unwrap();
            consume_then_hang(queue).await
        });
        return;
    }
    let h = embedded::harness();
    let rt = runtime();
    rt.block_on(async {
        let queue = JobQueue::open(h.path()).await.unwrap();
        schedule_jobs(&queue).await;
        queue.close().await.unwrap();
    });
    let (child, lines) = spawn_child(TEST, "consume", &h.path());
    let (acked, hung) = kill_mid_handler(child, lines);
    rt.block_on(async {
        let queue = JobQueue::open(h.path()).await.unwrap();
        check_redelivery(&queue, &acked, &hung).await;
        queue.close().await.unwrap();
    });
}

/// The same on Redis, with the parent's queue open on the server the whole time: consumers
/// in separate processes share the queue.
#[cfg(feature = "redis")]
#[test]
fn a_redis_consumer_process_killed_mid_handler_has_its_jobs_redelivered() {
    const TEST: &str = "kill::a_redis_consumer_process_killed_mid_handler_has_its_jobs_redelivered";
    if let Some((_, url)) = child_role() {
        runtime().block_on(async {
            let url = url.to_str().unwrap();
            let queue = JobQueue::builder()
                .lease(ms(300))
                .prefetch(4)
                .redis(url, "orders")
                .await
                .unwrap();
            consume_then_hang(queue).await
        });
        return;
    }
    let server = crate::support::redis::RedisServer::start();
    let rt = runtime();
    let queue = rt.block_on(async {
        let queue = JobQueue::builder()
            .redis(&server.url(), "orders")
            .await
            .unwrap();
        schedule_jobs(&queue).await;
        queue
    });
    let (child, lines) = spawn_child(TEST, "consume", std::path::Path::new(&server.url()));
    let (acked, hung) = kill_mid_handler(child, lines);
    rt.block_on(async {
        check_redelivery(&queue, &acked, &hung).await;
        queue.close().await.unwrap();
    });
}

/// The same on PostgreSQL, on a queue of its own on the binary's shared server (the child's
/// role is the queue's name), the parent's queue open the whole time.
#[cfg(feature = "postgres")]
#[test]
fn a_postgres_consumer_process_killed_mid_handler_has_its_jobs_redelivered() {
    const TEST: &str =
        "kill::a_postgres_consumer_process_killed_mid_handler_has_its_jobs_redelivered";
    if let Some((queue, url)) = child_role() {
        runtime().block_on(async {
            let queue = JobQueue::builder()
                .lease(ms(300))
                .prefetch(4)
                .postgres(url.to_str().unwrap(), &queue)
                .await
                .unwrap();
            consume_then_hang(queue).await
        });
        return;
    }
    let h = crate::support::postgres::harness();
    let rt = runtime();
    let queue = rt.block_on(async {
        let queue = JobQueue::builder()
            .postgres(h.url(), h.queue())
            .await
            .unwrap();
        schedule_jobs(&queue).await;
        queue
    });
    let (child, lines) = spawn_child(TEST, h.queue(), Path::new(h.url()));
    let (acked, hung) = kill_mid_handler(child, lines);
    rt.block_on(async {
        check_redelivery(&queue, &acked, &hung).await;
        queue.close().await.unwrap();
    });
}

/// Child: takes one delivery, prints its attempt, then hangs in the handler (the parent
/// SIGKILLs it: "the handler crashed the process").
async fn deliver_then_hang(path: &Path) {
    let queue = JobQueue::builder()
        .lease(wheel_jobs::MIN_LEASE)
        .max_attempts(2)
        .open(path)
        .await
        .unwrap();
    println!("\nready");
    let mut consumer = queue.consume();
    let d = consumer.next().await.unwrap().unwrap();
    println!("start {} {}", d.id(), d.attempt());
    std::future::pending::<()>().await;
}

/// A job whose handler kills its process: every crashed delivery counts, so it is delivered
/// with attempt 1, then 2, then goes dead (max_attempts 2); `cancel` never removes a job
/// whose handler ran.
#[test]
fn a_job_that_kills_its_process_goes_dead_after_max_attempts() {
    const TEST: &str = "kill::a_job_that_kills_its_process_goes_dead_after_max_attempts";
    if let Some((_, path)) = child_role() {
        runtime().block_on(deliver_then_hang(&path));
        return;
    }
    let h = embedded::harness();
    let rt = runtime();
    rt.block_on(async {
        let queue = JobQueue::open(h.path()).await.unwrap();
        // Its own two attempts and shortest lease, stored with it (what the children's
        // builder sets applies to the jobs they schedule, not to this one).
        let options = wheel_jobs::JobOptions::new()
            .max_attempts(2)
            .lease(wheel_jobs::MIN_LEASE);
        let scheduled = queue.schedule_with("poison", Duration::ZERO, "p", &options);
        scheduled.await.unwrap();
        queue.close().await.unwrap();
    });
    for expected in 1..=2u32 {
        let (mut child, lines) = spawn_child(TEST, "crash", &h.path());
        let attempt = loop {
            let line = lines
                .recv_timeout(Duration::from_secs(60))
                .expect("child output");
            if let Some(rest) = line.strip_prefix("start poison ") {
                break rest.parse::<u32>().unwrap();
            }
        };
        assert_eq!(attempt, expected, "each crashed delivery spends an attempt");
        // Let the lease lapse, so the next delivery is a redelivery after it.
        std::thread::sleep(wheel_jobs::MIN_LEASE + ms(200));
        child.kill();
        rt.block_on(async {
            let queue = JobQueue::open(h.path()).await.unwrap();
            let info = queue.get("poison").await.unwrap().expect("still stored");
            assert_eq!(
                info.state(),
                wheel_jobs::JobState::Running,
                "leased by the dead child"
            );
            assert_eq!(info.attempt(), expected, "the crashed delivery is on disk");
            assert!(
                !queue.cancel("poison").await.unwrap(),
                "its handler already ran"
            );
            queue.close().await.unwrap();
        });
    }
    // Its last lease has lapsed: the next claim finds it out of its own attempts.
    rt.block_on(async {
        let queue = JobQueue::open(h.path()).await.unwrap();
        let mut consumer = queue.consume();
        let delivered = tokio::time::timeout(ms(500), consumer.next()).await;
        assert!(delivered.is_err(), "nothing more to deliver: {delivered:?}");
        let info = queue.get("poison").await.unwrap().expect("kept as dead");
        assert_eq!(info.state(), wheel_jobs::JobState::Dead);
        assert_eq!(info.attempt(), 2);
        queue.close().await.unwrap();
    });
}

/// The keys of the gated jobs of the key-limit test, each with `PER_KEY` jobs.
const GATE_KEYS: [&str; 3] = ["a", "b", "c"];
const PER_KEY: usize = 6;
/// At most this many jobs of one key run at once.
const KEY_LIMIT: usize = 2;

/// A gated job of key `key`: kind "sync", at most `KEY_LIMIT` running, the shortest lease
/// (the limits and the lease are stored with the job, not taken from the opener's builder).
fn gated(key: &str) -> JobOptions {
    JobOptions::kind("sync")
        .key(key)
        .key_limit(KEY_LIMIT as u32)
        .lease(wheel_jobs::MIN_LEASE)
}

/// The running jobs of kind "sync" per key, as the store lists them.
async fn running_by_key(queue: &JobQueue) -> HashMap<String, usize> {
    let mut options = ListOptions::new();
    options.kind("sync");
    let page = queue.list(JobState::Running, &options).await.unwrap();
    let mut by_key = HashMap::new();
    for job in page.jobs() {
        *by_key.entry(job.key().unwrap().to_owned()).or_default() += 1;
    }
    by_key
}

/// Child: a worker of 16 slots whose handlers print their job and hang: it holds every
/// slot its keys' limits give it (its worker renews their leases while it lives).
async fn hold_key_slots(path: &Path) {
    let queue = JobQueue::open(path).await.unwrap();
    println!("\nready");
    let handler = |d: wheel_jobs::Delivery| async move {
        let key = d.key().unwrap_or_default().to_owned();
        println!("start {} {key} {}", d.id(), d.attempt());
        std::future::pending::<Result<(), String>>().await
    };
    queue.run(16, handler).await.unwrap();
}

/// Files the job a "start" line of `hold_key_slots` names under its key.
fn note_start(line: &str, held: &mut HashMap<String, Vec<String>>) {
    let Some(rest) = line.strip_prefix("start ") else {
        return;
    };
    let parts: Vec<&str> = rest.split(' ').collect();
    assert_eq!(parts[2], "1", "a first delivery: {line}");
    held.entry(parts[1].to_owned())
        .or_default()
        .push(parts[0].to_owned());
}

/// A process holding the slots of keys with a limit is SIGKILLed: after a reopen the
/// limits still hold (its jobs still count as running, as the store lists them, sampled
/// throughout), each key's slots come back with the dead process's leases (its jobs are
/// redelivered, with their second attempt, before any other job of their key starts),
/// and every job runs to its ack once.
#[test]
fn key_limits_hold_across_a_kill_9_and_the_slots_come_back_with_the_leases() {
    const TEST: &str =
        "kill::key_limits_hold_across_a_kill_9_and_the_slots_come_back_with_the_leases";
    if let Some((_, path)) = child_role() {
        runtime().block_on(hold_key_slots(&path));
        return;
    }
    let h = embedded::harness();
    let rt = runtime();
    rt.block_on(async {
        let queue = JobQueue::open(h.path()).await.unwrap();
        let now = SystemTime::now();
        for key in GATE_KEYS {
            for i in 0..PER_KEY {
                let id = format!("{key}{i}");
                let run_at = now - ms(1000 - i as u64);
                queue
                    .schedule_with(&id, run_at, "p", &gated(key))
                    .await
                    .unwrap();
            }
        }
        queue.close().await.unwrap();
    });
    let (mut child, lines) = spawn_child(TEST, "hold", &h.path());
    let mut held: HashMap<String, Vec<String>> = HashMap::new();
    let starts = |held: &HashMap<String, Vec<String>>| held.values().map(Vec::len).sum::<usize>();
    while starts(&held) < GATE_KEYS.len() * KEY_LIMIT {
        let line = lines
            .recv_timeout(Duration::from_secs(60))
            .expect("child output");
        note_start(&line, &mut held);
    }
    // A start beyond the limits, had the store admitted one, would come within this.
    let until = std::time::Instant::now() + ms(500);
    while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) => note_start(&line, &mut held),
            Err(mpsc::RecvTimeoutError::Timeout) => break,
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the child ended by itself"),
        }
    }
    child.kill(); // holding every slot
    let mut hung = HashSet::new();
    for key in GATE_KEYS {
        let mut ids = held.remove(key).unwrap_or_default();
        ids.sort_unstable();
        let first: Vec<String> = (0..KEY_LIMIT).map(|i| format!("{key}{i}")).collect();
        assert_eq!(
            ids, first,
            "key {key}: its first {KEY_LIMIT} jobs, and no more"
        );
        hung.extend(ids);
    }
    assert!(held.is_empty(), "jobs of no key: {held:?}");
    rt.block_on(async {
        let queue = JobQueue::open(h.path()).await.unwrap();
        let counts = queue.counts().await.unwrap();
        let total = GATE_KEYS.len() * PER_KEY;
        assert_eq!(
            (counts.running, counts.pending),
            (hung.len() as u64, (total - hung.len()) as u64),
            "the dead process's jobs still run; the rest wait, pending"
        );
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = {
            let (queue, stop) = (queue.clone(), stop.clone());
            tokio::spawn(async move {
                let mut most: HashMap<String, usize> = HashMap::new();
                let mut samples = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for (key, n) in running_by_key(&queue).await {
                        let seen = most.entry(key).or_default();
                        *seen = (*seen).max(n);
                    }
                    samples += 1;
                    tokio::time::sleep(ms(2)).await;
                }
                (most, samples)
            })
        };
        let done = Arc::new(Mutex::new(Vec::new()));
        let handler = {
            let done = done.clone();
            move |d: wheel_jobs::Delivery| {
                let done = done.clone();
                async move {
                    let key = d.key().unwrap().to_owned();
                    done.lock()
                        .unwrap()
                        .push((d.id().to_owned(), key, d.attempt()));
                    tokio::time::sleep(ms(5)).await;
                    Ok::<(), String>(())
                }
            }
        };
        let running = tokio::spawn(queue.run(8, handler));
        let waited = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let counts = queue.counts().await.unwrap();
                if counts.pending + counts.running == 0 {
                    break;
                }
                tokio::time::sleep(ms(10)).await;
            }
        });
        waited.await.expect("every job ends");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (most, samples) = sampler.await.unwrap();
        queue.close().await.unwrap();
        running.await.unwrap().unwrap();
        assert!(samples > 0);
        for key in GATE_KEYS {
            assert_eq!(
                most.get(key).copied(),
                Some(KEY_LIMIT),
                "key {key}: at most {KEY_LIMIT} running, the dead process's held at first"
            );
        }
        let done = done.lock().unwrap().clone();
        let mut once = HashSet::new();
        for (id, _, attempt) in &done {
            assert!(once.insert(id.clone()), "{id} ran twice: {done:?}");
            let expected = if hung.contains(id) { 2 } else { 1 };
            assert_eq!(*attempt, expected, "{id}");
        }
        assert_eq!(once.len(), total, "every job once");
        for key in GATE_KEYS {
            let first: HashSet<&str> = done
                .iter()
                .filter(|(_, k, _)| k == key)
                .take(KEY_LIMIT)
                .map(|(id, _, _)| id.as_str())
                .collect();
            let expect: HashSet<&str> = hung
                .iter()
                .filter(|id| id.starts_with(key))
                .map(String::as_str)
                .collect();
            assert_eq!(
                first, expect,
                "key {key}: its slots came back with the dead process's leases"
            );
        }
    });
}

const EVERY: Duration = Duration::from_millis(200);

/// Child: takes one occurrence of the series "tick", prints it, then hangs in its handler.
async fn take_occurrence_then_hang(queue: JobQueue) {
    println!("\nready");
    let mut consumer = queue.consume();
    let d = consumer.next().await.unwrap().unwrap();
    println!("start {} {}", d.id(), d.attempt());
    std::future::pending::<()>().await;
}

/// Parent: the id of the occurrence the child hangs in, once it has, after killing it.
fn kill_in_occurrence(mut child: Killed, lines: mpsc::Receiver<String>) -> String {
    let hung = loop {
        let line = lines
            .recv_timeout(Duration::from_secs(60))
            .expect("child output");
        if let Some(rest) = line.strip_prefix("start ") {
            assert!(rest.ends_with(" 1"), "{rest}");
            break rest.split(' ').next().unwrap().to_owned();
        }
    };
    child.kill();
    hung
}

/// Parent, after the kill: the killed occurrence is still leased and its successor exists
/// once (the claim made it in the same step); then the killed one comes back with
/// attempt 2 and every other occurrence once.
async fn check_series_after_kill(queue: &JobQueue, hung: &str) {
    let info = queue
        .get(hung)
        .await
        .unwrap()
        .expect("the killed occurrence");
    assert_eq!((info.state(), info.attempt()), (JobState::Running, 1));
    assert_eq!(
        queue.pending().await.unwrap(),
        1,
        "exactly one next occurrence"
    );
    let series = &queue.list_recurring().await.unwrap()[0];
    assert_eq!(series.last_run(), Some(info.run_at()));
    let next_run = series.next_run().unwrap();
    assert_eq!(next_run, info.run_at() + EVERY);
    let mut consumer = queue.consume();
    let mut seen = HashSet::new();
    let mut redelivered = false;
    while !redelivered || seen.len() < 3 {
        let d = crate::support::next(&mut consumer).await;
        if d.id() == hung {
            assert_eq!(
                d.attempt(),
                2,
                "redelivered after the dead consumer's lease"
            );
            redelivered = true;
        } else {
            assert_eq!(d.attempt(), 1, "{}", d.id());
            assert!(
                d.run_at() >= next_run,
                "{} before the killed one's successor",
                d.id()
            );
            assert!(seen.insert(d.id().to_owned()), "{} delivered twice", d.id());
        }
        assert!(d.ack().await.unwrap());
    }
    assert_eq!(queue.pending().await.unwrap(), 1);
}

#[test]
fn a_recurring_occurrence_killed_mid_handler_comes_back_and_its_successor_exists_once() {
    const TEST: &str =
        "kill::a_recurring_occurrence_killed_mid_handler_comes_back_and_its_successor_exists_once";
    if let Some((_, path)) = child_role() {
        runtime().block_on(async {
            let queue = JobQueue::builder()
                .lease(wheel_jobs::MIN_LEASE)
                .prefetch(1)
                .open(&path)
                .await
                .unwrap();
            take_occurrence_then_hang(queue).await
        });
        return;
    }
    let h = embedded::harness();
    let rt = runtime();
    rt.block_on(async {
        let queue = JobQueue::open(h.path()).await.unwrap();
        let every = wheel_jobs::Recurrence::every(EVERY).unwrap();
        queue.schedule_recurring("tick", every, "t").await.unwrap();
        queue.close().await.unwrap();
    });
    let (child, lines) = spawn_child(TEST, "consume", &h.path());
    let hung = kill_in_occurrence(child, lines);
    rt.block_on(async {
        let queue = JobQueue::open(h.path()).await.unwrap();
        check_series_after_kill(&queue, &hung).await;
        queue.close().await.unwrap();
    });
}

/// The same on Redis, the parent's queue open on the server the whole time.
#[cfg(feature = "redis")]
#[test]
fn a_recurring_occurrence_killed_mid_handler_on_redis_comes_back_and_its_successor_exists_once() {
    const TEST: &str = "kill::a_recurring_occurrence_killed_mid_handler_on_redis_comes_back_and_its_successor_exists_once";
    if let Some((_, url)) = child_role() {
        runtime().block_on(async {
            let queue = JobQueue::builder()
                .lease(wheel_jobs::MIN_LEASE)
                .prefetch(1)
                .redis(url.to_str().unwrap(), "series")
                .await
                .unwrap();
            take_occurrence_then_hang(queue).await
        });
        return;
    }
    let server = crate::support::redis::RedisServer::start();
    let rt = runtime();
    let queue = rt.block_on(async {
        let queue = JobQueue::builder()
            .lease(wheel_jobs::MIN_LEASE)
            .redis(&server.url(), "series")
            .await
            .unwrap();
        let every = wheel_jobs::Recurrence::every(EVERY).unwrap();
        queue.schedule_recurring("tick", every, "t").await.unwrap();
        queue
    });
    let (child, lines) = spawn_child(TEST, "consume", std::path::Path::new(&server.url()));
    let hung = kill_in_occurrence(child, lines);
    rt.block_on(async {
        check_series_after_kill(&queue, &hung).await;
        queue.close().await.unwrap();
    });
}

/// The same on PostgreSQL, on a queue of its own on the binary's shared server.
#[cfg(feature = "postgres")]
#[test]
fn a_recurring_occurrence_killed_mid_handler_on_postgres_comes_back_and_its_successor_exists_once()
{
    const TEST: &str = "kill::a_recurring_occurrence_killed_mid_handler_on_postgres_comes_back_and_its_successor_exists_once";
    if let Some((queue, url)) = child_role() {
        runtime().block_on(async {
            let queue = JobQueue::builder()
                .lease(wheel_jobs::MIN_LEASE)
                .prefetch(1)
                .postgres(url.to_str().unwrap(), &queue)
                .await
                .unwrap();
            take_occurrence_then_hang(queue).await
        });
        return;
    }
    let h = crate::support::postgres::harness();
    let rt = runtime();
    let queue = rt.block_on(async {
        let queue = JobQueue::builder()
            .lease(wheel_jobs::MIN_LEASE)
            .postgres(h.url(), h.queue())
            .await
            .unwrap();
        let every = wheel_jobs::Recurrence::every(EVERY).unwrap();
        queue.schedule_recurring("tick", every, "t").await.unwrap();
        queue
    });
    let (child, lines) = spawn_child(TEST, h.queue(), Path::new(h.url()));
    let hung = kill_in_occurrence(child, lines);
    rt.block_on(async {
        check_series_after_kill(&queue, &hung).await;
        queue.close().await.unwrap();
    });
}
