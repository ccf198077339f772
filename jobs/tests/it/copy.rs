//! `JobQueue::copy_to` between backends: every job copied as it was (run_at, attempts, last
//! error, payload bytes, a dead job's place in the dead list), a running job made pending
//! at its lease's end, series kept with their next occurrence (never doubled; an overdue
//! one runs once as an ordinary job), a second copy writing nothing, and a copy into a
//! half-filled destination completing it without doubles. Written once over two harnesses; each pair of backends is one test below
//! (the PostgreSQL ones carry `postgres` in their names: CI runs `-- postgres` for them).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use wheel_jobs::{CatchUp, JobOptions, JobQueue, JobState, ListOptions, Recurrence};

use crate::support::{embedded, ms, next, Harness};

const BULK: usize = 1_200;
const HOUR: Duration = Duration::from_secs(3600);
/// The payload of every kind of job: bytes that are not UTF-8, and a NUL.
const BYTES: &[u8] = &[0x00, 0xff, 0x10, b'x'];

/// An id that would break SQL or a script spliced from it.
const HOSTILE: &str = "o'; DROP TABLE jobs; -- \" {x}:meta @";

fn bulk_id(i: usize) -> String {
    format!("bulk-{i:04}")
}

/// What the source holds, for the checks.
struct Filled {
    /// The ids of single jobs whose state the copy keeps as it is (pending and dead).
    kept: Vec<&'static str>,
    /// When the lease of "busy" (running) ended at the earliest and at the latest.
    lease_end: (SystemTime, SystemTime),
}

/// A source with a job in every state: two dead (died in the order
/// "z-first-dead", "a-second-dead"), one pending after a failure ("retrying"), one running
/// ("busy"), one due and never delivered ("due"), one at a fixed time ("at"), one under
/// [`HOSTILE`], [`BULK`]
/// pending ones (more than a page), and the series "yearly". Paused, as a copy wants it.
async fn fill(source: &JobQueue) -> Filled {
    let mut consumer = source.consume();
    for id in ["z-first-dead", "a-second-dead"] {
        source.schedule(id, Duration::ZERO, BYTES).await.unwrap();
        for error in ["first", "fatal <b>\n at line 2"] {
            let delivery = next(&mut consumer).await;
            assert_eq!(delivery.id(), id);
            assert!(delivery.fail(Duration::ZERO, error).await.unwrap());
        }
        assert_eq!(
            source.get(id).await.unwrap().unwrap().state(),
            JobState::Dead
        );
    }
    source
        .schedule("retrying", Duration::ZERO, BYTES)
        .await
        .unwrap();
    let delivery = next(&mut consumer).await;
    assert!(delivery.fail(HOUR, "boom").await.unwrap());
    source
        .schedule("busy", Duration::ZERO, BYTES)
        .await
        .unwrap();
    let before = SystemTime::now();
    let busy = next(&mut consumer).await;
    let after = SystemTime::now();
    assert_eq!(busy.id(), "busy");
    drop(consumer);
    source.pause().await.unwrap();
    // Never delivered: the copy is the first to see it.
    source.schedule("due", Duration::ZERO, BYTES).await.unwrap();
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_922_400_000);
    source.schedule("at", at, BYTES).await.unwrap();
    source.schedule(HOSTILE, HOUR, BYTES).await.unwrap();
    let bulk = (0..BULK).map(|i| (bulk_id(i), HOUR + ms(i as u64), format!("p{i}")));
    source.schedule_many(bulk).await.unwrap();
    // Yearly: its next occurrence stays ahead for the whole test.
    let yearly = Recurrence::cron("0 0 1 1 *").unwrap();
    source
        .schedule_recurring_with("yearly", yearly, BYTES, CatchUp::None)
        .await
        .unwrap();
    // Dropped, not settled: "busy" stays running in the source until its lease ends.
    drop(busy);
    Filled {
        kept: vec![
            "z-first-dead",
            "a-second-dead",
            "retrying",
            "due",
            "at",
            HOSTILE,
        ],
        lease_end: (before + HOUR, after + HOUR),
    }
}

async fn open(h: &impl Harness) -> JobQueue {
    let mut builder = JobQueue::builder();
    builder.max_attempts(2).lease(HOUR);
    h.open(&builder).await.expect("open")
}

/// Every id of `state` in `queue`, in its list's order.
async fn ids(queue: &JobQueue, state: JobState) -> Vec<String> {
    let mut out = Vec::new();
    let mut options = ListOptions::new();
    options.limit(ListOptions::MAX_LIMIT).payloads(false);
    loop {
        let page = queue.list(state, &options).await.unwrap();
        out.extend(page.jobs().iter().map(|job| job.id().to_owned()));
        match page.cursor() {
            Some(cursor) => {
                options.after(cursor);
            }
            None => return out,
        }
    }
}

/// The destination holds what the source held: the same jobs, "busy" pending at its
/// lease's end, the series with the same next occurrence and one pending occurrence.
async fn check(source: &JobQueue, dest: &JobQueue, filled: &Filled) {
    for id in &filled.kept {
        let was = source.get(id).await.unwrap().unwrap();
        assert_eq!(dest.get(id).await.unwrap().as_ref(), Some(&was), "{id}");
    }
    let retrying = dest.get("retrying").await.unwrap().unwrap();
    assert_eq!(
        (retrying.attempt(), retrying.last_error()),
        (1, Some("boom"))
    );
    let dead = dest.get("z-first-dead").await.unwrap().unwrap();
    assert_eq!(
        (
            dead.state(),
            dead.attempt(),
            dead.last_error(),
            dead.payload()
        ),
        (JobState::Dead, 2, Some("fatal <b>\n at line 2"), BYTES)
    );
    // The deaths' order: the later first, though its id sorts first.
    assert_eq!(
        ids(dest, JobState::Dead).await,
        ["a-second-dead", "z-first-dead"]
    );

    let busy = dest.get("busy").await.unwrap().unwrap();
    assert_eq!(busy.state(), JobState::Pending);
    assert_eq!(busy.attempt(), 1);
    assert_eq!(busy.payload(), BYTES);
    let (earliest, latest) = filled.lease_end;
    // The servers' clocks round to microseconds.
    assert!(
        busy.run_at() + ms(1) >= earliest && busy.run_at() <= latest + ms(1),
        "{busy:?} not at its lease's end, between {earliest:?} and {latest:?}"
    );

    for i in [0, 499, 500, 501, BULK - 1] {
        let job = dest.get(&bulk_id(i)).await.unwrap().unwrap();
        assert_eq!(Some(&job), source.get(&bulk_id(i)).await.unwrap().as_ref());
        assert_eq!(job.payload(), format!("p{i}").as_bytes());
    }

    let was = &source.list_recurring().await.unwrap()[0];
    let series = dest.list_recurring().await.unwrap();
    assert_eq!(series.len(), 1);
    assert_eq!(series[0].name(), "yearly");
    assert_eq!(series[0].recurrence(), was.recurrence());
    assert_eq!(series[0].catch_up(), CatchUp::None);
    assert_eq!(series[0].next_run(), was.next_run());

    let counts = dest.counts().await.unwrap();
    // bulk, retrying, busy, due, at, the hostile id, and the series' one occurrence.
    assert_eq!(
        (counts.pending, counts.running, counts.dead),
        (BULK as u64 + 6, 0, 2),
        "{counts:?}"
    );
    let pending = ids(dest, JobState::Pending).await;
    assert_eq!(pending.len(), BULK + 6, "the index agrees with the counter");
    assert_eq!(pending[0], "due", "the due one first");
    let mut source_pending = ids(source, JobState::Pending).await;
    source_pending.push("busy".to_owned());
    let (mut a, mut b) = (pending, source_pending);
    a.sort();
    b.sort();
    assert_eq!(a, b, "the same ids, each once");
}

/// The whole copy, then a second one that writes nothing; then the destination delivers
/// the copied due job and its series' occurrence is the one there, not a second.
pub async fn copies_every_state_and_the_series(from: impl Harness, to: impl Harness) {
    let source = open(&from).await;
    let filled = fill(&source).await;
    let dest = open(&to).await;

    let copied = source.copy_to(&dest).await.unwrap();
    let total = BULK as u64 + 8;
    assert_eq!(
        (copied.jobs, copied.existing, copied.running),
        (total, 0, 1),
        "{copied:?}"
    );
    assert_eq!((copied.series, copied.existing_series), (1, 0));
    check(&source, &dest, &filled).await;

    let again = source.copy_to(&dest).await.unwrap();
    assert_eq!(
        (
            again.jobs,
            again.existing,
            again.series,
            again.existing_series
        ),
        (0, total, 0, 1),
        "{again:?}"
    );
    check(&source, &dest, &filled).await;

    // Durable: the same after a reopen.
    dest.close().await.unwrap();
    let dest = open(&to).await;
    check(&source, &dest, &filled).await;

    // The destination is a working queue: the copied due job comes, its first attempt.
    let mut consumer = dest.consume();
    let due = next(&mut consumer).await;
    assert_eq!((due.id(), due.attempt(), due.payload()), ("due", 1, BYTES));
    assert!(due.ack().await.unwrap());
    dest.close().await.unwrap();
    source.close().await.unwrap();
}

/// A copy that stopped halfway (here: the destination already holds every other bulk job,
/// and one job under an id the source has, in another state) is completed by the next:
/// the missing jobs written, the present ones left as they are, nothing twice.
pub async fn a_copy_into_a_half_filled_queue_completes_it(from: impl Harness, to: impl Harness) {
    let source = open(&from).await;
    fill(&source).await;
    let dest = open(&to).await;
    let half = (0..BULK)
        .step_by(2)
        .map(|i| (bulk_id(i), HOUR + ms(i as u64), format!("p{i}")));
    dest.schedule_many(half).await.unwrap();
    // Not what the source holds under that id: kept, not overwritten.
    dest.schedule("retrying", HOUR, "mine").await.unwrap();

    let copied = source.copy_to(&dest).await.unwrap();
    let total = BULK as u64 + 8;
    let present = BULK as u64 / 2 + 1;
    assert_eq!(
        (copied.jobs, copied.existing),
        (total - present, present),
        "{copied:?}"
    );
    let mine = dest.get("retrying").await.unwrap().unwrap();
    assert_eq!((mine.attempt(), mine.payload()), (0, &b"mine"[..]));
    let counts = dest.counts().await.unwrap();
    assert_eq!(
        (counts.pending, counts.dead),
        (BULK as u64 + 6, 2),
        "{counts:?}"
    );
    for i in [0, 1, 2, BULK - 1] {
        let job = dest.get(&bulk_id(i)).await.unwrap().unwrap();
        assert_eq!(job.payload(), format!("p{i}").as_bytes());
        assert_eq!(job.attempt(), 0);
    }
    let again = source.copy_to(&dest).await.unwrap();
    assert_eq!((again.jobs, again.existing), (0, total));
    assert_eq!(ids(&dest, JobState::Pending).await.len(), BULK + 6);
    dest.close().await.unwrap();
    source.close().await.unwrap();
}

/// Each job keeps its kind, priority, attempts, backoff and lease: a job of one attempt
/// copied dies at its first failure in the destination, whose own defaults differ.
pub async fn a_copy_carries_kinds_and_options(from: impl Harness, to: impl Harness) {
    let source = open(&from).await;
    let options = JobOptions::kind("rate")
        .priority(-7)
        .max_attempts(1)
        .lease(HOUR * 2);
    source
        .schedule_with("rate:1", Duration::ZERO, BYTES, &options)
        .await
        .unwrap();
    source
        .schedule_with("urgent", HOUR, BYTES, &JobOptions::kind("mail").priority(9))
        .await
        .unwrap();
    source.schedule("plain", HOUR, BYTES).await.unwrap();
    source.pause().await.unwrap();
    let dest = to
        .open(JobQueue::builder().max_attempts(5))
        .await
        .expect("open");
    let copied = source.copy_to(&dest).await.unwrap();
    assert_eq!(copied.jobs, 3);
    let mut got = Vec::new();
    for id in ["rate:1", "urgent", "plain"] {
        let job = dest.get(id).await.unwrap().unwrap();
        got.push((
            id,
            job.kind().to_owned(),
            job.priority(),
            job.max_attempts(),
        ));
    }
    assert_eq!(
        got,
        [
            ("rate:1", "rate".to_owned(), -7, 1),
            ("urgent", "mail".to_owned(), 9, 2),
            ("plain", String::new(), 0, 2),
        ],
        "the source's resolved options, not the destination's defaults"
    );
    let counts = dest.counts().await.unwrap();
    let kinds: Vec<(&str, u64)> = counts
        .kinds
        .iter()
        .map(|(k, c)| (k.as_str(), c.pending))
        .collect();
    assert_eq!(kinds, [("", 1), ("mail", 1), ("rate", 1)]);
    let mut consumer = dest.consume_kind("rate");
    let delivery = next(&mut consumer).await;
    assert_eq!((delivery.id(), delivery.kind()), ("rate:1", "rate"));
    assert!(delivery.fail(Duration::ZERO, "boom").await.unwrap());
    let dead = dest.get("rate:1").await.unwrap().unwrap();
    assert_eq!((dead.state(), dead.attempt()), (JobState::Dead, 1));
    dest.close().await.unwrap();
    source.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_to_embedded_carries_kinds() {
    a_copy_carries_kinds_and_options(embedded::harness(), embedded::harness()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_to_embedded() {
    copies_every_state_and_the_series(embedded::harness(), embedded::harness()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_to_embedded_half_filled() {
    a_copy_into_a_half_filled_queue_completes_it(embedded::harness(), embedded::harness()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_above_the_destinations_limit_is_refused() {
    let (from, to) = (embedded::harness(), embedded::harness());
    let source = open(&from).await;
    source.schedule("big", HOUR, vec![7; 2048]).await.unwrap();
    let dest = JobQueue::builder()
        .max_payload(1024)
        .open(to.path())
        .await
        .unwrap();
    let err = source.copy_to(&dest).await.unwrap_err();
    assert!(err.is_payload_too_large(), "{err}");
    assert_eq!(
        err.to_string(),
        "payload too large: the job \"big\"'s is 2048 bytes, the limit is 1024"
    );
    assert_eq!(dest.counts().await.unwrap().pending, 0);
    dest.close().await.unwrap();
    source.close().await.unwrap();
}

/// The occurrence id of "daily" at `at`.
fn daily_at(at: SystemTime) -> String {
    format!("daily@{}", jiff::Timestamp::try_from(at).unwrap())
}

/// A series whose pending occurrence fell due while the source was paused: the new series
/// in the destination starts at its first occurrence after the copy, and the overdue one,
/// copied as an ordinary job, runs once there (under `CatchUp::None` too), leaving the
/// series one pending occurrence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overdue_series_occurrence_runs_once_and_the_series_goes_on() {
    let (from, to) = (embedded::harness(), embedded::harness());
    let source = open(&from).await;
    // Daily at a second just ahead: it comes due during the test, the next one a day later.
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 2;
    let due = UNIX_EPOCH + Duration::from_secs(secs);
    let of_day = secs % 86_400;
    let cron = format!(
        "{} {} {} * * *",
        of_day % 60,
        of_day / 60 % 60,
        of_day / 3600
    );
    let daily = Recurrence::cron(&cron).unwrap();
    source
        .schedule_recurring_with("daily", daily, BYTES, CatchUp::None)
        .await
        .unwrap();
    source.pause().await.unwrap();
    assert_eq!(
        source.list_recurring().await.unwrap()[0].next_run(),
        Some(due)
    );
    while SystemTime::now() <= due {
        tokio::time::sleep(ms(100)).await;
    }

    let dest = open(&to).await;
    let copied = source.copy_to(&dest).await.unwrap();
    assert_eq!((copied.jobs, copied.series), (1, 1), "{copied:?}");
    let next_day = due + Duration::from_secs(86_400);
    let series = dest.list_recurring().await.unwrap();
    assert_eq!(series.len(), 1);
    assert_eq!(
        series[0].next_run(),
        Some(next_day),
        "its first after the copy"
    );
    assert_eq!(series[0].catch_up(), CatchUp::None);
    let (overdue, head) = (daily_at(due), daily_at(next_day));
    assert!(dest.recurring_of(&overdue).await.unwrap().is_none());
    assert_eq!(
        ids(&dest, JobState::Pending).await,
        [overdue.clone(), head.clone()]
    );

    let mut consumer = dest.consume();
    let delivery = next(&mut consumer).await;
    assert_eq!(
        (
            delivery.id(),
            delivery.attempt(),
            delivery.run_at(),
            delivery.payload()
        ),
        (overdue.as_str(), 1, due, BYTES)
    );
    assert!(delivery.ack().await.unwrap());
    // Its claim moved nothing: the series' one pending occurrence is the same.
    assert_eq!(ids(&dest, JobState::Pending).await, [head]);
    assert_eq!(dest.counts().await.unwrap().running, 0);
    assert_eq!(
        dest.list_recurring().await.unwrap()[0].next_run(),
        Some(next_day)
    );
    drop(consumer);
    dest.close().await.unwrap();
    source.close().await.unwrap();
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use crate::support::redis;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn embedded_to_redis() {
        copies_every_state_and_the_series(embedded::harness(), redis::harness()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn embedded_to_redis_partitioned_half_filled() {
        a_copy_into_a_half_filled_queue_completes_it(embedded::harness(), redis::partitioned())
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_partitioned_to_embedded() {
        copies_every_state_and_the_series(redis::partitioned(), embedded::harness()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kinds_embedded_to_redis_and_back() {
        a_copy_carries_kinds_and_options(embedded::harness(), redis::harness()).await;
        a_copy_carries_kinds_and_options(redis::harness(), embedded::harness()).await;
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use crate::support::postgres;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn embedded_to_postgres() {
        copies_every_state_and_the_series(embedded::harness(), postgres::harness()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn embedded_to_postgres_half_filled() {
        a_copy_into_a_half_filled_queue_completes_it(embedded::harness(), postgres::harness())
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_to_embedded() {
        copies_every_state_and_the_series(postgres::harness(), embedded::harness()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kinds_embedded_to_postgres_and_back() {
        a_copy_carries_kinds_and_options(embedded::harness(), postgres::harness()).await;
        a_copy_carries_kinds_and_options(postgres::harness(), embedded::harness()).await;
    }
}
