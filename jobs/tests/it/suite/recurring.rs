//! Recurring series: occurrences on schedule, catch-up after downtime, updates and cancels.
//!
//! Series use short intervals (`every` 150–200 ms) on the real clock and a closed queue for
//! downtime; no assertion is about how long anything took, only about which occurrences
//! were delivered, in what order, how many are pending, and "never before `run_at`".

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use wheel_jobs::{
    CatchUp, Dedup, Delivery, JobOptions, JobQueue, JobState, Recurrence, Recurring,
    RecurringOptions, MAX_KIND_LEN,
};

use crate::support::{ms, next, Harness};

const P: Duration = Duration::from_millis(200);

async fn open(h: &impl Harness) -> JobQueue {
    h.open(&JobQueue::builder()).await.expect("open")
}

fn every(period: Duration) -> Recurrence {
    Recurrence::every(period).unwrap()
}

/// The id of the occurrence of `name` at `at`.
fn occurrence(name: &str, at: SystemTime) -> String {
    format!("{name}@{}", jiff::Timestamp::try_from(at).unwrap())
}

/// The next delivery, or a panic naming `what` if none comes within a minute: for a test
/// whose failure is a series that stopped, so that it fails instead of hanging.
#[track_caller]
fn next_or_stalled<'a>(
    consumer: &'a mut wheel_jobs::Consumer,
    what: &'a str,
) -> impl std::future::Future<Output = Delivery> + 'a {
    let caller = std::panic::Location::caller();
    async move {
        match tokio::time::timeout(Duration::from_secs(60), next(consumer)).await {
            Ok(d) => d,
            Err(_) => panic!("{caller}: nothing delivered for a minute: {what}"),
        }
    }
}

/// The occurrence time an id names (`name@<RFC 3339>`).
#[track_caller]
fn time_of(id: &str) -> SystemTime {
    let (_, text) = id.split_once('@').expect("an occurrence id");
    let at: jiff::Timestamp = text.parse().expect("an RFC 3339 time");
    UNIX_EPOCH + Duration::from_nanos(u64::try_from(at.as_nanosecond()).unwrap())
}

/// Checks a delivered occurrence of `name`: its id names its `run_at`, on the interval's
/// grid, first delivery.
#[track_caller]
fn check_occurrence(d: &Delivery, name: &str, period: Duration) {
    assert!(d.id().starts_with(&format!("{name}@")), "{}", d.id());
    assert_eq!(time_of(d.id()), d.run_at(), "{}", d.id());
    let since = d.run_at().duration_since(UNIX_EPOCH).unwrap();
    assert_eq!(since.as_nanos() % period.as_nanos(), 0, "{}", d.id());
    assert_eq!(d.attempt(), 1, "{}", d.id());
}

/// The next `n` deliveries of `name`, each acked.
async fn take(consumer: &mut wheel_jobs::Consumer, name: &str, n: usize) -> Vec<SystemTime> {
    take_every(consumer, name, n, P).await
}

async fn take_every(
    consumer: &mut wheel_jobs::Consumer,
    name: &str,
    n: usize,
    period: Duration,
) -> Vec<SystemTime> {
    let mut times = Vec::new();
    for _ in 0..n {
        let d = next(consumer).await;
        check_occurrence(&d, name, period);
        times.push(d.run_at());
        assert!(d.ack().await.unwrap());
    }
    times
}

#[track_caller]
fn check_consecutive(times: &[SystemTime]) {
    check_steps(times, P);
}

/// Strictly later each time: a consumer that falls behind by a whole period may see
/// `Latest` or `None` skip an occurrence, which is their rule.
#[track_caller]
fn check_increasing(times: &[SystemTime]) {
    for pair in times.windows(2) {
        assert!(pair[1] > pair[0], "{times:?}");
    }
}

#[track_caller]
fn check_steps(times: &[SystemTime], period: Duration) {
    for pair in times.windows(2) {
        assert_eq!(
            pair[1].duration_since(pair[0]).unwrap(),
            period,
            "{times:?}"
        );
    }
}

pub async fn recurring_bad_input_stores_nothing(h: impl Harness) {
    let queue = open(&h).await;
    let hourly = every(Duration::from_secs(3600));
    for name in ["", "a@b", &"n".repeat(226)] {
        let err = queue
            .schedule_recurring(name, hourly.clone(), "p")
            .await
            .unwrap_err();
        assert!(err.is_invalid_id(), "{name:?}: {err}");
    }
    assert!(queue
        .schedule_recurring(&"n".repeat(225), hourly.clone(), "p")
        .await
        .is_ok());
    assert!(queue.cancel_recurring(&"n".repeat(225)).await.unwrap());
    let big = vec![0u8; (1 << 20) + 1];
    let err = queue
        .schedule_recurring("big", hourly.clone(), big)
        .await
        .unwrap_err();
    assert!(err.is_payload_too_large(), "{err}");
    assert!(queue
        .cancel_recurring("a@b")
        .await
        .unwrap_err()
        .is_invalid_id());
    assert!(!queue.cancel_recurring("none").await.unwrap());
    assert!(queue.list_recurring().await.unwrap().is_empty());
    assert_eq!(queue.pending().await.unwrap(), 0);
    queue.close().await.unwrap();
}

pub async fn recurring_runs_on_schedule_one_pending_at_a_time(h: impl Harness) {
    let queue = open(&h).await;
    let before = SystemTime::now();
    // `All`, so that a consumer falling a period behind on a loaded machine still sees
    // every occurrence (`Latest` would rightly skip one).
    let all = CatchUp::All { max: 100 };
    assert_eq!(
        queue
            .schedule_recurring_with("tick", every(P), "t", all)
            .await
            .unwrap(),
        Recurring::Created
    );
    let listed = queue.list_recurring().await.unwrap();
    assert_eq!(listed.len(), 1);
    let info = &listed[0];
    assert_eq!(info.name(), "tick");
    assert_eq!(info.recurrence().to_string(), "every 200ms");
    assert_eq!((info.tz(), info.catch_up()), (None, all));
    assert_eq!(info.last_run(), None);
    let first = info.next_run().unwrap();
    assert!(first > before && first <= before + P, "{first:?}");
    assert_eq!(queue.pending().await.unwrap(), 1);

    let mut consumer = queue.consume();
    let mut times = Vec::new();
    for _ in 0..4 {
        let d = next(&mut consumer).await;
        check_occurrence(&d, "tick", P);
        assert_eq!(d.payload(), b"t");
        // The next occurrence was created by the claim: one pending, this one running.
        assert_eq!(queue.pending().await.unwrap(), 1);
        assert_eq!(queue.running().await.unwrap(), 1);
        let info = &queue.list_recurring().await.unwrap()[0];
        assert_eq!(info.last_run(), Some(d.run_at()));
        assert_eq!(info.next_run(), Some(d.run_at() + P));
        let pending = queue.get(d.id()).await.unwrap().unwrap();
        assert_eq!(pending.state(), JobState::Running);
        times.push(d.run_at());
        assert!(d.ack().await.unwrap());
    }
    assert_eq!(times[0], first);
    check_consecutive(&times);
    queue.close().await.unwrap();
}

pub async fn recurring_cancel_stops_it_and_a_running_occurrence_finishes(h: impl Harness) {
    let queue = open(&h).await;
    queue
        .schedule_recurring("tick", every(P), "t")
        .await
        .unwrap();
    // Its pending occurrence is the series': `cancel` leaves it.
    let next_run = queue.list_recurring().await.unwrap()[0].next_run().unwrap();
    let head = format!("tick@{}", jiff::Timestamp::try_from(next_run).unwrap());
    assert_eq!(queue.get(&head).await.unwrap().unwrap().run_at(), next_run);
    assert!(!queue.cancel(&head).await.unwrap());
    let mut consumer = queue.consume();
    let d = next(&mut consumer).await;
    assert_eq!(d.id(), head);
    assert!(queue.cancel_recurring("tick").await.unwrap());
    assert!(!queue.cancel_recurring("tick").await.unwrap());
    // The pending occurrence is gone; the running one is untouched and acks.
    assert_eq!(queue.pending().await.unwrap(), 0);
    assert_eq!(queue.running().await.unwrap(), 1);
    assert!(queue.list_recurring().await.unwrap().is_empty());
    assert!(d.ack().await.unwrap());
    assert_eq!(queue.running().await.unwrap(), 0);
    assert_eq!(
        queue.pending().await.unwrap(),
        0,
        "nothing can come any more"
    );
    queue.close().await.unwrap();
}

pub async fn recurring_update_replaces_it(h: impl Harness) {
    let queue = open(&h).await;
    let hourly = Recurrence::cron("0 * * * *").unwrap();
    queue
        .schedule_recurring_with("job", hourly, "old", CatchUp::None)
        .await
        .unwrap();
    assert_eq!(
        queue
            .schedule_recurring("job", every(P), "new")
            .await
            .unwrap(),
        Recurring::Updated
    );
    assert_eq!(queue.pending().await.unwrap(), 1, "the old occurrence went");
    let listed = queue.list_recurring().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].recurrence(), &every(P));
    assert_eq!(listed[0].catch_up(), CatchUp::Latest);
    let mut consumer = queue.consume();
    let d = next(&mut consumer).await;
    check_occurrence(&d, "job", P);
    assert_eq!(d.payload(), b"new");
    assert!(d.ack().await.unwrap());
    queue.close().await.unwrap();
}

pub async fn recurring_two_consumers_get_each_occurrence_once(h: impl Harness) {
    let queue = open(&h).await;
    let all = CatchUp::All { max: 100 };
    queue
        .schedule_recurring_with("shared", every(P), "s", all)
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut workers = Vec::new();
    for _ in 0..2 {
        let (queue, tx) = (queue.clone(), tx.clone());
        workers.push(tokio::spawn(async move {
            queue
                .run(4, move |d| {
                    let tx = tx.clone();
                    async move {
                        assert!(SystemTime::now() >= d.run_at());
                        tx.send((d.id().to_owned(), d.run_at(), d.attempt()))
                            .unwrap();
                        Ok::<(), String>(())
                    }
                })
                .await
        }));
    }
    let mut seen = HashSet::new();
    let mut times = Vec::new();
    while times.len() < 6 {
        let (id, run_at, attempt) = rx.recv().await.unwrap();
        assert_eq!(attempt, 1);
        assert!(seen.insert(id), "delivered twice");
        times.push(run_at);
    }
    times.sort();
    check_consecutive(&times);
    queue.close().await.unwrap();
    for worker in workers {
        worker.await.unwrap().unwrap();
    }
}

pub async fn recurring_a_failed_occurrence_retries_and_the_series_goes_on(h: impl Harness) {
    let queue = h
        .open(JobQueue::builder().backoff(ms(1), ms(1)))
        .await
        .unwrap();
    queue
        .schedule_recurring("flaky", every(P), "f")
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let d = next(&mut consumer).await;
    let (first, time) = (d.id().to_owned(), d.run_at());
    assert!(d.retry(ms(1)).await.unwrap());
    // The retry is the same occurrence, attempt 2; it does not move the series again.
    let again = loop {
        let d = next(&mut consumer).await;
        if d.id() == first {
            break d;
        }
        // A later occurrence may fall due before the retry comes back.
        assert!(d.run_at() > time, "{}", d.id());
        assert!(d.ack().await.unwrap());
    };
    assert_eq!(again.attempt(), 2);
    assert!(again.ack().await.unwrap());
    assert_eq!(queue.pending().await.unwrap(), 1);
    queue.close().await.unwrap();
}

pub async fn recurring_survives_a_reopen(h: impl Harness) {
    let queue = open(&h).await;
    let daily = Recurrence::cron("0 20 * * *")
        .unwrap()
        .in_tz("Asia/Shanghai")
        .unwrap();
    queue
        .schedule_recurring_with("digest", daily.clone(), "d", CatchUp::All { max: 3 })
        .await
        .unwrap();
    let before = queue.list_recurring().await.unwrap();
    queue.close().await.unwrap();
    let queue = open(&h).await;
    let after = queue.list_recurring().await.unwrap();
    assert_eq!(before, after);
    assert_eq!(after[0].tz(), Some("Asia/Shanghai"));
    assert_eq!(after[0].catch_up(), CatchUp::All { max: 3 });
    let next_run = after[0].next_run().unwrap();
    assert_eq!(daily.next_after(SystemTime::now()), Some(next_run));
    let id = format!(
        "digest@{}",
        jiff::Timestamp::from_nanosecond(
            next_run.duration_since(UNIX_EPOCH).unwrap().as_nanos() as i128
        )
        .unwrap()
    );
    let job = queue
        .get(&id)
        .await
        .unwrap()
        .expect("the pending occurrence");
    assert_eq!((job.state(), job.run_at()), (JobState::Pending, next_run));
    queue.close().await.unwrap();
}

/// Schedules `name` every `P` under `catch_up`, lets one occurrence run, closes the queue
/// across more than three occurrences, reopens it and returns (the time it reopened, the
/// last occurrence delivered before the downtime, the first `n` deliveries after it).
async fn downtime(
    h: &impl Harness,
    name: &str,
    catch_up: CatchUp,
    n: usize,
) -> (SystemTime, SystemTime, Vec<SystemTime>) {
    let queue = open(h).await;
    queue
        .schedule_recurring_with(name, every(P), "c", catch_up)
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let ran = take(&mut consumer, name, 1).await[0];
    drop(consumer);
    queue.close().await.unwrap();
    tokio::time::sleep(P * 7 / 2).await;
    let reopened = SystemTime::now();
    let queue = open(h).await;
    let mut consumer = queue.consume();
    let times = take(&mut consumer, name, n).await;
    match catch_up {
        // Every occurrence runs, however far behind the consumer is.
        CatchUp::All { max: 100 } => check_consecutive(&times),
        _ => check_increasing(&times),
    }
    queue.close().await.unwrap();
    (reopened, ran, times)
}

pub async fn recurring_catch_up_latest(h: impl Harness) {
    let (reopened, ran, times) = downtime(&h, "latest", CatchUp::Latest, 2).await;
    // One run, for the most recent occurrence due at the claim, which came after the reopen.
    assert!(times[0] > ran + 2 * P, "{ran:?} {times:?}");
    assert!(times[0] + P > reopened, "{reopened:?} {times:?}");
}

pub async fn recurring_catch_up_none(h: impl Harness) {
    let (reopened, ran, times) = downtime(&h, "none", CatchUp::None, 2).await;
    assert!(times[0] > ran + 3 * P, "{ran:?} {times:?}");
    assert!(
        times[0] >= reopened,
        "nothing missed runs: {reopened:?} {times:?}"
    );
}

pub async fn recurring_catch_up_all_up_to_max(h: impl Harness) {
    let (reopened, ran, times) = downtime(&h, "two", CatchUp::All { max: 2 }, 3).await;
    // The two most recent due at the claim, then on: the oldest missed ones are skipped.
    assert!(times[0] > ran + P, "{ran:?} {times:?}");
    assert!(times[0] + 2 * P > reopened, "{reopened:?} {times:?}");
}

pub async fn recurring_catch_up_all(h: impl Harness) {
    let (reopened, ran, times) = downtime(&h, "all", CatchUp::All { max: 100 }, 4).await;
    // Every missed occurrence (at least three), from the one after the last run.
    assert_eq!(times[0], ran + P, "{times:?}");
    assert!(times[2] < reopened, "{reopened:?} {times:?}");
}

/// Longer than a Redis series' list of upcoming occurrences (16): the claim cannot decide
/// from the list, and the catch-up is decided in Rust with the server's time.
pub async fn recurring_catch_up_after_a_downtime_of_twenty_occurrences(h: impl Harness) {
    const Q: Duration = Duration::from_millis(100);
    // One job claimed at a time, so that what the dropped consumer claimed is what it
    // handed out: a prefetched occurrence left leased in it would be a run the test
    // cannot see.
    let queue = h.open(JobQueue::builder().prefetch(1)).await.unwrap();
    for (name, catch_up) in [
        ("latest", CatchUp::Latest),
        ("none", CatchUp::None),
        ("all", CatchUp::All { max: 100 }),
    ] {
        queue
            .schedule_recurring_with(name, every(Q), name, catch_up)
            .await
            .unwrap();
    }
    let mut consumer = queue.consume();
    // The last run of each before the downtime: a consumer slower than `Q` may see `None`
    // skip its first occurrences, and "all" runs on meanwhile.
    let mut ran = std::collections::HashMap::new();
    while ran.len() < 3 {
        let d = next(&mut consumer).await;
        ran.insert(d.payload().to_vec(), d.run_at());
        assert!(d.ack().await.unwrap());
    }
    drop(consumer);
    queue.close().await.unwrap();
    tokio::time::sleep(Q * 20).await;
    let reopened = SystemTime::now();
    let queue = open(&h).await;
    let mut consumer = queue.consume();
    let mut times: std::collections::HashMap<Vec<u8>, Vec<SystemTime>> = Default::default();
    // "all" delivers its 20 missed ones and the others theirs; then two more each.
    while times.get(&b"all"[..]).map_or(0, Vec::len) < 22
        || times.get(&b"latest"[..]).map_or(0, Vec::len) < 2
        || times.get(&b"none"[..]).map_or(0, Vec::len) < 2
    {
        let d = next(&mut consumer).await;
        let name = std::str::from_utf8(d.payload()).unwrap().to_owned();
        check_occurrence(&d, &name, Q);
        times
            .entry(d.payload().to_vec())
            .or_default()
            .push(d.run_at());
        assert!(d.ack().await.unwrap());
    }
    queue.close().await.unwrap();
    let all = &times[&b"all"[..]];
    check_steps(all, Q);
    assert_eq!(all[0], ran[&b"all"[..]] + Q);
    let latest = &times[&b"latest"[..]];
    check_increasing(latest);
    assert!(latest[0] + Q > reopened, "{reopened:?} {latest:?}");
    assert!(latest[0] > ran[&b"latest"[..]] + 10 * Q);
    let none = &times[&b"none"[..]];
    check_increasing(none);
    assert!(none[0] >= reopened, "{reopened:?} {none:?}");
}

pub async fn recurring_an_at_in_the_name_of_a_job_is_no_series(h: impl Harness) {
    let queue = open(&h).await;
    queue
        .schedule_recurring("mail", every(P), "m")
        .await
        .unwrap();
    // An ordinary job whose id looks like an occurrence of another time: delivered as is,
    // and it does not move the series.
    let id = "mail@2001-01-01T00:00:00Z";
    queue.schedule(id, Duration::ZERO, "x").await.unwrap();
    queue
        .schedule("user@example.com", Duration::ZERO, "y")
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let mut ordinary = HashSet::new();
    let mut series = 0;
    while ordinary.len() < 2 || series < 1 {
        let d = next(&mut consumer).await;
        if d.payload() == b"m" {
            check_occurrence(&d, "mail", P);
            series += 1;
        } else {
            assert!(ordinary.insert(d.id().to_owned()));
        }
        assert!(d.ack().await.unwrap());
    }
    assert_eq!(
        queue.pending().await.unwrap(),
        1,
        "the series' next occurrence"
    );
    queue.close().await.unwrap();
}

/// A job under a future occurrence's id that was delivered already (scheduled by hand,
/// then retrying) is not the series': its claims are no first claims, so adopting it would
/// stop the series. The series skips that time and goes on; the job runs as its own.
pub async fn recurring_a_delivered_job_under_an_occurrence_id_is_skipped(h: impl Harness) {
    let queue = open(&h).await;
    let all = CatchUp::All { max: 100 };
    queue
        .schedule_recurring_with("st", every(P), "series", all)
        .await
        .unwrap();
    let head = queue.list_recurring().await.unwrap()[0].next_run().unwrap();
    let taken = occurrence("st", head + 2 * P);
    queue
        .schedule(&taken, Duration::ZERO, "hand")
        .await
        .unwrap();
    let mut consumer = queue.consume();
    let mut times = Vec::new();
    while times.len() < 3 {
        let d = next_or_stalled(&mut consumer, "the series stopped").await;
        if d.payload() == b"hand" {
            assert_eq!((d.id(), d.attempt()), (taken.as_str(), 1));
            assert!(d.retry(Duration::from_secs(3600)).await.unwrap());
            continue;
        }
        check_occurrence(&d, "st", P);
        times.push(d.run_at());
        assert!(d.ack().await.unwrap());
    }
    assert_eq!(times, [head, head + P, head + 3 * P]);
    let hand = queue.get(&taken).await.unwrap().unwrap();
    assert_eq!((hand.state(), hand.attempt()), (JobState::Pending, 1));
    assert_eq!(
        queue.list_recurring().await.unwrap()[0].next_run(),
        Some(head + 4 * P)
    );
    queue.close().await.unwrap();
}

/// Closes `queue` with at least one occurrence of each of `names` run, and reopens it after more
/// than three periods: what a restart does. Returns the reopened queue and the latest time run
/// of each.
async fn restart(
    h: &impl Harness,
    queue: JobQueue,
    names: &[&str],
) -> (JobQueue, std::collections::HashMap<String, SystemTime>) {
    let mut consumer = queue.consume();
    let mut ran = std::collections::HashMap::new();
    while ran.len() < names.len() {
        let d = next(&mut consumer).await;
        let name = d.id().split_once('@').unwrap().0.to_owned();
        // The latest acked occurrence of each: on a slow machine one series may run twice
        // before the other's first, and the pending occurrence follows the latest.
        ran.insert(name, d.run_at());
        assert!(d.ack().await.unwrap());
    }
    drop(consumer);
    queue.close().await.unwrap();
    tokio::time::sleep(P * 7 / 2).await;
    (open(h).await, ran)
}

/// What every process does at boot, `schedule_recurring` of the same series after a
/// downtime, keeps the pending occurrence (with the new payload): the missed occurrences
/// are caught up as the policy says, not dropped by the call.
pub async fn recurring_setting_it_again_keeps_a_missed_occurrence(h: impl Harness) {
    let queue = open(&h).await;
    let all = CatchUp::All { max: 100 };
    queue
        .schedule_recurring_with("boot", every(P), "old", all)
        .await
        .unwrap();
    let (queue, ran) = restart(&h, queue, &["boot"]).await;
    let set_again = queue
        .schedule_recurring_with("boot", every(P), "new", all)
        .await
        .unwrap();
    assert_eq!(set_again, Recurring::Updated);
    assert_eq!(queue.pending().await.unwrap(), 1);
    let mut consumer = queue.consume();
    let d = next(&mut consumer).await;
    check_occurrence(&d, "boot", P);
    assert_eq!((d.run_at(), d.payload()), (ran["boot"] + P, &b"new"[..]));
    assert!(d.ack().await.unwrap());
    let times = take(&mut consumer, "boot", 2).await;
    assert_eq!(times, [ran["boot"] + 2 * P, ran["boot"] + 3 * P]);
    queue.close().await.unwrap();
}

/// A series given another recurrence after a downtime: its pending occurrence, already
/// due, runs once as an ordinary job (old payload) before the new recurrence's first,
/// unless the old policy is `None` (a later one was due too, so `None` skips it).
pub async fn recurring_a_new_recurrence_runs_a_due_occurrence_first(h: impl Harness) {
    let queue = open(&h).await;
    let all = CatchUp::All { max: 100 };
    queue
        .schedule_recurring_with("keep", every(P), "old", all)
        .await
        .unwrap();
    queue
        .schedule_recurring_with("skip", every(P), "old", CatchUp::None)
        .await
        .unwrap();
    let (queue, ran) = restart(&h, queue, &["keep", "skip"]).await;
    let set = SystemTime::now();
    for name in ["keep", "skip"] {
        queue
            .schedule_recurring_with(name, every(2 * P), "new", all)
            .await
            .unwrap();
    }
    assert_eq!(queue.pending().await.unwrap(), 3);
    let mut consumer = queue.consume();
    let mut seen: Vec<(String, Vec<u8>)> = Vec::new();
    while seen.iter().filter(|(_, p)| p == b"new").count() < 2 {
        let d = next(&mut consumer).await;
        let name = d.id().split_once('@').unwrap().0.to_owned();
        if d.payload() == b"new" {
            check_occurrence(&d, &name, 2 * P);
            assert!(d.run_at() > set, "{}", d.id());
        } else {
            assert_eq!(d.id(), occurrence("keep", ran["keep"] + P));
        }
        seen.push((name, d.payload().to_vec()));
        assert!(d.ack().await.unwrap());
    }
    assert_eq!(seen[0], ("keep".to_owned(), b"old".to_vec()), "{seen:?}");
    assert_eq!(seen.iter().filter(|(_, p)| p == b"old").count(), 1);
    queue.close().await.unwrap();
}

/// `reschedule` leaves a series' pending occurrence alone, as `cancel` does: its time is
/// its id and the series' schedule (moved past its successor, it would be superseded and
/// never run). Once delivered, it is an ordinary job: its retry is its own.
pub async fn recurring_its_pending_occurrence_is_not_rescheduled(h: impl Harness) {
    let queue = open(&h).await;
    queue
        .schedule_recurring("r", every(P), "series")
        .await
        .unwrap();
    let head = queue.list_recurring().await.unwrap()[0].next_run().unwrap();
    let id = occurrence("r", head);
    assert!(!queue.reschedule(&id, 3 * P).await.unwrap());
    assert_eq!(queue.get(&id).await.unwrap().unwrap().run_at(), head);
    let mut consumer = queue.consume();
    let d = next_or_stalled(&mut consumer, "the occurrence never ran").await;
    assert_eq!((d.id(), d.run_at()), (id.as_str(), head));
    assert!(d.ack().await.unwrap());
    queue.close().await.unwrap();
}

// Series of a kind: `RecurringOptions`.

/// A series of the kind `digest` at priority 2 with 1 attempt, set with a job of kind
/// `rate` due just after its first occurrence: a `rate` consumer gets the `rate` job and
/// never the occurrence, which stays pending and never delivered; a `digest` consumer gets
/// the occurrences, each of the series' kind, priority and attempts, and each claim moves
/// the series on.
pub async fn recurring_of_a_kind_goes_to_its_workers(h: impl Harness) {
    let queue = open(&h).await;
    let options = RecurringOptions::new()
        .options(JobOptions::kind("digest").priority(2).max_attempts(1))
        .catch_up(CatchUp::All { max: 100 });
    queue
        .schedule_recurring_with("digest", every(P), "d", options)
        .await
        .unwrap();
    let info = queue.list_recurring().await.unwrap().remove(0);
    assert_eq!(
        (info.kind(), info.priority(), info.max_attempts()),
        ("digest", 2, 1)
    );
    let first = info.next_run().unwrap();
    let head = occurrence("digest", first);
    let job = queue
        .get(&head)
        .await
        .unwrap()
        .expect("the first occurrence");
    assert_eq!(
        (job.kind(), job.priority(), job.max_attempts()),
        ("digest", 2, 1)
    );
    assert_eq!(queue.counts().await.unwrap().kinds["digest"].pending, 1);

    // Due after the occurrence: a `rate` claim that could take the occurrence would.
    let after = first.duration_since(SystemTime::now()).unwrap_or_default() + ms(50);
    queue
        .schedule_with("rate:1", after, "r", &JobOptions::kind("rate"))
        .await
        .unwrap();
    let mut rate = queue.consume_kind("rate");
    let d = next_or_stalled(&mut rate, "the rate job").await;
    assert_eq!((d.id(), d.kind()), ("rate:1", "rate"));
    assert!(d.ack().await.unwrap());
    let job = queue.get(&head).await.unwrap().expect("still pending");
    assert_eq!((job.state(), job.attempt()), (JobState::Pending, 0));
    drop(rate);

    let mut digest = queue.consume_kind("digest");
    let mut times = Vec::new();
    for _ in 0..3 {
        let d = next_or_stalled(&mut digest, "the digest series").await;
        check_occurrence(&d, "digest", P);
        assert_eq!(
            (d.kind(), d.priority(), d.payload()),
            ("digest", 2, &b"d"[..])
        );
        let pending = queue
            .get(&occurrence("digest", d.run_at() + P))
            .await
            .unwrap();
        let pending = pending.expect("the claim made the next occurrence");
        assert_eq!(
            (pending.kind(), pending.priority(), pending.max_attempts()),
            ("digest", 2, 1)
        );
        times.push(d.run_at());
        assert!(d.ack().await.unwrap());
    }
    assert_eq!(times[0], first);
    check_consecutive(&times);
    queue.close().await.unwrap();
}

/// A `run_kind` worker of the series' kind runs it beside one of another kind, and the
/// series' attempts hold: an occurrence that fails its one attempt is dead, and the series
/// goes on.
pub async fn recurring_of_a_kind_runs_under_run_kind_with_its_attempts(h: impl Harness) {
    let queue = open(&h).await;
    let options = RecurringOptions::new()
        .options(JobOptions::kind("digest").max_attempts(1))
        .catch_up(CatchUp::All { max: 100 });
    queue
        .schedule_recurring_with("nightly", every(P), "", options)
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let spawn = |kind: &'static str| {
        let (queue, tx) = (queue.clone(), tx.clone());
        tokio::spawn(async move {
            queue
                .run_kind(kind, 2, move |d| {
                    tx.send((kind, d.id().to_owned())).unwrap();
                    async { Err::<(), String>("fails".into()) }
                })
                .await
        })
    };
    let (other, worker) = (spawn("rate"), spawn("digest"));
    let mut ids = Vec::new();
    while ids.len() < 3 {
        let (kind, id) = tokio::time::timeout(Duration::from_secs(60), rx.recv())
            .await
            .expect("the series ran under run_kind")
            .unwrap();
        assert_eq!(kind, "digest", "{id} went to the {kind} worker");
        ids.push(id);
    }
    for id in &ids {
        // Each failed its one attempt: dead, not retried.
        let mut job = queue
            .get(id)
            .await
            .unwrap()
            .expect("a dead occurrence is kept");
        while job.state() == JobState::Running {
            tokio::time::sleep(ms(5)).await;
            job = queue.get(id).await.unwrap().unwrap();
        }
        assert_eq!((job.state(), job.attempt()), (JobState::Dead, 1), "{id}");
        assert_eq!(job.kind(), "digest");
    }
    let distinct: HashSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), 3, "{ids:?}");
    assert_eq!(queue.list_recurring().await.unwrap().len(), 1);
    queue.close().await.unwrap();
    worker.await.unwrap().unwrap();
    other.await.unwrap().unwrap();
}

/// Setting a series again with the same recurrence and another kind keeps its pending
/// occurrence and moves it to the new kind (and priority), so the new kind's workers take
/// it; the options survive a reopen.
pub async fn recurring_set_again_moves_its_pending_occurrence_to_the_new_kind(h: impl Harness) {
    let queue = open(&h).await;
    let hourly = every(Duration::from_secs(3600));
    queue
        .schedule_recurring_with("report", hourly.clone(), "a", RecurringOptions::kind("a"))
        .await
        .unwrap();
    let head = queue.list_recurring().await.unwrap()[0].next_run().unwrap();
    let outcome = queue
        .schedule_recurring_with(
            "report",
            hourly.clone(),
            "b",
            JobOptions::kind("b").priority(-3),
        )
        .await
        .unwrap();
    assert_eq!(outcome, Recurring::Updated);
    let info = queue.list_recurring().await.unwrap().remove(0);
    assert_eq!((info.kind(), info.priority()), ("b", -3));
    assert_eq!(info.next_run(), Some(head));
    let job = queue
        .get(&occurrence("report", head))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (job.kind(), job.priority(), job.payload()),
        ("b", -3, &b"b"[..])
    );
    let counts = queue.counts().await.unwrap().kinds;
    assert_eq!(counts.get("a").map_or(0, |c| c.pending), 0);
    assert_eq!(counts["b"].pending, 1);
    assert_eq!(queue.pending().await.unwrap(), 1);
    queue.close().await.unwrap();

    let queue = open(&h).await;
    let info = queue.list_recurring().await.unwrap().remove(0);
    assert_eq!((info.kind(), info.priority()), ("b", -3));
    // Back to the kind `""`: the plain call resets the options to the queue's.
    queue
        .schedule_recurring("report", hourly, "c")
        .await
        .unwrap();
    let info = queue.list_recurring().await.unwrap().remove(0);
    assert_eq!((info.kind(), info.priority()), ("", 0));
    let job = queue
        .get(&occurrence("report", head))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((job.kind(), job.priority()), ("", 0));
    queue.close().await.unwrap();
}

/// Options a series cannot have are refused before anything is stored: a key, its limits,
/// a dedup mode, options no job could have.
pub async fn recurring_bad_options_are_refused_and_nothing_is_stored(h: impl Harness) {
    let queue = open(&h).await;
    let hourly = every(Duration::from_secs(3600));
    let refused = [
        JobOptions::kind("a").key("tenant"),
        JobOptions::kind("a").key("tenant").key_limit(2),
        JobOptions::new().key_limit(2),
        JobOptions::new().key_rate(1, Duration::from_secs(1)),
        JobOptions::new().dedup(Dedup::Replace),
        JobOptions::new().max_attempts(0),
        JobOptions::new().lease(Duration::ZERO),
        JobOptions::kind("bad\nkind"),
        JobOptions::kind("k".repeat(MAX_KIND_LEN + 1)),
    ];
    for options in refused {
        let err = queue
            .schedule_recurring_with("s", hourly.clone(), "p", options.clone())
            .await
            .unwrap_err();
        assert!(err.is_invalid_input(), "{options:?}: {err}");
    }
    assert!(queue.list_recurring().await.unwrap().is_empty());
    assert_eq!(queue.pending().await.unwrap(), 0);
    queue.close().await.unwrap();
}

/// A head found superseded at its first claim under `Latest` moves to a job made by hand
/// under a later occurrence's id (due too), which the claim delivers in the head's place:
/// a claim that also met that job on its own does not fail or deliver it twice, of a kind
/// and of the plain group alike, and the series goes on.
pub async fn recurring_a_claim_meeting_the_job_its_head_moved_to_goes_on(h: impl Harness) {
    for kind in ["d", ""] {
        let queue = open(&h).await;
        let options = JobOptions::kind(kind);
        let series = RecurringOptions::new().options(options.clone());
        let name = format!("s{kind}");
        queue
            .schedule_recurring_with(&name, every(ms(500)), "s", series)
            .await
            .unwrap();
        let first = queue.list_recurring().await.unwrap()[0].next_run().unwrap();
        let later = first + ms(1000);
        let mine = occurrence(&name, later);
        queue
            .schedule_with(&mine, later, "mine", &options)
            .await
            .unwrap();
        let wait = later.duration_since(SystemTime::now()).unwrap_or_default();
        tokio::time::sleep(wait + ms(10)).await;

        // Both due: the head and the job made by hand.
        let mut consumer = queue.consume_kind(kind);
        let (mut got_mine, mut went_on) = (0, false);
        while !(got_mine > 0 && went_on) {
            let d = tokio::time::timeout(Duration::from_secs(30), consumer.next())
                .await
                .expect("a delivery")
                .expect("the consumer goes on")
                .unwrap_or_else(|err| panic!("kind {kind:?}: the claim failed: {err}"));
            assert_eq!(d.kind(), kind);
            if d.id() == mine {
                assert_eq!(d.payload(), b"mine");
                got_mine += 1;
            } else {
                assert!(d.id().starts_with(&format!("{name}@")), "{}", d.id());
                assert_eq!(d.payload(), b"s");
                went_on |= d.run_at() > later;
            }
            d.ack().await.unwrap();
        }
        assert_eq!(got_mine, 1, "kind {kind:?}: {mine} delivered twice");
        drop(consumer);
        assert!(queue.cancel_recurring(&name).await.unwrap());
        queue.close().await.unwrap();
    }
}
