//! Error exits: one line on stderr, status 2 for a bad command line, 1 otherwise.

use wheel_jobs::JobQueue;

use crate::run::{on, run};
use crate::support::embedded;

#[tokio::test]
async fn bad_command_lines_exit_2_with_one_line() {
    let place = embedded::harness();
    for (args, expected) in [
        (
            vec!["schedule", "x", "--in", "48x"],
            "wheel-jobs: invalid value '48x' for '--in <DURATION>': not a duration (like 48h, 2d 3h, 90s)",
        ),
        (
            vec!["schedule", "x", "--in=-5m"],
            "wheel-jobs: invalid value '-5m' for '--in <DURATION>': a delay cannot be negative",
        ),
        (
            vec!["schedule", "x", "--in", "1s", "--dedup", "hold-off=-5s"],
            "wheel-jobs: invalid value 'hold-off=-5s' for '--dedup <MODE>': a hold-off cannot be negative",
        ),
        (
            vec!["schedule", "x", "--in", "1s", "--key", "k", "--key-limit", "0"],
            "wheel-jobs: invalid value '0' for '--key-limit <N>': 0 is not in 1..=4294967295",
        ),
        (
            vec!["schedule", "x", "--in", "1s", "--key", "k", "--key-rate", "0/1m"],
            "wheel-jobs: invalid value '0/1m' for '--key-rate <STARTS/DURATION>': a rate needs at least 1 start",
        ),
        (
            vec!["schedule", "x", "--in", "1s", "--key", "k", "--key-rate", "10"],
            "wheel-jobs: invalid value '10' for '--key-rate <STARTS/DURATION>': a rate is STARTS/DURATION, like 10/1m",
        ),
        (
            vec!["schedule", "x", "--in", "1s", "--key-limit", "2"],
            "wheel-jobs: the following required arguments were not provided: --key <KEY>",
        ),
        (
            vec!["schedule", "x", "--in", "1s", "--key", ""],
            "wheel-jobs: invalid value '' for '--key <KEY>': a key is 1 to 256 bytes",
        ),
        (
            vec!["schedule", "x", "--at", "2030-12-01T20:00:00"],
            "wheel-jobs: invalid value '2030-12-01T20:00:00' for '--at <TIME>': not an RFC 3339 time with an offset",
        ),
        (
            vec!["schedule", "x"],
            "wheel-jobs: the following required arguments were not provided: --in <DURATION>",
        ),
        (
            vec!["schedule", "x", "--in", "1h", "--at", "2030-12-01T20:00:00Z"],
            "wheel-jobs: the argument '--in <DURATION>' cannot be used with '--at <TIME>'",
        ),
        (vec!["frobnicate"], "wheel-jobs: unrecognized subcommand 'frobnicate'"),
    ] {
        let ran = on(&place, &args).await;
        let line = ran.failed(2);
        assert!(line.starts_with(expected), "{args:?}: {line}");
    }
    assert!(!place.path().exists(), "nothing was opened");
}

#[tokio::test]
async fn a_missing_store_or_place_is_an_error_and_creates_nothing() {
    let place = embedded::harness();
    for command in [
        &["stats"][..],
        &["get", "a"],
        &["cancel", "a"],
        &["purge-dead"],
        &["serve"],
    ] {
        let line = on(&place, command).await;
        assert_eq!(
            line.failed(1),
            format!(
                "wheel-jobs: no store at {} (only `schedule` creates one)",
                place.path().display()
            ),
            "{command:?}"
        );
    }
    let missing = place.dir.path().join("no-such-file");
    let line = on(
        &place,
        &[
            "schedule",
            "a",
            "--in",
            "1h",
            "--payload-file",
            missing.to_str().unwrap(),
        ],
    )
    .await;
    assert!(
        line.failed(1)
            .starts_with("wheel-jobs: cannot read the payload file "),
        "{line:?}"
    );
    assert!(!place.path().exists());
}

#[tokio::test]
async fn a_command_line_without_a_place_exits_2() {
    let line = run(&["stats"]).await;
    assert!(
        line.failed(2).starts_with(
            "wheel-jobs: the following required arguments were not provided: <--store <PATH>"
        ),
        "{line:?}"
    );
    #[cfg(feature = "redis")]
    for (args, expected) in [
        (
            &["--redis", "redis://127.0.0.1:1/", "stats"][..],
            "wheel-jobs: the following required arguments were not provided: --queue <NAME>",
        ),
        (
            &["--queue", "q", "stats"],
            "wheel-jobs: the following required arguments were not provided: <--store <PATH>",
        ),
        (
            &[
                "--store",
                "x.redb",
                "--redis",
                "redis://127.0.0.1:1/",
                "--queue",
                "q",
                "stats",
            ],
            "wheel-jobs: the argument '--store <PATH>' cannot be used with '--redis <URL>'",
        ),
        (
            &[
                "--redis",
                "redis://127.0.0.1:1/",
                "--redis",
                "redis://127.0.0.1:2/",
                "--queue",
                "q",
                "stats",
            ],
            "wheel-jobs: several --redis URLs need --cluster",
        ),
    ] {
        let line = run(args).await;
        assert!(line.failed(2).starts_with(expected), "{args:?}: {line:?}");
    }
}

#[tokio::test]
async fn a_store_held_by_a_running_app_is_refused_with_where_to_look() {
    let place = embedded::harness();
    let app = JobQueue::open(place.path()).await.unwrap();
    let line = on(&place, &["stats"]).await;
    assert_eq!(
        line.failed(1),
        format!(
            "wheel-jobs: the store {} is open in another process (one process at a time): \
             while the app that holds it runs, look through the console mounted in it \
             (wheel_jobs::console::router), or stop the app first",
            place.path().display()
        )
    );
    app.close().await.unwrap();
    on(&place, &["stats"]).await.ok();
}

#[tokio::test]
async fn an_invalid_id_is_an_error() {
    let place = embedded::harness();
    let long = "x".repeat(wheel_jobs::MAX_ID_LEN + 1);
    let line = on(&place, &["schedule", &long, "--in", "1h"]).await;
    assert_eq!(
        line.failed(1),
        "wheel-jobs: invalid job id: 257 bytes, the limit is 256"
    );
    let line = on(&place, &["get", ""]).await;
    assert_eq!(line.failed(1), "wheel-jobs: invalid job id: empty");
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn an_unreachable_redis_is_an_error_without_its_password() {
    // Port 1 on the loopback: nothing listens, the connection is refused at once.
    let line = run(&[
        "--redis",
        "redis://:hunter2@127.0.0.1:1/",
        "--queue",
        "q",
        "stats",
    ])
    .await;
    let line = line.failed(1);
    assert!(
        line.starts_with("wheel-jobs: cannot reach Redis at redis://:***@127.0.0.1:1/: "),
        "{line}"
    );
    assert!(!line.contains("hunter2"), "{line}");
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_queue_with_other_partitions_is_refused() {
    use crate::support::Harness;

    // The app runs the queue "test" on 3 partitions; the command defaults to 1.
    let place = crate::support::redis::partitioned();
    let app = place.open(&JobQueue::builder()).await.unwrap();
    app.schedule("a", std::time::Duration::from_secs(3600), "")
        .await
        .unwrap();
    let line = on(&place, &["stats"]).await;
    let line = line.failed(1);
    assert!(
        line.contains("has 3 partition(s), as its first process opened it, not 1"),
        "{line}"
    );
    let stats = on(&place, &["--partitions", "3", "stats", "--json"])
        .await
        .json();
    assert_eq!(stats["pending"], 1);
    app.close().await.unwrap();
}
