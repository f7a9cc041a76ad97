#![allow(clippy::unwrap_used)]
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::parts::gate::caught_up;
use super::*;
use crate::announce::Announced;
use crate::error::one_line;
use crate::metrics::Metrics;
use crate::plan::{self, Plan};

const L2_FILE: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: node1}\nstatus:\n  conditions: [{type: Ready, status: \"True\"}]\n  addresses: [{type: InternalIP, address: 192.0.2.11}]\n---\napiVersion: ferrolb.io/v1alpha1\nkind: IPAddressPool\nmetadata: {name: lan}\nspec: {addresses: [192.0.2.200-192.0.2.250]}\n---\napiVersion: ferrolb.io/v1alpha1\nkind: L2Advertisement\nmetadata: {name: lan-l2}\nspec: {ipAddressPools: [lan]}\n";

fn opts(dir: &std::path::Path, key: Option<PathBuf>) -> StaticOptions {
    let file = dir.join("static.yaml");
    std::fs::write(&file, L2_FILE).unwrap();
    let options = Options { membership_key_file: key, ..Options::defaults("node1") };
    StaticOptions { options, file }
}

#[tokio::test]
async fn l2_advertisements_without_a_key_file_stop_the_speaker_with_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let e = run_static(opts(dir.path(), None), Arc::new(Metrics::new())).await.unwrap_err().to_string();
    assert!(e.contains("L2Advertisement lan-l2") && e.contains("--membership-key-file"), "{e}");
    assert_eq!(one_line(&e), e);
}

#[tokio::test]
async fn a_short_key_is_rejected_naming_the_file_and_never_showing_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, "short-secret\n").unwrap();
    let e = run_static(opts(dir.path(), Some(key.clone())), Arc::new(Metrics::new()))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains(&key.display().to_string()) && e.contains("32"), "{e}");
    assert!(!e.contains("short-secret"), "{e}");
}

#[test]
fn a_drain_is_withdrawn_once_it_outlives_the_max_delay() {
    let ip: IpAddr = "203.0.113.20".parse().unwrap();
    let prefix: ipnet::IpNet = "203.0.113.20/32".parse().unwrap();
    let draining = || {
        let mut a = Plan::default();
        let attrs = plan::RouteAttrs { draining: true, ..Default::default() };
        a.bgp.insert("r".into(), plan::PeerRoutes::unit(prefix, attrs));
        a.draining.insert(ip, "terminating".into());
        a
    };
    let max = Duration::from_secs(30);
    let t0 = Instant::now();
    let mut timers = DrainTimers::new(max);
    let mut p = draining();
    timers.handle(t0, &mut p);
    assert!(p.bgp_addresses().contains(&prefix), "announced while the delay runs");
    assert_eq!(timers.poll_timeout(), Some(t0 + max));
    // Later replans keep the first start time.
    let mut p = draining();
    timers.handle(t0 + Duration::from_secs(29), &mut p);
    assert!(p.bgp_addresses().contains(&prefix));
    let mut p = draining();
    timers.handle(t0 + max, &mut p);
    assert!(p.bgp_addresses().is_empty(), "withdrawn after --drain-max-delay");
    assert!(p.withdrawn[&ip].contains("--drain-max-delay"));
    assert_eq!(timers.poll_timeout(), None, "no timer loop after expiry");
    // The cause ends: the timer is forgotten; a new drain starts afresh.
    let mut p = Plan::default();
    timers.handle(t0 + Duration::from_secs(40), &mut p);
    let mut p = draining();
    timers.handle(t0 + Duration::from_secs(41), &mut p);
    assert!(p.bgp_addresses().contains(&prefix));
}

#[test]
fn an_l2_handover_is_answered_for_the_grace_then_released() {
    let ip: IpAddr = "192.0.2.201".parse().unwrap();
    let handing_over = || {
        let mut a = Plan::default();
        a.l2.insert(ip, vec![]);
        a.l2_draining.insert(ip, "default/lan: every serving endpoint on node node1 is terminating".into());
        a
    };
    let max = Duration::from_secs(30);
    let t0 = Instant::now();
    let mut timers = DrainTimers::new(max);
    let mut p = handing_over();
    timers.handle(t0, &mut p);
    assert!(p.l2.contains_key(&ip), "still answered during the grace");
    assert_eq!(timers.poll_timeout(), Some(t0 + HANDOVER_GRACE));
    let mut p = handing_over();
    timers.handle(t0 + HANDOVER_GRACE / 2, &mut p);
    assert!(p.l2.contains_key(&ip));
    let mut p = handing_over();
    timers.handle(t0 + HANDOVER_GRACE, &mut p);
    assert!(!p.l2.contains_key(&ip) && !p.l2_draining.contains_key(&ip), "released after the grace");
    assert!(p.withdrawn[&ip].contains("handover grace"), "{:?}", p.withdrawn);
    assert_eq!(timers.poll_timeout(), None, "no timer loop after expiry");
    // Owned normally again (an endpoint came back): nothing to expire.
    let mut p = Plan::default();
    p.l2.insert(ip, vec![]);
    timers.handle(t0 + HANDOVER_GRACE * 2, &mut p);
    assert!(p.l2.contains_key(&ip));
    assert_eq!(timers.poll_timeout(), None);
}

#[test]
fn the_gate_hold_ends_once_the_plan_is_really_announced() {
    let prefix: ipnet::IpNet = "203.0.113.20/32".parse().unwrap();
    let vip: IpAddr = "192.0.2.200".parse().unwrap();
    assert!(caught_up(&Plan::default(), &Announced::default()), "nothing planned");
    let mut plan = Plan::default();
    plan.bgp.insert("r".into(), plan::PeerRoutes::unit(prefix, plan::RouteAttrs::default()));
    plan.l2.insert(vip, vec![]);
    let mut announced = Announced::default();
    assert!(!caught_up(&plan, &announced));
    announced.bgp.insert("r".to_string(), ferrolb_proto::bgp::session::Prefixes::unit(prefix));
    assert!(!caught_up(&plan, &announced), "the L2 announcement is not out yet");
    announced.l2.insert(vip);
    assert!(caught_up(&plan, &announced));
}

/// The info summary names at most three addresses and counts the rest, without
/// formatting them.
#[test]
fn summary_names_three_and_counts_the_rest() {
    let items = || (1..=5).map(|i| format!("203.0.113.{i}"));
    assert_eq!(state::first_few(items(), 5), "203.0.113.1, 203.0.113.2, 203.0.113.3, … +2 more");
    assert_eq!(state::first_few(items().take(2), 2), "203.0.113.1, 203.0.113.2");
    let mut formatted = 0;
    let lazy = (1..=50_000).map(|i| {
        formatted += 1;
        i.to_string()
    });
    assert_eq!(state::first_few(lazy, 50_000), "1, 2, 3, … +49997 more");
    assert_eq!(formatted, 3, "only the named items are formatted");
}

/// Why the elections run again, as the log and `ferrolb_l2_ownership_changes_total{reason}`
/// say it: a heartbeat suspicion, its end, and a suspect SWIM drops (which changes no
/// single-owner election, but the active-active spreads).
#[test]
fn a_change_of_view_names_its_cause() {
    use super::parts::l2::View;
    let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<BTreeSet<String>>();
    let view =
        |counted: &[&str], suspected: &[&str]| View { counted: names(counted), suspected: names(suspected) };
    let all = view(&["node1", "node2"], &[]);
    let suspecting = view(&["node1", "node2"], &["node2"]);
    let cases = [
        (&all, &suspecting, "heartbeat_missed", "node2 stopped sending heartbeats"),
        (&suspecting, &all, "heartbeat_resumed", "node2 sends heartbeats again"),
        (&suspecting, &view(&["node1"], &[]), "member_left", "node2 left membership"),
        (&view(&["node1"], &[]), &all, "member_joined", "node2 joined membership"),
        // node1 itself, declared down, stands back (and node2 left meanwhile), then counts again.
        (
            &all,
            &view(&["node2"], &[]),
            "declared_down",
            "this node was declared down: it stands back for its join grace",
        ),
        (
            &all,
            &view(&[], &[]),
            "declared_down",
            "this node was declared down: it stands back for its join grace, node2 left membership",
        ),
        (&view(&["node2"], &[]), &all, "rejoined", "this node counts itself again after its join grace"),
    ];
    for (before, after, label, text) in cases {
        let cause = View::cause(Some(before), Some(after), "node1");
        assert_eq!((cause.label, cause.text.as_str()), (label, text), "{before:?} -> {after:?}");
    }
    assert_eq!(View::cause(None, Some(&all), "node1").text, "membership settled with node1, node2");
    assert_eq!(suspecting.reachable(), names(&["node1"]));
}
