//! The runs behind BENCHMARKS.md's cluster-scale section, kept in `benchmarks/scale.json`.
//! A size takes from minutes (100 fake Nodes, 1 000 Services) to most of an hour (5 000
//! and 10 000) on two cores, so sizes are run a few at a time: each `--write` replaces the
//! rows of the sizes it ran and keeps every other size as the run that measured it
//! wrote it, with that run's date, machine, command and builds.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::print::Row;
use crate::document;
use ferrolb_lab::Error;

/// Where the runs are kept, relative to the workspace root.
pub const FILE: &str = "benchmarks/scale.json";

/// One `bench scale` run and the sizes it measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// When its figures were written, UTC.
    pub date: String,
    /// The machine: CPU, cores, memory.
    pub machine: String,
    /// The command as given.
    pub command: String,
    /// Which builds ran (paths from the workspace root).
    pub builds: Vec<String>,
    /// One per size, as the summary shows it.
    pub rows: Vec<Row>,
}

/// The runs kept at `path`; none when there is no file yet.
pub fn load(path: &Path) -> Result<Vec<Run>, Error> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| {
            Error::Parse(format!("{}: {e} (delete it to start the section afresh)", path.display()))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(document::io_at(path, e)),
    }
}

/// Writes `runs` to `path`, making its folder if need be.
pub fn save(path: &Path, runs: &[Run]) -> Result<(), Error> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| document::io_at(dir, e))?;
    }
    let text = serde_json::to_string_pretty(runs).map_err(|e| Error::Parse(e.to_string()))?;
    document::write_file(path, &format!("{text}\n"))
}

/// `kept` with `new` added: the sizes `new` measured leave the older runs, and a run
/// left with no size goes.
pub fn merge(kept: Vec<Run>, new: Run) -> Vec<Run> {
    let size = |r: &Row| (r.nodes, r.services, r.l2);
    let mut runs: Vec<Run> = kept
        .into_iter()
        .map(|mut run| {
            run.rows.retain(|r| !new.rows.iter().any(|n| size(n) == size(r)));
            run
        })
        .filter(|run| !run.rows.is_empty())
        .collect();
    runs.push(new);
    runs
}

/// Every size of `runs` with the index of its run, smallest first.
pub fn rows(runs: &[Run]) -> Vec<(usize, &Row)> {
    let mut all: Vec<(usize, &Row)> =
        runs.iter().enumerate().flat_map(|(i, run)| run.rows.iter().map(move |r| (i, r))).collect();
    all.sort_by_key(|(_, r)| (r.nodes, r.services, r.l2));
    all
}

/// A run's name in the table: A, B, … Z, then AA, AB, ….
pub fn label(i: usize) -> String {
    let letter = |n: usize| char::from(b'A' + (n % 26) as u8);
    if i < 26 { letter(i).to_string() } else { format!("{}{}", letter(i / 26 - 1), letter(i)) }
}

/// A made-up size's row, for tests.
#[cfg(test)]
pub(super) fn sample_row(nodes: usize, services: usize) -> Row {
    Row {
        nodes,
        services,
        l2: false,
        pods: 3,
        rest_rate: 0.0,
        change_lists: 0,
        writes: 8,
        restart_lists: 1,
        rss: Some(16.0),
        heap: Some(2.4),
        cpu: None,
        controller: None,
        controller_heap: None,
        route: Some((17.0, 37.0)),
        after_create: Some((12.0, 20.0)),
        timed: Some(100),
        replan: None,
        traffic: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(nodes: usize, services: usize, rss: f64) -> Row {
        Row { rss: Some(rss), ..sample_row(nodes, services) }
    }

    fn run(date: &str, rows: Vec<Row>) -> Run {
        Run { date: date.into(), machine: "m".into(), command: "c".into(), builds: vec![], rows }
    }

    #[test]
    fn a_run_replaces_the_sizes_it_measured_and_keeps_the_rest() {
        let old = vec![
            run("first", vec![row(1000, 100, 16.0), row(1000, 1000, 23.8)]),
            run("second", vec![row(100, 1000, 20.0)]),
        ];
        let merged = merge(old, run("third", vec![row(100, 1000, 19.0), row(5000, 1000, 30.0)]));
        let dates: Vec<&str> = merged.iter().map(|r| r.date.as_str()).collect();
        assert_eq!(dates, ["first", "third"], "a run whose every size was measured again goes");
        assert_eq!(merged[0].rows, vec![row(1000, 100, 16.0), row(1000, 1000, 23.8)]);
        let table: Vec<(usize, usize, usize)> =
            rows(&merged).iter().map(|(i, r)| (*i, r.nodes, r.services)).collect();
        assert_eq!(table, [(1, 100, 1000), (0, 1000, 100), (0, 1000, 1000), (1, 5000, 1000)]);
    }

    #[test]
    fn a_size_measured_with_an_l2_advertisement_is_a_size_of_its_own() {
        let l2 = Row { l2: true, ..row(5000, 1000, 40.0) };
        let merged = merge(vec![run("bgp", vec![row(5000, 1000, 30.0)])], run("l2", vec![l2.clone()]));
        let table: Vec<(&str, bool)> =
            rows(&merged).iter().map(|(i, r)| (merged[*i].date.as_str(), r.l2)).collect();
        assert_eq!(table, [("bgp", false), ("l2", true)], "neither replaces the other");
        assert_eq!(
            (l2.nodes_cell(), row(5000, 1000, 30.0).nodes_cell()),
            ("5000 (L2)".into(), "5000".into())
        );
        // Runs written before the field: BGP only.
        let old: Row = serde_json::from_str(
            &serde_json::to_string(&row(100, 100, 1.0)).unwrap().replace(r#""l2":false,"#, ""),
        )
        .unwrap();
        assert!(!old.l2);
    }

    #[test]
    fn runs_survive_the_file() {
        let dir = std::env::temp_dir().join(format!("ferrolb-scale-runs-{}", std::process::id()));
        let path = dir.join("benchmarks").join("scale.json");
        assert_eq!(load(&path).unwrap(), vec![], "no file: no runs");
        let runs = vec![run("first", vec![row(1000, 100, 16.0)])];
        save(&path, &runs).unwrap();
        assert!(path.exists(), "the folder is made");
        assert_eq!(load(&path).unwrap(), runs);
        std::fs::write(&path, "{").unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("scale.json") && e.contains("delete it"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn labels_count_like_spreadsheet_columns() {
        let l: Vec<String> = [0, 1, 25, 26, 27, 51, 52].into_iter().map(label).collect();
        assert_eq!(l, ["A", "B", "Z", "AA", "AB", "AZ", "BA"]);
    }
}
