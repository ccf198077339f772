use super::*;

use metrics::Recorder as _;

fn key(name: &str, queue: &str) -> Key {
    Key::from_parts(
        name.to_owned(),
        vec![metrics::Label::new("queue", queue.to_owned())],
    )
}

const META: Metadata<'static> = Metadata::new("test", metrics::Level::INFO, None);

#[test]
fn a_ring_keeps_the_last_hour_and_forgets_older_minutes() {
    let mut ring = Ring::<u64>::new();
    let now = 1_000_000;
    *ring.slot(now) += 3;
    *ring.slot(now - 1) += 2;
    *ring.slot(now - 59) += 1;
    *ring.slot(now - 60) += 100; // an hour ago: the slot `now` also maps to
    let hour = ring.last_hour(now);
    assert_eq!(
        hour[59], 0,
        "the older minute reset the slot, and is not this minute"
    );
    assert_eq!((hour[58], hour[0]), (2, 1));

    *ring.slot(now) += 4; // `now` takes its slot back
    assert_eq!(ring.last_hour(now)[59], 4);
    // An hour later every slot is stale.
    assert_eq!(ring.last_hour(now + 60), [0; MINUTES]);
    // Before any minute 60: nothing to read, nothing panics.
    assert_eq!(Ring::<u64>::new().last_hour(5), [0; MINUTES]);
}

#[test]
fn quantiles_are_bucket_bounds() {
    let mut buckets = [0; BOUNDS.len() + 1];
    assert_eq!(quantile(&buckets, 0.99), None);
    buckets[bucket(0.0004)] = 99; // ≤ 0.5 ms
    buckets[bucket(0.2)] = 1; // ≤ 250 ms
    assert_eq!(quantile(&buckets, 0.99), Some(5e-4));
    assert_eq!(quantile(&buckets, 1.0), Some(0.25));
    buckets[bucket(1e9)] = 100;
    assert_eq!(quantile(&buckets, 0.99), Some(f64::INFINITY));
    assert_eq!(bucket(f64::NAN), BOUNDS.len());
    assert_eq!(bucket(0.0), 0);
    assert_eq!(bucket(1e-3), 9, "a bound is its own bucket's upper edge");
}

#[test]
fn rates_are_those_of_one_queue() {
    let recorder = Recorder::new();
    let a = recorder.register_counter(&key(DELIVERED, "a"), &META);
    let b = recorder.register_counter(&key(DELIVERED, "b"), &META);
    let failed = recorder.register_counter(&key(FAILED, "a"), &META);
    let lateness = recorder.register_histogram(&key(LATENESS, "a"), &META);
    a.increment(5);
    b.increment(2);
    failed.increment(1);
    for _ in 0..99 {
        lateness.record(0.002);
    }
    lateness.record(3.0);
    let rates = recorder.rates("a", SystemTime::now());
    assert_eq!((rates.delivered_total(), rates.failed_total()), (5, 1));
    // This minute (or the one before, if a minute began since the increments).
    assert_eq!(
        rates.delivered[MINUTES - 2] + rates.delivered[MINUTES - 1],
        5
    );
    assert_eq!(rates.lateness_p99(), Some(2.5e-3));
    let rates = recorder.rates("b", SystemTime::now());
    assert_eq!((rates.delivered_total(), rates.failed_total()), (2, 0));
    assert_eq!(rates.lateness_p99(), None);
    assert_eq!(recorder.rates("c", SystemTime::now()).delivered_total(), 0);
    // Rates are over the minutes watched since the series were registered, at most 60.
    let minute = std::time::Duration::from_secs(60);
    let watched = recorder.rates("a", SystemTime::now() + minute * 9).minutes;
    assert!((10..=11).contains(&watched), "{watched}");
    assert_eq!(
        recorder
            .rates("a", SystemTime::now() + minute * 120)
            .minutes,
        60
    );
    assert_eq!(recorder.rates("c", SystemTime::now()).minutes, 60);
    // An hour on, the rates are empty; the totals stay.
    let later = SystemTime::now() + std::time::Duration::from_secs(3_660);
    assert_eq!(recorder.rates("a", later).delivered_total(), 0);
    assert_eq!(recorder.rates("a", later).lateness_p99(), None);
}

#[test]
fn only_the_queues_series_are_kept() {
    let recorder = Recorder::new();
    let other = recorder.register_counter(&key("http_requests_total", "a"), &META);
    other.increment(1);
    let gauge = recorder.register_gauge(&Key::from_name("unrelated"), &META);
    gauge.set(1.0);
    let mut out = String::new();
    recorder.render(&mut out);
    assert_eq!(out, "");
}

#[test]
fn renders_prometheus_text() {
    let recorder = Recorder::new();
    recorder
        .register_counter(&key(DELIVERED, "a"), &META)
        .increment(3);
    // The same series registered again (a reopened queue) adds to it.
    recorder
        .register_counter(&key(DELIVERED, "a"), &META)
        .increment(1);
    recorder
        .register_counter(&key(DELIVERED, "q\"\\\n"), &META)
        .increment(1);
    let pending = recorder.register_gauge(&key("wheel_jobs_pending", "a"), &META);
    pending.set(12.0);
    pending.increment(0.5);
    let handler = recorder.register_histogram(&key("wheel_jobs_handler_seconds", "a"), &META);
    handler.record(0.003);
    handler.record(0.2);
    let mut out = String::new();
    recorder.render(&mut out);
    let expected_head = "\
# TYPE wheel_jobs_delivered_total counter
wheel_jobs_delivered_total{queue=\"a\"} 4
wheel_jobs_delivered_total{queue=\"q\\\"\\\\\\n\"} 1
# TYPE wheel_jobs_handler_seconds histogram
wheel_jobs_handler_seconds_bucket{queue=\"a\",le=\"0.000001\"} 0
";
    assert!(out.starts_with(expected_head), "{out}");
    for line in [
        "wheel_jobs_handler_seconds_bucket{queue=\"a\",le=\"0.0025\"} 0\n",
        "wheel_jobs_handler_seconds_bucket{queue=\"a\",le=\"0.005\"} 1\n",
        "wheel_jobs_handler_seconds_bucket{queue=\"a\",le=\"0.25\"} 2\n",
        "wheel_jobs_handler_seconds_bucket{queue=\"a\",le=\"+Inf\"} 2\n",
        "wheel_jobs_handler_seconds_sum{queue=\"a\"} 0.203\n",
        "wheel_jobs_handler_seconds_count{queue=\"a\"} 2\n",
        "# TYPE wheel_jobs_pending gauge\nwheel_jobs_pending{queue=\"a\"} 12.5\n",
    ] {
        assert!(out.contains(line), "{line} not in {out}");
    }
    assert_eq!(number(f64::INFINITY), "+Inf");
    assert_eq!(number(f64::NAN), "NaN");
}
