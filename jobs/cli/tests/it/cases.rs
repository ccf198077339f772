//! Every subcommand on a backend, written once and run on each by `cli_suite!`.

use std::time::{Duration, SystemTime};

use wheel_jobs::{JobQueue, JobState};

pub use crate::copy::copy_moves_a_queue_and_again_writes_nothing;
use crate::run::{on, run_with_input, Place};
use crate::support::{busy_and_failed, ms, next, FAILED_WITH};

macro_rules! cli_suite {
    ($harness:expr) => {
        cli_suite!($harness;
            schedule_get_stats_and_cancel,
            running_and_dead_jobs_are_reported_and_purged,
            lists_page_with_a_cursor_and_revive_all,
            pause_resume_and_watch,
            serve_shows_the_queue_and_stops_on_sigterm,
            terminal_controls_in_ids_and_payloads_are_escaped,
            cancel_of_a_series_occurrence_names_the_series,
            copy_moves_a_queue_and_again_writes_nothing,
            kinds_priorities_and_attempts_are_scheduled_shown_and_filtered,
            dedup_modes_and_a_successor_are_scheduled_and_shown,
            keys_and_their_limits_are_scheduled_and_shown,
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
    assert_eq!(a["last_error"], serde_json::Value::Null);
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
        "error    none",
        "payload  (3 bytes, hex) 00ff10",
    ] {
        assert!(text.ok().contains(line), "{line} not in {text:?}");
    }
    assert_eq!(
        on(&place, &["get", "c", "--json"]).await.json()["payload"],
        "from stdin"
    );

    let stats = on(&place, &["--json", "stats"]).await.json();
    assert_eq!(
        (&stats["pending"], &stats["running"], &stats["dead"]),
        (&3.into(), &0.into(), &0.into())
    );
    assert_eq!(stats["paused"], false);
    assert_eq!(stats["next_due"], a["run_at"], "the earliest of the three");
    let text = on(&place, &["stats"]).await;
    assert!(
        text.ok()
            .starts_with("pending   3\nrunning   0\ndead      0\npaused    no\nnext due  "),
        "{text:?}"
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
    assert_eq!(
        (&stats["pending"], &stats["running"], &stats["dead"]),
        (&0.into(), &1.into(), &1.into())
    );
    assert_eq!(
        stats["next_due"],
        serde_json::Value::Null,
        "nothing pending"
    );
    assert_eq!(
        on(&place, &["cancel", "busy"]).await.failed(1),
        r#"wheel-jobs: "busy" is running, not pending: nothing was cancelled"#
    );
    assert_eq!(
        on(&place, &["cancel", "failed"]).await.failed(1),
        r#"wheel-jobs: "failed" is dead, not pending: nothing was cancelled"#
    );
    assert_eq!(
        on(&place, &["revive", "busy"]).await.failed(1),
        r#"wheel-jobs: "busy" is running, not dead: nothing was revived"#
    );
    let failed = on(&place, &["get", "failed", "--json"]).await.json();
    assert_eq!(
        (&failed["state"], &failed["attempt"]),
        (&"dead".into(), &1.into())
    );
    assert_eq!(failed["last_error"], FAILED_WITH);
    let text = on(&place, &["get", "failed"]).await;
    assert!(
        text.ok()
            .contains("error    card declined <b>05</b>\n           at charge (billing.rs:42)\n"),
        "the error whole, its lines indented: {text:?}"
    );

    let dead = on(&place, &["list", "dead", "--json"]).await.json();
    assert_eq!(dead["state"], "dead");
    assert_eq!(dead["next"], serde_json::Value::Null);
    assert_eq!(dead["jobs"][0]["id"], "failed");
    assert_eq!(dead["jobs"][0]["last_error"], FAILED_WITH);
    let text = on(&place, &["list", "dead"]).await;
    assert!(text.ok().starts_with("failed  "), "{text:?}");
    assert!(
        text.ok().ends_with("attempt 1  card declined <b>05</b>\n"),
        "the first line: {text:?}"
    );
    let running = on(&place, &["list", "running", "--json"]).await.json();
    assert_eq!(running["jobs"][0]["id"], "busy");

    assert_eq!(
        on(&place, &["revive", "failed"]).await.ok(),
        "revived failed\n"
    );
    let revived = on(&place, &["get", "failed", "--json"]).await.json();
    assert_eq!(
        (&revived["state"], &revived["attempt"]),
        (&"pending".into(), &0.into())
    );
    assert_eq!(on(&place, &["list", "dead"]).await.ok(), "no dead jobs\n");
    assert_eq!(
        on(&place, &["revive", "--all-dead", "--json"]).await.json(),
        serde_json::json!({ "revived": 0 })
    );

    // Dead again (through the library), then purged.
    let queue = place
        .open(JobQueue::builder().max_attempts(1))
        .await
        .unwrap();
    let mut consumer = queue.consume();
    assert!(next(&mut consumer)
        .await
        .fail(ms(0), "again")
        .await
        .unwrap());
    drop(consumer);
    queue.close().await.unwrap();
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

pub async fn lists_page_with_a_cursor_and_revive_all(place: impl Place) {
    let start = SystemTime::now() + Duration::from_secs(3600);
    for i in 0..5u64 {
        let at = jiff::Timestamp::try_from(start + Duration::from_secs(60 * i))
            .unwrap()
            .to_string();
        on(&place, &["schedule", &format!("p{i}"), "--at", &at])
            .await
            .ok();
    }
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut args = vec!["list", "pending", "--limit", "2", "--json"];
        if let Some(after) = &after {
            args.extend(["--after", after]);
        }
        let page = on(&place, &args).await.json();
        let jobs = page["jobs"].as_array().unwrap();
        seen.extend(jobs.iter().map(|j| j["id"].as_str().unwrap().to_owned()));
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, ["p0", "p1", "p2", "p3", "p4"]);
    let text = on(&place, &["list", "pending", "--limit", "4"]).await;
    let last = text.ok().lines().last().unwrap().to_owned();
    assert!(last.starts_with("next page: --after "), "{text:?}");

    for limit in ["0", "5000", "ten"] {
        let line = on(&place, &["list", "pending", "--limit", limit]).await;
        assert_eq!(
            line.failed(2),
            format!(
                "wheel-jobs: invalid value '{limit}' for '--limit <LIMIT>': a page holds 1 \
                 to 1000 jobs"
            )
        );
    }
    let line = on(
        &place,
        &[
            "list",
            "dead",
            "--after",
            last.trim_start_matches("next page: --after "),
        ],
    )
    .await;
    assert_eq!(
        line.failed(1),
        "wheel-jobs: invalid input: a cursor of the Pending list cannot continue the Dead list"
    );
    let line = on(&place, &["list", "pending", "--after", "zz"]).await;
    assert_eq!(
        line.failed(2),
        "wheel-jobs: invalid value 'zz' for '--after <CURSOR>': invalid input: not a job list cursor"
    );
    let line = on(&place, &["list", "done"]).await;
    assert!(
        line.failed(2)
            .starts_with("wheel-jobs: invalid value 'done' for '<STATE>'"),
        "{line:?}"
    );
}

pub async fn pause_resume_and_watch(place: impl Place) {
    on(&place, &["schedule", "a", "--in", "1h"]).await.ok();
    assert_eq!(
        on(&place, &["pause"]).await.ok(),
        "paused: no consumer claims a job until `wheel-jobs resume`\n"
    );
    assert_eq!(
        on(&place, &["stats", "--json"]).await.json()["paused"],
        true
    );
    // Not a terminal: a plain line per sample.
    let watched = on(&place, &["watch", "--every", "10ms", "--count", "3"]).await;
    let lines: Vec<&str> = watched.ok().lines().collect();
    assert_eq!(lines.len(), 3, "{watched:?}");
    assert!(
        lines[0].starts_with("pending 1 (…)  running 0  dead 0 (…)  PAUSED  next due "),
        "{lines:?}"
    );
    assert!(
        lines[2].starts_with("pending 1 (0/s)  running 0  dead 0 (0/s)  PAUSED"),
        "{lines:?}"
    );
    assert!(
        !watched.stdout.contains('\r'),
        "no redrawing off a terminal"
    );

    assert_eq!(
        on(&place, &["resume", "--json"]).await.json(),
        serde_json::json!({ "paused": false })
    );
    let watched = on(
        &place,
        &["watch", "--every", "10ms", "--count", "2", "--json"],
    )
    .await;
    let samples: Vec<serde_json::Value> = watched
        .ok()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(samples.len(), 2);
    assert_eq!(
        (&samples[1]["pending"], &samples[1]["paused"]),
        (&1.into(), &false.into())
    );
    assert!(samples[1]["at"].as_str().unwrap().ends_with('Z'));
    let line = on(&place, &["watch", "--every", "soon"]).await;
    assert!(
        line.failed(2)
            .starts_with("wheel-jobs: invalid value 'soon' for '--every <DURATION>'"),
        "{line:?}"
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

pub async fn terminal_controls_in_ids_and_payloads_are_escaped(place: impl Place) {
    // Clears the screen, retitles the window, and forges a line of its own.
    let id = "x\x1b[2J\x1b]0;pwned\x07\rcreated y";
    let payload = "line one\nline two\x1b[31m red\u{9b}";
    let ran = on(
        &place,
        &["schedule", id, "--in", "1h", "--payload", payload],
    )
    .await;
    assert_eq!(
        ran.ok(),
        "created x\\u{1b}[2J\\u{1b}]0;pwned\\u{7}\\u{d}created y\n"
    );
    let texts = [
        on(&place, &["get", id]).await,
        on(&place, &["list", "pending"]).await,
        on(&place, &["cancel", id]).await,
        on(&place, &["cancel", id]).await,
    ];
    for ran in &texts {
        let all = format!("{}{}", ran.stdout, ran.stderr);
        assert!(!all.chars().any(|c| c.is_control() && c != '\n'), "{ran:?}");
        assert!(all.contains("x\\u{1b}[2J"), "{ran:?}");
    }
    assert!(
        texts[0]
            .ok()
            .contains("payload  line one\nline two\\u{1b}[31m red\\u{9b}"),
        "{:?}",
        texts[0]
    );
    texts[3].failed(1);
}

pub async fn cancel_of_a_series_occurrence_names_the_series(place: impl Place) {
    let queue = place.open(&JobQueue::builder()).await.unwrap();
    let every_hour = wheel_jobs::Recurrence::every(Duration::from_secs(3600)).unwrap();
    queue
        .schedule_recurring("digest", every_hour, "")
        .await
        .unwrap();
    let next = queue.list_recurring().await.unwrap()[0].next_run().unwrap();
    let id = format!("digest@{}", jiff::Timestamp::try_from(next).unwrap());
    queue.close().await.unwrap(); // the embedded store is one process at a time

    let line = on(&place, &["cancel", &id]).await;
    assert_eq!(
        line.failed(1),
        format!(
            "wheel-jobs: {id:?} is the next occurrence of the recurring series \"digest\": \
             cancel the series (JobQueue::cancel_recurring), not the occurrence"
        )
    );
    assert_eq!(
        on(&place, &["get", &id, "--json"]).await.json()["state"],
        "pending"
    );
}

pub async fn kinds_priorities_and_attempts_are_scheduled_shown_and_filtered(place: impl Place) {
    let created = on(
        &place,
        &[
            "schedule",
            "rate:1",
            "--in",
            "1h",
            "--kind",
            "rate",
            "--priority",
            "-5",
            "--max-attempts",
            "2",
        ],
    )
    .await;
    assert_eq!(created.ok(), "created rate:1\n");
    for (id, delay) in [("rate:2", "2h"), ("rate:3", "3h")] {
        on(&place, &["schedule", id, "--in", delay, "--kind", "rate"])
            .await
            .ok();
    }
    on(&place, &["schedule", "plain", "--in", "90m"]).await.ok();
    on(
        &place,
        &[
            "schedule",
            "remind:1",
            "--in",
            "4h",
            "--kind",
            "remind",
            "--priority",
            "7",
        ],
    )
    .await
    .ok();

    let rate = on(&place, &["get", "rate:1", "--json"]).await.json();
    assert_eq!(
        (&rate["kind"], &rate["priority"], &rate["max_attempts"]),
        (&"rate".into(), &(-5).into(), &2.into())
    );
    let text = on(&place, &["get", "rate:1"]).await;
    for line in ["kind     rate\n", "priority -5\n", "attempt  0 of 2\n"] {
        assert!(text.ok().contains(line), "{line:?} not in {text:?}");
    }
    let plain = on(&place, &["get", "plain"]).await;
    assert!(
        plain.ok().contains("kind     (none)\npriority 0\n"),
        "{plain:?}"
    );

    // Listed by kind, a page at a time.
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut args = vec![
            "list", "pending", "--kind", "rate", "--limit", "2", "--json",
        ];
        if let Some(after) = &after {
            args.extend(["--after", after]);
        }
        let page = on(&place, &args).await.json();
        assert_eq!(page["kind"], "rate");
        for job in page["jobs"].as_array().unwrap() {
            assert_eq!(job["kind"], "rate");
            seen.push(job["id"].as_str().unwrap().to_owned());
        }
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, ["rate:1", "rate:2", "rate:3"]);
    let none = on(&place, &["list", "pending", "--kind", "", "--json"])
        .await
        .json();
    assert_eq!(none["jobs"][0]["id"], "plain");
    assert_eq!(none["jobs"].as_array().unwrap().len(), 1);
    let text = on(&place, &["list", "pending", "--kind", "remind"]).await;
    assert!(
        text.ok().starts_with("remind:1  kind remind  priority 7  "),
        "{text:?}"
    );
    assert_eq!(
        on(&place, &["list", "running", "--kind", "rate"])
            .await
            .ok(),
        "no running jobs of kind rate\n"
    );

    let stats = on(&place, &["stats", "--json"]).await.json();
    assert_eq!(stats["pending"], 5);
    let kind = |pending: u64| serde_json::json!({ "pending": pending, "running": 0, "dead": 0 });
    assert_eq!(
        stats["kinds"],
        serde_json::json!({ "": kind(1), "rate": kind(3), "remind": kind(1) })
    );
    let text = on(&place, &["stats"]).await;
    let table = text.ok().split_once("\n\n").expect("a table of kinds").1;
    assert_eq!(
        table,
        "kind      pending    running       dead\n\
         (none)          1          0          0\n\
         rate            3          0          0\n\
         remind          1          0          0\n"
    );

    // Bad options are a bad command line, and nothing is stored.
    let long = "k".repeat(wheel_jobs::MAX_KIND_LEN + 1);
    for (flag, value, why) in [
        ("--max-attempts", "0", "0 is not in 1..=4294967295"),
        ("--priority", "200", "200 is not in -128..=127"),
        ("--kind", long.as_str(), "a kind is at most 64 bytes"),
        (
            "--kind",
            "a\u{1b}b",
            "a kind must not contain control characters",
        ),
    ] {
        let ran = on(&place, &["schedule", "bad", "--in", "1s", flag, value]).await;
        let message = ran.failed(2);
        assert!(
            message.starts_with("wheel-jobs: invalid value ") && message.ends_with(why),
            "{message}"
        );
    }
    assert!(on(&place, &["get", "bad"])
        .await
        .failed(1)
        .starts_with("wheel-jobs: no job"));
}

/// `--dedup`: a replace of a pending job, a successor stored beside a running one (shown by
/// `get`, in text and JSON), a hold-off; a mode it does not know is a bad command line.
pub async fn dedup_modes_and_a_successor_are_scheduled_and_shown(place: impl Place) {
    let queue = place
        .open(
            JobQueue::builder()
                .max_attempts(1)
                .lease(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    busy_and_failed(&queue).await;
    queue.close().await.unwrap(); // the embedded store is one process at a time

    on(&place, &["schedule", "p", "--in", "1h"]).await.ok();
    let args = [
        "schedule", "p", "--in", "2h", "--dedup", "replace", "--json",
    ];
    assert_eq!(on(&place, &args).await.json()["outcome"], "replaced");
    let next = "2100-01-01T00:00:00Z";
    let args = [
        "schedule",
        "busy",
        "--at",
        next,
        "--dedup",
        "allow-while-running",
        "--json",
    ];
    assert_eq!(on(&place, &args).await.json()["outcome"], "successor");
    let busy = on(&place, &["get", "busy", "--json"]).await.json();
    assert_eq!(
        (&busy["state"], &busy["successor_run_at"]),
        (&"running".into(), &next.into())
    );
    let text = on(&place, &["get", "busy"]).await.ok().to_owned();
    assert!(
        text.contains(&format!("\nnext     a successor due at {next} (in ")),
        "{text}"
    );
    // The labels line up: each value starts in the same column.
    for line in text.lines().filter(|l| !l.starts_with(' ')) {
        let (label, value) = line.split_at(9);
        assert!(label.ends_with(' ') && !value.starts_with(' '), "{text}");
    }
    let pending = on(&place, &["get", "p", "--json"]).await.json();
    assert_eq!(pending["successor_run_at"], serde_json::Value::Null);
    assert!(!on(&place, &["get", "p"]).await.ok().contains("successor"));
    // A cancel of the running job removes only its successor.
    assert_eq!(
        on(&place, &["cancel", "busy"]).await.ok(),
        "cancelled the successor of busy (the running job goes on)\n"
    );
    let busy = on(&place, &["get", "busy", "--json"]).await.json();
    assert_eq!(
        (&busy["state"], &busy["successor_run_at"]),
        (&"running".into(), &serde_json::Value::Null)
    );
    let args = [
        "schedule",
        "h",
        "--in",
        "1s",
        "--dedup",
        "hold-off=1h",
        "--json",
    ];
    assert_eq!(on(&place, &args).await.json()["outcome"], "created");
    let ran = on(
        &place,
        &["schedule", "bad", "--in", "1s", "--dedup", "sometimes"],
    )
    .await;
    let message = ran.failed(2);
    assert!(
        message.ends_with("one of keep, replace, allow-while-running, hold-off=DURATION"),
        "{message}"
    );
}

/// `--key`, `--key-limit` and `--key-rate`: stored with the job, shown by `get` (text and
/// JSON) and `list`; a job without a key shows none.
pub async fn keys_and_their_limits_are_scheduled_and_shown(place: impl Place) {
    let args = [
        "schedule",
        "t1",
        "--in",
        "1h",
        "--key",
        "tenant-7",
        "--key-limit",
        "2",
        "--key-rate",
        "10/1m",
        "--json",
    ];
    assert_eq!(on(&place, &args).await.json()["outcome"], "created");
    on(
        &place,
        &["schedule", "t2", "--in", "2h", "--key", "tenant-8"],
    )
    .await
    .ok();
    on(&place, &["schedule", "plain", "--in", "3h"]).await.ok();
    let job = on(&place, &["get", "t1", "--json"]).await.json();
    assert_eq!(
        (&job["key"], &job["key_limit"], &job["key_rate"]),
        (
            &"tenant-7".into(),
            &2.into(),
            &serde_json::json!({"starts": 10, "per_ms": 60_000})
        )
    );
    let text = on(&place, &["get", "t1"]).await.ok().to_owned();
    assert!(
        text.contains("\nkey      tenant-7 (at most 2 running, 10 starts per 1m)\n"),
        "{text}"
    );
    let open = on(&place, &["get", "t2"]).await.ok().to_owned();
    assert!(open.contains("\nkey      tenant-8\n"), "{open}");
    let plain = on(&place, &["get", "plain", "--json"]).await.json();
    assert_eq!(
        (&plain["key"], &plain["key_limit"]),
        (&serde_json::Value::Null, &serde_json::Value::Null)
    );
    assert!(!on(&place, &["get", "plain"]).await.ok().contains("key"));
    let list = on(&place, &["list", "pending"]).await.ok().to_owned();
    let rows: Vec<&str> = list.lines().collect();
    assert!(
        rows[0].starts_with("t1  kind (none)  key tenant-7  priority 0"),
        "{list}"
    );
    assert!(
        rows[1].starts_with("t2  kind (none)  key tenant-8  priority 0"),
        "{list}"
    );
    assert!(
        rows[2].starts_with("plain  kind (none)  priority 0"),
        "{list}"
    );
}
