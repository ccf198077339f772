//! Fairness per key on PostgreSQL (feature `postgres`): the `gates` table and the `waiting`
//! flag after each path (a rebalance's swap, key order (due time, then priority, then id),
//! a claim's hand-over and a Replace moving a job from one gate to another, a gate's
//! deletion with its last job, a rate window's timer kept on an empty gate and processed by
//! a claim, a retry re-entering without changing the gate's limits, `schedule_in` and
//! `ack_in` in the caller's transaction, every gate's counters, admitted jobs and order
//! through a drain by the starts' and releases' fast paths, a claim's kill and lease in one
//! gate, a release beside a held waiting row, a rate window's timer set by another
//! process's schedule waking an idle consumer), and keyed jobs consumed by
//! three processes, one of them SIGKILLed, while the store's own count of running jobs per
//! key is sampled.
//!
//! Every queue is on the test binary's shared server (`support/postgres.rs`), in the
//! default schema `wheel_jobs`.

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant, SystemTime};

use wheel_jobs::sqlx::{self, Row};
use wheel_jobs::{Builder, Dedup, JobOptions, JobQueue, JobState, Scheduled, MIN_LEASE};

use crate::kill::{child_role, runtime, spawn_child, Killed};
use crate::postgres::{connections_gone, fresh, pool, url};
use crate::suite::keys;
use crate::support::{ms, next};

const HOUR: Duration = Duration::from_secs(3600);

async fn open(queue: &str, kind: JobOptions) -> JobQueue {
    Builder::new()
        .lease(MIN_LEASE)
        .prefetch(16)
        .kind("sync", kind)
        .postgres(&url(), queue)
        .await
        .unwrap()
}

/// The gate `(sync, key)` of `queue` as stored: running, admitted, started, whether its
/// timer is set; `None` if it has no row.
async fn gate(pool: &sqlx::PgPool, queue: &str, key: &str) -> Option<(i32, i32, i32, bool)> {
    sqlx::query(
        "SELECT running, admitted, started, wake_at IS NOT NULL FROM wheel_jobs.gates \
         WHERE queue = $1 AND kind = 'sync' AND key = $2",
    )
    .bind(queue)
    .bind(key)
    .fetch_optional(pool)
    .await
    .unwrap()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
}

/// Whether the gate `(kind, key)` of `queue` has a row.
async fn gate_of(pool: &sqlx::PgPool, queue: &str, kind: &str, key: &str) -> Option<i32> {
    sqlx::query_scalar(
        "SELECT running FROM wheel_jobs.gates WHERE queue = $1 AND kind = $2 AND key = $3",
    )
    .bind(queue)
    .bind(kind)
    .bind(key)
    .fetch_optional(pool)
    .await
    .unwrap()
}

/// The pending jobs of `queue` that wait for their gate, in id order.
async fn waiting(pool: &sqlx::PgPool, queue: &str) -> Vec<String> {
    sqlx::query_scalar("SELECT id FROM wheel_jobs.jobs WHERE queue = $1 AND waiting ORDER BY id")
        .bind(queue)
        .fetch_all(pool)
        .await
        .unwrap()
}

/// A transaction holding the row of job `id` of `queue` (`FOR UPDATE`, as a caller's
/// `schedule_in` or a series step's read holds it) until it ends.
async fn hold(
    pool: &sqlx::PgPool,
    queue: &str,
    id: &str,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM wheel_jobs.jobs WHERE queue = $1 AND id = $2 FOR UPDATE")
        .bind(queue)
        .bind(id)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx
}

/// [`keys::backlog`] of kind `sync`.
async fn backlog(queue: &JobQueue, key: &str, n: u64) {
    keys::backlog(queue, key, n, &JobOptions::kind("sync")).await;
}

/// A limit of 2: the first two in key order are admitted, the rest wait; a reschedule of a
/// waiting job before the admitted ones swaps it with the last of them; the gate is
/// deleted with its last job.
#[tokio::test]
async fn postgres_a_gate_admits_its_first_jobs_swaps_and_is_deleted_with_its_last() {
    let name = fresh("kg");
    let pool = pool().await;
    let queue = open(&name, JobOptions::new().key_limit(2)).await;
    backlog(&queue, "a", 4).await;
    assert_eq!(waiting(&pool, &name).await, ["a2", "a3"]);
    assert_eq!(gate(&pool, &name, "a").await, Some((0, 2, 0, false)));
    let early = SystemTime::now() - Duration::from_secs(10);
    assert!(queue.reschedule("a3", early).await.unwrap());
    assert_eq!(
        waiting(&pool, &name).await,
        ["a1", "a2"],
        "a3 moved before a1: swapped"
    );
    let mut consumer = queue.consume_kind("sync");
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(next(&mut consumer).await);
    }
    // No consumer claims what the acks below admit before the gate is read.
    drop(consumer);
    let mut ids: Vec<&str> = held.iter().map(|d| d.id()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["a0", "a3"]);
    assert_eq!(gate(&pool, &name, "a").await, Some((2, 0, 0, false)));
    assert_eq!(waiting(&pool, &name).await, ["a1", "a2"]);
    for d in held {
        assert!(d.ack().await.unwrap());
    }
    assert_eq!(waiting(&pool, &name).await, Vec::<String>::new());
    assert_eq!(gate(&pool, &name, "a").await, Some((0, 2, 0, false)));
    let mut consumer = queue.consume_kind("sync");
    for _ in 0..2 {
        assert!(next(&mut consumer).await.ack().await.unwrap());
    }
    assert_eq!(
        gate(&pool, &name, "a").await,
        None,
        "deleted with its last job"
    );
    queue.close().await.unwrap();
}

/// Key order is due time first: with a limit of 1, a job of priority 5 due in an hour,
/// scheduled first, gives its admitted slot to a job of priority 0 due now (a swap), which
/// is claimed now; the other waits.
#[tokio::test]
async fn postgres_a_due_job_is_admitted_before_a_later_job_of_a_higher_priority() {
    let name = fresh("ko");
    let pool = pool().await;
    let queue = open(&name, JobOptions::new().key_limit(1)).await;
    let keyed = |priority| JobOptions::kind("sync").key("a").priority(priority);
    queue
        .schedule_with("later", HOUR, "p", &keyed(5))
        .await
        .unwrap();
    assert_eq!(waiting(&pool, &name).await, Vec::<String>::new());
    queue
        .schedule_with("due", Duration::ZERO, "p", &keyed(0))
        .await
        .unwrap();
    assert_eq!(
        waiting(&pool, &name).await,
        ["later"],
        "the due job took the slot"
    );
    assert_eq!(gate(&pool, &name, "a").await, Some((0, 1, 0, false)));
    let mut consumer = queue.consume_kind("sync");
    let d = tokio::time::timeout(Duration::from_secs(30), next(&mut consumer))
        .await
        .expect("the due job is claimed now");
    assert_eq!(d.id(), "due");
    drop(consumer);
    assert_eq!(gate(&pool, &name, "a").await, Some((1, 0, 0, false)));
    assert_eq!(waiting(&pool, &name).await, ["later"]);
    queue.close().await.unwrap();
}

/// Key order among jobs due at the same time: priority first (higher first), then id.
#[tokio::test]
async fn postgres_jobs_due_at_once_are_admitted_by_priority_then_id() {
    let name = fresh("kp");
    let pool = pool().await;
    let queue = open(&name, JobOptions::new().key_limit(1)).await;
    let at = SystemTime::now() - Duration::from_secs(1);
    let keyed = |priority| JobOptions::kind("sync").key("a").priority(priority);
    for (id, priority) in [("a", 0), ("c", 5), ("b", 5)] {
        queue
            .schedule_with(id, at, "p", &keyed(priority))
            .await
            .unwrap();
    }
    assert_eq!(waiting(&pool, &name).await, ["a", "c"], "b admitted");
    let mut consumer = queue.consume_kind("sync");
    for id in ["b", "c", "a"] {
        let d = tokio::time::timeout(Duration::from_secs(30), next(&mut consumer))
            .await
            .expect("the gate's next job is claimed");
        assert_eq!(d.id(), id);
        assert!(d.ack().await.unwrap());
    }
    assert_eq!(gate(&pool, &name, "a").await, None);
    queue.close().await.unwrap();
}

/// A claim that kills an ended lease at its last attempt and hands the job over to its
/// successor of another key moves it between gates in its one statement (locking both,
/// the old one read from the row it picked): the old gate's slot goes to the job waiting
/// there, the successor enters its own gate, and both are claimed.
#[tokio::test]
async fn postgres_a_claims_hand_over_frees_the_old_gate_and_enters_the_new() {
    let name = fresh("kh");
    let pool = pool().await;
    let queue = open(&name, JobOptions::new().key_limit(1)).await;
    let a = JobOptions::kind("sync").key("a").max_attempts(1);
    for id in ["j", "w"] {
        queue
            .schedule_with(id, Duration::ZERO, "p", &a)
            .await
            .unwrap();
    }
    let mut consumer = queue.consume_kind("sync");
    let held = next(&mut consumer).await;
    assert_eq!(held.id(), "j");
    drop(consumer);
    let b = JobOptions::kind("sync")
        .key("b")
        .dedup(Dedup::AllowWhileRunning);
    assert_eq!(
        queue
            .schedule_with("j", Duration::ZERO, "s", &b)
            .await
            .unwrap(),
        Scheduled::Successor
    );
    assert_eq!(gate(&pool, &name, "a").await, Some((1, 0, 0, false)));
    assert_eq!(waiting(&pool, &name).await, ["w"]);
    // The lease ends (MIN_LEASE) unrenewed; the next claim kills j and hands it over.
    tokio::time::sleep(MIN_LEASE + ms(100)).await;
    let mut consumer = queue.consume_kind("sync");
    let mut got = Vec::new();
    for _ in 0..2 {
        let d = tokio::time::timeout(Duration::from_secs(30), next(&mut consumer))
            .await
            .expect("both gates' jobs are claimed");
        got.push((
            d.id().to_owned(),
            d.key().map(str::to_owned),
            d.payload().to_vec(),
        ));
    }
    got.sort();
    assert_eq!(
        got,
        [
            ("j".to_owned(), Some("b".to_owned()), b"s".to_vec()),
            ("w".to_owned(), Some("a".to_owned()), b"p".to_vec()),
        ]
    );
    drop(consumer);
    assert_eq!(gate(&pool, &name, "a").await, Some((1, 0, 0, false)));
    assert_eq!(gate(&pool, &name, "b").await, Some((1, 0, 0, false)));
    drop(held);
    queue.close().await.unwrap();
}

/// A Replace that moves a pending job to another key leaves its old gate (whose next job is
/// admitted in its place) and enters the new one, in its one statement (which locks both).
#[tokio::test]
async fn postgres_a_replace_to_another_key_moves_the_job_between_gates() {
    let name = fresh("kx");
    let pool = pool().await;
    let queue = open(&name, JobOptions::new().key_limit(1)).await;
    backlog(&queue, "a", 2).await;
    assert_eq!(waiting(&pool, &name).await, ["a1"]);
    let b = JobOptions::kind("sync").key("b").dedup(Dedup::Replace);
    assert_eq!(
        queue
            .schedule_with("a0", Duration::ZERO, "q", &b)
            .await
            .unwrap(),
        Scheduled::Replaced
    );
    assert_eq!(waiting(&pool, &name).await, Vec::<String>::new());
    assert_eq!(gate(&pool, &name, "a").await, Some((0, 1, 0, false)));
    assert_eq!(gate(&pool, &name, "b").await, Some((0, 1, 0, false)));
    let a0 = queue.get("a0").await.unwrap().unwrap();
    assert_eq!((a0.key(), a0.payload()), (Some("b"), &b"q"[..]));
    queue.close().await.unwrap();
}

/// A retry re-enters the gate as waiting and keeps the gate's limits; a schedule sets them.
#[tokio::test]
async fn postgres_a_retry_re_enters_without_changing_the_gates_limits() {
    let name = fresh("kr");
    let pool = pool().await;
    let queue = open(&name, JobOptions::new().key_limit(1)).await;
    backlog(&queue, "a", 2).await;
    let mut consumer = queue.consume_kind("sync");
    let d = next(&mut consumer).await;
    assert_eq!(d.id(), "a0");
    drop(consumer);
    // A schedule with a limit of 3 raises the gate's: a1 is admitted beside the running a0.
    queue
        .schedule_with(
            "a2",
            HOUR,
            "p",
            &JobOptions::kind("sync").key("a").key_limit(3),
        )
        .await
        .unwrap();
    assert_eq!(gate(&pool, &name, "a").await, Some((1, 2, 0, false)));
    assert!(d.retry(HOUR).await.unwrap());
    let limit: i32 =
        sqlx::query_scalar("SELECT key_limit FROM wheel_jobs.gates WHERE queue = $1 AND key = 'a'")
            .bind(&name)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        limit, 3,
        "the retried job's own limit (1) did not replace the gate's"
    );
    assert_eq!(gate(&pool, &name, "a").await, Some((0, 3, 0, false)));
    queue.close().await.unwrap();
}

/// `schedule_in` and `ack_in` move the gate in the caller's transaction: nothing before its
/// commit, everything at it.
#[tokio::test]
async fn postgres_schedule_in_and_ack_in_move_the_gate_with_the_callers_commit() {
    let name = fresh("kt");
    let pool = pool().await;
    let queue = open(&name, JobOptions::new().key_limit(1)).await;
    let mut tx = pool.begin().await.unwrap();
    for id in ["a0", "a1"] {
        queue
            .schedule_in_with(
                &mut tx,
                id,
                Duration::ZERO,
                "p",
                &JobOptions::kind("sync").key("a"),
            )
            .await
            .unwrap();
    }
    assert_eq!(gate(&pool, &name, "a").await, None, "not before the commit");
    tx.commit().await.unwrap();
    assert_eq!(gate(&pool, &name, "a").await, Some((0, 1, 0, false)));
    let mut consumer = queue.consume_kind("sync");
    let d = next(&mut consumer).await;
    assert_eq!(d.id(), "a0");
    drop(consumer);
    let mut tx = pool.begin().await.unwrap();
    assert!(d.ack_in(&mut tx).await.unwrap());
    assert_eq!(gate(&pool, &name, "a").await, Some((1, 0, 0, false)));
    tx.commit().await.unwrap();
    assert_eq!(gate(&pool, &name, "a").await, Some((0, 1, 0, false)));
    let mut consumer = queue.consume_kind("sync");
    assert_eq!(next(&mut consumer).await.id(), "a1");
    queue.close().await.unwrap();
}

/// A promotion skips a waiting row another transaction holds without changing it (a
/// schedule's `ON CONFLICT … WHERE false`, a series step's read: its commit rebalances
/// nothing), and never promotes past it: with a limit of 1, a1 held and a2 behind it, the
/// ack of a0 promotes neither (a2 admitted before a1 would break key order), the gate's
/// timer is set at once, and an idle consumer claims a1 once the holder ends, then a2, with
/// no other schedule of the key.
#[tokio::test]
async fn postgres_a_release_never_promotes_past_a_held_waiting_row() {
    let name = fresh("kp");
    let pool = pool().await;
    let queue = open(&name, JobOptions::new().key_limit(1)).await;
    backlog(&queue, "a", 3).await;
    assert_eq!(waiting(&pool, &name).await, ["a1", "a2"]);
    let mut consumer = queue.consume_kind("sync");
    let d = next(&mut consumer).await;
    assert_eq!(d.id(), "a0");
    let holder = hold(&pool, &name, "a1").await;
    assert!(d.ack().await.unwrap());
    assert_eq!(
        waiting(&pool, &name).await,
        ["a1", "a2"],
        "a2 is not promoted past the held a1"
    );
    let (running, admitted, _, timer) = gate(&pool, &name, "a").await.unwrap();
    assert_eq!((running, admitted), (0, 0));
    assert!(
        timer,
        "room left while a1 waits: the gate is looked at again"
    );
    holder.rollback().await.unwrap();
    for id in ["a1", "a2"] {
        let d = tokio::time::timeout(Duration::from_secs(30), next(&mut consumer))
            .await
            .expect("stranded in its gate");
        assert_eq!(d.id(), id, "key order");
        assert!(d.ack().await.unwrap());
    }
    queue.close().await.unwrap();
}

/// A claim that kills a pending job out of attempts (a Replace lowered its `max_attempts`
/// after a retry) and leases the next one of the same gate in one statement: the kill's
/// rebalance runs first and sees the lease's row running before the gate counts it, so the
/// lease's start must not be taken by its counters alone. With a limit of 2 (p and j
/// admitted, w1 and w2 waiting), only w1 is admitted beside the running j, and no claim
/// runs more than 2.
#[tokio::test]
async fn postgres_a_claims_kill_and_lease_in_one_gate_admit_no_more_than_the_limit() {
    let name = fresh("kk");
    let pool = pool().await;
    let queue = open(&name, JobOptions::new().key_limit(2)).await;
    let a = JobOptions::kind("sync").key("a");
    let t0 = SystemTime::now() - Duration::from_secs(10);
    queue
        .schedule_with("p", t0, "p", &a.clone().max_attempts(3))
        .await
        .unwrap();
    let mut consumer = queue.consume_kind("sync");
    let d = next(&mut consumer).await;
    assert_eq!(d.id(), "p");
    drop(consumer);
    assert!(d.retry(HOUR).await.unwrap());
    let replace = a.clone().max_attempts(1).dedup(Dedup::Replace);
    assert_eq!(
        queue.schedule_with("p", t0, "p", &replace).await.unwrap(),
        Scheduled::Replaced
    );
    assert_eq!(queue.get("p").await.unwrap().unwrap().attempt(), 1);
    for (i, id) in ["j", "w1", "w2"].into_iter().enumerate() {
        let at = t0 + Duration::from_secs(1 + i as u64);
        queue.schedule_with(id, at, "p", &a).await.unwrap();
    }
    assert_eq!(waiting(&pool, &name).await, ["w1", "w2"]);
    assert_gates_hold(&pool, &name, "scheduled").await;
    let mut consumer = queue.consume_kind("sync");
    let d = next(&mut consumer).await;
    assert_eq!(d.id(), "j", "p was killed by the claim");
    assert_gates_hold(&pool, &name, "p killed, j leased").await;
    let d2 = tokio::time::timeout(Duration::from_secs(30), next(&mut consumer))
        .await
        .expect("w1 is admitted");
    assert_eq!(d2.id(), "w1");
    assert_gates_hold(&pool, &name, "w1 leased").await;
    assert_eq!(waiting(&pool, &name).await, ["w2"]);
    assert_eq!(gate(&pool, &name, "a").await, Some((2, 0, 0, false)));
    assert!(queue
        .get("p")
        .await
        .unwrap()
        .is_some_and(|p| p.state() == JobState::Dead));
    queue.close().await.unwrap();
}

/// A claim that kills an ended lease at its last attempt and leases another job of its
/// gate, while the gate's next waiting row is held by another transaction (so the kill's
/// release takes the whole rebalance): the gate's counters stay its rows' (the lease
/// counted once, the other admitted job still counted).
#[tokio::test]
async fn postgres_a_claims_kill_beside_a_held_waiting_row_keeps_the_gates_counters() {
    let name = fresh("kq");
    let pool = pool().await;
    let queue = open(&name, JobOptions::new().key_limit(3)).await;
    let a = JobOptions::kind("sync").key("a");
    let t0 = SystemTime::now() - Duration::from_secs(10);
    queue
        .schedule_with("k", t0, "p", &a.clone().max_attempts(1))
        .await
        .unwrap();
    let mut consumer = queue.consume_kind("sync");
    let held = next(&mut consumer).await;
    assert_eq!(held.id(), "k");
    drop(consumer);
    // j1 due, j2 admitted but due in an hour (no claim takes it), w1 after both: waits.
    queue
        .schedule_with("j1", t0 + ms(1), "p", &a)
        .await
        .unwrap();
    queue.schedule_with("j2", HOUR, "p", &a).await.unwrap();
    queue.schedule_with("w1", 2 * HOUR, "p", &a).await.unwrap();
    assert_eq!(waiting(&pool, &name).await, ["w1"]);
    assert_eq!(gate(&pool, &name, "a").await, Some((1, 2, 0, false)));
    let holder = hold(&pool, &name, "w1").await;
    // k's lease ends (MIN_LEASE) unrenewed: the next claim kills it and leases j1.
    tokio::time::sleep(MIN_LEASE + ms(100)).await;
    let mut consumer = queue.consume_kind("sync");
    let d = tokio::time::timeout(Duration::from_secs(30), next(&mut consumer))
        .await
        .expect("j1 is claimed");
    assert_eq!(d.id(), "j1");
    let (running, admitted, _, _) = gate(&pool, &name, "a").await.unwrap();
    assert_eq!(
        (running, admitted),
        (1, 1),
        "j1 running, j2 admitted (w1 held)"
    );
    assert_eq!(waiting(&pool, &name).await, ["w1"]);
    assert!(queue
        .get("k")
        .await
        .unwrap()
        .is_some_and(|k| k.state() == JobState::Dead));
    holder.rollback().await.unwrap();
    drop(consumer);
    drop(held);
    queue.close().await.unwrap();
}

/// A claim never waits on a gate another transaction holds (`schedule_in` holds its gate to
/// the caller's commit): it leases the other keys' jobs and gives back the held gate's
/// admitted job, which a claim after the commit leases.
#[tokio::test]
async fn postgres_a_claim_gives_back_the_jobs_of_a_gate_a_caller_holds() {
    let name = fresh("kc");
    let pool = pool().await;
    let queue = open(&name, JobOptions::new().key_limit(2)).await;
    backlog(&queue, "a", 1).await;
    backlog(&queue, "b", 1).await;
    let mut tx = pool.begin().await.unwrap();
    queue
        .schedule_in_with(
            &mut tx,
            "a9",
            Duration::ZERO,
            "p",
            &JobOptions::kind("sync").key("a"),
        )
        .await
        .unwrap();
    let mut consumer = queue.consume_kind("sync");
    // Before the caller commits: a claim that waited on the gate would never end here.
    let d = tokio::time::timeout(Duration::from_secs(30), next(&mut consumer))
        .await
        .expect("the claim waited on the caller's gate");
    assert_eq!(d.id(), "b0", "a0's gate is held: given back");
    assert!(d.ack().await.unwrap());
    let leased: Vec<String> = sqlx::query_scalar(
        "SELECT id FROM wheel_jobs.jobs WHERE queue = $1 AND token IS NOT NULL ORDER BY id",
    )
    .bind(&name)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(leased, Vec::<String>::new(), "a0 not leased while held");
    tx.commit().await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let d = next(&mut consumer).await;
        ids.push(d.id().to_owned());
        assert!(d.ack().await.unwrap());
    }
    ids.sort_unstable();
    assert_eq!(ids, ["a0", "a9"]);
    assert_eq!(gate(&pool, &name, "a").await, None);
    queue.close().await.unwrap();
}

/// A series never adopts a gated job under its next occurrence's id (`series.rs`
/// `place_head`): the series skips that time, and the job stays its own, waiting for its
/// gate's room; the limit holds.
#[tokio::test]
async fn postgres_a_series_never_adopts_a_gated_job() {
    let name = fresh("ks");
    let pool = pool().await;
    let queue = open(&name, JobOptions::new()).await;
    let every = wheel_jobs::Recurrence::every(HOUR).unwrap();
    let head = every.next_after(SystemTime::now()).unwrap();
    let id = format!("st@{}", jiff::Timestamp::try_from(head).unwrap());
    let o = JobOptions::new().key("a").key_limit(1);
    queue
        .schedule_with("a0", Duration::ZERO, "p", &o)
        .await
        .unwrap();
    queue
        .schedule_with(&id, Duration::ZERO, "hand", &o)
        .await
        .unwrap();
    assert_eq!(waiting(&pool, &name).await, [id.as_str()]);
    queue
        .schedule_recurring("st", every, "series")
        .await
        .unwrap();
    assert_eq!(
        queue.list_recurring().await.unwrap()[0].next_run(),
        Some(head + HOUR),
        "the gated job is not the series' head"
    );
    assert_eq!(waiting(&pool, &name).await, [id.as_str()], "still waiting");
    let mut consumer = queue.consume();
    let d = next(&mut consumer).await;
    assert_eq!(d.id(), "a0");
    assert_eq!(queue.counts().await.unwrap().running, 1);
    assert!(d.ack().await.unwrap());
    let d = next(&mut consumer).await;
    assert_eq!((d.id(), d.payload()), (id.as_str(), &b"hand"[..]));
    assert!(d.ack().await.unwrap());
    assert!(queue.cancel_recurring("st").await.unwrap());
    assert_eq!(gate_of(&pool, &name, "", "a").await, None);
    queue.close().await.unwrap();
}

/// A limit raised then lowered by the jobs entering (their limit is the gate's), all due at
/// once: the rebalance admits the first ones in key order (priority desc, then id, at one
/// due time) against its boundary, promoting and then demoting across it.
#[tokio::test]
async fn postgres_a_rebalance_promotes_and_demotes_across_its_boundary() {
    let name = fresh("kb");
    let pool = pool().await;
    let queue = open(&name, JobOptions::new()).await;
    let at = SystemTime::now() - Duration::from_secs(5);
    let job = |limit, priority| {
        JobOptions::kind("sync")
            .key("a")
            .key_limit(limit)
            .priority(priority)
    };
    for (id, priority) in [("x0", 0), ("x1", 5), ("x2", 0), ("x3", 5), ("x4", 1)] {
        queue
            .schedule_with(id, at, "p", &job(3, priority))
            .await
            .unwrap();
    }
    assert_eq!(waiting(&pool, &name).await, ["x0", "x2"]);
    queue.schedule_with("y", at, "p", &job(4, 1)).await.unwrap();
    assert_eq!(waiting(&pool, &name).await, ["x0", "x2"], "y promoted");
    assert_eq!(gate(&pool, &name, "a").await, Some((0, 4, 0, false)));
    queue.schedule_with("z", at, "p", &job(2, 9)).await.unwrap();
    assert_eq!(
        waiting(&pool, &name).await,
        ["x0", "x2", "x3", "x4", "y"],
        "z and x1 admitted, the rest demoted"
    );
    assert_eq!(gate(&pool, &name, "a").await, Some((0, 2, 0, false)));
    queue.close().await.unwrap();
}

/// A gate as stored: key, running, admitted, limit.
type Stored = (String, i32, i32, Option<i32>);
/// A job of a gate: waiting, running, run_at, priority, id.
type GateJob = (bool, bool, i64, i16, String);

/// Every gate of `queue` against its rows, in one snapshot, its jobs in key order.
async fn audit(pool: &sqlx::PgPool, queue: &str) -> Vec<(Stored, Vec<GateJob>)> {
    let rows = sqlx::query(
        "SELECT g.key, g.running, g.admitted, g.key_limit, j.waiting, j.token IS NOT NULL, \
         j.run_at, j.priority, j.id FROM wheel_jobs.gates g LEFT JOIN wheel_jobs.jobs j \
         ON j.queue = g.queue AND j.kind = g.kind AND j.key = g.key \
         WHERE g.queue = $1 ORDER BY g.key, j.run_at, j.priority DESC, j.id",
    )
    .bind(queue)
    .fetch_all(pool)
    .await
    .unwrap();
    let mut gates: Vec<(Stored, Vec<GateJob>)> = Vec::new();
    for r in rows {
        let gate = (r.get(0), r.get(1), r.get(2), r.get(3));
        if gates.last().is_none_or(|(g, _)| *g != gate) {
            gates.push((gate, Vec::new()));
        }
        if let Some(id) = r.get::<Option<String>, _>(8) {
            let job = (r.get(4), r.get(5), r.get(6), r.get(7), id);
            gates.last_mut().expect("pushed").1.push(job);
        }
    }
    gates
}

/// Asserts what every atomic step must leave (`KEYS.md`): each gate's running and admitted
/// are its rows', admitted = min(pending, limit - running), every admitted job is before
/// every waiting one in key order (the rows come in it), and no key runs above its limit.
async fn assert_gates_hold(pool: &sqlx::PgPool, queue: &str, when: &str) {
    for ((key, running, admitted, limit), jobs) in audit(pool, queue).await {
        let run = jobs.iter().filter(|j| j.1).count() as i32;
        let pending: Vec<bool> = jobs.iter().filter(|j| !j.1).map(|j| j.0).collect();
        let adm = pending.iter().filter(|w| !**w).count() as i32;
        assert_eq!((running, admitted), (run, adm), "{key} {when}: {jobs:?}");
        if let Some(limit) = limit {
            assert!(run <= limit, "{key} {when}: {run} running");
            let cap = (limit - run).max(0);
            assert_eq!(adm, cap.min(pending.len() as i32), "{key} {when}: {jobs:?}");
        }
        let first_waiting = pending.iter().position(|w| *w).unwrap_or(pending.len());
        assert!(
            pending[first_waiting..].iter().all(|w| *w),
            "{key} {when}: an admitted job after a waiting one: {jobs:?}"
        );
    }
}

/// The claim's starts and the ack's releases move a gate by its counters alone when its
/// key has a limit and no rate (the triggers' fast paths: one update of every such gate of
/// the statement, and a promotion of the first waiting jobs as slots come back), while a
/// gate with a rate, a cancel and a gate's last job take the whole rebalance. A drain of
/// four keys by one consumer: each round takes every job the consumer holds leased (the
/// claims' batches) and acks them all at once (sent together, before the settle's batcher
/// runs: it takes them into one statement, so gates of both kinds are released together),
/// with a waiting job cancelled after the first round; after each claim and each round of
/// acks, every gate's counters, admitted set and order are what its rows say. Each job is
/// delivered once (a lease of a minute: none ends during the drain), and the gates end
/// deleted but the rate's, kept for its open window.
#[tokio::test]
async fn postgres_starts_and_releases_keep_every_gates_counters_and_order() {
    let name = fresh("kf");
    let pool = pool().await;
    let queue = Builder::new()
        .lease(Duration::from_secs(60))
        .prefetch(16)
        .kind("sync", JobOptions::new().key_limit(3))
        .postgres(&url(), &name)
        .await
        .unwrap();
    let now = SystemTime::now();
    let mut ids = Vec::new();
    for key in ["a", "b", "c", "d"] {
        let jobs: Vec<_> = (0..10u64)
            .map(|i| (format!("{key}{i}"), now - ms(1000 - i), "p"))
            .collect();
        ids.extend(jobs.iter().map(|j| j.0.clone()));
        let options = match key {
            "d" => JobOptions::kind("sync").key(key).key_rate(100, HOUR),
            _ => JobOptions::kind("sync").key(key),
        };
        queue.schedule_many_with(jobs, &options).await.unwrap();
    }
    assert_gates_hold(&pool, &name, "scheduled").await;
    // d has the kind's limit too, and a rate: its gate takes the whole rebalance.
    assert_eq!(waiting(&pool, &name).await.len(), 28, "7 of each key");
    let mut consumer = queue.consume_kind("sync");
    let mut seen = Vec::new();
    let mut rounds = 0;
    while seen.len() < ids.len() {
        let first = next(&mut consumer).await;
        assert_gates_hold(&pool, &name, &format!("{} claimed", first.id())).await;
        // Every leased job is this consumer's (acked ones are gone): take them all.
        let leased: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM wheel_jobs.jobs WHERE queue = $1 AND token IS NOT NULL",
        )
        .bind(&name)
        .fetch_one(&pool)
        .await
        .unwrap();
        let mut round = vec![first];
        while (round.len() as i64) < leased {
            round.push(next(&mut consumer).await);
        }
        seen.extend(round.iter().map(|d| d.id().to_owned()));
        let acked = futures::future::join_all(round.iter().map(|d| d.ack())).await;
        assert!(acked.into_iter().all(|a| a.unwrap()), "every ack took");
        assert_gates_hold(&pool, &name, &format!("round {rounds} acked")).await;
        if rounds == 0 {
            assert!(queue.cancel("b9").await.unwrap(), "a waiting job cancelled");
            ids.retain(|id| id != "b9");
            assert_gates_hold(&pool, &name, "b9 cancelled").await;
        }
        rounds += 1;
    }
    drop(consumer);
    assert!(
        rounds > 1 && rounds < seen.len(),
        "acks went in rounds: {rounds}"
    );
    seen.sort_unstable();
    ids.sort_unstable();
    assert_eq!(seen, ids, "each job delivered once");
    let left: Vec<String> =
        sqlx::query_scalar("SELECT key FROM wheel_jobs.gates WHERE queue = $1 ORDER BY key")
            .bind(&name)
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(left, ["d"], "the limits' gates deleted with their last job");
    queue.close().await.unwrap();
}

/// A rate of 2 per 3 s: the gate's timer is set while a job waits for the window's end, and
/// stays on the gate once it is empty, until a claim after the window's end deletes it.
#[tokio::test]
async fn postgres_a_rate_windows_timer_is_processed_by_claims() {
    let name = fresh("kw");
    let pool = pool().await;
    let queue = open(&name, JobOptions::new().key_rate(2, Duration::from_secs(3))).await;
    backlog(&queue, "a", 3).await;
    let mut consumer = queue.consume_kind("sync");
    for i in 0..2 {
        let d = next(&mut consumer).await;
        assert_eq!(d.id(), format!("a{i}"));
        assert!(d.ack().await.unwrap());
    }
    let (running, admitted, started, timer) = gate(&pool, &name, "a").await.unwrap();
    assert_eq!((running, admitted, started), (0, 0, 2));
    assert!(timer, "a2 waits for the window's end");
    assert_eq!(waiting(&pool, &name).await, ["a2"]);
    let d = next(&mut consumer).await;
    assert_eq!(d.id(), "a2", "a claim after the window's end admitted it");
    assert!(d.ack().await.unwrap());
    let (_, _, started, timer) = gate(&pool, &name, "a").await.unwrap();
    assert_eq!(started, 1, "a2 opened a new window");
    assert!(timer, "an empty gate keeps its open window until its end");
    // The idle consumer wakes at the window's end by itself; its claim deletes the gate.
    let idle = tokio::spawn(async move { consumer.next().await.is_some() });
    let deadline = Instant::now() + Duration::from_secs(30);
    while gate(&pool, &name, "a").await.is_some() {
        assert!(
            Instant::now() < deadline,
            "the empty gate was never deleted"
        );
        tokio::time::sleep(ms(50)).await;
    }
    idle.abort();
    queue.close().await.unwrap();
}

/// A rate window's timer set by another process's schedule wakes an idle consumer at the
/// window's end: `b` consumes (its safety wakeup an hour out, so only a wake-up or its
/// claims' next due time can wake it), `a` only schedules (its local wake-ups reach none of
/// `b`'s consumers). a0 is claimed and acked, opening the window; a1, scheduled by `a` while
/// the window is spent, waits with the gate's timer set, and `b` claims it once the window
/// ends, with no other schedule.
#[tokio::test]
async fn postgres_a_rate_timer_set_by_another_process_wakes_an_idle_consumer() {
    let name = fresh("kx");
    let pool = pool().await;
    let per = ms(800);
    let rate = JobOptions::new().key_rate(1, per);
    let b = Builder::new()
        .lease(MIN_LEASE)
        .safety_wakeup(HOUR)
        .kind("sync", rate.clone())
        .postgres(&url(), &name)
        .await
        .unwrap();
    let a = open(&name, rate).await;
    let mut consumer = b.consume_kind("sync");
    let job = JobOptions::kind("sync").key("a");
    // Before a0's start, so before its window opens.
    let before = Instant::now();
    a.schedule_with("a0", SystemTime::now(), "p", &job)
        .await
        .unwrap();
    let d = tokio::time::timeout(Duration::from_secs(30), next(&mut consumer))
        .await
        .expect("a0 never claimed");
    assert_eq!(d.id(), "a0");
    assert!(d.ack().await.unwrap());
    // Let the consumer's next claim find nothing and go idle (if it has not yet, a1 is
    // merely found sooner).
    tokio::time::sleep(ms(100)).await;
    a.schedule_with("a1", SystemTime::now(), "p", &job)
        .await
        .unwrap();
    if before.elapsed() < per {
        assert_eq!(waiting(&pool, &name).await, ["a1"], "the window is spent");
        let (_, _, _, timer) = gate(&pool, &name, "a").await.unwrap();
        assert!(timer, "a1 waits for the window's end");
    }
    let d = tokio::time::timeout(Duration::from_secs(30), next(&mut consumer))
        .await
        .expect("a1 stranded: the idle consumer never woke at the window's end");
    assert_eq!(d.id(), "a1");
    assert!(before.elapsed() >= per, "a1 started inside a0's window");
    assert!(d.ack().await.unwrap());
    drop(consumer);
    a.close().await.unwrap();
    b.close().await.unwrap();
}

const KEYS: usize = 3;
const PER_KEY: usize = 30;
const LIMIT: u32 = 2;

fn effects(queue: &str) -> String {
    format!("effects_{queue}")
}

fn keyed() -> JobOptions {
    JobOptions::new().key_limit(LIMIT).max_attempts(10)
}

/// Child: six workers take each delivery of kind `sync`, print `start <id>`, hold it 30 ms
/// and ack it with `ack_in`, the id recorded in the same transaction (a second ack of it
/// would count in `dups`); works until killed. A child `holding` never acks: it holds its
/// leases, and their keys' slots, until it is killed.
async fn race_child(url: &str, name: &str, holding: bool) {
    let queue = Builder::new()
        .lease(MIN_LEASE)
        // One job per worker's consumer: none waits in a buffer while its key's slots
        // are taken.
        .prefetch(1)
        .kind("sync", keyed())
        .postgres(url, name)
        .await
        .unwrap();
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    let insert = format!(
        "INSERT INTO {t} (id) VALUES ($1) ON CONFLICT (id) DO UPDATE SET dups = {t}.dups + 1",
        t = effects(name)
    );
    println!("\nready");
    let mut workers = Vec::new();
    for _ in 0..6 {
        let (queue, pool, insert) = (queue.clone(), pool.clone(), insert.clone());
        workers.push(tokio::spawn(async move {
            let mut consumer = queue.consume_kind("sync");
            while let Some(d) = consumer.next().await {
                let d = d.unwrap();
                println!("start {}", d.id());
                if holding {
                    tokio::time::sleep(HOUR).await;
                }
                tokio::time::sleep(ms(30)).await;
                let mut tx = pool.begin().await.unwrap();
                sqlx::query(&insert)
                    .bind(d.id())
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                if d.ack_in(&mut tx).await.unwrap() {
                    tx.commit().await.unwrap();
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
}

/// The most jobs of one key the store holds leased, the most it holds leased or admitted
/// (pending, not waiting: claimable), and its gates' most `running`, now.
async fn sample(pool: &sqlx::PgPool, queue: &str) -> (i64, i64, i64) {
    let row = sqlx::query(
        "SELECT (SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM wheel_jobs.jobs \
           WHERE queue = $1 AND token IS NOT NULL GROUP BY kind, key) c), \
         (SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM wheel_jobs.jobs \
           WHERE queue = $1 AND NOT waiting GROUP BY kind, key) c), \
         (SELECT coalesce(max(running), 0)::bigint FROM wheel_jobs.gates WHERE queue = $1)",
    )
    .bind(queue)
    .fetch_one(pool)
    .await
    .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// Three processes consume jobs of three keys limited to 2 running each (six workers
/// apiece), while the store's own count of leased jobs per key (and each gate's `running`)
/// is sampled: never more than 2, while this process moves pending jobs before their keys'
/// others (each a swap in its gate). The first child holds every job it takes and is
/// SIGKILLed holding at least two: its slots come back when its leases end (the jobs are
/// redelivered to the others), and every job is acked once.
#[test]
fn postgres_key_limits_hold_across_processes_and_a_kill() {
    const TEST: &str = "postgres_keys::postgres_key_limits_hold_across_processes_and_a_kill";
    if let Some((role, url)) = child_role() {
        let (name, holding) = match role.strip_prefix("holding:") {
            Some(name) => (name, true),
            None => (role.as_str(), false),
        };
        runtime().block_on(race_child(url.to_str().unwrap(), name, holding));
        return;
    }
    let name = fresh("kk");
    let url = format!("{}&application_name={name}", url());
    let rt = runtime();
    let pool = rt.block_on(async {
        let pool = pool().await;
        sqlx::query(&format!(
            "CREATE TABLE {} (id text PRIMARY KEY, dups int NOT NULL DEFAULT 0)",
            effects(&name)
        ))
        .execute(&pool)
        .await
        .unwrap();
        // Each job's lease is its spec's, written at its schedule.
        let queue = Builder::new()
            .lease(MIN_LEASE)
            .kind("sync", keyed())
            .postgres(&crate::postgres::url(), &name)
            .await
            .unwrap();
        for k in 0..KEYS {
            let jobs: Vec<_> = (0..PER_KEY)
                .map(|i| (format!("k{k}-{i:02}"), Duration::ZERO, "p"))
                .collect();
            queue
                .schedule_many_with(jobs, &JobOptions::kind("sync").key(format!("k{k}")))
                .await
                .unwrap();
        }
        queue.close().await.unwrap();
        pool
    });
    let holding = format!("holding:{name}");
    let (mut children, outputs): (Vec<Killed>, Vec<Receiver<String>>) = [&holding, &name, &name]
        .into_iter()
        .map(|role| spawn_child(TEST, role, std::path::Path::new(&url)))
        .unzip();
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut most, mut most_claimable, mut most_gate, mut samples) = (0, 0, 0, 0);
    let mut starts: Vec<Vec<String>> = vec![Vec::new(); 3];
    let take = |starts: &mut Vec<Vec<String>>| {
        for (i, rx) in outputs.iter().enumerate() {
            while let Ok(line) = rx.try_recv() {
                if let Some(id) = line.strip_prefix("start ") {
                    starts[i].push(id.to_owned());
                }
            }
        }
    };
    let mut killed = false;
    let (mut moved, mut round) = (0, 0u64);
    let done = rt.block_on(async {
        let mover = Builder::new()
            .lease(MIN_LEASE)
            .kind("sync", keyed())
            .postgres(&crate::postgres::url(), &name)
            .await
            .unwrap();
        loop {
            assert!(Instant::now() < deadline, "the children stalled");
            // A pending job moved before its key's others: its gate swaps it with the last
            // admitted one, which a claim may be leasing at that moment.
            round += 1;
            let id = format!("k{}-{:02}", round % 3, (round * 7) % PER_KEY as u64);
            let early = SystemTime::now() - Duration::from_secs(10) - ms(round);
            moved += usize::from(mover.reschedule(&id, early).await.unwrap());
            let (leased, claimable, running) = sample(&pool, &name).await;
            (most, most_claimable) = (most.max(leased), most_claimable.max(claimable));
            (most_gate, samples) = (most_gate.max(running), samples + 1);
            take(&mut starts);
            if !killed && starts[0].len() >= 2 {
                children[0].kill();
                killed = true;
            }
            let acked: i64 =
                sqlx::query_scalar(&format!("SELECT count(*) FROM {}", effects(&name)))
                    .fetch_one(&pool)
                    .await
                    .unwrap();
            if acked == (KEYS * PER_KEY) as i64 {
                mover.close().await.unwrap();
                return acked;
            }
            tokio::time::sleep(ms(3)).await;
        }
    });
    for child in &mut children[1..] {
        child.kill();
    }
    assert!(killed, "the first child started jobs");
    rt.block_on(async {
        connections_gone(&pool, &name, deadline).await;
        let dups: Vec<String> =
            sqlx::query_scalar(&format!("SELECT id FROM {} WHERE dups > 0", effects(&name)))
                .fetch_all(&pool)
                .await
                .unwrap();
        assert!(dups.is_empty(), "acked twice: {dups:?}");
        let left: i64 = sqlx::query_scalar(
            "SELECT (SELECT count(*) FROM wheel_jobs.jobs WHERE queue = $1) \
             + (SELECT count(*) FROM wheel_jobs.dead WHERE queue = $1)",
        )
        .bind(&name)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(left, 0, "every job acked, none dead");
        let gates: i64 =
            sqlx::query_scalar("SELECT count(*) FROM wheel_jobs.gates WHERE queue = $1")
                .bind(&name)
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(gates, 0, "every gate deleted with its last job");
    });
    // The killed child's jobs, which it held and never acked, came back to the others once
    // their leases ended (their slots with them: the limit held all along).
    let restarted: BTreeMap<&String, usize> = starts[0]
        .iter()
        .map(|id| {
            (
                id,
                starts[1..].iter().flatten().filter(|s| *s == id).count(),
            )
        })
        .collect();
    assert!(
        restarted.values().all(|n| *n >= 1),
        "each job the killed child held was redelivered: {restarted:?}"
    );
    let per_child: HashMap<usize, usize> = starts
        .iter()
        .enumerate()
        .map(|(i, s)| (i, s.len()))
        .collect();
    eprintln!(
        "{done} acked, {moved} moved; {samples} samples: at most {most} leased of a key, {most_claimable} \
         leased or admitted, gates' running at most {most_gate}; starts per child {per_child:?}; redelivered after the kill {restarted:?}"
    );
    assert!(most <= i64::from(LIMIT), "{most} of one key leased at once");
    assert!(
        most_claimable <= i64::from(LIMIT),
        "{most_claimable} of one key leased or admitted at once"
    );
    assert!(
        most_gate <= i64::from(LIMIT),
        "a gate counted {most_gate} running"
    );
    assert!(most > 0 && samples > 10, "the sampling saw the work");
}
