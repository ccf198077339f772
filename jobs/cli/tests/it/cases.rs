//! Every subcommand on a backend, written once and run on each by `cli_suite!`.

use std::time::{Duration, SystemTime};

use wheel_jobs::{JobQueue, JobState};

use crate::run::{on, run_with_input, Place};
use crate::support::busy_and_failed;

macro_rules! cli_suite {
    ($harness:expr) => {
        cli_suite!($harness;
            schedule_get_stats_and_cancel,
            running_and_dead_jobs_are_reported_and_purged,
            serve_shows_the_queue_and_stops_on_sigterm,
        );
    };
    ($harness:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                crate::cases::$name($harness).await
            }
        )*
    };
}

pub async fn schedule_get_stats_and_cancel(place: impl Place) {
    assert_eq!(
        on(
            &place,
            &["schedule", "a", "--in", "48h", "--payload", "5 stars"]
        )
        .await
        .ok(),
        "created a\n"
    );
    let again = on(&place, &["schedule", "a", "--in", "1s", "--json"])
        .await
        .json();
    assert_eq!(again, serde_json::json!({ "id": "a", "outcome": "exists" }));

    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), [0x00, 0xff, 0x10]).unwrap();
    let path = file.path().to_str().unwrap();
    let at = "2030-12-01T20:00:00+08:00";
    on(
        &place,
        &["schedule", "b", "--at", at, "--payload-file", path],
    )
    .await
    .ok();
    let mut args = place.args();
    args.extend(["schedule", "c", "--in", "2d 3h", "--payload-file", "-"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_with_input(&args, "from stdin".as_bytes()).await.ok();

    let a = on(&place, &["get", "a", "--json"]).await.json();
    assert_eq!(a["id"], "a");
    assert_eq!(a["state"], "pending");
    assert_eq!(a["attempt"], 0);
    assert_eq!(a["payload"], "5 stars");
    assert_eq!(a["payload_encoding"], "utf-8");
    let run_at: jiff::Timestamp = a["run_at"].as_str().unwrap().parse().unwrap();
    let run_at = SystemTime::from(run_at);
    let ahead = run_at.duration_since(SystemTime::now()).unwrap();
    assert!(
        ahead > Duration::from_secs(47 * 3600) && ahead <= Duration::from_secs(48 * 3600),
        "{ahead:?}"
    );

    let b = on(&place, &["get", "b", "--json"]).await.json();
    assert_eq!(b["run_at"], "2030-12-01T12:00:00Z");
    assert_eq!(
        (&b["payload"], &b["payload_encoding"]),
        (&"00ff10".into(), &"hex".into())
    );
    let text = on(&place, &["get", "b"]).await;
    for line in [
        "id       b",
        "state    pending",
        "run_at   2030-12-01T12:00:00Z (in ",
        "attempt  0",
        "payload  (3 bytes, hex) 00ff10",
    ] {
        assert!(text.ok().contains(line), "{line} not in {text:?}");
    }
    assert_eq!(
        on(&place, &["get", "c", "--json"]).await.json()["payload"],
        "from stdin"
    );

    let stats = on(&place, &["--json", "stats"]).await.json();
    assert_eq!(stats, serde_json::json!({ "pending": 3, "running": 0 }));
    assert_eq!(
        on(&place, &["stats"]).await.ok(),
        "pending  3\nrunning  0\n"
    );

    assert_eq!(on(&place, &["cancel", "a"]).await.ok(), "cancelled a\n");
    assert_eq!(
        on(&place, &["cancel", "a"]).await.failed(1),
        r#"wheel-jobs: no job "a" (never scheduled, or cancelled, acked or removed)"#
    );
    assert_eq!(
        on(&place, &["get", "a", "--json"]).await.failed(1),
        r#"wheel-jobs: no job "a" (never scheduled, or cancelled, acked or removed)"#
    );
    let cancelled = on(&place, &["cancel", "b", "--json"]).await.json();
    assert_eq!(
        cancelled,
        serde_json::json!({ "id": "b", "cancelled": true })
    );
    assert_eq!(on(&place, &["stats", "--json"]).await.json()["pending"], 1);
}

pub async fn running_and_dead_jobs_are_reported_and_purged(place: impl Place) {
    // Through the library: "busy" running under a long lease, "failed" dead.
    let queue = place
        .open(
            JobQueue::builder()
                .max_attempts(1)
                .lease(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    busy_and_failed(&queue).await;
    assert_eq!(
        queue.get("failed").await.unwrap().unwrap().state(),
        JobState::Dead
    );
    queue.close().await.unwrap(); // the embedded store is one process at a time

    let stats = on(&place, &["stats", "--json"]).await.json();
    assert_eq!(stats, serde_json::json!({ "pending": 0, "running": 1 }));
    assert_eq!(
        on(&place, &["cancel", "busy"]).await.failed(1),
        r#"wheel-jobs: "busy" is running, not pending: nothing was cancelled"#
    );
    assert_eq!(
        on(&place, &["cancel", "failed"]).await.failed(1),
        r#"wheel-jobs: "failed" is dead, not pending: nothing was cancelled"#
    );
    let failed = on(&place, &["get", "failed", "--json"]).await.json();
    assert_eq!(
        (&failed["state"], &failed["attempt"]),
        (&"dead".into(), &1.into())
    );
    assert_eq!(
        on(&place, &["purge-dead", "--json"]).await.json(),
        serde_json::json!({ "purged": 1 })
    );
    assert_eq!(
        on(&place, &["purge-dead"]).await.ok(),
        "purged 0 dead jobs\n"
    );
    on(&place, &["get", "failed"]).await.failed(1);
    assert_eq!(
        on(&place, &["get", "busy", "--json"]).await.json()["state"],
        "running"
    );
}

pub async fn serve_shows_the_queue_and_stops_on_sigterm(place: impl Place) {
    on(&place, &["schedule", "a", "--in", "1h"]).await.ok();
    let server = crate::serve::Served::start(&place, &[]).await;
    let page = server.get("/", None).await;
    assert_eq!(page.status, 200, "{page:?}");
    assert!(
        page.body
            .contains(r#"<span class="n" id="pending">1</span>"#),
        "{page:?}"
    );
    let job = server.get("/job?id=a", None).await;
    assert!(job.body.contains(r#"id="state">pending</span>"#), "{job:?}");
    server.stop().await;
    assert_eq!(on(&place, &["stats", "--json"]).await.json()["pending"], 1);
}
