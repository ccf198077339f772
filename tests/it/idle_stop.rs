//! Regression tests for the idle tracker: waiters that outlive their futures, and
//! a tracker or idle stream whose timer was shut down. Paused clock throughout.

use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{sleep, timeout};
use wheel_timer::{IdleStream, IdleTracker, Timer};

use crate::support::{ms, poll_noop, WakeCounter};

/// A waker that does nothing, so that `Arc::strong_count` counts the clones others keep.
struct Tally;

impl Wake for Tally {
    fn wake(self: Arc<Self>) {}
}

/// Whether `err` is the error of a stream whose timer was shut down.
fn is_shutdown(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::Other
        && err
            .get_ref()
            .and_then(|e| e.downcast_ref::<wheel_timer::Error>())
            .is_some_and(wheel_timer::Error::is_shutdown)
}

/// Every `Idle` future polled once and dropped used to leave its waker in the
/// handle until the key ended. Now the tracker keeps no waker of a dropped future.
#[tokio::test(start_paused = true)]
async fn dropped_idle_futures_leave_no_waker_behind() {
    let timer = Timer::new();
    let (tracker, _expirations) = IdleTracker::new(&timer, Duration::from_secs(60));
    let handle = tracker.register(1u32);
    for i in 0..20_000 {
        let tally = Arc::new(Tally);
        let waker = Waker::from(tally.clone());
        {
            let mut idle = pin!(handle.idle());
            assert!(idle
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending());
            assert_eq!(Arc::strong_count(&tally), 3, "stored once while pending");
        }
        drop(waker);
        assert_eq!(
            Arc::strong_count(&tally),
            1,
            "future {i}: the tracker kept the waker of a dropped Idle"
        );
    }
    assert!(!handle.is_expired());
}

/// A re-poll with another waker replaces the one stored before, and the last one
/// is the one woken at expiry.
#[tokio::test(start_paused = true)]
async fn a_repoll_replaces_the_stored_waker() {
    let timer = Timer::new();
    let (tracker, _expirations) = IdleTracker::new(&timer, ms(100));
    let handle = tracker.register(7u8);
    let first = Arc::new(Tally);
    let last = WakeCounter::new();
    let mut idle = pin!(handle.idle());
    let waker = Waker::from(first.clone());
    assert!(idle
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    drop(waker);
    assert_eq!(Arc::strong_count(&first), 2);
    assert!(idle
        .as_mut()
        .poll(&mut Context::from_waker(&last.waker()))
        .is_pending());
    assert_eq!(
        Arc::strong_count(&first),
        1,
        "the first waker was not replaced"
    );
    sleep(ms(150)).await;
    assert_eq!(last.count(), 1, "the last waker is woken at expiry");
    assert!(poll_noop(idle.as_mut()).is_ready());
}

/// Shut down while its driver is parked (nothing tracked), a tracker used to keep
/// its stream open forever.
#[tokio::test(start_paused = true)]
async fn shutdown_while_parked_ends_the_stream() {
    let timer = Timer::new();
    let (tracker, mut expirations) = IdleTracker::new(&timer, ms(10));
    tracker.touch(0u32);
    assert_eq!(expirations.next_batch().await, Some(vec![0]));
    sleep(ms(50)).await;
    timer.shutdown();
    let end = timeout(Duration::from_secs(5), expirations.next_batch()).await;
    assert_eq!(end, Ok(None), "the stream stays open after shutdown");
    assert!(tracker.is_stopped());
}

/// After shutdown, keyed touches used to track keys that could never expire.
#[tokio::test(start_paused = true)]
async fn a_stopped_tracker_tracks_nothing() {
    let timer = Timer::new();
    let (tracker, mut expirations) = IdleTracker::new(&timer, Duration::from_secs(1));
    for key in 0..100u32 {
        tracker.touch(key);
    }
    let handle = tracker.register(1_000);
    assert_eq!(tracker.len(), 101);
    timer.shutdown();
    assert_eq!(
        expirations.next_batch().await,
        None,
        "keys left are not reported"
    );
    assert_eq!(tracker.len(), 0, "keys left at shutdown are dropped");
    assert!(!handle.is_expired());
    handle.idle().await;
    for key in 0..10_000u32 {
        tracker.touch(key);
    }
    let late = tracker.register(20_000);
    late.idle().await;
    assert!(!late.is_expired());
    sleep(Duration::from_secs(10)).await;
    assert_eq!(tracker.len(), 0);
    assert!(!tracker.contains(&5));
    assert_eq!(tracker.deadline(&5), None);
}

/// After shutdown a tracked stream never timed out while a standalone one
/// panicked. Both now fail their I/O, pending or later, with the shutdown error.
#[tokio::test(start_paused = true)]
async fn streams_fail_with_a_shutdown_error_once_their_timer_stops() {
    let timer = Timer::new();
    let (tracker, _expirations) = IdleTracker::new(&timer, Duration::from_secs(30));
    let (tracked_near, mut tracked_far) = tokio::io::duplex(64);
    let (alone_near, mut alone_far) = tokio::io::duplex(64);
    let mut tracked = tracker.wrap(1u32, tracked_near);
    let mut alone = IdleStream::new(alone_near, &timer, Duration::from_secs(30));
    tracked_far.write_all(b"a").await.expect("write");
    alone_far.write_all(b"a").await.expect("write");
    assert_eq!(tracked.read_u8().await.expect("live"), b'a');
    assert_eq!(alone.read_u8().await.expect("live"), b'a');
    let pending = tokio::spawn(async move {
        let tracked = tracked.read_u8().await.map(drop);
        (tracked, tracked_far)
    });
    let pending_alone = tokio::spawn(async move {
        let alone = alone.read_u8().await.map(drop);
        (alone, alone_far)
    });
    sleep(ms(10)).await;
    timer.shutdown();
    // Bounded waits: the defect was a read pending forever.
    let (tracked, _far) = timeout(Duration::from_secs(60), pending)
        .await
        .expect("a pending tracked read ends")
        .expect("no panic");
    let (alone, _far) = timeout(Duration::from_secs(60), pending_alone)
        .await
        .expect("a pending standalone read ends")
        .expect("no panic");
    let tracked = tracked.expect_err("a pending read fails");
    let alone = alone.expect_err("a pending read fails");
    assert!(is_shutdown(&tracked), "{tracked:?}");
    assert!(is_shutdown(&alone), "{alone:?}");

    // Streams made after the shutdown fail at once, reads and writes alike.
    let mut later = tracker.wrap(2u32, tokio::io::duplex(64).0);
    let mut later_alone = IdleStream::new(tokio::io::duplex(64).0, &timer, ms(10));
    assert!(is_shutdown(&later.read_u8().await.expect_err("stopped")));
    assert!(is_shutdown(&later.write_u8(1).await.expect_err("stopped")));
    assert!(is_shutdown(
        &later_alone.write_u8(1).await.expect_err("stopped")
    ));
    assert!(is_shutdown(
        &later_alone.read_u8().await.expect_err("stopped")
    ));
}

/// A tracker whose runtime ended before its driver task ever ran used to stay running for
/// ever: its stream and `idle()` hung and its keys were tracked with nothing to expire them.
#[test]
fn a_tracker_whose_driver_never_ran_stops_with_its_runtime() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let (timer, tracker, mut expirations) = rt.block_on(async {
        let timer = Timer::new();
        let (tracker, expirations) = IdleTracker::new(&timer, ms(10));
        (timer, tracker, expirations)
    });
    // Drops both driver tasks before either was polled.
    drop(rt);
    assert!(timer.schedule(ms(1), || {}).unwrap_err().is_shutdown());
    assert!(tracker.is_stopped());
    tracker.touch(1u32);
    let handle = tracker.register(2u32);
    assert_eq!(tracker.len(), 0);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let hour = Duration::from_secs(3600);
        let batch = timeout(hour, expirations.next_batch()).await;
        assert!(batch.expect("the stream ended").is_none());
        timeout(hour, handle.idle())
            .await
            .expect("idle() completed");
    });
}
