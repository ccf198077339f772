//! A `hyper::rt::Timer` on the wheel (cargo feature `hyper`).
//!
//! hyper 1.x takes its timer from the builder (`http1::Builder::timer`,
//! `http2::Builder::timer`, hyper-util's `auto::Builder`); it is what times
//! `header_read_timeout`, HTTP/2 keep-alive pings and the client pool's idle connections.
//! [`WheelTimer`] hands hyper wheel [`Sleep`](crate::Sleep)s: a server with a million
//! connections reading their heads holds a million 40-byte wheel entries. hyper 1.x (1.12)
//! drops the HTTP/1 header sleep once a request head is read and asks for a new one for the
//! next head, so each request costs one wheel insert and one removal (no boxing beyond
//! hyper's own `Pin<Box<dyn Sleep>>`); the HTTP/2 keep-alive pinger `reset`s its sleep, which
//! [`WheelTimer`] moves in place in O(1) without allocating.
//!
//! ```no_run
//! use hyper::server::conn::http1;
//! use std::time::Duration;
//! use wheel_timer::hyper::WheelTimer;
//!
//! let mut builder = http1::Builder::new();
//! builder
//!     .timer(WheelTimer::default())
//!     .header_read_timeout(Duration::from_secs(5));
//! // builder.serve_connection(io, service) for each accepted connection.
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant as StdInstant};

use tokio::time::Instant;

use crate::timer::Timer;

/// A [`hyper::rt::Timer`] whose sleeps are wheel [`Sleep`](crate::Sleep)s.
///
/// `WheelTimer::default()` uses the default timer of the runtime each sleep is created on
/// (it needs no runtime to be created); [`WheelTimer::new`] a [`Timer`] of your own.
/// [`now`](hyper::rt::Timer::now) is tokio's clock, so a paused runtime drives hyper's
/// timeouts as it drives the wheel.
///
/// # Panics
///
/// hyper's sleeps are wheel sleeps, so after [`Timer::shutdown`] of the timer given to
/// [`WheelTimer::new`] the next poll of one still waiting panics, as a [`Sleep`]'s does
/// (hyper's `Sleep` has no error to return, and completing it would fire the timeout early):
/// stop serving connections before shutting that timer down. The default timer cannot be
/// shut down.
///
/// [`Sleep`]: crate::Sleep
#[derive(Clone, Default)]
pub struct WheelTimer {
    timer: Option<Timer>,
}

impl WheelTimer {
    /// hyper's sleeps on `timer`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), wheel_timer::Error> {
    /// let timer = wheel_timer::Timer::builder().tick(Duration::from_millis(10)).build()?;
    /// let mut builder = hyper::server::conn::http1::Builder::new();
    /// builder.timer(wheel_timer::hyper::WheelTimer::new(&timer));
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(timer: &Timer) -> Self {
        WheelTimer {
            timer: Some(timer.clone()),
        }
    }
}

impl hyper::rt::Timer for WheelTimer {
    /// # Panics
    ///
    /// For `WheelTimer::default()`, outside a tokio runtime context.
    #[track_caller]
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        // `Duration::MAX` saturates where the wheel does.
        let sleep = match &self.timer {
            Some(timer) => timer.sleep(duration),
            None => crate::sleep_wheel(duration),
        };
        Box::pin(HyperSleep(sleep))
    }

    /// # Panics
    ///
    /// For `WheelTimer::default()`, outside a tokio runtime context.
    #[track_caller]
    fn sleep_until(&self, deadline: StdInstant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        let deadline = Instant::from_std(deadline);
        let sleep = match &self.timer {
            Some(timer) => timer.sleep_until(deadline),
            None => crate::sleep_wheel_until(deadline),
        };
        Box::pin(HyperSleep(sleep))
    }

    fn now(&self) -> StdInstant {
        Instant::now().into_std()
    }

    /// Moves a sleep this timer made in place (O(1), no allocation); any other sleep is
    /// replaced.
    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: StdInstant) {
        match sleep.as_mut().downcast_mut_pin::<HyperSleep>() {
            Some(ours) => ours
                .get_mut()
                .0
                .reset_inner(Instant::from_std(new_deadline)),
            None => *sleep = self.sleep_until(new_deadline),
        }
    }
}

impl fmt::Debug for WheelTimer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WheelTimer")
            .field("timer", &self.timer.as_ref().map_or("default", |_| "own"))
            .finish()
    }
}

/// A wheel sleep as hyper sees it (a type of our own, so `reset` can find it again).
#[derive(Debug)]
struct HyperSleep(crate::sleep::Sleep);

impl Future for HyperSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl hyper::rt::Sleep for HyperSleep {}
