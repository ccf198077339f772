//! `Timer` lifecycle: configuration errors, runtimes, the default timer, driver exit.

use std::pin::pin;
use std::time::Duration;

use tokio::time::Instant;
use wheel_timer::{sleep_wheel, timeout_wheel, Timer};

use crate::support::{ms, poll_noop};

#[test]
#[should_panic(expected = "wheel-timer: Timer::new() must be called from inside a tokio runtime")]
fn timer_new_outside_a_runtime_panics() {
    let _ = Timer::new();
}

#[test]
#[should_panic(expected = "wheel-timer: the free functions")]
fn sleep_wheel_outside_a_runtime_panics() {
    drop(sleep_wheel(ms(1)));
}

#[test]
fn build_outside_a_runtime_is_an_error() {
    let err = Timer::builder().build().unwrap_err();
    assert!(err.is_no_runtime());
    assert!(!err.is_invalid_config());
}

/// A runtime without its time driver used to give a timer whose driver task panicked
/// unseen: every callback was lost and every sleep blamed a shut-down runtime.
#[test]
fn a_runtime_without_time_is_refused_at_build() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let _enter = rt.enter();
    let err = Timer::builder().build().unwrap_err();
    assert!(err.is_no_runtime());
    assert!(err.to_string().contains("enable_time"), "{err}");
    let panic = std::panic::catch_unwind(Timer::new).unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(message.contains("enable_time"), "{message}");
    let panic = std::panic::catch_unwind(|| drop(sleep_wheel(ms(1)))).unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(message.contains("enable_time"), "{message}");
}

#[tokio::test]
#[allow(clippy::type_complexity)]
async fn invalid_configurations_are_rejected() {
    let cases: [(&str, Box<dyn Fn(&mut wheel_timer::Builder)>); 7] = [
        (
            "zero tick",
            Box::new(|b| {
                b.tick(Duration::ZERO);
            }),
        ),
        (
            "sub-µs tick",
            Box::new(|b| {
                b.tick(Duration::from_nanos(999));
            }),
        ),
        (
            "huge tick",
            Box::new(|b| {
                b.tick(Duration::MAX);
            }),
        ),
        (
            "zero slots",
            Box::new(|b| {
                b.slots(0);
            }),
        ),
        (
            "too many slots",
            Box::new(|b| {
                b.slots((1 << 20) + 1);
            }),
        ),
        (
            "zero shards",
            Box::new(|b| {
                b.shards(0);
            }),
        ),
        (
            "too many shards",
            Box::new(|b| {
                b.shards(1025);
            }),
        ),
    ];
    for (what, configure) in cases {
        let mut builder = Timer::builder();
        configure(&mut builder);
        let err = builder.build().expect_err(what);
        assert!(err.is_invalid_config(), "{what}: {err}");
        assert!(
            err.to_string().starts_with("invalid timer configuration"),
            "{what}: {err}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn slots_round_up_to_a_power_of_two_and_still_work() {
    for slots in [1, 3, 100, 1 << 12] {
        let timer = Timer::builder().slots(slots).shards(3).build().unwrap();
        let start = Instant::now();
        timer.sleep(ms(150)).await;
        assert!(start.elapsed() >= ms(150) && start.elapsed() <= ms(151));
    }
}

#[tokio::test(start_paused = true)]
async fn coarse_tick_rounds_up_to_whole_ticks() {
    let timer = Timer::builder().tick(ms(10)).build().unwrap();
    assert_eq!(timer.tick_duration(), ms(10));
    let start = Instant::now();
    timer.sleep(ms(11)).await;
    let elapsed = start.elapsed();
    assert!(elapsed >= ms(11) && elapsed <= ms(21), "{elapsed:?}");
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn driver_exits_when_last_handle_and_sleeps_are_gone() {
    let before = alive_tasks();
    let timer = Timer::new();
    settle().await;
    assert_eq!(alive_tasks(), before + 1, "the driver task runs");
    let mut sleep = Box::pin(timer.sleep(ms(50)));
    assert!(poll_noop(sleep.as_mut()).is_pending());
    drop(timer);
    settle().await;
    assert_eq!(alive_tasks(), before + 1, "a live sleep keeps the driver");
    sleep.as_mut().await;
    drop(sleep);
    settle().await;
    assert_eq!(alive_tasks(), before, "no leaked driver task");
}

#[tokio::test(start_paused = true)]
async fn unpolled_sleep_keeps_the_driver_and_still_works() {
    let before = alive_tasks();
    let timer = Timer::new();
    let sleep = timer.sleep(ms(5));
    drop(timer);
    settle().await;
    assert_eq!(alive_tasks(), before + 1);
    sleep.await;
    settle().await;
    assert_eq!(alive_tasks(), before);
}

#[test]
fn default_timer_works_in_successive_and_parallel_runtimes() {
    for round in 0..3 {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            sleep_wheel(ms(2)).await;
            assert_eq!(timeout_wheel(ms(50), async { round }).await, Ok(round));
        });
        drop(rt);
    }
    let threads: Vec<_> = (0..3)
        .map(|_| {
            std::thread::spawn(|| {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let tasks: Vec<_> = (0..8)
                        .map(|i| tokio::spawn(async move { sleep_wheel(ms(1 + i)).await }))
                        .collect();
                    for t in tasks {
                        t.await.unwrap();
                    }
                });
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn each_runtime_gets_its_own_default_timer() {
    let a = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let b = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let in_a = a.block_on(async { wheel_timer::default_timer() });
    let in_b = b.block_on(async { wheel_timer::default_timer() });
    let again_a = a.block_on(async { wheel_timer::default_timer() });
    let mut sa = pin!(in_a.sleep(Duration::from_secs(60)));
    a.block_on(async { assert!(poll_noop(sa.as_mut()).is_pending()) });
    assert_eq!(in_a.pending(), 1);
    assert_eq!(again_a.pending(), 1, "same runtime, same default timer");
    assert_eq!(in_b.pending(), 0, "another runtime, another timer");
}

#[test]
fn sleep_after_its_runtime_dropped_panics_with_a_message() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    #[allow(clippy::async_yields_async)]
    let mut sleep = Box::pin(rt.block_on(async { sleep_wheel(Duration::from_secs(60)) }));
    rt.block_on(async { assert!(poll_noop(sleep.as_mut()).is_pending()) });
    drop(rt);
    let other = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        other.block_on(async { poll_noop(sleep.as_mut()) })
    }))
    .unwrap_err();
    let msg = err.downcast_ref::<&str>().copied().unwrap_or_default();
    assert!(msg.starts_with("wheel-timer:"), "{msg}");
    assert!(msg.contains("runtime shut down"), "{msg}");
}

#[test]
fn timer_handles_are_send_sync_and_cheap() {
    fn assert_send_sync<T: Send + Sync + Clone + std::fmt::Debug>() {}
    assert_send_sync::<Timer>();
    fn assert_send<T: Send + Sync + std::fmt::Debug>() {}
    assert_send::<wheel_timer::Sleep>();
    assert_send::<wheel_timer::Error>();
    assert_send::<wheel_timer::Elapsed>();
}

/// The runtime's default timer serves every library's free functions: shutting it down is
/// refused with a panic, and their sleeps keep working.
#[tokio::test(start_paused = true)]
async fn the_default_timer_refuses_shutdown() {
    let refused = std::panic::catch_unwind(|| wheel_timer::default_timer().shutdown());
    let message = refused.expect_err("shutdown of the default timer was accepted");
    let message = message
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| message.downcast_ref::<&str>().copied())
        .unwrap_or_default();
    assert!(
        message.contains("default timer cannot be shut down"),
        "{message}"
    );
    wheel_timer::sleep_wheel(std::time::Duration::from_millis(5)).await;
    let own = wheel_timer::Timer::new();
    assert!(
        own.shutdown().is_empty(),
        "a timer of one's own still shuts down"
    );
}

/// Two runtimes used in turn on one thread: each task's free functions use its own
/// runtime's default timer, including the repeated calls that skip the runtime lookup (a
/// timer of the other runtime would never be driven here, and the sleeps would hang).
#[test]
fn alternating_runtimes_on_one_thread_each_use_their_own_default_timer() {
    let build = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("runtime")
    };
    let (a, b) = (build(), build());
    for _ in 0..3 {
        for rt in [&a, &b] {
            let pending = rt.block_on(async {
                tokio::spawn(async {
                    for _ in 0..3 {
                        wheel_timer::sleep_wheel(std::time::Duration::from_millis(1)).await;
                    }
                    wheel_timer::default_timer().pending()
                })
                .await
                .expect("task")
            });
            assert_eq!(pending, 0);
        }
    }
}
