//! The embedded store's record of one job: a fixed little-endian header (version, state,
//! attempt, run_at, token, lease end), then the payload. The write-ahead log (`wal.rs`)
//! carries the same records.
//!
//! # Ground rules
//!
//! - A record that does not decode is [`Corrupt`]: the file is damaged or not a job store;
//!   nothing guesses at its fields.
//! - A change of layout bumps `VERSION` (and the store's `FORMAT` in `store.rs`).

use std::fmt;

use crate::model::{Job, Status};

const VERSION: u8 = 1;
const HEADER: usize = 1 + 1 + 4 + 8 + 8 + 8;

/// A stored record that cannot be decoded: the file is corrupt or not a job store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Corrupt;

impl fmt::Display for Corrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a job record is corrupt")
    }
}

impl Job {
    /// The stored form: a fixed little-endian header, then the payload.
    pub(crate) fn encode(&self, payload: &[u8]) -> Vec<u8> {
        let (state, token, until) = match self.status {
            Status::Pending => (0u8, 0, 0),
            Status::Leased { token, until } => (1, token, until),
            Status::Dead => (2, 0, 0),
        };
        let mut out = Vec::with_capacity(HEADER + payload.len());
        out.push(VERSION);
        out.push(state);
        out.extend_from_slice(&self.attempt.to_le_bytes());
        out.extend_from_slice(&self.run_at.to_le_bytes());
        out.extend_from_slice(&token.to_le_bytes());
        out.extend_from_slice(&until.to_le_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// The job and its payload from a stored record.
    pub(crate) fn decode(bytes: &[u8]) -> Result<(Job, &[u8]), Corrupt> {
        if bytes.len() < HEADER || bytes[0] != VERSION {
            return Err(Corrupt);
        }
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let attempt = u32::from_le_bytes(bytes[2..6].try_into().expect("4 bytes"));
        let run_at = u64_at(6);
        let status = match bytes[1] {
            0 => Status::Pending,
            1 => Status::Leased {
                token: u64_at(14),
                until: u64_at(22),
            },
            2 => Status::Dead,
            _ => return Err(Corrupt),
        };
        Ok((
            Job {
                run_at,
                attempt,
                status,
            },
            &bytes[HEADER..],
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_rejects_garbage() {
        assert_eq!(Job::decode(&[]), Err(Corrupt));
        assert_eq!(Job::decode(&[9; 40]), Err(Corrupt));
        let mut bad_state = Job::new(1).encode(b"");
        bad_state[1] = 3;
        assert_eq!(Job::decode(&bad_state), Err(Corrupt));
    }
}
