//! Output: kubectl-style tables, JSON and YAML.

use std::fmt::Write as _;

use serde::Serialize;

use crate::report::{Explanation, GateState, NONE, PeerRow, PoolRef, PoolRow, StatusRow, or_none};

/// Output format (`-o`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns.
    Table,
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// Aligned columns as kubectl prints them: upper-case headers, three spaces between
/// columns, `<none>` for empty cells, no trailing spaces.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let cell = |s: &str| if s.is_empty() { NONE.to_owned() } else { s.to_owned() };
    let all: Vec<Vec<String>> = std::iter::once(headers.iter().map(|h| h.to_uppercase()).collect())
        .chain(rows.iter().map(|r| r.iter().map(|c| cell(c)).collect()))
        .collect();
    let widths: Vec<usize> = (0..headers.len())
        .map(|i| all.iter().map(|r| r.get(i).map_or(0, |c| c.chars().count())).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in &all {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 < r.len() {
                let _ = write!(line, "{c:<w$}   ", w = widths[i]);
            } else {
                line.push_str(c);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `value` as pretty JSON or YAML.
pub fn structured<T: Serialize>(value: &T, format: Format) -> anyhow::Result<String> {
    Ok(match format {
        Format::Yaml => serde_saphyr::to_string(value)?,
        _ => serde_json::to_string_pretty(value)? + "\n",
    })
}

fn pool_cell(p: Option<&PoolRef>) -> String {
    match p {
        None => String::new(),
        Some(p) if p.valid == "True" => p.name.clone(),
        Some(p) => format!("{} (Valid={})", p.name, p.valid),
    }
}

fn gate_cell(g: Option<&GateState>) -> String {
    g.map(|g| format!("{}/{}", g.ready, g.total)).unwrap_or_default()
}

/// The `status` table; a NAMESPACE column with `-A`.
pub fn status_table(rows: &[StatusRow], all_namespaces: bool) -> String {
    let mut headers =
        vec!["name", "addresses", "pool", "protocol", "nodes", "peers", "ready-gate", "last-reason"];
    if all_namespaces {
        headers.insert(0, "namespace");
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut c = vec![
                r.name.clone(),
                r.addresses.join(","),
                pool_cell(r.pool.as_ref()),
                r.protocols.join(","),
                r.nodes.join(","),
                r.peers.join(","),
                gate_cell(r.readiness_gate.as_ref()),
                r.last_reason.clone().unwrap_or_default(),
            ];
            if all_namespaces {
                c.insert(0, r.namespace.clone());
            }
            c
        })
        .collect();
    table(&headers, &cells)
}

fn count(v: Option<i64>) -> String {
    v.map(|n| n.to_string()).unwrap_or_default()
}

/// The `pools` table.
pub fn pools_table(rows: &[PoolRow]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                r.family.clone().unwrap_or_default(),
                count(r.assigned),
                count(r.available),
                r.usage.clone().unwrap_or_default(),
                r.auto_assign.to_string(),
                r.valid.clone(),
                r.message.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(&["name", "family", "assigned", "available", "usage", "auto-assign", "valid", "message"], &cells)
}

/// The `peers` table.
pub fn peers_table(rows: &[PeerRow]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.node.clone(),
                r.peer.clone(),
                r.peer_address.clone(),
                r.peer_asn
                    .map(|a| a.to_string())
                    .or(r.dynamic_asn.map(|d| d.to_string()))
                    .unwrap_or_default(),
                r.bfd_profile.clone().unwrap_or_default(),
                r.valid.clone(),
                r.services.to_string(),
                r.addresses.join(","),
            ]
        })
        .collect();
    table(&["node", "peer", "address", "asn", "bfd-profile", "valid", "services", "addresses"], &cells)
}

/// `explain` as text, in the manner of `kubectl describe`.
pub fn explanation_text(e: &Explanation) -> String {
    let mut out = String::new();
    let list = |out: &mut String, title: &str, items: &[String]| {
        let _ = writeln!(out, "{title}:");
        if items.is_empty() {
            let _ = writeln!(out, "  {NONE}");
        }
        for i in items {
            let _ = writeln!(out, "  {i}");
        }
    };
    let _ = writeln!(out, "Service:     {}/{}", e.namespace, e.name);
    let _ = writeln!(out, "Announced:   {}", e.announced);
    let _ = writeln!(out, "Summary:     {}", e.summary);
    let _ = writeln!(out, "Addresses:   {}", or_none(&e.addresses));
    let pool = match &e.pool {
        None => NONE.to_owned(),
        Some(p) => format!("{} (from {}, Valid={})", p.name, p.source, p.valid),
    };
    let _ = writeln!(out, "Pool:        {pool}");
    let gate =
        e.readiness_gate.as_ref().map_or(NONE.to_owned(), |g| format!("{}/{} pods ready", g.ready, g.total));
    let _ = writeln!(out, "Ready gate:  {gate}");
    let announcing: Vec<String> = e
        .announcing
        .iter()
        .map(|a| {
            let via = if a.protocol == "BGP" {
                format!("to peers {}", or_none(&a.peers))
            } else {
                format!("on {}", or_none(&a.interfaces))
            };
            format!("{} {} {} {via}", a.node, a.protocol, a.addresses.join(","))
        })
        .collect();
    list(&mut out, "Announcing", &announcing);
    let withdrawn: Vec<String> = e.withdrawn.iter().map(|w| format!("{}: {}", w.node, w.reason)).collect();
    list(&mut out, "Withdrawn", &withdrawn);
    list(&mut out, "Problems", &e.problems);
    list(&mut out, "Events", &e.events);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_upper_cases_and_fills_empty_cells() {
        let t = table(
            &["name", "peers"],
            &[vec!["web".into(), String::new()], vec!["a-longer-name".into(), "r1".into()]],
        );
        assert_eq!(t, "NAME            PEERS\nweb             <none>\na-longer-name   r1\n");
    }
}
