//! A Redis outage under load: every call in flight or made while the server is down fails
//! with `is_unavailable` within `redis_timeout` plus [`MARGIN`], calls succeed again once
//! it is back, and nothing acknowledged is lost.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use wheel_jobs::{Error, JobQueue, JobState, Scheduled};

use crate::support::ms;
use crate::support::redis::{RedisServer, DURABLE};

/// The queue's `redis_timeout` in this test.
const TIMEOUT: Duration = Duration::from_millis(500);

/// How much longer than `redis_timeout` a failing call may take: the runtime getting round
/// to the timed-out task on a loaded two-core machine. The documented bound is
/// `redis_timeout` plus scheduling delay; this is that delay's allowance here.
const MARGIN: Duration = Duration::from_millis(500);

/// Whole scheduler rounds (each acknowledges three jobs) before the outage starts.
const ROUNDS_BEFORE: usize = 60;

/// Far beyond the bound: a call still running after this is reported as a hang rather
/// than awaited for good.
const HANG: Duration = Duration::from_secs(8);

/// What the test saw go wrong, reported together at the end; and how many whole rounds the
/// schedulers got through, so the outage starts once there is enough to check after it.
#[derive(Clone, Default)]
struct Faults(Arc<Mutex<Vec<String>>>, Arc<AtomicUsize>);

impl Faults {
    fn push(&self, fault: String) {
        self.0.lock().unwrap().push(fault);
    }
}

/// Runs one call, checking that it ends within the bound and that an error is
/// `is_unavailable`; `None` if it hung (reported).
async fn call<T>(
    faults: &Faults,
    what: &str,
    fut: impl Future<Output = Result<T, Error>>,
) -> Option<Result<T, Error>> {
    let start = Instant::now();
    let Ok(outcome) = tokio::time::timeout(HANG, fut).await else {
        faults.push(format!("{what}: still running after {HANG:?}"));
        return None;
    };
    let took = start.elapsed();
    if took > TIMEOUT + MARGIN {
        faults.push(format!(
            "{what}: took {took:?} ({}), over {:?}",
            if outcome.is_ok() { "ok" } else { "failed" },
            TIMEOUT + MARGIN
        ));
    }
    if let Err(err) = &outcome {
        if !err.is_unavailable() {
            faults.push(format!("{what}: {err} is not is_unavailable"));
        }
    }
    Some(outcome)
}

/// What an acknowledged call says a job must look like after the outage.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// Pending, due at this instant if it was rescheduled to one.
    Pending(Option<SystemTime>),
    /// Cancelled or acked.
    Gone,
}

/// The state a task's acknowledged calls left; an id whose last call failed is forgotten
/// (a failed call may or may not have been applied).
type Ledger = HashMap<String, Expect>;

fn note<T>(ledger: &mut Ledger, id: &str, outcome: &Option<Result<T, Error>>, expect: Expect) {
    match outcome {
        Some(Ok(_)) => ledger.insert(id.to_owned(), expect),
        _ => ledger.remove(id),
    };
}

/// One scheduler: schedule, get, reschedule, schedule_many, cancel, pending and running, in
/// a loop, until a whole round succeeded after `restarted` was set.
async fn scheduler(
    q: JobQueue,
    task: usize,
    restarted: Arc<AtomicBool>,
    faults: Faults,
) -> (Ledger, usize) {
    let mut ledger = Ledger::new();
    let mut failures = 0;
    let far = Duration::from_secs(3600);
    for i in 0.. {
        let after_restart = restarted.load(SeqCst);
        let id = format!("s{task}-{i}");
        let mut ok = true;

        let r = call(&faults, "schedule", q.schedule(&id, far, "p")).await;
        ok &= matches!(r, Some(Ok(_)));
        note(&mut ledger, &id, &r, Expect::Pending(None));

        let r = call(&faults, "get", q.get(&id)).await;
        ok &= matches!(r, Some(Ok(_)));

        // Whole seconds: a stored due time reads back exactly.
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(4_000_000_000 + i);
        let r = call(&faults, "reschedule", q.reschedule(&id, at)).await;
        ok &= matches!(r, Some(Ok(_)));
        match r {
            Some(Ok(true)) => drop(ledger.insert(id.clone(), Expect::Pending(Some(at)))),
            Some(Ok(false)) => {}
            _ => drop(ledger.remove(&id)),
        }

        let (a, b) = (format!("{id}-a"), format!("{id}-b"));
        let many = [(a.clone(), far, "p"), (b.clone(), far, "p")];
        let r = call(&faults, "schedule_many", q.schedule_many(many)).await;
        ok &= matches!(r, Some(Ok(_)));
        note(&mut ledger, &a, &r, Expect::Pending(None));
        note(&mut ledger, &b, &r, Expect::Pending(None));

        let r = call(&faults, "cancel", q.cancel(&b)).await;
        ok &= matches!(r, Some(Ok(_)));
        match r {
            Some(Ok(true)) => drop(ledger.insert(b.clone(), Expect::Gone)),
            Some(Ok(false)) => {}
            _ => drop(ledger.remove(&b)),
        }

        let r = call(&faults, "pending", q.pending()).await;
        ok &= matches!(r, Some(Ok(_)));
        let r = call(&faults, "running", q.running()).await;
        ok &= matches!(r, Some(Ok(_)));

        if !ok {
            failures += 1;
            // Failing fast while the server is down must not turn into a busy loop.
            tokio::time::sleep(ms(10)).await;
        } else if after_restart {
            break;
        } else {
            faults.1.fetch_add(1, SeqCst);
        }
    }
    (ledger, failures)
}

/// One consumer: claims one due job with a fresh consumer (so no backoff of an earlier
/// failure sits before the claim), acks it, in a loop, until a claim and an ack succeeded
/// after `restarted` was set.
async fn acker(q: JobQueue, restarted: Arc<AtomicBool>, faults: Faults) -> (Ledger, usize) {
    let mut ledger = Ledger::new();
    let mut failures = 0;
    loop {
        let after_restart = restarted.load(SeqCst);
        let mut consumer = q.consume();
        let claimed = call(&faults, "claim", async {
            consumer.next().await.expect("the queue is open")
        })
        .await;
        let acked = match claimed {
            Some(Ok(delivery)) => {
                let r = call(&faults, "ack", delivery.ack()).await;
                match r {
                    Some(Ok(true)) => drop(ledger.insert(delivery.id().to_owned(), Expect::Gone)),
                    Some(Ok(false)) => faults.push(format!("{}: lease lost", delivery.id())),
                    _ => {}
                }
                matches!(r, Some(Ok(_)))
            }
            _ => false,
        };
        if !acked {
            failures += 1;
            tokio::time::sleep(ms(10)).await;
        } else if after_restart {
            return (ledger, failures);
        }
    }
}

/// How the server goes away.
#[derive(Clone, Copy)]
enum Outage {
    /// SIGKILL, then a restart on the same socket and append-only file.
    Kill,
    /// SIGSTOP, then SIGCONT: a server that stops answering, as behind a network partition.
    Freeze,
}

/// A `redis-server` SIGKILLed and restarted on the same socket (the connection manager's
/// reconnect backoff is well past the bound by then), the case that hung calls for seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_fails_in_time_while_redis_is_killed_and_succeeds_after_its_restart() {
    outage(Outage::Kill).await;
}

/// A `redis-server` that stops answering (SIGSTOP) and resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_fails_in_time_while_redis_is_frozen_and_succeeds_after_it_resumes() {
    outage(Outage::Freeze).await;
}

/// Four tasks scheduling (and reading, rescheduling, cancelling) in a loop and one claiming
/// and acking; the server goes away 400 ms in and comes back 3 s later. It fsyncs its
/// append-only file before it answers, so whatever it acknowledged survives its death: a
/// job lost here was lost by the client.
async fn outage(outage: Outage) {
    const DUE_NOW: usize = 20_000;
    let mut server = RedisServer::start_with(&DURABLE);
    let q = JobQueue::builder()
        .redis_timeout(Some(TIMEOUT))
        .prefetch(1)
        .redis(&server.url(), "orders")
        .await
        .expect("open on redis");
    // Enough due jobs that a claim never comes back empty (the loop sleeps after failures).
    let due = (0..DUE_NOW).map(|i| (format!("c-{i}"), Duration::ZERO, "p"));
    assert!(q
        .schedule_many(due)
        .await
        .unwrap()
        .iter()
        .all(|s| *s == Scheduled::Created));

    let restarted = Arc::new(AtomicBool::new(false));
    let faults = Faults::default();
    let mut tasks = Vec::new();
    for task in 0..4 {
        let (q, restarted, faults) = (q.clone(), restarted.clone(), faults.clone());
        tasks.push(tokio::spawn(scheduler(q, task, restarted, faults)));
    }
    tasks.push(tokio::spawn(acker(
        q.clone(),
        restarted.clone(),
        faults.clone(),
    )));

    // At least 400 ms in, and enough rounds acknowledged to check afterwards: a loaded
    // machine may take longer to get there (a guard, not a bound: the test fails below if
    // it never does).
    tokio::time::sleep(ms(400)).await;
    let started = Instant::now();
    while faults.1.load(SeqCst) < ROUNDS_BEFORE && started.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(ms(20)).await;
    }
    match outage {
        Outage::Kill => server.kill(),
        Outage::Freeze => server.signal("-STOP"),
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    match outage {
        Outage::Kill => server.restart(),
        Outage::Freeze => server.signal("-CONT"),
    }
    restarted.store(true, SeqCst);

    let mut ledger = Ledger::new();
    for task in tasks {
        // Each task ends after one whole round succeeded: calls succeed again.
        let (part, failures) = tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("calls succeed again after the restart")
            .unwrap();
        assert!(failures > 0, "every task met the outage");
        ledger.extend(part);
    }
    let faults = faults.0.lock().unwrap().clone();
    assert!(
        faults.is_empty(),
        "{} faults, the first ones:\n{}",
        faults.len(),
        faults[..faults.len().min(20)].join("\n")
    );

    assert!(ledger.len() > 100, "enough acknowledged calls to check");
    for (id, expect) in &ledger {
        let info = q.get(id).await.unwrap();
        let kept = match (expect, &info) {
            (Expect::Gone, None) => true,
            (Expect::Pending(at), Some(info)) => {
                info.state() == JobState::Pending && at.is_none_or(|at| info.run_at() == at)
            }
            _ => false,
        };
        assert!(kept, "{id}: acknowledged as {expect:?}, found {info:?}");
    }
    q.close().await.unwrap();
}
