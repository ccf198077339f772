//! A [`Recorder`] installed before the queue opens gives the overview its rates and
//! `/metrics` the queue's series. The recorder is this thread's for the open only (the
//! queue registers its metrics then), so tests in parallel do not share it.

use std::time::Duration;

use axum::http::StatusCode;
use wheel_jobs::console::{Console, Recorder};
use wheel_jobs::JobQueue;

use super::client::Client;
use crate::support::{embedded, next};

#[tokio::test(flavor = "current_thread")]
async fn a_recorder_gives_the_overview_rates_and_metrics_the_queues_series() {
    let h = embedded::harness();
    let recorder = Recorder::new();
    let queue = {
        let _this_thread = metrics::set_default_local_recorder(&recorder);
        JobQueue::open(h.path()).await.unwrap()
    };
    for id in ["a", "b", "c"] {
        queue.schedule(id, Duration::ZERO, "").await.unwrap();
    }
    let mut consumer = queue.consume();
    for _ in 0..3 {
        let delivery = next(&mut consumer).await;
        if delivery.id() == "c" {
            assert!(delivery
                .fail(Duration::from_secs(3600), "boom")
                .await
                .unwrap());
        } else {
            assert!(delivery.ack().await.unwrap());
        }
    }
    drop(consumer);

    let client = Client::new(Console::new(queue.clone()).recorder(recorder).router());
    client
        .get("/")
        .await
        .shows(
            StatusCode::OK,
            &[
                r#"delivered / min <span class="muted">(3)</span>"#,
                r#"failed / min <span class="muted">(1)</span>"#,
                r#"<span class="n small" id="lateness">≤ "#,
                // The chart: a bar per minute, the last one now.
                r#"<rect class="delivered" x="590""#,
            ],
        )
        .lacks(&[r#"id="no-rates""#]);
    // 3 since the queue opened, this minute (or the one before, if a minute began since):
    // not 3 over a whole hour (0.05, shown as 0.1).
    let overview = client.get("/").await.body;
    assert!(
        overview.contains(r#"id="delivered-rate">3.0</span>"#)
            || overview.contains(r#"id="delivered-rate">1.5</span>"#),
        "{overview}"
    );

    let metrics = client.get("/metrics").await;
    metrics.shows(
        StatusCode::OK,
        &[
            "# TYPE wheel_jobs_delivered_total counter\nwheel_jobs_delivered_total{queue=\"jobs\"} 3\n",
            "wheel_jobs_acked_total{queue=\"jobs\"} 2\n",
            "wheel_jobs_failed_total{queue=\"jobs\"} 1\n",
            // The failed job waits for its retry; the gauges are read at the request.
            "wheel_jobs_pending{queue=\"jobs\"} 1\n",
            "wheel_jobs_running{queue=\"jobs\"} 0\n",
            "wheel_jobs_lateness_seconds_count{queue=\"jobs\"} 3\n",
            "wheel_jobs_lateness_seconds_bucket{queue=\"jobs\",le=\"+Inf\"} 3\n",
        ],
    );
    queue.close().await.unwrap();
}

/// Two queues of one process recorded by one recorder: each console shows its own queue's
/// rates, not their sum.
#[tokio::test(flavor = "current_thread")]
async fn each_console_shows_the_rates_of_its_own_queue() {
    let h = embedded::harness();
    let recorder = Recorder::new();
    let (jobs, other) = {
        let _this_thread = metrics::set_default_local_recorder(&recorder);
        (
            JobQueue::open(h.path()).await.unwrap(),
            JobQueue::open(h.dir.path().join("other.redb"))
                .await
                .unwrap(),
        )
    };
    assert_eq!((jobs.name(), other.name()), ("jobs", "other"));
    for (queue, n) in [(&jobs, 3), (&other, 60)] {
        for i in 0..n {
            queue
                .schedule(&format!("j{i}"), Duration::ZERO, "")
                .await
                .unwrap();
        }
        let mut consumer = queue.consume();
        for _ in 0..n {
            assert!(next(&mut consumer).await.ack().await.unwrap());
        }
    }
    for (queue, shown) in [(&jobs, "(3)"), (&other, "(60)")] {
        let client = Client::new(
            Console::new(queue.clone())
                .recorder(recorder.clone())
                .router(),
        );
        let delivered = format!(r#"delivered / min <span class="muted">{shown}</span>"#);
        client.get("/").await.shows(StatusCode::OK, &[&delivered]);
    }
    jobs.close().await.unwrap();
    other.close().await.unwrap();
}
