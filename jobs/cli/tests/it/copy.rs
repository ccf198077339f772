//! `wheel-jobs copy`: a queue on each backend copied into a new store and back into another
//! queue of its backend, run twice (the second a no-op), with its refusals; run on every
//! backend by `cli_suite!` (through `cases.rs`).

use std::time::Duration;

use serde_json::json;
use wheel_jobs::{JobQueue, Recurrence};

use crate::run::{run, Place};
use crate::support::{busy_and_failed, FAILED_WITH};

/// `wheel-jobs copy <from> <to> <more>`.
async fn copy(from: &[String], to: &[String], more: &[&str]) -> crate::run::Ran {
    let mut args = vec!["copy".to_owned()];
    args.extend(from.iter().cloned());
    args.extend(to.iter().cloned());
    args.extend(more.iter().map(|a| a.to_string()));
    run(&args.iter().map(String::as_str).collect::<Vec<_>>()).await
}

pub async fn copy_moves_a_queue_and_again_writes_nothing(place: impl Place) {
    // Through the library: "busy" running under a long lease, "failed" dead, "later"
    // pending, and a series with its pending occurrence.
    let queue = place
        .open(
            JobQueue::builder()
                .max_attempts(1)
                .lease(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    busy_and_failed(&queue).await;
    queue
        .schedule("later", Duration::from_secs(48 * 3600), "5 stars")
        .await
        .unwrap();
    let nightly = Recurrence::cron("0 3 * * *").unwrap();
    queue
        .schedule_recurring("nightly", nightly, "n")
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("copy.redb");
    let into_store = ["--to".to_owned(), store.display().to_string()];
    let from = place.copy_end("from", false);
    if !place.is_store() {
        let line = copy(&from, &into_store, &[]).await;
        assert_eq!(
            line.failed(1),
            "wheel-jobs: the source queue is not paused: pause it (`wheel-jobs … pause`) and \
             stop its workers first, so that no job moves while it is copied"
        );
        assert!(!store.exists(), "nothing created");
        queue.pause().await.unwrap();
    }
    queue.close().await.unwrap(); // the embedded store is one process at a time

    let copied = copy(&from, &into_store, &["--json"]).await.json();
    assert_eq!(
        copied,
        json!({ "jobs": 4, "existing": 0, "running": 1, "series": 1, "existing_series": 0,
                "ended_series": 0 })
    );
    let again = copy(&from, &into_store, &[]).await;
    assert_eq!(
        again.ok(),
        "copied 0 jobs (4 already there)\ncopied 0 recurring series (1 already there)\n"
    );

    let in_store = |args: &'static [&'static str]| {
        let mut all = vec!["--store".to_owned(), store.display().to_string()];
        all.extend(args.iter().map(|a| a.to_string()));
        async move { run(&all.iter().map(String::as_str).collect::<Vec<_>>()).await }
    };
    let stats = in_store(&["stats", "--json"]).await.json();
    assert_eq!(
        (&stats["pending"], &stats["running"], &stats["dead"]),
        (&3.into(), &0.into(), &1.into())
    );
    let failed = in_store(&["get", "failed", "--json"]).await.json();
    assert_eq!(
        (&failed["state"], &failed["attempt"], &failed["last_error"]),
        (&"dead".into(), &1.into(), &FAILED_WITH.into())
    );
    let busy = in_store(&["get", "busy", "--json"]).await.json();
    assert_eq!(
        (&busy["state"], &busy["attempt"], &busy["payload"]),
        (&"pending".into(), &1.into(), &"b".into())
    );
    let later = in_store(&["get", "later", "--json"]).await.json();
    assert_eq!(later["payload"], "5 stars");

    // And back, into an empty queue beside the first on its backend.
    let from_store = ["--from".to_owned(), store.display().to_string()];
    let back = place.copy_end("to", true);
    let text = copy(&from_store, &back, &[]).await;
    assert_eq!(
        text.ok(),
        "copied 4 jobs (0 already there)\ncopied 1 recurring series (0 already there)\n"
    );
    let again = copy(&from_store, &back, &["--json"]).await.json();
    assert_eq!(
        (
            &again["jobs"],
            &again["existing"],
            &again["existing_series"]
        ),
        (&0.into(), &4.into(), &1.into())
    );
}

#[tokio::test]
async fn bad_copy_command_lines_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().join("to.redb");
    let to = to.to_str().unwrap();
    for (args, expected) in [
        (
            vec!["--store", "x.redb", "copy", "--from", "a.redb", "--to", to],
            "wheel-jobs: copy names its queues with --from and --to, not --store, --redis or \
             --postgres",
        ),
        (
            vec!["copy", "--from", "a.redb"],
            "wheel-jobs: the following required arguments were not provided: --to <PLACE>",
        ),
        (
            vec!["copy", "--from", "ftp://host/x", "--to", to],
            "wheel-jobs: --from: ftp:// is no kind of place: give a store's path, a redis://, \
             rediss://, redis+unix://, postgres:// or postgresql:// URL",
        ),
        (
            vec!["copy", "--from", "a.redb", "--to", "redis://127.0.0.1:1/"],
            "wheel-jobs: --to names a queue on Redis: give its name with --to-queue NAME",
        ),
        (
            vec!["copy", "--from", "postgres://h/db", "--to", to],
            "wheel-jobs: --from names a queue on PostgreSQL: give its name with --from-queue \
             NAME",
        ),
        (
            vec!["copy", "--from", "a.redb", "--from-queue", "q", "--to", to],
            "wheel-jobs: --from-queue names a queue on Redis or PostgreSQL; --from a.redb is a \
             store's path",
        ),
        (
            vec!["copy", "--from", to, "--to", to],
            "wheel-jobs: --from and --to name the same queue",
        ),
    ] {
        let line = run(&args).await;
        assert_eq!(line.failed(2), expected, "{args:?}");
    }
    assert!(!std::path::Path::new(to).exists(), "nothing was created");
}

/// `--queue`, `--partitions` or `--cluster` before `copy` would be silently unused: each end
/// has its own options.
#[cfg(feature = "redis")]
#[tokio::test]
async fn the_options_of_a_global_place_before_copy_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().join("to.redb");
    let to = to.to_str().unwrap();
    let from = ["--from", "redis://127.0.0.1:1/", "--from-queue", "q"];
    for global in [
        &["--queue", "X", "--partitions", "4"][..],
        &["--queue", "X"],
        &["--partitions", "1"],
        &["--cluster"],
    ] {
        let mut args = global.to_vec();
        args.push("copy");
        args.extend(from);
        args.extend(["--to", to]);
        let line = run(&args).await;
        assert_eq!(
            line.failed(2),
            "wheel-jobs: copy names its queues' options --from-queue, --to-queue, \
             --from-partitions and --to-partitions: --queue, --partitions and --cluster are \
             for the other commands",
            "{args:?}"
        );
    }
    assert!(!std::path::Path::new(to).exists(), "nothing was created");
}

/// An app that raised its `max_payload` stored a job above the default 1 MiB: `copy` opens
/// both ends with the largest limit, so the job is copied, its bytes whole.
#[tokio::test]
async fn a_payload_above_the_default_limit_is_copied() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source.redb");
    let to = dir.path().join("to.redb");
    let big: Vec<u8> = (0..2 << 20).map(|i: u32| (i % 251) as u8).collect();
    let queue = JobQueue::builder()
        .max_payload(4 << 20)
        .open(&source)
        .await
        .unwrap();
    queue
        .schedule("big", Duration::from_secs(3600), big.clone())
        .await
        .unwrap();
    queue.close().await.unwrap();

    let line = run(&[
        "copy",
        "--from",
        source.to_str().unwrap(),
        "--to",
        to.to_str().unwrap(),
    ])
    .await;
    assert_eq!(
        line.ok(),
        "copied 1 jobs (0 already there)\ncopied 0 recurring series (0 already there)\n"
    );
    let dest = JobQueue::open(&to).await.unwrap();
    let job = dest.get("big").await.unwrap().unwrap();
    assert_eq!(job.payload().len(), 2 << 20);
    assert!(job.payload() == &big[..], "the same bytes");
    dest.close().await.unwrap();
}

#[tokio::test]
async fn a_copy_from_a_missing_or_garbage_store_is_an_error_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.redb");
    let garbage = dir.path().join("garbage.redb");
    std::fs::write(&garbage, b"not a store at all, just some bytes").unwrap();
    let to = dir.path().join("to.redb");
    let to_text = to.to_str().unwrap();

    let line = run(&["copy", "--from", missing.to_str().unwrap(), "--to", to_text]).await;
    assert_eq!(
        line.failed(1),
        format!(
            "wheel-jobs: --from: no store at {} (only `schedule` creates one)",
            missing.display()
        )
    );
    let line = run(&["copy", "--from", garbage.to_str().unwrap(), "--to", to_text]).await;
    let line = line.failed(1);
    assert!(
        line.starts_with(&format!(
            "wheel-jobs: --from: cannot open the store {}: ",
            garbage.display()
        )),
        "{line}"
    );
    assert!(!to.exists(), "nothing was created");

    // A garbage destination: the source is left as it was.
    let source = dir.path().join("source.redb");
    let queue = JobQueue::open(&source).await.unwrap();
    queue
        .schedule("a", Duration::from_secs(60), "")
        .await
        .unwrap();
    queue.close().await.unwrap();
    let line = run(&[
        "copy",
        "--from",
        source.to_str().unwrap(),
        "--to",
        garbage.to_str().unwrap(),
    ])
    .await;
    let line = line.failed(1);
    assert!(
        line.starts_with(&format!(
            "wheel-jobs: --to: cannot open the store {}: ",
            garbage.display()
        )),
        "{line}"
    );
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_copy_to_an_unreachable_redis_is_an_error_without_its_password() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source.redb");
    JobQueue::open(&source)
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
    let line = run(&[
        "copy",
        "--from",
        source.to_str().unwrap(),
        "--to",
        "redis://:hunter2@127.0.0.1:1/",
        "--to-queue",
        "q",
    ])
    .await;
    let line = line.failed(1);
    assert!(
        line.starts_with("wheel-jobs: --to: cannot reach Redis at redis://:***@127.0.0.1:1/: "),
        "{line}"
    );
    assert!(!line.contains("hunter2"), "{line}");
}
