//! The embedded store's write-ahead log: what makes a group commit durable between
//! checkpoints of the redb file.
//!
//! # Ground rules
//!
//! - A batch's changes are applied to redb in a commit *without* fsync, and durable by one
//!   record appended here and `fdatasync`'d (one small sequential write instead of
//!   rewriting every B-tree page the batch touched). A batch is answered only after its
//!   record is durable. Now and then (by size or age, `store/mod.rs`) a batch is committed
//!   with redb's own fsync instead, which makes every record before it redundant: that
//!   commit is a *checkpoint*, and it bumps the store's epoch (kept in redb's `meta`
//!   table in the same commit).
//! - A record holds the *final* value of every job its batch changed (the encoded record,
//!   or a deletion), never an operation. Replaying records in order on top of any durable
//!   state at least as old as their epoch's start therefore ends in exactly the state after
//!   the last record: each job takes its last logged value, and jobs the records never
//!   name were not changed since the checkpoint.
//! - After a checkpoint, records start again at offset 0 with the new epoch, overwriting
//!   the old ones in place (the file keeps its size, so an append usually changes no file
//!   metadata). Replay reads from offset 0 and stops at the first record that is torn, of
//!   another epoch or out of sequence: old records left beyond the tail can never be read
//!   as new ones. Opening always checkpoints (bumps the epoch) before the first append.
//! - Where replay stops is a crash's tail only if no intact *synced* record of the epoch
//!   lies beyond it: a synced record's fsync made every record before it durable, so one
//!   missing before it is damage, and opening refuses it (`is_storage`) rather than drop
//!   the acknowledged changes after it. Unsynced records (extends) may be lost in any
//!   order by a power cut, so an intact unsynced one beyond the stop proves nothing.
//! - Layout of a record, little-endian: `len: u32` (of the body; its top bit set if the
//!   record was fsync'd), `seq: u64` (0, 1, ... in
//!   an epoch), `epoch: u64`, `owner: u64` (a random number the store drew when it was
//!   created: a log left beside a deleted and recreated store is never replayed into it),
//!   `check: u64` (over everything else), then the body: entries of `id_len: u16, id,
//!   tag: u8` (0: deleted; 1: followed by `len: u32` and the record; 2 and 3 the same for
//!   a recurring series' record, keyed by its name; 4 and 5 the same for a hold-off's
//!   tombstone, keyed by the job's id, its value the end of the hold-off as a `u64`; 6 and
//!   7 the same for the successor waiting for a running job (`Dedup::AllowWhileRunning`),
//!   keyed by the job's id, its value the successor's record; 8 and 9 the same for the
//!   state of a key's gate, keyed by its kind and key joined by a NUL (neither holds a
//!   control character), its value the gate's state, `store/gates.rs`).
//! - Any error writing or syncing the log stops the store (`mod.rs`): after a failed
//!   fsync the file's state is unknown, so nothing more is answered from it.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::core::error::Error;
use crate::core::state::mix;

const HEAD: usize = 4 + 8 + 8 + 8 + 8;

/// The top bit of a record's `len`: the record was fsync'd.
const SYNCED: u32 = 1 << 31;

/// The file grows by zeroed chunks of this size, so that an append rarely changes its size
/// (an `fdatasync` that must also journal a new size or block costs several times more).
const GROW: u64 = 1 << 20;

/// The log file and where its next record goes.
pub(crate) struct Wal {
    file: File,
    /// Bytes of the current epoch's records.
    len: u64,
    /// The file's size.
    size: u64,
    /// The next record's sequence number in this epoch.
    seq: u64,
    /// The store's random number, in every record.
    owner: u64,
    /// A record being built (reused).
    buf: Vec<u8>,
}

/// One job's final value in a record: its encoded record, or `None` if deleted.
pub(crate) type Change<'a> = (&'a str, Option<&'a [u8]>);

fn checksum(bytes: &[u8]) -> u64 {
    let mut h = mix(bytes.len() as u64);
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        h = mix(h ^ u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
    }
    let mut tail = [0u8; 8];
    tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    mix(h ^ u64::from_le_bytes(tail))
}

/// Appends one job's entry to a record body.
pub(crate) fn push_change(body: &mut Vec<u8>, id: &str, value: Option<&[u8]>) {
    push_entry(body, id, value, 0);
}

/// Appends one recurring series' entry to a record body.
pub(crate) fn push_series_change(body: &mut Vec<u8>, name: &str, value: Option<&[u8]>) {
    push_entry(body, name, value, 2);
}

/// Appends one hold-off tombstone's entry (its end, or `None`: deleted) to a record body.
pub(crate) fn push_held_change(body: &mut Vec<u8>, id: &str, until: Option<u64>) {
    let value = until.map(u64::to_le_bytes);
    push_entry(body, id, value.as_ref().map(|v| &v[..]), 4);
}

/// An entry: its key, then tag `deleted` (and nothing) or `deleted + 1` and the value.
fn push_entry(body: &mut Vec<u8>, id: &str, value: Option<&[u8]>, deleted: u8) {
    let id_len = u16::try_from(id.len()).expect("ids are at most 256 bytes");
    body.extend_from_slice(&id_len.to_le_bytes());
    body.extend_from_slice(id.as_bytes());
    match value {
        None => body.push(deleted),
        Some(value) => {
            body.push(deleted + 1);
            let len = u32::try_from(value.len()).expect("records are below 4 GiB");
            body.extend_from_slice(&len.to_le_bytes());
            body.extend_from_slice(value);
        }
    }
}

/// Appends one successor's entry (its record, or `None`: deleted) to a record body.
pub(crate) fn push_next_change(body: &mut Vec<u8>, id: &str, value: Option<&[u8]>) {
    push_entry(body, id, value, 6);
}

/// Appends one gate's entry (its state, or `None`: deleted) to a record body, under its
/// kind and key joined by a NUL.
pub(crate) fn push_gate_change(body: &mut Vec<u8>, gate: &str, value: Option<&[u8]>) {
    push_entry(body, gate, value, 8);
}

/// A record's changes: to jobs, to recurring series, to hold-off tombstones, to
/// successors and to gates.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Changes<'a> {
    pub(crate) jobs: Vec<Change<'a>>,
    pub(crate) series: Vec<Change<'a>>,
    /// A tombstone's id and the end of its hold-off, or `None`: deleted.
    pub(crate) held: Vec<(&'a str, Option<u64>)>,
    /// A successor's record under its running job's id, or `None`: deleted.
    pub(crate) next: Vec<Change<'a>>,
    /// A gate's state under its kind and key joined by a NUL, or `None`: deleted. Replayed
    /// after the record's jobs: it is the gate's final value in the batch.
    pub(crate) gates: Vec<Change<'a>>,
}

/// The entries of a record body; `None` if it does not parse to its end.
fn parse(mut body: &[u8]) -> Option<Changes<'_>> {
    fn take<'a>(body: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        if body.len() < n {
            return None;
        }
        let (head, rest) = body.split_at(n);
        *body = rest;
        Some(head)
    }
    let mut changes = Changes::default();
    while !body.is_empty() {
        let id_len = u16::from_le_bytes(take(&mut body, 2)?.try_into().ok()?);
        let id = std::str::from_utf8(take(&mut body, id_len.into())?).ok()?;
        let tag = take(&mut body, 1)?[0];
        let value = match tag {
            0 | 2 | 4 | 6 | 8 => None,
            1 | 3 | 5 | 7 | 9 => {
                let len = u32::from_le_bytes(take(&mut body, 4)?.try_into().ok()?);
                Some(take(&mut body, usize::try_from(len).ok()?)?)
            }
            _ => return None,
        };
        match tag {
            0 | 1 => changes.jobs.push((id, value)),
            2 | 3 => changes.series.push((id, value)),
            6 | 7 => changes.next.push((id, value)),
            8 | 9 => changes.gates.push((id, value)),
            _ => {
                let until = match value {
                    Some(v) => Some(u64::from_le_bytes(v.try_into().ok()?)),
                    None => None,
                };
                changes.held.push((id, until));
            }
        }
    }
    Some(changes)
}

impl Wal {
    /// Opens (creating if missing, owner-only like the store) the log at `path`.
    pub(crate) fn open(path: &Path) -> io::Result<Wal> {
        let file = super::open_private(path)?;
        // A new file's name is durable only once its directory is synced: without it a
        // crash could lose the file with records already answered. Every open syncs it (a
        // crash may have come between a creation and its sync).
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
        File::open(dir.unwrap_or(Path::new(".")))?.sync_all()?;
        let size = file.metadata()?.len();
        Ok(Wal {
            file,
            len: 0,
            size,
            seq: 0,
            owner: 0,
            buf: Vec::new(),
        })
    }

    /// Calls `apply` with the changes of every intact record of `owner` and `epoch`, in
    /// order, from the start of the file, and writes as `owner` from then on. Reads at most
    /// `limit` bytes of records.
    pub(crate) fn replay(
        &mut self,
        owner: u64,
        epoch: u64,
        limit: u64,
        mut apply: impl FnMut(&Changes<'_>) -> Result<(), Error>,
    ) -> Result<u64, Error> {
        self.owner = owner;
        let unreadable =
            |err: io::Error| Error::storage(format!("cannot read the write-ahead log: {err}"));
        let size = self.file.metadata().map_err(unreadable)?.len().min(limit);
        let mut bytes = vec![0u8; usize::try_from(size).map_err(Error::storage)?];
        self.file.read_exact_at(&mut bytes, 0).map_err(unreadable)?;
        let mut at = 0usize;
        let mut records = 0u64;
        while let Some(record) = intact(&bytes[at..], owner, epoch) {
            if seq_of(record) != records {
                break;
            }
            let Some(changes) = parse(&record[HEAD..]) else {
                break;
            };
            apply(&changes)?;
            records += 1;
            at += record.len();
        }
        // What stopped the replay is a crash's tail unless an intact synced record of this
        // epoch lies beyond it (see the ground rules).
        let synced_beyond = (at + 1..bytes.len())
            .any(|from| intact(&bytes[from..], owner, epoch).is_some_and(was_synced));
        if synced_beyond {
            return Err(Error::storage(
                "the write-ahead log is damaged: an intact record follows a corrupt one",
            ));
        }
        Ok(records)
    }

    /// Bytes of records in the current epoch.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Writes one record with `body` (made by [`push_change`]) at the end of the current
    /// epoch's records, then `fdatasync`s the file if `sync`.
    pub(crate) fn append(&mut self, epoch: u64, body: &[u8], sync: bool) -> io::Result<()> {
        let len = u32::try_from(body.len())
            .ok()
            .filter(|len| len & SYNCED == 0)
            .ok_or_else(|| io::Error::other("a write-ahead log record of 2 GiB or more"))?;
        let flagged = if sync { len | SYNCED } else { len };
        self.buf.clear();
        self.buf.extend_from_slice(&flagged.to_le_bytes());
        self.buf.extend_from_slice(&self.seq.to_le_bytes());
        self.buf.extend_from_slice(&epoch.to_le_bytes());
        self.buf.extend_from_slice(&self.owner.to_le_bytes());
        self.buf.extend_from_slice(&[0; 8]);
        self.buf.extend_from_slice(body);
        let check = checksum_of(&self.buf);
        self.buf[28..36].copy_from_slice(&check.to_le_bytes());
        let end = self.len + self.buf.len() as u64;
        if end > self.size {
            let size = end.div_ceil(GROW) * GROW;
            let zeros = vec![0u8; usize::try_from(size - self.size).map_err(io::Error::other)?];
            self.file.write_all_at(&zeros, self.size)?;
            self.size = size;
        }
        self.file.write_all_at(&self.buf, self.len)?;
        if sync {
            self.file.sync_data()?;
        }
        self.len += self.buf.len() as u64;
        self.seq += 1;
        Ok(())
    }

    /// A checkpoint made every record redundant: the next epoch starts at offset 0.
    pub(crate) fn restart(&mut self) {
        self.len = 0;
        self.seq = 0;
    }
}

/// The record at the start of `bytes` if it is whole, of `owner` and `epoch`, and matches
/// its checksum. (An empty body is a valid record: a batch whose changes logged nothing;
/// zeroed space fails the owner and checksum tests.)
fn intact(bytes: &[u8], owner: u64, epoch: u64) -> Option<&[u8]> {
    let head = bytes.get(..HEAD)?;
    let field = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().expect("8 bytes"));
    if field(12) != epoch || field(20) != owner {
        return None;
    }
    let len = (u32::from_le_bytes(head[0..4].try_into().expect("4 bytes")) & !SYNCED) as usize;
    let record = bytes.get(..HEAD.checked_add(len)?)?;
    (checksum_of(record) == field(28)).then_some(record)
}

/// Whether a record was fsync'd when written.
fn was_synced(record: &[u8]) -> bool {
    u32::from_le_bytes(record[0..4].try_into().expect("4 bytes")) & SYNCED != 0
}

/// A record's sequence number in its epoch.
fn seq_of(record: &[u8]) -> u64 {
    u64::from_le_bytes(record[4..12].try_into().expect("8 bytes"))
}

/// The checksum of a whole record, its `check` field read as zero.
fn checksum_of(record: &[u8]) -> u64 {
    let mut head = [0u8; HEAD];
    head[..28].copy_from_slice(&record[..28]);
    mix(checksum(&head) ^ checksum(&record[HEAD..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWNER: u64 = 0x0123_4567_89ab_cdef;

    fn body(changes: &[Change<'_>]) -> Vec<u8> {
        let mut body = Vec::new();
        for (id, value) in changes {
            push_change(&mut body, id, *value);
        }
        body
    }

    fn replayed(wal: &mut Wal, epoch: u64) -> Vec<Vec<(String, Option<Vec<u8>>)>> {
        let mut out = Vec::new();
        wal.replay(OWNER, epoch, u64::MAX, |changes| {
            out.push(
                changes
                    .jobs
                    .iter()
                    .map(|(id, v)| (id.to_string(), v.map(<[u8]>::to_vec)))
                    .collect(),
            );
            Ok(())
        })
        .unwrap();
        out
    }

    /// A log at `path` of epoch 7 holding `records` (changes, synced); their offsets.
    fn epoch_7_log(path: &Path, records: &[(&[Change<'_>], bool)]) -> Vec<u64> {
        let mut wal = Wal::open(path).unwrap();
        replayed(&mut wal, 7); // sets the owner
        records
            .iter()
            .map(|(changes, sync)| {
                let at = wal.len();
                wal.append(7, &body(changes), *sync).unwrap();
                at
            })
            .collect()
    }

    #[test]
    fn records_replay_in_order_and_stop_at_a_torn_tail_or_an_old_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal");
        let mut wal = Wal::open(&path).unwrap();
        replayed(&mut wal, 7); // sets the owner
        let first = [("a", Some(&b"one"[..])), ("b", None)];
        let second = [("a", None)];
        wal.append(7, &body(&first), true).unwrap();
        wal.append(7, &body(&second), false).unwrap();
        let third_at = wal.len();
        wal.append(7, &body(&[("c", Some(&b"three"[..]))]), true)
            .unwrap();
        let got = replayed(&mut Wal::open(&path).unwrap(), 7);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0][0], ("a".to_string(), Some(b"one".to_vec())));
        assert_eq!(got[0][1], ("b".to_string(), None));
        assert_eq!(got[1], vec![("a".to_string(), None)]);
        assert!(
            replayed(&mut Wal::open(&path).unwrap(), 8).is_empty(),
            "another epoch"
        );
        let records = Wal::open(&path)
            .unwrap()
            .replay(OWNER ^ 1, 7, u64::MAX, |_| Ok(()))
            .unwrap();
        assert_eq!(records, 0, "another store's log");

        // Tear the third record: the first two still replay.
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&[0xff], third_at + HEAD as u64 + 1)
            .unwrap();
        assert_eq!(replayed(&mut Wal::open(&path).unwrap(), 7).len(), 2);

        // A new epoch overwrites from the start; the old records behind it are never read,
        // even where a new record ends exactly where an old one began.
        let mut wal = Wal::open(&path).unwrap();
        replayed(&mut wal, 8);
        wal.restart();
        wal.append(8, &body(&first), true).unwrap();
        let got = replayed(&mut Wal::open(&path).unwrap(), 8);
        assert_eq!(got.len(), 1, "old records of epoch 7 follow, out of epoch");
    }

    /// A record damaged in the middle of the log used to end the replay quietly, dropping
    /// every acknowledged record after it; it is a storage error now.
    #[test]
    fn damage_before_an_intact_record_is_a_storage_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal");
        let at = epoch_7_log(
            &path,
            &[
                (&[("a", Some(&b"one"[..]))], true),
                (&[("b", Some(&b"two"[..]))], true),
                (&[], true),
                (&[("c", None)], true),
            ],
        );
        assert_eq!(replayed(&mut Wal::open(&path).unwrap(), 7).len(), 4);
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&[0xff], at[1] + HEAD as u64 + 1).unwrap();
        let err = Wal::open(&path)
            .unwrap()
            .replay(OWNER, 7, u64::MAX, |_| Ok(()))
            .unwrap_err();
        assert!(err.is_storage(), "{err}");
    }

    /// Records written without fsync (extends) may be lost in any order by a power cut:
    /// one lost before an intact unsynced record is a crash's tail, not damage.
    #[test]
    fn a_lost_unsynced_record_before_another_unsynced_one_is_a_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal");
        let at = epoch_7_log(
            &path,
            &[
                (&[("a", Some(&b"one"[..]))], true),
                (&[("a", Some(&b"two"[..]))], false),
                (&[("a", Some(&b"three"[..]))], false),
            ],
        );
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&[0; HEAD], at[1]).unwrap();
        let got = replayed(&mut Wal::open(&path).unwrap(), 7);
        assert_eq!(got, [vec![("a".to_string(), Some(b"one".to_vec()))]]);
    }

    /// Series entries replay beside the jobs' in the same record.
    #[test]
    fn series_entries_replay_apart_from_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal");
        let mut wal = Wal::open(&path).unwrap();
        replayed(&mut wal, 7);
        let mut record = body(&[("digest@2026-12-01T12:00:00Z", Some(&b"job"[..]))]);
        push_series_change(&mut record, "digest", Some(b"series"));
        push_series_change(&mut record, "old", None);
        wal.append(7, &record, true).unwrap();
        let mut seen = Vec::new();
        Wal::open(&path)
            .unwrap()
            .replay(OWNER, 7, u64::MAX, |changes| {
                seen.push(format!("{changes:?}"));
                assert_eq!(
                    changes.jobs,
                    [("digest@2026-12-01T12:00:00Z", Some(&b"job"[..]))]
                );
                assert_eq!(
                    changes.series,
                    [("digest", Some(&b"series"[..])), ("old", None)]
                );
                Ok(())
            })
            .unwrap();
        assert_eq!(seen.len(), 1);
    }

    /// Tombstones replay apart from jobs and series; a tombstone of the wrong size is no
    /// record.
    #[test]
    fn held_entries_replay_apart_from_jobs() {
        let mut record = body(&[("a", None)]);
        push_held_change(&mut record, "a", Some(7));
        push_held_change(&mut record, "b", None);
        let changes = parse(&record).expect("parses");
        assert_eq!(changes.jobs, [("a", None)]);
        assert_eq!(changes.held, [("a", Some(7)), ("b", None)]);
        assert!(changes.series.is_empty() && changes.next.is_empty());
        let mut bad = Vec::new();
        push_entry(&mut bad, "a", Some(b"short"), 4);
        assert_eq!(parse(&bad), None);
    }

    /// Successors replay apart from the jobs they wait for.
    #[test]
    fn next_entries_replay_apart_from_jobs() {
        let mut record = body(&[("a", Some(&b"running"[..]))]);
        push_next_change(&mut record, "a", Some(b"successor"));
        push_next_change(&mut record, "b", None);
        let changes = parse(&record).expect("parses");
        assert_eq!(changes.jobs, [("a", Some(&b"running"[..]))]);
        assert_eq!(changes.next, [("a", Some(&b"successor"[..])), ("b", None)]);
        assert!(changes.series.is_empty() && changes.held.is_empty());
        let mut bad = Vec::new();
        push_entry(&mut bad, "a", None, 10);
        assert_eq!(parse(&bad), None, "an unknown tag");
    }

    /// Gates replay apart from jobs, under their kind and key.
    #[test]
    fn gate_entries_replay_apart_from_jobs() {
        let mut record = body(&[("a", Some(&b"job"[..]))]);
        push_gate_change(&mut record, "sync\0t-1", Some(b"state"));
        push_gate_change(&mut record, "\0t-2", None);
        let changes = parse(&record).expect("parses");
        assert_eq!(changes.jobs, [("a", Some(&b"job"[..]))]);
        assert_eq!(
            changes.gates,
            [("sync\0t-1", Some(&b"state"[..])), ("\0t-2", None)]
        );
        assert!(changes.series.is_empty() && changes.held.is_empty() && changes.next.is_empty());
    }

    #[test]
    fn garbage_is_no_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal");
        std::fs::write(&path, vec![0x5a; 4096]).unwrap();
        assert!(replayed(&mut Wal::open(&path).unwrap(), 0x5a5a_5a5a_5a5a_5a5a).is_empty());
        std::fs::write(&path, vec![0; 4096]).unwrap();
        assert!(replayed(&mut Wal::open(&path).unwrap(), 0).is_empty());
    }
}
