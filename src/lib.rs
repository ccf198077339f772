//! A Tokio-integrated hierarchical hashed timing wheel.
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations)]

mod callback;
mod default;
mod driver;
mod error;
mod interval;
mod loom;
mod sleep;
mod stats;
mod timeout;
mod timer;
mod wheel;

pub use callback::TimerTask;
pub use default::{default_timer, sleep_wheel, sleep_wheel_until, timeout_wheel, timeout_wheel_at};
pub use error::{Elapsed, Error};
pub use interval::{interval_wheel, interval_wheel_at, Interval, MissedTickBehavior};
pub use sleep::Sleep;
pub use stats::Stats;
pub use timeout::Timeout;
pub use timer::{Builder, Timer};
