use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;
use wheel_timer::{sleep_wheel, sleep_wheel_until, Sleep, Timer};

fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    std::pin::Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn sleep_is_small() {
    assert!(
        std::mem::size_of::<Sleep>() <= 40,
        "{}",
        std::mem::size_of::<Sleep>()
    );
}

#[tokio::test(start_paused = true)]
async fn delayed_sleeps_elapse_on_time() {
    for ms in [1u64, 10, 60, 1023, 1024, 1025, 65_536, 3_600_000] {
        let start = Instant::now();
        sleep_wheel(Duration::from_millis(ms)).await;
        let elapsed = start.elapsed();
        assert!(elapsed >= Duration::from_millis(ms), "{ms}: {elapsed:?}");
        assert!(
            elapsed <= Duration::from_millis(ms + 1),
            "{ms}: {elapsed:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn zero_and_past_ready_on_first_poll() {
    let mut s = sleep_wheel(Duration::ZERO);
    assert_eq!(poll_once(&mut s), Poll::Ready(()));
    let mut s = sleep_wheel_until(Instant::now() - Duration::from_secs(1));
    assert_eq!(poll_once(&mut s), Poll::Ready(()));
}

#[tokio::test(start_paused = true)]
async fn max_duration_saturates() {
    let mut s = pin!(sleep_wheel(Duration::MAX));
    assert!(poll_once(&mut s).is_pending());
    tokio::time::advance(Duration::from_secs(10 * 365 * 24 * 3600)).await;
    assert!(poll_once(&mut s).is_pending());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_sleeps_complete_real_clock() {
    let timer = Timer::new();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..10_000u64 {
        let t = timer.clone();
        set.spawn(async move { t.sleep(Duration::from_millis(1 + i % 20)).await });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    assert_eq!(timer.pending(), 0);
}
