//! Recurring series of a kind on PostgreSQL (feature `postgres`): a series a version-3
//! schema stored (its spec columns NULL) after the upgrade to version 4, and the heads of a
//! kind claimed by a claim of several kinds, unmerged (`worker()`) and merged (two loops'
//! claims in one statement).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use wheel_jobs::sqlx::{self, Executor, Row};
use wheel_jobs::{Builder, CatchUp, JobOptions, JobQueue, Recurrence, RecurringOptions};

use crate::postgres::{fresh, pool, url};
use crate::support::{next, Harness};

/// The id of the occurrence of `name` at `at`.
fn occurrence(name: &str, at: SystemTime) -> String {
    format!("{name}@{}", jiff::Timestamp::try_from(at).unwrap())
}

/// The schema `schema` as version 3 of the library left it, made from its own files; its
/// quoted name.
async fn version_3(pool: &sqlx::PgPool, schema: &str) -> String {
    let quoted = format!("\"{schema}\"");
    let mut v3 = format!(
        "CREATE SCHEMA {quoted}; \
         CREATE TABLE {quoted}.schema_version (id integer PRIMARY KEY CHECK (id = 1), version integer NOT NULL); \
         INSERT INTO {quoted}.schema_version VALUES (1, 3);"
    );
    for file in [
        include_str!("../../src/backend/postgres/migrations/0001_jobs.sql"),
        include_str!("../../src/backend/postgres/migrations/0002_wake_soon.sql"),
        include_str!("../../src/backend/postgres/migrations/0003_kinds.sql"),
    ] {
        v3.push_str(&file.replace("{schema}", &quoted));
    }
    pool.execute(v3.as_str()).await.unwrap();
    quoted
}

/// The spec columns of the series `name` and of its head's job row: (kind, priority, all
/// options NULL) each.
async fn stored(pool: &sqlx::PgPool, quoted: &str, name: &str) -> [(String, i16, bool); 2] {
    let nulls =
        "max_attempts IS NULL AND backoff_first IS NULL AND backoff_max IS NULL AND lease IS NULL";
    let series = sqlx::query(&format!(
        "SELECT kind, priority, {nulls}, head_id FROM {quoted}.series WHERE name = $1"
    ))
    .bind(name)
    .fetch_one(pool)
    .await
    .unwrap();
    let head: String = series.get(3);
    let job = sqlx::query(&format!(
        "SELECT kind, priority, {nulls} FROM {quoted}.jobs WHERE id = $1"
    ))
    .bind(&head)
    .fetch_one(pool)
    .await
    .unwrap();
    [
        (series.get(0), series.get(1), series.get(2)),
        (job.get(0), job.get(1), job.get(2)),
    ]
}

/// A series stored by version 3 (its row and its head as that version wrote them) reads,
/// after the upgrade to version 4, as a series of the kind `""` with the reading handle's
/// plain spec; its head is claimed by a plain consumer, which makes the next occurrence as
/// version 3 did (options NULL: whichever handle reads it, its own). Set again with a kind,
/// it stores every option.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_3_series_upgrades_and_runs_with_the_plain_spec() {
    let schema = fresh("wj_v3");
    let pool = pool().await;
    let quoted = version_3(&pool, &schema).await;
    let every = Recurrence::every(Duration::from_secs(1)).unwrap();
    // Due a second ago, on the recurrence's grid.
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 1;
    let head = UNIX_EPOCH + Duration::from_secs(secs);
    let head_ns = i64::try_from(secs).unwrap() * 1_000_000_000;
    let head_id = occurrence("tick", head);
    // As version 3's `series.rs` wrote them (`save`, `insert_job`); catch-up All { max: 100 }.
    sqlx::query(&format!(
        "INSERT INTO {quoted}.series (queue, name, runs, head, head_id, last, rule, payload) \
         VALUES ('orders', 'tick', 100, $1, $2, NULL, $3, 't'); \
         "
    ))
    .bind(head_ns)
    .bind(&head_id)
    .bind(every.to_string())
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(&format!(
        "INSERT INTO {quoted}.jobs (queue, id, run_at, payload) VALUES ('orders', $1, $2, 't')"
    ))
    .bind(&head_id)
    .bind(head_ns)
    .execute(&pool)
    .await
    .unwrap();

    let open = |attempts: u32| {
        let schema = schema.clone();
        async move {
            let mut builder = Builder::new();
            builder
                .postgres_schema(&schema)
                .max_attempts(attempts)
                .lease(Duration::from_secs(30));
            builder.postgres(&url(), "orders").await.unwrap()
        }
    };
    let queue = open(3).await;
    let version: i32 = sqlx::query(&format!("SELECT version FROM {quoted}.schema_version"))
        .fetch_one(&pool)
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, 4);
    let plain = (String::new(), 0, true);
    assert_eq!(
        stored(&pool, &quoted, "tick").await,
        [plain.clone(), plain.clone()]
    );
    let info = queue.list_recurring().await.unwrap().remove(0);
    assert_eq!(
        (info.kind(), info.priority(), info.max_attempts()),
        ("", 0, 3)
    );
    assert_eq!(info.next_run(), Some(head));
    assert_eq!(info.catch_up(), CatchUp::All { max: 100 });

    let mut consumer = queue.consume();
    let d = next(&mut consumer).await;
    assert_eq!((d.id(), d.kind(), d.priority()), (head_id.as_str(), "", 0));
    assert!(d.ack().await.unwrap());
    drop(consumer);
    // The claim moved the series; its new head is made as version 3 made it.
    let info = queue.list_recurring().await.unwrap().remove(0);
    let next_head = head + Duration::from_secs(1);
    assert!(
        info.next_run().unwrap() >= next_head,
        "{:?}",
        info.next_run()
    );
    assert_eq!(info.last_run(), Some(head));
    assert_eq!(stored(&pool, &quoted, "tick").await, [plain.clone(), plain]);
    let job = queue
        .get(&occurrence("tick", info.next_run().unwrap()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((job.kind(), job.max_attempts()), ("", 3));
    // Another handle's plain spec is what it reads.
    let other = open(5).await;
    assert_eq!(other.list_recurring().await.unwrap()[0].max_attempts(), 5);
    other.close().await.unwrap();

    // Set again with a kind: every option stored, on the kept head too.
    let options = RecurringOptions::new()
        .options(JobOptions::kind("a").priority(2).max_attempts(4))
        .catch_up(CatchUp::All { max: 100 });
    queue
        .schedule_recurring_with("tick", every, "t", options)
        .await
        .unwrap();
    let kind = ("a".to_owned(), 2, false);
    assert_eq!(stored(&pool, &quoted, "tick").await, [kind.clone(), kind]);
    let info = queue.list_recurring().await.unwrap().remove(0);
    assert_eq!(
        (info.kind(), info.priority(), info.max_attempts()),
        ("a", 2, 4)
    );
    queue.close().await.unwrap();
    pool.execute(format!("DROP SCHEMA {quoted} CASCADE").as_str())
        .await
        .unwrap();
}

/// A series of the kind `a` (priority 3, one claim of each occurrence moving it) beside a
/// job of the kind `b`: a `worker()` of both kinds, whose claim names two kinds (a
/// statement of a set of kinds, not merged: its kinds' rooms exceed its slots), hands the
/// occurrences to `a`'s handler and the job to `b`'s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_of_two_kinds_claims_a_series_of_one_of_them() {
    let harness = crate::support::postgres::harness();
    let queue = harness.open(&Builder::new()).await.unwrap();
    let options = RecurringOptions::new()
        .options(JobOptions::kind("a").priority(3))
        .catch_up(CatchUp::All { max: 100 });
    let every = Recurrence::every(Duration::from_millis(500)).unwrap();
    queue
        .schedule_recurring_with("tick", every, "t", options)
        .await
        .unwrap();
    queue
        .schedule_with("b:1", Duration::ZERO, "b", &JobOptions::kind("b"))
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let handler = |kind: &'static str| {
        let tx = tx.clone();
        move |d: wheel_jobs::Delivery| {
            tx.send((kind, d.id().to_owned(), d.kind().to_owned(), d.priority()))
                .unwrap();
            async { Ok::<(), String>(()) }
        }
    };
    let worker = queue
        .worker()
        .kind("a", handler("a"))
        .kind("b", handler("b"))
        .run(4);
    let worker = tokio::spawn(worker);
    let (mut ticks, mut b) = (Vec::new(), false);
    while ticks.len() < 3 || !b {
        let (handler, id, kind, priority) =
            tokio::time::timeout(Duration::from_secs(60), rx.recv())
                .await
                .expect("the worker ran the series and the job")
                .unwrap();
        assert_eq!(handler, kind, "{id}");
        if kind == "a" {
            assert!(id.starts_with("tick@"), "{id}");
            assert_eq!(priority, 3, "{id}");
            ticks.push(id);
        } else {
            assert_eq!(id, "b:1");
            b = true;
        }
    }
    let mut distinct = ticks.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), ticks.len(), "{ticks:?}");
    queue.close().await.unwrap();
    worker.await.unwrap().unwrap();
}

/// The leased jobs of `queue` (schema `wheel_jobs`) and their tokens, by id.
async fn tokens(queue: &str) -> Vec<(String, i64)> {
    sqlx::query(
        "SELECT id, token FROM wheel_jobs.jobs WHERE queue = $1 AND token IS NOT NULL ORDER BY id",
    )
    .bind(queue)
    .fetch_all(&pool().await)
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// The claims of two loops of one handle, of the kinds `a` and `b`, in flight together are
/// one statement (one token, as `postgres_kinds.rs` shows for ordinary jobs): the due head
/// of a series of the kind `a` is claimed by it, in its heads' step, delivered to `a`'s
/// loop and leased under that statement's token, and the series moves.
#[tokio::test]
async fn a_merged_claim_of_two_kinds_claims_a_series_head_of_one_of_them() {
    let harness = crate::support::postgres::harness();
    let queue: JobQueue = harness.open(&Builder::new()).await.unwrap();
    let every = Recurrence::every(Duration::from_secs(1)).unwrap();
    let options = RecurringOptions::new()
        .options(JobOptions::kind("a").priority(-2))
        .catch_up(CatchUp::All { max: 100 });
    queue
        .schedule_recurring_with("tick", every, "t", options)
        .await
        .unwrap();
    let first = queue.list_recurring().await.unwrap()[0].next_run().unwrap();
    let head = occurrence("tick", first);
    queue
        .schedule_with("b:1", Duration::ZERO, "b", &JobOptions::kind("b"))
        .await
        .unwrap();
    queue
        .schedule_with("w:1", Duration::ZERO, "w", &JobOptions::kind("w"))
        .await
        .unwrap();
    if let Ok(wait) = first.duration_since(SystemTime::now()) {
        tokio::time::sleep(wait + Duration::from_millis(50)).await;
    }
    // The handle's first claim folds the counters before it is sent: done here.
    let w = queue.consume_kind("w").next().await.unwrap().unwrap();
    w.ack().await.unwrap();
    let mut a = queue.consume_kind("a");
    let mut b = queue.consume_kind("b");
    let mut b_next = Box::pin(b.next());
    std::future::poll_fn(|cx| {
        assert!(std::future::Future::poll(b_next.as_mut(), cx).is_pending());
        std::task::Poll::Ready(())
    })
    .await;
    // Sent while b's waits unsent (current-thread runtime): the batcher takes both.
    let tick = a.next().await.unwrap().unwrap();
    assert_eq!(
        (tick.id(), tick.kind(), tick.priority()),
        (head.as_str(), "a", -2)
    );
    assert_eq!(b_next.await.unwrap().unwrap().id(), "b:1");
    let leased = tokens(harness.queue()).await;
    let ids: Vec<&str> = leased.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["b:1", head.as_str()]);
    assert_eq!(leased[0].1, leased[1].1, "one statement, one token");
    let info = queue.list_recurring().await.unwrap().remove(0);
    assert_eq!(info.last_run(), Some(first));
    assert!(info.next_run().unwrap() > first);
    let pending = queue
        .get(&occurrence("tick", info.next_run().unwrap()))
        .await
        .unwrap()
        .expect("the claim made the next occurrence");
    assert_eq!((pending.kind(), pending.priority()), ("a", -2));
    queue.close().await.unwrap();
}

/// A series of a kind whose head waited past later occurrences under `CatchUp::Latest`:
/// the first claim of its kind skips to the latest due occurrence, which the series makes
/// then with its own spec, and delivers it to that claim; the occurrence after it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skip_to_a_later_occurrence_keeps_the_series_kind() {
    let harness = crate::support::postgres::harness();
    let queue = harness.open(&Builder::new()).await.unwrap();
    let period = Duration::from_millis(500);
    let options = RecurringOptions::new()
        .options(JobOptions::kind("a").priority(4).max_attempts(2))
        .catch_up(CatchUp::Latest);
    queue
        .schedule_recurring_with("tick", Recurrence::every(period).unwrap(), "t", options)
        .await
        .unwrap();
    let first = queue.list_recurring().await.unwrap()[0].next_run().unwrap();
    // Three periods past the head: two later occurrences are due too.
    let late = first + period * 3 + Duration::from_millis(100);
    if let Ok(wait) = late.duration_since(SystemTime::now()) {
        tokio::time::sleep(wait).await;
    }
    let mut consumer = queue.consume_kind("a");
    let d = next(&mut consumer).await;
    assert!(d.run_at() > first, "{} is the head, not the latest", d.id());
    assert_eq!((d.kind(), d.priority()), ("a", 4));
    let job = queue.get(d.id()).await.unwrap().unwrap();
    assert_eq!(job.max_attempts(), 2);
    assert!(d.ack().await.unwrap());
    assert!(queue
        .get(&occurrence("tick", first))
        .await
        .unwrap()
        .is_none());
    let info = queue.list_recurring().await.unwrap().remove(0);
    assert_eq!(info.last_run(), Some(d.run_at()));
    let pending = queue
        .get(&occurrence("tick", info.next_run().unwrap()))
        .await
        .unwrap()
        .expect("the next occurrence");
    assert_eq!(
        (pending.kind(), pending.priority(), pending.max_attempts()),
        ("a", 4, 2)
    );
    drop(consumer);
    queue.close().await.unwrap();
}

/// Sleeps until a little past `at`.
async fn sleep_past(at: SystemTime) {
    if let Ok(wait) = at.duration_since(SystemTime::now()) {
        tokio::time::sleep(wait + Duration::from_millis(100)).await;
    }
}

/// A series of the kind `k` at `priority`, every second, catching up all.
fn of_k(priority: i8) -> RecurringOptions {
    RecurringOptions::new()
        .options(JobOptions::kind("k").priority(priority))
        .catch_up(CatchUp::All { max: 100 })
}

/// Two due series heads of the kind `k`, `low` (priority -3) due a second before `high`
/// (priority 5), and a due job `k:0` of `k` at priority 0, in a queue of prefetch
/// `prefetch`: the queue and the id of `high`'s head.
async fn two_heads_and_a_job(prefetch: usize) -> (JobQueue, String) {
    let harness = crate::support::postgres::harness();
    let mut builder = Builder::new();
    builder.prefetch(prefetch);
    let queue = harness.open(&builder).await.unwrap();
    let every = Recurrence::every(Duration::from_secs(1)).unwrap();
    queue
        .schedule_recurring_with("low", every.clone(), "l", of_k(-3))
        .await
        .unwrap();
    let low = queue.list_recurring().await.unwrap()[0].next_run().unwrap();
    sleep_past(low).await;
    queue
        .schedule_recurring_with("high", every, "h", of_k(5))
        .await
        .unwrap();
    let list = queue.list_recurring().await.unwrap();
    let high = list.iter().find(|s| s.name() == "high").unwrap();
    let high_at = high.next_run().unwrap();
    assert!(high_at > low);
    sleep_past(high_at).await;
    queue
        .schedule_with("k:0", Duration::ZERO, "j", &JobOptions::kind("k"))
        .await
        .unwrap();
    (queue, occurrence("high", high_at))
}

/// Strict priority among due heads: a head of priority 5 goes first, though a head of
/// priority -3 of its kind was due a second earlier (a claim took heads in due order, and
/// the earlier low one, listed first, hid the high one).
#[tokio::test]
async fn a_head_of_a_higher_priority_goes_before_an_earlier_lower_head() {
    let (queue, high) = two_heads_and_a_job(1).await;
    let mut c = queue.consume_kind("k");
    let d = next(&mut c).await;
    assert_eq!((d.id(), d.priority()), (high.as_str(), 5));
    drop(c);
    queue.close().await.unwrap();
}

/// Strict priority between heads and jobs, in one claim of two: the head of priority 5,
/// then the due job of priority 0; the head of priority -3 waits for a later claim (the
/// listed heads once lowered the claim's floor to the highest of them, and a low head went
/// before a higher job).
#[tokio::test]
async fn a_head_of_a_lower_priority_waits_for_a_due_job_of_a_higher_one() {
    let (queue, high) = two_heads_and_a_job(2).await;
    let mut c = queue.consume_kind("k");
    let order: Vec<(String, i8)> = [next(&mut c).await, next(&mut c).await, next(&mut c).await]
        .iter()
        .map(|d| (d.id().to_owned(), d.priority()))
        .collect();
    assert_eq!(order[0], (high, 5));
    assert_eq!(order[1], ("k:0".to_owned(), 0));
    assert!(order[2].0.starts_with("low@"), "{order:?}");
    assert_eq!(order[2].1, -3);
    drop(c);
    queue.close().await.unwrap();
}

/// A series of the kind `a` at priority 5 whose head is due beside three due jobs of the
/// kind `b` at priority 0: a worker of both kinds runs the head first. With `caps` each
/// kind capped at one, the worker's claim (two slots) is merged (`claims.rs`); without, a
/// statement of a set of kinds of its own. A head of one kind once got only the room the
/// other kinds' jobs left, and the kind `b` filled it.
async fn a_worker_runs_a_head_before_another_kinds_lower_jobs(caps: bool) {
    let harness = crate::support::postgres::harness();
    let queue = harness.open(&Builder::new()).await.unwrap();
    let options = RecurringOptions::new()
        .options(JobOptions::kind("a").priority(5))
        .catch_up(CatchUp::All { max: 100 });
    let every = Recurrence::every(Duration::from_secs(1)).unwrap();
    queue
        .schedule_recurring_with("tick", every, "t", options)
        .await
        .unwrap();
    let head = queue.list_recurring().await.unwrap()[0].next_run().unwrap();
    for i in 0..3 {
        queue
            .schedule_with(
                &format!("b:{i}"),
                Duration::ZERO,
                "b",
                &JobOptions::kind("b"),
            )
            .await
            .unwrap();
    }
    sleep_past(head).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let handler = || {
        let tx = tx.clone();
        move |d: wheel_jobs::Delivery| {
            tx.send((d.id().to_owned(), d.priority())).unwrap();
            async { Ok::<(), String>(()) }
        }
    };
    let worker = queue.worker().kind("a", handler()).kind("b", handler());
    let worker = if caps {
        tokio::spawn(worker.cap("a", 1).cap("b", 1).run(2))
    } else {
        tokio::spawn(worker.run(1))
    };
    let first = tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first, (occurrence("tick", head), 5));
    queue.close().await.unwrap();
    worker.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_a_head_before_another_kinds_lower_jobs_unmerged() {
    a_worker_runs_a_head_before_another_kinds_lower_jobs(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_a_head_before_another_kinds_lower_jobs_merged() {
    a_worker_runs_a_head_before_another_kinds_lower_jobs(true).await;
}

/// Two loops' claims merged into one statement (kinds `a` and `b`): the due head of `a` at
/// priority 5 holds back no job of `b`, which is another caller's: `b`'s loop gets its job
/// of priority 0 from the same statement (one token) as `a`'s gets the head.
#[tokio::test]
async fn a_merged_members_head_holds_back_no_job_of_another_member() {
    let harness = crate::support::postgres::harness();
    let queue: JobQueue = harness.open(&Builder::new()).await.unwrap();
    let options = RecurringOptions::new()
        .options(JobOptions::kind("a").priority(5))
        .catch_up(CatchUp::All { max: 100 });
    let every = Recurrence::every(Duration::from_secs(1)).unwrap();
    queue
        .schedule_recurring_with("tick", every, "t", options)
        .await
        .unwrap();
    let first = queue.list_recurring().await.unwrap()[0].next_run().unwrap();
    for (id, kind) in [("b:1", "b"), ("w:1", "w")] {
        queue
            .schedule_with(id, Duration::ZERO, kind, &JobOptions::kind(kind))
            .await
            .unwrap();
    }
    sleep_past(first).await;
    // The handle's first claim folds the counters before it is sent: done here.
    let w = queue.consume_kind("w").next().await.unwrap().unwrap();
    w.ack().await.unwrap();
    let mut a = queue.consume_kind("a");
    let mut b = queue.consume_kind("b");
    let mut b_next = Box::pin(b.next());
    std::future::poll_fn(|cx| {
        assert!(std::future::Future::poll(b_next.as_mut(), cx).is_pending());
        std::task::Poll::Ready(())
    })
    .await;
    let head = occurrence("tick", first);
    assert_eq!(a.next().await.unwrap().unwrap().id(), head);
    assert_eq!(b_next.await.unwrap().unwrap().id(), "b:1");
    let leased = tokens(harness.queue()).await;
    let ids: Vec<&str> = leased.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["b:1", head.as_str()]);
    assert_eq!(leased[0].1, leased[1].1, "one statement, one token");
    drop((a, b));
    queue.close().await.unwrap();
}

/// A queue in a schema of its own with the series `ta` (kind `a`) and `tb` (kind `b`), each
/// every second, whose heads are due, and a trigger refusing every new job of `ta` (so the
/// step of `ta`'s head, which makes its next occurrence, fails): the queue, its schema
/// (quoted) and `tb`'s head.
async fn a_failing_series_beside_another(prefetch: usize) -> (JobQueue, String, String) {
    let schema = fresh("wj_poison");
    let pool = pool().await;
    let mut builder = Builder::new();
    builder.postgres_schema(&schema).prefetch(prefetch);
    let queue = builder.postgres(&url(), "orders").await.unwrap();
    let quoted = format!("\"{schema}\"");
    let every = Recurrence::every(Duration::from_secs(1)).unwrap();
    for (name, kind) in [("ta", "a"), ("tb", "b")] {
        let options = RecurringOptions::new()
            .options(JobOptions::kind(kind))
            .catch_up(CatchUp::All { max: 100 });
        queue
            .schedule_recurring_with(name, every.clone(), "t", options)
            .await
            .unwrap();
    }
    let list = queue.list_recurring().await.unwrap();
    let last = list.iter().map(|s| s.next_run().unwrap()).max().unwrap();
    let tb = list.iter().find(|s| s.name() == "tb").unwrap();
    let tb_head = occurrence("tb", tb.next_run().unwrap());
    pool.execute(
        format!(
            "CREATE FUNCTION {quoted}.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             RAISE EXCEPTION 'refused'; END $$; \
             CREATE TRIGGER refuse BEFORE INSERT ON {quoted}.jobs FOR EACH ROW \
             WHEN (NEW.id LIKE 'ta@%') EXECUTE FUNCTION {quoted}.refuse();"
        )
        .as_str(),
    )
    .await
    .unwrap();
    sleep_past(last).await;
    (queue, quoted, tb_head)
}

/// One claim (of every kind, its own statement) meets two due heads, one whose step fails:
/// that step is rolled back alone, and the other head is delivered (the steps shared one
/// transaction, and one failing head failed every claim that met it).
#[tokio::test]
async fn a_claim_delivers_a_head_whose_step_holds_when_another_heads_step_fails() {
    let (queue, quoted, tb_head) = a_failing_series_beside_another(2).await;
    let mut consumer = queue.consume();
    let got = tokio::time::timeout(Duration::from_secs(30), next(&mut consumer))
        .await
        .expect("tb's head delivered");
    assert_eq!(got.id(), tb_head);
    assert_eq!(queue.list_recurring().await.unwrap().len(), 2);
    drop(consumer);
    queue.close().await.unwrap();
    let drop = format!("DROP SCHEMA {quoted} CASCADE");
    pool().await.execute(drop.as_str()).await.unwrap();
}

/// A claim merged from two loops' (kinds `a` and `b`): the step of `a`'s head fails, and
/// `a`'s loop gets that error, while `b`'s gets its own head (all heads' steps shared one
/// transaction, and `a`'s failure cost `b` its head).
#[tokio::test]
async fn a_merged_member_gets_its_head_when_another_members_head_step_fails() {
    let (queue, quoted, tb_head) = a_failing_series_beside_another(1).await;
    queue
        .schedule_with("w:1", Duration::ZERO, "w", &JobOptions::kind("w"))
        .await
        .unwrap();
    // The handle's first claim folds the counters before it is sent: done here.
    let w = queue.consume_kind("w").next().await.unwrap().unwrap();
    w.ack().await.unwrap();
    let mut a = queue.consume_kind("a");
    let mut b = queue.consume_kind("b");
    let mut b_next = Box::pin(b.next());
    std::future::poll_fn(|cx| {
        assert!(std::future::Future::poll(b_next.as_mut(), cx).is_pending());
        std::task::Poll::Ready(())
    })
    .await;
    let a_first = a.next().await.unwrap();
    assert!(a_first.is_err(), "a's head step fails");
    let got = b_next.await.unwrap();
    assert_eq!(
        got.as_ref()
            .map(|d| d.id().to_owned())
            .map_err(|e| e.to_string()),
        Ok(tb_head)
    );
    drop((a, b));
    queue.close().await.unwrap();
    let drop = format!("DROP SCHEMA {quoted} CASCADE");
    pool().await.execute(drop.as_str()).await.unwrap();
}

/// The shared buffers (hit + read) of each claim statement's plan that `auto_explain`
/// logged in `log`, in order.
fn claim_buffers(log: &str) -> Vec<u64> {
    let lines: Vec<&str> = log.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if !line.contains("Query Text: WITH RECURSIVE now AS") {
            continue;
        }
        let buffers = lines[i + 1..]
            .iter()
            .take(12)
            .find_map(|l| l.trim().strip_prefix("Buffers: shared "))
            .expect("the plan's buffers");
        let n: u64 = buffers
            .split_whitespace()
            .filter_map(|part| {
                let (what, n) = part.split_once('=')?;
                (what == "hit" || what == "read").then(|| n.parse::<u64>().unwrap())
            })
            .sum();
        out.push(n);
    }
    out
}

/// Claims of the kind `b` beside 5,000 due series of the kind `a` that no consumer takes
/// read none of them: each claim statement's plan (`auto_explain`, with its buffers) reads
/// a few dozen buffers, as in a queue without series (the bound is 200). A claim of `b`
/// once read every due series to test its head's kind: 15,102 buffers here, ~80,000 and
/// 41 ms (against 0.3 ms) for 20,000 series.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_a_kind_reads_no_due_series_of_another_kind() {
    use crate::support::postgres::{harness_on, PgServer};
    let server = PgServer::start_with(&[
        "shared_preload_libraries=auto_explain",
        "auto_explain.log_min_duration=0",
        "auto_explain.log_analyze=on",
        "auto_explain.log_buffers=on",
    ]);
    let pool = sqlx::PgPool::connect(&server.url()).await.unwrap();
    let mut builder = Builder::new();
    builder.prefetch(1);
    let h = harness_on(&server);
    let queue = h.open(&builder).await.unwrap();
    let at = SystemTime::now() - Duration::from_secs(60);
    let ns =
        i64::try_from(at.duration_since(UNIX_EPOCH).unwrap().as_secs()).unwrap() * 1_000_000_000;
    let ts = jiff::Timestamp::from_second(ns / 1_000_000_000)
        .unwrap()
        .to_string();
    let every = Recurrence::every(Duration::from_secs(1))
        .unwrap()
        .to_string();
    // 5,000 series of the kind `a` (spec as version 4 writes it), their heads due.
    sqlx::query(
        "INSERT INTO wheel_jobs.series (queue, name, runs, head, head_id, last, rule, payload, kind, priority) \
         SELECT $1, 's' || g, 100, $2, 's' || g || '@' || $3, NULL, $4, '\\x'::bytea, 'a', 0 \
         FROM generate_series(1, 5000) g",
    )
    .bind(h.queue())
    .bind(ns)
    .bind(&ts)
    .bind(&every)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO wheel_jobs.jobs (queue, id, run_at, payload, kind, priority) \
         SELECT $1, 's' || g || '@' || $3, $2, '\\x'::bytea, 'a', 0 FROM generate_series(1, 5000) g",
    )
    .bind(h.queue())
    .bind(ns)
    .bind(&ts)
    .execute(&pool)
    .await
    .unwrap();
    for i in 0..6 {
        let id = format!("b:{i}");
        queue
            .schedule_with(&id, Duration::ZERO, "b", &JobOptions::kind("b"))
            .await
            .unwrap();
    }
    pool.execute("ANALYZE").await.unwrap();
    let mut c = queue.consume_kind("b");
    for _ in 0..6 {
        next(&mut c).await.ack().await.unwrap();
    }
    drop(c);
    queue.close().await.unwrap();
    let log = std::fs::read_to_string(server.dir().join("log")).unwrap();
    let buffers = claim_buffers(&log);
    assert!(buffers.len() >= 6, "{buffers:?}");
    // The first claim plans and reads the catalogs.
    let most = buffers[1..].iter().max().unwrap();
    assert!(*most <= 200, "buffers per claim of b: {buffers:?}");
}

/// A queue in a schema of its own: the series `hot` of the kind `a` at priority 5 whose
/// head is due, and the due jobs `a:low` (kind `a`) and `w:low` (kind `w`) at priority 0.
/// The queue, its schema (quoted) and the head's id.
async fn a_due_head_above_due_jobs(prefetch: usize) -> (JobQueue, String, String) {
    let schema = fresh("wj_stall");
    let mut builder = Builder::new();
    builder.postgres_schema(&schema).prefetch(prefetch);
    let queue = builder.postgres(&url(), "orders").await.unwrap();
    let quoted = format!("\"{schema}\"");
    let every = Recurrence::every(Duration::from_secs(1)).unwrap();
    let options = RecurringOptions::new()
        .options(JobOptions::kind("a").priority(5))
        .catch_up(CatchUp::All { max: 100 });
    queue
        .schedule_recurring_with("hot", every, "t", options)
        .await
        .unwrap();
    let at = queue.list_recurring().await.unwrap()[0].next_run().unwrap();
    for (id, kind) in [("a:low", "a"), ("w:low", "w")] {
        queue
            .schedule_with(id, Duration::ZERO, "j", &JobOptions::kind(kind))
            .await
            .unwrap();
    }
    sleep_past(at).await;
    (queue, quoted, occurrence("hot", at))
}

/// The first delivery of `consumer` within `secs` seconds, past any claim errors (each
/// counted in the answer).
async fn first_delivery(consumer: &mut wheel_jobs::Consumer, secs: u64) -> (Option<String>, usize) {
    let until = tokio::time::Instant::now() + Duration::from_secs(secs);
    let mut errors = 0;
    loop {
        match tokio::time::timeout_at(until, consumer.next()).await {
            Ok(Some(Ok(d))) => return (Some(d.id().to_owned()), errors),
            Ok(Some(Err(_))) => errors += 1,
            Ok(None) | Err(_) => return (None, errors),
        }
    }
}

/// The consumer of `kind` (`None`: `consume()`) of `queue`.
fn consumer_of(queue: &JobQueue, kind: Option<&str>) -> wheel_jobs::Consumer {
    match kind {
        None => queue.consume(),
        Some(kind) => queue.consume_kind(kind),
    }
}

/// A due head whose step fails every time (its next occurrence refused, as in
/// `a_failing_series_beside_another`) holds back no due job below its priority, of its
/// kind (`consume_kind`, a merged claim) nor, for `consume()`, of any kind: the same claim
/// takes them from below it, and its error is logged, not answered, as it delivers them.
/// Before, nothing was delivered, for good.
async fn a_head_whose_step_always_fails(kind: Option<&str>, expected: &[&str]) {
    let (queue, quoted, _head) = a_due_head_above_due_jobs(1).await;
    let pool = pool().await;
    pool.execute(
        format!(
            "CREATE FUNCTION {quoted}.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             RAISE EXCEPTION 'refused'; END $$; \
             CREATE TRIGGER refuse BEFORE INSERT ON {quoted}.jobs FOR EACH ROW \
             WHEN (NEW.id LIKE 'hot@%') EXECUTE FUNCTION {quoted}.refuse();"
        )
        .as_str(),
    )
    .await
    .unwrap();
    let mut consumer = consumer_of(&queue, kind);
    let (got, errors) = first_delivery(&mut consumer, 10).await;
    drop(consumer);
    assert!(
        got.as_deref().is_some_and(|id| expected.contains(&id)) && errors == 0,
        "{kind:?}: {got:?} ({errors} claim errors)"
    );
    queue.close().await.unwrap();
    pool.execute(format!("DROP SCHEMA {quoted} CASCADE").as_str())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_whose_step_always_fails_holds_back_no_lower_job_of_any_kind() {
    a_head_whose_step_always_fails(None, &["a:low", "w:low"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_whose_step_always_fails_holds_back_no_lower_job_of_its_kind() {
    a_head_whose_step_always_fails(Some("a"), &["a:low"]).await;
}

/// A due head whose job row another transaction holds (an application's open transaction
/// that read it `FOR UPDATE`, or a `cancel_in`/`reschedule_in` of it not yet committed)
/// holds back no due job below its priority, as a locked ordinary job holds back none:
/// before, the claim skipped it (SKIP LOCKED) but read no level below it, for as long as
/// that transaction lasted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_head_holds_back_no_lower_job() {
    let (queue, quoted, head) = a_due_head_above_due_jobs(1).await;
    let pool = pool().await;
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(&format!(
        "SELECT 1 FROM {quoted}.jobs WHERE id = $1 FOR UPDATE"
    ))
    .bind(&head)
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    let mut all = queue.consume();
    let (got, errors) = first_delivery(&mut all, 5).await;
    assert!(
        got.as_deref() == Some("w:low") || got.as_deref() == Some("a:low"),
        "consume() while the head's row is held: {got:?}, {errors} errors"
    );
    tx.rollback().await.unwrap();
    drop(all);
    queue.close().await.unwrap();
    pool.execute(format!("DROP SCHEMA {quoted} CASCADE").as_str())
        .await
        .unwrap();
}

/// As above, the head's series row held by another transaction (a setter, say), for a
/// claim of its kind (merged).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_whose_series_row_is_held_holds_back_no_lower_job() {
    let (queue, quoted, _head) = a_due_head_above_due_jobs(1).await;
    let pool = pool().await;
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(&format!(
        "SELECT 1 FROM {quoted}.series WHERE name = 'hot' FOR UPDATE"
    ))
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    let mut kind_a = queue.consume_kind("a");
    let (got, errors) = first_delivery(&mut kind_a, 5).await;
    assert_eq!(
        got.as_deref(),
        Some("a:low"),
        "consume_kind(a) while the series row is held: {errors} errors"
    );
    tx.rollback().await.unwrap();
    drop(kind_a);
    queue.close().await.unwrap();
    pool.execute(format!("DROP SCHEMA {quoted} CASCADE").as_str())
        .await
        .unwrap();
}

/// A queue in a schema of its own with `count` series `hot1..` of the kind `a` whose heads
/// are due and whose steps fail every time (their next occurrences refused): at the
/// priorities `1..=count` (`distinct`), with the due jobs `a:low` (kind `a`) and `w:low`
/// (kind `w`) at priority 0; else all at priority 0, with `a:low` due after them (behind
/// them in due order at their level). The queue and its schema (quoted).
async fn failing_heads(count: i8, prefetch: usize, distinct: bool) -> (JobQueue, String) {
    let schema = fresh("wj_bad");
    let mut builder = Builder::new();
    builder.postgres_schema(&schema).prefetch(prefetch);
    let queue = builder.postgres(&url(), "orders").await.unwrap();
    let quoted = format!("\"{schema}\"");
    let every = Recurrence::every(Duration::from_secs(1)).unwrap();
    for p in 1..=count {
        let options = RecurringOptions::new()
            .options(JobOptions::kind("a").priority(if distinct { p } else { 0 }))
            .catch_up(CatchUp::All { max: 100 });
        queue
            .schedule_recurring_with(&format!("hot{p}"), every.clone(), "t", options)
            .await
            .unwrap();
    }
    let series = queue.list_recurring().await.unwrap();
    let last = series.iter().map(|s| s.next_run().unwrap()).max().unwrap();
    if distinct {
        for (id, kind) in [("a:low", "a"), ("w:low", "w")] {
            queue
                .schedule_with(id, Duration::ZERO, "j", &JobOptions::kind(kind))
                .await
                .unwrap();
        }
    }
    pool()
        .await
        .execute(
            format!(
                "CREATE FUNCTION {quoted}.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
                 RAISE EXCEPTION 'refused'; END $$; \
                 CREATE TRIGGER refuse BEFORE INSERT ON {quoted}.jobs FOR EACH ROW \
                 WHEN (NEW.id LIKE 'hot%') EXECUTE FUNCTION {quoted}.refuse();"
            )
            .as_str(),
        )
        .await
        .unwrap();
    sleep_past(last).await;
    if !distinct {
        queue
            .schedule_with("a:low", Duration::ZERO, "j", &JobOptions::kind("a"))
            .await
            .unwrap();
    }
    (queue, quoted)
}

/// `levels` levels of due heads whose steps always fail, above due jobs at priority 0: the
/// first delivery of a consumer of `kind` (`None`: `consume()`) is one of `expected`.
/// However many levels of heads deliver nothing, a claim's last statement reads every
/// level without them; before, each statement read one more level of heads, and with
/// three levels or more nothing below them was ever read.
async fn failing_head_levels(levels: i8, kind: Option<&str>, expected: &[&str]) {
    let (queue, quoted) = failing_heads(levels, 1, true).await;
    let mut consumer = consumer_of(&queue, kind);
    let (got, errors) = first_delivery(&mut consumer, 10).await;
    drop(consumer);
    queue.close().await.unwrap();
    pool()
        .await
        .execute(format!("DROP SCHEMA {quoted} CASCADE").as_str())
        .await
        .unwrap();
    assert!(
        got.as_deref().is_some_and(|id| expected.contains(&id)),
        "{levels} levels, {kind:?}: {got:?} ({errors} claim errors)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_levels_of_failing_heads_hold_back_no_lower_job() {
    failing_head_levels(2, Some("a"), &["a:low"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_levels_of_failing_heads_hold_back_no_lower_job_of_any_kind() {
    failing_head_levels(3, None, &["a:low", "w:low"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_levels_of_failing_heads_hold_back_no_lower_job_of_their_kind() {
    failing_head_levels(3, Some("a"), &["a:low"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_levels_of_failing_heads_hold_back_no_lower_job_of_any_kind() {
    failing_head_levels(10, None, &["a:low", "w:low"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_levels_of_failing_heads_hold_back_no_lower_job_of_their_kind() {
    failing_head_levels(10, Some("a"), &["a:low"]).await;
}

/// Prefetch 1: three due heads of the kind `a` at priority 0 whose steps always fail, due
/// before `a:low` (priority 0 too): each statement lists one head (`$2` = 1), and before,
/// three statements listed the three and `a:low`, at their own level, was never claimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_failing_heads_hold_back_no_later_job_of_their_level() {
    let (queue, quoted) = failing_heads(3, 1, false).await;
    let mut consumer = queue.consume_kind("a");
    let (got, errors) = first_delivery(&mut consumer, 10).await;
    drop(consumer);
    queue.close().await.unwrap();
    pool()
        .await
        .execute(format!("DROP SCHEMA {quoted} CASCADE").as_str())
        .await
        .unwrap();
    assert_eq!(got.as_deref(), Some("a:low"), "{errors} claim errors");
}

/// A merged caller (`consume_kind`) that gives up while its claim's head step runs (slow,
/// then failing) is left out of the claim's next statement: before, that statement was
/// sent all the same and leased `a:low` for no one, and another consumer of `a` waited out
/// the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merged_caller_that_gave_up_is_left_out_of_its_claims_next_statement() {
    let (queue, quoted, _head) = a_due_head_above_due_jobs(1).await;
    // The handle's first claim folds the counters before it is sent: done here.
    queue
        .schedule_with("w:1", Duration::ZERO, "w", &JobOptions::kind("w"))
        .await
        .unwrap();
    let mut w = queue.consume_kind("w");
    for _ in 0..2 {
        w.next().await.unwrap().unwrap().ack().await.unwrap();
    }
    drop(w);
    let pool = pool().await;
    pool.execute(
        format!(
            "CREATE FUNCTION {quoted}.slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             PERFORM pg_sleep(2); RAISE EXCEPTION 'refused'; END $$; \
             CREATE TRIGGER slow BEFORE INSERT ON {quoted}.jobs FOR EACH ROW \
             WHEN (NEW.id LIKE 'hot@%') EXECUTE FUNCTION {quoted}.slow();"
        )
        .as_str(),
    )
    .await
    .unwrap();
    let mut a = queue.consume_kind("a");
    // Gives up while the head's step sleeps.
    let gave_up = tokio::time::timeout(Duration::from_millis(700), a.next()).await;
    assert!(
        gave_up.is_err(),
        "still claiming: {:?}",
        gave_up.map(|_| ())
    );
    drop(a);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let leased: Option<i64> = sqlx::query_scalar(&format!(
        "SELECT token FROM {quoted}.jobs WHERE id = 'a:low'"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    queue.close().await.unwrap();
    pool.execute(format!("DROP SCHEMA {quoted} CASCADE").as_str())
        .await
        .unwrap();
    assert_eq!(leased, None, "a:low leased for a caller that gave up");
}

/// Claims of a queue without series run one claim statement each, unmerged (`consume()`)
/// and merged (`consume_kind`): the rounds without heads that fell short cost nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_in_a_queue_without_series_is_one_statement() {
    use crate::support::postgres::{harness_on, PgServer};
    let server = PgServer::start_with(&["shared_preload_libraries=pg_stat_statements"]);
    let pool = sqlx::PgPool::connect(&server.url()).await.unwrap();
    pool.execute("CREATE EXTENSION pg_stat_statements")
        .await
        .unwrap();
    let mut builder = Builder::new();
    builder.prefetch(10);
    let h = harness_on(&server);
    let queue = h.open(&builder).await.unwrap();
    for i in 0..10 {
        queue
            .schedule(&format!("p:{i}"), Duration::ZERO, "p")
            .await
            .unwrap();
        queue
            .schedule_with(
                &format!("a:{i}"),
                Duration::ZERO,
                "a",
                &JobOptions::kind("a"),
            )
            .await
            .unwrap();
    }
    let calls = || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements \
             WHERE query LIKE 'WITH RECURSIVE now AS%'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        n
    };
    let mut kind_a = queue.consume_kind("a");
    let before = calls().await;
    for _ in 0..10 {
        kind_a.next().await.unwrap().unwrap().ack().await.unwrap();
    }
    let merged = calls().await - before;
    drop(kind_a);
    let mut all = queue.consume();
    let before = calls().await;
    for _ in 0..10 {
        all.next().await.unwrap().unwrap().ack().await.unwrap();
    }
    let unmerged = calls().await - before;
    drop(all);
    queue.close().await.unwrap();
    assert_eq!((merged, unmerged), (1, 1));
}
