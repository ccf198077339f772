//! Scheduling: ids and `run_at`, cancel and reschedule, batches, and delivery never
//! before `run_at`.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use wheel_jobs::{JobQueue, JobState, Scheduled, When};

use super::open;
use crate::support::{ms, next, spawn_reporting_worker, Harness};

pub async fn schedule_is_idempotent(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    let at = SystemTime::now() + Duration::from_secs(3600);
    assert_eq!(
        queue.schedule("a", at, "first").await.unwrap(),
        Scheduled::Created
    );
    assert_eq!(
        queue.schedule("a", ms(1), "second").await.unwrap(),
        Scheduled::Exists
    );
    let info = queue.get("a").await.unwrap().expect("scheduled");
    assert_eq!(info.payload(), b"first", "the existing job is unchanged");
    assert_eq!(info.run_at(), at);
    assert_eq!(queue.pending().await.unwrap(), 1);
    queue.close().await.unwrap();
}

pub async fn bad_input_is_refused(h: impl Harness) {
    let queue = open(&h, |b| {
        b.max_payload(16);
    })
    .await;
    let long = "x".repeat(wheel_jobs::MAX_ID_LEN + 1);
    let longest = "x".repeat(wheel_jobs::MAX_ID_LEN);
    for id in ["", long.as_str()] {
        assert!(queue
            .schedule(id, ms(0), "p")
            .await
            .unwrap_err()
            .is_invalid_id());
        assert!(queue.cancel(id).await.unwrap_err().is_invalid_id());
        assert!(queue
            .reschedule(id, ms(0))
            .await
            .unwrap_err()
            .is_invalid_id());
        assert!(queue.get(id).await.unwrap_err().is_invalid_id());
        assert!(queue.remove_dead(id).await.unwrap_err().is_invalid_id());
    }
    assert_eq!(
        queue.schedule(&longest, ms(0), "p").await.unwrap(),
        Scheduled::Created
    );
    let err = queue
        .schedule("big", ms(0), vec![0u8; 17])
        .await
        .unwrap_err();
    assert!(err.is_payload_too_large(), "{err}");
    assert!(!err.is_invalid_id() && !err.is_storage() && !err.is_locked());
    assert_eq!(
        queue.get("big").await.unwrap(),
        None,
        "a refused job is not stored"
    );
    assert_eq!(
        queue.schedule("fits", ms(0), vec![0u8; 16]).await.unwrap(),
        Scheduled::Created
    );
    assert_eq!(queue.pending().await.unwrap(), 2);

    for bad in [
        JobQueue::builder().lease(Duration::ZERO).clone(),
        JobQueue::builder().max_attempts(0).clone(),
        JobQueue::builder().prefetch(0).clone(),
        JobQueue::builder().safety_wakeup(Duration::ZERO).clone(),
        JobQueue::builder()
            .max_payload(wheel_jobs::MAX_PAYLOAD + 1)
            .clone(),
    ] {
        let err = h.open(&bad).await.unwrap_err();
        assert!(err.is_invalid_config(), "{err}");
    }
    queue.close().await.unwrap();
}

pub async fn get_reports_state_run_at_and_attempt(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    assert_eq!(queue.get("nobody").await.unwrap(), None);
    let at = SystemTime::now() + ms(20);
    queue.schedule("job", at, "p").await.unwrap();
    let info = queue.get("job").await.unwrap().unwrap();
    assert_eq!(
        (info.state(), info.run_at(), info.attempt()),
        (JobState::Pending, at, 0)
    );

    let mut consumer = queue.consume();
    let delivery = next(&mut consumer).await;
    assert_eq!(
        (delivery.id(), delivery.attempt(), delivery.run_at()),
        ("job", 1, at)
    );
    let info = queue.get("job").await.unwrap().unwrap();
    assert_eq!(
        (info.state(), info.run_at(), info.attempt()),
        (JobState::Running, at, 1)
    );
    assert_eq!(
        queue.pending().await.unwrap(),
        0,
        "running jobs are not pending"
    );
    queue.close().await.unwrap();
}

pub async fn never_before_run_at(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    let start = SystemTime::now();
    let mut due = HashMap::new();
    for i in 0..40u64 {
        let at = start + ms(5 * (i % 20));
        queue.schedule(&format!("j{i}"), at, "p").await.unwrap();
        due.insert(format!("j{i}"), at);
    }
    let mut consumer = queue.consume();
    let mut last = UNIX_EPOCH;
    for _ in 0..40 {
        let d = next(&mut consumer).await; // asserts now >= run_at
        assert_eq!(Some(&d.run_at()), due.get(d.id()));
        assert!(d.run_at() >= last || !h.ordered(), "delivered in due order");
        last = d.run_at();
        assert!(d.ack().await.unwrap());
    }
    assert_eq!(queue.pending().await.unwrap(), 0);
    queue.close().await.unwrap();
}

pub async fn past_deadlines_are_due_at_once(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    let before_epoch = UNIX_EPOCH - Duration::from_secs(10);
    queue.schedule("epoch", before_epoch, "p").await.unwrap();
    queue
        .schedule(
            "hour-ago",
            SystemTime::now() - Duration::from_secs(3600),
            "p",
        )
        .await
        .unwrap();
    queue.schedule("zero", Duration::ZERO, "p").await.unwrap();
    assert_eq!(
        queue.get("epoch").await.unwrap().unwrap().run_at(),
        UNIX_EPOCH,
        "saturates at the epoch"
    );
    let mut consumer = queue.consume();
    let mut ids: Vec<String> = Vec::new();
    for _ in 0..3 {
        ids.push(next(&mut consumer).await.id().to_owned());
    }
    assert_eq!(ids, ["epoch", "hour-ago", "zero"], "in due order");
    queue.close().await.unwrap();
}

pub async fn duration_max_saturates(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    let never = UNIX_EPOCH + Duration::from_nanos(u64::MAX);
    queue.schedule("never", Duration::MAX, "p").await.unwrap();
    queue
        .schedule(
            "far",
            When::At(UNIX_EPOCH + Duration::from_secs(u64::MAX / 2)),
            "p",
        )
        .await
        .unwrap();
    assert_eq!(queue.get("never").await.unwrap().unwrap().run_at(), never);
    assert_eq!(queue.get("far").await.unwrap().unwrap().run_at(), never);
    queue.schedule("soon", ms(10), "p").await.unwrap();
    let mut consumer = queue.consume();
    assert_eq!(next(&mut consumer).await.id(), "soon");
    assert_eq!(queue.pending().await.unwrap(), 2);
    assert!(queue.reschedule("never", Duration::MAX).await.unwrap());
    assert!(queue.cancel("never").await.unwrap());
    queue.close().await.unwrap();
}

pub async fn cancel_wins_before_delivery(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    let mut consumer = queue.consume();
    queue.schedule("cancelled", ms(30), "p").await.unwrap();
    assert!(queue.cancel("cancelled").await.unwrap());
    assert!(!queue.cancel("cancelled").await.unwrap(), "already gone");
    assert!(!queue.cancel("unknown").await.unwrap());
    assert_eq!(queue.get("cancelled").await.unwrap(), None);
    queue.schedule("marker", ms(60), "p").await.unwrap();
    let d = next(&mut consumer).await;
    assert_eq!(
        d.id(),
        "marker",
        "the cancelled job, due earlier, never came"
    );
    assert!(
        !queue.cancel("marker").await.unwrap(),
        "a running job cannot be cancelled"
    );
    assert!(d.ack().await.unwrap());
    assert_eq!(queue.pending().await.unwrap(), 0);
    queue.close().await.unwrap();
}

pub async fn reschedule_earlier_and_later(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    queue
        .schedule("early", Duration::from_secs(3600), "p")
        .await
        .unwrap();
    queue.schedule("late", ms(40), "p").await.unwrap();
    queue.schedule("marker", ms(80), "p").await.unwrap();
    // Before the marker by its stored time, not by the clock now: a slow reply to the
    // marker's schedule must not put `early` after it.
    let marker_at = queue.get("marker").await.unwrap().unwrap().run_at();
    let new_early = marker_at - ms(40);
    assert!(queue.reschedule("early", new_early).await.unwrap());
    assert!(queue
        .reschedule("late", Duration::from_secs(3600))
        .await
        .unwrap());
    assert!(!queue.reschedule("unknown", ms(1)).await.unwrap());
    let mut consumer = queue.consume();
    let first = next(&mut consumer).await;
    assert_eq!((first.id(), first.run_at()), ("early", new_early));
    assert!(
        !queue.reschedule("early", ms(1)).await.unwrap(),
        "a running job does not move"
    );
    assert_eq!(
        next(&mut consumer).await.id(),
        "marker",
        "the job moved later is not due"
    );
    let late = queue.get("late").await.unwrap().unwrap();
    assert_eq!(late.state(), JobState::Pending);
    assert!(late.run_at() > SystemTime::now() + Duration::from_secs(3000));
    queue.close().await.unwrap();
}

pub async fn earlier_schedule_wakes_an_idle_consumer(h: impl Harness) {
    // A timer of one-hour ticks: the consumer's idle sleep (at most its 5 s safety wakeup,
    // rounded up to a tick) cannot end during the test, so only the wakeup that the
    // schedule of an earlier job sends can bring "now".
    let timer = wheel_timer::Timer::builder()
        .tick(Duration::from_secs(3600))
        .build()
        .unwrap();
    let queue = open(&h, |b| {
        b.timer(timer.clone());
    })
    .await;
    queue
        .schedule("far", Duration::from_secs(3600), "p")
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let waiting = tokio::spawn(async move { next(&mut consumer).await.id().to_owned() });
    // Wait until the consumer claimed nothing and sleeps on its timer.
    while timer.pending() == 0 {
        tokio::task::yield_now().await;
    }
    queue.schedule("now", Duration::ZERO, "p").await.unwrap();
    // The bound only turns a missing wakeup (a hang until the next hourly tick) into a failure.
    let woken = tokio::time::timeout(Duration::from_secs(30), waiting).await;
    assert_eq!(
        woken
            .expect("only the schedule's wakeup can deliver it")
            .unwrap(),
        "now"
    );
    queue.close().await.unwrap();
}

pub async fn schedule_many_is_atomic_and_idempotent(h: impl Harness) {
    let queue = open(&h, |b| {
        b.max_payload(4);
    })
    .await;
    queue
        .schedule("b", Duration::from_secs(60), "old")
        .await
        .unwrap();
    let outcomes = queue
        .schedule_many([
            ("a", ms(0), "1"),
            ("b", ms(0), "2"),
            ("c", ms(0), "3"),
            ("a", ms(0), "4"),
        ])
        .await
        .unwrap();
    use Scheduled::{Created, Exists};
    assert_eq!(
        outcomes,
        [Created, Exists, Created, Exists],
        "in order, duplicates inside the batch too"
    );
    assert_eq!(queue.get("b").await.unwrap().unwrap().payload(), b"old");
    assert_eq!(queue.get("a").await.unwrap().unwrap().payload(), b"1");
    // One bad job refuses the whole batch.
    let err = queue
        .schedule_many([("d", ms(0), "ok"), ("e", ms(0), "too long")])
        .await
        .unwrap_err();
    assert!(err.is_payload_too_large());
    let err = queue
        .schedule_many([("d", ms(0), "ok"), ("", ms(0), "x")])
        .await
        .unwrap_err();
    assert!(err.is_invalid_id());
    assert_eq!(queue.get("d").await.unwrap(), None);
    assert!(queue
        .schedule_many(Vec::<(String, Duration, Vec<u8>)>::new())
        .await
        .unwrap()
        .is_empty());
    assert_eq!(queue.pending().await.unwrap(), 3);
    queue.close().await.unwrap();
}

pub async fn many_jobs_each_delivered_once(h: impl Harness) {
    const JOBS: usize = 2000;
    const SCHEDULERS: usize = 32;
    let queue = open(&h, |_| {}).await;
    let mut schedulers = Vec::new();
    for s in 0..SCHEDULERS {
        let queue = queue.clone();
        schedulers.push(tokio::spawn(async move {
            for i in (s..JOBS).step_by(SCHEDULERS) {
                let when = ms((i % 50) as u64);
                assert_eq!(
                    queue
                        .schedule(&format!("job-{i}"), when, "p")
                        .await
                        .unwrap(),
                    Scheduled::Created
                );
            }
        }));
    }
    // Two competing consumers: a stream and a worker loop.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let stream_tx = tx.clone();
    let mut consumer = queue.consume();
    let stream = tokio::spawn(async move {
        while let Some(d) = consumer.next().await {
            let d = d.unwrap();
            assert!(d.ack().await.unwrap());
            stream_tx.send(d.id().to_owned()).unwrap();
        }
    });
    let run = spawn_reporting_worker(queue.clone(), 16, tx);
    for s in schedulers {
        s.await.unwrap();
    }
    let mut seen = HashMap::new();
    for _ in 0..JOBS {
        *seen.entry(rx.recv().await.unwrap()).or_insert(0) += 1;
    }
    assert_eq!(
        seen.len(),
        JOBS,
        "every job once (a duplicate would leave one missing)"
    );
    assert!(seen.values().all(|&n| n == 1));
    while queue.pending().await.unwrap() > 0 {
        tokio::time::sleep(ms(5)).await;
    }
    queue.close().await.unwrap();
    stream.await.unwrap();
    run.await.unwrap().unwrap();
}

/// A batch spanning several of Redis's 512-job script calls (and duplicates across them)
/// keeps its outcomes in order and stores every job once.
pub async fn schedule_many_larger_than_one_script_call(h: impl Harness) {
    const N: usize = 1_300;
    let queue = open(&h, |_| {}).await;
    let jobs = (0..N).map(|i| (format!("job-{i}"), Duration::from_secs(3600), "p"));
    let outcomes = queue.schedule_many(jobs.clone()).await.unwrap();
    assert_eq!(outcomes, vec![Scheduled::Created; N]);
    // Again, with new jobs in between: only those are created, in place.
    let again = (0..N + 10).map(|i| (format!("job-{i}"), Duration::from_secs(3600), "p"));
    let outcomes = queue.schedule_many(again).await.unwrap();
    assert!(outcomes[..N].iter().all(|s| *s == Scheduled::Exists));
    assert!(outcomes[N..].iter().all(|s| *s == Scheduled::Created));
    assert_eq!(queue.pending().await.unwrap(), (N + 10) as u64);
    queue.close().await.unwrap();
}
