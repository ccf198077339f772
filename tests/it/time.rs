//! `wheel_timer::time` is `tokio::time` by name: the same program, with only its import
//! changed, runs on the wheel.

use std::pin::pin;

use wheel_timer::time::error::Elapsed;
use wheel_timer::time::{
    interval, interval_at, sleep, sleep_until, timeout, timeout_at, Duration, Instant, Interval,
    MissedTickBehavior, Sleep, Timeout,
};

#[tokio::test(start_paused = true)]
async fn the_tokio_names_run_on_the_wheel() {
    let timer = wheel_timer::default_timer();
    let start = Instant::now();

    let mut nap: Sleep = sleep(Duration::from_millis(10));
    assert!(
        crate::support::poll_noop(pin!(&mut nap)).is_pending(),
        "not yet due"
    );
    assert_eq!(timer.pending(), 1, "registered in the wheel, not in tokio");
    nap.await;
    assert_eq!(start.elapsed(), Duration::from_millis(10));

    sleep_until(start + Duration::from_millis(25)).await;
    assert_eq!(start.elapsed(), Duration::from_millis(25));

    let late: Timeout<_> = timeout(Duration::from_millis(5), std::future::pending::<()>());
    let err: Elapsed = late.await.unwrap_err();
    assert_eq!(err.to_string(), "deadline has elapsed");
    assert_eq!(
        timeout_at(Instant::now() + Duration::from_secs(1), async { 3 }).await,
        Ok(3)
    );

    let mut every: Interval = interval(Duration::from_millis(10));
    every.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let first = every.tick().await;
    assert_eq!(every.tick().await, first + Duration::from_millis(10));

    let at = Instant::now() + Duration::from_millis(7);
    let mut from = interval_at(at, Duration::from_millis(10));
    assert_eq!(from.tick().await, at);
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "period must be non-zero")]
async fn a_zero_interval_panics_as_tokio_does() {
    let _ = interval(Duration::ZERO);
}
