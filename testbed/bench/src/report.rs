//! `bench report`: the failover, L2 soak and BGP scale benches, each beside its peers in
//! the same run, written up as `BENCHMARKS.md` with SVG figures under `benchmarks/`: the
//! machine, the versions, the command to reproduce, and each goal of issue #15 beside
//! the figure it is judged on. Rendering is a pure function of the results: the goals
//! and their verdicts (`goals`), the tables (`tables`) and figures (`figures`) drawn from
//! the runs that stand for each speaker (`runs`), and the machine they ran on (`machine`).

use std::path::PathBuf;

use super::bgp_scale::{self, Outcome, System as Speaker};
use super::failover;
use super::l2_soak::{self, Soaked};
use crate::document::{self, FIGURES, io_at, write_file};
use ferrolb_lab::Error;

mod figures;
mod goals;
mod machine;
mod runs;
mod tables;

use figures::{prefixes_svg, rss_svg, timeline_svg};
use goals::{failover_goals, goals_summary, memory_goals, scale_goals, soak_goals};
use machine::machine_section;
use runs::sizes;
use tables::{failover_section, memory_section, scale_section, soak_section};

pub use goals::{Goal, Verdict};
pub use machine::Environment;

/// What `bench report` runs and where it writes.
#[derive(Debug, Clone)]
pub struct Params {
    /// Failover trials per system, failure and family.
    pub trials: usize,
    /// Length of each system's soak, seconds.
    pub soak_seconds: u64,
    /// BGP table sizes.
    pub sizes: Vec<u32>,
    /// BGP scale runs of every speaker at every size.
    pub runs: usize,
    /// Directory receiving `BENCHMARKS.md` and `benchmarks/`.
    pub out: PathBuf,
}

const TIMELINE: &str = "failover-timeline.svg";
const RSS: &str = "rss-vs-services.svg";

/// The figure of BGP table size `n`.
fn prefixes_figure(n: u32) -> String {
    format!("bgp-prefixes-{n}.svg")
}

/// Runs the benches, printing as they go, then writes the report into `p.out`. A BGP
/// speaker that failed is written as such, and the first failure is returned after.
pub fn run(p: &Params) -> Result<(), Error> {
    let figures = p.out.join(FIGURES);
    // Before an hour of measuring, not after.
    std::fs::create_dir_all(&figures).map_err(|e| io_at(&figures, e))?;
    let env = Environment::collect(&ferrolb_lab::binary::workspace_root());
    let fo = failover::measure(&failover::Params { trials: p.trials, family: None, failure: None })?;
    failover::print_tables(&fo);
    let soak = l2_soak::measure(p.soak_seconds)?;
    l2_soak::print_table(&soak);
    let scale = bgp_scale::measure_all(&p.sizes, &Speaker::ALL, p.runs)?;
    let report = Report { env, trials: p.trials, soak_seconds: p.soak_seconds, failover: fo, soak, scale };
    let rendered = render(&report);
    let md = p.out.join("BENCHMARKS.md");
    // The sections other benches write (cluster scale, active-active) are kept as they were.
    let old = std::fs::read_to_string(&md).unwrap_or_default();
    let markdown = document::SECTIONS.iter().fold(rendered.markdown.clone(), |doc, which| {
        document::section_of(&old, *which).map_or(doc.clone(), |kept| document::splice(&doc, *which, kept))
    });
    write_file(&md, &markdown)?;
    for (name, svg) in &rendered.figures {
        write_file(&figures.join(name), svg)?;
    }
    println!(
        "\nbench report: wrote {} and {} figures in {}",
        md.display(),
        rendered.figures.len(),
        figures.display()
    );
    report.scale.into_iter().find_map(|o| o.result.err()).map_or(Ok(()), Err)
}

/// Everything measured, ready to write.
#[derive(Debug)]
pub struct Report {
    /// The machine and versions.
    pub env: Environment,
    /// Failover trials per system, failure and family.
    pub trials: usize,
    /// Length of each soak, seconds.
    pub soak_seconds: u64,
    /// `bench failover`'s results.
    pub failover: failover::Results,
    /// `bench l2-soak`'s results.
    pub soak: Vec<Soaked>,
    /// `bench bgp-scale`'s results, every speaker at every size.
    pub scale: Vec<Outcome>,
}

/// The report's files: the markdown and each figure (file name, SVG).
#[derive(Debug, Clone)]
pub struct Rendered {
    /// `BENCHMARKS.md`.
    pub markdown: String,
    /// (file name under `benchmarks/`, SVG document).
    pub figures: Vec<(String, String)>,
}

/// Renders the report: pure, so tested without a lab.
pub fn render(r: &Report) -> Rendered {
    let mut figures = Vec::new();
    if let Some(svg) = timeline_svg(&r.failover) {
        figures.push((TIMELINE.to_string(), svg));
    }
    for n in sizes(&r.scale) {
        if let Some(svg) = prefixes_svg(&r.scale, n) {
            figures.push((prefixes_figure(n), svg));
        }
    }
    if let Some(svg) = rss_svg(&r.scale) {
        figures.push((RSS.to_string(), svg));
    }
    let names: Vec<&str> = figures.iter().map(|(n, _)| n.as_str()).collect();
    Rendered { markdown: markdown(r, &names), figures }
}

/// `BENCHMARKS.md`; `figures` names the SVGs written beside it.
fn markdown(r: &Report, figures: &[&str]) -> String {
    let link = |name: &str, alt: &str| {
        if figures.contains(&name) { format!("\n![{alt}]({FIGURES}/{name})\n") } else { String::new() }
    };
    let goals =
        [failover_goals(&r.failover), soak_goals(&r.soak), scale_goals(&r.scale), memory_goals(&r.scale)];
    let mut md = format!(
        "# ferrolb benchmarks\n\n\
         Generated {} by `{}`: L2 failover, L2 soak and BGP scale, each beside the systems \
         ferrolb is measured against, in the same run on the same machine.\n\n",
        r.env.date, r.env.command
    );
    md.push_str(&goals_summary(&goals.concat()));
    md.push_str(&machine_section(&r.env));
    md.push_str(&failover_section(r, &goals[0], &link(TIMELINE, "L2 failover timeline")));
    md.push_str(&soak_section(r, &goals[1]));
    md.push_str(&scale_section(&r.scale, |n| {
        link(&prefixes_figure(n), &format!("{n} prefixes in BIRD's RIB"))
    }));
    md.push_str(&memory_section(&r.scale, &goals[3], &link(RSS, "peak RSS vs Services")));
    md
}

#[cfg(test)]
mod tests;
