//! Table tests of `next_after` across the 2026 daylight-saving changes of New York and
//! Berlin, month ends and leap days; the text form; and a check of cron occurrences against
//! a trivially correct model that walks real time minute by minute.

use super::*;

use proptest::prelude::*;

// ===== helpers =====

/// Nanoseconds since the epoch of an RFC 3339 time.
#[track_caller]
fn at(rfc3339: &str) -> u64 {
    nanos_of(rfc3339.parse::<Timestamp>().unwrap()).unwrap()
}

#[track_caller]
fn cron(expr: &str, zone: &str) -> Recurrence {
    Recurrence::cron(expr).unwrap().in_tz(zone).unwrap()
}

#[track_caller]
fn every(interval: Duration) -> Recurrence {
    Recurrence::every(interval).unwrap()
}

/// Checks that the first occurrence of `rule` strictly after `after` is `expect`, that
/// nothing lies between them, and that the occurrence before it is at or before `after`.
#[track_caller]
fn check(rule: &Recurrence, after: &str, expect: Option<&str>) {
    let from = at(after);
    let got = rule.next_after_nanos(from);
    assert_eq!(
        got.map(timestamp),
        expect.map(|e| timestamp(at(e))),
        "{rule} after {after}"
    );
    let Some(next) = got else { return };
    assert!(next > from);
    // Nothing in between: searching from just before it finds it again.
    assert_eq!(rule.next_after_nanos(next - 1), Some(next), "{rule}");
    // It is an occurrence, and the one before it is not after `after`.
    assert_eq!(rule.last_at_or_before_nanos(next), Some(next), "{rule}");
    if let Some(previous) = rule.last_at_or_before_nanos(next - 1) {
        assert!(
            previous <= from,
            "{rule}: {} after {after}",
            timestamp(previous)
        );
    }
    // The public call says the same in `SystemTime`.
    assert_eq!(
        rule.next_after(system_time(from)),
        Some(system_time(next)),
        "{rule}"
    );
}

/// Checks `check` along a chain: each expected occurrence is the next after the one before.
#[track_caller]
fn check_chain(rule: &Recurrence, start: &str, expect: &[&str]) {
    let mut after = start;
    for next in expect {
        check(rule, after, Some(next));
        after = next;
    }
}

#[track_caller]
fn check_invalid(result: Result<Recurrence, Error>) {
    let err = result.unwrap_err();
    assert!(err.is_invalid_recurrence(), "{err}");
}

// ===== daylight saving, 2026 =====

#[test]
fn new_york_spring_forward() {
    // 8 March 2026: 02:00 EST becomes 03:00 EDT (07:00Z); 02:00–02:59 do not exist.
    let two = cron("0 2 * * *", "America/New_York");
    check_chain(
        &two,
        "2026-03-07T00:00:00Z",
        &[
            "2026-03-07T07:00:00Z", // 02:00 EST
            "2026-03-08T07:00:00Z", // skipped: the first instant after the gap, 03:00 EDT
            "2026-03-09T06:00:00Z", // 02:00 EDT
        ],
    );
    // Minutes into the skipped hour run at the gap's end too, not 30 minutes into the new
    // hour.
    let two_thirty = cron("30 2 * * *", "America/New_York");
    check(
        &two_thirty,
        "2026-03-07T12:00:00Z",
        Some("2026-03-08T07:00:00Z"),
    );
    let one_thirty = cron("30 1 * * *", "America/New_York");
    check_chain(
        &one_thirty,
        "2026-03-07T12:00:00Z",
        &[
            "2026-03-08T06:30:00Z", // 01:30 EST, half an hour before the change
            "2026-03-09T05:30:00Z", // 01:30 EDT
        ],
    );
}

#[test]
fn new_york_fall_back() {
    // 1 November 2026: 02:00 EDT becomes 01:00 EST (06:00Z); 01:00–01:59 happen twice.
    let one_thirty = cron("30 1 * * *", "America/New_York");
    check_chain(
        &one_thirty,
        "2026-10-31T00:00:00Z",
        &[
            "2026-10-31T05:30:00Z", // 01:30 EDT
            "2026-11-01T05:30:00Z", // the first 01:30 (EDT), once
            "2026-11-02T06:30:00Z", // 01:30 EST
        ],
    );
    // From inside the second pass the repeated 01:30 does not come again.
    check(
        &one_thirty,
        "2026-11-01T06:10:00Z",
        Some("2026-11-02T06:30:00Z"),
    );
    check(
        &one_thirty,
        "2026-11-01T06:30:00Z",
        Some("2026-11-02T06:30:00Z"),
    );
    // 02:00 follows the repeated hour: once, 25 hours after the day before's.
    let two = cron("0 2 * * *", "America/New_York");
    check_chain(
        &two,
        "2026-10-31T00:00:00Z",
        &["2026-10-31T06:00:00Z", "2026-11-01T07:00:00Z"],
    );
    check(&two, "2026-11-01T06:30:00Z", Some("2026-11-01T07:00:00Z"));
}

#[test]
fn berlin_spring_forward() {
    // 29 March 2026: 02:00 CET becomes 03:00 CEST (01:00Z).
    let two = cron("0 2 * * *", "Europe/Berlin");
    check_chain(
        &two,
        "2026-03-28T00:00:00Z",
        &[
            "2026-03-28T01:00:00Z", // 02:00 CET
            "2026-03-29T01:00:00Z", // skipped: 03:00 CEST
            "2026-03-30T00:00:00Z", // 02:00 CEST
        ],
    );
    let one_thirty = cron("30 1 * * *", "Europe/Berlin");
    check_chain(
        &one_thirty,
        "2026-03-28T12:00:00Z",
        &[
            "2026-03-29T00:30:00Z", // 01:30 CET, half an hour before the change
            "2026-03-29T23:30:00Z", // 01:30 CEST
        ],
    );
}

#[test]
fn berlin_fall_back() {
    // 25 October 2026: 03:00 CEST becomes 02:00 CET (01:00Z); 02:00–02:59 happen twice.
    let two = cron("0 2 * * *", "Europe/Berlin");
    check_chain(
        &two,
        "2026-10-23T12:00:00Z",
        &[
            "2026-10-24T00:00:00Z", // 02:00 CEST
            "2026-10-25T00:00:00Z", // the first 02:00 (CEST), once
            "2026-10-26T01:00:00Z", // 02:00 CET
        ],
    );
    // The second 02:00 (01:00Z) is not an occurrence.
    check(&two, "2026-10-25T00:59:59Z", Some("2026-10-26T01:00:00Z"));
    check(&two, "2026-10-25T01:00:00Z", Some("2026-10-26T01:00:00Z"));
    let one_thirty = cron("30 1 * * *", "Europe/Berlin");
    check_chain(
        &one_thirty,
        "2026-10-24T12:00:00Z",
        &[
            "2026-10-24T23:30:00Z", // 01:30 CEST, before the repeated hour
            "2026-10-26T00:30:00Z", // 01:30 CET
        ],
    );
}

#[test]
fn wall_clock_paces_across_changes() {
    // Each wall-clock time runs once: the repeated hour's second pass runs nothing.
    let half_hourly = cron("*/30 * * * *", "America/New_York");
    check_chain(
        &half_hourly,
        "2026-11-01T05:10:00Z",
        &[
            "2026-11-01T05:30:00Z", // 01:30 EDT
            "2026-11-01T07:00:00Z", // 02:00 EST, an hour and a half later
        ],
    );
    // Several times in a skipped hour land on its end: one occurrence.
    let twenties = cron("*/20 2 * * *", "America/New_York");
    check_chain(
        &twenties,
        "2026-03-08T06:40:00Z",
        &["2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"],
    );
    // A pace in UTC is untouched by the zone's changes.
    let utc = Recurrence::cron("*/30 * * * *").unwrap();
    check_chain(
        &utc,
        "2026-11-01T05:10:00Z",
        &[
            "2026-11-01T05:30:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T06:30:00Z",
        ],
    );
}

// ===== calendar =====

#[test]
fn month_ends_and_leap_days() {
    let thirty_first = Recurrence::cron("0 0 31 * *").unwrap();
    check_chain(
        &thirty_first,
        "2026-04-01T00:00:00Z",
        &[
            "2026-05-31T00:00:00Z",
            "2026-07-31T00:00:00Z",
            "2026-08-31T00:00:00Z",
        ],
    );
    let thirtieth = Recurrence::cron("0 0 30 * *").unwrap();
    check(
        &thirtieth,
        "2026-01-30T00:00:00Z",
        Some("2026-03-30T00:00:00Z"),
    );
    let last_day = Recurrence::cron("0 12 L * *").unwrap();
    check_chain(
        &last_day,
        "2026-01-31T12:00:00Z",
        &["2026-02-28T12:00:00Z", "2026-03-31T12:00:00Z"],
    );
    check(
        &last_day,
        "2028-02-01T00:00:00Z",
        Some("2028-02-29T12:00:00Z"),
    );
    let leap_day = Recurrence::cron("0 0 29 2 *").unwrap();
    check_chain(
        &leap_day,
        "2026-03-01T00:00:00Z",
        &["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"],
    );
    // The turn of the year, from a fraction of a second before it.
    let new_month = Recurrence::cron("0 0 1 * *").unwrap();
    check(
        &new_month,
        "2026-12-31T23:59:59.5Z",
        Some("2027-01-01T00:00:00Z"),
    );
    // In a zone, a month end is the zone's.
    let tokyo = cron("0 0 L * *", "Asia/Tokyo");
    check(&tokyo, "2028-02-01T00:00:00Z", Some("2028-02-28T15:00:00Z"));
}

#[test]
fn seconds_fractions_and_weekdays() {
    let evening = Recurrence::cron("0 20 * * *").unwrap();
    // Strictly after: an occurrence is not its own next, nor is it half a second later.
    check(
        &evening,
        "2026-03-01T20:00:00Z",
        Some("2026-03-02T20:00:00Z"),
    );
    check(
        &evening,
        "2026-03-01T20:00:00.5Z",
        Some("2026-03-02T20:00:00Z"),
    );
    check(
        &evening,
        "2026-03-01T19:59:59.999999999Z",
        Some("2026-03-01T20:00:00Z"),
    );
    let ten_seconds = Recurrence::cron("*/10 * * * * *").unwrap();
    check_chain(
        &ten_seconds,
        "2026-03-01T00:00:05Z",
        &["2026-03-01T00:00:10Z", "2026-03-01T00:00:20Z"],
    );
    // 2 February 2026 is a Monday; day-of-month and day-of-week restricted: either.
    let monday = Recurrence::cron("0 0 * * MON").unwrap();
    check(
        &monday,
        "2026-02-01T00:00:00Z",
        Some("2026-02-02T00:00:00Z"),
    );
    let first_or_monday = Recurrence::cron("0 0 1 * 1").unwrap();
    check(
        &first_or_monday,
        "2026-02-02T00:00:00Z",
        Some("2026-02-09T00:00:00Z"),
    );
    let daily = Recurrence::cron("@daily").unwrap();
    check(&daily, "2026-02-01T10:00:00Z", Some("2026-02-02T00:00:00Z"));
}

#[test]
fn intervals_count_from_the_epoch() {
    let five_minutes = every(Duration::from_secs(300));
    check_chain(
        &five_minutes,
        "2026-03-01T00:01:00Z",
        &["2026-03-01T00:05:00Z", "2026-03-01T00:10:00Z"],
    );
    // Seven minutes do not divide a day: the multiples since 1970 decide.
    let seven = every(Duration::from_secs(420));
    check(&seven, "2026-03-01T00:00:00Z", Some("2026-03-01T00:06:00Z"));
    let half_second = every(Duration::from_millis(500));
    check(
        &half_second,
        "2026-03-01T00:00:00.2Z",
        Some("2026-03-01T00:00:00.5Z"),
    );
    assert_eq!(five_minutes.last_at_or_before_nanos(0), Some(0));
    assert_eq!(five_minutes.next_after_nanos(0), Some(300_000_000_000));
}

#[test]
fn the_end_of_the_range_has_no_occurrence() {
    let hourly = every(Duration::from_secs(3600));
    assert_eq!(hourly.next_after_nanos(u64::MAX - 1), None);
    // Past the range (a SystemTime can reach far beyond it) saturates: nothing follows.
    let far = SystemTime::UNIX_EPOCH + Duration::from_secs(1 << 40);
    assert_eq!(hourly.next_after(far), None);
    let yearly = Recurrence::cron("0 0 1 1 *").unwrap();
    // 2554-07-21 is the last u64 nanosecond; the next 1 January lies beyond it.
    assert_eq!(yearly.next_after_nanos(at("2554-01-02T00:00:00Z")), None);
    check(
        &yearly,
        "2553-06-01T00:00:00Z",
        Some("2554-01-01T00:00:00Z"),
    );
    // Before the epoch counts as the epoch.
    let before = SystemTime::UNIX_EPOCH - Duration::from_secs(10);
    assert_eq!(
        hourly.next_after(before),
        Some(SystemTime::UNIX_EPOCH + Duration::from_secs(3600))
    );
}

// ===== construction and the text form =====

#[test]
fn bad_input_is_refused_at_construction() {
    check_invalid(Recurrence::cron(""));
    check_invalid(Recurrence::cron("61 * * * *"));
    check_invalid(Recurrence::cron("* * *"));
    check_invalid(Recurrence::cron("0 0 0 1 1 * 2030"));
    check_invalid(Recurrence::cron("@reboot"));
    check_invalid(Recurrence::cron("0 0 30 2 *"));
    check_invalid(
        Recurrence::cron("0 0 * * *")
            .unwrap()
            .in_tz("Mars/Olympus_Mons"),
    );
    check_invalid(Recurrence::cron("0 0 * * *").unwrap().in_tz(""));
    check_invalid(Recurrence::every(Duration::ZERO));
    check_invalid(Recurrence::every(Duration::from_micros(999)));
    assert!(Recurrence::every(Recurrence::MIN_INTERVAL).is_ok());
    check_invalid(Recurrence::every(Duration::MAX));
    check_invalid(every(Duration::from_secs(60)).in_tz("UTC"));
    for text in [
        "every",
        "every 0s",
        "every 999us",
        "every 5",
        "every 5x",
        "every m",
        "every -5m",
        "every 5m in UTC",
        "every 99999999999999999999d",
        "0 20 * * * in Mars/Base",
        "0 20 * * * in",
    ] {
        check_invalid(text.parse::<Recurrence>());
    }
}

#[test]
fn text_form_round_trips() {
    let cases = [
        (
            cron("0 20 * * *", "Asia/Shanghai"),
            "0 20 * * * in Asia/Shanghai",
        ),
        (
            cron(" 0  20 *  * * ", "asia/shanghai"),
            "0 20 * * * in Asia/Shanghai",
        ),
        (
            Recurrence::cron("*/5 * * * * *").unwrap(),
            "*/5 * * * * * in UTC",
        ),
        (Recurrence::cron("@daily").unwrap(), "@daily in UTC"),
        (every(Duration::from_secs(300)), "every 5m"),
        (every(Duration::from_secs(86_400 * 2)), "every 2d"),
        (every(Duration::from_secs(90)), "every 90s"),
        (every(Duration::from_millis(1500)), "every 1500ms"),
        (every(Duration::from_micros(1007)), "every 1007us"),
        (
            every(Duration::from_nanos(u64::MAX)),
            "every 18446744073709551615ns",
        ),
    ];
    for (rule, text) in cases {
        assert_eq!(rule.to_string(), text);
        assert_eq!(format!("{rule:?}"), format!("Recurrence({text})"));
        let parsed: Recurrence = text.parse().unwrap();
        assert_eq!(parsed, rule, "{text}");
        assert_eq!(parsed.tz(), rule.tz());
    }
    // Without a zone a cron expression is UTC, and equal to its explicit form.
    assert_eq!(
        "0 20 * * *".parse::<Recurrence>().unwrap(),
        cron("0 20 * * *", "UTC")
    );
    assert_ne!(
        cron("0 20 * * *", "UTC"),
        cron("0 20 * * *", "Europe/Berlin")
    );
    assert_ne!(
        every(Duration::from_secs(60)),
        Recurrence::cron("* * * * *").unwrap()
    );
}

// ===== against a model =====

/// The occurrences of a minute-resolution `expr` in `zone` within `from..=to`, by the rule
/// of the module docs taken literally: walk real time a minute at a time, keep the highest
/// wall-clock minute seen; each instant runs the matching wall-clock minutes above the
/// previous highest and up to its own. (Every zone below changes on whole minutes.)
fn model(expr: &str, zone: &TimeZone, from: Timestamp, to: Timestamp) -> Vec<Timestamp> {
    let cron = Recurrence::cron(expr).unwrap();
    let Rule::Cron { cron, .. } = cron.rule else {
        unreachable!()
    };
    let minute = jiff::SignedDuration::from_secs(60);
    let mut highest = zone.to_datetime(from);
    let mut instant = from;
    let mut found = Vec::new();
    while instant < to {
        instant = instant.checked_add(minute).unwrap();
        let wall = zone.to_datetime(instant);
        let mut covered = highest;
        let mut runs = false;
        while covered < wall {
            covered = covered.checked_add(minute).unwrap();
            runs |= cron.is_time_matching(&covered).unwrap();
        }
        highest = highest.max(wall);
        if runs {
            found.push(instant);
        }
    }
    found
}

/// The 2026 changes of four zones, to start the model near.
const CHANGES: [(&str, &str); 8] = [
    ("America/New_York", "2026-03-08T07:00:00Z"),
    ("America/New_York", "2026-11-01T06:00:00Z"),
    ("Europe/Berlin", "2026-03-29T01:00:00Z"),
    ("Europe/Berlin", "2026-10-25T01:00:00Z"),
    // A half-hour change.
    ("Australia/Lord_Howe", "2026-04-04T15:00:00Z"),
    ("Australia/Lord_Howe", "2026-10-03T15:30:00Z"),
    // Changes at midnight: a day that starts at 01:00, and one with two midnights.
    ("America/Santiago", "2026-04-05T03:00:00Z"),
    ("America/Santiago", "2026-09-06T04:00:00Z"),
];

const EXPRS: [&str; 8] = [
    "0 2 * * *",
    "30 1 * * *",
    "30 2 * * *",
    "0 0 * * *",
    "*/30 * * * *",
    "*/20 2 * * *",
    "15 0,1,2,3,23 * * *",
    "0 * * * *",
];

proptest! {
    #[test]
    fn cron_agrees_with_the_model(
        expr in 0..EXPRS.len(),
        change in 0..CHANGES.len(),
        // Mostly within the three hours around a change, where the rules differ.
        offset in prop_oneof![3 => -(3 * 3600_i64)..(3 * 3600), 1 => -(36 * 3600_i64)..(36 * 3600)],
        fraction in 0..1_000_000_000_i64,
    ) {
        let (zone, change) = CHANGES[change];
        let tz = TimeZone::get(zone).unwrap();
        let rule = cron(EXPRS[expr], zone);
        let after = at(change)
            .checked_add_signed(offset * 1_000_000_000 + fraction)
            .unwrap();
        let day = jiff::SignedDuration::from_hours(26);
        // Whole minutes, so the model's steps land on the minutes a pattern names.
        let from = timestamp(after / 60_000_000_000 * 60_000_000_000)
            .checked_sub(day)
            .unwrap();
        let to = timestamp(after).checked_add(day).unwrap();
        let occurrences = model(EXPRS[expr], &tz, from, to);
        let next = occurrences.iter().find(|o| nanos_of(**o).unwrap() > after);
        let last = occurrences.iter().rev().find(|o| nanos_of(**o).unwrap() <= after);
        prop_assert_eq!(rule.next_after_nanos(after).map(timestamp), next.copied());
        prop_assert_eq!(rule.last_at_or_before_nanos(after).map(timestamp), last.copied());
    }

    #[test]
    fn intervals_agree_with_arithmetic(
        interval in 1_000_000..10_000_000_000_u64,
        after in 0..u64::MAX / 2,
    ) {
        let rule = every(Duration::from_nanos(interval));
        let next = rule.next_after_nanos(after).unwrap();
        prop_assert!(next > after && next - interval <= after);
        prop_assert_eq!(next % interval, 0);
        let last = rule.last_at_or_before_nanos(after).unwrap();
        prop_assert!(last <= after && last + interval > after);
        prop_assert_eq!(last % interval, 0);
    }
}
