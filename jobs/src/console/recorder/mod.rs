//! [`Recorder`]: a small in-process recorder for the [`metrics`] facade, for the console's
//! rates and its `/metrics`.
//!
//! # Ground rules
//!
//! - It keeps only the queue's own series (names starting `wheel_jobs_`); anything else
//!   registered with it gets a no-op handle. Memory is bounded by the number of series,
//!   and each keeps at most [`MINUTES`] slots.
//! - Per series: the total (counters), the value (gauges), cumulative buckets, sum and count
//!   (histograms). Deliveries, failures and lateness also keep one slot per wall-clock
//!   minute of the last hour ([`Ring`]); a slot knows its minute, so a stale one is
//!   recognised and reset when reused, never shifted, and a reader ignores it.
//! - Handles are registered when a queue opens (the queue registers its handles once), so
//!   the recorder must be installed before the queue is opened; each later record is an
//!   atomic add, plus a short lock on a minute ring for the three series that have one.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::core::job::Counts;
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata,
    SharedString, Unit,
};

/// The minutes of history kept for rates: one hour.
pub(super) const MINUTES: usize = 60;

/// Histogram bucket upper bounds, in seconds: 1-2.5-5 steps from 1 µs to 1,000 s.
const BOUNDS: [f64; 28] = [
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
    5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0,
];

/// Buckets: one per bound, and one above the last.
type Buckets = [u64; BOUNDS.len() + 1];

const PREFIX: &str = "wheel_jobs_";
const DELIVERED: &str = "wheel_jobs_delivered_total";
const FAILED: &str = "wheel_jobs_failed_total";
const LATENESS: &str = "wheel_jobs_lateness_seconds";

/// An in-process recorder of a queue's metrics (the [`metrics`] facade, with the crate's
/// `metrics` feature, which `console` turns on): gives a
/// [`Console`](super::Console) its overview's rates (deliveries and failures per minute
/// over the last hour, lateness p99) and its `/metrics` page in Prometheus text.
///
/// It sees what the queues of **this process** record: deliveries, failures and lateness
/// of the consumers and workers running here, each queue under its `queue` label
/// ([`JobQueue::name`](crate::queue::JobQueue::name)); a console shows its own queue's rates, and
/// `/metrics` every series. Install it before opening the queue, as the
/// global recorder or, beside another exporter, through `metrics-util`'s
/// `FanoutBuilder`. It keeps only the `wheel_jobs_*` series.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = std::env::temp_dir().join(format!("wheel-jobs-doc-recorder-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir)?;
/// use wheel_jobs::console::{Console, Recorder};
///
/// let recorder = Recorder::new();
/// metrics::set_global_recorder(recorder.clone())?;
/// let queue = wheel_jobs::JobQueue::open(dir.join("jobs.redb")).await?;
/// let app = Console::new(queue.clone()).recorder(recorder).router();
/// # drop(app);
/// # queue.close().await?;
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct Recorder {
    series: Arc<Mutex<BTreeMap<SeriesKey, Series>>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let series = self.series.lock().map_or(0, |s| s.len());
        f.debug_struct("Recorder").field("series", &series).finish()
    }
}

/// A series: its name and its labels, sorted.
type SeriesKey = (String, Vec<(String, String)>);

#[derive(Clone)]
enum Series {
    Counter(Arc<CounterCell>),
    Gauge(Arc<GaugeCell>),
    Histogram(Arc<HistogramCell>),
}

impl Recorder {
    /// A recorder with no series yet.
    pub fn new() -> Recorder {
        Recorder::default()
    }

    fn register(&self, key: &Key, make: impl FnOnce(&str) -> Series) -> Option<Series> {
        if !key.name().starts_with(PREFIX) {
            return None;
        }
        let mut labels: Vec<(String, String)> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        labels.sort();
        let mut series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        // A queue opened again (or a second handle) adds to the same series.
        let entry = series
            .entry((key.name().to_owned(), labels))
            .or_insert_with(|| make(key.name()));
        Some(entry.clone())
    }

    fn snapshot(&self) -> Vec<(SeriesKey, Series)> {
        let series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        series.iter().map(|(k, s)| (k.clone(), s.clone())).collect()
    }

    /// Deliveries and failures per minute of the last hour, oldest first, the lateness of
    /// the first deliveries in that hour, and how many of its minutes were watched, of the
    /// queue labelled `queue` (a process may run
    /// several queues, each recorded under its own label).
    pub(super) fn rates(&self, queue: &str, now: SystemTime) -> Rates {
        let minute = minute_of(now);
        let mut rates = Rates {
            delivered: [0; MINUTES],
            failed: [0; MINUTES],
            lateness: [0; BOUNDS.len() + 1],
            minutes: MINUTES as u64,
        };
        let mut since: Option<u64> = None;
        for ((name, labels), series) in self.snapshot() {
            if !labels.iter().any(|(k, v)| k == "queue" && v == queue) {
                continue;
            }
            match (name.as_str(), series) {
                (DELIVERED, Series::Counter(c)) => {
                    add(&mut rates.delivered, &c.minutes(minute));
                    since = Some(since.map_or(c.since, |s| s.min(c.since)));
                }
                (FAILED, Series::Counter(c)) => add(&mut rates.failed, &c.minutes(minute)),
                (LATENESS, Series::Histogram(h)) => add(&mut rates.lateness, &h.last_hour(minute)),
                _ => {}
            }
        }
        if let Some(since) = since {
            // The current minute counts, however little of it has passed.
            let watched = minute.saturating_sub(since) + 1;
            rates.minutes = watched.min(MINUTES as u64);
        }
        rates
    }

    /// Every series in the Prometheus text format (version 0.0.4).
    pub(super) fn render(&self, out: &mut String) {
        // Series come sorted by name: one `# TYPE` line before the first of each name.
        let mut previous: Option<String> = None;
        for ((name, labels), series) in self.snapshot() {
            if previous.as_deref() != Some(name.as_str()) {
                let kind = match series {
                    Series::Counter(_) => "counter",
                    Series::Gauge(_) => "gauge",
                    Series::Histogram(_) => "histogram",
                };
                let _ = writeln!(out, "# TYPE {name} {kind}");
            }
            let labels = label_text(&labels);
            match &series {
                Series::Counter(c) => {
                    let total = c.total.load(Ordering::Relaxed);
                    let _ = writeln!(out, "{name}{{{labels}}} {total}");
                }
                Series::Gauge(g) => {
                    let _ = writeln!(out, "{name}{{{labels}}} {}", number(g.value()));
                }
                Series::Histogram(h) => h.render(&name, &labels, out),
            }
            previous = Some(name);
        }
    }
}

/// The counts as gauges in the Prometheus text format, for a console without a recorder:
/// the queue's own gauge names, without its `queue` label (the scrape target names it).
pub(super) fn render_counts(counts: &Counts, out: &mut String) {
    let gauges = [
        ("wheel_jobs_pending", counts.pending),
        ("wheel_jobs_running", counts.running),
        ("wheel_jobs_dead", counts.dead),
        ("wheel_jobs_paused", u64::from(counts.paused)),
    ];
    for (name, value) in gauges {
        let _ = writeln!(out, "# TYPE {name} gauge\n{name} {value}");
    }
}

fn add<const N: usize>(into: &mut [u64; N], from: &[u64; N]) {
    for (a, b) in into.iter_mut().zip(from) {
        *a += b;
    }
}

/// What the overview shows of the last hour.
pub(super) struct Rates {
    /// Deliveries per minute, oldest first; the last is the current minute.
    pub(super) delivered: [u64; MINUTES],
    pub(super) failed: [u64; MINUTES],
    lateness: Buckets,
    /// The minutes of the hour the recorder watched the queue (1 to 60): a queue opened
    /// 5 minutes ago has a rate over 5 minutes, not its total over 60.
    pub(super) minutes: u64,
}

impl Rates {
    /// The deliveries of the last hour.
    pub(super) fn delivered_total(&self) -> u64 {
        self.delivered.iter().sum()
    }

    pub(super) fn failed_total(&self) -> u64 {
        self.failed.iter().sum()
    }

    /// The 99th percentile of the hour's lateness, as the upper bound of its bucket
    /// (seconds; `f64::INFINITY` above the last): `None` without deliveries.
    pub(super) fn lateness_p99(&self) -> Option<f64> {
        quantile(&self.lateness, 0.99)
    }
}

/// The upper bound of the bucket holding quantile `q` of `buckets`.
fn quantile(buckets: &Buckets, q: f64) -> Option<f64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    // The rank of the quantile, 1-based: at least 1, at most total.
    let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut seen = 0;
    for (i, n) in buckets.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return Some(BOUNDS.get(i).copied().unwrap_or(f64::INFINITY));
        }
    }
    Some(f64::INFINITY)
}

/// Prometheus label text: `queue="orders",x="y"`, values escaped.
fn label_text(labels: &[(String, String)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{k}=\"");
        for c in v.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out
}

/// A number as Prometheus writes it.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v == f64::INFINITY {
        "+Inf".to_owned()
    } else if v == f64::NEG_INFINITY {
        "-Inf".to_owned()
    } else {
        v.to_string()
    }
}

fn minute_of(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 60)
}

fn this_minute() -> u64 {
    minute_of(SystemTime::now())
}

// ===== impl Ring =====

/// One slot per minute of the last hour, each tagged with its minute.
struct Ring<T> {
    slots: [(u64, T); MINUTES],
}

impl<T: Copy + Default> Ring<T> {
    fn new() -> Ring<T> {
        // Minute 0 is 1970: never "the last hour".
        Ring {
            slots: [(0, T::default()); MINUTES],
        }
    }

    /// The slot of `minute`, reset first if it held an older minute.
    fn slot(&mut self, minute: u64) -> &mut T {
        let slot = &mut self.slots[(minute % MINUTES as u64) as usize];
        if slot.0 != minute {
            *slot = (minute, T::default());
        }
        &mut slot.1
    }

    /// The values of the hour up to `now`, oldest first; minutes without a slot are empty.
    fn last_hour(&self, now: u64) -> [T; MINUTES] {
        let mut out = [T::default(); MINUTES];
        for (i, out) in out.iter_mut().enumerate() {
            let Some(minute) = (now + 1 + i as u64).checked_sub(MINUTES as u64) else {
                continue;
            };
            let slot = &self.slots[(minute % MINUTES as u64) as usize];
            if slot.0 == minute {
                *out = slot.1;
            }
        }
        out
    }
}

// ===== impl CounterCell =====

struct CounterCell {
    total: AtomicU64,
    minutes: Option<Mutex<Ring<u64>>>,
    /// The minute the series was registered (its queue opened): before it, nothing was
    /// watched, so those minutes do not count toward a rate.
    since: u64,
}

impl CounterCell {
    fn minutes(&self, now: u64) -> [u64; MINUTES] {
        match &self.minutes {
            Some(ring) => ring
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .last_hour(now),
            None => [0; MINUTES],
        }
    }
}

impl CounterFn for CounterCell {
    fn increment(&self, n: u64) {
        self.total.fetch_add(n, Ordering::Relaxed);
        if let Some(ring) = &self.minutes {
            *ring
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .slot(this_minute()) += n;
        }
    }

    fn absolute(&self, n: u64) {
        self.total.fetch_max(n, Ordering::Relaxed);
    }
}

// ===== impl GaugeCell =====

/// An `f64` in an `AtomicU64`'s bits.
struct GaugeCell {
    bits: AtomicU64,
}

impl GaugeCell {
    fn value(&self) -> f64 {
        f64::from_bits(self.bits.load(Ordering::Relaxed))
    }

    fn update(&self, f: impl Fn(f64) -> f64) {
        let _ = self
            .bits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some(f(f64::from_bits(bits)).to_bits())
            });
    }
}

impl GaugeFn for GaugeCell {
    fn increment(&self, v: f64) {
        self.update(|x| x + v);
    }

    fn decrement(&self, v: f64) {
        self.update(|x| x - v);
    }

    fn set(&self, v: f64) {
        self.bits.store(v.to_bits(), Ordering::Relaxed);
    }
}

// ===== impl HistogramCell =====

struct HistogramCell {
    buckets: [AtomicU64; BOUNDS.len() + 1],
    /// The sum of the values, an `f64` in bits.
    sum: GaugeCell,
    minutes: Option<Mutex<Ring<Buckets>>>,
}

/// The bucket of `v`: the first bound at or above it (NaN and above the last: the last).
fn bucket(v: f64) -> usize {
    BOUNDS.iter().position(|&b| v <= b).unwrap_or(BOUNDS.len())
}

impl HistogramCell {
    fn last_hour(&self, now: u64) -> Buckets {
        let mut total = [0; BOUNDS.len() + 1];
        if let Some(ring) = &self.minutes {
            for minute in ring
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .last_hour(now)
            {
                add(&mut total, &minute);
            }
        }
        total
    }

    fn render(&self, name: &str, labels: &str, out: &mut String) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (i, count) in self.buckets.iter().enumerate() {
            cumulative += count.load(Ordering::Relaxed);
            let le = BOUNDS.get(i).map_or("+Inf".to_owned(), |b| number(*b));
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}"
            );
        }
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", number(self.sum.value()));
        let _ = writeln!(out, "{name}_count{{{labels}}} {cumulative}");
    }
}

impl HistogramFn for HistogramCell {
    fn record(&self, v: f64) {
        let i = bucket(v);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum.increment(v);
        if let Some(ring) = &self.minutes {
            ring.lock()
                .unwrap_or_else(|p| p.into_inner())
                .slot(this_minute())[i] += 1;
        }
    }
}

// ===== impl metrics::Recorder =====

impl metrics::Recorder for Recorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let made = self.register(key, |name| {
            let minutes = [DELIVERED, FAILED].contains(&name);
            Series::Counter(Arc::new(CounterCell {
                total: AtomicU64::new(0),
                minutes: minutes.then(|| Mutex::new(Ring::new())),
                since: this_minute(),
            }))
        });
        match made {
            Some(Series::Counter(cell)) => Counter::from_arc(cell),
            _ => Counter::noop(),
        }
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let made = self.register(key, |_| {
            Series::Gauge(Arc::new(GaugeCell {
                bits: AtomicU64::new(0f64.to_bits()),
            }))
        });
        match made {
            Some(Series::Gauge(cell)) => Gauge::from_arc(cell),
            _ => Gauge::noop(),
        }
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let made = self.register(key, |name| {
            Series::Histogram(Arc::new(HistogramCell {
                buckets: std::array::from_fn(|_| AtomicU64::new(0)),
                sum: GaugeCell {
                    bits: AtomicU64::new(0f64.to_bits()),
                },
                minutes: (name == LATENESS).then(|| Mutex::new(Ring::new())),
            }))
        });
        match made {
            Some(Series::Histogram(cell)) => Histogram::from_arc(cell),
            _ => Histogram::noop(),
        }
    }
}

#[cfg(test)]
mod tests;
