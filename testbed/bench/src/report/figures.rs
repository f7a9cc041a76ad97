//! The report's SVG figures: the failover timeline, routes in the RIB over time, RSS
//! against the table size.

use super::runs::{result_of, sizes};
use crate::bgp_scale::{Outcome, ScaleResult, System as Speaker};
use crate::failover::{self, Failure, Family, Row, Takeover};
use crate::svg::{Axis, Plot};
use crate::{mib, ms};

/// Colours of answered and lost probes (Okabe-Ito, told apart by colour-blind readers too).
const ANSWERED: &str = "#009E73";
const LOST: &str = "#D55E00";

/// Each probe of a trial: when it was sent, in ms from the failure, and whether it was
/// answered.
pub(super) fn probe_times(t: &Takeover) -> Vec<(f64, bool)> {
    let lost = |i: u64| t.probes.gaps.iter().any(|g| i >= g.first && i < g.first + g.lost);
    let every = ms(t.probes.interval);
    (0..t.probes.sent).map(|i| (i as f64 * every - ms(t.failed_at), !lost(i))).collect()
}

/// The link-down, IPv4, first-trial timeline of every system: a row of probes each.
pub(super) fn timeline_svg(results: &failover::Results) -> Option<String> {
    let rows: Vec<(&Row, &Takeover)> = results
        .rows
        .iter()
        .filter(|r| r.failure == Failure::LinkDown && r.family() == Family::V4)
        .filter_map(|r| Some((r, r.trials.first()?)))
        .collect();
    if rows.is_empty() {
        return None;
    }
    let longest = rows.iter().map(|(_, t)| ms(t.outage())).fold(0.0, f64::max);
    let (lo, hi) = (-100.0, longest + 200.0);
    let height = rows.len() as f64;
    // The first system at the top.
    let y_of = |i: usize| height - i as f64 - 0.5;
    let labels = rows.iter().enumerate().map(|(i, (r, _))| (y_of(i), r.system.label())).collect();
    let mut plot = Plot::new(
        "Link down, IPv4, first trial: the client's probes (every 10 ms)",
        Axis::new("time from the failure (ms)", lo, hi),
        Axis::labelled("", 0.0, height, labels),
    );
    let (mut answered, mut lost) = (Vec::new(), Vec::new());
    for (i, (_, t)) in rows.iter().enumerate() {
        for (at, ok) in probe_times(t).into_iter().filter(|(at, _)| (lo..=hi).contains(at)) {
            if ok { &mut answered } else { &mut lost }.push((at, y_of(i)));
        }
    }
    plot.marks("answered", ANSWERED, &answered);
    plot.marks("lost", LOST, &lost);
    plot.vline("failure", "black", 0.0);
    Some(plot.render())
}

/// Prefixes in BIRD's RIB over time at size `n`, a line per speaker.
pub(super) fn prefixes_svg(scale: &[Outcome], n: u32) -> Option<String> {
    let series: Vec<(Speaker, &ScaleResult)> = scale
        .iter()
        .filter(|o| o.prefixes == n)
        .filter_map(|o| Some((o.system, o.result.as_ref().ok()?)))
        .filter(|(_, r)| !r.rib_series.is_empty())
        .collect();
    let end = series
        .iter()
        .filter_map(|(_, r)| r.rib_series.last())
        .map(|(t, _)| t.as_secs_f64())
        .fold(0.0, f64::max);
    let top = series.iter().flat_map(|(_, r)| r.rib_series.iter().map(|(_, c)| *c)).max()?.max(u64::from(n));
    let (unit, scale_by) = if end >= 2.0 { ("s", 1.0) } else { ("ms", 1000.0) };
    let mut plot = Plot::new(
        &format!("{n} prefixes: routes in BIRD's RIB from the input change"),
        Axis::new(&format!("time from the input change ({unit})"), 0.0, end * scale_by),
        Axis::new("prefixes in BIRD's RIB", 0.0, top as f64 * 1.05),
    );
    for (speaker, r) in &series {
        let points: Vec<(f64, f64)> =
            r.rib_series.iter().map(|(t, c)| (t.as_secs_f64() * scale_by, *c as f64)).collect();
        plot.line(speaker.name(), &steps(&points), false);
    }
    Some(plot.render())
}

/// `points` as steps: each value holds until the next is seen (between two polls nothing
/// is known, so no slope is drawn).
pub(super) fn steps(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len() * 2);
    for (i, p) in points.iter().enumerate() {
        if let Some(prev) = i.checked_sub(1).and_then(|i| points.get(i)) {
            out.push((p.0, prev.1));
        }
        out.push(*p);
    }
    out
}

/// Peak RSS against the number of Services / prefixes, a line per speaker.
pub(super) fn rss_svg(scale: &[Outcome]) -> Option<String> {
    let lines: Vec<(Speaker, Vec<(f64, f64)>)> = Speaker::ALL
        .iter()
        .map(|s| {
            let pts = sizes(scale)
                .into_iter()
                .filter_map(|n| Some((f64::from(n), mib(result_of(scale, *s, n)?.rss?))))
                .collect::<Vec<_>>();
            (*s, pts)
        })
        .filter(|(_, pts)| !pts.is_empty())
        .collect();
    let top = lines.iter().flat_map(|(_, p)| p.iter().map(|(_, y)| *y)).reduce(f64::max)?;
    let right = lines.iter().flat_map(|(_, p)| p.iter().map(|(x, _)| *x)).fold(0.0, f64::max);
    let mut plot = Plot::new(
        "Peak RSS of each speaker",
        Axis::new("Services / prefixes announced", 0.0, right * 1.05),
        Axis::new("peak RSS (MiB)", 0.0, top * 1.1),
    );
    for (speaker, pts) in &lines {
        plot.line(speaker.name(), pts, true);
    }
    Some(plot.render())
}
