//! What an operator reads and does: counts, listing pages, revive, pause.

use std::time::{Duration, SystemTime};

use wheel_jobs::{Cursor, JobQueue, JobState, ListOptions, Scheduled};

use super::{hour_ticks, idle_consumer, open};
use crate::support::{ms, next, Harness};

pub async fn pending_and_running_count_states(h: impl Harness) {
    let queue = open(&h, |b| {
        b.max_attempts(1);
    })
    .await;
    for id in ["a", "b", "c"] {
        queue.schedule(id, Duration::ZERO, "p").await.unwrap();
    }
    queue
        .schedule("later", Duration::from_secs(60), "p")
        .await
        .unwrap();
    assert_eq!(
        (
            queue.pending().await.unwrap(),
            queue.running().await.unwrap()
        ),
        (4, 0)
    );
    let mut consumer = queue.consume();
    let (a, b, c) = (
        next(&mut consumer).await,
        next(&mut consumer).await,
        next(&mut consumer).await,
    );
    assert_eq!(
        (
            queue.pending().await.unwrap(),
            queue.running().await.unwrap()
        ),
        (1, 3)
    );
    assert!(a.ack().await.unwrap());
    assert!(b.retry(ms(0)).await.unwrap(), "out of attempts: dead");
    assert_eq!(
        (
            queue.pending().await.unwrap(),
            queue.running().await.unwrap()
        ),
        (1, 1)
    );
    assert!(queue.cancel("later").await.unwrap());
    assert!(c.ack().await.unwrap());
    assert_eq!(
        (
            queue.pending().await.unwrap(),
            queue.running().await.unwrap()
        ),
        (0, 0)
    );
    queue.close().await.unwrap();
}

/// Every job of `state`, read `limit` at a time; ids in order.
async fn list_all(queue: &JobQueue, state: JobState, limit: usize) -> Vec<String> {
    let mut ids = Vec::new();
    let mut options = ListOptions::new();
    options.limit(limit);
    loop {
        let page = queue.list(state, &options).await.unwrap();
        assert!(page.jobs().len() <= limit);
        ids.extend(page.jobs().iter().map(|j| j.id().to_owned()));
        match page.cursor() {
            Some(cursor) => options.after(cursor),
            None => return ids,
        };
    }
}

pub async fn counts_follow_the_states(h: impl Harness) {
    let queue = open(&h, |b| {
        b.max_attempts(1);
    })
    .await;
    let c = queue.counts().await.unwrap();
    assert_eq!(
        (c.pending, c.running, c.dead, c.paused, c.next_due),
        (0, 0, 0, false, None)
    );
    let later = SystemTime::now() + Duration::from_secs(3600);
    queue.schedule("later", later, "p").await.unwrap();
    for id in ["runs", "dies"] {
        queue.schedule(id, Duration::ZERO, "p").await.unwrap();
    }
    let mut consumer = queue.consume();
    let (a, b) = (next(&mut consumer).await, next(&mut consumer).await);
    let dies = if a.id() == "dies" { a } else { b };
    assert!(dies.fail(ms(0), "no").await.unwrap()); // its only attempt: dead
    let c = queue.counts().await.unwrap();
    assert_eq!((c.pending, c.running, c.dead), (1, 1, 1));
    assert_eq!(
        c.next_due,
        Some(later),
        "the pending job's run_at, not the running job's lease end"
    );
    assert_eq!(c.pending, queue.pending().await.unwrap());
    assert_eq!(c.running, queue.running().await.unwrap());
    queue.close().await.unwrap();
}

pub async fn list_pages_through_inserts_and_deletes(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    let base = SystemTime::now() + Duration::from_secs(3600);
    let at = |i: u64| base + Duration::from_secs(i);
    for i in 0..10 {
        queue
            .schedule(&format!("j{i}"), at(10 * i), "p")
            .await
            .unwrap();
    }
    let mut options = ListOptions::new();
    options.limit(3);
    let mut seen: Vec<String> = Vec::new();
    let mut pages = 0;
    loop {
        let page = queue.list(JobState::Pending, &options).await.unwrap();
        for job in page.jobs() {
            assert_eq!(job.state(), JobState::Pending);
            assert_eq!(job.payload(), b"p");
            seen.push(job.id().to_owned());
        }
        pages += 1;
        if pages == 1 {
            // Between pages: a job before the cursor (not shown: the listing is past it),
            // one after it (shown), one not yet shown cancelled, one shown cancelled.
            queue.schedule("before", at(1), "p").await.unwrap();
            queue.schedule("after", at(55), "p").await.unwrap();
            assert!(queue.cancel("j7").await.unwrap());
            assert!(queue.cancel("j0").await.unwrap());
        }
        match page.cursor() {
            Some(cursor) => options.after(cursor),
            None => break,
        };
    }
    let expect = [
        "j0", "j1", "j2", "j3", "j4", "j5", "after", "j6", "j8", "j9",
    ];
    assert_eq!(seen, expect, "each job once, in due order, none skipped");
    queue.close().await.unwrap();
}

pub async fn list_pages_through_equal_due_times(h: impl Harness) {
    // One due time for many jobs (a batch scheduled together): pages must still resume
    // exactly after their last job.
    let queue = open(&h, |_| {}).await;
    let at = SystemTime::now() + Duration::from_secs(3600);
    let ids: Vec<String> = (0..23).map(|i| format!("same-{i:02}")).collect();
    queue
        .schedule_many(ids.iter().map(|id| (id.clone(), at, "p")))
        .await
        .unwrap();
    for limit in [1, 2, 5, 23, 1000] {
        assert_eq!(
            list_all(&queue, JobState::Pending, limit).await,
            ids,
            "limit {limit}"
        );
    }
    // A page ending inside the group, then jobs of that group removed and added around
    // the cursor.
    let page = queue
        .list(JobState::Pending, ListOptions::new().limit(10))
        .await
        .unwrap();
    let cursor = page.cursor().unwrap().clone();
    assert!(
        queue.cancel("same-09").await.unwrap(),
        "the cursor's own job"
    );
    assert!(queue.cancel("same-15").await.unwrap());
    queue.schedule("same-09a", at, "p").await.unwrap();
    queue.schedule("same-00a", at, "p").await.unwrap();
    let rest = queue
        .list(
            JobState::Pending,
            ListOptions::new().limit(1000).after(&cursor),
        )
        .await
        .unwrap();
    let got: Vec<&str> = rest.jobs().iter().map(|j| j.id()).collect();
    let mut expect: Vec<&str> = ids[10..].iter().map(String::as_str).collect();
    expect.retain(|id| *id != "same-15");
    expect.insert(0, "same-09a");
    assert_eq!(got, expect);
    queue.close().await.unwrap();
}

pub async fn list_running_and_dead_jobs(h: impl Harness) {
    // One job a claim: each later claim gives a later lease end, the running list's order.
    let queue = open(&h, |b| {
        b.max_attempts(1).prefetch(1);
    })
    .await;
    let now = SystemTime::now();
    for (i, id) in ["r0", "r1", "r2", "d1", "d2", "d3"].into_iter().enumerate() {
        let at = now - Duration::from_secs(100 - i as u64);
        queue.schedule(id, at, id).await.unwrap();
    }
    queue
        .schedule("later", Duration::from_secs(3600), "p")
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let mut held = Vec::new();
    for _ in 0..6 {
        held.push(next(&mut consumer).await);
    }
    // Claimed in due order (within a partition): the running ones' lease ends in that order.
    let by_lease_end: Vec<String> = held
        .iter()
        .map(|d| d.id().to_owned())
        .filter(|id| id.starts_with('r'))
        .collect();
    held.sort_by(|a, b| a.id().cmp(b.id()));
    // d1, d2, d3 die one after the other (their only attempt fails).
    for d in held.drain(..3) {
        assert!(d.fail(ms(0), format!("{} failed", d.id())).await.unwrap());
    }
    assert_eq!(list_all(&queue, JobState::Running, 2).await, by_lease_end);
    if h.ordered() {
        assert_eq!(by_lease_end, ["r0", "r1", "r2"]);
    }
    let dead = queue
        .list(JobState::Dead, ListOptions::new().limit(2))
        .await
        .unwrap();
    let first: Vec<(&str, Option<&str>)> = dead
        .jobs()
        .iter()
        .map(|j| (j.id(), j.last_error()))
        .collect();
    assert_eq!(
        first,
        [("d3", Some("d3 failed")), ("d2", Some("d2 failed"))],
        "most recently dead first"
    );
    assert_eq!(
        list_all(&queue, JobState::Dead, 2).await,
        ["d3", "d2", "d1"]
    );
    assert_eq!(list_all(&queue, JobState::Pending, 2).await, ["later"]);
    for r in held {
        assert!(r.ack().await.unwrap());
    }
    assert!(list_all(&queue, JobState::Running, 2).await.is_empty());
    queue.close().await.unwrap();
}

/// `payloads(false)`: the same page, every field but the payload, which is left out (a
/// listing that shows none reads none); pages with payloads carry them.
pub async fn list_without_payloads_leaves_them_out(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    for (i, id) in ["a", "b", "c"].into_iter().enumerate() {
        let at = SystemTime::now() + Duration::from_secs(60 + i as u64);
        queue
            .schedule(id, at, format!("payload of {id}"))
            .await
            .unwrap();
    }
    let whole = queue
        .list(JobState::Pending, &ListOptions::new())
        .await
        .unwrap();
    let bare = queue
        .list(JobState::Pending, ListOptions::new().payloads(false))
        .await
        .unwrap();
    assert_eq!(whole.jobs().len(), 3);
    assert_eq!(bare.jobs().len(), 3);
    for (with, without) in whole.jobs().iter().zip(bare.jobs()) {
        assert_eq!(
            with.payload(),
            format!("payload of {}", with.id()).as_bytes()
        );
        assert!(without.payload().is_empty(), "{}", without.id());
        assert_eq!(
            (
                with.id(),
                with.state(),
                with.run_at(),
                with.attempt(),
                with.last_error()
            ),
            (
                without.id(),
                without.state(),
                without.run_at(),
                without.attempt(),
                without.last_error()
            )
        );
    }
    assert_eq!(whole.cursor(), bare.cursor());
    queue.close().await.unwrap();
}

pub async fn list_refuses_bad_limits_and_cursors(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    for id in ["a", "b"] {
        queue
            .schedule(id, Duration::from_secs(60), "p")
            .await
            .unwrap();
    }
    for limit in [0, ListOptions::MAX_LIMIT + 1] {
        let err = queue
            .list(JobState::Pending, ListOptions::new().limit(limit))
            .await
            .unwrap_err();
        assert!(err.is_invalid_input(), "limit {limit}: {err}");
    }
    let full = queue
        .list(
            JobState::Pending,
            ListOptions::new().limit(ListOptions::MAX_LIMIT),
        )
        .await
        .unwrap();
    assert_eq!(full.jobs().len(), 2);
    let page = queue
        .list(JobState::Pending, ListOptions::new().limit(1))
        .await
        .unwrap();
    let cursor = page.cursor().unwrap();
    for other in [JobState::Running, JobState::Dead] {
        let err = queue
            .list(other, ListOptions::new().after(cursor))
            .await
            .unwrap_err();
        assert!(err.is_invalid_input(), "{err}");
    }
    // Its text form round-trips; garbage and a tampered cursor do not parse.
    let text = cursor.to_string();
    let parsed: Cursor = text.parse().unwrap();
    let rest = queue
        .list(JobState::Pending, ListOptions::new().after(&parsed))
        .await
        .unwrap();
    assert_eq!(
        rest.jobs().iter().map(|j| j.id()).collect::<Vec<_>>(),
        ["b"]
    );
    let mut tampered = text.into_bytes();
    let last = tampered.len() - 1;
    tampered[last] = if tampered[last] == b'0' { b'1' } else { b'0' };
    for garbage in [
        "",
        "zz",
        "not a cursor",
        std::str::from_utf8(&tampered).unwrap(),
    ] {
        let err = garbage.parse::<Cursor>().unwrap_err();
        assert!(err.is_invalid_input(), "{garbage:?}: {err}");
    }
    queue.close().await.unwrap();
}

/// Kills each of `ids` (scheduled due now) by failing its only attempt.
async fn kill(queue: &JobQueue, ids: &[&str]) {
    for id in ids {
        queue.schedule(id, Duration::ZERO, *id).await.unwrap();
    }
    let mut consumer = queue.consume();
    for _ in ids {
        let d = next(&mut consumer).await;
        assert!(d.fail(ms(0), format!("{} broke", d.id())).await.unwrap());
    }
    for id in ids {
        assert_eq!(
            queue.get(id).await.unwrap().unwrap().state(),
            JobState::Dead
        );
    }
}

pub async fn revive_sends_a_dead_job_back(h: impl Harness) {
    let queue = open(&h, |b| {
        b.max_attempts(1);
    })
    .await;
    kill(&queue, &["dead"]).await;
    queue
        .schedule("pending", Duration::from_secs(3600), "p")
        .await
        .unwrap();
    assert!(!queue.revive("pending", Duration::ZERO).await.unwrap());
    assert!(!queue.revive("unknown", Duration::ZERO).await.unwrap());
    assert!(queue
        .revive("", Duration::ZERO)
        .await
        .unwrap_err()
        .is_invalid_id());
    assert!(queue.revive("dead", Duration::ZERO).await.unwrap());
    let info = queue.get("dead").await.unwrap().unwrap();
    assert_eq!(
        (info.state(), info.attempt(), info.last_error()),
        (JobState::Pending, 0, Some("dead broke")),
        "attempts from zero, the error kept"
    );
    let mut consumer = queue.consume();
    let again = next(&mut consumer).await;
    assert_eq!(
        (again.id(), again.attempt()),
        ("dead", 1),
        "delivered again"
    );
    let running = queue.get("dead").await.unwrap().unwrap();
    assert_eq!(
        (running.state(), running.last_error()),
        (JobState::Running, Some("dead broke"))
    );
    assert!(
        !queue.revive("dead", Duration::ZERO).await.unwrap(),
        "a running job is not revived"
    );
    assert!(again.ack().await.unwrap());
    let c = queue.counts().await.unwrap();
    assert_eq!((c.pending, c.running, c.dead), (1, 0, 0));
    queue.close().await.unwrap();
}

pub async fn revive_all_dead_sends_every_dead_job_back(h: impl Harness) {
    let queue = open(&h, |b| {
        b.max_attempts(1);
    })
    .await;
    let ids = ["d0", "d1", "d2", "d3", "d4"];
    kill(&queue, &ids).await;
    let later = SystemTime::now() + Duration::from_secs(3600);
    assert_eq!(queue.revive_all_dead(later).await.unwrap(), 5);
    assert_eq!(queue.revive_all_dead(later).await.unwrap(), 0);
    let c = queue.counts().await.unwrap();
    assert_eq!((c.pending, c.dead, c.next_due), (5, 0, Some(later)));
    let mut pending = list_all(&queue, JobState::Pending, 10).await;
    pending.sort();
    assert_eq!(pending, ids);
    for id in ids {
        let info = queue.get(id).await.unwrap().unwrap();
        assert_eq!((info.attempt(), info.run_at()), (0, later));
    }
    queue.close().await.unwrap();
}

pub async fn pause_stops_claims_across_a_reopen_and_resume_wakes_consumers(h: impl Harness) {
    let timer = hour_ticks();
    let configure = |b: &mut wheel_jobs::Builder| {
        b.timer(timer.clone());
    };
    let queue = open(&h, configure).await;
    queue.schedule("held", Duration::ZERO, "p").await.unwrap();
    queue
        .schedule("cancelled", Duration::from_secs(60), "p")
        .await
        .unwrap();
    let held = next(&mut queue.consume()).await;
    queue.pause().await.unwrap();
    queue.pause().await.unwrap(); // idempotent
    assert!(queue.counts().await.unwrap().paused);
    // Everything but claims goes on.
    assert_eq!(
        queue.schedule("waits", Duration::ZERO, "p").await.unwrap(),
        Scheduled::Created
    );
    assert!(queue.cancel("cancelled").await.unwrap());
    assert!(held.extend(Duration::from_secs(60)).await.unwrap());
    assert!(held.ack().await.unwrap());
    // A consumer claims, finds nothing to lease, and sleeps.
    let waiting = idle_consumer(&queue, &timer).await;
    let info = queue.get("waits").await.unwrap().unwrap();
    assert_eq!((info.state(), info.attempt()), (JobState::Pending, 0));
    waiting.abort();
    queue.close().await.unwrap();

    let queue = open(&h, configure).await;
    let c = queue.counts().await.unwrap();
    assert!(c.paused, "durable across a reopen");
    assert_eq!((c.pending, c.running), (1, 0));
    assert!(
        c.next_due.unwrap() <= SystemTime::now(),
        "due, waiting for the resume"
    );
    let waiting = idle_consumer(&queue, &timer).await;
    queue.resume().await.unwrap();
    // Its sleep lasts an hour: only the resume's wakeup brings the job now; the bound only
    // turns a missing wakeup into a failure.
    let woken = tokio::time::timeout(Duration::from_secs(30), waiting).await;
    assert_eq!(woken.expect("resume wakes the consumer").unwrap(), "waits");
    assert!(!queue.counts().await.unwrap().paused);
    queue.close().await.unwrap();
}
