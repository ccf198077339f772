//! `Timer::stats` and the driver's tracing.

use std::pin::pin;
use std::time::Duration;

use tokio::time::sleep;
use wheel_timer::{Stats, Timer};

#[test]
fn stats_are_debug_clone_default() {
    let stats = Stats::default();
    assert_eq!(stats.clone(), stats);
    assert!(format!("{stats:?}").contains("max_lateness_ticks"));
}

use crate::support::{ms, poll_noop, Events};

async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn counts_schedules_fires_cancels_and_panics() {
    let timer = Timer::new();
    let fresh = timer.stats();
    assert_eq!(
        (
            fresh.pending,
            fresh.scheduled,
            fresh.fired,
            fresh.cancelled,
            fresh.panicked
        ),
        (0, 0, 0, 0, 0)
    );
    assert_eq!(fresh.max_lateness_ticks, 0);
    let keep = timer.schedule(Duration::from_secs(60), || {}).unwrap();
    let cancel = timer.schedule(Duration::from_secs(60), || {}).unwrap();
    let _ = timer.schedule(ms(5), || {}).unwrap();
    let _ = timer.schedule(ms(5), || panic!("counted")).unwrap();
    let mut dropped = pin!(timer.sleep(Duration::from_secs(60)));
    assert!(poll_noop(dropped.as_mut()).is_pending());
    assert!(cancel.cancel());
    sleep(ms(10)).await;
    settle().await;
    let stats = timer.stats();
    assert_eq!(stats.pending, 2, "one task, one sleep");
    assert_eq!(stats.scheduled, 4 + 1, "four tasks, one sleep");
    assert_eq!(stats.fired, 2);
    assert_eq!(stats.cancelled, 1);
    assert_eq!(stats.panicked, 1);
    assert!(stats.driver_wakeups >= 1);
    assert_eq!(
        stats.max_lateness_ticks, 0,
        "the paused clock is never late"
    );
    keep.cancel();
    assert_eq!(timer.stats().pending, 1);
}

#[tokio::test(start_paused = true)]
async fn tasks_add_up() {
    let timer = Timer::new();
    let mut tasks = Vec::new();
    for i in 0..50u64 {
        tasks.push(timer.schedule(ms(i % 7), || {}).unwrap());
    }
    let series = timer.schedule_repeating(ms(3), || {}).unwrap();
    for task in tasks.iter().step_by(3) {
        task.cancel();
    }
    sleep(ms(20)).await;
    let stats = timer.stats();
    assert_eq!(
        stats.scheduled,
        stats.fired + stats.cancelled + stats.pending as u64
    );
    assert!(series.cancel());
    let stats = timer.stats();
    assert_eq!(stats.scheduled, stats.fired + stats.cancelled);
}

/// A repeating series ended by a panicking run used to leave its last re-arm counted as
/// scheduled but neither fired nor cancelled.
#[tokio::test(start_paused = true)]
async fn a_series_ended_by_a_panic_still_adds_up() {
    let timer = Timer::builder().executor(|job| job()).build().unwrap();
    let series = timer
        .schedule_repeating(ms(10), || panic!("a failing series"))
        .unwrap();
    sleep(ms(50)).await;
    settle().await;
    assert!(series.is_expired());
    let stats = timer.stats();
    assert_eq!(stats.panicked, 1);
    assert_eq!(stats.pending, 0);
    assert_eq!(stats.scheduled, stats.fired + stats.cancelled);
}

/// Callbacks cut short by their runtime's shutdown used to vanish without a trace.
#[test]
fn a_runtime_dropped_with_callbacks_pending_warns() {
    let warnings = Events::at(tracing::Level::WARN);
    let _guard = tracing::subscriber::set_default(warnings.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let task = rt.block_on(async {
        let timer = Timer::new();
        drop(timer.schedule(ms(60_000), || {}).unwrap());
        timer.schedule(ms(60_000), || {}).unwrap()
    });
    drop(rt);
    assert!(task.is_cancelled());
    let warnings = warnings.messages();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("cancelled=2"), "{warnings:?}");
}

#[tokio::test(start_paused = true)]
async fn an_idle_timer_does_not_wake_its_driver() {
    let timer = Timer::new();
    timer.sleep(ms(5)).await;
    settle().await;
    let before = timer.stats().driver_wakeups;
    tokio::time::advance(Duration::from_secs(3600)).await;
    settle().await;
    assert_eq!(timer.stats().driver_wakeups, before, "parked while idle");
    timer.sleep(ms(5)).await;
    assert!(timer.stats().driver_wakeups > before);
}

#[tokio::test(start_paused = true)]
async fn lateness_is_measured_in_ticks() {
    let timer = Timer::builder().tick(ms(10)).build().unwrap();
    let mut sleep = pin!(timer.sleep(ms(10)));
    assert!(poll_noop(sleep.as_mut()).is_pending());
    settle().await;
    // The clock jumps 50 ms at once: the driver fires the sleep 4 ticks after its tick.
    tokio::time::advance(ms(50)).await;
    settle().await;
    assert!(poll_noop(sleep.as_mut()).is_ready());
    assert_eq!(timer.stats().max_lateness_ticks, 4);
}

#[tokio::test(start_paused = true)]
async fn driver_turns_emit_debug_events() {
    let events = Events::at(tracing::Level::DEBUG);
    let _guard = tracing::subscriber::set_default(events.clone());
    let timer = Timer::new();
    let _ = timer.schedule(ms(3), || {}).unwrap();
    let _ = timer.schedule(ms(3), || {}).unwrap();
    timer.sleep(ms(3)).await;
    settle().await;
    let events = events.messages();
    assert!(
        events.iter().any(|e| e.contains("driver turn fired")
            && e.contains("sleeps=1")
            && e.contains("tasks=2")),
        "{events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_healthy_timer_logs_no_warnings() {
    let warnings = Events::at(tracing::Level::WARN);
    let _guard = tracing::subscriber::set_default(warnings.clone());
    let timer = Timer::new();
    for i in 0..100 {
        let task = timer.schedule(ms(i % 10), || {}).unwrap();
        if i % 2 == 0 {
            task.cancel();
        }
    }
    timer.sleep(ms(20)).await;
    timer.shutdown();
    assert_eq!(warnings.messages(), Vec::<String>::new());
}
