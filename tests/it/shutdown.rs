//! `Timer::shutdown` (Netty's `stop()`) and the driver's lifetime with callback tasks.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep, Instant};
use wheel_timer::Timer;

use crate::support::{ms, poll_noop, WakeCounter};

async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

#[tokio::test(start_paused = true)]
async fn stop_without_pending_tasks_returns_nothing() {
    let timer = Timer::new();
    let runs = Arc::new(AtomicUsize::new(0));
    for _ in 0..3 {
        let runs = runs.clone();
        let _ = timer
            .schedule(ms(1), move || {
                runs.fetch_add(1, SeqCst);
            })
            .unwrap();
    }
    sleep(ms(5)).await;
    assert_eq!(runs.load(SeqCst), 3);
    assert!(timer.shutdown().is_empty());
}

#[tokio::test(start_paused = true)]
async fn stop_cancels_and_returns_the_pending_tasks() {
    let timer = Timer::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicUsize::new(0));
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }
    let mut handles = Vec::new();
    for _ in 0..5 {
        let (runs, guard) = (runs.clone(), Counted(dropped.clone()));
        handles.push(
            timer
                .schedule(Duration::from_secs(5), move || {
                    let _guard = guard;
                    runs.fetch_add(1, SeqCst);
                })
                .unwrap(),
        );
    }
    let series = timer.schedule_repeating(ms(300), || {}).unwrap();
    sleep(Duration::from_secs(1)).await;
    let stopped = timer.shutdown();
    assert_eq!(stopped.len(), 6);
    assert!(stopped.iter().all(|task| task.is_cancelled()));
    assert!(handles
        .iter()
        .all(|task| task.is_cancelled() && !task.cancel()));
    assert!(series.is_cancelled());
    assert_eq!(
        dropped.load(SeqCst),
        5,
        "the callbacks were dropped, not run"
    );
    assert_eq!(timer.pending(), 0);
    assert_eq!(timer.stats().cancelled, 6);
    sleep(Duration::from_secs(10)).await;
    assert_eq!(runs.load(SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn schedule_after_stop_fails_and_a_second_stop_is_harmless() {
    let timer = Timer::new();
    let _ = timer.schedule(Duration::from_secs(1), || {}).unwrap();
    assert_eq!(timer.shutdown().len(), 1);
    assert!(timer.shutdown().is_empty());
    assert!(timer.schedule(ms(1), || {}).unwrap_err().is_shutdown());
    assert!(timer
        .schedule_at(Instant::now(), || {})
        .unwrap_err()
        .is_shutdown());
    assert!(timer
        .schedule_async(ms(1), async {})
        .unwrap_err()
        .is_shutdown());
    assert!(timer
        .schedule_repeating(ms(1), || {})
        .unwrap_err()
        .is_shutdown());
    assert!(timer.try_sleep(ms(1)).unwrap_err().is_shutdown());
    assert!(timer.try_sleep(Duration::ZERO).unwrap_err().is_shutdown());
    let clone = timer.clone();
    assert!(clone.schedule(ms(1), || {}).unwrap_err().is_shutdown());
}

#[tokio::test(start_paused = true)]
async fn a_waiting_sleep_is_woken_by_stop_and_its_next_poll_panics() {
    let timer = Timer::new();
    let wakes = WakeCounter::new();
    let mut sleep = pin!(timer.sleep(Duration::from_secs(60)));
    assert!(wakes.poll(sleep.as_mut()).is_pending());
    timer.shutdown();
    assert_eq!(wakes.count(), 1, "never left hanging");
    let panic = catch_unwind(AssertUnwindSafe(|| poll_noop(sleep.as_mut()))).unwrap_err();
    let message = panic.downcast_ref::<&str>().copied().unwrap_or_default();
    assert_eq!(
        message,
        "wheel-timer: a Sleep was polled after its timer was shut down"
    );
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "wheel-timer: a Sleep was polled after its timer was shut down")]
async fn a_timeout_polled_after_stop_panics() {
    let timer = Timer::new();
    timer.shutdown();
    let _ = timer
        .timeout(Duration::from_secs(1), std::future::pending::<()>())
        .await;
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "wheel-timer: a Sleep was polled after its timer was shut down")]
async fn an_interval_ticking_after_stop_panics() {
    let timer = Timer::new();
    let mut interval = timer.interval(ms(10));
    interval.tick().await;
    timer.shutdown();
    interval.tick().await;
}

#[tokio::test(start_paused = true)]
async fn stop_ends_the_driver_task() {
    let before = alive_tasks();
    let timer = Timer::new();
    let _ = timer.schedule(Duration::from_secs(60), || {}).unwrap();
    settle().await;
    assert_eq!(alive_tasks(), before + 1);
    timer.shutdown();
    settle().await;
    assert_eq!(alive_tasks(), before, "the driver exited");
}

#[tokio::test(start_paused = true)]
async fn a_pending_task_keeps_the_driver_alive_after_every_handle_is_dropped() {
    let before = alive_tasks();
    let timer = Timer::new();
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let _ = timer
        .schedule(ms(100), move || flag.store(true, SeqCst))
        .unwrap();
    drop(timer);
    settle().await;
    assert_eq!(alive_tasks(), before + 1, "the driver waits for the task");
    sleep(ms(150)).await;
    assert!(ran.load(SeqCst));
    settle().await;
    assert_eq!(alive_tasks(), before, "and exits once it has fired");
}

#[tokio::test(start_paused = true)]
async fn cancelling_the_last_task_of_a_dropped_timer_ends_the_driver() {
    let before = alive_tasks();
    let timer = Timer::new();
    let task = timer.schedule(Duration::from_secs(3600), || {}).unwrap();
    let series = timer.schedule_repeating(ms(10), || {}).unwrap();
    drop(timer);
    sleep(ms(55)).await;
    assert_eq!(alive_tasks(), before + 1);
    assert!(task.cancel());
    settle().await;
    assert_eq!(alive_tasks(), before + 1, "the series still runs");
    assert!(series.cancel());
    settle().await;
    assert_eq!(alive_tasks(), before, "nothing left: the driver exited");
}

#[test]
fn dropping_the_runtime_cancels_pending_tasks() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let (timer, task) = rt.block_on(async {
        let timer = Timer::new();
        let task = timer.schedule(Duration::from_secs(60), || {}).unwrap();
        settle().await;
        (timer, task)
    });
    drop(rt);
    assert!(task.is_cancelled());
    assert_eq!(timer.pending(), 0);
    assert!(timer.schedule(ms(1), || {}).unwrap_err().is_shutdown());
    assert!(timer.shutdown().is_empty());
}

/// A sleep the driver fired before the shutdown stays elapsed and completes.
#[tokio::test(start_paused = true)]
async fn a_fired_sleep_stays_elapsed_after_shutdown() {
    let timer = Timer::new();
    let mut sleep = std::pin::pin!(timer.sleep(Duration::from_millis(5)));
    assert!(poll_noop(sleep.as_mut()).is_pending());
    tokio::time::advance(Duration::from_millis(5)).await;
    settle().await;
    assert!(sleep.is_elapsed(), "fired by the driver, not yet polled");
    timer.shutdown();
    assert!(sleep.is_elapsed(), "still elapsed after the shutdown");
    assert!(poll_noop(sleep.as_mut()).is_ready());
}
