//! The embedded store's record of one job: a fixed little-endian header (version, state,
//! attempt, run_at, token, lease end or death time), the last error, then the payload. The
//! write-ahead log (`wal.rs`) carries the same records.
//!
//! # Ground rules
//!
//! - A record that does not decode is [`Corrupt`]: the file is damaged or not a job store;
//!   nothing guesses at its fields.
//! - A change of layout bumps `VERSION` (and the store's `FORMAT` in `store/mod.rs`); the
//!   decoder reads this version only (a store of another format is refused at open).
//! - Layout of version 2: `version: u8, state: u8, attempt: u32, run_at: u64, token: u64,
//!   time: u64` (the lease's end while running, the death time when dead, else 0), `error:
//!   u16` (0: none; `n + 1`: `n` bytes of UTF-8 follow), then the payload to the end.

use std::fmt;

use crate::core::state::{Machine, Status};

const VERSION: u8 = 2;
/// The fixed fields before the error's length.
const FIXED: usize = 1 + 1 + 4 + 8 + 8 + 8;
const HEADER: usize = FIXED + 2;

/// A stored record that cannot be decoded: the file is corrupt or not a job store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Corrupt;

impl fmt::Display for Corrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a job record is corrupt")
    }
}

/// One job as stored: its state, its last error and its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record<'a> {
    pub(crate) job: Machine,
    pub(crate) error: Option<&'a str>,
    pub(crate) payload: &'a [u8],
}

impl<'a> Record<'a> {
    /// The stored form (the current version).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let (state, token, time) = match self.job.status {
            Status::Pending => (0u8, 0, 0),
            Status::Running { token, until } => (1, token, until),
            Status::Dead { at } => (2, 0, at),
        };
        let error = self.error.unwrap_or_default();
        // Errors are capped at 4 KiB above (`job::capped_error`); a longer one could only
        // come from a bug, and is cut rather than stored with a wrong length.
        let error_len = error.len().min(usize::from(u16::MAX) - 1);
        let tag = match self.error {
            None => 0,
            Some(_) => u16::try_from(error_len + 1).expect("below u16::MAX"),
        };
        let mut out = Vec::with_capacity(HEADER + error_len + self.payload.len());
        out.push(VERSION);
        out.push(state);
        out.extend_from_slice(&self.job.attempt.to_le_bytes());
        out.extend_from_slice(&self.job.run_at.to_le_bytes());
        out.extend_from_slice(&token.to_le_bytes());
        out.extend_from_slice(&time.to_le_bytes());
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&error.as_bytes()[..error_len]);
        out.extend_from_slice(self.payload);
        out
    }

    /// A record from its stored form.
    pub(crate) fn decode(bytes: &'a [u8]) -> Result<Record<'a>, Corrupt> {
        if bytes.first() != Some(&VERSION) || bytes.len() < HEADER {
            return Err(Corrupt);
        }
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let attempt = u32::from_le_bytes(bytes[2..6].try_into().expect("4 bytes"));
        let run_at = u64_at(6);
        let status = match bytes[1] {
            0 => Status::Pending,
            1 => Status::Running {
                token: u64_at(14),
                until: u64_at(22),
            },
            2 => Status::Dead { at: u64_at(22) },
            _ => return Err(Corrupt),
        };
        let job = Machine {
            run_at,
            attempt,
            status,
        };
        let tag = u16::from_le_bytes(bytes[FIXED..HEADER].try_into().expect("2 bytes"));
        let (error, payload) = match usize::from(tag).checked_sub(1) {
            None => (None, &bytes[HEADER..]),
            Some(len) => {
                let error = bytes.get(HEADER..HEADER + len).ok_or(Corrupt)?;
                let error = std::str::from_utf8(error).map_err(|_| Corrupt)?;
                (Some(error), &bytes[HEADER + len..])
            }
        };
        Ok(Record {
            job,
            error,
            payload,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn job() -> impl Strategy<Value = Machine> {
        let status = prop_oneof![
            Just(Status::Pending),
            (any::<u64>(), any::<u64>())
                .prop_map(|(token, until)| Status::Running { token, until }),
            any::<u64>().prop_map(|at| Status::Dead { at }),
        ];
        (any::<u64>(), any::<u32>(), status).prop_map(|(run_at, attempt, status)| Machine {
            run_at,
            attempt,
            status,
        })
    }

    proptest! {
        #[test]
        fn every_record_round_trips(
            job in job(),
            error in proptest::option::of(".{0,40}"),
            payload in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let record = Record { job, error: error.as_deref(), payload: &payload };
            let encoded = record.encode();
            prop_assert_eq!(Record::decode(&encoded), Ok(record));
        }
    }

    #[test]
    fn decode_rejects_garbage() {
        assert_eq!(Record::decode(&[]), Err(Corrupt));
        assert_eq!(Record::decode(&[9; 40]), Err(Corrupt));
        let record = |error| Record {
            job: Machine::new(1),
            error,
            payload: b"",
        };
        let mut bad_state = record(None).encode();
        bad_state[1] = 3;
        assert_eq!(Record::decode(&bad_state), Err(Corrupt));
        let mut short_error = record(Some("boom")).encode();
        short_error.pop();
        assert_eq!(Record::decode(&short_error), Err(Corrupt));
        let mut not_utf8 = record(Some("é")).encode();
        not_utf8[HEADER] = 0xff;
        assert_eq!(Record::decode(&not_utf8), Err(Corrupt));
        assert_eq!(
            Record::decode(&record(None).encode()[..HEADER - 1]),
            Err(Corrupt)
        );
    }
}
