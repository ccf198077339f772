//! `run` (acks, retries, lease renewals, recorded errors and panics) and `close`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wheel_jobs::{JobQueue, JobState};

use super::open;
use crate::support::{ms, Harness};

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
