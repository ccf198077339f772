//! The metrics a queue records (feature `metrics`), read back through `metrics-util`'s
//! debugging recorder, on each backend. One recorder serves the whole test binary, so each
//! test's queue has its own `queue` label, and snapshots (which reset what they read) are
//! folded into one tally shared by the tests.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use wheel_jobs::{JobQueue, MIN_LEASE};

use crate::support::{ms, next};

/// Counters summed, gauges' last values, histograms' sample counts: per (label, name).
#[derive(Default)]
struct Tally(HashMap<(String, String), f64>);

fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this binary");
        snapshotter
    })
}

/// Every metric of the queue labelled `label` so far.
fn read(label: &str) -> HashMap<String, f64> {
    static TALLY: OnceLock<Mutex<Tally>> = OnceLock::new();
    let mut tally = TALLY.get_or_init(Mutex::default).lock().unwrap();
    for (key, _, _, value) in snapshotter().snapshot().into_vec() {
        let key = key.key();
        let queue = key
            .labels()
            .find(|l| l.key() == "queue")
            .map(|l| l.value().to_owned())
            .unwrap_or_default();
        let slot = tally.0.entry((queue, key.name().to_owned())).or_default();
        match value {
            DebugValue::Counter(n) => *slot += n as f64,
            DebugValue::Gauge(v) => *slot = v.into_inner(),
            DebugValue::Histogram(samples) => *slot += samples.len() as f64,
        }
    }
    tally
        .0
        .iter()
        .filter(|((queue, _), _)| queue == label)
        .map(|((_, name), value)| (name.clone(), *value))
        .collect()
}

/// Every event a metric counts, on `queue`, whose label is `label`.
async fn exercise(queue: JobQueue, label: &str) {
    // What came before (nothing: the label is this test's own).
    read(label);
    queue.schedule("a", Duration::ZERO, "p").await.unwrap();
    queue.schedule("b", Duration::ZERO, "p").await.unwrap();
    let more = ["c", "d"].map(|id| (id, Duration::ZERO, "p"));
    queue.schedule_many(more).await.unwrap();
    let mut consumer = queue.consume();
    let mut first = HashMap::new();
    for _ in 0..4 {
        let d = next(&mut consumer).await;
        first.insert(d.id().to_owned(), d);
    }
    assert!(first["a"].ack().await.unwrap());
    assert!(first["b"].fail(ms(0), "broke").await.unwrap());
    assert!(first["c"].retry(ms(0)).await.unwrap());
    drop(first); // d's lease runs out
    for _ in 0..3 {
        let d = next(&mut consumer).await;
        match d.id() {
            "b" => assert!(d.fail(ms(0), "broke again").await.unwrap()), // its last attempt
            "c" => assert!(d.ack().await.unwrap()),
            _ => drop(d), // d's last lease runs out too
        }
    }
    // Due after d's second lease ended: its claim finds d and kills it.
    queue
        .schedule("marker", MIN_LEASE + ms(300), "p")
        .await
        .unwrap();
    let marker = next(&mut consumer).await;
    assert_eq!(marker.id(), "marker");
    assert!(marker.ack().await.unwrap());
    drop(consumer);
    assert_eq!(queue.revive_all_dead(Duration::ZERO).await.unwrap(), 2);
    let worker = queue.clone();
    let running =
        tokio::spawn(async move { worker.run(2, |_| async { Ok::<(), String>(()) }).await });
    loop {
        let c = queue.counts().await.unwrap();
        if (c.pending, c.running) == (0, 0) {
            break;
        }
        tokio::time::sleep(ms(5)).await;
    }
    queue.pause().await.unwrap();
    queue.counts().await.unwrap();
    queue.close().await.unwrap();
    running.await.unwrap().unwrap();

    let got = read(label);
    let expect = [
        ("wheel_jobs_scheduled_total", 5.0),
        ("wheel_jobs_delivered_total", 10.0), // 4, then 3, the marker, then b and d again
        ("wheel_jobs_acked_total", 5.0),
        ("wheel_jobs_failed_total", 2.0),
        ("wheel_jobs_retried_total", 1.0),
        ("wheel_jobs_dead_total", 2.0), // b by its failure, d at a claim
        ("wheel_jobs_revived_total", 2.0),
        // One sample per first delivery: 4, the marker, then b and d revived (attempts
        // from zero); not the 3 redeliveries.
        ("wheel_jobs_lateness_seconds", 7.0),
        ("wheel_jobs_handler_seconds", 2.0), // one per handler `run` ran
        ("wheel_jobs_pending", 0.0),
        ("wheel_jobs_running", 0.0),
        ("wheel_jobs_dead", 0.0),
        ("wheel_jobs_paused", 1.0),
    ];
    for (name, value) in expect {
        assert_eq!(got.get(name), Some(&value), "{name}: {got:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_queue_reports_every_event() {
    // Installed before the queue registers its handles at open.
    snapshotter();
    let dir = tempfile::tempdir().unwrap();
    // The label is the file name without its extension.
    let queue = JobQueue::builder()
        .lease(MIN_LEASE)
        .max_attempts(2)
        .open(dir.path().join("metrics-embedded.redb"))
        .await
        .unwrap();
    exercise(queue, "metrics-embedded").await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_queue_reports_every_event() {
    snapshotter();
    let server = crate::support::redis::RedisServer::start();
    let queue = JobQueue::builder()
        .lease(MIN_LEASE)
        .max_attempts(2)
        .redis(&server.url(), "metrics-redis")
        .await
        .unwrap();
    exercise(queue, "metrics-redis").await;
}
