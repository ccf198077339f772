//! Sentinel failovers under load: a running worker follows the primary by itself, and with
//! `min_replicas` no acknowledged schedule is lost.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use wheel_jobs::JobQueue;

use crate::support::sentinel::SentinelSet;
use crate::support::{ms, spawn_reporting_worker};

/// A guard against a hang, not a bound on anything.
const HANG: Duration = Duration::from_secs(60);

/// Schedules due-now jobs in a loop until `stop`, each id once: the ids acknowledged, and
/// how many calls failed (each must be `is_unavailable`).
async fn scheduler(q: JobQueue, task: usize, stop: Arc<AtomicBool>) -> (Vec<String>, usize) {
    let mut acknowledged = Vec::new();
    let mut failed = 0;
    for i in 0.. {
        if stop.load(SeqCst) {
            break;
        }
        let id = format!("s{task}-{i}");
        match q.schedule(&id, Duration::ZERO, "p").await {
            Ok(_) => acknowledged.push(id),
            Err(err) => {
                assert!(err.is_unavailable(), "{id}: {err}");
                failed += 1;
                tokio::time::sleep(ms(20)).await;
            }
        }
        tokio::time::sleep(ms(2)).await;
    }
    (acknowledged, failed)
}

/// A primary, a replica and three sentinels; a worker and two schedulers on a queue opened
/// through the sentinels with `min_replicas(1, …)`. First `SENTINEL FAILOVER` (the old
/// primary is demoted: `READONLY`, then its clients are killed), then a SIGKILL of the new
/// primary (the sentinels promote the other node; the killed one restarts as its replica).
/// The worker never stops and delivers every acknowledged schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_follows_failovers_and_no_acknowledged_schedule_is_lost() {
    let mut set = SentinelSet::start();
    let unknown = JobQueue::builder()
        .redis_sentinel(&set.sentinel_urls(), "no-such-master", "orders")
        .await
        .unwrap_err();
    assert!(unknown.is_invalid_config(), "{unknown}");
    let q = JobQueue::builder()
        .min_replicas(1, Duration::from_secs(1))
        .redis_sentinel(&set.sentinel_urls(), SentinelSet::MASTER, "orders")
        .await
        .expect("open through sentinel");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut worker = spawn_reporting_worker(q.clone(), 8, tx);
    let stop = Arc::new(AtomicBool::new(false));
    let schedulers: Vec<_> = (0..2)
        .map(|task| tokio::spawn(scheduler(q.clone(), task, stop.clone())))
        .collect();

    tokio::time::sleep(ms(500)).await;
    let first = set.primary_port();
    set.failover();
    tokio::time::sleep(ms(1000)).await;
    let second = set.primary_port();
    assert_ne!(first, second, "SENTINEL FAILOVER moved the primary");
    set.node(&second).kill(); // SIGKILL
    let third = set.wait_for_new_primary(&second);
    set.node(&second).restart(); // back as the new primary's replica, for min_replicas
                                 // Until a schedule succeeded on the third primary: calls work again.
    let probe = tokio::time::timeout(HANG, async {
        loop {
            match q.schedule("probe", Duration::from_secs(3600), "p").await {
                Ok(_) => break,
                Err(err) => assert!(err.is_unavailable(), "{err}"),
            }
            tokio::time::sleep(ms(50)).await;
        }
    });
    probe
        .await
        .expect("schedules succeed again after the failovers");
    tokio::time::sleep(ms(300)).await;
    stop.store(true, SeqCst);

    let mut acknowledged = HashSet::new();
    let mut failed = 0;
    for s in schedulers {
        let (ids, failures) = s.await.unwrap();
        acknowledged.extend(ids);
        failed += failures;
    }
    eprintln!(
        "{} schedules acknowledged, {failed} failed as unavailable; primaries {first} -> {second} -> {third}",
        acknowledged.len()
    );
    let mut missing = acknowledged.clone();
    while !missing.is_empty() {
        tokio::select! {
            id = rx.recv() => drop(missing.remove(&id.expect("the worker runs"))),
            stopped = &mut worker => panic!("run stopped: {stopped:?}"),
            _ = tokio::time::sleep(HANG) => panic!(
                "{} acknowledged schedules never delivered, e.g. {:?}",
                missing.len(),
                missing.iter().next()
            ),
        }
    }
    q.close().await.unwrap();
    worker.await.unwrap().unwrap();
}
