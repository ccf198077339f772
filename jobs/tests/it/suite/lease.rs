//! A delivery's lease and what ends it: expiry, extend, retry, fail, ack, dead.

use std::time::{Duration, SystemTime};

use wheel_jobs::{JobState, Scheduled, MAX_ERROR_LEN, MIN_LEASE};

use super::open;
use crate::support::{ms, next, Harness};

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
