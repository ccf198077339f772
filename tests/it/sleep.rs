//! `Sleep` semantics, mirroring tokio's `time_sleep.rs` behaviours on the wheel.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use tokio::time::{advance, Instant};
use wheel_timer::{sleep_wheel, sleep_wheel_until, Sleep, Timer};

use crate::support::{ms, poll_noop, WakeCounter};

#[track_caller]
fn assert_elapsed(start: Instant, expected: Duration) {
    let elapsed = start.elapsed();
    assert!(
        elapsed >= expected,
        "fired early: {elapsed:?} < {expected:?}"
    );
    assert!(
        elapsed <= expected + ms(1),
        "fired late: {elapsed:?} > {expected:?} + 1 tick"
    );
}

#[test]
fn sleep_fits_in_40_bytes() {
    assert!(
        std::mem::size_of::<Sleep>() <= 40,
        "{}",
        std::mem::size_of::<Sleep>()
    );
}

#[tokio::test(start_paused = true)]
async fn immediate_sleep() {
    let now = Instant::now();
    let mut sleep = pin!(sleep_wheel_until(now));
    assert!(
        !sleep.is_elapsed(),
        "not elapsed before the first poll (as tokio)"
    );
    sleep.as_mut().await;
    assert_elapsed(now, Duration::ZERO);
    assert!(sleep.is_elapsed());
}

#[tokio::test(start_paused = true)]
async fn is_elapsed_after_pending_poll_and_await() {
    let mut sleep = pin!(sleep_wheel(ms(10)));
    assert!(poll_noop(sleep.as_mut()).is_pending());
    assert!(!sleep.is_elapsed());
    sleep.as_mut().await;
    assert!(sleep.is_elapsed());
}

#[tokio::test(start_paused = true)]
async fn delayed_sleeps_elapse_exactly_across_level_boundaries() {
    // Level 0 holds 1024 ticks; level 1 buckets are 1024 ticks wide, level 2 65 536.
    for delay in [
        1, 10, 60, 63, 64, 65, 1023, 1024, 1025, 2047, 65_535, 65_536, 65_537, 3_600_000,
    ] {
        let start = Instant::now();
        sleep_wheel(ms(delay)).await;
        assert_elapsed(start, ms(delay));
    }
}

#[tokio::test(start_paused = true)]
async fn sub_tick_delays_round_up() {
    for _ in 0..5 {
        let start = Instant::now();
        let deadline = start + ms(1) + Duration::from_nanos(1);
        sleep_wheel_until(deadline).await;
        let elapsed = start.elapsed();
        assert!(elapsed >= ms(1) + Duration::from_nanos(1), "{elapsed:?}");
        assert!(elapsed <= ms(2) + Duration::from_nanos(1), "{elapsed:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn wrapping_level_zero() {
    sleep_wheel(ms(5)).await;
    let start = Instant::now();
    sleep_wheel(ms(1020)).await;
    assert_elapsed(start, ms(1020));
}

#[tokio::test(start_paused = true)]
async fn zero_and_past_deadlines_are_ready_on_first_poll() {
    assert!(poll_noop(pin!(sleep_wheel(Duration::ZERO))).is_ready());
    assert!(poll_noop(pin!(sleep_wheel_until(Instant::now()))).is_ready());
    assert!(poll_noop(pin!(sleep_wheel_until(Instant::now() - ms(1000)))).is_ready());
}

#[tokio::test(start_paused = true)]
async fn never_completes_before_its_deadline() {
    let timer = Timer::new();
    let start = Instant::now();
    let mut sleep = pin!(timer.sleep(ms(300)));
    assert!(poll_noop(sleep.as_mut()).is_pending());
    for _ in 0..299 {
        advance(ms(1)).await;
        assert!(
            poll_noop(sleep.as_mut()).is_pending(),
            "early at {:?}",
            start.elapsed()
        );
    }
    sleep.await;
    assert_elapsed(start, ms(300));
}

#[tokio::test(start_paused = true)]
async fn reset_future_sleep_before_fire() {
    let start = Instant::now();
    let mut sleep = pin!(sleep_wheel(ms(100)));
    assert!(poll_noop(sleep.as_mut()).is_pending());
    sleep.as_mut().reset(start + ms(200));
    sleep.await;
    assert_elapsed(start, ms(200));
}

#[tokio::test(start_paused = true)]
async fn reset_past_sleep_before_turn() {
    let start = Instant::now();
    let mut sleep = pin!(sleep_wheel(ms(100)));
    assert!(poll_noop(sleep.as_mut()).is_pending());
    sleep.as_mut().reset(start + ms(80));
    sleep.await;
    assert_elapsed(start, ms(80));
}

#[tokio::test(start_paused = true)]
async fn reset_past_sleep_before_fire() {
    let start = Instant::now();
    let mut sleep = pin!(sleep_wheel(ms(100)));
    assert!(poll_noop(sleep.as_mut()).is_pending());
    sleep_wheel(ms(10)).await;
    sleep.as_mut().reset(start + ms(80));
    sleep.await;
    assert_elapsed(start, ms(80));
}

#[tokio::test(start_paused = true)]
async fn reset_future_sleep_after_fire() {
    let start = Instant::now();
    let mut sleep = pin!(sleep_wheel(ms(100)));
    sleep.as_mut().await;
    assert_elapsed(start, ms(100));
    sleep.as_mut().reset(start + ms(110));
    sleep.await;
    assert_elapsed(start, ms(110));
}

#[tokio::test(start_paused = true)]
async fn reset_sleep_to_past_is_ready_next_poll() {
    let start = Instant::now();
    let counter = WakeCounter::new();
    let mut sleep = pin!(sleep_wheel(ms(100)));
    assert!(counter.poll(sleep.as_mut()).is_pending());
    sleep_wheel(ms(50)).await;
    assert_eq!(counter.count(), 0);
    sleep.as_mut().reset(start + ms(40));
    assert!(counter.poll(sleep.as_mut()).is_ready());
}

#[tokio::test(start_paused = true)]
async fn reset_after_firing_then_pending() {
    let mut sleep = pin!(sleep_wheel(ms(1)));
    sleep.as_mut().await;
    assert!(
        poll_noop(sleep.as_mut()).is_ready(),
        "another poll after completion is ready"
    );
    let deadline = Instant::now() + Duration::from_secs(600);
    sleep.as_mut().reset(deadline);
    assert_eq!(sleep.deadline(), deadline);
    assert!(!sleep.is_elapsed());
    assert!(poll_noop(sleep.as_mut()).is_pending());
    assert!(poll_noop(sleep.as_mut()).is_pending());
}

#[tokio::test(start_paused = true)]
async fn reset_keeps_the_registered_waker() {
    let start = Instant::now();
    let counter = WakeCounter::new();
    let mut sleep = pin!(sleep_wheel(ms(100)));
    assert!(counter.poll(sleep.as_mut()).is_pending());
    // Earlier and later resets without polling in between: the stored waker fires.
    sleep.as_mut().reset(start + ms(30));
    sleep.as_mut().reset(start + ms(60));
    advance(ms(59)).await;
    assert_eq!(counter.count(), 0);
    advance(ms(1)).await;
    tokio::task::yield_now().await;
    assert_eq!(counter.count(), 1);
    assert!(counter.poll(sleep.as_mut()).is_ready());
}

#[tokio::test(start_paused = true)]
async fn deadline_reports_what_was_asked() {
    let deadline = Instant::now() + ms(1234);
    assert_eq!(sleep_wheel_until(deadline).deadline(), deadline);
    let sleep = sleep_wheel(ms(7));
    assert_eq!(sleep.deadline(), Instant::now() + ms(7));
}

#[tokio::test(start_paused = true)]
async fn long_sleeps() {
    let deadline = Instant::now() + Duration::from_secs(10 * 365 * 86_400);
    sleep_wheel_until(deadline).await;
    assert!(Instant::now() >= deadline);
    assert!(Instant::now() <= deadline + ms(1));
}

#[tokio::test(start_paused = true)]
async fn multi_long_sleeps() {
    for _ in 0..5 {
        sleep_wheel(Duration::from_secs(365 * 86_400)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10 * 365 * 86_400);
    sleep_wheel_until(deadline).await;
    assert!(Instant::now() >= deadline);
}

#[tokio::test(start_paused = true)]
async fn max_duration_saturates_and_never_fires_early() {
    let start = Instant::now();
    let mut sleep = pin!(sleep_wheel(Duration::MAX));
    assert!(sleep.deadline() > start + Duration::from_secs(100 * 365 * 86_400));
    assert!(poll_noop(sleep.as_mut()).is_pending());
    advance(Duration::from_secs(50 * 365 * 86_400)).await;
    assert!(poll_noop(sleep.as_mut()).is_pending());
    // Near-MAX durations and far-future instants saturate the same way, without panicking.
    let mut near_max = pin!(sleep_wheel(Duration::MAX - ms(1)));
    assert!(poll_noop(near_max.as_mut()).is_pending());
    let mut huge = pin!(sleep_wheel(Duration::from_secs(u64::MAX / 10)));
    let mut tiny = pin!(sleep_wheel(Duration::from_nanos(1)));
    assert!(poll_noop(huge.as_mut()).is_pending());
    tiny.as_mut().await;
    assert!(poll_noop(huge.as_mut()).is_pending());
}

#[tokio::test(start_paused = true)]
async fn drop_after_reschedule_at_new_scheduled_time() {
    let start = Instant::now();
    let mut a = pin!(sleep_wheel(ms(5)));
    // Boxed so that `drop(b)` drops the sleep itself, not a pinned reference to it.
    let mut b = Box::pin(sleep_wheel(ms(5)));
    let mut c = pin!(sleep_wheel(ms(10)));
    assert!(poll_noop(a.as_mut()).is_pending());
    assert!(poll_noop(b.as_mut()).is_pending());
    assert!(poll_noop(c.as_mut()).is_pending());
    b.as_mut().reset(start + ms(10));
    a.await;
    let timer = wheel_timer::default_timer();
    assert_eq!(timer.pending(), 2, "b (rescheduled) and c");
    drop(b);
    assert_eq!(timer.pending(), 1);
    c.await;
    assert_elapsed(start, ms(10));
}

#[tokio::test(start_paused = true)]
async fn polled_in_one_task_dropped_in_another() {
    let timer = Timer::new();
    let mut sleep = Box::pin(timer.sleep(ms(100)));
    assert!(poll_noop(sleep.as_mut()).is_pending());
    assert_eq!(timer.pending(), 1);
    tokio::spawn(async move { drop(sleep) }).await.unwrap();
    assert_eq!(timer.pending(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polled_on_one_thread_completed_on_another() {
    let timer = Timer::new();
    let mut sleep = Box::pin(timer.sleep(ms(20)));
    assert!(poll_noop(sleep.as_mut()).is_pending());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(sleep);
    })
    .join()
    .unwrap();
    assert_eq!(timer.pending(), 0);
}

/// A waker whose `wake` drops every sleep of the set: firing must not hold a shard lock
/// while waking (tokio's `drop_from_wake`).
#[tokio::test(start_paused = true)]
async fn drop_from_wake() {
    struct DropAll(Mutex<Vec<Pin<Box<Sleep>>>>, AtomicUsize);
    impl Wake for DropAll {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.1.fetch_add(1, Ordering::SeqCst);
            self.0.lock().unwrap().clear();
        }
    }
    let timer = Timer::builder().shards(1).build().unwrap();
    let state = Arc::new(DropAll(Mutex::new(Vec::new()), AtomicUsize::new(0)));
    let waker = Waker::from(state.clone());
    let mut cx = Context::from_waker(&waker);
    for _ in 0..100 {
        let mut sleep = Box::pin(timer.sleep(ms(10)));
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        state.0.lock().unwrap().push(sleep);
    }
    assert_eq!(timer.pending(), 100);
    advance(ms(20)).await;
    tokio::task::yield_now().await;
    assert!(state.1.load(Ordering::SeqCst) >= 1);
    assert!(state.0.lock().unwrap().is_empty());
    assert_eq!(timer.pending(), 0);
}

/// Real clock: on a paused clock a self-waking task keeps the runtime busy, so tokio never
/// auto-advances time.
#[tokio::test]
async fn starving_future_still_lets_the_sleep_fire() {
    struct Starve<F>(F, u32);
    impl<F: Future<Output = ()> + Unpin> Future for Starve<F> {
        type Output = u32;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
            if Pin::new(&mut self.0).poll(cx).is_ready() {
                return Poll::Ready(self.1);
            }
            self.1 += 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
    let polls = Starve(Box::pin(sleep_wheel(ms(5))), 0).await;
    assert!(polls > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_thousand_concurrent_sleeps_complete() {
    let timer = Timer::new();
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..100_000u64 {
        let timer = timer.clone();
        set.spawn(async move {
            let delay = ms(1 + i % 50);
            let begun = Instant::now();
            timer.sleep(delay).await;
            begun.elapsed() >= delay
        });
    }
    let mut done = 0;
    while let Some(on_time) = set.join_next().await {
        assert!(on_time.unwrap(), "a sleep completed before its deadline");
        done += 1;
    }
    assert_eq!(done, 100_000);
    assert_eq!(timer.pending(), 0);
    assert!(start.elapsed() < Duration::from_secs(60));
}

#[tokio::test(start_paused = true)]
async fn pending_counts_registered_sleeps_exactly() {
    let timer = Timer::new();
    let mut sleeps: Vec<_> = (1..=10)
        .map(|i| Box::pin(timer.sleep(ms(i * 10))))
        .collect();
    assert_eq!(timer.pending(), 0, "unpolled sleeps are not registered");
    for s in &mut sleeps {
        assert!(poll_noop(s.as_mut()).is_pending());
    }
    assert_eq!(timer.pending(), 10);
    sleeps.truncate(7);
    assert_eq!(timer.pending(), 7);
    advance(ms(35)).await;
    tokio::task::yield_now().await;
    assert_eq!(timer.pending(), 4, "three fired");
}

// ===== tokio's paused-clock patterns, unchanged =====

/// tokio's `advance_once_with_timer` (`tests/time_pause.rs`): `advance` alone, with no extra
/// yield, drives the wheel to the new time.
#[tokio::test(start_paused = true)]
async fn advance_once_with_timer() {
    let counter = WakeCounter::new();
    let mut sleep = pin!(sleep_wheel(ms(1)));
    assert!(counter.poll(sleep.as_mut()).is_pending());
    advance(Duration::from_micros(250)).await;
    assert!(counter.poll(sleep.as_mut()).is_pending());
    advance(Duration::from_micros(1500)).await;
    assert_eq!(counter.count(), 1, "woken by the advance itself");
    assert!(counter.poll(sleep.as_mut()).is_ready());
}

/// tokio's `advance_multi_with_timer`.
#[tokio::test(start_paused = true)]
async fn advance_multi_with_timer() {
    let counter = WakeCounter::new();
    let mut sleep = pin!(sleep_wheel(ms(1)));
    assert!(counter.poll(sleep.as_mut()).is_pending());
    for _ in 0..3 {
        advance(Duration::from_micros(250)).await;
        assert!(counter.poll(sleep.as_mut()).is_pending());
    }
    advance(Duration::from_micros(250)).await;
    assert_eq!(counter.count(), 1);
    assert!(counter.poll(sleep.as_mut()).is_ready());
}

/// The same on a timer of one's own, polled first only after the advance.
#[tokio::test(start_paused = true)]
async fn a_first_poll_after_advance_past_the_deadline_is_ready() {
    let timer = Timer::new();
    let mut sleep = pin!(timer.sleep(ms(5)));
    advance(ms(5)).await;
    assert!(poll_noop(sleep.as_mut()).is_ready());
}

/// tokio's `exactly_max` and `no_out_of_bounds_close_to_max`: on a paused clock these
/// complete through auto-advance instead of hanging.
#[tokio::test(start_paused = true)]
async fn duration_max_completes_through_auto_advance() {
    sleep_wheel(Duration::MAX).await;
    sleep_wheel(Duration::MAX - ms(1)).await;
    Timer::new().sleep(Duration::MAX).await;
}

/// tokio's `sub_ms_delayed_sleep` (`tests/time_sleep.rs`): the clock is paused after the
/// runtime started, so the timer's start lies off tokio's 1 ms grid; the wheel still fires
/// when tokio would (its tick boundaries are put on tokio's grid), not a millisecond later.
#[tokio::test]
async fn sub_ms_delayed_sleep_after_a_pause() {
    tokio::time::pause();
    for _ in 0..5 {
        let now = Instant::now();
        let deadline = now + ms(1) + Duration::new(0, 1);
        sleep_wheel_until(deadline).await;
        assert_elapsed(now, ms(1) + Duration::new(0, 1));
    }
}
