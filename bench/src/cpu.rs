//! CPU-time and memory readings shared by the harnesses, from Linux's `/proc` (one reader,
//! not one per harness).
//!
//! Each harness uses a subset. Readers that cannot get a figure return zero (or `"?"`), so
//! a harness still runs where `/proc` is missing; its figures then say so by being zero.

use std::time::Duration;

/// `/proc` reports CPU in USER_HZ, fixed at 100 by the Linux ABI.
const USER_HZ_TICK: Duration = Duration::from_millis(10);

/// CPU time (user + system) of the whole process so far, from `/proc/self/stat` (10 ms
/// resolution; counts threads that have exited).
pub fn process_cpu() -> Duration {
    stat_cpu("/proc/self/stat")
}

/// CPU time of the calling thread, from `/proc/thread-self/schedstat` (ns), falling back to
/// `/proc/thread-self/stat` (10 ms ticks).
pub fn thread_cpu() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or_else(|| stat_cpu("/proc/thread-self/stat"), Duration::from_nanos)
}

/// CPU time of the process's live threads, from `/proc/self/task/*/schedstat` (nanosecond
/// resolution, where `/proc/self/stat` counts 10 ms ticks; threads that exit are missed, so
/// use it only over windows in which no thread exits).
pub fn threads_cpu() -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    let nanos: u64 = tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(nanos)
}

/// utime + stime of a `/proc/…/stat` file.
fn stat_cpu(path: &str) -> Duration {
    let ticks = stat_ticks(path, false).unwrap_or(0);
    USER_HZ_TICK * u32::try_from(ticks).unwrap_or(u32::MAX)
}

/// utime + stime (and with `reaped`, cutime + cstime: children waited for) of a
/// `/proc/…/stat` file, in ticks; `None` if it cannot be read.
fn stat_ticks(path: &str, reaped: bool) -> Option<u64> {
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the parenthesised command name start at field 3 ("state"); utime,
    // stime, cutime and cstime are fields 14 to 17.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<u64> = rest
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let take = if reaped { 4 } else { 2 };
    Some(fields.iter().skip(11).take(take).sum())
}

/// CPU time so far of a server that forks a process per connection (PostgreSQL's
/// postmaster, `pid`): its own, that of the children it has reaped (connections that
/// closed), and that of those still running; `None` if `/proc` does not show it. What
/// `bench/peers/pg-common.mjs` measures for the peers, read the same way.
pub fn server_cpu(pid: u32) -> Option<Duration> {
    let mut ticks = stat_ticks(&format!("/proc/{pid}/stat"), true)?;
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    for child in children.split_whitespace() {
        // One that exited since the listing is in the postmaster's cutime.
        ticks += stat_ticks(&format!("/proc/{child}/stat"), false).unwrap_or(0);
    }
    Some(USER_HZ_TICK * u32::try_from(ticks).unwrap_or(u32::MAX))
}

/// The machine's load average over the last minute, from `/proc/loadavg`.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// (all CPU time, stolen time) of the machine so far, in clock ticks, from `/proc/stat`: on a
/// virtual machine "steal" is time the host gave our vCPUs to someone else.
pub fn machine_steal() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    (
        fields.iter().take(8).sum(),
        fields.get(7).copied().unwrap_or(0),
    )
}

/// Resident set size and its peak (VmRSS, VmHWM), in bytes, from `/proc/self/status`.
pub fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}
