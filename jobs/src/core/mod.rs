//! The core: the values of a queue and the pure rules over them. No I/O, no store, no clock
//! read here (time is handed in), with one exception: [`wakeup`], the in-process signal a
//! backend gives idle consumers, which must sit below the backends. Nothing in this folder
//! imports from the layers above it (`backend`, the backends, `queue`, `console`).
//!
//! - [`error`]: the one error type, opaque with `is_*` queries.
//! - [`job`]: what a caller sees of a job ([`When`](job::When), [`JobInfo`](job::JobInfo),
//!   [`JobState`](job::JobState), [`Counts`](job::Counts)), the limits, time conversion.
//! - [`kind`]: kinds and per-job options ([`JobOptions`](kind::JobOptions)), resolved into
//!   the [`Spec`](kind::Spec) a job is stored with.
//! - [`state`]: the state machine of one stored job, the one every backend applies.
//! - [`recurrence`] and [`series`]: when a recurring series' occurrences fall, and what a
//!   store does when one falls due.
//! - [`list`]: listing options, pages and cursors.
//! - [`config`]: the checked configuration a builder produces.
//! - [`wakeup`]: how a change in this process wakes its idle consumers.

pub(crate) mod config;
pub(crate) mod error;
pub(crate) mod job;
pub(crate) mod kind;
pub(crate) mod list;
pub(crate) mod recurrence;
pub(crate) mod series;
pub(crate) mod state;
pub(crate) mod wakeup;
