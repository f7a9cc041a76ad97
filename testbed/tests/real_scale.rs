//! ferrolb at scale, counted (issue #39): the smallest size of `bench scale` — 100 fake
//! Nodes (kwok) beside two real nodes with real speakers, the real controller, 100
//! LoadBalancer Services over fake pods, on the real control plane with BIRD — run through
//! the bench's own measuring code. Only what is counted is asserted, never a time:
//! * at rest ferrolb sends nothing but watches and the controller's Lease renewals
//!   (its leader election reads and renews the Lease every 3 s; the speaker has no
//!   periodic request at all: see `ferrolb_bench::scale::requests`);
//! * one Service change (its ports patched; one Service created) makes no component list,
//!   and each speaker receives the changed objects only: the patched Service once; the new
//!   Service and its EndpointSlice, a few writes each, its pool's status once, and no
//!   ServiceAnnouncement (every node writes one: only a node with gated pods watches
//!   them) — counted by the speakers' own `ferrolb_kube_client_watch_events_total`,
//!   bookmarks aside; each speaker writes its ServiceAnnouncement of the new Service and no
//!   Event (BGP);
//! * at rest a speaker receives no change beyond what others wrote meanwhile;
//! * a rolling restart of every speaker costs exactly one list per kind per speaker, its
//!   Node list holds its own Node only (BGP needs no other), and the large lists arrive
//!   gzipped (under a third of their JSON);
//! * every Service created is routed in BIRD via both speakers, and each timed one's
//!   create and status write are found in the audit log.
//!
//! Needs `target/kube/current/ferrolb-kube` with kwok beside it and the debug ferrolb
//! binaries (testbed/test.sh builds them first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::BTreeMap;

use ferrolb_bench::scale::requests::SPEAKER_WATCHES;
use ferrolb_bench::scale::{self, Settings, Size};

#[test]
fn ferrolb_is_quiet_at_rest_lists_nothing_per_change_and_once_per_kind_on_a_restart() {
    let settings = Settings::default();
    let f = scale::measure(Size { nodes: 100, services: 100, l2: false }, &settings).unwrap();
    f.print();

    // At rest: watches and Lease renewals only, and renewals there are (the window was
    // read after the controller's next one: the audit log covers it).
    let rest = &f.rest.requests;
    assert!(rest.lease_renewals() > 0, "no Lease renewal in {:?}: was the controller watched?", rest.window);
    assert_eq!(rest.busy(), BTreeMap::new(), "requests at rest besides watches and Lease renewals");

    // One change: no list by anyone. Each was processed: the Service created after the
    // patch is routed (below), and the components see Services in order.
    for (what, r) in [("ports patched", &f.port_change), ("one Service created", &f.new_service)] {
        assert_eq!(r.lists(), BTreeMap::new(), "{what}: lists");
        assert_eq!(r.later_pages(), BTreeMap::new(), "{what}: list pages");
    }
    // Per node, its ServiceAnnouncement alone: a BGP Service is announced by every node, and
    // an Event from each would grow with the cluster.
    let per_node = f.new_service.tally(|c| c.is_write() && c.request.node.is_some());
    assert!(!per_node.is_empty(), "the new Service's ServiceAnnouncements were written meanwhile");
    assert!(
        per_node.keys().all(|(_, _, resource)| resource == "serviceannouncements"),
        "per-node writes for one BGP Service created: {per_node:?}"
    );

    // What each speaker received: the changed objects, none other, and nothing at rest
    // beyond others' writes to what it watches (bookmarks carry no change).
    let others_at_rest: usize = f.rest.others.values().sum();
    for who in &f.restart.speakers {
        let rest = &f.rest.received[who];
        let changes: u64 = rest.changes_by.values().sum();
        assert!(changes as usize <= others_at_rest, "{who} at rest: {rest:?}; others wrote {others_at_rest}");
        let patched = &f.port_change_received[who];
        assert_eq!(
            patched.changes_by,
            [("services".to_owned(), 1)].into(),
            "{who}, ports patched: {patched:?}"
        );
        // The Service (created, then its annotation and status written by the controller),
        // its EndpointSlice (created, maybe updated once) and its pool (the controller
        // writes its usage into its status). Not the ServiceAnnouncements every node
        // writes: a speaker watches them only for its gated pods (none here).
        let new = &f.new_service_received[who];
        let budget = [("services", 3), ("endpointslices", 2), ("ipaddresspools", 1)];
        for (resource, n) in &new.changes_by {
            let most = budget.iter().find(|(r, _)| r == resource).map(|(_, most)| *most);
            assert!(
                most.is_some_and(|most| *n <= most),
                "{who}, one Service created: {n} {resource}: {new:?}"
            );
        }
        for resource in ["services", "endpointslices"] {
            assert!(
                new.changes_by.contains_key(resource),
                "{who}, one Service created: no {resource}: {new:?}"
            );
        }
    }

    // A rolling restart: each speaker lists each kind it watches exactly once, and
    // whatever else it lists (its pods, its ServiceAnnouncements) once too.
    let lists = f.restart.requests.lists();
    assert_eq!(f.restart.speakers.len(), 2);
    for who in &f.restart.speakers {
        for kind in SPEAKER_WATCHES {
            assert_eq!(
                lists.get(&(who.clone(), kind.to_string())),
                Some(&1),
                "{who} lists of {kind}: {lists:?}"
            );
        }
    }
    let more: BTreeMap<_, _> = lists.iter().filter(|(_, n)| **n != 1).collect();
    assert!(more.is_empty(), "more than one list of a kind by one component: {more:?}");
    let by_others: Vec<_> = lists.keys().filter(|(who, _)| !f.restart.speakers.contains(who)).collect();
    assert!(by_others.is_empty(), "lists by components not restarted: {by_others:?}");
    // BGP only (no L2Advertisement): a speaker lists its own Node, not the cluster's
    // (about 370 KiB of JSON here): a few KiB, whatever the cluster's size.
    let all_nodes = f.restart.uncompressed["nodes"];
    for who in &f.restart.speakers {
        let got = f.restart.received[who].list_bytes_by.get("nodes").copied().unwrap_or(0);
        assert!(
            got > 0 && got < 16 << 10 && got * 20 < all_nodes,
            "{who} received {got} bytes of Nodes; every Node is {all_nodes} bytes of JSON"
        );
    }
    // The large lists came gzipped: those over the apiserver's 128 KiB threshold, in
    // under a third of their size.
    let large: Vec<(&String, &u64)> =
        f.restart.uncompressed.iter().filter(|(k, raw)| *k != "nodes" && **raw > 128 << 10).collect();
    assert!(
        !large.is_empty(),
        "no list large enough for the apiserver to compress: {:?}",
        f.restart.uncompressed
    );
    for who in &f.restart.speakers {
        for (kind, raw) in &large {
            let got = f.restart.received[who].list_bytes_by.get(kind.as_str()).copied().unwrap_or(0);
            assert!(
                got > 0 && got * 3 < **raw,
                "{who} received its {kind} list as {got} bytes, {raw} uncompressed"
            );
        }
    }

    // Every Service routed via both speakers: the 100, the late ones, the change's.
    assert!(f.unrouted.is_empty(), "not routed via both speakers: {:?}", f.unrouted);
    assert!(f.latency.missed.is_empty(), "late Services never routed: {:?}", f.latency.missed);
    assert_eq!(f.latency.samples.len(), settings.late);
    // Each one's route is split at the apiserver: its create and the controller's status
    // write are both in the audit log.
    assert_eq!(f.latency.stages.len(), settings.late, "routes split by the audit log");
}
