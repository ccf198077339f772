//! Public-API tests, one module per feature (one binary: faster to build and run).

mod callback;
mod idle;
mod idle_config;
mod idle_modes;
mod idle_stop;
mod idle_tcp;
mod interval;
mod shutdown;
mod sleep;
mod stats;
mod support;
mod timeout;
mod timer;
