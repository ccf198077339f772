//! `Interval`: tokio's `tests/time_interval.rs` schedules, on the wheel.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::time::Instant;
use wheel_timer::{interval_wheel, interval_wheel_at, Interval, MissedTickBehavior, Timer};

use crate::support::{ms, WakeCounter};

/// Advances the paused clock and lets the driver task turn.
async fn advance(duration: Duration) {
    tokio::time::advance(duration).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

fn poll_tick(interval: &mut Interval) -> Poll<Instant> {
    let wakes = WakeCounter::new();
    interval.poll_tick(&mut Context::from_waker(&wakes.waker()))
}

/// Polls `interval` until it is pending and returns the ticks it gave, as ms after `start`.
#[track_caller]
fn ticks(interval: &mut Interval, start: Instant) -> Vec<u64> {
    let mut got = Vec::new();
    while let Poll::Ready(at) = poll_tick(interval) {
        got.push((at - start).as_millis() as u64);
        assert!(got.len() < 100, "never pending: {got:?}");
    }
    got
}

/// As tokio's tests: start an interval of 300 ms at `start`, 1 ms in the past.
async fn started(behavior: MissedTickBehavior) -> (Interval, Instant) {
    let start = Instant::now();
    advance(ms(1)).await;
    let mut interval = interval_wheel_at(start, ms(300));
    interval.set_missed_tick_behavior(behavior);
    (interval, start)
}

#[tokio::test(start_paused = true)]
async fn burst() {
    let (mut i, start) = started(MissedTickBehavior::Burst).await;
    assert_eq!(ticks(&mut i, start), [0]);
    advance(ms(100)).await;
    assert_eq!(ticks(&mut i, start), []);
    advance(ms(200)).await;
    assert_eq!(ticks(&mut i, start), [300]);
    advance(ms(650)).await;
    assert_eq!(ticks(&mut i, start), [600, 900]);
    advance(ms(200)).await;
    assert_eq!(ticks(&mut i, start), []);
    advance(ms(100)).await;
    assert_eq!(ticks(&mut i, start), [1200]);
    advance(ms(250)).await;
    assert_eq!(ticks(&mut i, start), [1500]);
    advance(ms(300)).await;
    assert_eq!(ticks(&mut i, start), [1800]);
}

#[tokio::test(start_paused = true)]
async fn delay() {
    let (mut i, start) = started(MissedTickBehavior::Delay).await;
    assert_eq!(ticks(&mut i, start), [0]);
    advance(ms(100)).await;
    assert_eq!(ticks(&mut i, start), []);
    advance(ms(200)).await;
    assert_eq!(ticks(&mut i, start), [300]);
    advance(ms(650)).await;
    assert_eq!(ticks(&mut i, start), [600]);
    advance(ms(100)).await;
    assert_eq!(ticks(&mut i, start), []);
    advance(ms(201)).await;
    assert_eq!(ticks(&mut i, start), [1251]);
    advance(ms(300)).await;
    assert_eq!(ticks(&mut i, start), [1551]);
    advance(ms(300)).await;
    assert_eq!(ticks(&mut i, start), [1851]);
}

#[tokio::test(start_paused = true)]
async fn skip() {
    let (mut i, start) = started(MissedTickBehavior::Skip).await;
    assert_eq!(ticks(&mut i, start), [0]);
    advance(ms(100)).await;
    assert_eq!(ticks(&mut i, start), []);
    advance(ms(200)).await;
    assert_eq!(ticks(&mut i, start), [300]);
    advance(ms(650)).await;
    assert_eq!(ticks(&mut i, start), [600]);
    advance(ms(250)).await;
    assert_eq!(ticks(&mut i, start), [1200]);
    advance(ms(300)).await;
    assert_eq!(ticks(&mut i, start), [1500]);
    advance(ms(300)).await;
    assert_eq!(ticks(&mut i, start), [1800]);
}

/// Runs the first 400 ms of tokio's reset tests: ticks at 0 and 300, then 100 ms more.
async fn before_reset() -> (Interval, Instant) {
    let (mut i, start) = started(MissedTickBehavior::Burst).await;
    assert_eq!(ticks(&mut i, start), [0]);
    advance(ms(100)).await;
    assert_eq!(ticks(&mut i, start), []);
    advance(ms(200)).await;
    assert_eq!(ticks(&mut i, start), [300]);
    advance(ms(100)).await;
    assert_eq!(ticks(&mut i, start), []);
    (i, start)
}

#[tokio::test(start_paused = true)]
async fn reset() {
    let (mut i, start) = before_reset().await;
    i.reset();
    advance(ms(250)).await;
    assert_eq!(ticks(&mut i, start), []);
    advance(ms(50)).await;
    assert_eq!(ticks(&mut i, start), [701]);
    advance(ms(300)).await;
    assert_eq!(ticks(&mut i, start), [1001]);
}

#[tokio::test(start_paused = true)]
async fn reset_immediately() {
    let (mut i, start) = before_reset().await;
    i.reset_immediately();
    assert_eq!(ticks(&mut i, start), [401]);
    advance(ms(100)).await;
    assert_eq!(ticks(&mut i, start), []);
    advance(ms(200)).await;
    assert_eq!(ticks(&mut i, start), [701]);
}

#[tokio::test(start_paused = true)]
async fn reset_after() {
    let (mut i, start) = before_reset().await;
    i.reset_after(ms(20));
    advance(ms(20)).await;
    assert_eq!(ticks(&mut i, start), [421]);
    advance(ms(100)).await;
    assert_eq!(ticks(&mut i, start), []);
    advance(ms(200)).await;
    assert_eq!(ticks(&mut i, start), [721]);
}

#[tokio::test(start_paused = true)]
async fn reset_at() {
    let (mut i, start) = before_reset().await;
    i.reset_at(Instant::now() + ms(40));
    advance(ms(40)).await;
    assert_eq!(ticks(&mut i, start), [441]);
    advance(ms(100)).await;
    assert_eq!(ticks(&mut i, start), []);
    advance(ms(200)).await;
    assert_eq!(ticks(&mut i, start), [741]);
}

#[tokio::test(start_paused = true)]
async fn reset_at_bigger_than_interval() {
    let (mut i, start) = before_reset().await;
    i.reset_at(Instant::now() + ms(1000));
    for _ in 0..3 {
        advance(ms(300)).await;
        assert_eq!(ticks(&mut i, start), []);
    }
    advance(ms(100)).await;
    assert_eq!(ticks(&mut i, start), [1401]);
    advance(ms(300)).await;
    assert_eq!(ticks(&mut i, start), [1701]);
}

#[tokio::test(start_paused = true)]
async fn first_tick_is_immediate_and_ticks_return_their_scheduled_instant() {
    let timer = Timer::new();
    let start = Instant::now();
    let mut interval = timer.interval(ms(10));
    assert_eq!(interval.period(), ms(10));
    assert_eq!(interval.missed_tick_behavior(), MissedTickBehavior::Burst);
    for k in 0..5u32 {
        assert_eq!(interval.tick().await, start + ms(10) * k);
        assert_eq!(Instant::now(), start + ms(10) * k, "not a tick late");
    }
    let later = start + ms(100);
    let mut at = timer.interval_at(later, ms(10));
    assert_eq!(at.tick().await, later);
    assert_eq!(Instant::now(), later);
}

#[tokio::test(start_paused = true)]
async fn a_ready_tick_registers_no_timer_and_allocates_nothing_per_tick() {
    let timer = Timer::new();
    let mut interval = timer.interval(ms(10));
    assert!(poll_tick(&mut interval).is_ready());
    assert_eq!(timer.pending(), 0, "a Ready tick registers nothing");
    assert!(poll_tick(&mut interval).is_pending());
    assert_eq!(timer.pending(), 1);
    for _ in 0..20 {
        interval.tick().await;
    }
    let stats = timer.stats();
    assert_eq!(
        (stats.scheduled, stats.fired),
        (20, 20),
        "one registration per tick"
    );
}

#[tokio::test(start_paused = true)]
async fn coarse_ticks_do_not_count_as_missed() {
    // A 20 ms wheel tick rounds deadlines up by up to 20 ms: more than tokio's 5 ms
    // tolerance, so the tolerance grows to one wheel tick and `Delay` does not drift.
    let timer = Timer::builder().tick(ms(20)).build().unwrap();
    let start = Instant::now();
    let mut interval = timer.interval_at(start + ms(5), ms(50));
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    for k in 0..4u32 {
        assert_eq!(interval.tick().await, start + ms(5) + ms(50) * k);
    }
}

#[tokio::test(start_paused = true)]
async fn interval_is_a_stream() {
    let start = Instant::now();
    let got: Vec<_> = interval_wheel(ms(7)).take(3).collect().await;
    assert_eq!(got, [start, start + ms(7), start + ms(14)]);
}

/// tokio's `IntervalStreamer`: yields every fourth tick, optionally waking itself when it
/// swallows a tick.
struct Streamer {
    counter: u32,
    interval: Interval,
    wake_on_pending: bool,
}

impl Stream for Streamer {
    type Item = u32;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<u32>> {
        let this = self.get_mut();
        if this.counter > 12 {
            return Poll::Ready(None);
        }
        match this.interval.poll_tick(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(_) => {
                this.counter += 1;
                if this.counter % 4 == 0 {
                    Poll::Ready(Some(this.counter))
                } else {
                    if this.wake_on_pending {
                        cx.waker().wake_by_ref();
                    }
                    Poll::Pending
                }
            }
        }
    }
}

async fn stream_items(wake_on_pending: bool) -> Vec<u32> {
    let stream = Streamer {
        counter: 0,
        interval: interval_wheel(ms(10)),
        wake_on_pending,
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel(12);
    tokio::spawn(tokio::time::timeout(ms(150), async move {
        tokio::pin!(stream);
        while let Some(item) = stream.next().await {
            tx.send(item).await.ok();
        }
    }));
    let mut items = Vec::new();
    while let Some(item) = rx.recv().await {
        items.push(item);
    }
    items
}

#[tokio::test(start_paused = true)]
async fn poll_tick_self_waking() {
    assert_eq!(stream_items(true).await, [4, 8, 12]);
}

#[tokio::test(start_paused = true)]
async fn poll_tick_no_waking() {
    assert_eq!(stream_items(false).await, Vec::<u32>::new());
}

#[tokio::test(start_paused = true)]
async fn max_durations_do_not_panic() {
    let mut interval = interval_wheel(Duration::MAX);
    assert!(poll_tick(&mut interval).is_ready());
    assert!(poll_tick(&mut interval).is_pending());
    interval.reset();
    interval.reset_after(Duration::MAX);
    assert!(poll_tick(&mut interval).is_pending());
    let mut short = interval_wheel(ms(1));
    short.reset_after(Duration::MAX);
    assert!(poll_tick(&mut short).is_pending());
}

#[tokio::test]
#[should_panic(expected = "wheel-timer: an interval's period must be non-zero")]
async fn zero_period_panics() {
    let _ = interval_wheel_at(Instant::now(), Duration::ZERO);
}

#[tokio::test]
#[should_panic(expected = "wheel-timer: an interval's period must be non-zero")]
async fn zero_period_panics_on_a_timer() {
    let _ = Timer::new().interval(Duration::ZERO);
}

#[test]
fn missed_tick_behavior_converts_from_tokio() {
    use tokio::time::MissedTickBehavior as Tokio;
    for (theirs, ours) in [
        (Tokio::Burst, MissedTickBehavior::Burst),
        (Tokio::Delay, MissedTickBehavior::Delay),
        (Tokio::Skip, MissedTickBehavior::Skip),
    ] {
        assert_eq!(MissedTickBehavior::from(theirs), ours);
    }
    assert_eq!(MissedTickBehavior::default(), MissedTickBehavior::Burst);
}
