//! `Timeout` semantics, mirroring tokio's `time_timeout.rs`.

use std::pin::pin;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::{advance, Instant};
use wheel_timer::{timeout_wheel, timeout_wheel_at, Elapsed, Timer};

use crate::support::{ms, poll_noop, WakeCounter};

#[tokio::test(start_paused = true)]
async fn simultaneous_deadline_future_completion() {
    let fut = pin!(timeout_wheel_at(Instant::now(), async {}));
    assert_eq!(poll_noop(fut), std::task::Poll::Ready(Ok(())));
}

#[tokio::test(start_paused = true)]
async fn completed_future_past_deadline() {
    let fut = pin!(timeout_wheel_at(
        Instant::now() - Duration::from_secs(1),
        async { 3 }
    ));
    assert_eq!(poll_noop(fut), std::task::Poll::Ready(Ok(3)));
}

#[tokio::test(start_paused = true)]
async fn future_and_deadline_in_future() {
    let (tx, rx) = oneshot::channel();
    let counter = WakeCounter::new();
    let mut fut = pin!(timeout_wheel_at(Instant::now() + ms(100), rx));
    assert!(counter.poll(fut.as_mut()).is_pending());
    advance(ms(90)).await;
    assert!(counter.poll(fut.as_mut()).is_pending());
    tx.send(7).unwrap();
    assert!(counter.count() >= 1, "the send wakes the task");
    assert_eq!(
        counter.poll(fut.as_mut()),
        std::task::Poll::Ready(Ok(Ok(7)))
    );
}

#[tokio::test(start_paused = true)]
async fn future_and_timeout_in_future() {
    let (tx, rx) = oneshot::channel();
    let mut fut = pin!(timeout_wheel(ms(100), rx));
    assert!(poll_noop(fut.as_mut()).is_pending());
    advance(ms(90)).await;
    assert!(poll_noop(fut.as_mut()).is_pending());
    tx.send(8).unwrap();
    assert_eq!(fut.await, Ok(Ok(8)));
}

#[tokio::test(start_paused = true)]
async fn very_large_timeout() {
    let (tx, rx) = oneshot::channel();
    let mut fut = pin!(timeout_wheel(Duration::MAX, rx));
    assert!(poll_noop(fut.as_mut()).is_pending());
    advance(Duration::from_secs(10 * 365 * 86_400)).await;
    assert!(poll_noop(fut.as_mut()).is_pending());
    tx.send(()).unwrap();
    assert_eq!(fut.await, Ok(Ok(())));
}

#[tokio::test(start_paused = true)]
async fn deadline_now_elapses() {
    let start = Instant::now();
    let res: Result<(), Elapsed> = timeout_wheel_at(start, std::future::pending::<()>()).await;
    assert!(res.is_err());
    assert!(start.elapsed() <= ms(1));
}

#[tokio::test(start_paused = true)]
async fn deadline_future_elapses() {
    let start = Instant::now();
    let counter = WakeCounter::new();
    let mut fut = pin!(timeout_wheel(ms(300), std::future::pending::<()>()));
    assert!(counter.poll(fut.as_mut()).is_pending());
    advance(ms(299)).await;
    assert!(counter.poll(fut.as_mut()).is_pending());
    assert_eq!(counter.count(), 0);
    advance(ms(2)).await;
    tokio::task::yield_now().await;
    assert_eq!(counter.count(), 1, "the deadline wakes the task");
    assert!(counter.poll(fut.as_mut()).is_ready());
    assert!(start.elapsed() >= ms(300));
}

#[tokio::test]
async fn timeout_is_not_exhausted_by_a_budget_burning_future() {
    use tokio::io::AsyncReadExt;
    let fut = async {
        let mut buf = [0u8; 1];
        let mut empty = tokio::io::empty();
        loop {
            // `io::empty` is always ready and consumes tokio's coop budget.
            let _ = empty.read(&mut buf).await;
        }
    };
    assert!(timeout_wheel(ms(1), fut).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn elapsed_is_an_io_timed_out_error() {
    let err = Timer::new()
        .timeout(ms(1), std::future::pending::<()>())
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "deadline has elapsed");
    assert_eq!(err.clone(), err);
    let io: std::io::Error = err.into();
    assert_eq!(io.kind(), std::io::ErrorKind::TimedOut);
    fn is_error<E: std::error::Error + Send + Sync + 'static>(_: &E) {}
    is_error(&err);
}

#[tokio::test(start_paused = true)]
async fn accessors_reach_the_inner_future() {
    let mut t = timeout_wheel(ms(10), std::future::ready(5));
    let _: &std::future::Ready<i32> = t.get_ref();
    let _inner: &mut std::future::Ready<i32> = t.get_mut();
    assert_eq!(t.into_inner().await, 5);
}
