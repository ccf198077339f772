//! Dedup modes on an id ([`Dedup`]): replace-while-pending (debounce) and the hold-off after
//! an ack (throttle), alone and under racing schedulers. `Keep`, the default, is what the
//! rest of the suite tests.
//!
//! Every backend runs these tests (`run_shared_suite!`'s `dedup` group).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use wheel_jobs::{Dedup, JobOptions, JobState, ListOptions, Recurrence, Scheduled};

use super::{hour_ticks, idle_consumer, open};
use crate::support::{ms, next, Harness};

const HOUR: Duration = Duration::from_secs(3600);

fn replace() -> JobOptions {
    JobOptions::new().dedup(Dedup::Replace)
}

fn hold_off(d: Duration) -> JobOptions {
    JobOptions::new().dedup(Dedup::HoldOff(d))
}

/// Waits until the wall clock is past `until` (a hold-off's end): no assertion is about
/// how long that took.
async fn wait_past(until: SystemTime) {
    while SystemTime::now() <= until {
        tokio::time::sleep(ms(20)).await;
    }
}

pub async fn replace_moves_run_at_payload_and_options(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    let absent = queue
        .schedule_with("fresh", HOUR, "a", &replace())
        .await
        .unwrap();
    assert_eq!(absent, Scheduled::Created, "nothing to replace: created");
    queue.schedule("d", HOUR, "first").await.unwrap();
    let later = SystemTime::now() + 2 * HOUR;
    let options = replace().of_kind("digest").priority(3);
    assert_eq!(
        queue
            .schedule_with("d", later, "second", &options)
            .await
            .unwrap(),
        Scheduled::Replaced
    );
    let job = queue.get("d").await.unwrap().expect("still there");
    assert_eq!(
        (job.state(), job.run_at(), job.payload(), job.attempt()),
        (JobState::Pending, later, &b"second"[..], 0)
    );
    assert_eq!((job.kind(), job.priority()), ("digest", 3));
    let counts = queue.counts().await.unwrap();
    assert_eq!(counts.pending, 2, "replaced, not added");
    assert_eq!(counts.kinds["digest"].pending, 1);
    assert_eq!(counts.kinds[""].pending, 1, "the kind moved with it");
    let listed = queue
        .list(JobState::Pending, ListOptions::new().kind("digest"))
        .await
        .unwrap();
    let ids: Vec<_> = listed.jobs().iter().map(|j| j.id()).collect();
    assert_eq!(ids, ["d"]);
    // Keep on a pending job still leaves it as it is.
    assert_eq!(
        queue.schedule("d", ms(0), "third").await.unwrap(),
        Scheduled::Exists
    );
    assert_eq!(queue.get("d").await.unwrap().unwrap().payload(), b"second");
    queue.close().await.unwrap();
}

/// A replace that moves a job earlier wakes a consumer sleeping until the old time.
pub async fn replace_earlier_wakes_an_idle_consumer(h: impl Harness) {
    let timer = hour_ticks();
    let queue = open(&h, |b| {
        b.timer(timer.clone());
    })
    .await;
    queue.schedule("d", HOUR, "late").await.unwrap();
    let waiting = idle_consumer(&queue, &timer).await;
    assert_eq!(
        queue
            .schedule_with("d", Duration::ZERO, "now", &replace())
            .await
            .unwrap(),
        Scheduled::Replaced
    );
    // The bound only turns a missing wakeup (a hang until the hourly tick) into a failure.
    let woken = tokio::time::timeout(Duration::from_secs(30), waiting).await;
    assert_eq!(
        woken
            .expect("only the replace's wakeup can deliver it")
            .unwrap(),
        "d"
    );
    queue.close().await.unwrap();
}

pub async fn replace_leaves_running_and_dead_jobs(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    queue.schedule("run", Duration::ZERO, "old").await.unwrap();
    let mut consumer = queue.consume();
    let running = next(&mut consumer).await;
    assert_eq!(
        queue
            .schedule_with("run", HOUR, "new", &replace())
            .await
            .unwrap(),
        Scheduled::Exists
    );
    let job = queue.get("run").await.unwrap().unwrap();
    assert_eq!(
        (job.state(), job.payload()),
        (JobState::Running, &b"old"[..])
    );
    assert!(running.ack().await.unwrap(), "the lease is unchanged");

    let once = JobOptions::new().max_attempts(1);
    queue
        .schedule_with("dies", Duration::ZERO, "old", &once)
        .await
        .unwrap();
    let d = next(&mut consumer).await;
    assert_eq!(d.id(), "dies");
    assert!(d.fail(ms(0), "boom").await.unwrap());
    assert_eq!(
        queue
            .schedule_with("dies", Duration::ZERO, "new", &replace())
            .await
            .unwrap(),
        Scheduled::Exists
    );
    let job = queue.get("dies").await.unwrap().unwrap();
    assert_eq!(
        (job.state(), job.payload(), job.last_error()),
        (JobState::Dead, &b"old"[..], Some("boom"))
    );
    // A failed job pending again is replaced with its attempts and last error kept.
    let twice = JobOptions::new().max_attempts(2);
    queue
        .schedule_with("again", Duration::ZERO, "old", &twice)
        .await
        .unwrap();
    let d = next(&mut consumer).await;
    assert_eq!(d.id(), "again");
    assert!(d.fail(HOUR, "first").await.unwrap());
    assert_eq!(
        queue
            .schedule_with("again", 2 * HOUR, "new", &replace())
            .await
            .unwrap(),
        Scheduled::Replaced
    );
    let job = queue.get("again").await.unwrap().unwrap();
    assert_eq!(
        (job.attempt(), job.last_error(), job.payload()),
        (1, Some("first"), &b"new"[..])
    );
    queue.close().await.unwrap();
}

/// A series' pending occurrence keeps its time: its id is its time.
pub async fn replace_leaves_a_series_occurrence(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    let hourly = Recurrence::every(HOUR).unwrap();
    queue
        .schedule_recurring("digest", hourly, "p")
        .await
        .unwrap();
    let page = queue
        .list(JobState::Pending, &ListOptions::new())
        .await
        .unwrap();
    let [head] = page.jobs() else {
        panic!("one pending occurrence: {:?}", page.jobs());
    };
    let (id, run_at) = (head.id().to_owned(), head.run_at());
    assert_eq!(
        queue
            .schedule_with(&id, Duration::ZERO, "moved", &replace())
            .await
            .unwrap(),
        Scheduled::Exists
    );
    let job = queue.get(&id).await.unwrap().unwrap();
    assert_eq!((job.run_at(), job.payload()), (run_at, &b"p"[..]));
    queue.close().await.unwrap();
}

pub async fn hold_off_refuses_the_id_until_it_ends(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    let window = ms(300);
    queue
        .schedule_with("t", Duration::ZERO, "p", &hold_off(window))
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let d = next(&mut consumer).await;
    let before = SystemTime::now();
    assert!(d.ack().await.unwrap());
    let after = SystemTime::now();
    let until = match queue.schedule("t", Duration::ZERO, "again").await.unwrap() {
        Scheduled::HeldOff { until } => until,
        other => panic!("held off, not {other:?}"),
    };
    assert!(
        before + window <= until && until <= after + window,
        "the hold-off runs from the ack"
    );
    // Any mode is refused, with the same end, and nothing is stored.
    for options in [replace(), hold_off(HOUR), JobOptions::new()] {
        assert_eq!(
            queue
                .schedule_with("t", Duration::ZERO, "again", &options)
                .await
                .unwrap(),
            Scheduled::HeldOff { until },
            "{options:?}"
        );
    }
    let many = queue
        .schedule_many([("t", Duration::ZERO, "x"), ("u", Duration::ZERO, "y")])
        .await
        .unwrap();
    assert_eq!(many, [Scheduled::HeldOff { until }, Scheduled::Created]);
    assert!(queue.get("t").await.unwrap().is_none(), "held off: no job");
    let counts = queue.counts().await.unwrap();
    assert_eq!((counts.pending, counts.running, counts.dead), (1, 0, 0));
    assert_eq!(next(&mut consumer).await.id(), "u", "only u was stored");
    wait_past(until).await;
    assert_eq!(
        queue.schedule("t", HOUR, "again").await.unwrap(),
        Scheduled::Created,
        "accepted once the hold-off ended"
    );
    queue.close().await.unwrap();
}

/// A cancel, a death, a removal and a zero hold-off leave nothing; a kind's default mode
/// and a worker's ack (`run`) hold off as `Delivery::ack` does.
pub async fn hold_off_follows_only_an_ack(h: impl Harness) {
    let queue = open(&h, |b| {
        b.kind("digest", JobOptions::new().dedup(Dedup::HoldOff(HOUR)));
    })
    .await;
    let held = hold_off(HOUR);
    queue
        .schedule_with("cancelled", HOUR, "p", &held)
        .await
        .unwrap();
    assert!(queue.cancel("cancelled").await.unwrap());
    assert_eq!(
        queue.schedule("cancelled", HOUR, "p").await.unwrap(),
        Scheduled::Created
    );
    let dies = hold_off(HOUR).max_attempts(1);
    queue
        .schedule_with("dies", Duration::ZERO, "p", &dies)
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let d = next(&mut consumer).await;
    assert!(d.fail(ms(0), "boom").await.unwrap());
    assert_eq!(
        queue.get("dies").await.unwrap().unwrap().state(),
        JobState::Dead
    );
    assert!(queue.remove_dead("dies").await.unwrap());
    assert_eq!(
        queue.schedule("dies", HOUR, "p").await.unwrap(),
        Scheduled::Created
    );
    queue
        .schedule_with("zero", Duration::ZERO, "p", &hold_off(Duration::ZERO))
        .await
        .unwrap();
    let d = next(&mut consumer).await;
    assert_eq!(d.id(), "zero");
    assert!(d.ack().await.unwrap());
    assert_eq!(
        queue.schedule("zero", HOUR, "p").await.unwrap(),
        Scheduled::Created
    );
    drop(consumer);
    // The kind's default, acked by a worker.
    queue
        .schedule_with("mail", Duration::ZERO, "p", &JobOptions::kind("digest"))
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = {
        let queue = queue.clone();
        tokio::spawn(async move {
            queue
                .run_kind("digest", 1, move |d| {
                    let tx = tx.clone();
                    async move {
                        tx.send(d.id().to_owned()).unwrap();
                        Ok::<(), String>(())
                    }
                })
                .await
        })
    };
    assert_eq!(rx.recv().await.unwrap(), "mail");
    while queue.get("mail").await.unwrap().is_some() {
        tokio::time::sleep(ms(5)).await;
    }
    assert!(matches!(
        queue.schedule("mail", HOUR, "p").await.unwrap(),
        Scheduled::HeldOff { .. }
    ));
    queue.close().await.unwrap();
    worker.await.unwrap().unwrap();
}

/// 16 schedulers × 200 schedules on 20 ids, Keep, Replace and HoldOff mixed, while a
/// consumer acks whatever comes: every id is held by at most one job, every job created was
/// acked or is still there, and the counts agree with the jobs.
pub async fn racing_schedulers_leave_each_id_once(h: impl Harness) {
    const IDS: usize = 20;
    let queue = open(&h, |_| {}).await;
    let created: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let mut tasks = Vec::new();
    for t in 0..16usize {
        let (queue, created) = (queue.clone(), created.clone());
        tasks.push(tokio::spawn(async move {
            for n in 0..200usize {
                let id = format!("id-{}", (t * 7 + n) % IDS);
                let options = match (t + n) % 3 {
                    0 => JobOptions::new(),
                    1 => replace(),
                    _ => hold_off(ms(50)),
                };
                // Due now or a little later, so the consumer acks some mid-race.
                let when = ms(((t + n) % 4) as u64 * 5);
                let payload = format!("{t}-{n}");
                let outcome = queue
                    .schedule_with(&id, when, payload, &options)
                    .await
                    .unwrap();
                if outcome == Scheduled::Created {
                    *created.lock().unwrap().entry(id).or_default() += 1;
                }
            }
        }));
    }
    let acked: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let consumer = {
        let (queue, acked) = (queue.clone(), acked.clone());
        tokio::spawn(async move {
            let mut consumer = queue.consume();
            loop {
                tokio::select! {
                    d = next(&mut consumer) => {
                        if d.ack().await.unwrap() {
                            *acked.lock().unwrap().entry(d.id().to_owned()).or_default() += 1;
                        }
                    }
                    _ = stopped.changed() => break,
                }
            }
        })
    };
    for task in tasks {
        task.await.unwrap();
    }
    stop.send(true).unwrap();
    consumer.await.unwrap();
    let (created, acked) = (
        created.lock().unwrap().clone(),
        acked.lock().unwrap().clone(),
    );
    let mut live = 0;
    for i in 0..IDS {
        let id = format!("id-{i}");
        let exists = queue.get(&id).await.unwrap().is_some();
        live += u64::from(exists);
        let made = created.get(&id).copied().unwrap_or(0);
        let gone = acked.get(&id).copied().unwrap_or(0);
        assert_eq!(
            made,
            gone + u64::from(exists),
            "{id}: created = acked + left"
        );
    }
    let counts = queue.counts().await.unwrap();
    assert_eq!(
        counts.pending + counts.running + counts.dead,
        live,
        "counts agree with the jobs"
    );
    let mut listed = BTreeSet::new();
    for state in [JobState::Pending, JobState::Running, JobState::Dead] {
        let page = queue
            .list(state, ListOptions::new().limit(100))
            .await
            .unwrap();
        for job in page.jobs() {
            assert!(listed.insert(job.id().to_owned()), "{} twice", job.id());
        }
    }
    assert_eq!(listed.len() as u64, live);
    queue.close().await.unwrap();
}
