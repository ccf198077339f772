//! Kinds and per-job options: routing by kind (`run_kind`, `consume_kind`), per-kind counts,
//! strict priorities, a job's own attempts and lease, per-kind defaults, listing by kind,
//! and options refused before anything is stored.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use wheel_jobs::{
    Dedup, Error, JobOptions, JobQueue, JobState, ListOptions, Scheduled, MAX_KIND_LEN, MIN_LEASE,
};

use super::open;
use crate::support::{ms, next, Harness};

const HOUR: Duration = Duration::from_secs(3600);

/// What a worker reports of a delivery: the kind the worker runs, the delivery's kind, its
/// id and priority.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Seen {
    worker: String,
    kind: String,
    id: String,
    priority: i8,
}

/// Spawns `queue.run_kind(kind, concurrency, …)` with a handler that reports each delivery
/// to `seen` and acks it.
fn spawn_kind_worker(
    queue: &JobQueue,
    kind: &str,
    concurrency: usize,
    seen: tokio::sync::mpsc::UnboundedSender<Seen>,
) -> tokio::task::JoinHandle<Result<(), Error>> {
    let (queue, worker) = (queue.clone(), kind.to_owned());
    tokio::spawn(async move {
        let run = queue.run_kind(&worker.clone(), concurrency, move |d| {
            let seen = seen.clone();
            let worker = worker.clone();
            async move {
                seen.send(Seen {
                    worker,
                    kind: d.kind().to_owned(),
                    id: d.id().to_owned(),
                    priority: d.priority(),
                })
                .unwrap();
                Ok::<(), String>(())
            }
        });
        run.await
    })
}

/// Waits until `id` is gone (acked): a worker acks after its handler reported.
async fn gone(queue: &JobQueue, id: &str) {
    while queue.get(id).await.unwrap().is_some() {
        tokio::time::sleep(ms(5)).await;
    }
}

pub async fn run_kind_workers_get_only_their_kind(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // Interleaved due times: a worker that ignored the filter would take the other kind's.
    let now = SystemTime::now();
    for i in 0..6u64 {
        let (kind, priority) = if i % 2 == 0 {
            ("rate", 3)
        } else {
            ("remind", -2)
        };
        let options = JobOptions::kind(kind).priority(priority);
        queue
            .schedule_with(
                &format!("{kind}:{i}"),
                now - ms(600 - i * 10),
                "p",
                &options,
            )
            .await
            .unwrap();
    }
    let rate = spawn_kind_worker(&queue, "rate", 1, tx.clone());
    let remind = spawn_kind_worker(&queue, "remind", 1, tx);
    let mut got = Vec::new();
    for _ in 0..6 {
        got.push(rx.recv().await.unwrap());
    }
    got.sort();
    let expect: Vec<Seen> = [
        ("rate", "rate:0", 3),
        ("rate", "rate:2", 3),
        ("rate", "rate:4", 3),
        ("remind", "remind:1", -2),
        ("remind", "remind:3", -2),
        ("remind", "remind:5", -2),
    ]
    .into_iter()
    .map(|(kind, id, priority)| Seen {
        worker: kind.to_owned(),
        kind: kind.to_owned(),
        id: id.to_owned(),
        priority,
    })
    .collect();
    assert_eq!(got, expect, "each worker saw its own kind only");
    queue.close().await.unwrap();
    rate.await.unwrap().unwrap();
    remind.await.unwrap().unwrap();
    assert!(rx.try_recv().is_err(), "no job was delivered twice");
}

pub async fn an_unhandled_kind_stays_pending_and_is_counted(h: impl Harness) {
    let queue = open(&h, |b| {
        b.max_attempts(1);
    })
    .await;
    let now = SystemTime::now();
    // Due first: a worker claiming every kind would take it before "rate:1".
    queue
        .schedule_with("orphan", now - HOUR, "o", &JobOptions::kind("nobody"))
        .await
        .unwrap();
    queue
        .schedule_with("rate:1", now - ms(10), "r", &JobOptions::kind("rate"))
        .await
        .unwrap();
    queue.schedule("plain", HOUR, "p").await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let rate = spawn_kind_worker(&queue, "rate", 1, tx.clone());
    let first = rx.recv().await.unwrap();
    assert_eq!((first.id.as_str(), first.kind.as_str()), ("rate:1", "rate"));
    gone(&queue, "rate:1").await;

    let orphan = queue.get("orphan").await.unwrap().expect("still stored");
    assert_eq!(
        (orphan.state(), orphan.attempt(), orphan.kind()),
        (JobState::Pending, 0, "nobody"),
        "never claimed, so never failed"
    );
    let counts = queue.counts().await.unwrap();
    assert_eq!((counts.pending, counts.running, counts.dead), (2, 0, 0));
    let kinds: BTreeMap<&str, (u64, u64, u64)> = counts
        .kinds
        .iter()
        .map(|(k, c)| (k.as_str(), (c.pending, c.running, c.dead)))
        .collect();
    assert_eq!(
        kinds,
        BTreeMap::from([("", (1, 0, 0)), ("nobody", (1, 0, 0))]),
        "\"rate\" has no job left, so no entry"
    );

    let nobody = spawn_kind_worker(&queue, "nobody", 1, tx);
    let late = rx.recv().await.unwrap();
    assert_eq!(
        (late.worker.as_str(), late.kind.as_str(), late.id.as_str()),
        ("nobody", "nobody", "orphan")
    );
    gone(&queue, "orphan").await;
    assert!(!queue.counts().await.unwrap().kinds.contains_key("nobody"));
    queue.close().await.unwrap();
    rate.await.unwrap().unwrap();
    nobody.await.unwrap().unwrap();
}

/// Jobs all due at once, of every priority and due time, and their expected claim order.
async fn due_by_priority(queue: &JobQueue, kind: &str) -> Vec<String> {
    let now = SystemTime::now();
    let jobs: [(&str, i8, Duration); 8] = [
        ("low-old", -5, HOUR * 3),
        ("zero-late", 0, HOUR),
        ("high-late", 7, ms(1_000)),
        ("low-new", -5, ms(1_000)),
        ("zero-early", 0, HOUR * 2),
        ("high-early", 7, HOUR / 6),
        ("tie-b", 3, HOUR),
        ("tie-a", 3, HOUR),
    ];
    for (id, priority, ago) in jobs {
        let options = JobOptions::kind(kind).priority(priority);
        let id = format!("{kind}{id}");
        queue
            .schedule_with(&id, now - ago, "p", &options)
            .await
            .unwrap();
    }
    // Not due: its priority does not make it early.
    queue
        .schedule_with(
            &format!("{kind}future"),
            HOUR,
            "p",
            &JobOptions::kind(kind).priority(i8::MAX),
        )
        .await
        .unwrap();
    [
        "high-early",
        "high-late",
        "tie-a",
        "tie-b",
        "zero-early",
        "zero-late",
        "low-old",
        "low-new",
    ]
    .map(|id| format!("{kind}{id}"))
    .to_vec()
}

pub async fn priorities_are_claimed_first_then_run_at_then_id(h: impl Harness) {
    let queue = open(&h, |b| {
        b.prefetch(1);
    })
    .await;
    let expect = due_by_priority(&queue, "").await;
    let mut consumer = queue.consume();
    let mut got = Vec::new();
    for _ in 0..expect.len() {
        let d = next(&mut consumer).await;
        got.push((d.id().to_owned(), d.priority()));
        assert!(d.ack().await.unwrap());
    }
    let ids: Vec<&str> = got.iter().map(|(id, _)| id.as_str()).collect();
    if h.ordered() {
        assert_eq!(ids, expect, "priority, then run_at, then id");
    } else {
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        let mut all: Vec<&str> = expect.iter().map(String::as_str).collect();
        all.sort_unstable();
        assert_eq!(sorted, all);
    }
    let future = queue.get("future").await.unwrap().unwrap();
    assert_eq!(
        (future.state(), future.priority()),
        (JobState::Pending, i8::MAX)
    );
    queue.close().await.unwrap();
}

pub async fn consume_kind_claims_by_priority_within_its_kind(h: impl Harness) {
    let queue = open(&h, |b| {
        b.prefetch(1);
    })
    .await;
    let expect = due_by_priority(&queue, "k:").await;
    // Due, of the highest priority and earliest: another kind's, so never this consumer's.
    for (id, kind) in [("other", "other"), ("plain-kind", "")] {
        queue
            .schedule_with(
                id,
                SystemTime::now() - HOUR * 10,
                "p",
                &JobOptions::kind(kind).priority(i8::MAX),
            )
            .await
            .unwrap();
    }
    let mut consumer = queue.consume_kind("k:");
    let mut got = Vec::new();
    for _ in 0..expect.len() {
        let d = next(&mut consumer).await;
        assert_eq!(d.kind(), "k:", "{}", d.id());
        got.push(d.id().to_owned());
        assert!(d.ack().await.unwrap());
    }
    if h.ordered() {
        assert_eq!(got, expect);
    }
    for id in ["other", "plain-kind"] {
        let info = queue.get(id).await.unwrap().unwrap();
        assert_eq!(
            (info.state(), info.attempt()),
            (JobState::Pending, 0),
            "{id}"
        );
    }
    queue.close().await.unwrap();
}

pub async fn a_jobs_own_max_attempts_beats_the_queues(h: impl Harness) {
    let queue = open(&h, |b| {
        b.max_attempts(3).lease(HOUR);
    })
    .await;
    queue
        .schedule_with(
            "once",
            Duration::ZERO,
            "p",
            &JobOptions::new().max_attempts(1),
        )
        .await
        .unwrap();
    queue.schedule("plain", Duration::ZERO, "p").await.unwrap();
    assert_eq!(queue.get("once").await.unwrap().unwrap().max_attempts(), 1);
    assert_eq!(queue.get("plain").await.unwrap().unwrap().max_attempts(), 3);
    let mut consumer = queue.consume();
    for _ in 0..2 {
        let d = next(&mut consumer).await;
        assert!(d.fail(HOUR, "boom").await.unwrap());
    }
    let once = queue.get("once").await.unwrap().unwrap();
    assert_eq!(
        (once.state(), once.attempt(), once.last_error()),
        (JobState::Dead, 1, Some("boom")),
        "one attempt of its own"
    );
    let plain = queue.get("plain").await.unwrap().unwrap();
    assert_eq!(
        (plain.state(), plain.attempt()),
        (JobState::Pending, 1),
        "retried: the queue allows 3"
    );
    queue.close().await.unwrap();
}

pub async fn kind_defaults_apply_and_a_jobs_own_options_win(h: impl Harness) {
    let queue = open(&h, |b| {
        b.max_attempts(3)
            .lease(HOUR)
            .kind("rate", JobOptions::new().priority(4).max_attempts(1));
    })
    .await;
    let at = SystemTime::now() + HOUR;
    queue
        .schedule_with("rate:default", at, "p", &JobOptions::kind("rate"))
        .await
        .unwrap();
    queue
        .schedule_with(
            "rate:own",
            at,
            "p",
            &JobOptions::kind("rate").priority(-1).max_attempts(5),
        )
        .await
        .unwrap();
    queue
        .schedule_with("remind:1", at, "p", &JobOptions::kind("remind"))
        .await
        .unwrap();
    queue.schedule("plain", at, "p").await.unwrap();
    let mut seen = Vec::new();
    for id in ["rate:default", "rate:own", "remind:1", "plain"] {
        let job = queue.get(id).await.unwrap().unwrap();
        seen.push((
            id,
            job.kind().to_owned(),
            job.priority(),
            job.max_attempts(),
        ));
    }
    assert_eq!(
        seen,
        [
            ("rate:default", "rate".to_owned(), 4, 1),
            ("rate:own", "rate".to_owned(), -1, 5),
            ("remind:1", "remind".to_owned(), 0, 3),
            ("plain", String::new(), 0, 3),
        ]
    );
    // The stored options rule the job's life: one failure kills "rate:default" only.
    for id in ["rate:default", "rate:own"] {
        assert!(queue.reschedule(id, Duration::ZERO).await.unwrap());
    }
    let mut consumer = queue.consume_kind("rate");
    for _ in 0..2 {
        let d = next(&mut consumer).await;
        assert!(d.fail(HOUR, "boom").await.unwrap());
    }
    let default = queue.get("rate:default").await.unwrap().unwrap();
    assert_eq!((default.state(), default.attempt()), (JobState::Dead, 1));
    let own = queue.get("rate:own").await.unwrap().unwrap();
    assert_eq!((own.state(), own.attempt()), (JobState::Pending, 1));
    queue.close().await.unwrap();
}

pub async fn a_jobs_own_lease_is_redelivered_before_the_queues(h: impl Harness) {
    let queue = open(&h, |b| {
        b.lease(HOUR);
    })
    .await;
    queue
        .schedule_with(
            "short",
            Duration::ZERO,
            "p",
            &JobOptions::new().lease(MIN_LEASE),
        )
        .await
        .unwrap();
    queue.schedule("long", Duration::ZERO, "p").await.unwrap();
    let mut consumer = queue.consume();
    let mut first = BTreeMap::new();
    for _ in 0..2 {
        let d = next(&mut consumer).await;
        assert_eq!(d.attempt(), 1);
        first.insert(d.id().to_owned(), d);
    }
    // Neither acked: "short" is leased for a second, "long" for the queue's hour. The
    // marker falls due after the short lease ends: claims go in due order, so the short
    // job comes back first.
    drop(first);
    queue
        .schedule("marker", MIN_LEASE + ms(300), "p")
        .await
        .unwrap();
    let expect = [("short".to_owned(), 2), ("marker".to_owned(), 1)];
    let mut got = Vec::new();
    for i in 0..2 {
        let d = next(&mut consumer).await;
        got.push((d.id().to_owned(), d.attempt()));
        assert!(d.ack().await.unwrap());
        if h.ordered() {
            assert_eq!(got[i], expect[i], "the short lease ended first");
        }
    }
    got.sort();
    assert_eq!(got, [expect[1].clone(), expect[0].clone()]);
    let long = queue.get("long").await.unwrap().unwrap();
    assert_eq!(
        (long.state(), long.attempt()),
        (JobState::Running, 1),
        "still under the queue's lease"
    );
    queue.close().await.unwrap();
}

pub async fn get_and_list_show_kind_and_priority_and_filter_by_kind(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    let start = SystemTime::now() + HOUR;
    let mut of_kind: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for i in 0..15u32 {
        let kind = ["a", "b", ""][i as usize % 3];
        let id = format!("job-{i:02}");
        let options = JobOptions::kind(kind).priority(i as i8 - 7);
        queue
            .schedule_with(
                &id,
                start + Duration::from_secs(u64::from(i)),
                "p",
                &options,
            )
            .await
            .unwrap();
        of_kind.entry(kind).or_default().push(id);
    }
    let job = queue.get("job-04").await.unwrap().unwrap();
    assert_eq!((job.kind(), job.priority()), ("b", -3));
    for (kind, ids) in &of_kind {
        for limit in [1, 2, 5, 100] {
            let mut options = ListOptions::new();
            options.limit(limit).kind(kind);
            let mut got = Vec::new();
            loop {
                let page = queue.list(JobState::Pending, &options).await.unwrap();
                assert!(page.jobs().len() <= limit);
                for job in page.jobs() {
                    assert_eq!(job.kind(), *kind, "{}", job.id());
                    let i: i8 = job.id()[4..].parse().unwrap();
                    assert_eq!(job.priority(), i - 7);
                    got.push(job.id().to_owned());
                }
                match page.cursor() {
                    Some(cursor) => options.after(cursor),
                    None => break,
                };
            }
            assert_eq!(&got, ids, "kind {kind:?}, limit {limit}: due order");
        }
    }
    let none = queue
        .list(JobState::Pending, ListOptions::new().kind("none"))
        .await
        .unwrap();
    assert!(none.jobs().is_empty() && none.cursor().is_none());
    // Running jobs too: the kind survives a claim.
    for id in ["job-00", "job-01", "job-02"] {
        assert!(queue.reschedule(id, Duration::ZERO).await.unwrap());
    }
    let mut consumer = queue.consume();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(next(&mut consumer).await);
    }
    let running = queue
        .list(JobState::Running, ListOptions::new().kind("b"))
        .await
        .unwrap();
    let running: Vec<(&str, &str, i8)> = running
        .jobs()
        .iter()
        .map(|j| (j.id(), j.kind(), j.priority()))
        .collect();
    assert_eq!(running, [("job-01", "b", -6)]);
    queue.close().await.unwrap();
}

pub async fn bad_options_are_refused_and_nothing_is_stored(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    let bad = [
        JobOptions::kind("k".repeat(MAX_KIND_LEN + 1)),
        JobOptions::kind("rate\n"),
        JobOptions::kind("a\u{1b}[2Jb"),
        JobOptions::new().max_attempts(0),
        JobOptions::kind("rate").lease(Duration::ZERO),
    ];
    for options in &bad {
        let err = queue
            .schedule_with("bad", Duration::ZERO, "p", options)
            .await
            .unwrap_err();
        assert!(err.is_invalid_input(), "{options:?}: {err}");
        let err = queue
            .schedule_many_with(
                [
                    ("bad-1", Duration::ZERO, "p"),
                    ("bad-2", Duration::ZERO, "p"),
                ],
                options,
            )
            .await
            .unwrap_err();
        assert!(err.is_invalid_input(), "{options:?}: {err}");
    }
    for id in ["bad", "bad-1", "bad-2"] {
        assert!(queue.get(id).await.unwrap().is_none(), "{id}");
    }
    let counts = queue.counts().await.unwrap();
    assert_eq!((counts.pending, counts.kinds.len()), (0, 0));
    // The longest kind is fine.
    let longest = "k".repeat(MAX_KIND_LEN);
    queue
        .schedule_with("ok", HOUR, "p", &JobOptions::kind(longest.as_str()))
        .await
        .unwrap();
    assert_eq!(queue.get("ok").await.unwrap().unwrap().kind(), longest);
    queue.close().await.unwrap();
}

/// Whether `call` panics with a message naming `name` (the call that refused the kind).
fn panics_naming(name: &str, call: impl FnOnce()) -> bool {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)) {
        Ok(()) => false,
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            assert!(message.contains(name), "{message}");
            true
        }
    }
}

pub async fn a_kind_no_job_can_have_is_refused_by_open_claims_and_lists(h: impl Harness) {
    // The jobs without a kind take the queue's own defaults, never options for "".
    let mut builder = JobQueue::builder();
    builder.kind("", JobOptions::new().max_attempts(3));
    let err = h.open(&builder).await.unwrap_err();
    assert!(err.is_invalid_config(), "{err}");
    assert!(err.to_string().contains("max_attempts"), "{err}");

    let queue = open(&h, |_| {}).await;
    let too_long = "k".repeat(MAX_KIND_LEN + 1);
    for bad in [too_long.as_str(), "nul\0", "rate\n"] {
        assert!(
            panics_naming("run_kind", || drop(
                queue.run_kind(bad, 1, |_| async { Ok::<(), Error>(()) })
            )),
            "run_kind({bad:?})"
        );
        assert!(
            panics_naming("consume_kind", || drop(queue.consume_kind(bad))),
            "consume_kind({bad:?})"
        );
        #[cfg(feature = "serde")]
        assert!(
            panics_naming("typed_kind", || drop(queue.typed_kind::<u32>(bad))),
            "typed_kind({bad:?})"
        );
        for state in [JobState::Pending, JobState::Running, JobState::Dead] {
            let err = queue
                .list(state, ListOptions::new().kind(bad))
                .await
                .unwrap_err();
            assert!(err.is_invalid_input(), "{bad:?}: {err}");
        }
    }
    // The longest kind and "" are kinds.
    let longest = "k".repeat(MAX_KIND_LEN);
    drop(queue.consume_kind(&longest));
    drop(queue.consume_kind(""));
    for kind in [longest.as_str(), ""] {
        let page = queue
            .list(JobState::Dead, ListOptions::new().kind(kind))
            .await
            .unwrap();
        assert!(page.jobs().is_empty());
    }
    queue.close().await.unwrap();
}

pub async fn schedule_many_with_gives_every_job_the_options(h: impl Harness) {
    let queue = open(&h, |b| {
        b.max_attempts(9);
    })
    .await;
    let options = JobOptions::kind("batch").priority(2).max_attempts(4);
    let ids = ["b-1", "b-2", "b-3"];
    let created = queue
        .schedule_many_with(ids.map(|id| (id, HOUR, "p")), &options)
        .await
        .unwrap();
    assert_eq!(created, [Scheduled::Created; 3]);
    // Existing ids are left as they are, options included.
    let again = queue
        .schedule_many_with(
            ["b-1", "b-4"].map(|id| (id, HOUR, "p")),
            &JobOptions::kind("other").priority(-9),
        )
        .await
        .unwrap();
    assert_eq!(again, [Scheduled::Exists, Scheduled::Created]);
    let mut got = Vec::new();
    for id in ["b-1", "b-2", "b-3", "b-4"] {
        let job = queue.get(id).await.unwrap().unwrap();
        got.push((job.kind().to_owned(), job.priority(), job.max_attempts()));
    }
    let batch = ("batch".to_owned(), 2, 4);
    assert_eq!(
        got,
        [
            batch.clone(),
            batch.clone(),
            batch,
            ("other".to_owned(), -9, 9)
        ]
    );
    let kinds = queue.counts().await.unwrap().kinds;
    assert_eq!(
        kinds
            .iter()
            .map(|(k, c)| (k.as_str(), c.pending))
            .collect::<Vec<_>>(),
        [("batch", 3), ("other", 1)]
    );
    queue.close().await.unwrap();
}

pub async fn workers_of_two_kinds_get_each_job_once(h: impl Harness) {
    const EACH: usize = 150;
    let queue = open(&h, |_| {}).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // Several workers per kind, started first so that claims race with the schedules.
    let mut workers = Vec::new();
    for kind in ["rate", "remind"] {
        for _ in 0..3 {
            workers.push(spawn_kind_worker(&queue, kind, 4, tx.clone()));
        }
    }
    drop(tx);
    for chunk in 0..5 {
        for kind in ["rate", "remind"] {
            let ids: Vec<String> = (0..EACH / 5)
                .map(|i| format!("{kind}:{:03}", chunk * EACH / 5 + i))
                .collect();
            let options = JobOptions::kind(kind).priority(chunk as i8);
            queue
                .schedule_many_with(
                    ids.into_iter().map(|id| (id, Duration::ZERO, "p")),
                    &options,
                )
                .await
                .unwrap();
        }
    }
    let mut seen = BTreeSet::new();
    for _ in 0..2 * EACH {
        let s = rx.recv().await.unwrap();
        assert_eq!(s.worker, s.kind, "{} went to a {} worker", s.id, s.worker);
        assert!(s.id.starts_with(&format!("{}:", s.kind)), "{s:?}");
        assert!(seen.insert(s.id.clone()), "{} delivered twice", s.id);
    }
    queue.close().await.unwrap();
    for worker in workers {
        worker.await.unwrap().unwrap();
    }
    // Every worker has ended: whatever is still in the channel was a second delivery.
    let extra: Vec<Seen> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
    assert!(extra.is_empty(), "delivered again: {extra:?}");
    assert_eq!(seen.len(), 2 * EACH);
}

/// What a [`Worker`](wheel_jobs::Worker)'s handlers report: the handler (the kind it was
/// declared for) and the delivery's kind and id.
type Report = (String, String, String);

/// A handler for `kind` that reports each delivery to `seen` and acks it.
fn reporting(
    kind: &str,
    seen: &tokio::sync::mpsc::UnboundedSender<Report>,
) -> impl Fn(wheel_jobs::Delivery) -> std::future::Ready<Result<(), String>> + Send + Sync + 'static
{
    let (kind, seen) = (kind.to_owned(), seen.clone());
    move |d| {
        let report = (kind.clone(), d.kind().to_owned(), d.id().to_owned());
        seen.send(report).unwrap();
        std::future::ready(Ok(()))
    }
}

pub async fn one_worker_of_three_kinds_routes_each_to_its_own_handler(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    let now = SystemTime::now();
    // Undeclared kinds, due first and of the highest priority: never this worker's.
    for (id, kind) in [
        ("other:1", "other"),
        ("other:2", "rate2"),
        ("other:3", "remin"),
    ] {
        let options = JobOptions::kind(kind).priority(i8::MAX);
        queue
            .schedule_with(id, now - HOUR, "o", &options)
            .await
            .unwrap();
    }
    let mut expect = Vec::new();
    for i in 0..30u64 {
        let kind = ["rate", "remind", ""][(i % 3) as usize];
        let id = format!("{kind}:{i}");
        let options = JobOptions::kind(kind).priority((i % 4) as i8);
        queue
            .schedule_with(&id, now - ms(600 - i * 10), "p", &options)
            .await
            .unwrap();
        expect.push((kind.to_owned(), kind.to_owned(), id));
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = queue
        .worker()
        .kind("rate", reporting("rate", &tx))
        .kind("remind", reporting("remind", &tx))
        .kind("", reporting("", &tx))
        .cap("remind", 2);
    drop(tx);
    let running = tokio::spawn(worker.run(4));
    let mut got = Vec::new();
    for _ in 0..expect.len() {
        got.push(rx.recv().await.unwrap());
    }
    got.sort();
    expect.sort();
    assert_eq!(
        got, expect,
        "each kind's jobs to its own handler, each once"
    );
    for id in ["other:1", "other:2", "other:3"] {
        let info = queue.get(id).await.unwrap().unwrap();
        assert_eq!(
            (info.state(), info.attempt()),
            (JobState::Pending, 0),
            "{id}"
        );
    }
    queue.close().await.unwrap();
    running.await.unwrap().unwrap();
    assert!(rx.try_recv().is_err(), "no job was delivered twice");
}

/// Handlers held at a gate per kind, counting how many of each run at once.
#[derive(Default)]
struct Gates {
    state: std::sync::Mutex<GateState>,
    open: BTreeMap<String, tokio::sync::watch::Sender<bool>>,
}

#[derive(Default)]
struct GateState {
    running: BTreeMap<String, usize>,
    most: BTreeMap<String, usize>,
    done: usize,
}

impl Gates {
    fn new(kinds: &[&str]) -> std::sync::Arc<Gates> {
        let open = kinds
            .iter()
            .map(|k| (k.to_string(), tokio::sync::watch::channel(false).0))
            .collect();
        std::sync::Arc::new(Gates {
            state: Default::default(),
            open,
        })
    }

    /// A handler of `kind` that waits at its gate.
    fn handler(
        self: &std::sync::Arc<Self>,
        kind: &str,
    ) -> impl Fn(
        wheel_jobs::Delivery,
    )
        -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>
           + Send
           + Sync
           + 'static {
        let (gates, kind) = (self.clone(), kind.to_owned());
        move |d| {
            let (gates, kind) = (gates.clone(), kind.clone());
            Box::pin(async move {
                assert_eq!(d.kind(), kind);
                {
                    let mut s = gates.state.lock().unwrap();
                    let n = s.running.entry(kind.clone()).or_default();
                    *n += 1;
                    let n = *n;
                    let most = s.most.entry(kind.clone()).or_default();
                    *most = (*most).max(n);
                }
                let mut open = gates.open[&kind].subscribe();
                open.wait_for(|open| *open).await.unwrap();
                let mut s = gates.state.lock().unwrap();
                *s.running.get_mut(&kind).unwrap() -= 1;
                s.done += 1;
                Ok(())
            })
        }
    }

    fn running(&self, kind: &str) -> usize {
        let s = self.state.lock().unwrap();
        s.running.get(kind).copied().unwrap_or(0)
    }

    /// Waits until `check` holds of the state.
    async fn until(&self, check: impl Fn(&GateState) -> bool) {
        while !check(&self.state.lock().unwrap()) {
            tokio::time::sleep(ms(2)).await;
        }
    }
}

pub async fn a_workers_kind_caps_hold_and_leave_room_to_the_other_kinds(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    let now = SystemTime::now();
    // a and b first (higher priorities): without caps they would fill every slot.
    for i in 0..6u64 {
        for (kind, priority) in [("a", 2), ("b", 1), ("c", 0)] {
            let options = JobOptions::kind(kind).priority(priority);
            queue
                .schedule_with(&format!("{kind}:{i}"), now - ms(100 - i), "p", &options)
                .await
                .unwrap();
        }
    }
    let gates = Gates::new(&["a", "b", "c"]);
    let worker = queue
        .worker()
        .kind("a", gates.handler("a"))
        .kind("b", gates.handler("b"))
        .kind("c", gates.handler("c"))
        .cap("a", 2)
        .cap("b", 1);
    let running = tokio::spawn(worker.run(8));
    // Every slot taken: a at most 2, b at most 1, c the rest.
    gates
        .until(|s| s.running.values().sum::<usize>() == 8)
        .await;
    assert!(gates.running("a") <= 2 && gates.running("b") <= 1);
    // c done: a and b now have slots to spare, and stay at their caps.
    gates.open["c"].send(true).unwrap();
    gates
        .until(|s| s.running.get("a") == Some(&2) && s.running.get("b") == Some(&1) && s.done == 6)
        .await;
    gates.open["a"].send(true).unwrap();
    gates.open["b"].send(true).unwrap();
    gates.until(|s| s.done == 18).await;
    for i in 0..6 {
        for kind in ["a", "b", "c"] {
            gone(&queue, &format!("{kind}:{i}")).await;
        }
    }
    let most = gates.state.lock().unwrap().most.clone();
    assert_eq!((most["a"], most["b"]), (2, 1), "the caps held: {most:?}");
    queue.close().await.unwrap();
    running.await.unwrap().unwrap();
}

pub async fn a_worker_claims_by_priority_across_its_kinds(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    let now = SystemTime::now();
    let jobs: [(&str, &str, i8, Duration); 8] = [
        ("x-1", "x", 1, HOUR * 3),
        ("y-5", "y", 5, HOUR),
        ("z-3", "z", 3, HOUR * 2),
        ("x-5", "x", 5, HOUR * 2),
        ("z-m1", "z", -1, HOUR * 5),
        ("y-0", "y", 0, HOUR * 4),
        ("z-5", "z", 5, HOUR),
        ("other", "w", 9, HOUR * 9),
    ];
    for (id, kind, priority, ago) in jobs {
        let options = JobOptions::kind(kind).priority(priority);
        queue
            .schedule_with(id, now - ago, "p", &options)
            .await
            .unwrap();
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = queue
        .worker()
        .kind("x", reporting("x", &tx))
        .kind("y", reporting("y", &tx))
        .kind("z", reporting("z", &tx));
    drop(tx);
    // One slot: each claim takes the first job across the three kinds.
    let running = tokio::spawn(worker.run(1));
    let mut got = Vec::new();
    for _ in 0..7 {
        let (handler, kind, id) = rx.recv().await.unwrap();
        assert_eq!(handler, kind);
        got.push(id);
    }
    let expect = ["x-5", "y-5", "z-5", "z-3", "x-1", "y-0", "z-m1"];
    if h.ordered() {
        assert_eq!(got, expect, "priority across kinds, then run_at, then id");
    } else {
        got.sort_unstable();
        let mut all = expect.to_vec();
        all.sort_unstable();
        assert_eq!(got, all);
    }
    let other = queue.get("other").await.unwrap().unwrap();
    assert_eq!((other.state(), other.attempt()), (JobState::Pending, 0));
    queue.close().await.unwrap();
    running.await.unwrap().unwrap();
}

pub async fn close_drains_a_worker_of_several_kinds(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    for kind in ["a", "b"] {
        queue
            .schedule_with(kind, Duration::ZERO, "p", &JobOptions::kind(kind))
            .await
            .unwrap();
    }
    let gates = Gates::new(&["a", "b"]);
    let worker = queue
        .worker()
        .kind("a", gates.handler("a"))
        .kind("b", gates.handler("b"))
        .cap("b", 1);
    let running = tokio::spawn(worker.run(2));
    gates
        .until(|s| s.running.values().sum::<usize>() == 2)
        .await;
    let closer = queue.clone();
    let closing = tokio::spawn(async move { closer.close().await });
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(
        !closing.is_finished(),
        "close waits for the running handlers"
    );
    gates.open["a"].send(true).unwrap();
    gates.open["b"].send(true).unwrap();
    closing.await.unwrap().unwrap();
    running.await.unwrap().unwrap();
    let queue = open(&h, |_| {}).await;
    for id in ["a", "b"] {
        assert_eq!(
            queue.get(id).await.unwrap(),
            None,
            "{id} acked before the close"
        );
    }
    queue.close().await.unwrap();
}

pub async fn workers_of_overlapping_kinds_take_each_job_once(h: impl Harness) {
    const EACH: usize = 60;
    let queue = open(&h, |_| {}).await;
    // A second handle where the store allows one (the embedded store is one process's):
    // else a clone, whose workers still race for the same jobs.
    let (second, own) = match h.open(&JobQueue::builder()).await {
        Ok(other) => (other, true),
        Err(_) => (queue.clone(), false),
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut workers = Vec::new();
    for (handle, name, kinds) in [
        (&queue, "w1", ["a", "b"]),
        (&second, "w2", ["b", "c"]),
        (&queue, "w3", ["c", "a"]),
    ] {
        let mut worker = handle.worker();
        for kind in kinds {
            let seen = tx.clone();
            let name = name.to_owned();
            worker = worker.kind(kind, move |d: wheel_jobs::Delivery| {
                let report = (name.clone(), d.kind().to_owned(), d.id().to_owned());
                seen.send(report).unwrap();
                std::future::ready(Ok::<(), String>(()))
            });
        }
        workers.push(tokio::spawn(worker.cap(kinds[0], 2).run(4)));
    }
    drop(tx);
    for chunk in 0..3 {
        for kind in ["a", "b", "c"] {
            let ids: Vec<String> = (0..EACH / 3)
                .map(|i| format!("{kind}:{:03}", chunk * EACH / 3 + i))
                .collect();
            let options = JobOptions::kind(kind).priority(chunk as i8);
            queue
                .schedule_many_with(
                    ids.into_iter().map(|id| (id, Duration::ZERO, "p")),
                    &options,
                )
                .await
                .unwrap();
        }
    }
    let mut seen = BTreeSet::new();
    for _ in 0..3 * EACH {
        let (worker, kind, id) = rx.recv().await.unwrap();
        let allowed = match worker.as_str() {
            "w1" => ["a", "b"],
            "w2" => ["b", "c"],
            _ => ["c", "a"],
        };
        assert!(allowed.contains(&kind.as_str()), "{id} went to {worker}");
        assert!(
            id.starts_with(&format!("{kind}:")),
            "{id} is of kind {kind}"
        );
        assert!(seen.insert(id.clone()), "{id} delivered twice");
    }
    queue.close().await.unwrap();
    if own {
        second.close().await.unwrap();
    }
    for worker in workers {
        worker.await.unwrap().unwrap();
    }
    let extra: Vec<Report> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
    assert!(extra.is_empty(), "delivered again: {extra:?}");
}

/// A worker of several kinds whose claim kills a job (its lease ended at its last attempt)
/// hands it over to its waiting successor (`Dedup::AllowWhileRunning`), of another of the
/// worker's kinds, which the worker then runs: no dead job, the kill's error carried.
pub async fn a_worker_of_several_kinds_hands_a_killed_job_over_to_its_successor(h: impl Harness) {
    let queue = open(&h, |_| {}).await;
    let once = JobOptions::kind("a").max_attempts(1).lease(MIN_LEASE);
    queue
        .schedule_with("sync", Duration::ZERO, "v1", &once)
        .await
        .unwrap();
    let mut first = queue.consume_kind("a");
    let held = next(&mut first).await;
    let successor = JobOptions::kind("b").dedup(Dedup::AllowWhileRunning);
    assert_eq!(
        queue
            .schedule_with("sync", Duration::ZERO, "v2", &successor)
            .await
            .unwrap(),
        Scheduled::Successor
    );
    tokio::time::sleep(MIN_LEASE + ms(200)).await; // the handler is too slow
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let report = move |d: wheel_jobs::Delivery| {
        let seen = (
            d.kind().to_owned(),
            d.id().to_owned(),
            d.payload().to_vec(),
            d.attempt(),
        );
        tx.send(seen).unwrap();
        std::future::ready(Ok::<(), String>(()))
    };
    let worker = queue.worker().kind("a", report.clone()).kind("b", report);
    let running = tokio::spawn(worker.run(2));
    // The bound only turns a missing handover or wakeup into a failure instead of a hang.
    let got = tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("the successor is delivered")
        .unwrap();
    assert_eq!(got, ("b".to_owned(), "sync".to_owned(), b"v2".to_vec(), 1));
    assert_eq!(queue.counts().await.unwrap().dead, 0, "no dead job kept");
    assert!(!held.ack().await.unwrap(), "the killed lease is gone");
    drop(first);
    queue.close().await.unwrap();
    running.await.unwrap().unwrap();
    assert!(
        rx.try_recv().is_err(),
        "the killed job is not delivered again"
    );
    let queue = open(&h, |_| {}).await;
    assert_eq!(
        queue.get("sync").await.unwrap(),
        None,
        "the successor acked"
    );
    queue.close().await.unwrap();
}
