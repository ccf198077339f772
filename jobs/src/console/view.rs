//! How the console shows values: times, counts, states and payloads, as plain strings the
//! templates escape. Pure functions of their arguments ("now" is passed in).

use std::time::{Duration, SystemTime};

use crate::core::job::{JobInfo, JobState};

/// The most of a payload a page shows: payloads may be up to 512 MiB, a page stays small.
pub(super) const PAYLOAD_SHOWN: usize = 64 << 10;

/// A wall-clock time, absolute (UTC) and relative to now.
pub(super) struct Time {
    pub(super) utc: String,
    pub(super) relative: String,
}

pub(super) fn time(at: SystemTime, now: SystemTime) -> Time {
    let utc = match jiff::Timestamp::try_from(at) {
        Ok(ts) => format!("{ts:.0}"),
        Err(_) => "beyond the year 9999".to_owned(),
    };
    let relative = match at.duration_since(now) {
        Ok(ahead) if ahead < Duration::from_secs(1) => "now".to_owned(),
        Ok(ahead) => format!("in {}", span(ahead)),
        Err(behind) if behind.duration() < Duration::from_secs(1) => "now".to_owned(),
        Err(behind) => format!("{} ago", span(behind.duration())),
    };
    Time { utc, relative }
}

/// `d` in its two largest units, rounded down: "2d 3h", "5m 10s", "42s".
fn span(d: Duration) -> String {
    const UNITS: [(u64, &str); 4] = [(86_400, "d"), (3_600, "h"), (60, "m"), (1, "s")];
    let mut secs = d.as_secs();
    let mut parts = Vec::with_capacity(2);
    for (size, name) in UNITS {
        if secs >= size || (parts.len() == 1) {
            parts.push(format!("{}{name}", secs / size));
            secs %= size;
        }
        if parts.len() == 2 {
            break;
        }
    }
    parts.join(" ")
}

/// The limits of a job's key for people, like "at most 2 running, 10 starts per 1m";
/// `None` if its key has none.
pub(super) fn key_limits(job: &JobInfo) -> Option<String> {
    let mut limits = Vec::new();
    if let Some(limit) = job.key_limit() {
        limits.push(format!("at most {limit} running"));
    }
    if let Some((starts, per)) = job.key_rate() {
        let ms = per.as_millis();
        let per = [(3_600_000, "h"), (60_000, "m"), (1_000, "s")]
            .into_iter()
            .find(|&(size, _)| ms.is_multiple_of(size))
            .map_or(format!("{ms}ms"), |(size, unit)| {
                format!("{}{unit}", ms / size)
            });
        limits.push(format!("{starts} starts per {per}"));
    }
    (!limits.is_empty()).then(|| limits.join(", "))
}

/// `n` with thousands separated: "10,000,000".
pub(super) fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub(super) fn state(state: JobState) -> &'static str {
    match state {
        JobState::Pending => "pending",
        JobState::Running => "running",
        JobState::Dead => "dead",
    }
}

/// The first line of an error, at most 160 characters (a list shows one line per job).
pub(super) fn first_line(error: &str) -> String {
    const MAX: usize = 160;
    let line = error.lines().next().unwrap_or("");
    match line.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None if line.len() < error.trim_end().len() => format!("{line} …"),
        None => line.to_owned(),
    }
}

/// A total over `minutes` (at least 1) as a rate per minute: "12.5".
pub(super) fn per_minute(total: u64, minutes: u64) -> String {
    let minutes = minutes.max(1);
    let tenths = (total * 10 + minutes / 2) / minutes;
    format!("{}.{}", count(tenths / 10), tenths % 10)
}

/// A histogram bucket's upper bound in seconds, as "≤ 2.5 ms".
pub(super) fn at_most(seconds: f64) -> String {
    if seconds.is_infinite() {
        return "over 1,000 s".to_owned();
    }
    let (value, unit) = if seconds < 1e-3 {
        (seconds * 1e6, "µs")
    } else if seconds < 1.0 {
        (seconds * 1e3, "ms")
    } else {
        (seconds, "s")
    };
    // The bounds are 1-2.5-5 steps: at most one decimal.
    let value = (value * 10.0).round() / 10.0;
    format!("≤ {value} {unit}")
}

/// Bars of deliveries and failures per minute, as SVG geometry the template draws.
pub(super) struct Chart {
    pub(super) bars: Vec<Bar>,
    /// The tallest minute's deliveries (the chart's scale).
    pub(super) max: String,
}

pub(super) struct Bar {
    pub(super) x: usize,
    pub(super) delivered_y: u64,
    pub(super) delivered_h: u64,
    pub(super) failed_y: u64,
    pub(super) failed_h: u64,
    pub(super) title: String,
}

/// The chart's height in SVG units; bars are [`BAR_WIDTH`] apart.
pub(super) const CHART_HEIGHT: u64 = 60;
pub(super) const BAR_WIDTH: usize = 10;

/// A bar per minute, oldest first (`delivered` and `failed` end with the current minute).
pub(super) fn chart(delivered: &[u64], failed: &[u64], now: SystemTime) -> Chart {
    let max = delivered.iter().chain(failed).copied().max().unwrap_or(0);
    // Any non-zero minute gets at least one unit of height, so it shows.
    let height = |n: u64| match n {
        0 => 0,
        n => (n * CHART_HEIGHT).div_ceil(max.max(1)),
    };
    let minute = |ago: usize| {
        let at = now - Duration::from_secs(60 * ago as u64);
        jiff::Timestamp::try_from(at)
            .map_or_else(|_| "?".to_owned(), |ts| ts.strftime("%H:%M").to_string())
    };
    let bars = delivered
        .iter()
        .zip(failed)
        .enumerate()
        .map(|(i, (&d, &f))| Bar {
            x: i * BAR_WIDTH,
            delivered_y: CHART_HEIGHT - height(d),
            delivered_h: height(d),
            failed_y: CHART_HEIGHT - height(f),
            failed_h: height(f),
            title: format!(
                "{} UTC: {d} delivered, {f} failed",
                minute(delivered.len() - 1 - i)
            ),
        })
        .collect();
    Chart {
        bars,
        max: count(max),
    }
}

/// A payload as a page shows it: UTF-8 text when it is text, else hex; at most
/// [`PAYLOAD_SHOWN`] bytes of it.
pub(super) struct Payload {
    pub(super) len: usize,
    pub(super) shown: usize,
    pub(super) text: Option<String>,
    pub(super) hex: String,
}

pub(super) fn payload(bytes: &[u8]) -> Payload {
    let shown = bytes.len().min(PAYLOAD_SHOWN);
    let head = &bytes[..shown];
    // A cut can split a character: what is valid up to it is still text.
    let text = match std::str::from_utf8(head) {
        Ok(text) => Some(text.to_owned()),
        Err(e) if shown < bytes.len() && e.error_len().is_none() => {
            Some(String::from_utf8_lossy(&head[..e.valid_up_to()]).into_owned())
        }
        Err(_) => None,
    };
    let hex = if text.is_some() {
        String::new()
    } else {
        head.iter().map(|b| format!("{b:02x}")).collect()
    };
    Payload {
        len: bytes.len(),
        shown,
        text,
        hex,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check_span(secs: u64, expected: &str) {
        assert_eq!(span(Duration::from_secs(secs)), expected);
    }

    #[test]
    fn spans_keep_two_units() {
        check_span(1, "1s");
        check_span(59, "59s");
        check_span(60, "1m 0s");
        check_span(3_599, "59m 59s");
        check_span(3_600, "1h 0m");
        check_span(48 * 3_600 + 61, "2d 0h");
        check_span(86_400 + 3 * 3_600 + 59, "1d 3h");
    }

    #[test]
    fn times_are_utc_and_relative() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let t = time(now + Duration::from_secs(90), now);
        assert_eq!(t.utc, "2023-11-14T22:14:50Z");
        assert_eq!(t.relative, "in 1m 30s");
        assert_eq!(
            time(now - Duration::from_secs(7_200), now).relative,
            "2h 0m ago"
        );
        assert_eq!(time(now, now).relative, "now");
        let far = SystemTime::UNIX_EPOCH + Duration::from_nanos(u64::MAX);
        assert_eq!(time(far, now).utc, "2554-07-21T23:34:33Z");
    }

    #[test]
    fn first_lines_are_short() {
        assert_eq!(first_line("boom"), "boom");
        assert_eq!(first_line("boom\n  at handler.rs:3"), "boom …");
        assert_eq!(first_line("boom\n"), "boom");
        assert_eq!(first_line(""), "");
        let long = "é".repeat(200);
        assert_eq!(first_line(&long), format!("{}…", "é".repeat(160)));
    }

    #[test]
    fn rates_and_bounds() {
        assert_eq!(per_minute(0, 60), "0.0");
        assert_eq!(per_minute(60, 60), "1.0");
        assert_eq!(per_minute(90, 60), "1.5");
        assert_eq!(per_minute(600_000, 60), "10,000.0");
        // Over the minutes watched, not the whole hour.
        assert_eq!(per_minute(30, 5), "6.0");
        assert_eq!(per_minute(3, 1), "3.0");
        assert_eq!(per_minute(7, 0), "7.0");
        assert_eq!(at_most(2.5e-3), "≤ 2.5 ms");
        assert_eq!(at_most(1e-6), "≤ 1 µs");
        assert_eq!(at_most(0.25), "≤ 250 ms");
        assert_eq!(at_most(10.0), "≤ 10 s");
        assert_eq!(at_most(f64::INFINITY), "over 1,000 s");
    }

    #[test]
    fn charts_scale_to_the_busiest_minute() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000); // 22:13 UTC
        let chart = chart(&[0, 1, 120], &[0, 0, 30], now);
        assert_eq!(chart.max, "120");
        let heights: Vec<_> = chart
            .bars
            .iter()
            .map(|b| (b.delivered_h, b.failed_h))
            .collect();
        assert_eq!(heights, [(0, 0), (1, 0), (60, 15)]);
        assert_eq!(chart.bars[2].delivered_y, 0);
        assert_eq!(chart.bars[2].x, 2 * BAR_WIDTH);
        assert_eq!(chart.bars[2].title, "22:13 UTC: 120 delivered, 30 failed");
        assert_eq!(chart.bars[0].title, "22:11 UTC: 0 delivered, 0 failed");
    }

    #[test]
    fn counts_are_grouped() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1_000), "1,000");
        assert_eq!(count(10_000_000), "10,000,000");
        assert_eq!(count(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn payloads_are_text_or_hex_and_bounded() {
        let p = payload(b"5 stars");
        assert_eq!((p.text.as_deref(), p.len, p.shown), (Some("5 stars"), 7, 7));
        let p = payload(&[0xff, 0x00, 0x10]);
        assert_eq!((p.text, p.hex.as_str()), (None, "ff0010"));

        let mut big = vec![b'a'; PAYLOAD_SHOWN - 1];
        big.extend("é and more".as_bytes()); // 'é' straddles the cut
        let p = payload(&big);
        assert_eq!(p.shown, PAYLOAD_SHOWN);
        assert_eq!(p.text.map(|t| t.len()), Some(PAYLOAD_SHOWN - 1));
    }
}
