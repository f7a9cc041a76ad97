//! `ferrolb-testbed bench …`: figures printed side by side with the systems ferrolb is
//! measured against, in the same run. Benchmarks print; they never pass or fail on time.

pub mod active_active;
pub mod apiserver_failover;
pub mod bfd;
pub mod bgp_scale;
mod bird_ctl;
pub mod builds;
pub mod controller_memory;
pub mod document;
pub mod failover;
pub mod file_latency;
pub mod kube_replan;
pub mod l2_soak;
pub mod membership_scale;
pub mod plan;
pub mod report;
pub mod scale;
pub mod speaker_memory;
pub mod svg;
pub mod whole_path;

use std::time::Duration;

/// min / median / max of a set of durations (or of other values, e.g. ratios).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary<T = Duration> {
    /// Smallest.
    pub min: T,
    /// Median (the lower middle for an even count).
    pub median: T,
    /// Largest.
    pub max: T,
}

impl<T: Copy + PartialOrd> Summary<T> {
    /// Summarises `xs`; None when empty.
    pub fn of(xs: &[T]) -> Option<Summary<T>> {
        let mut v = xs.to_vec();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        Some(Summary { min: *v.first()?, median: v[(v.len() - 1) / 2], max: *v.last()? })
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "min {:>7.0} ms  median {:>7.0} ms  max {:>7.0} ms",
            ms(self.min),
            ms(self.median),
            ms(self.max)
        )
    }
}

/// Milliseconds as a float, for printing.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Bytes in MiB, for printing.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

/// A duration in milliseconds, a decimal below 10 ms.
pub fn fmt_ms(d: Duration) -> String {
    fmt_millis(ms(d))
}

/// Milliseconds for printing: one decimal below 10.
pub fn fmt_millis(v: f64) -> String {
    if v < 10.0 { format!("{v:.1}") } else { format!("{v:.0}") }
}

/// "min / median / max" of byte counts, in MiB.
pub fn mib_spread(r: &Summary<u64>) -> String {
    format!("{:.1} / {:.1} / {:.1}", mib(r.min), mib(r.median), mib(r.max))
}

/// Peak resident set size of a process (VmHWM), in bytes.
pub fn peak_rss(pid: i32) -> Option<u64> {
    proc_status_bytes(pid, "VmHWM:")
}

/// Resident set size of a process now (VmRSS), in bytes.
pub fn rss(pid: i32) -> Option<u64> {
    proc_status_bytes(pid, "VmRSS:")
}

/// The resident set of a process now split as (anonymous, file-backed), in bytes: heap
/// and stacks against mapped files, mostly the binary's own text.
pub fn rss_split(pid: i32) -> Option<(u64, u64)> {
    Some((proc_status_bytes(pid, "RssAnon:")?, proc_status_bytes(pid, "RssFile:")?))
}

/// A `kB` field of `/proc/PID/status`, in bytes.
fn proc_status_bytes(pid: i32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 =
        status.lines().find_map(|l| l.strip_prefix(field))?.split_whitespace().next()?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_orders_values() {
        let ms = Duration::from_millis;
        let s = Summary::of(&[ms(30), ms(10), ms(20), ms(40)]).unwrap();
        assert_eq!((s.min, s.median, s.max), (ms(10), ms(20), ms(40)));
        assert!(Summary::<Duration>::of(&[]).is_none());
        let r = Summary::of(&[2.0, 1.0, 4.0, 3.0]).unwrap();
        assert_eq!((r.min, r.median, r.max), (1.0, 2.0, 4.0));
        let r = Summary::of(&[1.5, 0.9, 1.2]).unwrap();
        assert_eq!((r.min, r.median, r.max), (0.9, 1.2, 1.5));
    }

    #[test]
    fn own_peak_rss_is_readable() {
        assert!(peak_rss(std::process::id() as i32).unwrap() > 0);
    }
}
