//! Typed payloads (feature `serde`): values round-trip, undecodable payloads die.

use std::time::Duration;

use wheel_jobs::{JobState, Scheduled};

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
