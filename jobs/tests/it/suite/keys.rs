//! Fairness per key: a job's key ([`JobOptions::key`]), and the limits of its `(kind, key)`
//! ([`JobOptions::key_limit`], [`JobOptions::key_rate`]) that keep one tenant's backlog
//! from delaying another's jobs. Every backend runs these tests (`run_shared_suite!`'s `keys`
//! group); a backend that cannot keep the limits (a partitioned Redis queue) refuses them,
//! which each test checks instead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use wheel_jobs::{Dedup, JobOptions, JobQueue, JobState, ListOptions, MAX_KEY_LEN, MIN_LEASE};

use super::{hour_ticks, idle_consumer, idle_kind_consumer, open};
use crate::support::{ms, next, Harness};

const HOUR: Duration = Duration::from_secs(3600);

/// Jobs of kind `sync` with key `key`.
fn sync(key: &str) -> JobOptions {
    JobOptions::kind("sync").key(key)
}

/// Whether `h` keeps key limits; where it does not, checks that a limited job is refused
/// (and not stored) while a key alone is kept.
async fn limited(h: &impl Harness) -> bool {
    if h.limits_keys() {
        return true;
    }
    let queue = open(h, |_| {}).await;
    for options in [
        JobOptions::new().key("a").key_limit(1),
        JobOptions::new().key("a").key_rate(1, HOUR),
    ] {
        let err = queue
            .schedule_with("x", Duration::ZERO, "p", &options)
            .await
            .unwrap_err();
        assert!(err.is_invalid_config(), "{err}");
        assert!(queue.get("x").await.unwrap().is_none());
    }
    queue
        .schedule_with("y", Duration::ZERO, "p", &JobOptions::new().key("a"))
        .await
        .unwrap();
    assert_eq!(queue.get("y").await.unwrap().unwrap().key(), Some("a"));
    queue.close().await.unwrap();
    false
}

/// Schedules `n` jobs `<key><i>` of `options`' kind with key `key`, due in id order in
/// the past, one schedule each (also the backends' own keys tests).
pub async fn backlog(queue: &JobQueue, key: &str, n: u64, options: &JobOptions) {
    let now = SystemTime::now();
    for i in 0..n {
        queue
            .schedule_with(
                &format!("{key}{i}"),
                now - ms(1000 - i),
                "p",
                &options.clone().key(key),
            )
            .await
            .unwrap();
    }
}

async fn gone(queue: &JobQueue, id: &str) {
    while queue.get(id).await.unwrap().is_some() {
        tokio::time::sleep(ms(5)).await;
    }
}

pub async fn a_key_is_stored_and_shown(h: impl Harness) {
    let queue = open(&h, |b| {
        b.kind("sync", JobOptions::new().key_limit(5));
    })
    .await;
    let limits = h.limits_keys();
    queue
        .schedule_with("open", Duration::ZERO, "p", &JobOptions::new().key("t-1"))
        .await
        .unwrap();
    if limits {
        queue
            .schedule_with("gated", Duration::ZERO, "p", &sync("t-2"))
            .await
            .unwrap();
    }
    queue.schedule("plain", HOUR, "p").await.unwrap();
    queue
        .schedule_many_with(
            [("m1", HOUR, "p"), ("m2", HOUR, "p")],
            &JobOptions::new().key("t-3"),
        )
        .await
        .unwrap();
    let key = |id: &'static str| {
        let queue = queue.clone();
        async move {
            queue
                .get(id)
                .await
                .unwrap()
                .unwrap()
                .key()
                .map(str::to_owned)
        }
    };
    assert_eq!(key("open").await.as_deref(), Some("t-1"));
    assert_eq!(key("plain").await, None);
    assert_eq!(key("m2").await.as_deref(), Some("t-3"));
    if limits {
        assert_eq!(key("gated").await.as_deref(), Some("t-2"));
    }
    let page = queue
        .list(JobState::Pending, &ListOptions::new())
        .await
        .unwrap();
    let listed: HashMap<&str, Option<&str>> =
        page.jobs().iter().map(|j| (j.id(), j.key())).collect();
    assert_eq!(listed["open"], Some("t-1"));
    assert_eq!(listed["m1"], Some("t-3"));
    assert_eq!(listed["plain"], None);
    let mut consumer = queue.consume();
    let mut delivered = HashMap::new();
    for _ in 0..1 + usize::from(limits) {
        let d = next(&mut consumer).await;
        delivered.insert(d.id().to_owned(), d.key().map(str::to_owned));
        let running = queue.get(d.id()).await.unwrap().unwrap();
        assert_eq!(running.key(), d.key(), "a running job keeps its key");
        assert!(d.ack().await.unwrap());
    }
    assert_eq!(delivered["open"].as_deref(), Some("t-1"));
    if limits {
        assert_eq!(delivered["gated"].as_deref(), Some("t-2"));
    }
    queue.close().await.unwrap();
}

/// A key alone (no limit, no rate) is shown, and its jobs are claimed as any others.
pub async fn a_key_without_limits_limits_nothing(h: impl Harness) {
    let queue = open(&h, |b| {
        b.prefetch(16);
    })
    .await;
    backlog(&queue, "a", 5, &JobOptions::new()).await;
    let mut consumer = queue.consume();
    let mut held = Vec::new();
    for _ in 0..5 {
        let d = next(&mut consumer).await;
        assert_eq!(d.key(), Some("a"));
        held.push(d);
    }
    assert_eq!(queue.counts().await.unwrap().running, 5);
    for d in held {
        assert!(d.ack().await.unwrap());
    }
    queue.close().await.unwrap();
}

/// At most `key_limit` jobs of one key run; the ack of one lets the key's next job go, and
/// wakes an idle consumer to take it.
pub async fn a_key_limit_holds_and_an_ack_wakes_the_next(h: impl Harness) {
    if !limited(&h).await {
        return;
    }
    let timer = hour_ticks();
    let queue = open(&h, |b| {
        b.timer(timer.clone())
            .prefetch(16)
            .kind("sync", JobOptions::new().key_limit(2));
    })
    .await;
    backlog(&queue, "a", 6, &JobOptions::kind("sync")).await;
    backlog(&queue, "b", 3, &JobOptions::kind("sync")).await;
    let mut consumer = queue.consume();
    let mut held = HashMap::new();
    for _ in 0..4 {
        let d = next(&mut consumer).await;
        held.insert(d.id().to_owned(), d);
    }
    let mut ids: Vec<&str> = held.keys().map(String::as_str).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        ["a0", "a1", "b0", "b1"],
        "each key's first two, in order"
    );
    let counts = queue.counts().await.unwrap();
    assert_eq!(
        (counts.running, counts.pending),
        (4, 5),
        "the rest of each key waits, pending"
    );
    let waiting = idle_consumer(&queue, &timer).await;
    assert!(held["a0"].ack().await.unwrap());
    // The bound only turns a missing wakeup (a hang until the hourly tick) into a failure.
    let woken = tokio::time::timeout(Duration::from_secs(30), waiting).await;
    assert_eq!(
        woken
            .expect("only the ack's wakeup can deliver it")
            .unwrap(),
        "a2",
        "the ack let a's next job go"
    );
    assert_eq!(queue.counts().await.unwrap().running, 4);
    queue.close().await.unwrap();
}

/// Limits count jobs of one kind and key: the same key in another kind, and another key in
/// the same kind, have their own.
pub async fn limits_are_per_kind_and_key(h: impl Harness) {
    if !limited(&h).await {
        return;
    }
    let queue = open(&h, |b| {
        b.prefetch(16)
            .kind("x", JobOptions::new().key_limit(1))
            .kind("y", JobOptions::new().key_limit(1));
    })
    .await;
    let now = SystemTime::now();
    for (i, (id, kind, key)) in [
        ("x0", "x", "t"),
        ("x1", "x", "t"),
        ("y0", "y", "t"),
        ("y1", "y", "t"),
        ("x2", "x", "u"),
    ]
    .into_iter()
    .enumerate()
    {
        queue
            .schedule_with(
                id,
                now - ms(100 - i as u64),
                "p",
                &JobOptions::kind(kind).key(key),
            )
            .await
            .unwrap();
    }
    let mut consumer = queue.consume();
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(next(&mut consumer).await.id().to_owned());
    }
    ids.sort_unstable();
    assert_eq!(ids, ["x0", "x2", "y0"]);
    let counts = queue.counts().await.unwrap();
    assert_eq!((counts.running, counts.pending), (3, 2));
    queue.close().await.unwrap();
}

/// The issue's case, scaled to a test: tenant A's backlog is scheduled first, tenant B's ten
/// jobs after it, and B's jobs start while A's backlog has barely begun to drain.
pub async fn tenant_b_is_not_behind_tenant_as_backlog(h: impl Harness) {
    if !limited(&h).await {
        return;
    }
    let queue = open(&h, |b| {
        b.prefetch(4).kind("sync", JobOptions::new().key_limit(2));
    })
    .await;
    let now = SystemTime::now();
    let a: Vec<_> = (0..300)
        .map(|i| (format!("a{i:03}"), now - ms(2000), "p"))
        .collect();
    queue
        .schedule_many_with(a, &JobOptions::kind("sync").key("a"))
        .await
        .unwrap();
    let b: Vec<_> = (0..10)
        .map(|i| (format!("b{i:02}"), now - ms(1000), "p"))
        .collect();
    queue
        .schedule_many_with(b, &JobOptions::kind("sync").key("b"))
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let (mut a_started, mut a_before_last_b) = (Vec::new(), None);
    let mut b_started = Vec::new();
    for _ in 0..310 {
        let d = next(&mut consumer).await;
        if d.key() == Some("a") {
            a_started.push(d.id().to_owned());
        } else {
            b_started.push(d.id().to_owned());
            if b_started.len() == 10 {
                a_before_last_b = Some(a_started.len());
            }
        }
        assert!(d.ack().await.unwrap());
    }
    let a_before_last_b = a_before_last_b.expect("every b job ran");
    assert!(
        a_before_last_b <= 30,
        "b's ten jobs all started before a tenth of a's 300: {a_before_last_b} of a's before"
    );
    let mut sorted = a_started.clone();
    sorted.sort_unstable();
    assert_eq!(a_started, sorted, "a key's jobs start in due order");
    assert_eq!((a_started.len(), b_started.len()), (300, 10));
    queue.close().await.unwrap();
}

/// A worker with more slots than a key's limit never runs more of the key at once.
pub async fn a_key_limit_holds_under_a_busy_worker(h: impl Harness) {
    if !limited(&h).await {
        return;
    }
    let queue = open(&h, |b| {
        b.kind("sync", JobOptions::new().key_limit(3));
    })
    .await;
    backlog(&queue, "a", 20, &JobOptions::kind("sync")).await;
    backlog(&queue, "b", 20, &JobOptions::kind("sync")).await;
    backlog(&queue, "free", 10, &JobOptions::new()).await;
    #[derive(Default)]
    struct Seen {
        now: HashMap<String, usize>,
        most: HashMap<String, usize>,
        done: usize,
    }
    let seen = Arc::new(Mutex::new(Seen::default()));
    let handler = {
        let seen = seen.clone();
        move |d: wheel_jobs::Delivery| {
            let seen = seen.clone();
            async move {
                let key = d.key().unwrap_or_default().to_owned();
                {
                    let mut s = seen.lock().unwrap();
                    let now = s.now.entry(key.clone()).or_default();
                    *now += 1;
                    let now = *now;
                    let most = s.most.entry(key.clone()).or_default();
                    *most = (*most).max(now);
                }
                tokio::time::sleep(ms(5)).await;
                let mut s = seen.lock().unwrap();
                *s.now.get_mut(&key).unwrap() -= 1;
                s.done += 1;
                Ok::<(), String>(())
            }
        }
    };
    let running = tokio::spawn(queue.run(10, handler));
    while seen.lock().unwrap().done < 50 {
        tokio::time::sleep(ms(10)).await;
    }
    for id in ["a19", "b19", "free9"] {
        gone(&queue, id).await;
    }
    let most = seen.lock().unwrap().most.clone();
    assert!(
        most["a"] <= 3 && most["b"] <= 3,
        "at most 3 of a key at once: {most:?}"
    );
    queue.close().await.unwrap();
    running.await.unwrap().unwrap();
}

/// A retry, a failure and a death each give the key's slot back at once.
pub async fn retry_fail_and_death_free_the_slot(h: impl Harness) {
    if !limited(&h).await {
        return;
    }
    let queue = open(&h, |b| {
        b.prefetch(1)
            .kind("sync", JobOptions::new().key_limit(1).max_attempts(5));
    })
    .await;
    let now = SystemTime::now();
    for (i, id) in ["a0", "a1"].into_iter().enumerate() {
        queue
            .schedule_with(id, now - ms(100 - i as u64), "p", &sync("a"))
            .await
            .unwrap();
    }
    queue
        .schedule_with("a2", now - ms(90), "p", &sync("a").max_attempts(1))
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let d = next(&mut consumer).await;
    assert_eq!(d.id(), "a0");
    assert!(d.retry(HOUR).await.unwrap());
    let d = next(&mut consumer).await;
    assert_eq!(d.id(), "a1", "the retry gave the slot back");
    assert!(d.fail(Duration::ZERO, "boom").await.unwrap());
    let d = next(&mut consumer).await;
    assert_eq!(
        d.id(),
        "a2",
        "the failure gave the slot back; a2 is due before a1 now"
    );
    assert!(d.fail(Duration::ZERO, "last").await.unwrap());
    let d = next(&mut consumer).await;
    assert_eq!(
        (d.id(), d.attempt()),
        ("a1", 2),
        "a2's death gave the slot back"
    );
    assert_eq!(
        queue.get("a2").await.unwrap().unwrap().state(),
        JobState::Dead
    );
    assert!(d.ack().await.unwrap());
    let counts = queue.counts().await.unwrap();
    assert_eq!(
        (counts.pending, counts.running, counts.dead),
        (1, 0, 1),
        "a0 waits for its retry"
    );
    queue.close().await.unwrap();
}

/// A lease that ends keeps the key's slot for the job's redelivery; only its death at the
/// last attempt gives the slot to the key's next job (a killed worker's slots come back with
/// its leases, not before).
pub async fn an_ended_lease_keeps_its_slot_until_its_last_attempt(h: impl Harness) {
    if !limited(&h).await {
        return;
    }
    let queue = open(&h, |b| {
        b.prefetch(1).kind(
            "sync",
            JobOptions::new()
                .key_limit(1)
                .max_attempts(2)
                .lease(MIN_LEASE),
        );
    })
    .await;
    backlog(&queue, "a", 2, &JobOptions::kind("sync")).await;
    let mut consumer = queue.consume();
    let d = next(&mut consumer).await;
    assert_eq!((d.id(), d.attempt()), ("a0", 1));
    drop(d); // as a killed worker would: never settled
    let d = next(&mut consumer).await;
    assert_eq!(
        (d.id(), d.attempt()),
        ("a0", 2),
        "the slot stayed with a0 for its redelivery"
    );
    drop(d);
    let d = next(&mut consumer).await;
    assert_eq!(
        (d.id(), d.attempt()),
        ("a1", 1),
        "a0's death at its last attempt gave the slot back"
    );
    assert_eq!(
        queue.get("a0").await.unwrap().unwrap().state(),
        JobState::Dead
    );
    assert!(d.ack().await.unwrap());
    queue.close().await.unwrap();
}

/// Jobs waiting for their key's slot are pending: counted, listed and shown as such; they
/// can be cancelled, moved and replaced, and the key's order follows.
pub async fn waiting_jobs_are_pending_listed_cancelled_and_moved(h: impl Harness) {
    if !limited(&h).await {
        return;
    }
    let queue = open(&h, |b| {
        b.prefetch(1).kind("sync", JobOptions::new().key_limit(1));
    })
    .await;
    backlog(&queue, "a", 4, &JobOptions::kind("sync")).await;
    let counts = queue.counts().await.unwrap();
    assert_eq!(counts.pending, 4);
    assert_eq!(counts.kinds["sync"].pending, 4);
    let page = queue
        .list(JobState::Pending, &ListOptions::new().kind("sync").clone())
        .await
        .unwrap();
    let ids: Vec<_> = page.jobs().iter().map(|j| (j.id(), j.key())).collect();
    assert_eq!(
        ids,
        [
            ("a0", Some("a")),
            ("a1", Some("a")),
            ("a2", Some("a")),
            ("a3", Some("a"))
        ]
    );
    let a3 = queue.get("a3").await.unwrap().unwrap();
    assert_eq!((a3.state(), a3.key()), (JobState::Pending, Some("a")));
    assert!(queue.cancel("a3").await.unwrap());
    assert!(queue.get("a3").await.unwrap().is_none());
    let before = SystemTime::now() - Duration::from_secs(10);
    assert!(queue.reschedule("a2", before).await.unwrap());
    let replace = sync("a").dedup(Dedup::Replace);
    queue
        .schedule_with("a1", HOUR, "later", &replace)
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let d = next(&mut consumer).await;
    assert_eq!(d.id(), "a2", "moved before a0, a2 goes first");
    assert!(d.ack().await.unwrap());
    let d = next(&mut consumer).await;
    assert_eq!(d.id(), "a0");
    assert!(d.ack().await.unwrap());
    let counts = queue.counts().await.unwrap();
    assert_eq!(
        (counts.pending, counts.running),
        (1, 0),
        "a1 was replaced to an hour from now"
    );
    let a1 = queue.get("a1").await.unwrap().unwrap();
    assert_eq!((a1.payload(), a1.key()), (&b"later"[..], Some("a")));
    queue.close().await.unwrap();
}

/// A key lets its jobs through by due time first, then priority: a job of a high priority
/// due in an hour does not hold the slot a due job of the same key needs; at one due time,
/// the higher priority goes first.
pub async fn a_due_job_goes_before_a_later_one_of_a_higher_priority(h: impl Harness) {
    if !limited(&h).await {
        return;
    }
    let queue = open(&h, |b| {
        b.prefetch(1).kind("sync", JobOptions::new().key_limit(1));
    })
    .await;
    let now = SystemTime::now();
    queue
        .schedule_with("later", HOUR, "p", &sync("a").priority(5))
        .await
        .unwrap();
    queue
        .schedule_with("due", now - ms(10), "p", &sync("a"))
        .await
        .unwrap();
    let at = now - ms(5);
    queue
        .schedule_with("low", at, "p", &sync("b").priority(-1))
        .await
        .unwrap();
    queue
        .schedule_with("high", at, "p", &sync("b").priority(3))
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let d = next(&mut consumer).await;
        ids.push(d.id().to_owned());
        assert!(d.ack().await.unwrap());
    }
    ids.sort_unstable();
    assert_eq!(
        ids,
        ["due", "high"],
        "a's due job and b's higher priority first"
    );
    let d = next(&mut consumer).await;
    assert_eq!(d.id(), "low");
    assert!(d.ack().await.unwrap());
    let later = queue.get("later").await.unwrap().unwrap();
    assert_eq!(later.state(), JobState::Pending, "due in an hour, it waits");
    queue.close().await.unwrap();
}

/// At most `key_rate`'s starts per window: the rest of the key waits for the window's end
/// (an idle consumer wakes then by itself), and a redelivery is not a start.
pub async fn a_key_rate_holds_starts_to_its_window(h: impl Harness) {
    if !limited(&h).await {
        return;
    }
    let timer = hour_ticks();
    let per = ms(600);
    let queue = open(&h, |b| {
        b.prefetch(16)
            .kind("mail", JobOptions::new().key_rate(2, HOUR))
            .kind("tick", JobOptions::new().key_rate(2, per));
    })
    .await;
    let before = SystemTime::now();
    backlog(&queue, "r", 4, &JobOptions::kind("tick")).await;
    let mut consumer = queue.consume();
    for i in 0..2 {
        let d = next(&mut consumer).await;
        assert_eq!(d.id(), format!("r{i}"));
        assert!(d.ack().await.unwrap());
    }
    let third = next(&mut consumer).await;
    assert_eq!(third.id(), "r2");
    // r2 started in a second window, which opened at a start after the first one ended, and
    // the first opened at r0's start: not before the test began.
    assert!(
        SystemTime::now() >= before + per,
        "the third start came before the first window ended"
    );
    assert!(third.ack().await.unwrap());
    drop(consumer);
    // Closed first: an embedded store is opened by one handle at a time.
    queue.close().await.unwrap();
    // A window of an hour: two start, two wait, and an idle consumer sleeps past them.
    let slow = open(&h, |b| {
        b.timer(timer.clone())
            .prefetch(16)
            .kind("mail", JobOptions::new().key_rate(2, HOUR));
    })
    .await;
    backlog(&slow, "m", 4, &JobOptions::kind("mail")).await;
    let mut consumer = slow.consume_kind("mail");
    for i in 0..2 {
        let d = next(&mut consumer).await;
        assert_eq!(d.id(), format!("m{i}"));
        assert!(d.ack().await.unwrap());
    }
    let waiting = idle_kind_consumer(&slow, &timer, "mail").await;
    let counts = slow.counts().await.unwrap();
    let mail = &counts.kinds["mail"];
    assert_eq!(
        (mail.pending, mail.running),
        (2, 0),
        "two mail jobs wait for the window"
    );
    assert!(!waiting.is_finished());
    waiting.abort();
    slow.close().await.unwrap();
}

pub async fn bad_keys_and_limits_are_refused_and_nothing_is_stored(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    for bad in [
        JobOptions::new().key(""),
        JobOptions::new().key("k".repeat(MAX_KEY_LEN + 1)),
        JobOptions::new().key("a\nb"),
        JobOptions::new().key("a").key_limit(0),
        JobOptions::new().key("a").key_rate(0, HOUR),
        JobOptions::new().key("a").key_rate(1, Duration::ZERO),
    ] {
        let err = queue
            .schedule_with("bad", Duration::ZERO, "p", &bad)
            .await
            .unwrap_err();
        assert!(err.is_invalid_input(), "{bad:?}: {err}");
        assert!(queue.get("bad").await.unwrap().is_none());
    }
    queue.close().await.unwrap();
    let mut builder = wheel_jobs::JobQueue::builder();
    builder.kind("sync", JobOptions::new().key("shared"));
    let err = h.open(&builder).await.unwrap_err();
    assert!(err.is_invalid_config(), "{err}");
    let mut builder = wheel_jobs::JobQueue::builder();
    builder.kind("sync", JobOptions::new().key_limit(0));
    let err = h.open(&builder).await.unwrap_err();
    assert!(err.is_invalid_config(), "{err}");
    limited(&h).await;
}
