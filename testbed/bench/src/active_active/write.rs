//! `bench active-active --write`: the run kept in `benchmarks/active-active.json` and
//! written as the "Active-active L2" section of `BENCHMARKS.md` with two plots under
//! `benchmarks/` (connection rate and throughput against the nodes serving the
//! address, both modes). The section sits between its markers and is replaced on each
//! write; `bench report` keeps it. `--rewrite` renders it again from the file.

use std::path::Path;

use super::{Row, Settings, table};
use crate::document::{self, ACTIVE_ACTIVE, splice};
use crate::report::Environment;
use crate::svg::{Axis, Plot};
use ferrolb_lab::Error;

/// The kept run, from the workspace root.
pub const FILE: &str = "benchmarks/active-active.json";
const CONNECTIONS_SVG: &str = "active-active-connections.svg";
const THROUGHPUT_SVG: &str = "active-active-throughput.svg";

/// One run of the bench: where and how it ran, and its rows.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Run {
    /// When, UTC.
    pub date: String,
    /// CPU, cores and memory.
    pub machine: String,
    /// The command that measured it.
    pub command: String,
    /// Length of each measurement, seconds.
    pub seconds: u64,
    /// Client threads and streams.
    pub streams: usize,
    /// Every node count in both modes.
    pub rows: Vec<Row>,
}

/// Keeps this run in `root/benchmarks/active-active.json` (replacing the last) and
/// writes the section and its plots.
pub fn write(rows: &[Row], s: &Settings, root: &Path) -> Result<(), Error> {
    let env = Environment::collect(root);
    let gib =
        env.memory.map_or("memory unknown".into(), |b| format!("{:.0} GiB", b as f64 / (1u64 << 30) as f64));
    let run = Run {
        date: env.date.clone(),
        machine: format!("{} ({} cores, {gib})", env.cpu, env.cores),
        command: env.command.clone(),
        seconds: s.seconds,
        streams: s.streams,
        rows: rows.to_vec(),
    };
    let file = root.join(FILE);
    let text = serde_json::to_string_pretty(&run).map_err(|e| Error::Parse(e.to_string()))?;
    document::write_file(&file, &format!("{text}\n"))?;
    render(&run, root)
}

/// Writes the section and its plots again from `root/benchmarks/active-active.json`.
pub fn rewrite(root: &Path) -> Result<(), Error> {
    render(&load(&root.join(FILE))?, root)
}

fn load(file: &Path) -> Result<Run, Error> {
    let text = std::fs::read_to_string(file).map_err(|e| document::io_at(file, e))?;
    serde_json::from_str(&text).map_err(|e| Error::Parse(format!("{}: {e}", file.display())))
}

fn render(run: &Run, root: &Path) -> Result<(), Error> {
    let dir = root.join(document::FIGURES);
    std::fs::create_dir_all(&dir).map_err(|e| document::io_at(&dir, e))?;
    for (name, svg) in plots(&run.rows) {
        document::write_file(&dir.join(name), &svg)?;
    }
    let md = root.join("BENCHMARKS.md");
    let old = std::fs::read_to_string(&md).unwrap_or_default();
    document::write_file(&md, &splice(&old, ACTIVE_ACTIVE, &section(run)))?;
    println!("\nbench active-active: wrote its section of {} and two plots", md.display());
    Ok(())
}

/// Each mode's (nodes, value) points.
fn points(rows: &[Row], mode: &str, value: impl Fn(&Row) -> f64) -> Vec<(f64, f64)> {
    rows.iter().filter(|r| r.mode == mode).map(|r| (r.nodes as f64, value(r))).collect()
}

fn plots(rows: &[Row]) -> [(&'static str, String); 2] {
    let plot = |title: &str, unit: &str, value: &dyn Fn(&Row) -> f64| {
        let top = rows.iter().map(value).fold(0.0, f64::max);
        let right = rows.iter().map(|r| r.nodes as f64).fold(1.0, f64::max);
        let labels = (1..=right as usize).map(|n| (n as f64, n.to_string())).collect();
        let mut p = Plot::new(
            title,
            Axis::labelled("nodes serving the address", 0.5, right + 0.5, labels),
            Axis::new(unit, 0.0, top * 1.15),
        );
        for mode in ["SingleOwner", "ActiveActive"] {
            p.line(mode, &points(rows, mode, value), true);
        }
        p.render()
    };
    [
        (
            CONNECTIONS_SVG,
            plot("New connections through one address", "connections/s", &|r| r.connections_per_s),
        ),
        (THROUGHPUT_SVG, plot("Throughput into one address", "MB/s", &|r| r.megabytes_per_s)),
    ]
}

fn section(run: &Run) -> String {
    let mut s = format!("{}\n## Active-active L2\n\n", ACTIVE_ACTIVE.begin);
    s.push_str(&format!(
        "One L2 address (IPv4) served by one elected node (`mode: SingleOwner`) and by every node \
         (`mode: ActiveActive`), the same speakers (release build) in the same run, as the nodes serving it \
         grow. The client sits behind r1, so every packet reaches the address through one router and one \
         MAC. Connections: {} client threads opening, greeting and closing TCP connections for {} s; \
         throughput: {} streams sending as fast as they can for {} s. Frames: what the nodes' NICs received \
         for each frame r1 sent on the LAN while the streams ran.\n\n\
         Measured on {} at {} by `{}`.\n\n",
        run.streams, run.seconds, run.streams, run.seconds, run.machine, run.date, run.command
    ));
    s.push_str(&format!(
        "![connections/s against nodes]({f}/{CONNECTIONS_SVG})\n\n![MB/s against nodes]({f}/{THROUGHPUT_SVG})\n\n",
        f = document::FIGURES
    ));
    s.push_str(&table(&run.rows));
    s.push('\n');
    let list = |mode: &str, value: &dyn Fn(&Row) -> f64, digits: usize| {
        let v: Vec<String> =
            points(&run.rows, mode, value).iter().map(|(_, y)| format!("{y:.digits$}")).collect();
        v.join(", ")
    };
    let nodes: Vec<String> =
        points(&run.rows, "ActiveActive", |_| 0.0).iter().map(|(n, _)| format!("{n:.0}")).collect();
    s.push_str(&format!(
        "**What it costs.** Every frame to an active-active address reaches every node: at {} node(s) the \
         nodes together received {} frames per frame sent (single-owner: {}). That is the flooding the mode \
         is built on, and where it stops scaling: each node's NIC and each switch port of the segment \
         carries the address's whole inbound traffic to keep 1/N of it, and switches with unknown-unicast \
         storm control cap it. Throughput into the address was {} MB/s active-active against {} MB/s \
         single-owner: every node also receives, and drops, the others' share. Replies leave each node \
         directly, so only inbound traffic is multiplied.\n\n\
         **What it does not show.** The nodes here are network namespaces sharing {}: more nodes add no \
         CPU, so the rows show what each mode costs, not what N machines would gain; the connection rate \
         varies by some 20 % from run to run. Where the routers speak BGP, ECMP spreads the address over \
         nodes without flooding and is the better tool (speaker/README-l2.md, \"When to choose which\").\n",
        nodes.join(", "),
        list("ActiveActive", &|r| r.frames_per_frame, 2),
        list("SingleOwner", &|r| r.frames_per_frame, 2),
        list("ActiveActive", &|r| r.megabytes_per_s, 0),
        list("SingleOwner", &|r| r.megabytes_per_s, 0),
        run.machine
    ));
    s.push_str(ACTIVE_ACTIVE.end);
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn benchmarks_md_shows_what_the_kept_run_says() {
        let root = ferrolb_lab::binary::workspace_root();
        let run = load(&root.join(FILE)).unwrap();
        assert!(run.rows.iter().any(|r| r.mode == "ActiveActive"), "{FILE} holds the published run");
        let md = std::fs::read_to_string(root.join("BENCHMARKS.md")).unwrap();
        assert_eq!(
            document::section_of(&md, ACTIVE_ACTIVE),
            Some(section(&run).trim_end()),
            "BENCHMARKS.md's active-active section is not what {FILE} renders: `ferrolb-testbed bench active-active --rewrite`"
        );
        for (name, svg) in plots(&run.rows) {
            let kept = std::fs::read_to_string(root.join(document::FIGURES).join(name)).unwrap();
            assert_eq!(kept, svg, "{name} is not what {FILE} renders");
            // Both modes drawn, a dot per row.
            let names = crate::svg::tests::check_svg(&svg);
            let dots = names.iter().filter(|n| *n == "circle").count();
            assert_eq!(dots, run.rows.len(), "{name}: {names:?}");
        }
    }
}
