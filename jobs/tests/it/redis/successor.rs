//! Successors (`lua/next.lua`) across processes: schedulers racing `AllowWhileRunning` and
//! consumers acking on a few ids, one process SIGKILLed mid-race, then the others. The
//! behaviour itself is the shared suite's (`suite/successor.rs`).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use wheel_jobs::{Dedup, JobOptions, JobQueue, Scheduled};

use crate::kill::{child_role, kill_in_turn, runtime, spawn_child};
use crate::support::redis::RedisServer;
use crate::support::{ms, next};

/// The ids the processes race on.
const RACED: usize = 4;

/// Every process's lease: a lease a kill cut ends soon after.
const LEASE: Duration = Duration::from_secs(2);

/// Child: 4 tasks scheduling `AllowWhileRunning` on the raced ids, and a consumer acking
/// what comes, forever. Prints `w <id> <payload> <outcome>` once a schedule returned
/// (outcome c, s, e or h: created, successor, exists, held off), `got <id> <payload>` at a
/// delivery, before its ack is sent, and `acked <id> <payload>` once its ack returned true.
async fn race_forever(url: &str, child: &str) {
    let q = JobQueue::builder()
        .lease(LEASE)
        .redis(url, "race")
        .await
        .unwrap();
    println!("\nready");
    let consumer = {
        let q = q.clone();
        tokio::spawn(async move {
            let mut consumer = q.consume();
            loop {
                let d = next(&mut consumer).await;
                let payload = String::from_utf8(d.payload().to_vec()).unwrap();
                println!("got {} {payload}", d.id());
                // A little work, so that schedules meet running jobs.
                tokio::time::sleep(ms(2)).await;
                if d.ack().await.unwrap() {
                    println!("acked {} {payload}", d.id());
                }
            }
        })
    };
    let mut tasks = vec![consumer];
    for t in 0..4usize {
        let (q, child) = (q.clone(), child.to_owned());
        tasks.push(tokio::spawn(async move {
            let options = JobOptions::new().dedup(Dedup::AllowWhileRunning);
            for n in 0usize.. {
                let id = format!("s{}", (t + n) % RACED);
                let payload = format!("{child}.{t}.{n}");
                let outcome = q
                    .schedule_with(&id, Duration::ZERO, payload.as_str(), &options)
                    .await
                    .unwrap();
                let outcome = match outcome {
                    Scheduled::Created => "c",
                    Scheduled::Successor => "s",
                    Scheduled::Exists => "e",
                    other => panic!("an outcome this test does not know: {other:?}"),
                };
                println!("w {id} {payload} {outcome}");
                tokio::time::sleep(ms(1)).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// Three processes race `AllowWhileRunning` schedules and acks on 4 ids; one is SIGKILLed
/// mid-race, then the others. Afterwards a fresh consumer drains what is left (the cut
/// leases end). Every payload is acked at most once (by a child or by the drain); every one
/// answered `Created` or `Successor` is acked, or was delivered to a child that was then
/// killed (its ack may have committed unprinted): none is lost while stored as a job or a
/// successor; one answered `Exists` is never delivered. The keyspace ends empty: no
/// successor outlives its job, no job died, the `successors` flag is gone.
#[test]
fn racing_successor_processes_survive_kill_9() {
    const TEST: &str = "redis::successor::racing_successor_processes_survive_kill_9";
    if let Some((role, url)) = child_role() {
        runtime().block_on(race_forever(url.to_str().unwrap(), &role));
        return;
    }
    let server = RedisServer::start();
    let url = server.url();
    let mut children: Vec<_> = (0..3)
        .map(|c| spawn_child(TEST, &c.to_string(), Path::new(&url)))
        .collect();
    let lines = kill_in_turn(&mut children, ms(400));
    // payload -> (id, outcome) of each answered schedule; deliveries by payload.
    let mut answered: HashMap<String, (String, String)> = HashMap::new();
    let mut delivered: HashSet<String> = HashSet::new();
    let mut acked: HashMap<String, u32> = HashMap::new();
    for line in &lines {
        match line.split(' ').collect::<Vec<_>>().as_slice() {
            ["w", id, payload, outcome] => {
                answered.insert(payload.to_string(), (id.to_string(), outcome.to_string()));
            }
            ["got", _, payload] => {
                delivered.insert(payload.to_string());
            }
            ["acked", _, payload] => *acked.entry(payload.to_string()).or_default() += 1,
            _ => {}
        }
    }
    let outcomes: HashSet<&str> = answered.values().map(|(_, o)| o.as_str()).collect();
    assert!(
        outcomes.contains("s") && outcomes.contains("c"),
        "the race met running jobs: {outcomes:?}"
    );
    eprintln!(
        "{} schedules answered, {} acks",
        answered.len(),
        acked.values().sum::<u32>()
    );
    // Drain: the leases the kills cut end (the queue's lease), then every job and every
    // successor it is followed by is delivered once more, here.
    runtime().block_on(async {
        let q = JobQueue::builder()
            .lease(LEASE)
            .redis(&url, "race")
            .await
            .unwrap();
        let mut consumer = q.consume();
        loop {
            let counts = q.counts().await.unwrap();
            if counts.pending + counts.running == 0 {
                break;
            }
            // Bounded only to turn a hang into a failure: a cut lease ends within the
            // queue's lease, and its job then comes here.
            let d = tokio::time::timeout(Duration::from_secs(120), next(&mut consumer))
                .await
                .expect("what is left is delivered");
            let payload = String::from_utf8(d.payload().to_vec()).unwrap();
            assert!(d.ack().await.unwrap());
            delivered.insert(payload.clone());
            *acked.entry(payload).or_default() += 1;
        }
        for i in 0..RACED {
            assert!(q.get(&format!("s{i}")).await.unwrap().is_none());
        }
        assert_eq!(q.counts().await.unwrap().dead, 0, "no job died");
        q.close().await.unwrap();
    });
    for (payload, n) in &acked {
        assert_eq!(*n, 1, "{payload} acked {n}×");
    }
    let mut cut = 0;
    for (payload, (id, outcome)) in &answered {
        let n = acked.get(payload).copied().unwrap_or(0);
        match outcome.as_str() {
            "c" | "s" if n == 0 => {
                assert!(
                    delivered.contains(payload),
                    "{id}: {payload} answered {outcome}, never delivered, not stored"
                );
                cut += 1;
            }
            "c" | "s" => {}
            _ => assert!(
                !delivered.contains(payload),
                "{id}: {payload} answered {outcome}, delivered"
            ),
        }
    }
    eprintln!("{cut} acks cut by the kills");
    for key in ["{race}:next", "{race}:next_payload"] {
        assert_eq!(server.cli(&["EXISTS", key]), "0", "{key} left");
    }
    assert_eq!(
        server.cli(&["HGET", "{race}:counts", "successors"]),
        "",
        "the successors' flag left"
    );
}
