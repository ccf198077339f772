//! Reading durations and times from the command line, and showing jobs, times and payloads
//! as text and as JSON.

use std::time::{Duration, SystemTime};

use jiff::{SignedDuration, Span, SpanRelativeTo, Timestamp};
use serde_json::{json, Value};
use wheel_jobs::{Counts, JobInfo, JobState};

/// `--in`: `48h`, `2d 3h`, `90s`, `1.5h`, `500ms` (a day is 24 hours), or ISO 8601 `PT48H`.
pub fn parse_delay(s: &str) -> Result<Duration, String> {
    parse_duration(s, "a delay")
}

/// The duration of `--dedup hold-off=DURATION`, written as for [`parse_delay`].
pub fn parse_hold_off(s: &str) -> Result<Duration, String> {
    parse_duration(s, "a hold-off")
}

/// `--key-rate STARTS/DURATION`: at most `STARTS` (at least 1) starts of the key per
/// `DURATION` (written as for [`parse_delay`]), like `10/1m`.
pub fn parse_key_rate(s: &str) -> Result<(u32, Duration), String> {
    let (starts, per) = s
        .split_once('/')
        .ok_or("a rate is STARTS/DURATION, like 10/1m")?;
    let starts: u32 = starts
        .trim()
        .parse()
        .map_err(|_| format!("{starts:?} is not a number of starts"))?;
    if starts == 0 {
        return Err("a rate needs at least 1 start".to_owned());
    }
    Ok((starts, parse_duration(per.trim(), "a rate's period")?))
}

/// A job's key and its limits for people, like `tenant-7 (at most 2 running, 10 starts per
/// 1m)`; `None` without a key.
fn key_text(job: &JobInfo) -> Option<String> {
    let key = escape(job.key()?);
    let mut limits = Vec::new();
    if let Some(limit) = job.key_limit() {
        limits.push(format!("at most {limit} running"));
    }
    if let Some((starts, per)) = job.key_rate() {
        limits.push(format!("{starts} starts per {}", span(per)));
    }
    Some(match limits.is_empty() {
        true => key,
        false => format!("{key} ({})", limits.join(", ")),
    })
}

/// A period for people, in its largest whole unit: `1h`, `90m`, `250ms`.
fn span(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0ms".to_owned();
    }
    let (n, unit) = [(3_600_000, "h"), (60_000, "m"), (1_000, "s"), (1, "ms")]
        .into_iter()
        .find(|&(size, _)| ms.is_multiple_of(size))
        .map_or((ms, "ms"), |(size, unit)| (ms / size, unit));
    format!("{n}{unit}")
}

/// A duration as [`parse_delay`] reads it; `what` names it when it is negative.
fn parse_duration(s: &str, what: &str) -> Result<Duration, String> {
    let span: Span = s
        .parse()
        .map_err(|err| format!("not a duration (like 48h, 2d 3h, 90s): {err}"))?;
    let signed = span
        .to_duration(SpanRelativeTo::days_are_24_hours())
        .map_err(|err| format!("months and years vary in length: give days or less ({err})"))?;
    Duration::try_from(signed).map_err(|_| format!("{what} cannot be negative"))
}

/// `--at`: an RFC 3339 time with its offset, `2026-12-01T20:00:00+08:00` or `…Z`.
pub fn parse_time(s: &str) -> Result<SystemTime, String> {
    let at: Timestamp = s.parse().map_err(|err| {
        format!("not an RFC 3339 time with an offset (like 2026-12-01T20:00:00+08:00): {err}")
    })?;
    Ok(SystemTime::from(at))
}

pub fn state(state: JobState) -> &'static str {
    match state {
        JobState::Pending => "pending",
        JobState::Running => "running",
        JobState::Dead => "dead",
    }
}

/// RFC 3339 in UTC, to the nanosecond when it has them (for scripts).
pub fn time(at: SystemTime) -> String {
    match Timestamp::try_from(at) {
        Ok(ts) => ts.to_string(),
        Err(_) => "beyond the year 9999".to_owned(),
    }
}

/// RFC 3339 in UTC, to the second (for people).
pub fn time_text(at: SystemTime) -> String {
    match Timestamp::try_from(at) {
        Ok(ts) => format!("{ts:.0}"),
        Err(_) => "beyond the year 9999".to_owned(),
    }
}

/// `in 2h 5m 3s` or `4s ago`, to the second.
fn relative(at: SystemTime, now: SystemTime) -> String {
    let (secs, ago) = match at.duration_since(now) {
        Ok(ahead) => (ahead.as_secs(), false),
        Err(behind) => (behind.duration().as_secs(), true),
    };
    if secs == 0 {
        return "now".to_owned();
    }
    let span = SignedDuration::from_secs(i64::try_from(secs).unwrap_or(i64::MAX));
    if ago {
        format!("{span:#} ago")
    } else {
        format!("in {span:#}")
    }
}

/// The payload as text if it is UTF-8, else hex; and which of the two.
fn payload(bytes: &[u8]) -> (String, &'static str) {
    match std::str::from_utf8(bytes) {
        Ok(text) => (text.to_owned(), "utf-8"),
        Err(_) => (bytes.iter().map(|b| format!("{b:02x}")).collect(), "hex"),
    }
}

/// `s` for a terminal: control characters (C0, DEL, C1) written as escapes (`\u{1b}`), so
/// an id, a payload or an error cannot move the cursor, retitle the window or forge lines.
/// JSON output needs none of this: serde_json escapes controls itself.
pub fn escape(s: &str) -> String {
    escape_keeping(s, &[])
}

/// [`escape`], but newlines and tabs are kept: for a payload or an error shown whole.
fn escape_lines(s: &str) -> String {
    escape_keeping(s, &['\n', '\t'])
}

fn escape_keeping(s: &str, keep: &[char]) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() && !keep.contains(&c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// A kind for people: `(none)` for the kind `""` of jobs scheduled without one.
pub fn kind(kind: &str) -> String {
    match kind {
        "" => "(none)".to_owned(),
        kind => escape(kind),
    }
}

pub fn job_json(job: &JobInfo) -> Value {
    let (payload, encoding) = payload(job.payload());
    json!({
        "id": job.id(),
        "state": state(job.state()),
        "kind": job.kind(),
        "priority": job.priority(),
        "run_at": time(job.run_at()),
        "attempt": job.attempt(),
        "max_attempts": job.max_attempts(),
        "last_error": job.last_error(),
        "successor_run_at": job.successor().map(time),
        "key": job.key(),
        "key_limit": job.key_limit(),
        "key_rate": job.key_rate().map(|(starts, per)| json!({
            "starts": starts,
            "per_ms": u64::try_from(per.as_millis()).unwrap_or(u64::MAX),
        })),
        "payload": payload,
        "payload_encoding": encoding,
    })
}

pub fn job_text(job: &JobInfo, now: SystemTime) -> String {
    let (payload, encoding) = payload(job.payload());
    let payload = match encoding {
        "hex" => format!("({} bytes, hex) {payload}", job.payload().len()),
        _ => escape_lines(&payload),
    };
    // A multi-line error keeps its lines, indented under the first.
    let error = job.last_error().map_or("none".to_owned(), |e| {
        escape_lines(e).replace('\n', "\n         ")
    });
    // A successor (`Dedup::AllowWhileRunning`) only when one waits.
    let successor = job.successor().map_or(String::new(), |at| {
        format!(
            "\nnext     a successor due at {} ({}), once this job is acked or dies",
            time_text(at),
            relative(at, now)
        )
    });
    // A key (fairness per key) only when the job has one.
    let key = key_text(job).map_or(String::new(), |k| format!("\nkey      {k}"));
    format!(
        "id       {}\nstate    {}\nkind     {}{key}\npriority {}\nrun_at   {} ({})\n\
         attempt  {} of {}\nerror    {error}{successor}\npayload  {payload}",
        escape(job.id()),
        state(job.state()),
        kind(job.kind()),
        job.priority(),
        time_text(job.run_at()),
        relative(job.run_at(), now),
        job.attempt(),
        job.max_attempts(),
    )
}

/// One line per job of a list: id, kind, priority, due, attempt, the error's first line.
pub fn row_text(job: &JobInfo, now: SystemTime) -> String {
    let error = job
        .last_error()
        .and_then(|e| e.lines().next())
        .unwrap_or("");
    let key = job
        .key()
        .map_or(String::new(), |k| format!("  key {}", escape(k)));
    format!(
        "{}  kind {}{key}  priority {}  {} ({})  attempt {}  {}",
        escape(job.id()),
        kind(job.kind()),
        job.priority(),
        time_text(job.run_at()),
        relative(job.run_at(), now),
        job.attempt(),
        escape(error),
    )
    .trim_end()
    .to_owned()
}

pub fn counts_json(counts: &Counts) -> Value {
    json!({
        "pending": counts.pending,
        "running": counts.running,
        "dead": counts.dead,
        "paused": counts.paused,
        "next_due": counts.next_due.map(time),
        "kinds": counts
            .kinds
            .iter()
            .map(|(kind, c)| {
                let counts = json!({ "pending": c.pending, "running": c.running, "dead": c.dead });
                (kind.clone(), counts)
            })
            .collect::<serde_json::Map<_, _>>(),
    })
}

pub fn counts_text(counts: &Counts, now: SystemTime) -> String {
    let next = counts.next_due.map_or("none pending".to_owned(), |at| {
        format!("{} ({})", time_text(at), relative(at, now))
    });
    let mut text = format!(
        "pending   {}\nrunning   {}\ndead      {}\npaused    {}\nnext due  {next}",
        counts.pending,
        counts.running,
        counts.dead,
        if counts.paused { "yes" } else { "no" },
    );
    // A table of the kinds with a job, each on its line: pending, running, dead.
    if !counts.kinds.is_empty() {
        let names: Vec<String> = counts.kinds.keys().map(|k| kind(k)).collect();
        let width = names.iter().map(|n| n.chars().count()).fold(4, usize::max);
        text.push_str(&format!(
            "\n\n{:width$}  {:>9}  {:>9}  {:>9}",
            "kind", "pending", "running", "dead"
        ));
        for (name, c) in names.iter().zip(counts.kinds.values()) {
            text.push_str(&format!(
                "\n{name:width$}  {:>9}  {:>9}  {:>9}",
                c.pending, c.running, c.dead
            ));
        }
    }
    text
}

/// A change per second, signed: `+12.5/s`, `0/s`.
pub fn rate(from: u64, to: u64, seconds: f64) -> String {
    let change = (to as f64 - from as f64) / seconds.max(1e-9);
    if change == 0.0 {
        "0/s".to_owned()
    } else {
        format!("{change:+.1}/s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays() {
        let h = Duration::from_secs(3600);
        assert_eq!(parse_delay("48h"), Ok(h * 48));
        assert_eq!(parse_delay("2d 3h"), Ok(h * 51));
        assert_eq!(parse_delay("1.5h"), Ok(h * 3 / 2));
        assert_eq!(parse_delay("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_delay("PT48H"), Ok(h * 48));
        assert_eq!(parse_delay("0s"), Ok(Duration::ZERO));
        assert!(parse_delay("48x")
            .unwrap_err()
            .starts_with("not a duration"));
        assert!(parse_delay("").unwrap_err().starts_with("not a duration"));
        assert_eq!(
            parse_delay("-5m").unwrap_err(),
            "a delay cannot be negative"
        );
        assert_eq!(
            parse_hold_off("-5s").unwrap_err(),
            "a hold-off cannot be negative"
        );
        assert_eq!(parse_hold_off("5s"), Ok(Duration::from_secs(5)));
        assert!(parse_delay("1mo")
            .unwrap_err()
            .starts_with("months and years"));
    }

    #[test]
    fn key_rates_and_their_periods() {
        assert_eq!(parse_key_rate("10/1m"), Ok((10, Duration::from_secs(60))));
        assert_eq!(
            parse_key_rate(" 3 / 500ms "),
            Ok((3, Duration::from_millis(500)))
        );
        assert!(parse_key_rate("0/1m").is_err());
        assert!(parse_key_rate("x/1m").is_err());
        assert!(parse_key_rate("10").is_err());
        assert_eq!(
            parse_key_rate("1/-1s").unwrap_err(),
            "a rate's period cannot be negative"
        );
        let span_of = |ms| span(Duration::from_millis(ms));
        assert_eq!(
            [
                span_of(60_000),
                span_of(5_400_000),
                span_of(250),
                span_of(1_500),
                span_of(0)
            ],
            ["1m", "90m", "250ms", "1500ms", "0ms"]
        );
    }

    #[test]
    fn times() {
        let at = parse_time("2026-12-01T20:00:00+08:00").unwrap();
        assert_eq!(time(at), "2026-12-01T12:00:00Z");
        assert_eq!(parse_time("2026-12-01T12:00:00Z"), Ok(at));
        assert!(parse_time("2026-12-01T20:00:00")
            .unwrap_err()
            .starts_with("not an RFC 3339 time with an offset"));
        assert_eq!(
            time(SystemTime::UNIX_EPOCH + Duration::from_nanos(1_500)),
            "1970-01-01T00:00:00.0000015Z"
        );
    }

    #[test]
    fn controls_are_escaped_for_terminals() {
        // ESC ] 0 ; title BEL, CSI 2 J, a C1 CSI, DEL, a carriage return.
        let hostile = "a\x1b]0;pwned\x07b\x1b[2J\u{9b}1m\x7f\r\nc\td";
        assert_eq!(
            escape(hostile),
            "a\\u{1b}]0;pwned\\u{7}b\\u{1b}[2J\\u{9b}1m\\u{7f}\\u{d}\\u{a}c\\u{9}d"
        );
        assert_eq!(
            escape_lines(hostile),
            "a\\u{1b}]0;pwned\\u{7}b\\u{1b}[2J\\u{9b}1m\\u{7f}\\u{d}\nc\td"
        );
        assert_eq!(escape("5 stars, ünïcode"), "5 stars, ünïcode");
    }

    #[test]
    fn rates_are_signed_per_second() {
        assert_eq!(rate(10, 10, 1.0), "0/s");
        assert_eq!(rate(10, 35, 2.0), "+12.5/s");
        assert_eq!(rate(35, 10, 0.5), "-50.0/s");
    }

    #[test]
    fn relative_times() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let s = Duration::from_secs;
        assert_eq!(relative(now + s(3 * 3600 + 5), now), "in 3h 5s");
        assert_eq!(relative(now - s(4), now), "4s ago");
        assert_eq!(relative(now, now), "now");
    }
}
