//! The report rendered from made-up figures: tables, verdicts, well-formed figures.
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use super::figures::*;
use super::goals::*;
use super::machine::*;
use super::tables::*;
use super::*;
use crate::bgp_scale::ScaleResult;
use crate::failover::{Failure, Handover, Row, System, Takeover};
use crate::l2_soak::SoakedVip;
use crate::svg::tests::check_svg;
use ferrolb_lab::client::{Gap, ProbeReport};

const MS: fn(u64) -> Duration = Duration::from_millis;

fn v4() -> IpAddr {
    "192.0.2.200".parse().unwrap()
}

fn v6() -> IpAddr {
    "2001:db8::200".parse().unwrap()
}

/// 100 probes every 10 ms, the failure at 500 ms, and `outage` ms of them lost from there.
fn trial(outage: u64, moved: Option<u64>) -> Takeover {
    let lost = outage / 10;
    let gaps =
        if lost == 0 { Vec::new() } else { vec![Gap { first: 50, lost, at: MS(500), outage: MS(outage) }] };
    Takeover {
        vip: v4(),
        moved: moved.map(MS),
        failed_at: MS(495),
        probes: ProbeReport { sent: 100, received: 100 - lost, interval: MS(10), gaps },
    }
}

fn row(system: System, failure: Failure, vip: IpAddr, outages: &[u64]) -> Row {
    let trials = outages.iter().map(|o| Takeover { vip, ..trial(*o, Some(o + 5)) }).collect();
    Row { system, failure, vip, trials }
}

fn scale(system: Speaker, n: u32, times: [u64; 3], bytes: u64, rss_mib: u64) -> Outcome {
    let rib_series = (0..=10).map(|i| (MS(times[0] * i / 10), u64::from(n) * i / 10)).collect();
    let result = Ok(ScaleResult {
        system: system.label(n),
        prefixes: n,
        input: MS(3),
        to_rib: MS(times[0]),
        to_kernel: MS(times[1]),
        withdraw: MS(times[2]),
        updates: Some(7),
        bytes,
        rss: Some(rss_mib << 20),
        idle_rss: Some(rss_mib << 18),
        rib_series,
    });
    Outcome { system, prefixes: n, result }
}

fn soaked(system: System, nodes: usize, changes: usize) -> Soaked {
    let change = failover::MacChange { addr: v4(), at: UNIX_EPOCH, mac: "00:00:5e:00:53:12".into() };
    Soaked {
        system,
        nodes,
        start: UNIX_EPOCH,
        seconds: 20.0,
        vips: vec![SoakedVip {
            vip: v4(),
            probes: ProbeReport { sent: 2000, received: 1998, interval: MS(10), gaps: Vec::new() },
            changes: vec![change; changes],
            arp: None,
        }],
        failovers: Vec::new(),
    }
}

fn report() -> Report {
    let keepalived = System::KeepalivedV3(MS(100));
    let rows = vec![
        row(System::Ferrolb, Failure::LinkDown, v4(), &[40, 60, 90]),
        row(System::Ferrolb, Failure::LinkDown, v6(), &[50, 150, 250]),
        row(System::Ferrolb, Failure::Kill, v4(), &[0, 0, 0]),
        row(keepalived, Failure::LinkDown, v4(), &[400, 420, 500]),
    ];
    let handovers = vec![Handover { exit: Some(0), probes: vec![(v4(), trial(0, None).probes)] }];
    let failed =
        Outcome { system: Speaker::Exabgp, prefixes: 10_000, result: Err(Error::Parse("a | b".into())) };
    Report {
        env: Environment {
            date: "2026-11-26 05:40 UTC".into(),
            command: "ferrolb-testbed bench report --trials 3".into(),
            args: "bench report --trials 3".into(),
            kernel: "6.1.0".into(),
            cpu: "Some CPU".into(),
            cores: 2,
            memory: Some(24 << 30),
            versions: vec![("BIRD".into(), "BIRD version 2.0.12".into()), ("FRR".into(), "unknown".into())],
            speakers: vec![("bgp-scale".into(), "/w/target/release/ferrolb-speaker".into())],
        },
        trials: 3,
        soak_seconds: 20,
        failover: failover::Results { rows, handovers },
        soak: vec![soaked(System::Ferrolb, 3, 0), soaked(keepalived, 2, 2)],
        scale: vec![
            scale(Speaker::Bird, 10_000, [100, 200, 50], 50_000, 10),
            scale(Speaker::Ferrolb, 10_000, [110, 210, 70], 50_000, 20),
            scale(Speaker::Gobgp, 10_000, [400, 800, 300], 90_000, 60),
            failed,
            scale(Speaker::Bird, 2_000, [30, 60, 20], 11_000, 8),
            scale(Speaker::Ferrolb, 2_000, [31, 61, 21], 12_000, 40),
        ],
    }
}

fn verdict(goals: &[Goal], starts: &str) -> Verdict {
    let g =
        goals.iter().find(|g| g.goal.starts_with(starts)).unwrap_or_else(|| panic!("{starts}: {goals:?}"));
    g.verdict
}

#[test]
fn failover_goals_judge_median_and_max() {
    let g = failover_goals(&report().failover);
    assert_eq!(g.len(), 4, "{g:?}");
    assert_eq!(verdict(&g, "ferrolb L2 failover (link, v4)"), Verdict::Met);
    assert_eq!(verdict(&g, "ferrolb L2 failover (link, v6)"), Verdict::NotMet);
    assert_eq!(verdict(&g, "ferrolb L2 failover (kill, v4)"), Verdict::Met);
    assert_eq!(verdict(&g, "ferrolb L2 failover (kill, v6)"), Verdict::Unmeasured);
    assert_eq!(g[3].figure, "median 150 ms, max 250 ms");
}

#[test]
fn soak_goal_counts_ferrolb_owner_changes_only() {
    let r = report();
    assert_eq!(soak_goals(&r.soak)[0].verdict, Verdict::Met);
    assert_eq!(soak_goals(&[soaked(System::Ferrolb, 3, 1)])[0].verdict, Verdict::NotMet);
    assert_eq!(soak_goals(&[])[0].verdict, Verdict::Unmeasured);
}

#[test]
fn bgp_goals_compare_with_bird_and_the_others() {
    let g = scale_goals(&report().scale);
    // withdraw 70 / 50 = 1.4× BIRD.
    assert_eq!(verdict(&g, "10000 prefixes: ferrolb within 1.2×"), Verdict::NotMet);
    assert_eq!(verdict(&g, "2000 prefixes: ferrolb within 1.2×"), Verdict::Met);
    // 400/110, 800/210, 300/70: all over 3.
    assert_eq!(verdict(&g, "10000 prefixes: ferrolb ≥ 3× ahead of GoBGP"), Verdict::Met);
    assert_eq!(verdict(&g, "10000 prefixes: ferrolb ≥ 3× ahead of ExaBGP"), Verdict::Unmeasured);
    assert_eq!(verdict(&g, "10000 prefixes: ferrolb ≤ 5.5 bytes"), Verdict::Met);
    assert_eq!(verdict(&g, "2000 prefixes: ferrolb ≤ 5.5 bytes"), Verdict::NotMet);
    let within = g.iter().find(|g| g.goal.starts_with("10000 prefixes: ferrolb within")).unwrap();
    assert_eq!(within.figure, "1.10× / 1.05× / 1.40×");
}

/// Three runs at one size, BIRD then ferrolb in each (as `measure_all` orders them).
fn three_runs(ferrolb_rib: [u64; 3]) -> Vec<Outcome> {
    ferrolb_rib
        .iter()
        .flat_map(|rib| {
            [
                scale(Speaker::Bird, 10_000, [100, 200, 50], 50_000, 10),
                scale(Speaker::Ferrolb, 10_000, [*rib, 200, 50], 50_000, 20),
            ]
        })
        .collect()
}

#[test]
fn bgp_goals_judge_the_median_run_not_one_slow_run() {
    let within = |scale: &[Outcome]| {
        let g = scale_goals(scale);
        let g = g.iter().find(|g| g.goal.starts_with("10000 prefixes: ferrolb within")).unwrap().clone();
        (g.figure, g.verdict)
    };
    // 1.10×, 1.50×, 1.15×: one slow run does not decide.
    assert_eq!(within(&three_runs([110, 150, 115])), ("1.15× / 1.00× / 1.00×".to_string(), Verdict::Met));
    // 1.25×, 1.50×, 1.15×: the median is over.
    assert_eq!(within(&three_runs([125, 150, 115])), ("1.25× / 1.00× / 1.00×".to_string(), Verdict::NotMet));
    // The table shows each speaker once: its median run.
    let md = scale_section(&three_runs([110, 150, 115]), |_| String::new());
    let rows: Vec<&str> = md.lines().filter(|l| l.starts_with("| ferrolb (10000")).collect();
    assert_eq!(
        rows,
        ["| ferrolb (10000 Services) | 3.0 | 115 | 1.15 | 200 | 1.00 | 50 | 1.00 | 5.0 | 7 | 20.0 |"]
    );
    assert!(md.contains("Every speaker ran 3 times at each size"), "{md}");
}

#[test]
fn memory_goals_use_the_bound_of_the_size() {
    let g = memory_goals(&report().scale);
    assert_eq!(g.len(), 3, "{g:?}");
    // At rest: 10 MiB in the 2000 run, 5 MiB in the 10000 run; judged on the largest.
    assert_eq!(g[0].goal, "ferrolb RSS at rest < 8 MiB (Established, no routes; every run)");
    assert_eq!((g[0].verdict, g[0].figure.as_str()), (Verdict::NotMet, "5.0 / 5.0 / 10.0 MiB"));
    assert_eq!(g[1].goal, "ferrolb peak RSS < 30 MiB at 2000 Services (the bound for 10000)");
    assert_eq!(g[1].verdict, Verdict::NotMet);
    assert_eq!(g[2].goal, "ferrolb peak RSS < 30 MiB at 10000 Services");
    assert_eq!((g[2].verdict, g[2].figure.as_str()), (Verdict::Met, "20.0 MiB"));
    // Beyond 100 000 Services no peak bound applies; at rest (4 MiB) it is met.
    let big = [scale(Speaker::Ferrolb, 200_000, [1, 1, 1], 1, 16)];
    let g = memory_goals(&big);
    assert_eq!(g.len(), 1, "{g:?}");
    assert_eq!((g[0].verdict, g[0].figure.as_str()), (Verdict::Met, "4.0 / 4.0 / 4.0 MiB"));
    assert_eq!(memory_goals(&[])[0].verdict, Verdict::Unmeasured);
}

#[test]
fn markdown_has_every_row_and_verdict() {
    let rendered = render(&report());
    let md = &rendered.markdown;
    for line in [
        "| ferrolb | link | v4 | 40 | 60 | 90 | 45 | 65 | 95 | 0 of 3 |",
        "| ferrolb | link | v6 | 50 | 150 | 250 | 55 | 155 | 255 | 0 of 3 |",
        "| ferrolb | kill | v4 | 0.0 | 0.0 | 0.0 | 5.0 | 5.0 | 5.0 | 0 of 3 |",
        "| keepalived VRRPv3 100 ms | link | v4 | 400 | 420 | 500 | 405 | 425 | 505 | 0 of 3 |",
        "| ferrolb (3 nodes) | 192.0.2.200 | 20.0 | 2000 | 2 | 0.0 | 0 |",
        "| keepalived VRRPv3 100 ms (2 nodes) | 192.0.2.200 | 20.0 | 2000 | 2 | 0.0 | 2 |",
        "| BIRD 2 (include+configure) | 3.0 | 100 | 1.00 | 200 | 1.00 | 50 | 1.00 | 5.0 | 7 | 10.0 |",
        "| ferrolb (10000 Services) | 3.0 | 110 | 1.10 | 210 | 1.05 | 70 | 1.40 | 5.0 | 7 | 20.0 |",
        "| ExaBGP 4 (API lines) | failed: parse: a \\| b | | | | | | | | | |",
        "| ferrolb | 5.0 / 5.0 / 10.0 | 40.0 | 20.0 |",
        "| GoBGP 3 | 15.0 / 15.0 / 15.0 | — | 60.0 |",
        "| ferrolb L2 failover (link, v6): outage median < 100 ms, max < 200 ms | median 150 ms, max 250 ms | **not met** |",
        "| ferrolb L2 soak: zero false failovers | 0 owner changes in 20 s (3 nodes) | met |",
        "| 10000 prefixes: ferrolb within 1.2× of BIRD→BIRD (to RIB / to kernel / withdraw) | 1.10× / 1.05× / 1.40× | **not met** |",
        "| CPU | Some CPU, 2 logical CPUs |",
        "| Memory | 24.0 GiB |",
        "| FRR | unknown |",
        "| ferrolb-speaker (bgp-scale) | release build, `/w/target/release/ferrolb-speaker` |",
        "cargo run --release -p ferrolb-testbed -- bench report --trials 3",
        "ferrolb SIGTERM handover (the owner's speaker SIGTERMed, then the VIPs leave its `lo`): 1 of 1 trials",
        "| 1 | 0 | v4 100 / 0 |",
        "![L2 failover timeline](benchmarks/failover-timeline.svg)",
        "![10000 prefixes in BIRD's RIB](benchmarks/bgp-prefixes-10000.svg)",
        "![peak RSS vs Services](benchmarks/rss-vs-services.svg)",
    ] {
        assert!(md.lines().any(|l| l.starts_with(line)), "missing {line:?} in\n{md}");
    }
    let (met, total) = (md.matches("| met |").count(), md.matches("| **not met** |").count());
    assert!(met > 0 && total > 0);
    assert!(md.contains("Not met:\n\n- ferrolb L2 failover (link, v6): outage median < 100 ms, max < 200 ms — median 150 ms"), "{md}");
    assert!(md.contains("Not measured:\n\n- ferrolb L2 failover (kill, v6)"), "{md}");
    assert!(!md.contains("Every goal is met."));
}

#[test]
fn figures_are_well_formed_with_every_series() {
    let rendered = render(&report());
    let names: Vec<&str> = rendered.figures.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["failover-timeline.svg", "bgp-prefixes-2000.svg", "bgp-prefixes-10000.svg", "rss-vs-services.svg"]
    );
    for (name, svg) in &rendered.figures {
        check_svg(svg);
        let series: &[&str] = match name.as_str() {
            "failover-timeline.svg" => {
                &["ferrolb", "keepalived VRRPv3 100 ms", "answered", "lost", "failure"]
            }
            "bgp-prefixes-10000.svg" | "rss-vs-services.svg" => &["BIRD 2", "ferrolb", "GoBGP 3"],
            _ => &["BIRD 2", "ferrolb"],
        };
        for s in series {
            assert!(svg.contains(&format!(">{s}</text>")), "{name}: no {s}");
        }
        assert!(!svg.contains(">ExaBGP 4</text>"), "{name}: ExaBGP failed, it has no line");
    }
}

#[test]
fn timeline_marks_lost_probes_from_the_failure() {
    let t = trial(100, Some(80));
    let times = probe_times(&t);
    assert_eq!(times.len(), 100);
    assert_eq!(times[0], (-495.0, true));
    assert_eq!(times[50], (5.0, false));
    assert_eq!(times[59], (95.0, false));
    assert_eq!(times[60], (105.0, true));
    let svg = timeline_svg(&report().failover).unwrap();
    // Two rows (ferrolb and keepalived, link v4) of probes in -100..=600 ms.
    let marks = svg.matches("<rect x=").count() - 1 - 2;
    assert_eq!(marks, 2 * 60, "background and two legend blocks aside");
}

#[test]
fn rib_counts_are_drawn_as_steps() {
    let s = steps(&[(0.0, 0.0), (10.0, 5.0), (20.0, 9.0)]);
    assert_eq!(s, [(0.0, 0.0), (10.0, 0.0), (10.0, 5.0), (20.0, 5.0), (20.0, 9.0)]);
    assert!(steps(&[]).is_empty());
}

#[test]
fn machine_facts_parse() {
    let cpuinfo =
        "processor\t: 0\nmodel name\t: Intel(R) Xeon(R)\n\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R)\n";
    assert_eq!(cpu_model(cpuinfo).as_deref(), Some("Intel(R) Xeon(R)"));
    assert_eq!(cpu_count(cpuinfo), 2);
    assert_eq!(mem_total("MemTotal:       24684084 kB\nMemFree: 1 kB\n"), Some(24_684_084 * 1024));
    assert_eq!(mem_total("nothing"), None);
    assert_eq!(build_profile(Path::new("/w/target/release/ferrolb-speaker")), "release");
    assert_eq!(build_profile(Path::new("/w/target/debug/ferrolb-speaker")), "debug");
    assert!(build_profile(Path::new("/opt/speaker")).starts_with("unknown"));
    assert_eq!(utc_date(1_795_668_755), "2026-11-26 04:52 UTC");
    assert_eq!(utc_date(951_868_800), "2000-03-01 00:00 UTC");
    assert_eq!(utc_date(0), "1970-01-01 00:00 UTC");
    let args = ["bench", "report", "--out", "/tmp/a b", "it's"].map(String::from);
    assert_eq!(shell_words(&args), r"bench report --out '/tmp/a b' 'it'\''s'");
    assert_eq!(first_line("/nonexistent/program", &[]), "unknown");
}
