//! Which BGP scale run stands for a speaker at a size, and how two speakers' runs compare:
//! shared by the goals, the tables and the figures so that they all speak of one run.

use std::time::Duration;

use crate::Summary;
use crate::bgp_scale::{Outcome, ScaleResult, System as Speaker};

/// The BGP table sizes measured, in order.
pub(super) fn sizes(scale: &[Outcome]) -> Vec<u32> {
    let mut v: Vec<u32> = scale.iter().map(|o| o.prefixes).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The runs of `speaker` at size `n`, in the order they ran (failed ones too).
pub(super) fn runs_of(scale: &[Outcome], speaker: Speaker, n: u32) -> impl Iterator<Item = &Outcome> {
    scale.iter().filter(move |o| o.system == speaker && o.prefixes == n)
}

/// The figures of `speaker` at size `n`: its measured run with the median time to RIB
/// (the lower middle one of an even count), if any run was measured.
pub(super) fn result_of(scale: &[Outcome], speaker: Speaker, n: u32) -> Option<&ScaleResult> {
    let mut measured: Vec<&ScaleResult> =
        runs_of(scale, speaker, n).filter_map(|o| o.result.as_ref().ok()).collect();
    measured.sort_by_key(|r| r.to_rib);
    measured.get(measured.len().saturating_sub(1) / 2).copied()
}

/// `a`'s times over `b`'s (to RIB, to kernel, withdraw) at size `n`, each the median of
/// the ratios within the runs where both were measured (as `bench bgp-scale --runs`
/// prints it): the machine's noise moves both speakers of one run alike, and one slow
/// run does not decide a goal.
pub(super) fn median_ratios(scale: &[Outcome], a: Speaker, b: Speaker, n: u32) -> Option<[f64; 3]> {
    let pairs: Vec<(&ScaleResult, &ScaleResult)> = runs_of(scale, a, n)
        .zip(runs_of(scale, b, n))
        .filter_map(|(x, y)| Some((x.result.as_ref().ok()?, y.result.as_ref().ok()?)))
        .collect();
    let median = |t: fn(&ScaleResult) -> Duration| {
        let ratios: Vec<f64> = pairs.iter().map(|(x, y)| ratio(t(x), t(y))).collect();
        Summary::of(&ratios).map(|s| s.median)
    };
    Some([median(TIMES[0])?, median(TIMES[1])?, median(TIMES[2])?])
}

/// The three times compared: to RIB, to kernel, withdraw.
pub(super) const TIMES: [fn(&ScaleResult) -> Duration; 3] = [|r| r.to_rib, |r| r.to_kernel, |r| r.withdraw];

/// `a / b`, a zero `b` making it infinite (1 when both are zero).
pub(super) fn ratio(a: Duration, b: Duration) -> f64 {
    match (a.is_zero(), b.is_zero()) {
        (true, true) => 1.0,
        (_, true) => f64::INFINITY,
        _ => a.as_secs_f64() / b.as_secs_f64(),
    }
}

pub(super) fn bytes_per_prefix(r: &ScaleResult) -> f64 {
    r.bytes as f64 / f64::from(r.prefixes.max(1))
}

/// `speaker`'s RSS at rest over all its runs.
pub(super) fn idle_rss(scale: &[Outcome], speaker: Speaker) -> Option<Summary<u64>> {
    let xs: Vec<u64> = scale
        .iter()
        .filter(|o| o.system == speaker)
        .filter_map(|o| o.result.as_ref().ok()?.idle_rss)
        .collect();
    Summary::of(&xs)
}
