//! Timers started on a paused clock. Wherever the paused clock stands against tokio's 1 ms
//! timer grid, a new timer finds the grid at once (its probe narrows down, with tokio sleeps
//! in the past, the last grid point tokio processed) and its sleeps complete in the same
//! park as tokio's own.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use tokio::time::{advance, Instant};
use wheel_timer::Timer;

use crate::support::ms;

/// When the sweep counts as hung. It takes well under a second; a probe that never
/// settles spins on the runtime's thread, where no tokio timeout can end it, so only
/// another thread can turn that hang into a failure.
const HUNG: Duration = Duration::from_secs(60);

/// Every offset from 1 ns to 1 µs past a grid point, each with a fresh timer: the timer
/// settles, and its 1 ms sleep completes at the instant tokio's does.
///
/// The paused-clock probe once spun forever at about one offset in sixty (16 ns out of
/// every 976, and 1–34 ns): a narrowing round spaced its 33 sleeps `width / 32` apart,
/// rounded down, so they could all lie at or before the grid point; a round in which all
/// fire means that the clock moved, so the probe started over, from the same clock, forever.
/// tokio's own `time_sleep` tests hit it in about one run in four, each test's runtime a
/// fresh default timer at a random offset. Any 1 µs of consecutive offsets holds such a
/// window, wherever the grid lies.
#[test]
fn a_timer_settles_at_every_offset_from_tokios_grid() {
    let (done, finished) = mpsc::channel();
    let sweep = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a paused runtime");
        rt.block_on(sweep());
        let _ = done.send(());
    });
    match finished.recv_timeout(HUNG) {
        Ok(()) | Err(RecvTimeoutError::Disconnected) => {
            if let Err(panic) = sweep.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(RecvTimeoutError::Timeout) => {
            panic!("a timer built on a paused clock never settled: its grid probe spins")
        }
    }
}

async fn sweep() {
    // A tokio sleep completes at a grid point, so each offset below is counted from one.
    tokio::time::sleep(ms(1)).await;
    for offset in 1..=1_000 {
        advance(Duration::from_nanos(offset)).await;
        let timer = Timer::new();
        let wheel = timer.sleep(ms(1));
        let tokio = tokio::time::sleep(ms(1));
        let (wheel_done, tokio_done) = tokio::join!(
            async {
                wheel.await;
                Instant::now()
            },
            async {
                tokio.await;
                Instant::now()
            }
        );
        assert_eq!(
            wheel_done, tokio_done,
            "{offset} ns past a grid point: the wheel's 1 ms sleep and tokio's completed apart"
        );
    }
}
