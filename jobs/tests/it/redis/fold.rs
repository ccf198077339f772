//! Acks folded into the next claim: a steady consumer pays about one request per job.

use wheel_jobs::{Delivery, JobQueue};

use super::{queue, script_calls};
use crate::support::redis::RedisServer;
use crate::support::{ms, next};

/// N sparse jobs, each acked twice while the consumer goes on: each job's acks ride on
/// the claim of the next one (so about N script calls, not 2N), the first answers true and
/// the second, now stale, false, and every job is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sparse_acks_ride_on_the_next_claim() {
    const N: u64 = 40;
    let server = RedisServer::start();
    let q = queue(&server, |_| {}).await;
    let jobs = (0..N).map(|i| (format!("job-{i}"), ms(200 + 5 * i), "p"));
    q.schedule_many(jobs).await.unwrap();
    let before = script_calls(&server);
    let mut consumer = q.consume();
    let mut acks = Vec::new();
    for _ in 0..N {
        let delivery = std::sync::Arc::new(next(&mut consumer).await);
        for _ in 0..2 {
            let delivery = delivery.clone();
            acks.push(tokio::spawn(async move { delivery.ack().await }));
        }
    }
    let mut answers = Vec::new();
    for ack in acks {
        answers.push(ack.await.unwrap().unwrap());
    }
    let calls = script_calls(&server) - before;
    for pair in answers.chunks(2) {
        assert_eq!(pair.iter().filter(|acked| **acked).count(), 1, "{pair:?}");
    }
    let counts = q.counts().await.unwrap();
    assert_eq!((counts.pending, counts.running), (0, 0));
    assert!(
        calls < N + N / 2,
        "{calls} script calls for {N} jobs: the acks were not folded"
    );
    drop(consumer);
    q.close().await.unwrap();
}

/// A queue whose job `a` was delivered (its consumer then dropped: no claim follows) while
/// `b` is due 10 ms later, so an ack of `a` is parked for a claim.
async fn a_delivered_with_b_due_next(server: &RedisServer) -> (JobQueue, Delivery) {
    let q = queue(server, |_| {}).await;
    q.schedule("a", ms(0), "p").await.unwrap();
    q.schedule("b", ms(10), "p").await.unwrap();
    let mut consumer = q.consume();
    let a = next(&mut consumer).await;
    assert_eq!(a.id(), "a");
    (q, a)
}

/// An ack parked for a claim that never comes (its consumer gone) is sent on its own once
/// the window passes: applied, not lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_ack_with_no_claim_after_it_is_still_applied() {
    let server = RedisServer::start();
    let (q, a) = a_delivered_with_b_due_next(&server).await;
    assert!(a.ack().await.unwrap());
    assert!(q.get("a").await.unwrap().is_none());
    // On a slow machine `b` may already have been due at the claim that took `a`: then it
    // is leased to the dropped consumer, and only it is running.
    let b_running = q.get("b").await.unwrap().unwrap().state() == wheel_jobs::JobState::Running;
    assert_eq!(q.running().await.unwrap(), u64::from(b_running));
    q.close().await.unwrap();
}

/// `close` hands parked acks to the ack batcher at once: an ack under way when the queue
/// closes is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_sends_parked_acks() {
    let server = RedisServer::start();
    let (q, a) = a_delivered_with_b_due_next(&server).await;
    let mut ack = Box::pin(a.ack());
    // One poll parks it (or sends it, had the window passed): under way before the close
    // starts, however loaded the machine.
    assert!(futures::poll!(ack.as_mut()).is_pending());
    let (closed, acked) = tokio::join!(q.close(), ack);
    closed.unwrap();
    assert!(acked.unwrap());
    let other = queue(&server, |_| {}).await;
    assert!(other.get("a").await.unwrap().is_none());
    assert_eq!(other.pending().await.unwrap(), 1);
    other.close().await.unwrap();
}
