//! Recurring series of a kind on Redis (`lua/series.lua`): what the shared suite
//! (`suite/recurring.rs`) cannot reach. A record written before series had a spec, planted
//! as that code wrote it; heads of a kind claimed by a worker of several kinds, on a
//! partitioned queue by `consume_kind`, and after downtimes (a head superseded in the claim,
//! and a list run dry that Rust refills).

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use wheel_jobs::{CatchUp, JobOptions, Recurrence, RecurringOptions};

use super::queue as open;
use crate::support::redis::RedisServer;
use crate::support::{ms, next};

fn ns(at: SystemTime) -> u128 {
    at.duration_since(UNIX_EPOCH).unwrap().as_nanos()
}

/// An occurrence's time as its id holds it.
fn text(at: SystemTime) -> String {
    jiff::Timestamp::try_from(at).unwrap().to_string()
}

/// The occurrence of the series `name` at `at`.
fn occurrence(name: &str, at: SystemTime) -> String {
    format!("{name}@{}", text(at))
}

/// `at` rounded up to a whole millisecond.
fn whole_ms(at: SystemTime) -> SystemTime {
    let ms = ns(at).div_ceil(1_000_000) as u64;
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// The next delivery of `consumer`, or a panic naming `what` after a minute.
async fn within_a_minute(consumer: &mut wheel_jobs::Consumer, what: &str) -> wheel_jobs::Delivery {
    tokio::time::timeout(Duration::from_secs(60), next(consumer))
        .await
        .unwrap_or_else(|_| panic!("{what} never came"))
}

/// A series stored by the code before series had a spec (`version|runs|head_ns|head_text|
/// last_ns|rule`, its head a job without a spec tail in the plain due set), planted with
/// redis commands: listed with the plain spec of the process that reads it, run by a
/// consumer of every kind, its next occurrences made with that plain spec, and its record
/// left in the old layout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_series_record_lists_and_runs_with_the_plain_spec() {
    let server = RedisServer::start();
    // The layout recorded by a first open.
    open(&server, |_| {}).await.close().await.unwrap();
    let every = ms(100);
    let head = whole_ms(SystemTime::now() + ms(300));
    let list: Vec<String> = (1..=20)
        .map(|i| {
            let at = head + every * i;
            format!("{}={}", ns(at), text(at))
        })
        .collect();
    let id = occurrence("old", head);
    let record = format!("7|1|{}|{}||every 100ms", ns(head), text(head));
    server.cli(&["HSET", "{orders}:series", "old", &record]);
    server.cli(&["HSET", "{orders}:series_payload", "old", "p"]);
    server.cli(&["HSET", "{orders}:series_next", "old", &list.join(",")]);
    server.cli(&["HSET", "{orders}:meta", &id, &format!("p:0:0:{}", ns(head))]);
    server.cli(&["HSET", "{orders}:payload", &id, "p"]);
    let score = (ns(head) / 1000).to_string();
    server.cli(&["ZADD", "{orders}:due", &score, &id]);
    server.cli(&["HINCRBY", "{orders}:counts", "pending", "1"]);

    let q = open(&server, |b| {
        b.max_attempts(7);
    })
    .await;
    let info = q.list_recurring().await.unwrap().remove(0);
    assert_eq!(info.name(), "old");
    assert_eq!(
        (info.kind(), info.priority(), info.max_attempts()),
        ("", 0, 7)
    );
    assert_eq!(info.next_run(), Some(head));
    let mut consumer = q.consume();
    let mut times = Vec::new();
    for _ in 0..3 {
        let d = within_a_minute(&mut consumer, "the old series").await;
        assert_eq!((d.kind(), d.priority(), d.payload()), ("", 0, &b"p"[..]));
        let made = q
            .get(&occurrence("old", d.run_at() + every))
            .await
            .unwrap()
            .expect("the claim made the next occurrence");
        assert_eq!(
            (made.kind(), made.priority(), made.max_attempts()),
            ("", 0, 7)
        );
        times.push(d.run_at());
        assert!(d.ack().await.unwrap());
    }
    assert_eq!(times, [head, head + every, head + 2 * every]);
    drop(consumer);
    let record = server.cli(&["HGET", "{orders}:series", "old"]);
    assert!(
        !record.contains('\x1f') && record.ends_with("|every 100ms"),
        "still without a spec: {record:?}"
    );
    assert_eq!(q.pending().await.unwrap(), 1);
    q.close().await.unwrap();
    // Another process's plain spec is the one it reads.
    let q = open(&server, |b| {
        b.max_attempts(9);
    })
    .await;
    assert_eq!(q.list_recurring().await.unwrap()[0].max_attempts(), 9);
    // Set again, it stores the spec it is given.
    let options = RecurringOptions::kind("digest");
    q.schedule_recurring_with("old", Recurrence::every(every).unwrap(), "p", options)
        .await
        .unwrap();
    let info = q.list_recurring().await.unwrap().remove(0);
    assert_eq!((info.kind(), info.max_attempts()), ("digest", 9));
    let head = info.next_run().unwrap();
    let job = q.get(&occurrence("old", head)).await.unwrap().unwrap();
    assert_eq!(job.kind(), "digest");
    assert_eq!(q.counts().await.unwrap().kinds["digest"].pending, 1);
    q.close().await.unwrap();
}

/// The heads of a series of a kind are claimed by a worker of that kind and another, each
/// by its own handler, one claim after another moving the series on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_of_a_kind_is_claimed_by_a_worker_of_two_kinds() {
    let server = RedisServer::start();
    let q = open(&server, |_| {}).await;
    let every = ms(100);
    let options = RecurringOptions::new()
        .options(JobOptions::kind("digest").priority(3))
        .catch_up(CatchUp::All { max: 100 });
    q.schedule_recurring_with("d", Recurrence::every(every).unwrap(), "p", options)
        .await
        .unwrap();
    q.schedule_with("r:1", ms(50), "r", &JobOptions::kind("rate"))
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let handler = |name: &'static str| {
        let tx = tx.clone();
        move |d: wheel_jobs::Delivery| {
            tx.send((
                name,
                d.kind().to_owned(),
                d.priority(),
                d.id().to_owned(),
                d.run_at(),
            ))
            .unwrap();
            std::future::ready(Ok::<(), String>(()))
        }
    };
    let worker = q
        .worker()
        .kind("digest", handler("digest"))
        .kind("rate", handler("rate"));
    drop(tx);
    let running = tokio::spawn(worker.run(2));
    let (mut digests, mut rates) = (Vec::new(), 0);
    while digests.len() < 3 || rates < 1 {
        let (handler, kind, priority, id, at) =
            tokio::time::timeout(Duration::from_secs(60), rx.recv())
                .await
                .expect("the worker stalled")
                .unwrap();
        assert_eq!(handler, kind, "{id}");
        if kind == "rate" {
            assert_eq!(id, "r:1");
            rates += 1;
        } else {
            assert_eq!((kind.as_str(), priority), ("digest", 3), "{id}");
            assert_eq!(id, occurrence("d", at));
            digests.push(at);
        }
    }
    for pair in digests.windows(2) {
        assert_eq!(pair[1], pair[0] + every, "{digests:?}");
    }
    q.close().await.unwrap();
    running.await.unwrap().unwrap();
    assert_eq!(rates, 1);
}

/// On a queue of 3 partitions, series of a kind (each in the partition of its name, with
/// its heads) are claimed by `consume_kind` across the partitions, each occurrence once and
/// each series in order, and a consumer of another kind gets none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_queues_series_of_a_kind_are_claimed_by_consume_kind() {
    let server = RedisServer::start();
    let q = open(&server, |b| {
        b.partitions(3);
    })
    .await;
    let every = ms(100);
    let names = ["a", "b", "c", "d", "e"];
    for name in names {
        let options = RecurringOptions::new()
            .options(JobOptions::kind("digest").priority(-1))
            .catch_up(CatchUp::All { max: 100 });
        q.schedule_recurring_with(name, Recurrence::every(every).unwrap(), "p", options)
            .await
            .unwrap();
    }
    let mut other = q.consume_kind("rate");
    let mut digest = q.consume_kind("digest");
    let mut seen: Vec<Vec<SystemTime>> = vec![Vec::new(); names.len()];
    let mut ids = HashSet::new();
    while seen.iter().any(|times| times.len() < 3) {
        let d = within_a_minute(&mut digest, "a digest occurrence").await;
        assert_eq!((d.kind(), d.priority()), ("digest", -1), "{}", d.id());
        assert!(ids.insert(d.id().to_owned()), "{} twice", d.id());
        let (name, _) = d.id().split_once('@').unwrap();
        let i = names.iter().position(|n| *n == name).unwrap();
        let made = q
            .get(&occurrence(name, d.run_at() + every))
            .await
            .unwrap()
            .expect("the claim made the next occurrence");
        assert_eq!((made.kind(), made.priority()), ("digest", -1));
        seen[i].push(d.run_at());
        assert!(d.ack().await.unwrap());
    }
    for times in &seen {
        for pair in times.windows(2) {
            assert_eq!(pair[1], pair[0] + every, "{times:?}");
        }
    }
    let none = tokio::time::timeout(ms(300), other.next()).await;
    assert!(
        none.is_err(),
        "a rate consumer got {:?}",
        none.map(|d| d.map(|d| d.map(|d| d.id().to_owned())))
    );
    drop((other, digest));
    q.close().await.unwrap();
}

/// After a downtime, a series of a kind under `Latest`: a short one supersedes the head in
/// the claim (`claim.lua`), a long one runs its list dry and Rust refills it
/// (`recurring_fill.lua`); either way the occurrence delivered and the one made after it
/// are of the series' kind and priority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_downtime_the_occurrences_a_claim_makes_keep_the_series_spec() {
    for (every, down) in [(ms(100), ms(350)), (ms(10), ms(700))] {
        let server = RedisServer::start();
        let q = open(&server, |_| {}).await;
        let options = RecurringOptions::new()
            .options(JobOptions::kind("digest").priority(2).max_attempts(4))
            .catch_up(CatchUp::Latest);
        q.schedule_recurring_with("s", Recurrence::every(every).unwrap(), "p", options)
            .await
            .unwrap();
        let head = q.list_recurring().await.unwrap()[0].next_run().unwrap();
        q.close().await.unwrap();
        tokio::time::sleep(down).await;
        let q = open(&server, |_| {}).await;
        let mut consumer = q.consume_kind("digest");
        let d = within_a_minute(&mut consumer, "the latest occurrence").await;
        let what = format!("every {every:?}, down {down:?}: {}", d.id());
        assert!(d.run_at() >= head + every * 2, "{what}");
        assert_eq!((d.kind(), d.priority()), ("digest", 2), "{what}");
        let info = q.list_recurring().await.unwrap().remove(0);
        let made = q
            .get(&occurrence("s", info.next_run().unwrap()))
            .await
            .unwrap()
            .expect("a pending occurrence");
        assert_eq!(
            (made.kind(), made.priority(), made.max_attempts()),
            ("digest", 2, 4),
            "{what}"
        );
        assert!(d.ack().await.unwrap());
        let counts = q.counts().await.unwrap();
        assert_eq!(counts.kinds["digest"].pending, 1, "{what}");
        assert_eq!(q.pending().await.unwrap(), 1, "{what}");
        drop(consumer);
        q.close().await.unwrap();
    }
}

/// Another process's idle consumer of kind `y` (a safety wakeup far past the test's wait)
/// is woken when a set of the same recurrence moves the series' pending head from kind `x`
/// into `y`'s due set, where it is the first (`recurring_set.lua` publishes its score):
/// without the wake, it would sleep until its safety wakeup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_moving_a_head_into_another_kind_wakes_that_kinds_idle_consumer() {
    let server = RedisServer::start();
    let a = open(&server, |_| {}).await;
    let b = open(&server, |b| {
        b.safety_wakeup(Duration::from_secs(120));
    })
    .await;
    let every = Recurrence::every(Duration::from_secs(2)).unwrap();
    a.schedule_recurring_with("s", every.clone(), "p", RecurringOptions::kind("x"))
        .await
        .unwrap();
    let mut y = b.consume_kind("y");
    // b's consumer finds nothing of its kind and goes idle.
    assert!(tokio::time::timeout(ms(300), y.next()).await.is_err());
    a.schedule_recurring_with("s", every, "p", RecurringOptions::kind("y"))
        .await
        .unwrap();
    let d = tokio::time::timeout(Duration::from_secs(20), next(&mut y))
        .await
        .expect("b's idle consumer of y never woke for the moved head");
    assert_eq!((d.kind(), d.id().split_once('@').unwrap().0), ("y", "s"));
    assert!(d.ack().await.unwrap());
    drop(y);
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// The members of the queue's `levels` set (`lua/kinds.lua`), space-separated.
fn levels(server: &RedisServer) -> String {
    server
        .cli(&["ZRANGE", "{orders}:levels", "0", "-1"])
        .replace('\n', " ")
}

/// `field` of the queue's counters hash, "" if it has none.
fn counter(server: &RedisServer, field: &str) -> String {
    server.cli(&["HGET", "{orders}:counts", field])
}

/// Cancelling a series of a kind takes its head out of its level's due set, and with it
/// the level's entry in `levels` and the kind's pending counter (a counter at 0 goes); so
/// does a set moving it to the plain level, and a set of another recurrence moving it to
/// another kind and priority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_series_of_a_kind_leaves_no_level_and_no_counter_of_it() {
    let server = RedisServer::start();
    let q = open(&server, |_| {}).await;
    let hourly = Recurrence::every(Duration::from_secs(3600)).unwrap();
    // A kind holding the record's and the tail's separators.
    let options = RecurringOptions::new().options(JobOptions::kind("a|b:c").priority(2));
    q.schedule_recurring_with("s", hourly.clone(), "p", options)
        .await
        .unwrap();
    assert_eq!(levels(&server), "d:2:a|b:c");
    assert_eq!(counter(&server, "pending:a|b:c"), "1");
    assert!(q.cancel_recurring("s").await.unwrap());
    assert_eq!(levels(&server), "");
    assert_eq!(server.cli(&["EXISTS", "{orders}:due:2:a|b:c"]), "0");
    assert_eq!(counter(&server, "pending:a|b:c"), "");
    assert_eq!(counter(&server, "pending"), "0");

    // Set again, moved to the plain level by a set of the same recurrence.
    let options = RecurringOptions::new().options(JobOptions::kind("a|b:c").priority(2));
    q.schedule_recurring_with("s", hourly.clone(), "p", options)
        .await
        .unwrap();
    q.schedule_recurring_with("s", hourly, "p", CatchUp::Latest)
        .await
        .unwrap();
    assert_eq!(levels(&server), "");
    assert_eq!(counter(&server, "pending:a|b:c"), "");
    assert_eq!(server.cli(&["ZCARD", "{orders}:due"]), "1");
    // Another recurrence, of another kind and priority.
    let options = RecurringOptions::new().options(JobOptions::kind("y").priority(-3));
    let two_hours = Recurrence::every(Duration::from_secs(7200)).unwrap();
    q.schedule_recurring_with("s", two_hours, "p", options)
        .await
        .unwrap();
    assert_eq!(levels(&server), "d:-3:y");
    assert_eq!(server.cli(&["ZCARD", "{orders}:due"]), "0");
    assert_eq!(
        (counter(&server, "pending:y"), counter(&server, "pending")),
        ("1".into(), "1".into())
    );
    assert!(q.cancel_recurring("s").await.unwrap());
    assert_eq!(levels(&server), "");
    assert_eq!(server.cli(&["EXISTS", "{orders}:due:-3:y"]), "0");
    assert_eq!(counter(&server, "pending:y"), "");
    assert_eq!(counter(&server, "pending"), "0");
    let counts = q.counts().await.unwrap();
    assert_eq!(counts.pending, 0);
    assert!(counts.kinds.is_empty(), "{:?}", counts.kinds);
    q.close().await.unwrap();
}

/// A copy (`JobQueue::copy_to`) of a queue holding a series of a kind into another Redis
/// queue: the destination's series keeps the kind, priority, attempts and catch-up, and its
/// head, one job of that spec, sits in the due set of that kind and priority at the
/// source's score, counted pending of the kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_into_redis_keeps_a_series_kind_and_its_heads_due_set() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let source = open(&a, |_| {}).await;
    let dest = open(&b, |_| {}).await;
    let options = RecurringOptions::new()
        .options(JobOptions::kind("digest").priority(4).max_attempts(2))
        .catch_up(CatchUp::None);
    let hourly = Recurrence::every(Duration::from_secs(3600)).unwrap();
    source
        .schedule_recurring_with("s", hourly, "p", options)
        .await
        .unwrap();
    source.pause().await.unwrap();
    source.copy_to(&dest).await.unwrap();
    let was = source.list_recurring().await.unwrap().remove(0);
    let info = dest.list_recurring().await.unwrap().remove(0);
    assert_eq!(
        (info.kind(), info.priority(), info.max_attempts()),
        ("digest", 4, 2)
    );
    assert_eq!(info.catch_up(), CatchUp::None);
    assert_eq!(info.next_run(), was.next_run());
    let id = occurrence("s", info.next_run().unwrap());
    let head = dest.get(&id).await.unwrap().expect("the copied head");
    assert_eq!(
        (head.kind(), head.priority(), head.max_attempts()),
        ("digest", 4, 2)
    );
    assert_eq!(levels(&b), "d:4:digest");
    let due = |server: &RedisServer| {
        server.cli(&["ZRANGE", "{orders}:due:4:digest", "0", "-1", "WITHSCORES"])
    };
    assert_eq!(due(&b), due(&a));
    assert!(due(&b).starts_with(&format!("{id}\n")), "{}", due(&b));
    assert_eq!(b.cli(&["ZCARD", "{orders}:due"]), "0");
    assert_eq!(
        (counter(&b, "pending:digest"), counter(&b, "pending")),
        ("1".into(), "1".into())
    );
    source.close().await.unwrap();
    dest.close().await.unwrap();
}
