//! Listing a queue's jobs a page at a time: [`ListOptions`], [`Page`] and the [`Cursor`] that
//! resumes a listing.
//!
//! # Ground rules
//!
//! - A listing is a keyset walk of one state's index: `Pending` by `(run_at, id)` and
//!   `Running` by `(lease end, id)` ascending, `Dead` by `(died_at, id)` descending. A [`Cursor`] is the
//!   position `(at, id)` of a page's last job; the next page starts strictly after it, so
//!   jobs inserted or removed between pages never make the walk return a job twice or skip
//!   one that stayed where it was.
//! - A cursor carries its state and a check: garbage, a cut or edited cursor, or a cursor
//!   of another state is refused with [`Error::is_invalid_input`], never read as some other
//!   position.
//! - Limits are checked here, once for every backend: 1 to [`ListOptions::MAX_LIMIT`].

use std::fmt;
use std::str::FromStr;

use crate::core::error::Error;
use crate::core::job::{JobInfo, JobState, MAX_ID_LEN};
use crate::core::kind::check_kind;

/// A job's place in its state's list: its time key (nanoseconds) and its id.
pub(crate) type Position<'a> = (u64, &'a str);

/// Which jobs [`JobQueue::list`](crate::JobQueue::list) returns: how many, and from where.
///
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOptions {
    limit: usize,
    after: Option<Cursor>,
    payloads: bool,
    kind: Option<String>,
}

impl Default for ListOptions {
    fn default() -> Self {
        ListOptions::new()
    }
}

impl ListOptions {
    /// The most jobs one page may hold.
    pub const MAX_LIMIT: usize = 1_000;

    /// The first page of up to 100 jobs.
    pub fn new() -> ListOptions {
        ListOptions {
            limit: 100,
            after: None,
            payloads: true,
            kind: None,
        }
    }

    /// At most `jobs` jobs in the page: 1 to [`MAX_LIMIT`](Self::MAX_LIMIT) (1,000), else
    /// `list` fails with [`Error::is_invalid_input`].
    pub fn limit(&mut self, jobs: usize) -> &mut Self {
        self.limit = jobs;
        self
    }

    /// The page after the one `cursor` came from ([`Page::cursor`]).
    pub fn after(&mut self, cursor: &Cursor) -> &mut Self {
        self.after = Some(cursor.clone());
        self
    }

    /// Whether the page carries each job's payload (the default). `false` leaves every
    /// [`JobInfo::payload`](crate::JobInfo::payload) empty, for a listing that shows ids,
    /// times, attempts and errors: a page of 1,000 jobs of 1 MiB payloads is then not
    /// copied (embedded) nor sent over the network (Redis). The web console lists this way.
    pub fn payloads(&mut self, with: bool) -> &mut Self {
        self.payloads = with;
        self
    }

    /// Only jobs of `kind` (`""`: jobs scheduled without one). A cursor continues the
    /// filtered list it came from.
    pub fn kind(&mut self, kind: &str) -> &mut Self {
        self.kind = Some(kind.to_owned());
        self
    }

    /// The kind the listing is limited to ([`kind`](Self::kind)).
    pub(crate) fn kind_filter(&self) -> Option<&str> {
        self.kind.as_deref()
    }

    /// Whether pages carry payloads ([`payloads`](Self::payloads)).
    pub(crate) fn with_payloads(&self) -> bool {
        self.payloads
    }

    /// The limit and the position to start after, checked for a listing of `state`.
    pub(crate) fn checked(&self, state: JobState) -> Result<(usize, Option<Position<'_>>), Error> {
        if self.limit == 0 || self.limit > Self::MAX_LIMIT {
            return Err(Error::invalid_input(format!(
                "a page holds 1 to {} jobs, not {}",
                Self::MAX_LIMIT,
                self.limit
            )));
        }
        if let Some(kind) = &self.kind {
            check_kind(kind)?;
        }
        let after = match &self.after {
            None => None,
            Some(cursor) if cursor.state == state => Some((cursor.at, cursor.id.as_str())),
            Some(cursor) => {
                return Err(Error::invalid_input(format!(
                    "a cursor of the {:?} list cannot continue the {state:?} list",
                    cursor.state
                )))
            }
        };
        Ok((self.limit, after))
    }
}

/// One page of a listing, from [`JobQueue::list`](crate::JobQueue::list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    jobs: Vec<JobInfo>,
    cursor: Option<Cursor>,
}

impl Page {
    /// Builds a page from up to `limit + 1` jobs a backend read after the requested position,
    /// each with its position `at`: the extra one only tells that a next page exists.
    pub(crate) fn new(state: JobState, limit: usize, mut read: Vec<(u64, JobInfo)>) -> Page {
        let more = read.len() > limit;
        read.truncate(limit);
        let cursor = match read.last() {
            Some((at, job)) if more => Some(Cursor {
                state,
                at: *at,
                id: job.id().to_owned(),
            }),
            _ => None,
        };
        Page {
            jobs: read.into_iter().map(|(_, job)| job).collect(),
            cursor,
        }
    }

    /// The jobs, in the state's order.
    pub fn jobs(&self) -> &[JobInfo] {
        &self.jobs
    }

    /// The jobs, owned.
    pub fn into_jobs(self) -> Vec<JobInfo> {
        self.jobs
    }

    /// Where the next page starts ([`ListOptions::after`]); `None` if no job followed this
    /// page when it was read.
    pub fn cursor(&self) -> Option<&Cursor> {
        self.cursor.as_ref()
    }
}

/// Where a listing stopped: pass it to [`ListOptions::after`] for the next page.
///
/// Its text form ([`Display`](fmt::Display), [`FromStr`]) is URL-safe, for a console or a
/// command line to hand back. A cursor stays valid while jobs come and go: the next page
/// starts after the position of the last job shown, wherever that job is now.
///
/// # Examples
///
/// ```
/// use wheel_jobs::Cursor;
///
/// let err = "not-a-cursor".parse::<Cursor>().unwrap_err();
/// assert!(err.is_invalid_input());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Cursor {
    state: JobState,
    at: u64,
    id: String,
}

/// The first byte of a cursor's bytes: a later layout gets a new number.
const CURSOR_VERSION: u8 = 1;

fn state_byte(state: JobState) -> u8 {
    match state {
        JobState::Pending => 0,
        JobState::Running => 1,
        JobState::Dead => 2,
    }
}

/// 32 bits of a splitmix chain over `bytes`: any change to a cursor's text shows.
fn check(bytes: &[u8]) -> u32 {
    let h = bytes
        .iter()
        .fold(crate::core::state::mix(bytes.len() as u64), |h, &b| {
            crate::core::state::mix(h ^ u64::from(b))
        });
    h as u32
}

impl Cursor {
    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + 1 + 8 + self.id.len() + 4);
        out.push(CURSOR_VERSION);
        out.push(state_byte(self.state));
        out.extend_from_slice(&self.at.to_le_bytes());
        out.extend_from_slice(self.id.as_bytes());
        let sum = check(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    fn from_bytes(bytes: &[u8]) -> Option<Cursor> {
        let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(4)?)?;
        if check(body).to_le_bytes() != sum {
            return None;
        }
        let (&[version, state], rest) = body.split_first_chunk::<2>()?;
        let (at, id) = rest.split_first_chunk::<8>()?;
        let state = match state {
            0 => JobState::Pending,
            1 => JobState::Running,
            2 => JobState::Dead,
            _ => return None,
        };
        if version != CURSOR_VERSION || id.is_empty() || id.len() > MAX_ID_LEN {
            return None;
        }
        Some(Cursor {
            state,
            at: u64::from_le_bytes(*at),
            id: String::from_utf8(id.to_vec()).ok()?,
        })
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.bytes() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cursor({self})")
    }
}

impl FromStr for Cursor {
    type Err = Error;

    /// Parses a cursor's text form.
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_input`] for anything but the text of a cursor.
    fn from_str(text: &str) -> Result<Cursor, Error> {
        let garbage = || Error::invalid_input("not a job list cursor");
        if !text.len().is_multiple_of(2) || text.len() > 2 * (1 + 1 + 8 + MAX_ID_LEN + 4) {
            return Err(garbage());
        }
        // `from_str_radix` also takes a sign (`+f` is 15): a cursor has one text only.
        if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(garbage());
        }
        let bytes = (0..text.len())
            .step_by(2)
            .map(|i| {
                let pair = text.get(i..i + 2)?;
                u8::from_str_radix(pair, 16).ok()
            })
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(garbage)?;
        Cursor::from_bytes(&bytes).ok_or_else(garbage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: &str) -> JobInfo {
        let spec = crate::core::config::Config::default()
            .defaults()
            .plain()
            .clone();
        JobInfo::new(
            id.to_owned(),
            JobState::Pending,
            7,
            0,
            None,
            Vec::new(),
            spec,
        )
    }

    fn cursor(state: JobState, at: u64, id: &str) -> Cursor {
        Cursor {
            state,
            at,
            id: id.to_owned(),
        }
    }

    #[test]
    fn a_cursor_round_trips_through_its_text() {
        for c in [
            cursor(JobState::Pending, 0, "a"),
            cursor(JobState::Running, u64::MAX, "rate:order-42"),
            cursor(JobState::Dead, 1_700_000_000_123_456_789, &"é".repeat(128)),
        ] {
            let text = c.to_string();
            assert!(text.bytes().all(|b| b.is_ascii_hexdigit()), "{text}");
            assert_eq!(text.parse::<Cursor>().unwrap(), c);
        }
    }

    #[test]
    fn garbage_and_edited_cursors_are_refused() {
        let good = cursor(JobState::Dead, 42, "job-1").to_string();
        let mut bad = vec![
            String::new(),
            "0".into(),
            "zz".into(),
            "not a cursor".into(),
            good[..good.len() - 2].into(),
            format!("{good}00"),
            "é".repeat(8),
        ];
        // Every single-character edit of a valid cursor, and every `0x` byte written `+x`
        // (which `u8::from_str_radix` reads as the same byte).
        for i in 0..good.len() {
            let mut edited = good.clone().into_bytes();
            edited[i] = if edited[i] == b'0' { b'1' } else { b'0' };
            bad.push(String::from_utf8(edited).unwrap());
            if i % 2 == 0 && good.as_bytes()[i] == b'0' {
                let mut signed = good.clone().into_bytes();
                signed[i] = b'+';
                bad.push(String::from_utf8(signed).unwrap());
            }
        }
        assert!(bad.iter().any(|b| b.contains('+')), "{good}");
        for text in bad {
            let err = text.parse::<Cursor>().unwrap_err();
            assert!(err.is_invalid_input(), "{text:?}: {err}");
        }
    }

    #[test]
    fn limits_and_cursor_states_are_checked() {
        let mut options = ListOptions::new();
        assert_eq!(options.checked(JobState::Pending).unwrap(), (100, None));
        for bad in [0, ListOptions::MAX_LIMIT + 1, usize::MAX] {
            let err = options.limit(bad).checked(JobState::Pending).unwrap_err();
            assert!(err.is_invalid_input(), "{bad}: {err}");
        }
        options
            .limit(ListOptions::MAX_LIMIT)
            .after(&cursor(JobState::Dead, 9, "x"));
        assert_eq!(
            options.checked(JobState::Dead).unwrap(),
            (ListOptions::MAX_LIMIT, Some((9, "x")))
        );
        for other in [JobState::Pending, JobState::Running] {
            let err = options.checked(other).unwrap_err();
            assert!(err.is_invalid_input(), "{err}");
        }
    }

    #[test]
    fn a_page_has_a_cursor_only_when_a_job_followed_it() {
        let read = |n: usize| (0..n).map(|i| (i as u64, info(&format!("j{i}")))).collect();
        let full = Page::new(JobState::Pending, 2, read(3));
        assert_eq!(full.jobs().len(), 2);
        assert_eq!(full.cursor(), Some(&cursor(JobState::Pending, 1, "j1")));
        let last = Page::new(JobState::Pending, 2, read(2));
        assert_eq!((last.jobs().len(), last.cursor()), (2, None));
        let empty = Page::new(JobState::Pending, 2, read(0));
        assert_eq!((empty.jobs().len(), empty.cursor()), (0, None));
    }
}
