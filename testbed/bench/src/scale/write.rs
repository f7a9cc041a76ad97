//! `bench scale --write`: the figures as the "Cluster scale" section of `BENCHMARKS.md`,
//! with log-log plots under `benchmarks/`. The section sits between two markers and is
//! replaced on each write; `bench report`, which writes the rest of the file, keeps it.

use std::path::Path;

use super::Figures;
use super::goals;
use super::print::Row;
use crate::document::{self, SCALE_BEGIN, SCALE_END, splice};
use crate::report::Environment;
use crate::svg::{Axis, Plot};
use ferrolb_lab::Error;

/// Writes the section into `root/BENCHMARKS.md` (replacing the one there, or after the
/// rest) and its plots under `root/benchmarks/`.
pub fn write(all: &[Figures], root: &Path) -> Result<(), Error> {
    let env = Environment::collect(root);
    let rows: Vec<Row> = all.iter().map(Row::of).collect();
    let plots = [("scale-memory.svg", memory_plot(&rows)), ("scale-latency.svg", latency_plot(&rows))];
    let dir = root.join(document::FIGURES);
    std::fs::create_dir_all(&dir).map_err(|e| document::io_at(&dir, e))?;
    for (name, svg) in &plots {
        document::write_file(&dir.join(name), svg)?;
    }
    let md = root.join("BENCHMARKS.md");
    let old = std::fs::read_to_string(&md).unwrap_or_default();
    document::write_file(&md, &splice(&old, &section(&rows, all, &env, root)))?;
    println!("\nbench scale: wrote the cluster-scale section of {} and {} plots", md.display(), plots.len());
    Ok(())
}

fn section(rows: &[Row], all: &[Figures], env: &Environment, root: &Path) -> String {
    let mut s = format!("{SCALE_BEGIN}\n## Cluster scale\n\n");
    s.push_str(&format!(
        "ferrolb on the real control plane (etcd, kube-apiserver, kube-controller-manager) beside kwok's fake \
         Nodes: two real nodes each running a speaker (BGP to BIRD), the controller, LoadBalancer Services \
         (policy Cluster) each backed by fake pods that the real EndpointSlice controller lists. Measured on \
         {} ({} cores, {}), {}, with `{}`.\n\n",
        env.cpu,
        env.cores,
        env.memory.map_or("memory unknown".into(), |b| format!("{:.0} GiB", b as f64 / (1u64 << 30) as f64)),
        env.date,
        env.command
    ));
    // Paths from the workspace root, not this machine's.
    let root = format!("{}/", root.display());
    for b in all.first().map(|f| f.builds.as_slice()).unwrap_or_default() {
        s.push_str(&format!("* {}\n", b.replace(&root, "")));
    }
    s.push_str(
        "\n| fake Nodes | Services | requests/s at rest (a) | lists per change | writes per new Service (b) \
         | lists per speaker and kind on a restart | speaker RSS MiB | speaker heap MiB | speaker CPU at rest, % \
         of a core | controller RSS MiB | created → route p50 / p99 ms |\n",
    );
    s.push_str("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in rows {
        let [rate, lists, writes, restart, rss, heap, cpu, controller, route] = r.cells();
        s.push_str(&format!(
            "| {} | {} | {rate} | {lists} | {writes} | {restart} | {rss} | {heap} | {cpu} | {controller} | {route} |\n",
            r.nodes, r.services
        ));
    }
    s.push_str(&format!(
        "\n(a) Besides watches and the controller's Lease renewals; goal ≈ 0. (b) By the controller and every \
         speaker together; each speaker writes its ServiceAnnouncement and an Event (per node: see issue #39's \
         closing note). Goals at 5 000 nodes and 10 000 Services: speaker RSS < {:.0} MiB, CPU at rest ≈ 0, \
         no list per change, ≤ 1 list per speaker and kind on a restart, created → route p99 < {:.0} ms at every \
         size. Route latency has 20 samples per size (p99 is the maximum). RSS is the larger speaker's at the \
         end of the rest window; heap is `ferrolb_speaker_heap_bytes` (live allocations).\n",
        goals::SPEAKER_RSS_MIB,
        goals::ROUTE_P99_MS
    ));
    s.push_str(&format!("\n![speaker memory vs Services]({}/scale-memory.svg)\n", document::FIGURES));
    s.push_str(&format!(
        "\n![Service created → route vs Services]({}/scale-latency.svg)\n",
        document::FIGURES
    ));
    s.push_str(SCALE_END);
    s.push('\n');
    s
}

/// A log10 axis over the powers of ten around `values`, labelled with the values.
fn log_axis(label: &str, values: impl Iterator<Item = f64>) -> Axis {
    let (lo, hi) = values
        .filter(|v| *v > 0.0)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (lo, hi) = if lo.is_finite() {
        (lo.log10().floor(), hi.log10().ceil().max(lo.log10().floor() + 1.0))
    } else {
        (0.0, 1.0)
    };
    let labels = (lo as i32..=hi as i32)
        .map(|e| (f64::from(e), crate::svg::tick_label(10f64.powi(e), 10f64.powi(e))))
        .collect();
    Axis::labelled(label, lo, hi, labels)
}

/// The distinct node counts, each with its rows' (log10 Services, log10 value) points.
fn series(rows: &[Row], value: impl Fn(&Row) -> Option<f64>) -> Vec<(usize, Vec<(f64, f64)>)> {
    let mut nodes: Vec<usize> = rows.iter().map(|r| r.nodes).collect();
    nodes.sort_unstable();
    nodes.dedup();
    nodes
        .into_iter()
        .map(|n| {
            let mut pts: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.nodes == n)
                .filter_map(|r| Some(((r.services as f64).log10(), value(r).filter(|v| *v > 0.0)?.log10())))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            (n, pts)
        })
        .collect()
}

fn memory_plot(rows: &[Row]) -> String {
    let x = log_axis("Services (log)", rows.iter().map(|r| r.services as f64));
    let y = log_axis(
        "MiB (log)",
        rows.iter().flat_map(|r| [r.rss, r.heap]).flatten().chain([goals::SPEAKER_RSS_MIB]),
    );
    let mut plot = Plot::new("A speaker's memory as Services grow", x, y);
    for (n, pts) in series(rows, |r| r.rss) {
        plot.line(&format!("RSS, {n} fake Nodes"), &pts, true);
    }
    for (n, pts) in series(rows, |r| r.heap) {
        plot.line(&format!("live heap, {n} fake Nodes"), &pts, true);
    }
    plot.render()
}

fn latency_plot(rows: &[Row]) -> String {
    let x = log_axis("Services (log)", rows.iter().map(|r| r.services as f64));
    let y = log_axis(
        "ms (log)",
        rows.iter().filter_map(|r| r.route).flat_map(|(a, b)| [a, b]).chain([goals::ROUTE_P99_MS]),
    );
    let mut plot = Plot::new("Service created → route in BIRD", x, y);
    for (n, pts) in series(rows, |r| r.route.map(|(_, p99)| p99)) {
        plot.line(&format!("p99, {n} fake Nodes"), &pts, true);
    }
    for (n, pts) in series(rows, |r| r.route.map(|(p50, _)| p50)) {
        plot.line(&format!("p50, {n} fake Nodes"), &pts, true);
    }
    plot.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_axes_span_whole_powers_of_ten() {
        let a = log_axis("x", [100.0, 1_000.0, 5_000.0].into_iter());
        assert_eq!((a.min, a.max), (2.0, 4.0));
        let b = log_axis("y", [17.6].into_iter());
        assert_eq!((b.min, b.max), (1.0, 2.0));
    }
}
