//! The backend-neutral job state machine: pure code, no I/O, no tokio, time handed in.
//!
//! # Ground rules
//!
//! - Time is wall-clock nanoseconds since the Unix epoch (`u64`), read by the *backend* (the
//!   embedded store's process, the Redis server) and passed in. Nothing here reads a clock.
//! - A job is `Pending` (waiting for `run_at`), `Running` (delivered; owned by the holder of
//!   `token` until `until`) or `Dead` (out of attempts since `at`, kept for inspection until
//!   removed or revived).
//! - Every stored job that is not dead has exactly one key of due work, `(due, id)` where
//!   [`Machine::due`] is `run_at` when pending and the lease's end when running: when the job next
//!   needs the store. Backends keep these keys ordered, so "which jobs are due" and "which
//!   leases expired" are range reads and the next wakeup is the first key (the embedded
//!   store keeps pending and running keys in two tables, Redis in one sorted set), and they
//!   replace the key `before.due()` with `after.due()` around every transition.
//! - `attempt` counts deliveries: 0 until the first claim, incremented by each claim, never
//!   reset. A claim of a job whose `attempt` already reached `max_attempts` (its last lease
//!   expired, or a retry) kills it instead of delivering it.
//! - A lease is checked by token only: ack, retry and extend succeed while the job is leased
//!   with that token, even after `until` (nobody else has it until it is claimed again, and a
//!   claim changes the token). After a redelivery the old token is stale forever.
//! - Backends count jobs per state ([`Tally`]) so `pending()` and opening cost O(1).
//! - A job's place in its state's list is [`Machine::listed_at`]: its due key while pending
//!   (`run_at`) or running (the lease's end: the jobs a stalled process would lose first
//!   come first), the death time once dead. Each state's jobs are a range of an index on
//!   that key, so listing them is a range read.
//! - Failures leave a last error with the job (data beside it, not state): the backend
//!   records the error a `fail` carries, and a claim that takes a job from an ended lease
//!   records [`Machine::claim_error`], whether it redelivers the job or kills it. A revive
//!   keeps the error and starts the attempts again from 0.

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Pending,
    Running {
        token: u64,
        until: u64,
    },
    /// Dead since `at`.
    Dead {
        at: u64,
    },
}

/// One stored job's place in the state machine, without its id and payload (which the
/// backends store beside it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Machine {
    pub(crate) run_at: u64,
    pub(crate) attempt: u32,
    pub(crate) status: Status,
}

/// What a claim did to a due job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// Leased to the claimer: deliver it with `attempt`.
    Deliver,
    /// Out of attempts: the job is now dead.
    Died,
    /// Not due at `now` (a backend must not hand such a job in; kept total for safety).
    NotDue,
}

/// What a retry did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// The token is stale: nothing changed.
    Stale,
    /// Back to pending at the given `run_at`.
    Pending,
    /// That was the last attempt: the job is dead.
    Died,
}

// ===== impl Machine =====

impl Machine {
    /// A newly scheduled job.
    pub(crate) fn new(run_at: u64) -> Machine {
        Machine {
            run_at,
            attempt: 0,
            status: Status::Pending,
        }
    }

    /// Its key in the due index, `None` for a dead job (which is in no index of due work).
    pub(crate) fn due(&self) -> Option<u64> {
        match self.status {
            Status::Pending => Some(self.run_at),
            Status::Running { until, .. } => Some(until),
            Status::Dead { .. } => None,
        }
    }

    /// Its key in its state's list: its due key while pending or running (`run_at`, the
    /// lease's end), the death time once dead.
    pub(crate) fn listed_at(&self) -> u64 {
        match self.status {
            Status::Pending => self.run_at,
            Status::Running { until, .. } => until,
            Status::Dead { at } => at,
        }
    }

    /// The last error a claim records for this due job: [`LEASE_EXPIRED`] if it is taken
    /// from a lease that ended (to be delivered again or killed), else none.
    pub(crate) fn claim_error(&self) -> Option<&'static str> {
        matches!(self.status, Status::Running { .. }).then_some(LEASE_EXPIRED)
    }

    /// Claims the job at `now` for a lease ending at `until` under `token`.
    pub(crate) fn claim(&mut self, now: u64, until: u64, token: u64, max_attempts: u32) -> Claim {
        match self.due() {
            Some(due) if due <= now => {}
            _ => return Claim::NotDue,
        }
        if self.attempt >= max_attempts {
            self.status = Status::Dead { at: now };
            return Claim::Died;
        }
        self.attempt += 1;
        self.status = Status::Running { token, until };
        Claim::Deliver
    }

    fn holds(&self, token: u64) -> bool {
        matches!(self.status, Status::Running { token: t, .. } if t == token)
    }

    /// Whether an ack with `token` is valid; the backend then deletes the job.
    pub(crate) fn ack(&self, token: u64) -> bool {
        self.holds(token)
    }

    /// Gives the job back at `now` to run again at `run_at`, or kills it if that was its last
    /// attempt.
    pub(crate) fn retry(&mut self, token: u64, now: u64, run_at: u64, max_attempts: u32) -> Retry {
        if !self.holds(token) {
            return Retry::Stale;
        }
        if self.attempt >= max_attempts {
            self.status = Status::Dead { at: now };
            Retry::Died
        } else {
            self.run_at = run_at;
            self.status = Status::Pending;
            Retry::Pending
        }
    }

    /// Moves the lease's end to `until`.
    pub(crate) fn extend(&mut self, token: u64, until: u64) -> bool {
        if !self.holds(token) {
            return false;
        }
        self.status = Status::Running { token, until };
        true
    }

    /// Whether a cancel removes the job (only a pending job can be cancelled).
    pub(crate) fn cancel(&self) -> bool {
        self.status == Status::Pending
    }

    /// Moves a pending job to `run_at`.
    pub(crate) fn reschedule(&mut self, run_at: u64) -> bool {
        if self.status != Status::Pending {
            return false;
        }
        self.run_at = run_at;
        true
    }

    /// Makes a dead job pending again at `run_at`, its attempts counted from 0; `false` (and
    /// nothing changes) for a job that is not dead.
    pub(crate) fn revive(&mut self, run_at: u64) -> bool {
        if !matches!(self.status, Status::Dead { .. }) {
            return false;
        }
        *self = Machine::new(run_at);
        true
    }
}

/// The last error of a job whose lease ended before it was acked, retried or failed.
pub(crate) const LEASE_EXPIRED: &str = "lease expired";

// ===== impl Tally =====

/// Jobs per state, kept by backends beside the jobs so reading them is O(1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) pending: u64,
    pub(crate) running: u64,
    pub(crate) dead: u64,
}

impl Tally {
    fn slot(&mut self, status: Status) -> &mut u64 {
        match status {
            Status::Pending => &mut self.pending,
            Status::Running { .. } => &mut self.running,
            Status::Dead { .. } => &mut self.dead,
        }
    }

    /// Accounts for a job going from `before` to `after` (`None`: absent).
    pub(crate) fn transition(&mut self, before: Option<Status>, after: Option<Status>) {
        if let Some(b) = before {
            let slot = self.slot(b);
            *slot = slot.saturating_sub(1);
        }
        if let Some(a) = after {
            *self.slot(a) += 1;
        }
    }
}

// ===== tokens =====

/// A 64-bit mixer (splitmix64) turning a counter into well-spread lease tokens.
pub(crate) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests;
