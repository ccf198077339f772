//! The embedded store's record of one job: a fixed little-endian header (version, state,
//! attempt, run_at, token, lease end or death time), the job's [`Spec`], the last error,
//! then the payload. The write-ahead log (`wal.rs`) carries the same records.
//!
//! # Ground rules
//!
//! - A record that does not decode is [`Corrupt`]: the file is damaged or not a job store;
//!   nothing guesses at its fields.
//! - A change of layout bumps `VERSION` (and the store's `FORMAT` in `store/mod.rs`).
//!   Records are written in this version only; the decoder also reads version 2, written
//!   before kinds (by stores of format 4, and in their logs), as a job of the plain spec of
//!   the queue opening it: such a record stays as it is until its job next changes.
//! - Layout of version 3: `version: u8, state: u8` (0 pending, 1 running, 2 dead; bit 7
//!   set while a successor of `Dedup::AllowWhileRunning` waits in the store's `next` table,
//!   so a job without one pays no lookup on its ack, retry or death), `attempt: u32,
//!   run_at: u64, token: u64, time: u64` (the lease's end while running, the death time when dead, else 0), the
//!   spec (`priority: i8, kind_len: u8`, the kind's bytes, then as LEB128 varints
//!   `max_attempts` and the durations backoff first, backoff max, lease and hold-off (zero
//!   for none, `Dedup::HoldOff`), each `ms << 1`
//!   when a whole number of milliseconds, else `ns << 1 | 1`, each saturated below 2^63 of
//!   its unit: 292 years in nanoseconds), `error: u16` (0: none; `n + 1`: `n` bytes of UTF-8 follow), then
//!   the payload to the end. Version 2 is the same without the spec.
//!   (The hold-off and the successor bit were added to version 3 in place, before format 5
//!   was released; version 2 never sets the bit.)
//! - Two more bits of the state byte, added to version 3 in place the same way (a record
//!   written before them has neither set and reads as a job without a key): bit 6 says the
//!   spec carries a key, after the hold-off: `key_len` as a varint, the key's bytes, then
//!   as varints the limit (0 for none) and the rate's starts (0 for no rate), followed by
//!   its period as a duration when there is one; bit 5 says a pending gated job waits for
//!   its key's slot (`store/gates.rs`: it is in the gate's queue, not in `due`). A job
//!   without a key pays no byte for either.
//! - The spec is compact (12 bytes for a plain job with the builder's defaults, against 30
//!   for fixed-width fields): every record is copied several times per transition (the
//!   table, the log record, its checksum).

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use crate::core::kind::{Keyed, Spec};
use crate::core::state::{Machine, Status};

const VERSION: u8 = 3;
/// The version written before kinds: no spec.
const VERSION_2: u8 = 2;
/// The fixed fields before the spec (version 3) or the error's length (version 2).
const FIXED: usize = 1 + 1 + 4 + 8 + 8 + 8;
/// The spec's fixed fields, before the kind's bytes.
const SPEC: usize = 1 + 1;
/// The longest varint of a `u64`.
const MAX_VARINT: usize = 10;
/// The bit of the state byte set while a successor waits.
const HAS_NEXT: u8 = 0x80;
/// The bit of the state byte set when the spec carries a key (and its limits).
const HAS_KEY: u8 = 0x40;
/// The bit of the state byte set while a pending gated job waits for its key's slot.
const WAITING: u8 = 0x20;
/// Every flag bit of the state byte.
const FLAGS: u8 = HAS_NEXT | HAS_KEY | WAITING;

/// A stored record that cannot be decoded: the file is corrupt or not a job store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Corrupt;

impl fmt::Display for Corrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a job record is corrupt")
    }
}

/// One job as stored: its state, its spec, its last error and its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record<'a> {
    pub(crate) job: Machine,
    /// Borrowed from the caller (or the plain spec, for a version 2 record), owned when
    /// decoded from a version 3 record.
    pub(crate) spec: Cow<'a, Spec>,
    pub(crate) error: Option<&'a str>,
    pub(crate) payload: &'a [u8],
    /// Whether a successor waits for this job (`Dedup::AllowWhileRunning`, the store's
    /// `next` table).
    pub(crate) next: bool,
    /// Whether a pending gated job waits for its key's slot (`store/gates.rs`): then it is
    /// in its gate's queue, not in `due`. Always false for any other job.
    pub(crate) waiting: bool,
}

fn push_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The varint at `*at`, moving `*at` past it.
fn varint(bytes: &[u8], at: &mut usize) -> Result<u64, Corrupt> {
    let mut v = 0u64;
    for i in 0..MAX_VARINT {
        let byte = *bytes.get(*at + i).ok_or(Corrupt)?;
        let bits = u64::from(byte & 0x7f);
        // The tenth byte holds the top bit only.
        if i == MAX_VARINT - 1 && bits > 1 {
            return Err(Corrupt);
        }
        v |= bits << (7 * i);
        if byte & 0x80 == 0 {
            *at += i + 1;
            return Ok(v);
        }
    }
    Err(Corrupt)
}

/// A duration as a varint's value: whole milliseconds `ms << 1`, else `ns << 1 | 1`.
fn duration_code(d: Duration) -> u64 {
    let nanos = d.as_nanos();
    if nanos.is_multiple_of(1_000_000) {
        let ms = u64::try_from(nanos / 1_000_000).unwrap_or(u64::MAX);
        ms.min((1 << 63) - 1) << 1
    } else {
        let nanos = u64::try_from(nanos).unwrap_or(u64::MAX).min((1 << 63) - 1);
        nanos << 1 | 1
    }
}

fn duration_of(code: u64) -> Duration {
    if code & 1 == 0 {
        Duration::from_millis(code >> 1)
    } else {
        Duration::from_nanos(code >> 1)
    }
}

/// The fixed header, as both versions write it (version 2 with no flag), `flags` or'd into
/// the state byte.
fn push_fixed(out: &mut Vec<u8>, version: u8, job: &Machine, flags: u8) {
    let (state, token, time) = match job.status {
        Status::Pending => (0u8, 0, 0),
        Status::Running { token, until } => (1, token, until),
        Status::Dead { at } => (2, 0, at),
    };
    out.push(version);
    out.push(state | flags);
    out.extend_from_slice(&job.attempt.to_le_bytes());
    out.extend_from_slice(&job.run_at.to_le_bytes());
    out.extend_from_slice(&token.to_le_bytes());
    out.extend_from_slice(&time.to_le_bytes());
}

/// The error's length tag and text, then the payload, as both versions write them.
fn push_tail(out: &mut Vec<u8>, error: Option<&str>, payload: &[u8]) {
    let text = error.unwrap_or_default();
    // Errors are capped at 4 KiB above (`job::capped_error`); a longer one could only
    // come from a bug, and is cut rather than stored with a wrong length.
    let error_len = text.len().min(usize::from(u16::MAX) - 1);
    let tag = match error {
        None => 0,
        Some(_) => u16::try_from(error_len + 1).expect("below u16::MAX"),
    };
    out.extend_from_slice(&tag.to_le_bytes());
    out.extend_from_slice(&text.as_bytes()[..error_len]);
    out.extend_from_slice(payload);
}

impl<'a> Record<'a> {
    /// The stored form (the current version).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let spec = &*self.spec;
        let error_len = self.error.map_or(0, str::len);
        let mut out = Vec::with_capacity(
            FIXED + SPEC + spec.kind.len() + 5 * MAX_VARINT + 2 + error_len + self.payload.len(),
        );
        let key = spec.key.as_ref();
        let flags = [
            (self.next, HAS_NEXT),
            (key.is_some(), HAS_KEY),
            (self.waiting, WAITING),
        ]
        .iter()
        .filter(|(set, _)| *set)
        .fold(0, |flags, (_, bit)| flags | bit);
        push_fixed(&mut out, VERSION, &self.job, flags);
        push_spec(&mut out, spec);
        if let Some(key) = key {
            push_varint(&mut out, key.key.len() as u64);
            out.extend_from_slice(key.key.as_bytes());
            push_varint(&mut out, u64::from(key.limit));
            let (starts, per) = key.rate.unwrap_or_default();
            push_varint(&mut out, u64::from(starts));
            if starts > 0 {
                push_varint(&mut out, duration_code(per));
            }
        }
        push_tail(&mut out, self.error, self.payload);
        out
    }

    /// The key of a record's gate (a key with a limit or a rate, `Spec::gate`), decoding
    /// nothing else: a record without a key reads its header's flags only, one with a key
    /// its spec's varints up to the key's limits, with no allocation. A version 2 record
    /// has `plain`'s. What the count of the gates' running jobs reads (`store/gates.rs`,
    /// "Counters").
    pub(crate) fn gate_key(bytes: &'a [u8], plain: &'a Spec) -> Result<Option<&'a str>, Corrupt> {
        if bytes.len() < FIXED {
            return Err(Corrupt);
        }
        match bytes[0] {
            VERSION_2 => return Ok(plain.gate().map(|keyed| keyed.key.as_str())),
            VERSION => {}
            _ => return Err(Corrupt),
        }
        if bytes[1] & HAS_KEY == 0 {
            return Ok(None);
        }
        let kind_len = usize::from(*bytes.get(FIXED + 1).ok_or(Corrupt)?);
        let mut at = FIXED + SPEC + kind_len;
        // max_attempts, the backoff's two durations, the lease and the hold-off.
        for _ in 0..5 {
            varint(bytes, &mut at)?;
        }
        let len = usize::try_from(varint(bytes, &mut at)?).map_err(|_| Corrupt)?;
        let end = at.checked_add(len).ok_or(Corrupt)?;
        let key = bytes.get(at..end).ok_or(Corrupt)?;
        let key = std::str::from_utf8(key).map_err(|_| Corrupt)?;
        at = end;
        let limit = varint(bytes, &mut at)?;
        let starts = varint(bytes, &mut at)?;
        Ok((limit > 0 || starts > 0).then_some(key))
    }

    /// A record from its stored form; a version 2 record (no spec) is given `plain`.
    pub(crate) fn decode(bytes: &'a [u8], plain: &'a Spec) -> Result<Record<'a>, Corrupt> {
        let u64_at = |at: usize| -> Result<u64, Corrupt> {
            let field = bytes.get(at..at + 8).ok_or(Corrupt)?;
            Ok(u64::from_le_bytes(field.try_into().expect("8 bytes")))
        };
        let u32_at = |at: usize| -> Result<u32, Corrupt> {
            let field = bytes.get(at..at + 4).ok_or(Corrupt)?;
            Ok(u32::from_le_bytes(field.try_into().expect("4 bytes")))
        };
        if bytes.len() < FIXED {
            return Err(Corrupt);
        }
        let (spec, tail) = match bytes[0] {
            VERSION_2 => (Cow::Borrowed(plain), FIXED),
            VERSION => {
                let mut at = FIXED;
                let mut spec = spec_at(bytes, &mut at)?;
                if bytes[1] & HAS_KEY != 0 {
                    spec.key = Some(keyed(bytes, &mut at)?);
                }
                (Cow::Owned(spec), at)
            }
            _ => return Err(Corrupt),
        };
        let attempt = u32_at(2)?;
        let run_at = u64_at(6)?;
        let next = bytes[1] & HAS_NEXT != 0;
        let waiting = bytes[1] & WAITING != 0;
        let status = match bytes[1] & !FLAGS {
            0 => Status::Pending,
            1 => Status::Running {
                token: u64_at(14)?,
                until: u64_at(22)?,
            },
            2 => Status::Dead { at: u64_at(22)? },
            _ => return Err(Corrupt),
        };
        let job = Machine {
            run_at,
            attempt,
            status,
        };
        let tag = bytes.get(tail..tail + 2).ok_or(Corrupt)?;
        let tag = u16::from_le_bytes(tag.try_into().expect("2 bytes"));
        let body = tail + 2;
        let (error, payload) = match usize::from(tag).checked_sub(1) {
            None => (None, &bytes[body..]),
            Some(len) => {
                let error = bytes.get(body..body + len).ok_or(Corrupt)?;
                let error = std::str::from_utf8(error).map_err(|_| Corrupt)?;
                (Some(error), &bytes[body + len..])
            }
        };
        Ok(Record {
            job,
            spec,
            error,
            payload,
            next,
            waiting,
        })
    }
}

/// Appends `spec` but its key: `priority: i8, kind_len: u8`, the kind's bytes, then as
/// varints `max_attempts` and the durations backoff first, backoff max, lease and hold-off.
/// A job record follows it with its key (flagged in its state byte); a recurring series'
/// record (`store/series.rs`) stores its spec so, a series having no key.
pub(crate) fn push_spec(out: &mut Vec<u8>, spec: &Spec) {
    // Kinds are at most `MAX_KIND_LEN` (64) bytes, checked by the front.
    let kind_len = u8::try_from(spec.kind.len()).expect("a kind is at most 64 bytes");
    out.extend_from_slice(&spec.priority.to_le_bytes());
    out.push(kind_len);
    out.extend_from_slice(spec.kind.as_bytes());
    push_varint(out, u64::from(spec.max_attempts));
    push_varint(out, duration_code(spec.backoff.0));
    push_varint(out, duration_code(spec.backoff.1));
    push_varint(out, duration_code(spec.lease));
    push_varint(out, duration_code(spec.hold_off));
}

/// The spec [`push_spec`] wrote at `*at` (without a key), moving `*at` past it.
pub(crate) fn spec_at(bytes: &[u8], at: &mut usize) -> Result<Spec, Corrupt> {
    let start = *at;
    let priority = i8::from_le_bytes([*bytes.get(start).ok_or(Corrupt)?]);
    let kind_len = usize::from(*bytes.get(start + 1).ok_or(Corrupt)?);
    let kind_at = start + SPEC;
    let kind = bytes.get(kind_at..kind_at + kind_len).ok_or(Corrupt)?;
    let kind = std::str::from_utf8(kind).map_err(|_| Corrupt)?;
    *at = kind_at + kind_len;
    let max_attempts = u32::try_from(varint(bytes, at)?).map_err(|_| Corrupt)?;
    let first = duration_of(varint(bytes, at)?);
    let max = duration_of(varint(bytes, at)?);
    let lease = duration_of(varint(bytes, at)?);
    let hold_off = duration_of(varint(bytes, at)?);
    Ok(Spec {
        hold_off,
        key: None,
        kind: kind.to_owned(),
        priority,
        max_attempts,
        backoff: (first, max),
        lease,
    })
}

/// The key and its limits at `*at` (bit 6 of the state byte set), moving `*at` past them.
fn keyed(bytes: &[u8], at: &mut usize) -> Result<Keyed, Corrupt> {
    let len = usize::try_from(varint(bytes, at)?).map_err(|_| Corrupt)?;
    let end = at.checked_add(len).ok_or(Corrupt)?;
    let key = bytes.get(*at..end).ok_or(Corrupt)?;
    let key = std::str::from_utf8(key).map_err(|_| Corrupt)?.to_owned();
    *at = end;
    let limit = u32::try_from(varint(bytes, at)?).map_err(|_| Corrupt)?;
    let starts = u32::try_from(varint(bytes, at)?).map_err(|_| Corrupt)?;
    let rate = match starts {
        0 => None,
        _ => Some((starts, duration_of(varint(bytes, at)?))),
    };
    Ok(Keyed { key, limit, rate })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A record as version 2 (before kinds) wrote it, byte for byte: what a store of
    /// format 4 and its log hold.
    pub(crate) fn encode_v2(job: &Machine, error: Option<&str>, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        push_fixed(&mut out, VERSION_2, job, 0);
        push_tail(&mut out, error, payload);
        out
    }

    pub(crate) fn plain() -> Spec {
        Spec {
            kind: String::new(),
            priority: 0,
            max_attempts: 25,
            backoff: (Duration::from_secs(1), Duration::from_secs(60)),
            lease: Duration::from_secs(30),
            hold_off: Duration::ZERO,
            key: None,
        }
    }

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

    /// Durations the layout keeps exactly: whole milliseconds (any number a `u64` holds
    /// shifted by one), or nanoseconds below 2^63.
    fn duration() -> impl Strategy<Value = Duration> {
        prop_oneof![
            (0..u64::MAX >> 1).prop_map(Duration::from_millis),
            (0..1u64 << 63).prop_map(Duration::from_nanos),
            (0..100_000u64).prop_map(Duration::from_millis),
        ]
    }

    /// No key, or a key with any limits the layout keeps.
    fn keyed() -> impl Strategy<Value = Option<Keyed>> {
        let rate = proptest::option::of((1..=u32::MAX, duration()));
        proptest::option::of(
            ("[a-zé-]{1,12}", any::<u32>(), rate).prop_map(|(key, limit, rate)| Keyed {
                key,
                limit,
                rate,
            }),
        )
    }

    fn spec() -> impl Strategy<Value = Spec> {
        (
            "[a-z.é]{0,21}",
            any::<i8>(),
            any::<u32>(),
            (duration(), duration()),
            duration(),
            duration(),
            keyed(),
        )
            .prop_map(
                |(kind, priority, max_attempts, backoff, lease, hold_off, key)| Spec {
                    kind,
                    priority,
                    max_attempts,
                    backoff,
                    lease,
                    hold_off,
                    key,
                },
            )
    }

    proptest! {
        #[test]
        fn every_record_round_trips(
            job in job(),
            spec in spec(),
            error in proptest::option::of(".{0,40}"),
            payload in proptest::collection::vec(any::<u8>(), 0..40),
            next in any::<bool>(),
            waiting in any::<bool>(),
        ) {
            let record = Record {
                job,
                spec: Cow::Owned(spec),
                error: error.as_deref(),
                payload: &payload,
                next,
                waiting,
            };
            let encoded = record.encode();
            let plain = plain();
            let key = record.spec.gate().map(|keyed| keyed.key.as_str());
            prop_assert_eq!(Record::gate_key(&encoded, &plain), Ok(key));
            prop_assert_eq!(Record::decode(&encoded, &plain), Ok(record));
        }

        /// A record written before kinds reads as the job it was, with the plain spec.
        #[test]
        fn a_version_2_record_reads_with_the_plain_spec(
            job in job(),
            error in proptest::option::of(".{0,40}"),
            payload in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let plain = plain();
            let old = encode_v2(&job, error.as_deref(), &payload);
            let read = Record::decode(&old, &plain);
            let expect = Record {
                job,
                spec: Cow::Borrowed(&plain),
                error: error.as_deref(),
                payload: &payload,
                next: false,
                waiting: false,
            };
            prop_assert_eq!(read, Ok(expect));
            prop_assert_eq!(Record::gate_key(&old, &plain), Ok(None));
            let gated = Spec {
                key: Some(Keyed {
                    key: "k".into(),
                    limit: 1,
                    rate: None,
                }),
                ..plain
            };
            prop_assert_eq!(Record::gate_key(&old, &gated), Ok(Some("k")));
        }
    }

    /// The version 2 layout, spelled out: what the code before kinds wrote for a pending
    /// job at attempt 1 with an error.
    #[test]
    fn version_2_bytes_are_those_the_old_code_wrote() {
        let job = Machine {
            run_at: 7,
            attempt: 1,
            status: Status::Pending,
        };
        let mut expect = vec![2u8, 0];
        expect.extend_from_slice(&1u32.to_le_bytes());
        expect.extend_from_slice(&7u64.to_le_bytes());
        expect.extend_from_slice(&[0; 16]);
        expect.extend_from_slice(&3u16.to_le_bytes());
        expect.extend_from_slice(b"ohpay");
        assert_eq!(encode_v2(&job, Some("oh"), b"pay"), expect);
        let plain = plain();
        let read = Record::decode(&expect, &plain).unwrap();
        assert_eq!((read.error, read.payload), (Some("oh"), &b"pay"[..]));
        assert_eq!(*read.spec, plain);
    }

    #[test]
    fn durations_keep_their_size_or_saturate() {
        for (d, bytes) in [
            (Duration::ZERO, 1),
            (Duration::from_secs(1), 2),
            (Duration::from_secs(30), 3),
            (Duration::from_nanos(1), 1),
            (Duration::MAX, MAX_VARINT),
        ] {
            let mut out = Vec::new();
            push_varint(&mut out, duration_code(d));
            assert_eq!(out.len(), bytes, "{d:?}");
            let mut at = 0;
            let back = duration_of(varint(&out, &mut at).unwrap());
            assert_eq!(at, bytes);
            if d == Duration::MAX {
                assert_eq!(back, Duration::from_nanos((1 << 63) - 1), "saturated");
            } else {
                assert_eq!(back, d);
            }
        }
        let code = |d| {
            let mut out = Vec::new();
            push_varint(&mut out, duration_code(d));
            duration_of(varint(&out, &mut 0).unwrap())
        };
        let longest = Duration::from_millis((1 << 63) - 1);
        assert_eq!(code(longest), longest, "whole ms keep");
        assert_eq!(code(Duration::from_secs(u64::MAX)), longest, "saturated");
    }

    /// A gate's key is read from a whole record only: one cut inside its key is corrupt.
    #[test]
    fn gate_key_rejects_garbage() {
        let plain = plain();
        assert_eq!(Record::gate_key(&[], &plain), Err(Corrupt));
        assert_eq!(Record::gate_key(&[9; 40], &plain), Err(Corrupt));
        let spec = Spec {
            key: Some(Keyed {
                key: "tenant".into(),
                limit: 0,
                rate: Some((3, Duration::from_secs(1))),
            }),
            ..plain.clone()
        };
        let record = Record {
            job: Machine::new(1),
            spec: Cow::Borrowed(&spec),
            error: None,
            payload: b"",
            next: false,
            waiting: false,
        };
        let encoded = record.encode();
        assert_eq!(Record::gate_key(&encoded, &plain), Ok(Some("tenant")));
        let key_at = encoded
            .windows(6)
            .position(|w| w == b"tenant")
            .expect("the key");
        assert_eq!(
            Record::gate_key(&encoded[..key_at + 3], &plain),
            Err(Corrupt)
        );
    }

    #[test]
    fn decode_rejects_garbage() {
        let plain = plain();
        assert_eq!(Record::decode(&[], &plain), Err(Corrupt));
        assert_eq!(Record::decode(&[9; 40], &plain), Err(Corrupt));
        let kind = Spec {
            kind: "mail".into(),
            ..plain.clone()
        };
        let record = |error| Record {
            job: Machine::new(1),
            spec: Cow::Borrowed(&kind),
            error,
            payload: b"",
            next: false,
            waiting: false,
        };
        // Kind "mail", then 25, 1 s, 60 s, 30 s and no hold-off as varints: 1, 2, 3, 3 and 1
        // bytes.
        let header = FIXED + SPEC + 4 + 10 + 2;
        assert_eq!(record(None).encode().len(), header);
        let mut bad_state = record(None).encode();
        bad_state[1] = 3;
        assert_eq!(Record::decode(&bad_state, &plain), Err(Corrupt));
        bad_state[1] = HAS_NEXT | 3;
        assert_eq!(
            Record::decode(&bad_state, &plain),
            Err(Corrupt),
            "the bit is no state"
        );
        let mut short_error = record(Some("boom")).encode();
        short_error.pop();
        assert_eq!(Record::decode(&short_error, &plain), Err(Corrupt));
        let mut not_utf8 = record(Some("é")).encode();
        not_utf8[header] = 0xff;
        assert_eq!(Record::decode(&not_utf8, &plain), Err(Corrupt));
        let mut bad_kind = record(None).encode();
        bad_kind[FIXED + SPEC] = 0xff;
        assert_eq!(Record::decode(&bad_kind, &plain), Err(Corrupt));
        let encoded = record(None).encode();
        let mut long_varint = record(None).encode();
        long_varint[FIXED + SPEC + 4] = 0xff; // max_attempts: a varint that never ends
        for byte in &mut long_varint[FIXED + SPEC + 5..] {
            *byte = 0xff;
        }
        assert_eq!(Record::decode(&long_varint, &plain), Err(Corrupt));
        for cut in [header - 1, FIXED + SPEC + 2, FIXED + SPEC + 5, FIXED + 3] {
            assert_eq!(
                Record::decode(&encoded[..cut], &plain),
                Err(Corrupt),
                "{cut}"
            );
        }
        let old = encode_v2(&Machine::new(1), None, b"");
        assert_eq!(Record::decode(&old[..FIXED + 1], &plain), Err(Corrupt));
    }

    /// A key costs its bytes and three or four varints after the hold-off, flagged by bit 6;
    /// a record cut inside them, or with a key that is not UTF-8, is corrupt.
    #[test]
    fn a_key_and_its_limits_follow_the_hold_off() {
        let plain = plain();
        let spec = Spec {
            kind: "mail".into(),
            key: Some(Keyed {
                key: "t-1".into(),
                limit: 2,
                rate: Some((5, Duration::from_secs(1))),
            }),
            ..plain.clone()
        };
        let record = Record {
            job: Machine::new(1),
            spec: Cow::Borrowed(&spec),
            error: None,
            payload: b"p",
            next: false,
            waiting: true,
        };
        let encoded = record.encode();
        let header = FIXED + SPEC + 4 + 10;
        assert_eq!(encoded[1], HAS_KEY | WAITING, "pending, keyed, waiting");
        // The key's length and bytes, limit 2, 5 starts per 1000 ms (2000 as a varint: 2
        // bytes), then the error tag and the payload.
        assert_eq!(&encoded[header..header + 4], &[3, b't', b'-', b'1']);
        assert_eq!(encoded.len(), header + 4 + 1 + 1 + 2 + 2 + 1);
        assert_eq!(Record::decode(&encoded, &plain), Ok(record.clone()));
        for cut in [header + 2, header + 4, header + 6, header + 7] {
            assert_eq!(
                Record::decode(&encoded[..cut], &plain),
                Err(Corrupt),
                "{cut}"
            );
        }
        let mut bad_key = encoded.clone();
        bad_key[header + 1] = 0xff;
        assert_eq!(Record::decode(&bad_key, &plain), Err(Corrupt));
        let mut no_rate = spec.clone();
        no_rate.key.as_mut().unwrap().rate = None;
        let record = Record {
            spec: Cow::Borrowed(&no_rate),
            waiting: false,
            ..record
        };
        let encoded = record.encode();
        assert_eq!(encoded.len(), header + 4 + 1 + 1 + 2 + 1, "no period");
        assert_eq!(Record::decode(&encoded, &plain), Ok(record));
    }
}
