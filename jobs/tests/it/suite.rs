//! The behavioural suite, written once for every backend.
//!
//! Each `pub async fn` takes a fresh [`Harness`]; `behaviour_suite!` turns them all into
//! `#[tokio::test]`s for one backend. Deadlines are real wall-clock times (the store's clock
//! decides what is due), kept to tens of milliseconds; no assertion is about how long
//! anything took, only about order, counts and "never before `run_at`".

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use wheel_jobs::{
    Cursor, JobQueue, JobState, ListOptions, Scheduled, When, MAX_ERROR_LEN, MIN_LEASE,
};

use crate::support::{ms, next, spawn_reporting_worker, Harness};

macro_rules! behaviour_suite {
    ($harness:expr; $($(#[$attr:meta])* $name:ident),* $(,)?) => {
        $(
            $(#[$attr])*
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                crate::suite::$name($harness).await
            }
        )*
    };
}

/// Every test of the suite against the harness `$harness` (an expression making a fresh one).
macro_rules! run_behaviour_suite {
    ($harness:expr) => {
        behaviour_suite!($harness;
            schedule_is_idempotent,
            bad_input_is_refused,
            get_reports_state_run_at_and_attempt,
            never_before_run_at,
            past_deadlines_are_due_at_once,
            duration_max_saturates,
            cancel_wins_before_delivery,
            reschedule_earlier_and_later,
            earlier_schedule_wakes_an_idle_consumer,
            lease_expiry_redelivers_with_attempt_2,
            stale_delivery_changes_nothing,
            extend_keeps_the_lease,
            retry_counts_the_attempt,
            dead_after_max_attempts,
            ack_removes,
            schedule_many_is_atomic_and_idempotent,
            pending_and_running_count_states,
            run_acks_and_retries_failures_and_panics,
            run_kills_after_max_attempts,
            run_renews_the_lease_of_a_slow_handler,
            run_never_shortens_a_handlers_own_extend,
            many_jobs_each_delivered_once,
            close_ends_consumers_and_calls,
            close_lets_running_handlers_finish_and_ack,
            close_inside_a_handler_does_not_wait_for_itself,
            schedule_many_larger_than_one_script_call,
            a_prefetched_job_whose_lease_ended_is_not_handed_out,
            a_lease_below_the_minimum_is_raised,
            fail_keeps_the_error_with_the_job,
            run_records_errors_and_panics,
            an_ended_lease_is_the_last_error,
            counts_follow_the_states,
            list_pages_through_inserts_and_deletes,
            list_pages_through_equal_due_times,
            list_running_and_dead_jobs,
            list_refuses_bad_limits_and_cursors,
            list_without_payloads_leaves_them_out,
            revive_sends_a_dead_job_back,
            revive_all_dead_sends_every_dead_job_back,
            pause_stops_claims_across_a_reopen_and_resume_wakes_consumers,
            #[cfg(feature = "serde")]
            typed_payloads_round_trip_and_undecodable_ones_die,
        );
    };
}

async fn open(h: &impl Harness, configure: impl FnOnce(&mut wheel_jobs::Builder)) -> JobQueue {
    let mut builder = JobQueue::builder();
    configure(&mut builder);
    h.open(&builder).await.expect("open")
}

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
    let new_early = SystemTime::now() + ms(20);
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

pub async fn lease_expiry_redelivers_with_attempt_2(h: impl Harness) {
    let queue = open(&h, |b| {
        b.lease(ms(300));
    })
    .await;
    queue
        .schedule("job", Duration::ZERO, "payload")
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let first = next(&mut consumer).await;
    assert_eq!(first.attempt(), 1);
    drop(first); // neither acked nor retried: leased until the lease ends
    let second = next(&mut consumer).await;
    assert_eq!(
        (second.id(), second.attempt(), second.payload()),
        ("job", 2, &b"payload"[..])
    );
    assert_eq!(queue.get("job").await.unwrap().unwrap().attempt(), 2);
    assert!(second.ack().await.unwrap());
    queue.close().await.unwrap();
}

pub async fn stale_delivery_changes_nothing(h: impl Harness) {
    let queue = open(&h, |b| {
        b.lease(ms(300));
    })
    .await;
    queue.schedule("job", Duration::ZERO, "p").await.unwrap();
    let mut consumer = queue.consume();
    let stale = next(&mut consumer).await;
    let current = next(&mut consumer).await; // the lease lapsed: redelivered
    assert_eq!(current.attempt(), 2);
    assert!(!stale.ack().await.unwrap(), "ack after the lease was lost");
    assert!(!stale.retry(ms(0)).await.unwrap());
    assert!(!stale.extend(Duration::from_secs(60)).await.unwrap());
    let info = queue.get("job").await.unwrap().unwrap();
    assert_eq!(
        (info.state(), info.attempt()),
        (JobState::Running, 2),
        "unchanged by the stale calls"
    );
    assert!(current.ack().await.unwrap());
    assert!(!current.ack().await.unwrap(), "a second ack finds nothing");
    queue.close().await.unwrap();
}

pub async fn extend_keeps_the_lease(h: impl Harness) {
    let queue = open(&h, |b| {
        b.lease(MIN_LEASE);
    })
    .await;
    queue.schedule("job", Duration::ZERO, "p").await.unwrap();
    let mut consumer = queue.consume();
    let held = next(&mut consumer).await;
    assert!(held.extend(Duration::from_secs(3600)).await.unwrap());
    queue
        .schedule("marker", MIN_LEASE + ms(200), "p")
        .await
        .unwrap();
    assert_eq!(
        next(&mut consumer).await.id(),
        "marker",
        "the extended job was not redelivered"
    );
    assert!(held.ack().await.unwrap(), "the lease is still held");
    queue.close().await.unwrap();
}

pub async fn retry_counts_the_attempt(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    queue.schedule("job", Duration::ZERO, "p").await.unwrap();
    let mut consumer = queue.consume();
    let first = next(&mut consumer).await;
    let before_retry = SystemTime::now();
    assert!(first.retry(ms(20)).await.unwrap());
    let info = queue.get("job").await.unwrap().unwrap();
    assert_eq!((info.state(), info.attempt()), (JobState::Pending, 1));
    assert!(info.run_at() >= before_retry + ms(20));
    assert_eq!(queue.pending().await.unwrap(), 1);
    let second = next(&mut consumer).await;
    assert_eq!((second.attempt(), second.run_at()), (2, info.run_at()));
    assert!(!first.ack().await.unwrap());
    assert!(second.ack().await.unwrap());
    queue.close().await.unwrap();
}

pub async fn dead_after_max_attempts(h: impl Harness) {
    let queue = open(&h, |b| {
        b.lease(MIN_LEASE).max_attempts(2);
    })
    .await;
    queue.schedule("lapses", Duration::ZERO, "p").await.unwrap();
    let mut consumer = queue.consume();
    assert_eq!(next(&mut consumer).await.attempt(), 1);
    assert_eq!(next(&mut consumer).await.attempt(), 2);
    // Its second lease ends before the marker is due; claims go in due order, so the
    // marker's delivery means the job's last lease was processed.
    queue
        .schedule("marker", MIN_LEASE + ms(300), "p")
        .await
        .unwrap();
    let marker = next(&mut consumer).await;
    assert_eq!(marker.id(), "marker");
    let info = queue.get("lapses").await.unwrap().unwrap();
    assert_eq!((info.state(), info.attempt()), (JobState::Dead, 2));
    assert_eq!(
        queue.schedule("lapses", ms(0), "again").await.unwrap(),
        Scheduled::Exists
    );
    assert!(
        !queue.cancel("lapses").await.unwrap(),
        "a dead job is not pending"
    );
    assert!(
        marker.retry(ms(0)).await.unwrap(),
        "first failure of the marker"
    );
    let marker = next(&mut consumer).await;
    assert_eq!(marker.attempt(), 2);
    assert!(
        marker.retry(ms(0)).await.unwrap(),
        "the last attempt failed: dead"
    );
    assert_eq!(
        queue.get("marker").await.unwrap().unwrap().state(),
        JobState::Dead
    );
    assert_eq!(queue.pending().await.unwrap(), 0);

    assert!(queue.remove_dead("lapses").await.unwrap());
    assert!(!queue.remove_dead("lapses").await.unwrap());
    assert_eq!(queue.get("lapses").await.unwrap(), None);
    queue
        .schedule("pending", Duration::from_secs(60), "p")
        .await
        .unwrap();
    assert!(
        !queue.remove_dead("pending").await.unwrap(),
        "only dead jobs are removed"
    );
    assert_eq!(queue.purge_dead().await.unwrap(), 1);
    assert_eq!(queue.get("marker").await.unwrap(), None);
    assert_eq!(queue.purge_dead().await.unwrap(), 0);
    assert_eq!(queue.pending().await.unwrap(), 1);
    queue.close().await.unwrap();
}

pub async fn ack_removes(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    queue.schedule("job", Duration::ZERO, "p").await.unwrap();
    let mut consumer = queue.consume();
    let d = next(&mut consumer).await;
    assert!(d.ack().await.unwrap());
    assert_eq!(queue.get("job").await.unwrap(), None);
    assert_eq!(queue.pending().await.unwrap(), 0);
    assert_eq!(
        queue
            .schedule("job", Duration::ZERO, "again")
            .await
            .unwrap(),
        Scheduled::Created,
        "an acked job is gone, its id free"
    );
    let again = next(&mut consumer).await;
    assert_eq!((again.payload(), again.attempt()), (&b"again"[..], 1));
    assert!(
        !d.ack().await.unwrap(),
        "the old delivery cannot ack the new job"
    );
    assert!(again.ack().await.unwrap());
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

pub async fn pending_and_running_count_states(h: impl Harness) {
    let queue = open(&h, |b| {
        b.max_attempts(1);
    })
    .await;
    for id in ["a", "b", "c"] {
        queue.schedule(id, Duration::ZERO, "p").await.unwrap();
    }
    queue
        .schedule("later", Duration::from_secs(60), "p")
        .await
        .unwrap();
    assert_eq!(
        (
            queue.pending().await.unwrap(),
            queue.running().await.unwrap()
        ),
        (4, 0)
    );
    let mut consumer = queue.consume();
    let (a, b, c) = (
        next(&mut consumer).await,
        next(&mut consumer).await,
        next(&mut consumer).await,
    );
    assert_eq!(
        (
            queue.pending().await.unwrap(),
            queue.running().await.unwrap()
        ),
        (1, 3)
    );
    assert!(a.ack().await.unwrap());
    assert!(b.retry(ms(0)).await.unwrap(), "out of attempts: dead");
    assert_eq!(
        (
            queue.pending().await.unwrap(),
            queue.running().await.unwrap()
        ),
        (1, 1)
    );
    assert!(queue.cancel("later").await.unwrap());
    assert!(c.ack().await.unwrap());
    assert_eq!(
        (
            queue.pending().await.unwrap(),
            queue.running().await.unwrap()
        ),
        (0, 0)
    );
    queue.close().await.unwrap();
}

type Log = Arc<Mutex<Vec<(String, u32)>>>;

pub async fn run_acks_and_retries_failures_and_panics(h: impl Harness) {
    let queue = open(&h, |b| {
        b.max_attempts(3).backoff(ms(5), ms(20));
    })
    .await;
    for id in ["ok", "fails-once", "panics-once"] {
        queue.schedule(id, Duration::ZERO, id).await.unwrap();
    }
    let log: Log = Arc::default();
    let (done_tx, mut done) = tokio::sync::mpsc::unbounded_channel();
    let worker = queue.clone();
    let seen = log.clone();
    let running = tokio::spawn(async move {
        worker
            .run(4, move |job| {
                let (seen, done_tx) = (seen.clone(), done_tx.clone());
                async move {
                    seen.lock()
                        .unwrap()
                        .push((job.id().to_owned(), job.attempt()));
                    match (job.id(), job.attempt()) {
                        ("fails-once", 1) => return Err("first attempt fails"),
                        ("panics-once", 1) => panic!("first attempt panics"),
                        _ => {}
                    }
                    done_tx.send(job.id().to_owned()).unwrap();
                    Ok(())
                }
            })
            .await
    });
    let mut finished = Vec::new();
    for _ in 0..3 {
        finished.push(done.recv().await.unwrap());
    }
    finished.sort();
    assert_eq!(finished, ["fails-once", "ok", "panics-once"]);
    // The acks follow the handlers: wait until the store agrees.
    while queue.pending().await.unwrap() > 0
        || queue.get("ok").await.unwrap().is_some()
        || queue.get("fails-once").await.unwrap().is_some()
        || queue.get("panics-once").await.unwrap().is_some()
    {
        tokio::time::sleep(ms(5)).await;
    }
    let mut log = log.lock().unwrap().clone();
    log.sort();
    let expect = [
        ("fails-once", 1),
        ("fails-once", 2),
        ("ok", 1),
        ("panics-once", 1),
        ("panics-once", 2),
    ];
    assert_eq!(log, expect.map(|(id, n)| (id.to_owned(), n)));
    queue.close().await.unwrap();
    running.await.unwrap().expect("run ends cleanly on close");
}

pub async fn run_kills_after_max_attempts(h: impl Harness) {
    let queue = open(&h, |b| {
        b.max_attempts(2).backoff(ms(1), ms(1));
    })
    .await;
    queue.schedule("doomed", Duration::ZERO, "p").await.unwrap();
    let worker = queue.clone();
    let running = tokio::spawn(async move {
        worker
            .run(1, |_job| async { Err::<(), _>("always fails") })
            .await
    });
    loop {
        if let Some(info) = queue.get("doomed").await.unwrap() {
            if info.state() == JobState::Dead {
                assert_eq!(info.attempt(), 2);
                break;
            }
        }
        tokio::time::sleep(ms(5)).await;
    }
    queue.close().await.unwrap();
    running.await.unwrap().unwrap();
}

/// A handler running for three and a half leases keeps its job: `run` renews the lease, so
/// the free slot beside it never gets the job a second time. (Without the renewals it did,
/// at every lease's end.) Generous on purpose: with 2 s leases a renewal may come 1.3 s
/// late (a loaded machine) before the lease lapses.
pub async fn run_renews_the_lease_of_a_slow_handler(h: impl Harness) {
    let lease = Duration::from_secs(2);
    let queue = open(&h, |b| {
        b.lease(lease);
    })
    .await;
    queue.schedule("slow", Duration::ZERO, "p").await.unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let (done_tx, mut done) = tokio::sync::mpsc::unbounded_channel();
    let worker = queue.clone();
    let counted = runs.clone();
    let running = tokio::spawn(async move {
        worker
            .run(2, move |job| {
                let (counted, done_tx) = (counted.clone(), done_tx.clone());
                async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(lease * 7 / 2).await;
                    done_tx.send(job.attempt()).unwrap();
                    Ok::<(), String>(())
                }
            })
            .await
    });
    assert_eq!(done.recv().await, Some(1));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "delivered again while it ran"
    );
    while queue.get("slow").await.unwrap().is_some() {
        tokio::time::sleep(ms(5)).await;
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "delivered again before its ack"
    );
    queue.close().await.unwrap();
    running.await.unwrap().unwrap();
}

/// A handler that extends its own lease far out keeps it even once its process stops
/// renewing: `run`'s renewals used to set the lease back to one lease from now, so the job
/// was delivered again a lease after the renewals stopped (here: the `run` aborted).
pub async fn run_never_shortens_a_handlers_own_extend(h: impl Harness) {
    let lease = Duration::from_secs(1);
    let queue = open(&h, |b| {
        b.lease(lease);
    })
    .await;
    queue.schedule("long", Duration::ZERO, "p").await.unwrap();
    let (extended_tx, extended) = tokio::sync::oneshot::channel();
    let extended_tx = Mutex::new(Some(extended_tx));
    let worker = queue.clone();
    let running = tokio::spawn(async move {
        worker
            .run(1, move |job| {
                let extended_tx = extended_tx.lock().unwrap().take();
                async move {
                    assert!(job.extend(Duration::from_secs(3600)).await.unwrap());
                    // Past two renewal points (every third of a lease).
                    tokio::time::sleep(lease * 5 / 6).await;
                    if let Some(tx) = extended_tx {
                        tx.send(()).unwrap();
                    }
                    std::future::pending::<Result<(), String>>().await
                }
            })
            .await
    });
    extended.await.unwrap();
    // The process stops renewing (its handler hangs on, leased).
    running.abort();
    let mut consumer = queue.consume();
    let again = tokio::time::timeout(lease * 3, consumer.next()).await;
    assert!(again.is_err(), "delivered again within three leases");
    let info = queue.get("long").await.unwrap().unwrap();
    assert_eq!((info.state(), info.attempt()), (JobState::Running, 1));
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

pub async fn close_ends_consumers_and_calls(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    queue
        .schedule("later", Duration::from_secs(3600), "p")
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let waiting = tokio::spawn(async move { consumer.next().await.is_none() });
    tokio::time::sleep(ms(10)).await;
    queue.close().await.unwrap();
    assert!(waiting.await.unwrap(), "the stream ends on close");
    assert!(queue
        .schedule("x", ms(0), "p")
        .await
        .unwrap_err()
        .is_closed());
    assert!(queue.get("later").await.unwrap_err().is_closed());
    assert!(queue.pending().await.unwrap_err().is_closed());
    queue.close().await.unwrap(); // closing twice is fine
                                  // The store was released: it opens again, with the job still there.
    let reopened = h.open(&JobQueue::builder()).await.unwrap();
    assert_eq!(
        reopened.get("later").await.unwrap().unwrap().state(),
        JobState::Pending
    );
    reopened.close().await.unwrap();
}

/// `close` during `run` drains: the running handler finishes and its ack commits before the
/// store closes, so the job is gone (not left running, to run again after its lease).
pub async fn close_lets_running_handlers_finish_and_ack(h: impl Harness) {
    let q = open(&h, |_| {}).await;
    q.schedule("job", Duration::ZERO, "p").await.unwrap();
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Notify::new());
    let (worker, gate) = (q.clone(), release.clone());
    let run = tokio::spawn(async move {
        worker
            .run(1, move |_d| {
                let (started_tx, gate) = (started_tx.clone(), gate.clone());
                async move {
                    started_tx.send(()).unwrap();
                    gate.notified().await;
                    Ok::<(), String>(())
                }
            })
            .await
    });
    started.recv().await.unwrap();
    let closer = q.clone();
    let closing = tokio::spawn(async move { closer.close().await });
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(
        !closing.is_finished(),
        "close waits for the running handler"
    );
    release.notify_one();
    closing.await.unwrap().unwrap();
    run.await.unwrap().unwrap();
    assert!(q.get("job").await.unwrap_err().is_closed());
    let q = open(&h, |_| {}).await;
    assert_eq!(q.get("job").await.unwrap(), None, "acked before the close");
    assert_eq!(q.running().await.unwrap(), 0);
    q.close().await.unwrap();
}

/// A handler that closes the queue does not wait for itself; a `run` started after the close
/// returns at once.
pub async fn close_inside_a_handler_does_not_wait_for_itself(h: impl Harness) {
    let q = open(&h, |_| {}).await;
    q.schedule("job", Duration::ZERO, "p").await.unwrap();
    let inside = q.clone();
    let run = q.run(1, move |_d| {
        let q = inside.clone();
        async move { q.close().await.map_err(|e| e.to_string()) }
    });
    // The bound only guards against the deadlock this test is about.
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("close from a handler returns")
        .unwrap();
    let late = q.run(1, |_d| async { Ok::<(), String>(()) });
    tokio::time::timeout(Duration::from_secs(30), late)
        .await
        .expect("run after close returns")
        .unwrap();
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

/// A job waiting in a consumer's prefetch buffer past its lease may already be someone
/// else's: it is dropped, never handed out beside the new holder's valid lease. (Real time:
/// the lease has to pass.)
pub async fn a_prefetched_job_whose_lease_ended_is_not_handed_out(h: impl Harness) {
    let q = open(&h, |b| {
        b.lease(MIN_LEASE).prefetch(4);
    })
    .await;
    q.schedule_many([("a", ms(0), "p"), ("b", ms(0), "p")])
        .await
        .unwrap();
    let mut first = q.consume();
    let held = next(&mut first).await; // the other one waits in `first`'s buffer
    assert!(held.extend(Duration::from_secs(3600)).await.unwrap());
    let other = if held.id() == "a" { "b" } else { "a" };
    tokio::time::sleep(MIN_LEASE + ms(200)).await; // a slow handler: the buffered job's lease ends
    let mut second = q.consume();
    let taken = next(&mut second).await;
    assert_eq!((taken.id(), taken.attempt()), (other, 2));
    assert!(taken.ack().await.unwrap());
    q.schedule("c", Duration::ZERO, "p").await.unwrap();
    let after = next(&mut first).await;
    assert_eq!(
        after.id(),
        "c",
        "the expired buffered job is not handed out"
    );
    assert!(after.ack().await.unwrap());
    assert!(held.ack().await.unwrap());
    q.close().await.unwrap();
}

/// Regression: a lease shorter than the claim's own commit was spent waiting for it (the
/// job dropped from the buffer, its attempt gone). Such leases are raised to `MIN_LEASE`.
pub async fn a_lease_below_the_minimum_is_raised(h: impl Harness) {
    let q = open(&h, |b| {
        b.lease(Duration::from_micros(1));
    })
    .await;
    q.schedule("job", Duration::ZERO, "p").await.unwrap();
    let mut consumer = q.consume();
    let d = next(&mut consumer).await;
    assert_eq!(
        (d.id(), d.attempt()),
        ("job", 1),
        "the first claim's delivery"
    );
    assert!(d.ack().await.unwrap(), "the lease outlived its commit");
    q.close().await.unwrap();
}

pub async fn fail_keeps_the_error_with_the_job(h: impl Harness) {
    let queue = open(&h, |b| {
        b.max_attempts(2);
    })
    .await;
    queue.schedule("job", Duration::ZERO, "p").await.unwrap();
    let mut consumer = queue.consume();
    let first = next(&mut consumer).await;
    assert!(first.fail(ms(0), "card declined").await.unwrap());
    let info = queue.get("job").await.unwrap().unwrap();
    assert_eq!(
        (info.state(), info.attempt(), info.last_error()),
        (JobState::Pending, 1, Some("card declined"))
    );
    assert!(
        !first.fail(ms(0), "stale").await.unwrap(),
        "a stale delivery records nothing"
    );
    let second = next(&mut consumer).await;
    assert_eq!(
        queue.get("job").await.unwrap().unwrap().last_error(),
        Some("card declined"),
        "kept while it runs again"
    );
    // The last attempt: dead, with this attempt's error, cut to the cap.
    let long = "é".repeat(MAX_ERROR_LEN);
    assert!(second.fail(ms(0), &long).await.unwrap());
    let info = queue.get("job").await.unwrap().unwrap();
    assert_eq!(info.state(), JobState::Dead);
    let kept = info.last_error().unwrap();
    assert!(
        kept.len() <= MAX_ERROR_LEN && kept.ends_with('…'),
        "{}",
        kept.len()
    );
    assert!(long.starts_with(kept.trim_end_matches('…')));

    // A plain retry is not a failure: the previous error stays.
    queue.schedule("other", Duration::ZERO, "p").await.unwrap();
    let d = next(&mut consumer).await;
    assert!(d.fail(ms(0), "first").await.unwrap());
    let d = next(&mut consumer).await;
    assert!(d.retry(Duration::from_secs(3600)).await.unwrap());
    assert_eq!(
        queue.get("other").await.unwrap().unwrap().last_error(),
        Some("first")
    );
    queue.close().await.unwrap();
}

pub async fn run_records_errors_and_panics(h: impl Harness) {
    // A backoff of an hour: each job fails once and waits, pending, with its error.
    let queue = open(&h, |b| {
        b.backoff(Duration::from_secs(3600), Duration::from_secs(3600));
    })
    .await;
    for id in ["errs", "panics", "ok"] {
        queue.schedule(id, Duration::ZERO, id).await.unwrap();
    }
    let worker = queue.clone();
    let running = tokio::spawn(async move {
        worker
            .run(3, |job| async move {
                match job.id() {
                    "errs" => Err(format!("no stock for {}", job.id())),
                    "panics" => panic!("index out of bounds"),
                    _ => Ok(()),
                }
            })
            .await
    });
    let expect = [
        ("errs", "no stock for errs"),
        ("panics", "panicked: index out of bounds"),
    ];
    for (id, error) in expect {
        // The failure commits after the handler returns: wait until the store has it.
        let info = loop {
            match queue.get(id).await.unwrap() {
                Some(info) if info.last_error().is_some() => break info,
                _ => tokio::time::sleep(ms(5)).await,
            }
        };
        assert_eq!(
            (info.state(), info.attempt(), info.last_error()),
            (JobState::Pending, 1, Some(error))
        );
    }
    while queue.get("ok").await.unwrap().is_some() {
        tokio::time::sleep(ms(5)).await;
    }
    queue.close().await.unwrap();
    running.await.unwrap().expect("run ends cleanly on close");
}

pub async fn an_ended_lease_is_the_last_error(h: impl Harness) {
    let queue = open(&h, |b| {
        b.lease(MIN_LEASE).max_attempts(2);
    })
    .await;
    queue.schedule("lapses", Duration::ZERO, "p").await.unwrap();
    let mut consumer = queue.consume();
    let first = next(&mut consumer).await;
    assert_eq!(
        queue.get("lapses").await.unwrap().unwrap().last_error(),
        None,
        "a first delivery has no error"
    );
    drop(first);
    let second = next(&mut consumer).await; // its lease ended: delivered again
    assert_eq!(second.attempt(), 2);
    let info = queue.get("lapses").await.unwrap().unwrap();
    assert_eq!(
        (info.state(), info.last_error()),
        (JobState::Running, Some("lease expired"))
    );
    drop(second);
    // The marker is due after the second lease ends, and claims go in due order.
    queue
        .schedule("marker", MIN_LEASE + ms(300), "p")
        .await
        .unwrap();
    assert_eq!(next(&mut consumer).await.id(), "marker");
    let info = queue.get("lapses").await.unwrap().unwrap();
    assert_eq!(
        (info.state(), info.last_error()),
        (JobState::Dead, Some("lease expired"))
    );
    queue.close().await.unwrap();
}

/// Every job of `state`, read `limit` at a time; ids in order.
async fn list_all(queue: &JobQueue, state: JobState, limit: usize) -> Vec<String> {
    let mut ids = Vec::new();
    let mut options = ListOptions::new();
    options.limit(limit);
    loop {
        let page = queue.list(state, &options).await.unwrap();
        assert!(page.jobs().len() <= limit);
        ids.extend(page.jobs().iter().map(|j| j.id().to_owned()));
        match page.cursor() {
            Some(cursor) => options.after(cursor),
            None => return ids,
        };
    }
}

pub async fn counts_follow_the_states(h: impl Harness) {
    let queue = open(&h, |b| {
        b.max_attempts(1);
    })
    .await;
    let c = queue.counts().await.unwrap();
    assert_eq!(
        (c.pending, c.running, c.dead, c.paused, c.next_due),
        (0, 0, 0, false, None)
    );
    let later = SystemTime::now() + Duration::from_secs(3600);
    queue.schedule("later", later, "p").await.unwrap();
    for id in ["runs", "dies"] {
        queue.schedule(id, Duration::ZERO, "p").await.unwrap();
    }
    let mut consumer = queue.consume();
    let (a, b) = (next(&mut consumer).await, next(&mut consumer).await);
    let dies = if a.id() == "dies" { a } else { b };
    assert!(dies.fail(ms(0), "no").await.unwrap()); // its only attempt: dead
    let c = queue.counts().await.unwrap();
    assert_eq!((c.pending, c.running, c.dead), (1, 1, 1));
    assert_eq!(
        c.next_due,
        Some(later),
        "the pending job's run_at, not the running job's lease end"
    );
    assert_eq!(c.pending, queue.pending().await.unwrap());
    assert_eq!(c.running, queue.running().await.unwrap());
    queue.close().await.unwrap();
}

pub async fn list_pages_through_inserts_and_deletes(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    let base = SystemTime::now() + Duration::from_secs(3600);
    let at = |i: u64| base + Duration::from_secs(i);
    for i in 0..10 {
        queue
            .schedule(&format!("j{i}"), at(10 * i), "p")
            .await
            .unwrap();
    }
    let mut options = ListOptions::new();
    options.limit(3);
    let mut seen: Vec<String> = Vec::new();
    let mut pages = 0;
    loop {
        let page = queue.list(JobState::Pending, &options).await.unwrap();
        for job in page.jobs() {
            assert_eq!(job.state(), JobState::Pending);
            assert_eq!(job.payload(), b"p");
            seen.push(job.id().to_owned());
        }
        pages += 1;
        if pages == 1 {
            // Between pages: a job before the cursor (not shown: the listing is past it),
            // one after it (shown), one not yet shown cancelled, one shown cancelled.
            queue.schedule("before", at(1), "p").await.unwrap();
            queue.schedule("after", at(55), "p").await.unwrap();
            assert!(queue.cancel("j7").await.unwrap());
            assert!(queue.cancel("j0").await.unwrap());
        }
        match page.cursor() {
            Some(cursor) => options.after(cursor),
            None => break,
        };
    }
    let expect = [
        "j0", "j1", "j2", "j3", "j4", "j5", "after", "j6", "j8", "j9",
    ];
    assert_eq!(seen, expect, "each job once, in due order, none skipped");
    queue.close().await.unwrap();
}

pub async fn list_pages_through_equal_due_times(h: impl Harness) {
    // One due time for many jobs (a batch scheduled together): pages must still resume
    // exactly after their last job.
    let queue = open(&h, |_| {}).await;
    let at = SystemTime::now() + Duration::from_secs(3600);
    let ids: Vec<String> = (0..23).map(|i| format!("same-{i:02}")).collect();
    queue
        .schedule_many(ids.iter().map(|id| (id.clone(), at, "p")))
        .await
        .unwrap();
    for limit in [1, 2, 5, 23, 1000] {
        assert_eq!(
            list_all(&queue, JobState::Pending, limit).await,
            ids,
            "limit {limit}"
        );
    }
    // A page ending inside the group, then jobs of that group removed and added around
    // the cursor.
    let page = queue
        .list(JobState::Pending, ListOptions::new().limit(10))
        .await
        .unwrap();
    let cursor = page.cursor().unwrap().clone();
    assert!(
        queue.cancel("same-09").await.unwrap(),
        "the cursor's own job"
    );
    assert!(queue.cancel("same-15").await.unwrap());
    queue.schedule("same-09a", at, "p").await.unwrap();
    queue.schedule("same-00a", at, "p").await.unwrap();
    let rest = queue
        .list(
            JobState::Pending,
            ListOptions::new().limit(1000).after(&cursor),
        )
        .await
        .unwrap();
    let got: Vec<&str> = rest.jobs().iter().map(|j| j.id()).collect();
    let mut expect: Vec<&str> = ids[10..].iter().map(String::as_str).collect();
    expect.retain(|id| *id != "same-15");
    expect.insert(0, "same-09a");
    assert_eq!(got, expect);
    queue.close().await.unwrap();
}

pub async fn list_running_and_dead_jobs(h: impl Harness) {
    // One job a claim: each later claim gives a later lease end, the running list's order.
    let queue = open(&h, |b| {
        b.max_attempts(1).prefetch(1);
    })
    .await;
    let now = SystemTime::now();
    for (i, id) in ["r0", "r1", "r2", "d1", "d2", "d3"].into_iter().enumerate() {
        let at = now - Duration::from_secs(100 - i as u64);
        queue.schedule(id, at, id).await.unwrap();
    }
    queue
        .schedule("later", Duration::from_secs(3600), "p")
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let mut held = Vec::new();
    for _ in 0..6 {
        held.push(next(&mut consumer).await);
    }
    // Claimed in due order (within a partition): the running ones' lease ends in that order.
    let by_lease_end: Vec<String> = held
        .iter()
        .map(|d| d.id().to_owned())
        .filter(|id| id.starts_with('r'))
        .collect();
    held.sort_by(|a, b| a.id().cmp(b.id()));
    // d1, d2, d3 die one after the other (their only attempt fails).
    for d in held.drain(..3) {
        assert!(d.fail(ms(0), format!("{} failed", d.id())).await.unwrap());
    }
    assert_eq!(list_all(&queue, JobState::Running, 2).await, by_lease_end);
    if h.ordered() {
        assert_eq!(by_lease_end, ["r0", "r1", "r2"]);
    }
    let dead = queue
        .list(JobState::Dead, ListOptions::new().limit(2))
        .await
        .unwrap();
    let first: Vec<(&str, Option<&str>)> = dead
        .jobs()
        .iter()
        .map(|j| (j.id(), j.last_error()))
        .collect();
    assert_eq!(
        first,
        [("d3", Some("d3 failed")), ("d2", Some("d2 failed"))],
        "most recently dead first"
    );
    assert_eq!(
        list_all(&queue, JobState::Dead, 2).await,
        ["d3", "d2", "d1"]
    );
    assert_eq!(list_all(&queue, JobState::Pending, 2).await, ["later"]);
    for r in held {
        assert!(r.ack().await.unwrap());
    }
    assert!(list_all(&queue, JobState::Running, 2).await.is_empty());
    queue.close().await.unwrap();
}

/// `payloads(false)`: the same page, every field but the payload, which is left out (a
/// listing that shows none reads none); pages with payloads carry them.
pub async fn list_without_payloads_leaves_them_out(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    for (i, id) in ["a", "b", "c"].into_iter().enumerate() {
        let at = SystemTime::now() + Duration::from_secs(60 + i as u64);
        queue
            .schedule(id, at, format!("payload of {id}"))
            .await
            .unwrap();
    }
    let whole = queue
        .list(JobState::Pending, &ListOptions::new())
        .await
        .unwrap();
    let bare = queue
        .list(JobState::Pending, ListOptions::new().payloads(false))
        .await
        .unwrap();
    assert_eq!(whole.jobs().len(), 3);
    assert_eq!(bare.jobs().len(), 3);
    for (with, without) in whole.jobs().iter().zip(bare.jobs()) {
        assert_eq!(
            with.payload(),
            format!("payload of {}", with.id()).as_bytes()
        );
        assert!(without.payload().is_empty(), "{}", without.id());
        assert_eq!(
            (
                with.id(),
                with.state(),
                with.run_at(),
                with.attempt(),
                with.last_error()
            ),
            (
                without.id(),
                without.state(),
                without.run_at(),
                without.attempt(),
                without.last_error()
            )
        );
    }
    assert_eq!(whole.cursor(), bare.cursor());
    queue.close().await.unwrap();
}

pub async fn list_refuses_bad_limits_and_cursors(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    for id in ["a", "b"] {
        queue
            .schedule(id, Duration::from_secs(60), "p")
            .await
            .unwrap();
    }
    for limit in [0, ListOptions::MAX_LIMIT + 1] {
        let err = queue
            .list(JobState::Pending, ListOptions::new().limit(limit))
            .await
            .unwrap_err();
        assert!(err.is_invalid_input(), "limit {limit}: {err}");
    }
    let full = queue
        .list(
            JobState::Pending,
            ListOptions::new().limit(ListOptions::MAX_LIMIT),
        )
        .await
        .unwrap();
    assert_eq!(full.jobs().len(), 2);
    let page = queue
        .list(JobState::Pending, ListOptions::new().limit(1))
        .await
        .unwrap();
    let cursor = page.cursor().unwrap();
    for other in [JobState::Running, JobState::Dead] {
        let err = queue
            .list(other, ListOptions::new().after(cursor))
            .await
            .unwrap_err();
        assert!(err.is_invalid_input(), "{err}");
    }
    // Its text form round-trips; garbage and a tampered cursor do not parse.
    let text = cursor.to_string();
    let parsed: Cursor = text.parse().unwrap();
    let rest = queue
        .list(JobState::Pending, ListOptions::new().after(&parsed))
        .await
        .unwrap();
    assert_eq!(
        rest.jobs().iter().map(|j| j.id()).collect::<Vec<_>>(),
        ["b"]
    );
    let mut tampered = text.into_bytes();
    let last = tampered.len() - 1;
    tampered[last] = if tampered[last] == b'0' { b'1' } else { b'0' };
    for garbage in [
        "",
        "zz",
        "not a cursor",
        std::str::from_utf8(&tampered).unwrap(),
    ] {
        let err = garbage.parse::<Cursor>().unwrap_err();
        assert!(err.is_invalid_input(), "{garbage:?}: {err}");
    }
    queue.close().await.unwrap();
}

/// Kills each of `ids` (scheduled due now) by failing its only attempt.
async fn kill(queue: &JobQueue, ids: &[&str]) {
    for id in ids {
        queue.schedule(id, Duration::ZERO, *id).await.unwrap();
    }
    let mut consumer = queue.consume();
    for _ in ids {
        let d = next(&mut consumer).await;
        assert!(d.fail(ms(0), format!("{} broke", d.id())).await.unwrap());
    }
    for id in ids {
        assert_eq!(
            queue.get(id).await.unwrap().unwrap().state(),
            JobState::Dead
        );
    }
}

pub async fn revive_sends_a_dead_job_back(h: impl Harness) {
    let queue = open(&h, |b| {
        b.max_attempts(1);
    })
    .await;
    kill(&queue, &["dead"]).await;
    queue
        .schedule("pending", Duration::from_secs(3600), "p")
        .await
        .unwrap();
    assert!(!queue.revive("pending", Duration::ZERO).await.unwrap());
    assert!(!queue.revive("unknown", Duration::ZERO).await.unwrap());
    assert!(queue
        .revive("", Duration::ZERO)
        .await
        .unwrap_err()
        .is_invalid_id());
    assert!(queue.revive("dead", Duration::ZERO).await.unwrap());
    let info = queue.get("dead").await.unwrap().unwrap();
    assert_eq!(
        (info.state(), info.attempt(), info.last_error()),
        (JobState::Pending, 0, Some("dead broke")),
        "attempts from zero, the error kept"
    );
    let mut consumer = queue.consume();
    let again = next(&mut consumer).await;
    assert_eq!(
        (again.id(), again.attempt()),
        ("dead", 1),
        "delivered again"
    );
    let running = queue.get("dead").await.unwrap().unwrap();
    assert_eq!(
        (running.state(), running.last_error()),
        (JobState::Running, Some("dead broke"))
    );
    assert!(
        !queue.revive("dead", Duration::ZERO).await.unwrap(),
        "a running job is not revived"
    );
    assert!(again.ack().await.unwrap());
    let c = queue.counts().await.unwrap();
    assert_eq!((c.pending, c.running, c.dead), (1, 0, 0));
    queue.close().await.unwrap();
}

pub async fn revive_all_dead_sends_every_dead_job_back(h: impl Harness) {
    let queue = open(&h, |b| {
        b.max_attempts(1);
    })
    .await;
    let ids = ["d0", "d1", "d2", "d3", "d4"];
    kill(&queue, &ids).await;
    let later = SystemTime::now() + Duration::from_secs(3600);
    assert_eq!(queue.revive_all_dead(later).await.unwrap(), 5);
    assert_eq!(queue.revive_all_dead(later).await.unwrap(), 0);
    let c = queue.counts().await.unwrap();
    assert_eq!((c.pending, c.dead, c.next_due), (5, 0, Some(later)));
    let mut pending = list_all(&queue, JobState::Pending, 10).await;
    pending.sort();
    assert_eq!(pending, ids);
    for id in ids {
        let info = queue.get(id).await.unwrap().unwrap();
        assert_eq!((info.attempt(), info.run_at()), (0, later));
    }
    queue.close().await.unwrap();
}

/// A wheel of one-hour ticks: a consumer sleeping on it wakes during a test only if told to.
pub fn hour_ticks() -> wheel_timer::Timer {
    wheel_timer::Timer::builder()
        .tick(Duration::from_secs(3600))
        .build()
        .unwrap()
}

/// Spawns a consumer of `queue` waiting for one delivery, and returns once it has claimed
/// and found nothing (it sleeps on `timer`); the task yields the delivered id.
pub async fn idle_consumer(
    queue: &JobQueue,
    timer: &wheel_timer::Timer,
) -> tokio::task::JoinHandle<String> {
    let mut consumer = queue.consume();
    let waiting = tokio::spawn(async move { next(&mut consumer).await.id().to_owned() });
    while timer.pending() == 0 {
        tokio::task::yield_now().await;
    }
    waiting
}

pub async fn pause_stops_claims_across_a_reopen_and_resume_wakes_consumers(h: impl Harness) {
    let timer = hour_ticks();
    let configure = |b: &mut wheel_jobs::Builder| {
        b.timer(timer.clone());
    };
    let queue = open(&h, configure).await;
    queue.schedule("held", Duration::ZERO, "p").await.unwrap();
    queue
        .schedule("cancelled", Duration::from_secs(60), "p")
        .await
        .unwrap();
    let held = next(&mut queue.consume()).await;
    queue.pause().await.unwrap();
    queue.pause().await.unwrap(); // idempotent
    assert!(queue.counts().await.unwrap().paused);
    // Everything but claims goes on.
    assert_eq!(
        queue.schedule("waits", Duration::ZERO, "p").await.unwrap(),
        Scheduled::Created
    );
    assert!(queue.cancel("cancelled").await.unwrap());
    assert!(held.extend(Duration::from_secs(60)).await.unwrap());
    assert!(held.ack().await.unwrap());
    // A consumer claims, finds nothing to lease, and sleeps.
    let waiting = idle_consumer(&queue, &timer).await;
    let info = queue.get("waits").await.unwrap().unwrap();
    assert_eq!((info.state(), info.attempt()), (JobState::Pending, 0));
    waiting.abort();
    queue.close().await.unwrap();

    let queue = open(&h, configure).await;
    let c = queue.counts().await.unwrap();
    assert!(c.paused, "durable across a reopen");
    assert_eq!((c.pending, c.running), (1, 0));
    assert!(
        c.next_due.unwrap() <= SystemTime::now(),
        "due, waiting for the resume"
    );
    let waiting = idle_consumer(&queue, &timer).await;
    queue.resume().await.unwrap();
    // Its sleep lasts an hour: only the resume's wakeup brings the job now; the bound only
    // turns a missing wakeup into a failure.
    let woken = tokio::time::timeout(Duration::from_secs(30), waiting).await;
    assert_eq!(woken.expect("resume wakes the consumer").unwrap(), "waits");
    assert!(!queue.counts().await.unwrap().paused);
    queue.close().await.unwrap();
}

#[cfg(feature = "serde")]
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct RateOrder {
    order: u64,
    stars: u8,
}

#[cfg(feature = "serde")]
pub async fn typed_payloads_round_trip_and_undecodable_ones_die(h: impl Harness) {
    let queue = open(&h, |b| {
        b.max_attempts(2).backoff(ms(1), ms(1));
    })
    .await;
    let typed = queue.typed::<RateOrder>();
    let order = RateOrder {
        order: 42,
        stars: 5,
    };
    assert_eq!(
        typed
            .schedule("rate:42", Duration::ZERO, &order)
            .await
            .unwrap(),
        Scheduled::Created
    );
    let more = [(1, 3), (2, 4)].map(|(order, stars)| RateOrder { order, stars });
    let created = typed
        .schedule_many(
            more.iter()
                .map(|o| (format!("rate:{}", o.order), Duration::ZERO, o)),
        )
        .await
        .unwrap();
    assert_eq!(created, [Scheduled::Created; 2]);
    let stored = queue.get("rate:42").await.unwrap().unwrap();
    assert_eq!(
        stored.payload(),
        br#"{"order":42,"stars":5}"#,
        "JSON in the store"
    );
    // Not a RateOrder: scheduled untyped, as another program (or a bug) might.
    queue
        .schedule("garbage", Duration::ZERO, "5 stars")
        .await
        .unwrap();

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = typed.clone();
    let running = tokio::spawn(async move {
        worker
            .run(4, move |job| {
                let tx = tx.clone();
                async move {
                    tx.send((job.id().to_owned(), job.payload().clone()))
                        .unwrap();
                    Ok::<(), String>(())
                }
            })
            .await
    });
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(rx.recv().await.unwrap());
    }
    got.sort_by_key(|(_, o)| o.order);
    let expect = [
        ("rate:1", &more[0]),
        ("rate:2", &more[1]),
        ("rate:42", &order),
    ];
    assert_eq!(got, expect.map(|(id, o)| (id.to_owned(), o.clone())));
    // The undecodable payload failed both its attempts without reaching the handler.
    let dead = loop {
        match queue.get("garbage").await.unwrap() {
            Some(info) if info.state() == JobState::Dead => break info,
            _ => tokio::time::sleep(ms(5)).await,
        }
    };
    let error = dead.last_error().unwrap();
    assert!(
        error.starts_with("the payload does not decode as") && error.contains("RateOrder"),
        "{error}"
    );
    assert_eq!(dead.attempt(), 2);
    assert!(rx.try_recv().is_err(), "the handler never saw it");
    queue.close().await.unwrap();
    running.await.unwrap().expect("run ends cleanly on close");
}
