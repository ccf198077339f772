//! Multi-thread runtimes shut down while hundreds of their tasks wait on the wheel: no
//! panic in any thread, as with tokio's own timers, and a new runtime sleeps normally after.
//!
//! In a multi-thread runtime's shutdown the timer's driver task can be dropped while another
//! worker still polls a task holding a sleep; that poll must stay pending (the task is
//! dropped with the runtime), not report the driver gone. Real clock: the race needs real
//! worker threads.
//!
//! Panics are counted by a process-wide hook that looks only at this module's runtime
//! threads (named [`THREAD_NAME`]); panics on other threads (other tests, some of which
//! expect a panic) go to the previous hook untouched.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex, Once};
use std::time::Duration;

use tokio::runtime::Runtime;
use tokio::time::Instant;
use wheel_timer::{default_timer, interval_wheel, sleep_wheel, timeout_wheel, IdleTracker};

use crate::support::ms;

/// The name of every thread of this module's runtimes.
const THREAD_NAME: &str = "wheel-shutdown-test";
/// Tasks per runtime.
const TASKS: usize = 200;
/// Runtimes built, loaded and shut down.
const ROUNDS: usize = 96;
/// Bound on a shutdown or a fresh runtime's sleep: hitting it means a hang, not slowness.
const HANG: Duration = Duration::from_secs(20);

static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Installs (once) the hook that records panics on this module's runtime threads.
fn count_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let ours = std::thread::current()
                .name()
                .is_some_and(|name| name == THREAD_NAME);
            if ours {
                PANICS
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(info.to_string());
            }
            previous(info);
        }));
    });
}

fn panics() -> Vec<String> {
    PANICS.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// A 4-worker runtime whose threads are named [`THREAD_NAME`] and counted in `threads`
/// while they live.
fn runtime(threads: &Arc<AtomicUsize>) -> Runtime {
    let (started, stopped) = (threads.clone(), threads.clone());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .thread_name(THREAD_NAME)
        .on_thread_start(move || {
            started.fetch_add(1, SeqCst);
        })
        .on_thread_stop(move || {
            stopped.fetch_sub(1, SeqCst);
        })
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Spawns [`TASKS`] tasks looping on wheel sleeps, timeouts, an interval each and idle
/// waits, counting their iterations in `progress`; returns once every task went round once.
async fn load(progress: &Arc<AtomicUsize>, tasks_started: &Arc<AtomicUsize>) {
    let (tracker, expirations) = IdleTracker::new(&default_timer(), ms(1));
    drop(expirations);
    for i in 0..TASKS {
        let progress = progress.clone();
        let started = tasks_started.clone();
        let tracker = tracker.clone();
        tokio::spawn(async move {
            let mut first = true;
            let tick = |first: &mut bool| {
                if std::mem::take(first) {
                    started.fetch_add(1, SeqCst);
                }
                progress.fetch_add(1, SeqCst);
            };
            match i % 4 {
                0 => loop {
                    sleep_wheel(Duration::from_micros(500)).await;
                    tick(&mut first);
                },
                1 => loop {
                    let timed_out = timeout_wheel(ms(1), std::future::pending::<()>()).await;
                    assert!(timed_out.is_err());
                    tick(&mut first);
                },
                2 => {
                    let mut interval = interval_wheel(ms(1));
                    loop {
                        interval.tick().await;
                        tick(&mut first);
                    }
                }
                _ => loop {
                    let handle = tracker.register(i);
                    handle.idle().await;
                    tick(&mut first);
                },
            }
        });
    }
    while tasks_started.load(SeqCst) < TASKS {
        tokio::time::sleep(ms(1)).await;
    }
}

/// Ends `rt` the way `round` picks, on a helper thread, failing if that hangs.
fn shut_down(rt: Runtime, round: usize) {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        match round % 3 {
            0 => drop(rt),
            1 => rt.shutdown_timeout(ms(round as u64 % 5)),
            _ => rt.shutdown_background(),
        }
        let _ = done.send(());
    });
    finished
        .recv_timeout(HANG)
        .unwrap_or_else(|_| panic!("round {round}: the runtime's shutdown hung"));
}

/// A fresh runtime's default timer sleeps, times out and ticks as usual.
fn sleeps_normally(round: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let task = tokio::spawn(async {
            let started = Instant::now();
            sleep_wheel(ms(3)).await;
            assert!(started.elapsed() >= ms(3), "a sleep completed early");
            let timed_out = timeout_wheel(ms(2), std::future::pending::<()>()).await;
            assert!(timed_out.is_err());
            let mut interval = interval_wheel(ms(1));
            interval.tick().await;
            interval.tick().await;
        });
        tokio::time::timeout(HANG, task)
            .await
            .unwrap_or_else(|_| panic!("round {round}: a new runtime's sleep hung"))
            .expect("the task completed");
    });
}

/// Dozens of busy 4-worker runtimes are dropped, `shutdown_timeout`ed and
/// `shutdown_background`ed: no thread of theirs panics, and after each a new runtime's
/// timers work.
#[test]
fn busy_runtimes_shut_down_without_a_panic() {
    count_panics();
    let threads = Arc::new(AtomicUsize::new(0));
    let mut iterations = 0;
    let mut rounds_panicked = 0;
    for round in 0..ROUNDS {
        let seen = panics().len();
        let rt = runtime(&threads);
        let progress = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(AtomicUsize::new(0));
        rt.block_on(load(&progress, &started));
        // Shut down mid-flight, at a different point of the tasks' loops each round.
        std::thread::sleep(Duration::from_micros(300 * (round as u64 % 7)));
        shut_down(rt, round);
        iterations += progress.load(SeqCst);
        if panics().len() > seen {
            rounds_panicked += 1;
        }
        sleeps_normally(round);
    }
    // `shutdown_background` returns before its workers stop: wait for every thread so that
    // their panics, if any, are counted.
    let waited = std::time::Instant::now();
    while threads.load(SeqCst) > 0 {
        assert!(waited.elapsed() < HANG, "runtime threads still running");
        std::thread::sleep(ms(5));
    }
    assert!(iterations >= ROUNDS * TASKS, "the tasks did not run");
    let panics = panics();
    assert!(
        panics.is_empty(),
        "{} panics, {rounds_panicked} of {ROUNDS} rounds panicking during their shutdown; the first: {}",
        panics.len(),
        panics[0]
    );
}
