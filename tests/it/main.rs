//! Public-API tests, one module per feature (one binary: faster to build and run).

mod callback;
mod coop;
mod delay_queue;
#[cfg(feature = "hyper")]
mod hyper;
mod idle;
mod idle_config;
mod idle_modes;
mod idle_stop;
mod idle_tcp;
mod interval;
mod paused_clock;
mod runtime_shutdown;
mod shutdown;
mod sleep;
mod stash;
mod stats;
mod support;
mod time;
mod timeout;
mod timer;
#[cfg(feature = "tower")]
mod tower;
