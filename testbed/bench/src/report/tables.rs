//! The report's sections: a table per bench, its goals beneath it.

use std::fmt::Write as _;
use std::time::Duration;

use super::Report;
use super::goals::{Goal, goal_table, scale_goals_at};
use super::runs::{TIMES, bytes_per_prefix, idle_rss, ratio, result_of, runs_of, sizes};
use crate::bgp_scale::{Outcome, ScaleResult, System as Speaker};
use crate::failover::{self, Family, Row};
use crate::{Summary, fmt_ms, mib, mib_spread};

/// `min | median | max` cells, or dashes.
pub(super) fn summary_cells(s: Option<Summary>) -> String {
    s.map_or_else(
        || "— | — | —".into(),
        |s| format!("{} | {} | {}", fmt_ms(s.min), fmt_ms(s.median), fmt_ms(s.max)),
    )
}

/// The failover table's row of one (system, failure, family).
pub(super) fn failover_row(r: &Row) -> String {
    let moved = r.moved();
    let stuck = moved.iter().filter(|m| m.is_none()).count();
    let moved: Vec<Duration> = moved.into_iter().flatten().collect();
    format!(
        "| {} | {} | {} | {} | {} | {stuck} of {} |",
        r.system.label(),
        r.failure,
        r.family(),
        summary_cells(Summary::of(&r.outages())),
        summary_cells(Summary::of(&moved)),
        r.trials.len()
    )
}

pub(super) fn failover_section(r: &Report, goals: &[Goal], timeline: &str) -> String {
    let mut s = format!(
        "## L2 failover\n\n\
         The node owning an IPv4 and an IPv6 VIP fails, {} trials per system, failure and family, \
         each system in a lab of its own; the client probes each VIP every 10 ms. \
         *kill*: the owner's daemon is SIGKILLed, its link left up. *link*: the owner's LAN link \
         goes down, its daemon alive. Outage: the longest run of unanswered probes. Moved: from \
         the failure to the client's neighbour entry pointing at another node (`ip -ts monitor \
         neigh`). Times in ms.\n\n\
         | System | Failure | Family | Outage min | median | max | Moved min | median | max | Not moved |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
        r.trials
    );
    for row in &r.failover.rows {
        let _ = writeln!(s, "{}", failover_row(row));
    }
    s.push_str(&handover_text(&r.failover.handovers));
    s.push_str(&goal_table(goals));
    if !timeline.is_empty() {
        s.push_str("\nLink down, IPv4, first trial of each system: every probe, answered or lost, from the failure.\n");
        s.push_str(timeline);
    }
    s.push('\n');
    s
}

pub(super) fn handover_text(handovers: &[failover::Handover]) -> String {
    if handovers.is_empty() {
        return String::new();
    }
    let zero = handovers.iter().filter(|h| h.lost() == 0).count();
    let mut s = format!(
        "\nferrolb SIGTERM handover (the owner's speaker SIGTERMed, then the VIPs leave its `lo`): \
         {zero} of {} trials with zero lost probes.\n\n| Trial | Exit code | Probes sent / lost |\n|---:|---:|---|\n",
        handovers.len()
    );
    for (i, h) in handovers.iter().enumerate() {
        let probes: Vec<String> =
            h.probes.iter().map(|(v, p)| format!("{} {} / {}", Family::of(*v), p.sent, p.lost())).collect();
        let exit = h.exit.map_or("none within 15 s".into(), |c| c.to_string());
        let _ = writeln!(s, "| {} | {exit} | {} |", i + 1, probes.join(", "));
    }
    s
}

pub(super) fn soak_section(r: &Report, goals: &[Goal]) -> String {
    let mut s = format!(
        "## L2 soak\n\n\
         `stress-ng` keeps every core busy for {} s while the client probes each VIP every 10 ms. \
         Nothing fails, so every owner change is a false failover.\n\n\
         | System | VIP | Seconds | Probes sent | Lost | Longest gap (ms) | Owner changes |\n\
         |---|---|---:|---:|---:|---:|---:|\n",
        r.soak_seconds
    );
    for soaked in &r.soak {
        for v in &soaked.vips {
            let _ = writeln!(
                s,
                "| {} | {} | {:.1} | {} | {} | {} | {} |",
                soaked.label(),
                v.vip,
                soaked.seconds,
                v.probes.sent,
                v.probes.lost(),
                fmt_ms(v.probes.max_outage()),
                v.changes.len()
            );
        }
    }
    s.push_str(&goal_table(goals));
    s.push('\n');
    s
}

pub(super) fn scale_section(scale: &[Outcome], figure: impl Fn(u32) -> String) -> String {
    let mut s = String::from(
        "## BGP scale\n\n\
         N /32 prefixes announced by one speaker on node1 to BIRD 2 on r1 (eBGP), each speaker \
         empty and Established before the clock starts; times run from the speaker's input change \
         (ferrolb: a static file of N Services; BIRD: an included file and `birdc configure`; \
         GoBGP: `gobgp mrt inject`; ExaBGP: API lines). BIRD as the speaker is the reference. \
         Times in ms; × BIRD is the ratio to BIRD→BIRD. The figures show, as steps, the networks in \
         r1's RIB just before the input change, then at each 5 ms poll once it returned.\n",
    );
    let runs = sizes(scale).first().map_or(0, |n| runs_of(scale, Speaker::Bird, *n).count());
    if runs > 1 {
        let _ = write!(
            s,
            "\nEvery speaker ran {runs} times at each size, the speakers in turn within a run. A row is \
             the speaker's run with the median time to RIB, its ratios to BIRD's such run; a goal \
             judges the median of the ratios within each run.\n"
        );
    }
    for n in sizes(scale) {
        let _ = write!(
            s,
            "\n### {n} prefixes\n\n\
             | Speaker | Input | To RIB | × BIRD | To kernel | × BIRD | Withdraw | × BIRD | Bytes/prefix | UPDATEs | Peak RSS (MiB) |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        );
        let reference = result_of(scale, Speaker::Bird, n);
        let mut speakers: Vec<Speaker> = Vec::new();
        for o in scale.iter().filter(|o| o.prefixes == n) {
            if !speakers.contains(&o.system) {
                speakers.push(o.system);
            }
        }
        for speaker in speakers {
            // The median run; a speaker never measured shows its first failure.
            let row = match result_of(scale, speaker, n) {
                Some(r) => Some(scale_result_row(r, reference)),
                None => runs_of(scale, speaker, n).next().map(|o| scale_row(o, reference)),
            };
            if let Some(row) = row {
                let _ = writeln!(s, "{row}");
            }
        }
        s.push_str(&goal_table(&scale_goals_at(scale, n)));
        s.push_str(&figure(n));
    }
    s.push('\n');
    s
}

/// One speaker's row at one size; ratios to `reference` where there is one.
pub(super) fn scale_row(o: &Outcome, reference: Option<&ScaleResult>) -> String {
    let r = match &o.result {
        Ok(r) => r,
        Err(e) => {
            let e = e.to_string().replace('|', "\\|").replace('\n', " ");
            return format!("| {} | failed: {e} | | | | | | | | | |", o.system.label(o.prefixes));
        }
    };
    scale_result_row(r, reference)
}

/// A measured speaker's row; ratios to `reference` where there is one.
pub(super) fn scale_result_row(r: &ScaleResult, reference: Option<&ScaleResult>) -> String {
    let times: Vec<String> = TIMES
        .iter()
        .map(|t| {
            let x = reference.map_or("—".into(), |b| format!("{:.2}", ratio(t(r), t(b))));
            format!("{} | {x}", fmt_ms(t(r)))
        })
        .collect();
    format!(
        "| {} | {} | {} | {:.1} | {} | {} |",
        r.system,
        fmt_ms(r.input),
        times.join(" | "),
        bytes_per_prefix(r),
        r.updates.map_or("—".into(), |u| u.to_string()),
        r.rss.map_or("—".into(), |b| format!("{:.1}", mib(b)))
    )
}

pub(super) fn memory_section(scale: &[Outcome], goals: &[Goal], figure: &str) -> String {
    let sizes = sizes(scale);
    let mut s = String::from(
        "## Memory\n\nRSS of each speaker, MiB: at rest (VmRSS when Established with no routes, \
         min / median / max over its runs), then the peak (VmHWM) by Services / prefixes.\n\n\
         | Speaker | At rest |",
    );
    for n in &sizes {
        let _ = write!(s, " {n} |");
    }
    let _ = write!(s, "\n|---|---:|{}\n", "---:|".repeat(sizes.len()));
    for speaker in Speaker::ALL {
        let mut cells = vec![idle_rss(scale, speaker).map_or("—".into(), |r| mib_spread(&r))];
        cells.extend(sizes.iter().map(|n| {
            result_of(scale, speaker, *n)
                .and_then(|r| r.rss)
                .map_or("—".into(), |b| format!("{:.1}", mib(b)))
        }));
        let _ = writeln!(s, "| {} | {} |", speaker.name(), cells.join(" | "));
    }
    s.push_str(&goal_table(goals));
    s.push_str(figure);
    s
}
