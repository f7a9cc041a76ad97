//! The goals of issue #15, each judged on the figure it names, and how they are listed.

use std::fmt::Write as _;
use std::time::Duration;

use super::runs::{bytes_per_prefix, idle_rss, median_ratios, result_of, sizes};
use crate::bgp_scale::{Outcome, System as Speaker};
use crate::failover::{self, Failure, Family};
use crate::l2_soak::Soaked;
use crate::{Summary, fmt_ms, mib, mib_spread};

/// Whether a goal is met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The figure meets the goal.
    Met,
    /// It does not.
    NotMet,
    /// There is no figure (the measurement failed or did not run).
    Unmeasured,
}

impl Verdict {
    fn of(met: bool) -> Verdict {
        if met { Verdict::Met } else { Verdict::NotMet }
    }

    fn text(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::NotMet => "**not met**",
            Verdict::Unmeasured => "not measured",
        }
    }
}

/// A goal of issue #15, the figure it is judged on and the verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Goal {
    /// The goal, in words.
    pub goal: String,
    /// The figure measured.
    pub figure: String,
    /// Met or not.
    pub verdict: Verdict,
}

impl Goal {
    fn unmeasured(goal: String) -> Goal {
        Goal { goal, figure: "—".into(), verdict: Verdict::Unmeasured }
    }
}

/// Goals as a table.
pub(super) fn goal_table(goals: &[Goal]) -> String {
    let mut s = String::from("\n| Goal | Figure | Verdict |\n|---|---|---|\n");
    for g in goals {
        let _ = writeln!(s, "| {} | {} | {} |", g.goal, g.figure, g.verdict.text());
    }
    s
}

/// The verdicts up front: how many met, and which not, plainly.
pub(super) fn goals_summary(goals: &[Goal]) -> String {
    let met = goals.iter().filter(|g| g.verdict == Verdict::Met).count();
    let mut s = format!("## Goals\n\n{met} of {} goals met.\n", goals.len());
    for (verdict, title) in [(Verdict::NotMet, "Not met"), (Verdict::Unmeasured, "Not measured")] {
        let list: Vec<&Goal> = goals.iter().filter(|g| g.verdict == verdict).collect();
        if !list.is_empty() {
            let _ = writeln!(s, "\n{title}:\n");
            for g in list {
                let _ = writeln!(s, "- {} — {}", g.goal, g.figure);
            }
        }
    }
    if met == goals.len() {
        s.push_str("\nEvery goal is met.\n");
    }
    s.push('\n');
    s
}

/// ferrolb's outage goal per failure and family: median < 100 ms and max < 200 ms.
pub(super) fn failover_goals(results: &failover::Results) -> Vec<Goal> {
    let mut goals = Vec::new();
    for failure in Failure::ALL {
        for family in Family::ALL {
            let goal =
                format!("ferrolb L2 failover ({failure}, {family}): outage median < 100 ms, max < 200 ms");
            let row = results.rows.iter().find(|r| {
                r.system == failover::System::Ferrolb && r.failure == failure && r.family() == family
            });
            goals.push(match row.and_then(|r| Summary::of(&r.outages())) {
                Some(s) => Goal {
                    goal,
                    figure: format!("median {} ms, max {} ms", fmt_ms(s.median), fmt_ms(s.max)),
                    verdict: Verdict::of(
                        s.median < Duration::from_millis(100) && s.max < Duration::from_millis(200),
                    ),
                },
                None => Goal::unmeasured(goal),
            });
        }
    }
    goals
}

/// ferrolb's soak goal: not one owner change.
pub(super) fn soak_goals(soak: &[Soaked]) -> Vec<Goal> {
    let goal = "ferrolb L2 soak: zero false failovers".to_string();
    let Some(f) = soak.iter().find(|s| s.system == failover::System::Ferrolb) else {
        return vec![Goal::unmeasured(goal)];
    };
    let changes: usize = f.vips.iter().map(|v| v.changes.len()).sum();
    vec![Goal {
        goal,
        figure: format!("{changes} owner changes in {:.0} s ({} nodes)", f.seconds, f.nodes),
        verdict: Verdict::of(changes == 0),
    }]
}

/// ferrolb's BGP goals at every size.
pub(super) fn scale_goals(scale: &[Outcome]) -> Vec<Goal> {
    sizes(scale).into_iter().flat_map(|n| scale_goals_at(scale, n)).collect()
}

/// ferrolb's BGP goals at size `n`: within 1.2× of BIRD→BIRD, ≥ 3× ahead of GoBGP and
/// ExaBGP (to RIB, to kernel, withdraw), ≤ 5.5 bytes per prefix.
pub(super) fn scale_goals_at(scale: &[Outcome], n: u32) -> Vec<Goal> {
    let mut goals = Vec::new();
    let f = result_of(scale, Speaker::Ferrolb, n);
    let list = |x: [f64; 3]| x.map(|v| format!("{v:.2}×")).join(" / ");
    let goal = format!("{n} prefixes: ferrolb within 1.2× of BIRD→BIRD (to RIB / to kernel / withdraw)");
    goals.push(match median_ratios(scale, Speaker::Ferrolb, Speaker::Bird, n) {
        Some(x) => Goal { goal, figure: list(x), verdict: Verdict::of(x.iter().all(|v| *v <= 1.2)) },
        None => Goal::unmeasured(goal),
    });
    for other in [Speaker::Gobgp, Speaker::Exabgp] {
        let goal =
            format!("{n} prefixes: ferrolb ≥ 3× ahead of {} (to RIB / to kernel / withdraw)", other.name());
        goals.push(match median_ratios(scale, other, Speaker::Ferrolb, n) {
            Some(x) => Goal { goal, figure: list(x), verdict: Verdict::of(x.iter().all(|v| *v >= 3.0)) },
            None => Goal::unmeasured(goal),
        });
    }
    let goal = format!("{n} prefixes: ferrolb ≤ 5.5 bytes per prefix on the wire");
    goals.push(match f {
        Some(f) => {
            let b = bytes_per_prefix(f);
            Goal { goal, figure: format!("{b:.2} bytes"), verdict: Verdict::of(b <= 5.5) }
        }
        None => Goal::unmeasured(goal),
    });
    goals
}

/// ferrolb's peak RSS bounds (MiB) by Services: a size under a bound's size is held to it.
pub(super) const RSS_BOUNDS: [(u32, u64); 3] = [(10_000, 30), (50_000, 120), (100_000, 250)];

/// ferrolb's bound at rest (MiB).
pub(super) const IDLE_RSS_BOUND: u64 = 8;

/// ferrolb's RSS at rest, judged on its largest; then its peak RSS goal at each size up
/// to 100 000.
pub(super) fn memory_goals(scale: &[Outcome]) -> Vec<Goal> {
    let mut goals = Vec::new();
    let goal = format!("ferrolb RSS at rest < {IDLE_RSS_BOUND} MiB (Established, no routes; every run)");
    goals.push(match idle_rss(scale, Speaker::Ferrolb) {
        Some(r) => Goal {
            goal,
            figure: format!("{} MiB", mib_spread(&r)),
            verdict: Verdict::of(r.max < IDLE_RSS_BOUND << 20),
        },
        None => Goal::unmeasured(goal),
    });
    for n in sizes(scale) {
        let Some((at, bound)) = RSS_BOUNDS.iter().find(|(at, _)| n <= *at) else { continue };
        let goal = if n == *at {
            format!("ferrolb peak RSS < {bound} MiB at {n} Services")
        } else {
            format!("ferrolb peak RSS < {bound} MiB at {n} Services (the bound for {at})")
        };
        goals.push(match result_of(scale, Speaker::Ferrolb, n).and_then(|r| r.rss) {
            Some(b) => Goal {
                goal,
                figure: format!("{:.1} MiB", mib(b)),
                verdict: Verdict::of(b < bound * (1 << 20)),
            },
            None => Goal::unmeasured(goal),
        });
    }
    goals
}
