//! `Dedup::AllowWhileRunning`: a schedule meeting a running job stores a successor that
//! becomes the pending job once the running one is acked or dies, and waits through its
//! retries. Every backend runs these tests (`run_shared_suite!`'s `successor` group).

use std::time::{Duration, SystemTime};

use wheel_jobs::{Dedup, JobOptions, JobState, Recurrence, Scheduled, MIN_LEASE};

use super::{hour_ticks, idle_consumer, idle_kind_consumer, open};
use crate::support::{ms, next, Harness};

const HOUR: Duration = Duration::from_secs(3600);

fn allow() -> JobOptions {
    JobOptions::new().dedup(Dedup::AllowWhileRunning)
}

/// The successor of a running job: stored, shown, not counted, and pending once the running
/// job is acked; any other schedule of the id meanwhile is `Exists`.
pub async fn a_successor_waits_for_the_ack_then_runs(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    queue.schedule("sync", Duration::ZERO, "v1").await.unwrap();
    let mut consumer = queue.consume();
    let first = next(&mut consumer).await;
    assert_eq!(first.payload(), b"v1");
    let due = SystemTime::now();
    assert_eq!(
        queue
            .schedule_with("sync", due, "v2", &allow().priority(4))
            .await
            .unwrap(),
        Scheduled::Successor
    );
    let job = queue.get("sync").await.unwrap().expect("running");
    assert_eq!(
        (job.state(), job.payload(), job.successor()),
        (JobState::Running, &b"v1"[..], Some(due))
    );
    for options in [
        allow(),
        JobOptions::new().dedup(Dedup::Replace),
        JobOptions::new(),
    ] {
        assert_eq!(
            queue
                .schedule_with("sync", Duration::ZERO, "v3", &options)
                .await
                .unwrap(),
            Scheduled::Exists,
            "one successor at most, and the other modes leave a running job"
        );
    }
    let counts = queue.counts().await.unwrap();
    assert_eq!(
        (counts.pending, counts.running),
        (0, 1),
        "a successor is not counted"
    );
    assert!(first.ack().await.unwrap());
    let job = queue.get("sync").await.unwrap().expect("the successor");
    assert_eq!(
        (job.state(), job.payload(), job.attempt(), job.successor()),
        (JobState::Pending, &b"v2"[..], 0, None)
    );
    assert_eq!((job.run_at(), job.priority()), (due, 4), "its own options");
    assert_eq!(job.last_error(), None);
    let second = next(&mut consumer).await;
    assert_eq!((second.id(), second.payload()), ("sync", &b"v2"[..]));
    assert!(second.ack().await.unwrap());
    assert!(queue.get("sync").await.unwrap().is_none());
    queue.close().await.unwrap();
}

/// The ack that makes a due successor pending wakes a consumer sleeping until its next
/// tick (an hour away), in this handle or another process.
pub async fn a_due_successor_wakes_an_idle_consumer(h: impl Harness) {
    let timer = hour_ticks();
    let queue = open(&h, |b| {
        b.timer(timer.clone());
    })
    .await;
    queue.schedule("sync", Duration::ZERO, "v1").await.unwrap();
    let mut consumer = queue.consume();
    let first = next(&mut consumer).await;
    assert_eq!(
        queue
            .schedule_with("sync", Duration::ZERO, "v2", &allow())
            .await
            .unwrap(),
        Scheduled::Successor
    );
    let waiting = idle_consumer(&queue, &timer).await;
    assert!(first.ack().await.unwrap());
    // The bound only turns a missing wakeup (a hang until the hourly tick) into a failure.
    let woken = tokio::time::timeout(Duration::from_secs(30), waiting).await;
    assert_eq!(
        woken
            .expect("only the ack's wakeup can deliver it")
            .unwrap(),
        "sync"
    );
    queue.close().await.unwrap();
}

/// An absent id is created; a pending or dead job wins as with `Keep`.
pub async fn allow_while_running_creates_and_leaves_pending_and_dead_jobs(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    assert_eq!(
        queue
            .schedule_with("new", HOUR, "a", &allow())
            .await
            .unwrap(),
        Scheduled::Created
    );
    assert_eq!(
        queue
            .schedule_with("new", ms(0), "b", &allow())
            .await
            .unwrap(),
        Scheduled::Exists
    );
    let job = queue.get("new").await.unwrap().unwrap();
    assert_eq!((job.payload(), job.successor()), (&b"a"[..], None));
    queue
        .schedule_with(
            "dies",
            Duration::ZERO,
            "p",
            &JobOptions::new().max_attempts(1),
        )
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let d = next(&mut consumer).await;
    assert!(d.fail(ms(0), "boom").await.unwrap());
    assert_eq!(
        queue
            .schedule_with("dies", ms(0), "q", &allow())
            .await
            .unwrap(),
        Scheduled::Exists
    );
    let dead = queue.get("dies").await.unwrap().unwrap();
    assert_eq!((dead.state(), dead.successor()), (JobState::Dead, None));
    queue.close().await.unwrap();
}

/// A retry keeps the running job's own payload and attempts; its successor waits (shown on
/// the pending job) until the retried job is acked.
pub async fn a_successor_waits_through_retries(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    let options = JobOptions::new().max_attempts(5);
    queue
        .schedule_with("sync", Duration::ZERO, "v1", &options)
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let first = next(&mut consumer).await;
    assert_eq!(
        queue
            .schedule_with("sync", HOUR, "v2", &allow())
            .await
            .unwrap(),
        Scheduled::Successor
    );
    assert!(first.fail(ms(0), "flaky").await.unwrap());
    let job = queue.get("sync").await.unwrap().unwrap();
    assert_eq!(
        (job.state(), job.payload(), job.attempt()),
        (JobState::Pending, &b"v1"[..], 1)
    );
    assert!(job.successor().is_some(), "still waiting");
    assert_eq!(
        queue
            .schedule_with("sync", ms(0), "v3", &allow())
            .await
            .unwrap(),
        Scheduled::Exists
    );
    let again = next(&mut consumer).await;
    assert_eq!((again.payload(), again.attempt()), (&b"v1"[..], 2));
    assert!(again.ack().await.unwrap());
    let job = queue.get("sync").await.unwrap().unwrap();
    assert_eq!(
        (job.state(), job.payload(), job.attempt(), job.successor()),
        (JobState::Pending, &b"v2"[..], 0, None)
    );
    queue.close().await.unwrap();
}

/// A death hands over to the successor: it becomes the pending job with the dead one's last
/// error, and no dead job is kept; the same when the lease ends at the last attempt.
pub async fn a_successor_takes_over_from_a_death(h: impl Harness) {
    let queue = open(&h, |b| {
        b.lease(MIN_LEASE);
    })
    .await;
    let once = JobOptions::new().max_attempts(1);
    queue
        .schedule_with("fails", Duration::ZERO, "v1", &once)
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let d = next(&mut consumer).await;
    assert_eq!(
        queue
            .schedule_with("fails", HOUR, "v2", &allow())
            .await
            .unwrap(),
        Scheduled::Successor
    );
    assert!(d.fail(ms(0), "boom").await.unwrap());
    let job = queue.get("fails").await.unwrap().expect("the successor");
    assert_eq!(
        (job.state(), job.payload(), job.attempt(), job.last_error()),
        (JobState::Pending, &b"v2"[..], 0, Some("boom"))
    );
    assert_eq!(queue.counts().await.unwrap().dead, 0, "no dead job kept");

    // The lease of the last attempt ends: the claim that finds it hands over too.
    queue
        .schedule_with("lapses", Duration::ZERO, "w1", &once)
        .await
        .unwrap();
    let held = next(&mut consumer).await;
    assert_eq!(held.id(), "lapses");
    assert_eq!(
        queue
            .schedule_with("lapses", Duration::ZERO, "w2", &allow())
            .await
            .unwrap(),
        Scheduled::Successor
    );
    tokio::time::sleep(MIN_LEASE + ms(200)).await; // the handler is too slow
    let mut other = queue.consume();
    let taken = next(&mut other).await;
    assert_eq!(
        (taken.id(), taken.payload(), taken.attempt()),
        ("lapses", &b"w2"[..], 1)
    );
    let job = queue.get("lapses").await.unwrap().unwrap();
    assert_eq!(job.last_error(), Some("lease expired"));
    assert!(!held.ack().await.unwrap(), "the old lease is gone");
    assert!(taken.ack().await.unwrap());
    assert_eq!(queue.counts().await.unwrap().dead, 0);
    queue.close().await.unwrap();
}

/// An acked job's hold-off still holds: its successor is not due before the hold-off ends,
/// and the id is the successor's, so no tombstone refuses it.
pub async fn a_successor_after_a_hold_off_waits_for_its_end(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    let held = JobOptions::new().dedup(Dedup::HoldOff(HOUR));
    queue
        .schedule_with("digest", Duration::ZERO, "v1", &held)
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let d = next(&mut consumer).await;
    assert_eq!(
        queue
            .schedule_with("digest", Duration::ZERO, "v2", &allow())
            .await
            .unwrap(),
        Scheduled::Successor
    );
    let before_ack = SystemTime::now();
    assert!(d.ack().await.unwrap());
    let job = queue.get("digest").await.unwrap().expect("the successor");
    assert_eq!(
        (job.state(), job.payload()),
        (JobState::Pending, &b"v2"[..])
    );
    assert!(
        job.run_at() >= before_ack + HOUR - Duration::from_secs(1),
        "not due before the hold-off ends: {:?}",
        job.run_at()
    );
    assert_eq!(
        queue.schedule("digest", ms(0), "v3").await.unwrap(),
        Scheduled::Exists,
        "the id holds the successor, not a tombstone"
    );
    queue.close().await.unwrap();
}

/// A `Replace` of a job pending again after a retry, with a successor waiting: the job
/// takes the newest values and the successor is dropped, so nothing older runs after it.
pub async fn a_replace_after_a_retry_drops_the_waiting_successor(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    queue
        .schedule_with(
            "sync",
            Duration::ZERO,
            "v1",
            &JobOptions::new().max_attempts(3),
        )
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let first = next(&mut consumer).await;
    assert_eq!(
        queue
            .schedule_with("sync", HOUR, "v2", &allow())
            .await
            .unwrap(),
        Scheduled::Successor
    );
    assert!(first.retry(HOUR).await.unwrap());
    let replace = JobOptions::new().dedup(Dedup::Replace);
    assert_eq!(
        queue
            .schedule_with("sync", Duration::ZERO, "v3", &replace)
            .await
            .unwrap(),
        Scheduled::Replaced
    );
    let job = queue.get("sync").await.unwrap().unwrap();
    assert_eq!(
        (job.state(), job.payload(), job.attempt(), job.successor()),
        (JobState::Pending, &b"v3"[..], 1, None)
    );
    let d = next(&mut consumer).await;
    assert_eq!(d.payload(), b"v3");
    assert!(d.ack().await.unwrap());
    assert!(
        queue.get("sync").await.unwrap().is_none(),
        "the older successor does not run after the newest values"
    );
    queue.close().await.unwrap();
}

/// A claim that kills a job at its last attempt (its lease ended) hands over to its
/// successor, and wakes an idle consumer of the successor's kind: another kind than the
/// claim's, so the claim's own `next_due` knows nothing of it.
pub async fn a_successor_handed_over_by_a_claims_kill_wakes_an_idle_consumer(h: impl Harness) {
    let timer = hour_ticks();
    let queue = open(&h, |b| {
        b.timer(timer.clone());
    })
    .await;
    let once = JobOptions::kind("a").max_attempts(1).lease(MIN_LEASE);
    queue
        .schedule_with("sync", Duration::ZERO, "v1", &once)
        .await
        .unwrap();
    let mut first = queue.consume_kind("a");
    let held = next(&mut first).await;
    let successor = JobOptions::kind("b").dedup(Dedup::AllowWhileRunning);
    assert_eq!(
        queue
            .schedule_with("sync", Duration::ZERO, "v2", &successor)
            .await
            .unwrap(),
        Scheduled::Successor
    );
    let waiting = idle_kind_consumer(&queue, &timer, "b").await;
    tokio::time::sleep(MIN_LEASE + ms(200)).await; // the handler is too slow
                                                   // A new consumer of "a" claims at once: it kills the job and hands over, then sleeps.
    let mut killer = queue.consume_kind("a");
    let killing = tokio::spawn(async move { next(&mut killer).await.id().to_owned() });
    // The bound only turns a missing wakeup (a hang until the hourly tick) into a failure.
    let woken = tokio::time::timeout(Duration::from_secs(30), waiting).await;
    assert_eq!(
        woken
            .expect("only the kill's wakeup can deliver it")
            .unwrap(),
        "sync"
    );
    let job = queue
        .get("sync")
        .await
        .unwrap()
        .expect("the successor, running");
    assert_eq!(
        (
            job.state(),
            job.kind(),
            job.payload(),
            job.attempt(),
            job.last_error()
        ),
        (JobState::Running, "b", &b"v2"[..], 1, Some("lease expired"))
    );
    assert_eq!(queue.counts().await.unwrap().dead, 0, "no dead job kept");
    assert!(!held.ack().await.unwrap(), "the killed lease is gone");
    killing.abort();
    queue.close().await.unwrap();
}

/// A series' occurrence never gets a successor, by its id's shape (`name@<UTC time>`),
/// even once its series is cancelled; an id with an `@` of another shape is an ordinary
/// job, even while a series of its prefix exists.
pub async fn an_occurrence_gets_no_successor_and_other_ids_with_at_do(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    let every = Recurrence::every(Duration::from_millis(200)).unwrap();
    queue
        .schedule_recurring("rep", every, "tick")
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let occurrence = next(&mut consumer).await;
    let id = occurrence.id().to_owned();
    assert!(id.starts_with("rep@"), "{id}");
    assert!(queue.cancel_recurring("rep").await.unwrap());
    assert_eq!(
        queue
            .schedule_with(&id, ms(0), "next", &allow())
            .await
            .unwrap(),
        Scheduled::Exists,
        "a running occurrence outlives its series and still gets no successor"
    );
    assert!(occurrence.ack().await.unwrap());

    let every = Recurrence::every(HOUR).unwrap();
    queue.schedule_recurring("a", every, "p").await.unwrap();
    queue.schedule("a@x", Duration::ZERO, "v1").await.unwrap();
    let d = loop {
        let d = next(&mut consumer).await;
        if d.id() == "a@x" {
            break d;
        }
        assert!(d.ack().await.unwrap()); // the series' first occurrence, if due
    };
    assert_eq!(
        queue
            .schedule_with("a@x", ms(0), "v2", &allow())
            .await
            .unwrap(),
        Scheduled::Successor,
        "not an occurrence's id: an ordinary job"
    );
    assert!(d.ack().await.unwrap());
    assert_eq!(queue.get("a@x").await.unwrap().unwrap().payload(), b"v2");
    queue.close().await.unwrap();
}

/// `cancel` removes a waiting successor (the running job goes on), and a pending job with
/// its successor (after a retry) together.
pub async fn cancel_removes_a_waiting_successor(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    queue.schedule("a", Duration::ZERO, "v1").await.unwrap();
    let mut consumer = queue.consume();
    let d = next(&mut consumer).await;
    assert_eq!(
        queue
            .schedule_with("a", ms(0), "v2", &allow())
            .await
            .unwrap(),
        Scheduled::Successor
    );
    assert!(queue.cancel("a").await.unwrap(), "the successor went");
    let job = queue.get("a").await.unwrap().unwrap();
    assert_eq!((job.state(), job.successor()), (JobState::Running, None));
    assert!(
        !queue.cancel("a").await.unwrap(),
        "a running job alone stays"
    );
    assert!(d.ack().await.unwrap());
    assert!(queue.get("a").await.unwrap().is_none(), "nothing followed");

    queue
        .schedule_with(
            "b",
            Duration::ZERO,
            "v1",
            &JobOptions::new().max_attempts(3),
        )
        .await
        .unwrap();
    let d = next(&mut consumer).await;
    assert_eq!(
        queue
            .schedule_with("b", HOUR, "v2", &allow())
            .await
            .unwrap(),
        Scheduled::Successor
    );
    assert!(d.retry(HOUR).await.unwrap());
    assert!(queue.cancel("b").await.unwrap());
    assert!(queue.get("b").await.unwrap().is_none(), "both went");
    assert_eq!(
        queue.schedule("b", HOUR, "v3").await.unwrap(),
        Scheduled::Created
    );
    queue.close().await.unwrap();
}

/// 8 schedulers racing `AllowWhileRunning` on 10 ids while a consumer acks: every payload
/// answered `Created` or `Successor` is delivered exactly once, or is still stored (as a job
/// or a successor) at the end.
pub async fn racing_successors_are_each_delivered_once(h: impl Harness) {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};
    const IDS: usize = 10;
    let queue = open(&h, |_| {}).await;
    let stored: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut tasks = Vec::new();
    for t in 0..8usize {
        let (queue, stored) = (queue.clone(), stored.clone());
        tasks.push(tokio::spawn(async move {
            for n in 0..100usize {
                let id = format!("id-{}", (t * 3 + n) % IDS);
                let payload = format!("{t}-{n}");
                let outcome = queue
                    .schedule_with(&id, Duration::ZERO, payload.as_str(), &allow())
                    .await
                    .unwrap();
                if matches!(outcome, Scheduled::Created | Scheduled::Successor) {
                    stored.lock().unwrap().push(payload);
                }
                if n % 10 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    let delivered: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let consumer = {
        let (queue, delivered) = (queue.clone(), delivered.clone());
        tokio::spawn(async move {
            let mut consumer = queue.consume();
            loop {
                tokio::select! {
                    d = next(&mut consumer) => {
                        let payload = String::from_utf8(d.payload().to_vec()).unwrap();
                        assert!(d.ack().await.unwrap());
                        *delivered.lock().unwrap().entry(payload).or_default() += 1;
                    }
                    _ = stopped.changed() => break,
                }
            }
        })
    };
    for task in tasks {
        task.await.unwrap();
    }
    // Drain what is left: pending jobs, and successors once their jobs are acked.
    loop {
        let counts = queue.counts().await.unwrap();
        if counts.pending + counts.running == 0 {
            break;
        }
        tokio::time::sleep(ms(10)).await;
    }
    stop.send(true).unwrap();
    consumer.await.unwrap();
    let delivered = delivered.lock().unwrap().clone();
    let stored = stored.lock().unwrap().clone();
    for payload in &stored {
        assert_eq!(delivered.get(payload), Some(&1), "{payload} once");
    }
    assert_eq!(
        delivered.values().sum::<u32>() as usize,
        stored.len(),
        "nothing delivered that was not answered stored"
    );
    for i in 0..IDS {
        assert!(queue.get(&format!("id-{i}")).await.unwrap().is_none());
    }
    queue.close().await.unwrap();
}
