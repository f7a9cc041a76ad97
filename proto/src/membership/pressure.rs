//! Local health from the kernel's pressure stall information (PSI), for the heartbeat.
//!
//! A successor judges an owner's silence only while its own ticks come on time
//! ([`super::heartbeat`]). That misses what the beat thread never sees: on a busy host
//! the kernel defers network softirqs to `ksoftirqd`, a thread of normal priority, and
//! a beat sent on time can then wait tens of milliseconds before it reaches the socket
//! (the lab saw 24 ms under stress-ng, beside gaps of under 12 ms for the minute
//! before). The kernel reports how much of the time tasks waited for a CPU or for
//! memory (`/proc/pressure/cpu`, `/proc/pressure/memory`, the `some` line's `total`
//! microseconds). While that share is high, the silence a successor allows is
//! stretched (Lifeguard's local health multiplier); on a quiet host it is the
//! configured one, so a real failure is still found as fast.
//!
//! Sans-IO: [`Gauge::handle`] takes the counters read at an instant and returns the
//! pressure in permille; [`read`] reads them. A kernel without PSI gives no counters
//! and no stretch.

use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

/// How often the counters are read.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// Permille of pressure per step of the multiplier: under 25 % the silence is the
/// configured one, each further 25 % adds it once more.
pub const PERMILLE_PER_STEP: u16 = 250;

/// The most the multiplier adds to 1: 100 ms of silence on a saturated host with the
/// shipped 20 ms, four times the longest delivery stall seen in the lab.
pub const MAX_STEPS: u32 = 4;

/// The silence multiplier for `permille` of pressure: 1 on a quiet host, up to
/// 1 + [`MAX_STEPS`].
pub fn multiplier(permille: u16) -> u32 {
    1 + u32::from(permille / PERMILLE_PER_STEP).min(MAX_STEPS)
}

/// The `total` of a PSI file's `some` line: microseconds during which at least one task
/// waited.
pub fn some_total(psi: &str) -> Option<u64> {
    let line = psi.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace().find_map(|f| f.strip_prefix("total=")).and_then(|t| t.parse().ok())
}

/// The CPU and memory `some` totals, None where the kernel has no PSI.
pub fn read() -> Option<[u64; 2]> {
    let total = |kind: &str| some_total(&std::fs::read_to_string(format!("/proc/pressure/{kind}")).ok()?);
    Some([total("cpu")?, total("memory")?])
}

/// The pressure over the last two samples.
#[derive(Debug, Default)]
pub struct Gauge {
    last: Option<(Instant, [u64; 2])>,
    /// The share of each of the last two periods, in permille.
    recent: [u16; 2],
}

impl Gauge {
    /// Counters read at `now` (None: no PSI); returns the pressure in permille: the
    /// larger of CPU and memory, over the last two periods (a stall right after a busy
    /// period is judged as busy).
    pub fn handle(&mut self, now: Instant, totals: Option<[u64; 2]>) -> u16 {
        let Some(totals) = totals else {
            self.last = None;
            self.recent = [0, 0];
            return 0;
        };
        let share = match self.last {
            Some((then, before)) => {
                let wall = now.saturating_duration_since(then).as_micros();
                let stalled = totals.iter().zip(before).map(|(t, b)| t.saturating_sub(b)).max().unwrap_or(0);
                if wall == 0 {
                    return self.pressure();
                }
                u16::try_from((u128::from(stalled) * 1000 / wall).min(1000)).unwrap_or(1000)
            }
            None => 0,
        };
        self.last = Some((now, totals));
        self.recent = [self.recent[1], share];
        self.pressure()
    }

    /// The pressure now, in permille.
    pub fn pressure(&self) -> u16 {
        self.recent[0].max(self.recent[1])
    }
}

/// How often a change of the stretch is logged at info at most (the rest at debug).
const LOG_EVERY: Duration = Duration::from_secs(30);

/// The membership task's side: reads the counters every [`SAMPLE_EVERY`], publishes the
/// pressure to the reader thread through an atomic (no lock, no allocation there), and
/// says when the heartbeat silence starts or stops being stretched.
#[derive(Debug)]
pub struct Sampler {
    shared: Arc<AtomicU16>,
    gauge: Gauge,
    /// Whether the silence was last said to be stretched.
    stretched: bool,
    /// When a change was last logged at info.
    logged: Option<Instant>,
}

impl Sampler {
    /// A sampler publishing into `shared`.
    pub fn new(shared: Arc<AtomicU16>) -> Self {
        Sampler { shared, gauge: Gauge::default(), stretched: false, logged: None }
    }

    /// Reads the counters now and publishes the pressure; logs for member `node`.
    pub fn sample(&mut self, node: &str) {
        let now = Instant::now();
        let permille = self.gauge.handle(now, read());
        self.shared.store(permille, Ordering::Relaxed);
        let times = multiplier(permille);
        if (times > 1) == self.stretched {
            return;
        }
        self.stretched = times > 1;
        let info = self.logged.is_none_or(|t| now.duration_since(t) >= LOG_EVERY);
        let pressure = f64::from(permille) / 10.0;
        match (self.stretched, info) {
            (true, true) => tracing::info!(
                node,
                pressure,
                times,
                "membership: this host is under CPU or memory pressure (PSI, percent): heartbeat silence stretched"
            ),
            (false, true) => tracing::info!(
                node,
                pressure,
                "membership: host pressure gone (PSI, percent): the configured heartbeat silence rules again"
            ),
            (true, false) => {
                tracing::debug!(node, pressure, times, "membership: heartbeat silence stretched")
            }
            (false, false) => {
                tracing::debug!(node, pressure, "membership: heartbeat silence back to the configured one")
            }
        }
        if info {
            self.logged = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPU: &str = "some avg10=3.35 avg60=4.96 avg300=8.54 total=5625920226\n\
                       full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";

    #[test]
    fn the_some_total_is_read_from_the_kernels_format() {
        assert_eq!(some_total(CPU), Some(5_625_920_226));
        assert_eq!(some_total("full avg10=0.00 total=9\n"), None);
        assert_eq!(some_total(""), None);
    }

    #[test]
    fn the_multiplier_grows_by_step_and_is_bounded() {
        assert_eq!(multiplier(0), 1);
        assert_eq!(multiplier(249), 1);
        assert_eq!(multiplier(250), 2);
        assert_eq!(multiplier(500), 3);
        assert_eq!(multiplier(1000), 1 + MAX_STEPS);
        assert_eq!(multiplier(u16::MAX), 1 + MAX_STEPS);
    }

    /// 200 ms of stall in 250 ms is 800 ‰; it is still counted one period after a quiet
    /// one, and forgotten the period after.
    #[test]
    fn the_share_of_stalled_time_is_held_one_period() {
        let t0 = Instant::now();
        let mut g = Gauge::default();
        assert_eq!(g.handle(t0, Some([1_000, 50])), 0, "one sample is no period");
        assert_eq!(g.handle(t0 + SAMPLE_EVERY, Some([201_000, 60])), 800);
        assert_eq!(g.handle(t0 + 2 * SAMPLE_EVERY, Some([201_000, 60])), 800);
        assert_eq!(g.handle(t0 + 3 * SAMPLE_EVERY, Some([201_000, 60])), 0);
        // Memory counts as CPU does: the larger rules.
        assert_eq!(g.handle(t0 + 4 * SAMPLE_EVERY, Some([211_000, 125_060])), 500);
    }

    #[test]
    fn no_psi_or_a_counter_reset_is_no_pressure() {
        let t0 = Instant::now();
        let mut g = Gauge::default();
        g.handle(t0, Some([0, 0]));
        assert_eq!(g.handle(t0 + SAMPLE_EVERY, Some([250_000, 0])), 1000);
        assert_eq!(g.handle(t0 + 2 * SAMPLE_EVERY, None), 0);
        g.handle(t0 + 3 * SAMPLE_EVERY, Some([900_000, 0]));
        assert_eq!(g.handle(t0 + 4 * SAMPLE_EVERY, Some([10, 0])), 0, "counters that went back");
    }

    /// Where the kernel has PSI (Linux 4.20+, not booted with psi=0), both files read.
    #[test]
    fn this_kernels_counters_read_when_it_has_psi() {
        if std::path::Path::new("/proc/pressure/cpu").exists() {
            let [cpu, _] = read().expect("both PSI files parse");
            assert!(cpu > 0);
        } else {
            assert_eq!(read(), None);
        }
    }
}
