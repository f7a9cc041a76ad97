//! The circle broken for real (issue #17 points 3 to 5), as `demo --kubelets` shows it
//! (`testbed/src/demo/kubelets.rs` says every step; each one that does not hold is an
//! error there): three control planes run the `ferrolb-bootstrap` static pod on real
//! kubelets and a worker that knows only the VIP registers through it, but not before
//! the static pods are placed; ferrolb from `manifests/` runs on the kubelets from the
//! imported image and its Services (L2 and BGP) are reached by the client; the speaker
//! DaemonSet is upgraded to a second image by the real DaemonSet controller while the
//! client's connections to both Services all succeed; the whole lab cold-starts.
//!
//! Needs `target/kube/current/ferrolb-kube` (testbed/kube/build.sh), the debug binaries
//! the image holds, containerd, runc and a C compiler (testbed/prereqs.sh).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use ferrolb_lab::addressing;
use ferrolb_testbed::demo::kubelets::{self, ARP_PROBE, IMAGE, IMAGE_NEXT, NODES, PROBE};

#[test]
fn workers_register_only_through_the_vip_and_the_speaker_upgrade_loses_nothing() {
    let report = kubelets::run().unwrap();
    let up = &report.upgrade;

    // The real DaemonSet controller replaced every speaker, each node's with the new image.
    let nodes: Vec<String> = (1..=NODES).map(addressing::node_name).collect();
    for (pods, image) in [(&up.before, IMAGE), (&up.after, IMAGE_NEXT)] {
        let on: Vec<&str> = pods.iter().map(|p| p.1.as_str()).collect();
        assert_eq!(on, nodes, "speakers {pods:?}");
        assert!(pods.iter().all(|p| p.2.ends_with(image)), "speakers {pods:?}, want {image}");
    }
    assert!(up.after.iter().all(|a| up.before.iter().all(|b| b.0 != a.0)), "not replaced: {up:?}");

    // The client's connections ran through the whole rollout and none failed.
    for (what, (addr, r)) in [("L2", &up.l2), ("BGP", &up.bgp)] {
        println!(
            "{what} Service {addr}: {} connections every {PROBE:?} over the {:.1} s rollout, {} failed",
            r.sent,
            up.took.as_secs_f64(),
            r.lost()
        );
        let floor = (up.took.as_millis() / PROBE.as_millis() / 4) as u64;
        assert!(r.sent >= floor, "{what}: only {} probes over {:?}", r.sent, up.took);
        assert_eq!(r.lost(), 0, "{what} Service {addr}: connections failed during the upgrade: {:?}", r.gaps);
    }

    // A new client resolving the L2 address at any moment got an answer, while its
    // owner's speaker was replaced (the owner changed: the handover happened).
    assert!(up.arp.unanswered.is_empty(), "ARP for {} unanswered during the upgrade: {:?}", up.l2.0, up.arp);
    let owners: std::collections::BTreeSet<&String> = up.arp.owners.iter().collect();
    assert!(owners.len() >= 2, "the L2 owner never changed: {:?}", up.arp);
    assert!(up.arp.sent as u128 >= up.took.as_millis() / ARP_PROBE.as_millis() / 4, "{:?}", up.arp);

    // The cold start reached every milestone, in order.
    let names: Vec<&str> = report.cold_start.iter().map(|m| m.0.as_str()).collect();
    for want in ["VIP up", "registered", "speakers Ready", "controllers Ready", "a new Service", "reached"] {
        assert!(names.iter().any(|n| n.contains(want)), "no cold-start milestone {want:?} in {names:?}");
    }
    assert!(report.cold_start.windows(2).all(|w| w[0].1 <= w[1].1), "{:?}", report.cold_start);
    assert!(report.image_bytes > 0);
}
