//! Public-API tests, one module per feature (one binary: faster to build and run).

mod idle;
mod idle_tcp;
mod sleep;
mod support;
mod timeout;
mod timer;
