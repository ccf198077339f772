//! tokio's cooperative budget: wheel futures that are always ready still yield to the
//! scheduler once the task's budget is spent, as tokio's own timers do.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use wheel_timer::time::{interval, sleep, timeout, MissedTickBehavior};

/// Far more ready polls than tokio's budget (128) allows between two yields: reaching it
/// means the loop never yielded. A count, not a time: it only turns starvation into a failure.
const STARVED: usize = 100_000;

/// Spawns a task beside the caller and returns the flag it sets when it runs.
fn neighbour() -> Arc<AtomicBool> {
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    tokio::spawn(async move { flag.store(true, Ordering::SeqCst) });
    ran
}

#[tokio::test(flavor = "current_thread")]
async fn zero_sleeps_do_not_starve_a_spawned_task() {
    let ran = neighbour();
    let mut loops = 0;
    while !ran.load(Ordering::SeqCst) {
        sleep(Duration::ZERO).await;
        loops += 1;
        assert!(loops < STARVED, "the spawned task never ran");
    }
    assert!(loops > 0, "the first sleeps were ready without yielding");
}

#[tokio::test(flavor = "current_thread")]
async fn ready_timeouts_do_not_starve_a_spawned_task() {
    let ran = neighbour();
    let mut loops = 0;
    while !ran.load(Ordering::SeqCst) {
        // The inner future is ready at once; the timeout's own sleep spends the budget.
        let _ = timeout(Duration::from_secs(1), sleep(Duration::ZERO)).await;
        loops += 1;
        assert!(loops < STARVED, "the spawned task never ran");
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_burst_of_missed_ticks_does_not_starve_a_spawned_task() {
    let mut every = interval(Duration::from_millis(1));
    every.set_missed_tick_behavior(MissedTickBehavior::Burst);
    every.tick().await;
    // Every tick of the next hour is now due at once.
    tokio::time::advance(Duration::from_secs(3600)).await;
    let ran = neighbour();
    let mut ticks = 0;
    while !ran.load(Ordering::SeqCst) {
        every.tick().await;
        ticks += 1;
        assert!(ticks < STARVED, "the spawned task never ran");
    }
}

// Real clock: a paused one never auto-advances, since this task is always ready to run.
#[tokio::test(flavor = "current_thread")]
async fn a_timeout_still_fires_when_its_future_spends_the_budget() {
    let start = Instant::now();
    // A future that is never done and spends the whole budget on ready wheel sleeps each
    // time it is polled (it yields only because the budget runs out).
    let busy = async {
        loop {
            sleep(Duration::ZERO).await;
        }
    };
    let result = timeout(Duration::from_millis(10), busy).await;
    assert!(result.is_err(), "the deadline is checked unbudgeted");
    assert!(start.elapsed() >= Duration::from_millis(10));
}
