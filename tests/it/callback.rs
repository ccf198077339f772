//! Callback tasks: Netty's HashedWheelTimerTest behaviours, ported, plus what Netty gets
//! wrong (blocking callbacks, cancel/fire races, repeating tasks).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{sleep, Instant};
use wheel_timer::{Timer, TimerTask};

use crate::support::{ms, Events};

/// Lets the driver task (and the callback tasks it spawns) run.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

/// A callback that counts its runs.
fn counted() -> (Arc<AtomicUsize>, impl Fn() + Send + Sync + Clone + 'static) {
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    (runs, move || {
        counter.fetch_add(1, SeqCst);
    })
}

/// Sets its flag when dropped: shows a callback was released without running.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn does_not_run_before_its_delay() {
    let timer = Timer::new();
    let (runs, run) = counted();
    let task = timer.schedule(Duration::from_secs(10), run).unwrap();
    sleep(Duration::from_secs(3)).await;
    assert_eq!(runs.load(SeqCst), 0);
    assert!(!task.is_expired());
    sleep(Duration::from_millis(6_998)).await;
    assert_eq!(runs.load(SeqCst), 0, "never early, not even by a tick");
    assert_eq!(timer.pending(), 1);
}

#[tokio::test(start_paused = true)]
async fn runs_after_its_delay() {
    let timer = Timer::new();
    let start = Instant::now();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let task = timer
        .schedule(Duration::from_secs(2), move || {
            tx.send(Instant::now()).unwrap()
        })
        .unwrap();
    let ran_at = rx.recv().await.unwrap();
    let delay = ran_at - start;
    assert!(delay >= Duration::from_secs(2), "{delay:?}");
    assert!(delay <= Duration::from_secs(2) + ms(1), "{delay:?}");
    assert!(task.is_expired() && !task.is_cancelled());
    assert!(!task.cancel(), "too late to cancel");
    assert_eq!(timer.pending(), 0);
}

#[tokio::test(start_paused = true)]
async fn schedule_at_zero_delay_and_past_deadlines_run_at_the_next_turn() {
    let timer = Timer::new();
    let start = Instant::now();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let at = start + ms(250);
    let send = |name: &'static str| {
        let tx = tx.clone();
        move || tx.send((name, Instant::now())).unwrap()
    };
    let task = timer.schedule_at(at, send("at")).unwrap();
    assert_eq!(task.deadline(), at);
    let _ = timer.schedule(Duration::ZERO, send("zero")).unwrap();
    let _ = timer
        .schedule_at(start - Duration::from_secs(1), send("past"))
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(rx.recv().await.unwrap());
    }
    got.sort_by_key(|(name, _)| *name);
    assert_eq!(got[0], ("at", at));
    assert_eq!(got[1].0, "past");
    assert_eq!(got[2].0, "zero");
    assert!(
        got[1].1 <= start + ms(1) && got[2].1 <= start + ms(1),
        "{got:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn async_task_runs_on_the_runtime() {
    let timer = Timer::new();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let start = Instant::now();
    let task = timer
        .schedule_async(ms(30), async move {
            sleep(ms(5)).await;
            tx.send(Instant::now()).unwrap();
        })
        .unwrap();
    assert_eq!(rx.await.unwrap() - start, ms(35));
    assert!(task.is_expired());
}

#[tokio::test(start_paused = true)]
async fn dropping_the_handle_does_not_cancel() {
    let timer = Timer::new();
    let (runs, run) = counted();
    drop(timer.schedule(ms(10), run).unwrap());
    sleep(ms(20)).await;
    assert_eq!(runs.load(SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn cancel_wins_once_frees_the_slot_and_drops_the_callback_at_once() {
    let timer = Timer::new();
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = DropFlag(dropped.clone());
    let task = timer
        .schedule(Duration::from_secs(60), move || drop(flag))
        .unwrap();
    let clone = task.clone();
    assert_eq!(timer.pending(), 1);
    assert!(clone.cancel());
    assert!(!task.cancel());
    assert!(task.is_cancelled() && !task.is_expired());
    assert_eq!(
        timer.pending(),
        0,
        "no waiting for the bucket to come round"
    );
    assert!(
        dropped.load(SeqCst),
        "the callback is released by the cancel"
    );
    assert!(format!("{task:?}").contains("cancelled"), "{task:?}");
}

#[tokio::test(start_paused = true)]
async fn task_rearming_itself_past_the_wheel_length() {
    // Netty's testTimerOverflowWheelLength: each run is 10 ticks out on a 4-slot wheel.
    let timer = Timer::builder().tick(ms(10)).slots(4).build().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let (tx, mut rx) = mpsc::unbounded_channel();

    fn arm(timer: &Timer, runs: Arc<AtomicUsize>, tx: mpsc::UnboundedSender<TimerTask>) {
        let (again, sender) = (timer.clone(), tx.clone());
        let task = timer
            .schedule(ms(100), move || {
                runs.fetch_add(1, SeqCst);
                arm(&again, runs, sender);
            })
            .unwrap();
        let _ = tx.send(task);
    }

    let start = Instant::now();
    arm(&timer, runs.clone(), tx);
    sleep(ms(350)).await;
    assert_eq!(runs.load(SeqCst), 3);
    let stopped = timer.shutdown();
    assert_eq!(stopped.len(), 1, "the fourth arming was pending");
    assert!(stopped[0].is_cancelled());
    assert_eq!(stopped[0].deadline(), start + ms(400));
    let mut handles = Vec::new();
    while let Ok(task) = rx.try_recv() {
        handles.push(task);
    }
    assert_eq!(handles.len(), 4);
    assert!(handles[..3].iter().all(TimerTask::is_expired));
    assert!(handles[3].is_cancelled());
    sleep(Duration::from_secs(1)).await;
    assert_eq!(runs.load(SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn hundred_thousand_tasks_fire_no_earlier_than_their_delay_and_within_a_bound() {
    // Netty's testExecutionOnTime: tick 200 ms, delay 125 ms, bound 2 × (tick + delay).
    const N: usize = 100_000;
    let timer = Timer::builder().tick(ms(200)).build().unwrap();
    let delay = ms(125);
    let start = Instant::now();
    let min = Arc::new(AtomicU64::new(u64::MAX));
    let max = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let all_done = Arc::new(tokio::sync::Notify::new());
    for _ in 0..N {
        let (min, max, done, all_done) = (min.clone(), max.clone(), done.clone(), all_done.clone());
        let _ = timer
            .schedule(delay, move || {
                let took = (Instant::now() - start).as_nanos() as u64;
                min.fetch_min(took, SeqCst);
                max.fetch_max(took, SeqCst);
                if done.fetch_add(1, SeqCst) + 1 == N {
                    all_done.notify_one();
                }
            })
            .unwrap();
    }
    assert_eq!(timer.pending(), N);
    all_done.notified().await;
    let (min, max) = (
        Duration::from_nanos(min.load(SeqCst)),
        Duration::from_nanos(max.load(SeqCst)),
    );
    assert!(min >= delay, "fired early: {min:?}");
    assert!(max < 2 * (ms(200) + delay), "fired late: {max:?}");
    assert_eq!(timer.pending(), 0);
    assert_eq!(timer.stats().fired, N as u64);
}

#[tokio::test(start_paused = true)]
async fn custom_executor_runs_the_callbacks() {
    // Netty's testExecutionOnTaskExecutor.
    let handed = Arc::new(AtomicUsize::new(0));
    let counter = handed.clone();
    let timer = Timer::builder()
        .slots(32)
        .max_pending(2)
        .executor(move |job| {
            counter.fetch_add(1, SeqCst);
            std::thread::Builder::new()
                .name("custom-executor".into())
                .spawn(job)
                .unwrap();
        })
        .build()
        .unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let _ = timer
        .schedule(ms(10), move || {
            tx.send(std::thread::current().name().map(str::to_owned))
                .unwrap()
        })
        .unwrap();
    let thread = rx.await.unwrap();
    assert_eq!(thread.as_deref(), Some("custom-executor"));
    assert_eq!(handed.load(SeqCst), 1);
}

/// An executor that drops some jobs unrun (back-pressure, a closed queue) must not kill a
/// repeating series: the dropped run is lost, the series goes on at the next period.
#[tokio::test(start_paused = true)]
async fn a_series_survives_an_executor_that_drops_a_run() {
    let handed = Arc::new(AtomicUsize::new(0));
    let counter = handed.clone();
    let timer = Timer::builder()
        .executor(move |job| {
            // Drop the first two runs, run the rest inline.
            if counter.fetch_add(1, SeqCst) >= 2 {
                job();
            }
        })
        .build()
        .unwrap();
    let (runs, callback) = counted();
    let series = timer.schedule_repeating(ms(10), callback).unwrap();
    sleep(ms(55)).await;
    settle().await;
    assert!(
        handed.load(SeqCst) >= 5,
        "{} runs handed over",
        handed.load(SeqCst)
    );
    assert_eq!(
        runs.load(SeqCst),
        handed.load(SeqCst) - 2,
        "every run after the dropped ones ran"
    );
    assert!(series.cancel());
    assert_eq!(timer.pending(), 0);
}

#[tokio::test(start_paused = true)]
async fn rejects_at_max_pending_back_to_back() {
    let timer = Timer::builder().max_pending(2).build().unwrap();
    let (runs, run) = counted();
    let _ = timer.schedule(Duration::from_secs(5), run.clone()).unwrap();
    let _ = timer.schedule(Duration::from_secs(5), run.clone()).unwrap();
    let err = timer
        .schedule(Duration::from_secs(5), run.clone())
        .unwrap_err();
    assert!(err.is_at_capacity(), "{err}");
    assert!(timer
        .schedule_async(ms(1), async {})
        .unwrap_err()
        .is_at_capacity());
    assert!(timer
        .schedule_repeating(ms(1), run)
        .unwrap_err()
        .is_at_capacity());
    assert!(timer.try_sleep(ms(1)).unwrap_err().is_at_capacity());
    assert_eq!(timer.pending(), 2);
    assert_eq!(runs.load(SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn capacity_is_freed_by_cancel() {
    let timer = Timer::builder()
        .tick(ms(25))
        .slots(4)
        .max_pending(2)
        .build()
        .unwrap();
    let (runs, run) = counted();
    let first = timer.schedule(Duration::from_secs(5), run.clone()).unwrap();
    let _ = timer.schedule(Duration::from_secs(5), run.clone()).unwrap();
    assert!(first.cancel());
    // Freed at once: no need to wait for the driver (Netty needed a few ticks).
    let _ = timer.schedule(ms(90), run).unwrap();
    sleep(ms(110)).await;
    assert_eq!(runs.load(SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn capacity_is_freed_by_fire() {
    let timer = Timer::builder()
        .tick(ms(25))
        .slots(4)
        .max_pending(2)
        .build()
        .unwrap();
    let (runs, run) = counted();
    let _ = timer.schedule(ms(90), run.clone()).unwrap();
    let _ = timer.schedule(Duration::from_secs(5), run.clone()).unwrap();
    assert!(timer.schedule(ms(90), run.clone()).is_err());
    sleep(ms(110)).await;
    assert_eq!(runs.load(SeqCst), 1);
    let _ = timer.schedule(ms(90), run).unwrap();
    sleep(ms(110)).await;
    assert_eq!(runs.load(SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn capacity_counts_sleeps_and_try_sleep_is_refused() {
    let timer = Timer::builder().max_pending(2).build().unwrap();
    let registered = timer.try_sleep(Duration::from_secs(1)).unwrap();
    assert_eq!(timer.pending(), 1, "try_sleep registers at once");
    // The infallible constructor is counted once polled, never refused.
    let mut polled = Box::pin(timer.sleep(Duration::from_secs(1)));
    assert!(crate::support::poll_noop(polled.as_mut()).is_pending());
    let mut over = Box::pin(timer.sleep(Duration::from_secs(1)));
    assert!(crate::support::poll_noop(over.as_mut()).is_pending());
    assert_eq!(timer.pending(), 3);
    assert!(timer.try_sleep(ms(1)).unwrap_err().is_at_capacity());
    assert!(timer.schedule(ms(1), || {}).unwrap_err().is_at_capacity());
    drop((polled, over));
    // Zero and past sleeps hold no entry, so they are never refused.
    timer.try_sleep(Duration::ZERO).unwrap().await;
    // A registered sleep frees its slot when it completes.
    registered.await;
    timer.try_sleep(ms(5)).unwrap().await;
    timer.try_sleep(ms(5)).unwrap().await;
    assert_eq!(timer.pending(), 0);
}

#[tokio::test(start_paused = true)]
async fn pending_is_exact_after_cancels_and_fires() {
    // Netty's reportPendingTimeouts, on a paused clock so the last count cannot race.
    let timer = Timer::new();
    let (runs, run) = counted();
    let a = timer
        .schedule(Duration::from_secs(10), run.clone())
        .unwrap();
    let b = timer
        .schedule(Duration::from_secs(10), run.clone())
        .unwrap();
    let _ = timer.schedule(ms(1), run).unwrap();
    assert_eq!(timer.pending(), 3);
    assert!(a.cancel() && b.cancel());
    sleep(ms(5)).await;
    assert_eq!(runs.load(SeqCst), 1);
    assert_eq!(timer.pending(), 0);
    let stats = timer.stats();
    assert_eq!((stats.scheduled, stats.fired, stats.cancelled), (3, 1, 2));
}

#[tokio::test(start_paused = true)]
async fn duration_max_does_not_fire() {
    let timer = Timer::new();
    let (runs, run) = counted();
    let task = timer.schedule(Duration::MAX, run).unwrap();
    tokio::time::advance(Duration::from_secs(10 * 365 * 86_400)).await;
    settle().await;
    assert_eq!(runs.load(SeqCst), 0);
    assert_eq!(timer.pending(), 1);
    assert!(task.deadline() > Instant::now() + Duration::from_secs(100 * 365 * 86_400));
    assert!(task.cancel());
}

#[tokio::test(start_paused = true)]
async fn siblings_of_the_same_tick_cancelling_each_other_are_counted_once() {
    // Netty #14959: eleven timeouts due at the same tick; the first one's callback cancels
    // the other ten while they are being fired. Here every sibling was already handed to
    // the executor in the same driver turn, so every cancel loses and every callback runs.
    let timer = Timer::builder().max_pending(11).build().unwrap();
    let (runs, run) = counted();
    let siblings: Arc<Mutex<Vec<TimerTask>>> = Arc::default();
    let won = Arc::new(AtomicUsize::new(0));
    let (list, wins, first_run) = (siblings.clone(), won.clone(), run.clone());
    let _ = timer
        .schedule(ms(200), move || {
            first_run();
            for task in list.lock().unwrap().iter() {
                if task.cancel() {
                    wins.fetch_add(1, SeqCst);
                }
            }
        })
        .unwrap();
    for _ in 0..10 {
        let task = timer.schedule(ms(200), run.clone()).unwrap();
        siblings.lock().unwrap().push(task);
    }
    sleep(ms(250)).await;
    let won = won.load(SeqCst);
    assert_eq!(
        won, 0,
        "every sibling was fired in the same turn, before any cancel"
    );
    assert_eq!(runs.load(SeqCst), 11, "each task ran once");
    assert_eq!(timer.pending(), 0);
    let stats = timer.stats();
    assert_eq!(stats.fired + stats.cancelled, 11);
    assert_eq!(stats.cancelled, won as u64);
    for _ in 0..11 {
        let _ = timer.schedule(Duration::from_secs(1), || {}).unwrap();
    }
    assert!(timer.schedule(ms(1), || {}).unwrap_err().is_at_capacity());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancels_racing_fires_on_another_thread_are_each_counted_once() {
    // Real threads, real clock: cancels land before, during and after the driver's turn.
    const TASKS: usize = 300;
    const ROUNDS: usize = 10;
    let timer = Timer::builder().max_pending(TASKS).build().unwrap();
    let mut cancelled_total = 0;
    for round in 0..ROUNDS {
        let ran = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<TimerTask> = (0..TASKS)
            .map(|_| {
                let ran = ran.clone();
                timer
                    .schedule(ms(3), move || {
                        ran.fetch_add(1, SeqCst);
                    })
                    .unwrap()
            })
            .collect();
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_micros(2_500 + 100 * round as u64));
            tasks.iter().filter(|task| task.cancel()).count()
        });
        let cancelled = canceller.join().unwrap();
        cancelled_total += cancelled;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while ran.load(SeqCst) + cancelled < TASKS {
            assert!(std::time::Instant::now() < deadline, "a task was lost");
            sleep(ms(1)).await;
        }
        assert_eq!(ran.load(SeqCst) + cancelled, TASKS, "round {round}");
        assert_eq!(timer.pending(), 0);
    }
    let stats = timer.stats();
    assert_eq!(stats.scheduled, (TASKS * ROUNDS) as u64);
    assert_eq!(stats.cancelled, cancelled_total as u64);
    assert_eq!(stats.fired + stats.cancelled, stats.scheduled);
    let refill: Vec<TimerTask> = (0..TASKS)
        .map(|_| timer.schedule(Duration::from_secs(60), || {}).unwrap())
        .collect();
    assert!(
        timer.schedule(ms(1), || {}).unwrap_err().is_at_capacity(),
        "the capacity count is exact after the races"
    );
    assert!(refill.iter().all(TimerTask::cancel));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_callback_does_not_delay_other_timers() {
    // Real clock on purpose: the callback blocks its thread for 200 ms.
    let timer = Timer::new();
    let start = std::time::Instant::now();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let blocker = tx.clone();
    let _ = timer
        .schedule(ms(10), move || {
            std::thread::sleep(ms(200));
            blocker.send(("blocker", start.elapsed())).unwrap();
        })
        .unwrap();
    for delay in [20, 40, 60] {
        let tx = tx.clone();
        let _ = timer
            .schedule(ms(delay), move || {
                tx.send(("other", start.elapsed())).unwrap()
            })
            .unwrap();
    }
    drop(tx);
    let mut order = Vec::new();
    while let Some(event) = rx.recv().await {
        order.push(event);
    }
    assert_eq!(order.len(), 4);
    let names: Vec<_> = order.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, ["other", "other", "other", "blocker"], "{order:?}");
    for (_, at) in &order[..3] {
        // Due at 20-60 ms; stuck behind the blocker they would fire at 210 ms or later.
        assert!(*at < ms(200), "{order:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn panicking_callbacks_are_caught_counted_and_reported() {
    let warnings = Events::at(tracing::Level::WARN);
    let _guard = tracing::subscriber::set_default(warnings.clone());
    // Callbacks as tasks of this runtime, on this thread, where the subscriber is.
    let timer = Timer::builder()
        .executor(|job| drop(tokio::spawn(async move { job() })))
        .build()
        .unwrap();
    let (runs, run) = counted();
    let _ = timer
        .schedule(ms(1), || panic!("boom in a callback"))
        .unwrap();
    let _ = timer
        .schedule_async(ms(1), async {
            std::panic::panic_any("boom in an async task")
        })
        .unwrap();
    let series = timer
        .schedule_repeating(ms(1), || panic!("boom in a series"))
        .unwrap();
    let _ = timer.schedule(ms(2), run).unwrap();
    sleep(ms(10)).await;
    settle().await;
    assert_eq!(runs.load(SeqCst), 1, "the timer keeps working");
    assert_eq!(timer.stats().panicked, 3);
    assert!(series.is_expired(), "a panicking series ends");
    assert_eq!(timer.pending(), 0);
    let messages = warnings.messages();
    for boom in [
        "boom in a callback",
        "boom in an async task",
        "boom in a series",
    ] {
        assert!(
            messages
                .iter()
                .any(|m| m.contains(boom) && m.contains("panicked")),
            "{boom}: {messages:?}"
        );
    }
    let _ = timer.schedule(ms(1), || {}).unwrap();
}

#[tokio::test(start_paused = true)]
async fn repeating_task_runs_every_period_until_cancelled() {
    let timer = Timer::new();
    let start = Instant::now();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let series = timer
        .schedule_repeating(ms(100), move || tx.send(Instant::now()).unwrap())
        .unwrap();
    assert_eq!(series.deadline(), start + ms(100));
    for k in 1..=5u32 {
        assert_eq!(rx.recv().await.unwrap(), start + ms(100) * k);
    }
    assert_eq!(timer.pending(), 1, "a series is one pending timer");
    assert!(series.cancel());
    assert!(series.is_cancelled());
    sleep(Duration::from_secs(1)).await;
    assert!(rx.try_recv().is_err(), "no run after the cancel");
    assert_eq!(timer.pending(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_repeating_runs_never_overlap() {
    // Real clock: each run takes 25 ms of a 10 ms period.
    let timer = Timer::new();
    let running = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let (runs, count) = counted();
    let (r, o) = (running.clone(), overlaps.clone());
    let series = timer
        .schedule_repeating(ms(10), move || {
            if r.swap(true, SeqCst) {
                o.fetch_add(1, SeqCst);
            }
            count();
            std::thread::sleep(ms(25));
            r.store(false, SeqCst);
        })
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while runs.load(SeqCst) < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "the series stopped running"
        );
        sleep(ms(5)).await;
    }
    assert!(series.cancel());
    assert_eq!(overlaps.load(SeqCst), 0, "runs overlapped");
}

#[test]
#[should_panic(expected = "wheel-timer: schedule_repeating needs a non-zero period")]
fn zero_period_series_panics() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let _ = Timer::new().schedule_repeating(Duration::ZERO, || {});
    });
}

#[test]
fn task_handles_are_send_sync_clone_debug_unwind_safe() {
    use std::panic::{RefUnwindSafe, UnwindSafe};
    fn check<T: Send + Sync + Clone + std::fmt::Debug + UnwindSafe + RefUnwindSafe + 'static>() {}
    check::<TimerTask>();
    check::<wheel_timer::Stats>();
    check::<Timer>();
    check::<wheel_timer::Builder>();
    fn unwind_safe<T: UnwindSafe + RefUnwindSafe>() {}
    unwind_safe::<wheel_timer::Interval>();
}
