//! Typed payloads (feature `serde`): values round-trip, undecodable payloads die, and a
//! typed queue bound to a kind schedules and runs that kind only.

use std::time::Duration;

use wheel_jobs::{JobOptions, JobState, Scheduled};

use super::open;
use crate::support::{ms, Harness};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct RateOrder {
    order: u64,
    stars: u8,
}

pub async fn typed_payloads_round_trip_and_undecodable_ones_die(h: impl Harness) {
    let queue = open(&h, |b| {
        b.max_attempts(2).backoff(ms(1), ms(1));
    })
    .await;
    let typed = queue.typed::<RateOrder>();
    let order = RateOrder {
        order: 42,
        stars: 5,
    };
    assert_eq!(
        typed
            .schedule("rate:42", Duration::ZERO, &order)
            .await
            .unwrap(),
        Scheduled::Created
    );
    let more = [(1, 3), (2, 4)].map(|(order, stars)| RateOrder { order, stars });
    let created = typed
        .schedule_many(
            more.iter()
                .map(|o| (format!("rate:{}", o.order), Duration::ZERO, o)),
        )
        .await
        .unwrap();
    assert_eq!(created, [Scheduled::Created; 2]);
    let stored = queue.get("rate:42").await.unwrap().unwrap();
    assert_eq!(
        stored.payload(),
        br#"{"order":42,"stars":5}"#,
        "JSON in the store"
    );
    // Not a RateOrder: scheduled untyped, as another program (or a bug) might.
    queue
        .schedule("garbage", Duration::ZERO, "5 stars")
        .await
        .unwrap();

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = typed.clone();
    let running = tokio::spawn(async move {
        worker
            .run(4, move |job| {
                let tx = tx.clone();
                async move {
                    tx.send((job.id().to_owned(), job.payload().clone()))
                        .unwrap();
                    Ok::<(), String>(())
                }
            })
            .await
    });
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(rx.recv().await.unwrap());
    }
    got.sort_by_key(|(_, o)| o.order);
    let expect = [
        ("rate:1", &more[0]),
        ("rate:2", &more[1]),
        ("rate:42", &order),
    ];
    assert_eq!(got, expect.map(|(id, o)| (id.to_owned(), o.clone())));
    // The undecodable payload failed both its attempts without reaching the handler.
    let dead = loop {
        match queue.get("garbage").await.unwrap() {
            Some(info) if info.state() == JobState::Dead => break info,
            _ => tokio::time::sleep(ms(5)).await,
        }
    };
    let error = dead.last_error().unwrap();
    assert!(
        error.starts_with("the payload does not decode as") && error.contains("RateOrder"),
        "{error}"
    );
    assert_eq!(dead.attempt(), 2);
    assert!(rx.try_recv().is_err(), "the handler never saw it");
    queue.close().await.unwrap();
    running.await.unwrap().expect("run ends cleanly on close");
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Remind {
    user: String,
}

pub async fn a_typed_queue_of_a_kind_schedules_and_runs_that_kind(h: impl Harness) {
    let queue = open(&h, |b| {
        b.max_attempts(7)
            .kind("rate", JobOptions::new().priority(2).max_attempts(3));
    })
    .await;
    let rates = queue.typed_kind::<RateOrder>("rate");
    let reminders = queue.typed_kind::<Remind>("remind");
    assert_eq!(
        (rates.kind(), queue.typed::<Remind>().kind()),
        (Some("rate"), None)
    );
    let order = |order| RateOrder { order, stars: 4 };
    // Due before the rates: a worker of every kind would decode a reminder as a RateOrder.
    reminders
        .schedule("remind:ann", Duration::ZERO, &Remind { user: "ann".into() })
        .await
        .unwrap();
    rates.schedule("rate:1", ms(20), &order(1)).await.unwrap();
    rates
        .schedule_many([("rate:2", ms(20), order(2)), ("rate:3", ms(20), order(3))])
        .await
        .unwrap();
    rates
        .schedule_with("rate:4", ms(20), &order(4), &JobOptions::new().priority(-1))
        .await
        .unwrap();
    rates
        .schedule_with(
            "rate:5",
            ms(20),
            &order(5),
            &JobOptions::kind("rate").max_attempts(1),
        )
        .await
        .unwrap();
    let err = rates
        .schedule_with("rate:6", ms(20), &order(6), &JobOptions::kind("remind"))
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    assert!(queue.get("rate:6").await.unwrap().is_none());
    let mut stored = Vec::new();
    for id in ["rate:1", "rate:2", "rate:4", "rate:5", "remind:ann"] {
        let job = queue.get(id).await.unwrap().unwrap();
        stored.push((
            id,
            job.kind().to_owned(),
            job.priority(),
            job.max_attempts(),
        ));
    }
    let rate = |id, priority, attempts| (id, "rate".to_owned(), priority, attempts);
    assert_eq!(
        stored,
        [
            rate("rate:1", 2, 3),
            rate("rate:2", 2, 3),
            rate("rate:4", -1, 3),
            rate("rate:5", 2, 1),
            ("remind:ann", "remind".to_owned(), 0, 7),
        ],
        "the kind's defaults, then the job's own"
    );

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = rates.clone();
    let running = tokio::spawn(async move {
        worker
            .run(2, move |job| {
                let tx = tx.clone();
                async move {
                    tx.send((job.delivery().kind().to_owned(), job.payload().order))
                        .unwrap();
                    Ok::<(), String>(())
                }
            })
            .await
    });
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(rx.recv().await.unwrap());
    }
    got.sort();
    assert_eq!(
        got,
        (1..=5).map(|o| ("rate".to_owned(), o)).collect::<Vec<_>>()
    );
    let ann = queue.get("remind:ann").await.unwrap().unwrap();
    assert_eq!(
        (ann.state(), ann.attempt(), ann.last_error()),
        (JobState::Pending, 0, None),
        "not a rate: never claimed by the rate worker"
    );
    queue.close().await.unwrap();
    running.await.unwrap().expect("run ends cleanly on close");
}
