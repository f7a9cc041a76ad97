//! Make-before-break BGP drain of the real `ferrolb-speaker` against the ExaBGP
//! recorder (iBGP): a Local Service whose only endpoint on the node turns terminating
//! is re-announced with GRACEFUL_SHUTDOWN (65535:0) and LOCAL_PREF 0, then withdrawn
//! once the endpoint is gone; a terminating endpoint that lingers is withdrawn after
//! --drain-max-delay; SIGTERM re-announces everything with 65535:0 before the Cease.
//! L2: the owner of a Local Service whose endpoints on it turn terminating hands the
//! address over (the successor announces) and keeps answering for the handover grace.
//!
//! Needs `target/debug/ferrolb-speaker` (testbed/test.sh builds it first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::net::IpAddr;
use std::time::Duration;

use ferrolb_lab::client::{self, ProbeStream};
use ferrolb_lab::routers::exabgp::Record;
use ferrolb_lab::routers::{ExaBgp, ExaNeighbor};
use ferrolb_lab::speaker::{self, Speaker, write_membership_key, yaml};
use ferrolb_lab::{Lab, LabConfig, addressing, wait};

const T: Duration = Duration::from_secs(30);
const GSHUT: &str = "65535:0";

/// A Local Service with one endpoint on node 1 in the given condition (None: no endpoint).
fn local_service(name: &str, ip: IpAddr, endpoint: Option<&str>) -> String {
    let mut s = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default}}\nspec: {{type: LoadBalancer, externalTrafficPolicy: Local, ports: [{{port: 80, protocol: TCP}}]}}\nstatus: {{loadBalancer: {{ingress: [{{ip: \"{ip}\"}}]}}}}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {name}-1, namespace: default, labels: {{kubernetes.io/service-name: {name}}}}}\naddressType: IPv4\nendpoints:"
    );
    match endpoint {
        Some(cond) => s.push_str(&format!(
            "\n- {{addresses: [10.0.0.1], nodeName: {}, conditions: {cond}}}\n",
            addressing::node_name(1)
        )),
        None => s.push_str(" []\n"),
    }
    s
}

const READY: &str = "{ready: true}";
const TERMINATING: &str = "{ready: false, serving: true, terminating: true}";

fn file(local: Option<&str>, linger: Option<&str>) -> String {
    let objs = vec![
        yaml::node(1),
        yaml::pool("public", &[addressing::BGP_POOL_V4]),
        yaml::service("web", &[addressing::bgp_vip_v4(10)]),
        local_service("local", addressing::bgp_vip_v4(20), local),
        local_service("linger", addressing::bgp_vip_v4(21), linger),
        yaml::recorder_peer(),
        yaml::bgp_advertisement("public", &["ipAddressPools: [public]", "localPref: 250"]),
    ];
    yaml::stream(&objs)
}

fn announces(r: &Record, prefix: &str) -> bool {
    matches!(r, Record::Update(u) if u.announced.iter().any(|(p, _)| p == prefix))
}

fn announces_drained(r: &Record, prefix: &str) -> bool {
    matches!(r, Record::Update(u) if u.announced.iter().any(|(p, _)| p == prefix)
        && u.attrs.communities.iter().any(|c| c == GSHUT))
}

fn withdraws(r: &Record, prefix: &str) -> bool {
    matches!(r, Record::Update(u) if u.withdrawn.iter().any(|p| p == prefix))
}

fn position(records: &[Record], pred: impl Fn(&Record) -> bool) -> Option<usize> {
    records.iter().position(pred)
}

#[test]
fn draining_announces_graceful_shutdown_before_every_withdrawal() {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let recorder = ExaBgp::start(&lab, lab.client(), "recorder", &[ExaNeighbor::recorder(1)]).unwrap();
    let mut sp = Speaker::start_with(
        &lab,
        1,
        &file(Some(READY), Some(READY)),
        &speaker::binary("debug").unwrap(),
        &["--drain-max-delay", "4s", "--drain-on-shutdown", "2s"],
    )
    .unwrap();
    for p in ["203.0.113.10/32", "203.0.113.20/32", "203.0.113.21/32"] {
        let r = recorder.wait_record(&format!("{p} announced"), T, |r| announces(r, p));
        assert!(r.is_ok(), "{r:?}\n{}", sp.logs());
    }
    assert!(!recorder.records().iter().any(|r| announces_drained(r, "203.0.113.20/32")));

    // (b, c) The only endpoint of both Local Services turns terminating: drained, not withdrawn.
    sp.replace_file(&file(Some(TERMINATING), Some(TERMINATING))).unwrap();
    let Record::Update(u) = recorder
        .wait_record("203.0.113.20/32 drained", T, |r| announces_drained(r, "203.0.113.20/32"))
        .unwrap()
    else {
        unreachable!()
    };
    assert_eq!(u.attrs.local_pref, Some(0), "iBGP: LOCAL_PREF 0 while draining");
    assert!(!recorder.records().iter().any(|r| withdraws(r, "203.0.113.20/32")), "drained, not withdrawn");
    sp.wait_log("every serving endpoint on node", T).unwrap();
    // The endpoint of `local` goes: withdrawn (the lingering one stays until the max delay).
    sp.replace_file(&file(None, Some(TERMINATING))).unwrap();
    recorder.wait_record("203.0.113.20/32 withdrawn", T, |r| withdraws(r, "203.0.113.20/32")).unwrap();
    // `linger` keeps its terminating endpoint: withdrawn once --drain-max-delay passes.
    recorder.wait_record("203.0.113.21/32 withdrawn", T, |r| withdraws(r, "203.0.113.21/32")).unwrap();
    sp.wait_log("drained for --drain-max-delay", T).unwrap();
    let records = recorder.records();
    for p in ["203.0.113.20/32", "203.0.113.21/32"] {
        let drained = position(&records, |r| announces_drained(r, p)).unwrap();
        let gone = position(&records, |r| withdraws(r, p)).unwrap();
        assert!(drained < gone, "{p}: 65535:0 (record {drained}) before the withdrawal (record {gone})");
    }
    // The Cluster Service never drained.
    assert!(!records.iter().any(|r| announces_drained(r, "203.0.113.10/32")));

    // (a) SIGTERM: 65535:0 on the remaining prefix, then the Cease; exit 0.
    let before = recorder.records().len();
    assert_eq!(sp.terminate(Duration::from_secs(10)), Some(0), "{}", sp.logs());
    recorder
        .wait_record("session down", T, |r| matches!(r, Record::State { state, .. } if state == "down"))
        .unwrap();
    let records = recorder.records();
    let tail = &records[before..];
    let drained = position(tail, |r| announces_drained(r, "203.0.113.10/32"));
    let closed = position(tail, |r| {
        withdraws(r, "203.0.113.10/32")
            || matches!(r, Record::Notification { .. })
            || matches!(r, Record::State { state, .. } if state == "down")
    });
    let (Some(drained), Some(closed)) = (drained, closed) else {
        panic!("after SIGTERM: {tail:?}\n{}", sp.logs());
    };
    assert!(drained < closed, "65535:0 (record {drained}) before the close (record {closed}): {tail:?}");
    if let Record::Update(u) = &tail[drained] {
        assert_eq!(u.attrs.local_pref, Some(0));
    }
}

/// Two nodes, L2 for a Local Service with one endpoint per node in the given conditions.
fn l2_file(vips: &[IpAddr], conds: [&str; 2]) -> String {
    let ips: Vec<String> = vips.iter().map(|ip| format!("{{ip: \"{ip}\"}}")).collect();
    let mut svc = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: lan, namespace: default}}\nspec: {{type: LoadBalancer, externalTrafficPolicy: Local, ports: [{{port: 80, protocol: TCP}}]}}\nstatus: {{loadBalancer: {{ingress: [{}]}}}}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: lan-1, namespace: default, labels: {{kubernetes.io/service-name: lan}}}}\naddressType: IPv4\nendpoints:\n",
        ips.join(", ")
    );
    for (i, cond) in conds.iter().enumerate() {
        svc.push_str(&format!(
            "- {{addresses: [10.0.0.{}], nodeName: {}, conditions: {cond}}}\n",
            i + 1,
            addressing::node_name(i + 1)
        ));
    }
    yaml::stream(&[
        yaml::node(1),
        yaml::node(2),
        yaml::pool("lan", &["192.0.2.200-192.0.2.250", "2001:db8::200-2001:db8::250"]),
        yaml::l2_advertisement("lan", &["ipAddressPools: [lan]"]),
        svc,
    ])
}

#[test]
fn an_l2_owner_whose_local_endpoints_terminate_hands_over_before_it_stops() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let key = write_membership_key(&lab, "cluster-key").unwrap();
    let (vips, o) = addressing::l2_vip_pair();
    let other = 3 - o;
    for n in lab.nodes() {
        for v in vips {
            lab.add_vip_on_lo(n, v).unwrap();
        }
    }
    let ready = l2_file(&vips, [READY, READY]);
    let speakers = [1, 2].map(|i| Speaker::start_l2(&lab, i, &ready, &key).unwrap());
    for v in vips {
        // Pinging makes the client resolve the address (a first gratuitous ARP creates no entry).
        let want = addressing::node_mac(o);
        let r = wait::until(&format!("client resolves {v} to node{o}"), T, || {
            let _ = lab.client().exec_output(&["ping", "-c", "1", "-W", "1", &v.to_string()]);
            let n = client::neighbour(lab.client(), "eth0", v)?;
            Ok((n.and_then(|n| n.mac).as_deref() == Some(want.as_str())).then_some(()))
        });
        assert!(r.is_ok(), "{r:?}\n{}", lab.logs(30));
    }
    let probes = vips.map(|v| ProbeStream::start(lab.client(), v, Duration::from_millis(10)).unwrap());

    // The owner's endpoint turns terminating, on both nodes' files.
    let mut conds = [READY, READY];
    conds[o - 1] = TERMINATING;
    let terminating = l2_file(&vips, conds);
    for sp in &speakers {
        sp.replace_file(&terminating).unwrap();
    }
    let (old, new) = (&speakers[o - 1], &speakers[other - 1]);
    // The successor announces (gratuitous ARP / unsolicited NA move the client)...
    for v in vips {
        let r = client::wait_neighbour_mac(lab.client(), "eth0", v, &addressing::node_mac(other), T);
        assert!(r.is_ok(), "{v}: {r:?}\n{}", lab.logs(40));
    }
    // ...while the old owner still answers, then stops once the grace has passed.
    let r = old.wait_log("L2 handover: still answering ARP/NDP while the successor announces", T);
    assert!(r.is_ok(), "{r:?}\n{}", old.logs());
    let r = old.wait_log("handover grace of", T);
    assert!(r.is_ok(), "{r:?}\n{}", old.logs());
    assert!(old.logs().contains(&format!("to node {}", addressing::node_name(other))), "{}", old.logs());
    assert!(!new.logs().contains("L2 handover"), "the successor owns normally\n{}", new.logs());
    for (v, p) in vips.iter().zip(probes) {
        let r = p.stop(Duration::from_millis(100));
        println!("L2 handover {v}: {} probes, {} lost", r.sent, r.lost());
    }
    for v in vips {
        assert_eq!(
            client::neighbour(lab.client(), "eth0", v).unwrap().and_then(|n| n.mac),
            Some(addressing::node_mac(other))
        );
    }
}
