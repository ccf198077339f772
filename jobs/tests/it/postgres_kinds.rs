//! Kinds, per-job options and priorities on PostgreSQL (feature `postgres`): the upgrade
//! of a version-2 schema with jobs in it, the kind filter of a claim (expired leases
//! included), the claim order by priority past a level's future jobs, per-kind counts and
//! lists, `schedule_in_with` in the caller's transaction, and `run_kind` loops whose claims
//! share a statement.

use std::time::{Duration, SystemTime};

use wheel_jobs::sqlx::{self, Executor, Row};
use wheel_jobs::{Builder, JobOptions, JobState, ListOptions, Scheduled};

use crate::postgres::{fresh, pool, url};
use crate::support::{next, Harness};

fn ago(secs: u64) -> SystemTime {
    SystemTime::now() - Duration::from_secs(secs)
}

/// The schema `schema` as version 2 of the library left it, made from its own files; its
/// quoted name.
async fn version_2(pool: &sqlx::PgPool, schema: &str) -> String {
    let quoted = format!("\"{schema}\"");
    let mut v2 = format!(        "CREATE SCHEMA {quoted}; \
         CREATE TABLE {quoted}.schema_version (id integer PRIMARY KEY CHECK (id = 1), version integer NOT NULL); \
         INSERT INTO {quoted}.schema_version VALUES (1, 2);"
    );
    for file in [
        include_str!("../../src/backend/postgres/migrations/0001_jobs.sql"),
        include_str!("../../src/backend/postgres/migrations/0002_wake_soon.sql"),
    ] {
        v2.push_str(&file.replace("{schema}", &quoted));
    }
    pool.execute(v2.as_str()).await.unwrap();
    quoted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_2_schema_upgrades_and_its_jobs_read_as_the_plain_spec() {
    let schema = fresh("wj_v2");
    let pool = pool().await;
    let quoted = version_2(&pool, &schema).await;
    let now = "(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint";
    pool.execute(
        format!(
            "INSERT INTO {quoted}.jobs (queue, id, run_at, attempt, payload) VALUES \
             ('orders', 'old-due', {now} - 2000000000, 0, 'a'), \
             ('orders', 'old-tired', {now} - 1000000000, 2, 'b'), \
             ('orders', 'old-later', {now} + 3600000000000, 0, 'c'); \
             INSERT INTO {quoted}.dead (queue, id, run_at, attempt, died_at, last_error, payload) \
             VALUES ('orders', 'old-dead', 1, 5, 2, 'boom', 'd')"
        )
        .as_str(),
    )
    .await
    .unwrap();

    let mut builder = Builder::new();
    builder
        .postgres_schema(&schema)
        .max_attempts(3)
        .lease(Duration::from_secs(30));
    let queue = builder.postgres(&url(), "orders").await.unwrap();
    let version: i32 = sqlx::query(&format!("SELECT version FROM {quoted}.schema_version"))
        .fetch_one(&pool)
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, 4);

    // Counted under the kind "" with the totals, read with the queue's own options.
    let counts = queue.counts().await.unwrap();
    assert_eq!((counts.pending, counts.running, counts.dead), (3, 0, 1));
    assert_eq!(counts.kinds.len(), 1);
    let plain = counts.kinds[""];
    assert_eq!((plain.pending, plain.running, plain.dead), (3, 0, 1));
    for id in ["old-due", "old-tired", "old-later", "old-dead"] {
        let job = queue.get(id).await.unwrap().expect(id);
        assert_eq!((job.kind(), job.priority(), job.max_attempts()), ("", 0, 3));
    }

    // Claimable, in due order; the job at its second attempt dies by the queue's 3.
    let mut consumer = queue.consume();
    let first = next(&mut consumer).await;
    let second = next(&mut consumer).await;
    assert_eq!((first.id(), second.id()), ("old-due", "old-tired"));
    assert_eq!((first.attempt(), second.attempt()), (1, 3));
    assert!(first.ack().await.unwrap());
    assert!(second.fail(Duration::ZERO, "still tired").await.unwrap());
    let tired = queue.get("old-tired").await.unwrap().unwrap();
    assert_eq!(tired.state(), JobState::Dead);
    assert_eq!(tired.last_error(), Some("still tired"));

    // A revived old job keeps reading as plain; new jobs store their own options.
    assert!(queue.revive("old-dead", Duration::ZERO).await.unwrap());
    let revived = next(&mut consumer).await;
    assert_eq!((revived.id(), revived.kind()), ("old-dead", ""));
    assert!(revived.ack().await.unwrap());
    let opts = JobOptions::kind("rate").priority(3).max_attempts(7);
    queue
        .schedule_with("new", Duration::ZERO, "n", &opts)
        .await
        .unwrap();
    let new = next(&mut consumer).await;
    assert_eq!((new.id(), new.kind(), new.priority()), ("new", "rate", 3));
    assert!(new.ack().await.unwrap());
    let counts = queue.counts().await.unwrap();
    assert_eq!((counts.pending, counts.running, counts.dead), (1, 0, 1));
    assert!(!counts.kinds.contains_key("rate"));
    drop(consumer);
    queue.close().await.unwrap();
    pool.execute(format!("DROP SCHEMA {quoted} CASCADE").as_str())
        .await
        .unwrap();
}

/// Version 3 on a schema of version 2 adds the hold-off and the tombstones: an old job has
/// none (its ack leaves nothing), a new one's ack leaves its tombstone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_2_schema_upgrades_to_hold_offs_and_tombstones() {
    let schema = fresh("wj_v2h");
    let pool = pool().await;
    let quoted = version_2(&pool, &schema).await;
    let now = "(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint";
    pool.execute(
        format!(
            "INSERT INTO {quoted}.jobs (queue, id, run_at, attempt, payload) VALUES \
             ('orders', 'old', {now} - 1000000000, 0, 'a')"
        )
        .as_str(),
    )
    .await
    .unwrap();
    let mut builder = Builder::new();
    builder.postgres_schema(&schema);
    let queue = builder.postgres(&url(), "orders").await.unwrap();
    let held = JobOptions::new().dedup(wheel_jobs::Dedup::HoldOff(Duration::from_secs(3600)));
    queue
        .schedule_with("new", Duration::from_millis(10), "n", &held)
        .await
        .unwrap();
    let mut consumer = queue.consume();
    for id in ["old", "new"] {
        let d = next(&mut consumer).await;
        assert_eq!(d.id(), id);
        assert!(d.ack().await.unwrap());
    }
    drop(consumer);
    let tombstones: Vec<String> = sqlx::query(&format!(
        "SELECT id FROM {quoted}.held WHERE queue = 'orders'"
    ))
    .fetch_all(&pool)
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect();
    assert_eq!(tombstones, ["new"]);
    assert_eq!(
        queue.schedule("old", Duration::ZERO, "a").await.unwrap(),
        Scheduled::Created
    );
    assert!(matches!(
        queue.schedule("new", Duration::ZERO, "n").await.unwrap(),
        Scheduled::HeldOff { .. }
    ));
    queue.close().await.unwrap();
    pool.execute(format!("DROP SCHEMA {quoted} CASCADE").as_str())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_one_kind_never_touches_another_kinds_jobs() {
    let harness = crate::support::postgres::harness();
    let queue = harness.open(&Builder::new()).await.unwrap();
    // A remind job whose lease ends at once and whose one attempt is spent by then.
    let remind = JobOptions::kind("remind")
        .max_attempts(1)
        .lease(Duration::from_secs(1));
    queue
        .schedule_with("remind:1", Duration::ZERO, "r", &remind)
        .await
        .unwrap();
    queue
        .schedule_with("remind:2", Duration::ZERO, "r", &JobOptions::kind("remind"))
        .await
        .unwrap();
    let mut reminders = queue.consume_kind("remind");
    let leased = next(&mut reminders).await;
    let other = next(&mut reminders).await;
    assert_eq!((leased.id(), other.id()), ("remind:1", "remind:2"));
    drop(reminders);
    assert!(other.ack().await.unwrap());
    queue
        .schedule_with("rate:1", Duration::ZERO, "5", &JobOptions::kind("rate"))
        .await
        .unwrap();
    // Past remind:1's lease: a rate claim neither kills it nor redelivers it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut rates = queue.consume_kind("rate");
    let rate = next(&mut rates).await;
    assert_eq!((rate.id(), rate.kind()), ("rate:1", "rate"));
    assert!(rate.ack().await.unwrap());
    let untouched = queue.get("remind:1").await.unwrap().unwrap();
    assert_eq!(
        (untouched.state(), untouched.attempt()),
        (JobState::Running, 1)
    );
    let counts = queue.counts().await.unwrap();
    assert_eq!(counts.kinds["remind"].running, 1);
    assert_eq!(counts.kinds["remind"].dead, 0);
    // Its own kind's claim kills it, by its own max_attempts (the queue's is 5).
    queue
        .schedule_with("remind:3", Duration::ZERO, "r", &JobOptions::kind("remind"))
        .await
        .unwrap();
    let mut reminders = queue.consume_kind("remind");
    let third = next(&mut reminders).await;
    assert_eq!(third.id(), "remind:3");
    assert!(third.ack().await.unwrap());
    let dead = queue.get("remind:1").await.unwrap().unwrap();
    assert_eq!(
        (dead.state(), dead.last_error()),
        (JobState::Dead, Some("lease expired"))
    );
    let counts = queue.counts().await.unwrap();
    let remind = counts.kinds["remind"];
    assert_eq!((remind.pending, remind.running, remind.dead), (0, 0, 1));
    assert!(!counts.kinds.contains_key("rate"));

    // The kind "" is a kind like the others: its claims and lists leave the named ones.
    queue
        .schedule_with("remind:4", ago(60), "r", &JobOptions::kind("remind"))
        .await
        .unwrap();
    queue.schedule("plain:1", ago(1), "p").await.unwrap();
    let page = queue
        .list(JobState::Pending, ListOptions::new().kind(""))
        .await
        .unwrap();
    let ids: Vec<_> = page.jobs().iter().map(|j| j.id()).collect();
    assert_eq!(ids, ["plain:1"]);
    let mut plain = queue.consume_kind("");
    let job = next(&mut plain).await;
    assert_eq!((job.id(), job.kind()), ("plain:1", ""));
    assert!(job.ack().await.unwrap());
    let waiting = queue.get("remind:4").await.unwrap().unwrap();
    assert_eq!((waiting.state(), waiting.attempt()), (JobState::Pending, 0));
    drop((rates, reminders, plain));
    queue.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priorities_order_the_claim_past_a_levels_future_jobs() {
    let harness = crate::support::postgres::harness();
    let mut builder = Builder::new();
    builder.prefetch(16);
    let queue = harness.open(&builder).await.unwrap();
    let at = |p: i8| JobOptions::new().priority(p);
    // The top level holds only future jobs: a claim must look past them.
    let future: Vec<_> = (0..200)
        .map(|i| (format!("later:{i:03}"), Duration::from_secs(3600), "f"))
        .collect();
    queue.schedule_many_with(future, &at(9)).await.unwrap();
    queue
        .schedule_with("low", ago(30), "l", &at(-5))
        .await
        .unwrap();
    // The same run_at: by id.
    let ten_ago = ago(10);
    queue
        .schedule_with("mid-b", ten_ago, "m", &at(0))
        .await
        .unwrap();
    queue
        .schedule_with("mid-a", ten_ago, "m", &at(0))
        .await
        .unwrap();
    queue
        .schedule_with("mid-0", ago(20), "m", &at(0))
        .await
        .unwrap();
    let kind = JobOptions::kind("rate").priority(5);
    queue
        .schedule_with("high", ago(1), "h", &kind)
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let mut order = Vec::new();
    for _ in 0..5 {
        let job = next(&mut consumer).await;
        order.push((job.id().to_owned(), job.priority()));
        assert!(job.ack().await.unwrap());
    }
    let want = [
        ("high", 5),
        ("mid-0", 0),
        ("mid-a", 0),
        ("mid-b", 0),
        ("low", -5),
    ];
    let want: Vec<_> = want.iter().map(|(id, p)| (id.to_string(), *p)).collect();
    assert_eq!(order, want);

    // Lists follow the pending order (run_at, id) across levels, per kind if asked.
    let page = queue
        .list(JobState::Pending, ListOptions::new().limit(3))
        .await
        .unwrap();
    let ids: Vec<_> = page.jobs().iter().map(|j| j.id()).collect();
    assert_eq!(ids, ["later:000", "later:001", "later:002"]);
    queue
        .schedule_with(
            "rate:2",
            ago(5),
            "r",
            &JobOptions::kind("rate").priority(-1),
        )
        .await
        .unwrap();
    let page = queue
        .list(JobState::Pending, ListOptions::new().kind("rate"))
        .await
        .unwrap();
    let ids: Vec<_> = page.jobs().iter().map(|j| j.id()).collect();
    assert_eq!(ids, ["rate:2"]);
    assert_eq!(page.jobs()[0].priority(), -1);
    let counts = queue.counts().await.unwrap();
    assert_eq!(counts.pending, 201);
    assert_eq!(
        (counts.kinds[""].pending, counts.kinds["rate"].pending),
        (200, 1)
    );
    drop(consumer);
    queue.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_in_with_commits_or_rolls_back_with_the_transaction() {
    let pool = pool().await;
    let queue = Builder::new()
        .postgres_pool(pool.clone(), &fresh("pay"))
        .await
        .unwrap();
    let capture = JobOptions::kind("capture").priority(10).max_attempts(3);

    let mut tx = pool.begin().await.unwrap();
    let created = queue
        .schedule_in_with(&mut tx, "capture:1", Duration::ZERO, "1", &capture)
        .await
        .unwrap();
    assert_eq!(created, Scheduled::Created);
    tx.rollback().await.unwrap();
    assert_eq!(queue.get("capture:1").await.unwrap(), None);
    let counts = queue.counts().await.unwrap();
    assert_eq!(counts.pending, 0);
    assert!(counts.kinds.is_empty());

    let mut tx = pool.begin().await.unwrap();
    queue
        .schedule_in_with(&mut tx, "capture:1", Duration::ZERO, "1", &capture)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let job = queue.get("capture:1").await.unwrap().unwrap();
    assert_eq!(
        (job.kind(), job.priority(), job.max_attempts()),
        ("capture", 10, 3)
    );
    assert_eq!(queue.counts().await.unwrap().kinds["capture"].pending, 1);
    let bad = JobOptions::kind("capture").max_attempts(0);
    let mut tx = pool.begin().await.unwrap();
    let err = queue
        .schedule_in_with(&mut tx, "capture:2", Duration::ZERO, "2", &bad)
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    tx.rollback().await.unwrap();
    let mut consumer = queue.consume_kind("capture");
    let delivered = next(&mut consumer).await;
    assert_eq!((delivered.id(), delivered.priority()), ("capture:1", 10));
    assert!(delivered.ack().await.unwrap());
    drop(consumer);
    queue.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_claim_finds_its_job_past_windows_of_another_kinds_future_jobs() {
    let harness = crate::support::postgres::harness();
    let queue = harness.open(&Builder::new()).await.unwrap();
    // 2,500 future jobs of another kind at the plain job's level (0), all due before it:
    // more than two of the windows a claim of the kind '' reads for its next due time.
    let start = SystemTime::now();
    let others: Vec<_> = (0..2500u64)
        .map(|i| {
            let at = start + Duration::from_secs(1) + Duration::from_micros(400 * i);
            (format!("other:{i:04}"), at, "o")
        })
        .collect();
    queue
        .schedule_many_with(others, &JobOptions::kind("other"))
        .await
        .unwrap();
    let plain_at = start + Duration::from_millis(2500);
    queue.schedule("plain", plain_at, "p").await.unwrap();

    // `next` asserts the delivery is not before its run_at.
    let mut consumer = queue.consume_kind("");
    let job = next(&mut consumer).await;
    assert_eq!((job.id(), job.kind()), ("plain", ""));
    assert_eq!(job.run_at(), plain_at);
    assert!(job.ack().await.unwrap());
    let counts = queue.counts().await.unwrap();
    assert_eq!(counts.kinds["other"].pending, 2500);
    assert!(!counts.kinds.contains_key(""));
    drop(consumer);
    queue.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_occurrence_is_claimed_before_a_due_job_below_priority_0() {
    let harness = crate::support::postgres::harness();
    let mut builder = Builder::new();
    builder.prefetch(1);
    let queue = harness.open(&builder).await.unwrap();
    queue
        .schedule_with("low", ago(30), "l", &JobOptions::new().priority(-5))
        .await
        .unwrap();
    let every = wheel_jobs::Recurrence::every(Duration::from_secs(2)).unwrap();
    queue.schedule_recurring("tick", every, "t").await.unwrap();
    // Both due before the first claim.
    let first = queue.list_recurring().await.unwrap()[0].next_run().unwrap();
    if let Ok(wait) = first.duration_since(SystemTime::now()) {
        tokio::time::sleep(wait + Duration::from_millis(50)).await;
    }

    let mut consumer = queue.consume();
    let tick = next(&mut consumer).await;
    assert!(tick.id().starts_with("tick@"), "{}", tick.id());
    assert_eq!(tick.run_at(), first);
    assert!(tick.ack().await.unwrap());
    let low = next(&mut consumer).await;
    assert_eq!((low.id(), low.priority()), ("low", -5));
    assert!(low.ack().await.unwrap());
    drop(consumer);
    queue.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_behind_an_open_transaction_fails_clearly_then_succeeds() {
    let schema = fresh("wj_lock");
    let pool = pool().await;
    let quoted = version_2(&pool, &schema).await;
    let version = || async {
        let row = sqlx::query(&format!("SELECT version FROM {quoted}.schema_version"))
            .fetch_one(&pool)
            .await
            .unwrap();
        row.get::<i32, _>(0)
    };
    // An application's transaction that read the jobs and is still open.
    let mut app = pool.begin().await.unwrap();
    sqlx::query(&format!("SELECT count(*) FROM {quoted}.jobs"))
        .fetch_one(&mut *app)
        .await
        .unwrap();
    let mut builder = Builder::new();
    builder.postgres_schema(&schema);
    let err = tokio::time::timeout(Duration::from_secs(120), builder.postgres(&url(), "orders"))
        .await
        .expect("the migration gives up on its lock wait, it does not hang")
        .unwrap_err();
    assert!(err.is_unavailable(), "{err}");
    assert!(
        err.to_string().contains("for a lock on its tables"),
        "{err}"
    );
    assert!(err.to_string().contains("to version 3"), "{err}");
    assert_eq!(version().await, 2);

    app.commit().await.unwrap();
    let queue = builder.postgres(&url(), "orders").await.unwrap();
    assert_eq!(version().await, 4);
    queue.close().await.unwrap();
    pool.execute(format!("DROP SCHEMA {quoted} CASCADE").as_str())
        .await
        .unwrap();
}

/// `run_kind` loops of one handle whose claims are in flight together share one claim
/// statement (`claims.rs`): each loop still gets only its own kind, never more jobs than
/// its free slots, every job once; a kind no loop runs is left alone, and an idle loop's
/// job due later comes at its time, never before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_kind_loops_of_one_handle_share_claims_and_keep_their_kinds_and_slots() {
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;

    const KINDS: [&str; 4] = ["rate", "remind", "capture", "digest"];
    const EACH: usize = 40;
    const SLOTS: usize = 3;
    let harness = crate::support::postgres::harness();
    let queue = harness.open(&Builder::new()).await.unwrap();
    let now = SystemTime::now();
    for (n, kind) in KINDS.into_iter().enumerate() {
        let jobs = (0..EACH).map(|i| (format!("{kind}:{i}"), now, "p"));
        let options = JobOptions::kind(kind).priority(n as i8 - 1);
        queue.schedule_many_with(jobs, &options).await.unwrap();
    }
    let orphans = (0..5).map(|i| (format!("orphan:{i}"), now, "o"));
    queue
        .schedule_many_with(orphans, &JobOptions::kind("nobody"))
        .await
        .unwrap();
    let later_at = now + Duration::from_millis(1500);
    queue
        .schedule_with("later:1", later_at, "l", &JobOptions::kind("later"))
        .await
        .unwrap();

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let most = Arc::new(std::sync::Mutex::new(BTreeMap::<String, usize>::new()));
    let mut loops = Vec::new();
    for kind in KINDS.into_iter().chain(["later"]) {
        let (queue, tx, most) = (queue.clone(), tx.clone(), most.clone());
        let running = Arc::new(AtomicUsize::new(0));
        loops.push(tokio::spawn(async move {
            queue
                .run_kind(kind, SLOTS, move |d| {
                    let (tx, most, running) = (tx.clone(), most.clone(), running.clone());
                    async move {
                        let now_running = running.fetch_add(1, SeqCst) + 1;
                        {
                            let mut most = most.lock().unwrap();
                            let seen = most.entry(kind.to_owned()).or_default();
                            *seen = (*seen).max(now_running);
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        running.fetch_sub(1, SeqCst);
                        tx.send((
                            kind,
                            d.kind().to_owned(),
                            d.id().to_owned(),
                            SystemTime::now(),
                        ))
                        .unwrap();
                        Ok::<(), String>(())
                    }
                })
                .await
        }));
    }
    drop(tx);
    let mut seen = BTreeSet::new();
    for _ in 0..KINDS.len() * EACH + 1 {
        let (worker, kind, id, at) = rx.recv().await.unwrap();
        assert_eq!(worker, kind, "{id} went to the {worker} loop");
        if id == "later:1" {
            assert!(at >= later_at, "later:1 came before its time");
        }
        assert!(seen.insert(id.clone()), "{id} was delivered twice");
    }
    let expect: BTreeSet<String> = KINDS
        .iter()
        .flat_map(|kind| (0..EACH).map(move |i| format!("{kind}:{i}")))
        .chain(["later:1".to_owned()])
        .collect();
    assert_eq!(seen, expect);
    for (kind, most) in most.lock().unwrap().iter() {
        assert!(*most <= SLOTS, "{most} {kind} handlers ran at once");
    }
    // The acks commit after the handlers report.
    loop {
        let counts = queue.counts().await.unwrap();
        if counts.running == 0 && counts.pending == 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for i in 0..5 {
        let orphan = queue.get(&format!("orphan:{i}")).await.unwrap().unwrap();
        assert_eq!((orphan.state(), orphan.attempt()), (JobState::Pending, 0));
    }
    queue.close().await.unwrap();
    for run in loops {
        run.await.unwrap().unwrap();
    }
    assert!(rx.try_recv().is_err(), "no job was delivered twice");
}

/// Polls `fut` once, which must not be ready: a claim it makes is sent (to the claim
/// batcher, which a current-thread runtime runs only once the test awaits).
async fn poll_once<F: std::future::Future + Unpin>(fut: &mut F) {
    std::future::poll_fn(|cx| {
        assert!(std::pin::Pin::new(&mut *fut).poll(cx).is_pending());
        std::task::Poll::Ready(())
    })
    .await;
}

/// The tokens of the queue's leased jobs, by id.
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

/// The claims of two `run_kind` loops in flight together are one statement: both kinds'
/// jobs are leased under one token, where each claim of its own draws a token.
#[tokio::test]
async fn claims_of_two_kinds_in_flight_together_share_one_statement() {
    let harness = crate::support::postgres::harness();
    let queue = harness.open(&Builder::new()).await.unwrap();
    let now = SystemTime::now();
    for kind in ["a", "b", "w"] {
        let options = JobOptions::kind(kind);
        let id = format!("{kind}:1");
        queue.schedule_with(&id, now, "p", &options).await.unwrap();
    }
    // The handle's first claim folds the counters before it is sent: done here.
    let w = queue.consume_kind("w").next().await.unwrap().unwrap();
    w.ack().await.unwrap();
    let mut a = queue.consume_kind("a");
    let mut b = queue.consume_kind("b");
    let mut b_next = Box::pin(b.next());
    poll_once(&mut b_next).await;
    // Sent while b's waits unsent (current-thread runtime): the batcher takes both.
    assert_eq!(a.next().await.unwrap().unwrap().id(), "a:1");
    assert_eq!(b_next.await.unwrap().unwrap().id(), "b:1");
    let leased = tokens(harness.queue()).await;
    let ids: Vec<&str> = leased.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["a:1", "b:1"]);
    assert_eq!(leased[0].1, leased[1].1, "one statement, one token");
}

/// A merged claim takes each kind's expired leases up to its room: kind a's older expired
/// leases, more than the claim takes, leave b's claim, merged with a's, b's own expired
/// jobs (as its own claim would have taken them).
#[tokio::test]
async fn a_merged_claim_gives_each_kind_its_own_expired_leases() {
    let harness = crate::support::postgres::harness();
    let mut setup_builder = Builder::new();
    setup_builder.prefetch(8);
    let setup = harness.open(&setup_builder).await.unwrap();
    let now = SystemTime::now();
    let short = |kind: &str| JobOptions::kind(kind).lease(Duration::from_secs(1));
    let jobs = (0..6).map(|i| (format!("a:{i}"), now, "p"));
    setup.schedule_many_with(jobs, &short("a")).await.unwrap();
    let mut held = Vec::new();
    let mut a = setup.consume_kind("a");
    for _ in 0..6 {
        held.push(a.next().await.unwrap().unwrap());
    }
    let jobs = (0..2).map(|i| (format!("b:{i}"), now, "p"));
    setup.schedule_many_with(jobs, &short("b")).await.unwrap();
    let mut b = setup.consume_kind("b");
    for _ in 0..2 {
        held.push(b.next().await.unwrap().unwrap());
    }
    // Every lease ends, a's before b's.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    setup
        .schedule_with("w:1", now, "w", &JobOptions::kind("w"))
        .await
        .unwrap();

    let mut builder = Builder::new();
    builder.prefetch(2);
    let queue = harness.open(&builder).await.unwrap();
    // The handle's first claim folds the counters before it is sent: done here.
    let w = queue.consume_kind("w").next().await.unwrap().unwrap();
    w.ack().await.unwrap();
    let mut a = queue.consume_kind("a");
    let mut b = queue.consume_kind("b");
    let mut b_next = Box::pin(b.next());
    poll_once(&mut b_next).await;
    // Sent while b's waits unsent: one statement (current-thread runtime).
    let first = a.next().await.unwrap().unwrap();
    assert!(first.id().starts_with("a:"));
    for id in ["b:0", "b:1"] {
        let job = setup.get(id).await.unwrap().unwrap();
        assert_eq!(job.attempt(), 2, "{id}: b's claim took b's expired job");
    }
    drop(held);
}

/// A claim whose caller gave up after its batch was taken, while an earlier group of the
/// batch (a claim of the same kind) runs, is not sent: it leases nothing.
#[tokio::test]
async fn a_claim_given_up_before_its_group_is_sent_leases_nothing() {
    let harness = crate::support::postgres::harness();
    let mut builder = Builder::new();
    builder.prefetch(2);
    let queue = harness.open(&builder).await.unwrap();
    let now = SystemTime::now();
    let jobs = (0..4).map(|i| (format!("a:{i}"), now, "p"));
    queue
        .schedule_many_with(jobs, &JobOptions::kind("a"))
        .await
        .unwrap();
    let w = JobOptions::kind("w");
    queue.schedule_with("w:1", now, "w", &w).await.unwrap();
    let first_w = queue.consume_kind("w").next().await.unwrap().unwrap();
    first_w.ack().await.unwrap();
    queue.schedule_with("w:2", now, "w", &w).await.unwrap();
    let mut a1 = queue.consume_kind("a");
    let mut a2 = queue.consume_kind("a");
    let mut n1 = Box::pin(a1.next());
    poll_once(&mut n1).await;
    poll_once(&mut Box::pin(a2.next())).await;
    // The batcher takes both claims (two groups: one kind) and sends the first.
    tokio::task::yield_now().await;
    drop(a2);
    let got = n1.await.unwrap().unwrap();
    assert!(got.id().starts_with("a:"));
    // Through the same batcher: answered after the second group's turn.
    let _ = queue.consume_kind("w").next().await.unwrap().unwrap();
    let mut leased = Vec::new();
    for i in 0..4 {
        let job = queue.get(&format!("a:{i}")).await.unwrap().unwrap();
        if job.state() == JobState::Running {
            leased.push(job.id().to_owned());
        }
    }
    assert_eq!(leased.len(), 2, "leased, of which a1 holds two: {leased:?}");
}
