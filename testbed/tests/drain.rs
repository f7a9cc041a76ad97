//! Make-before-break BGP drain of the real `ferrolb-speaker` against the ExaBGP
//! recorder (iBGP): a Local Service whose only endpoint on the node turns terminating
//! is re-announced with GRACEFUL_SHUTDOWN (65535:0) and LOCAL_PREF 0, then withdrawn
//! once the endpoint is gone; a terminating endpoint that lingers is withdrawn after
//! --drain-max-delay; SIGTERM re-announces everything with 65535:0 before the Cease.
//!
//! Needs `target/debug/ferrolb-speaker` (testbed/test.sh builds it first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::net::IpAddr;
use std::time::Duration;

use ferrolb_testbed::routers::exabgp::Record;
use ferrolb_testbed::routers::{ExaBgp, ExaNeighbor};
use ferrolb_testbed::speaker::{self, Speaker, yaml};
use ferrolb_testbed::{Lab, LabConfig, plan};

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
            plan::node_name(1)
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
        yaml::pool("public", &[plan::BGP_POOL_V4]),
        yaml::service("web", &[plan::bgp_vip_v4(10)]),
        local_service("local", plan::bgp_vip_v4(20), local),
        local_service("linger", plan::bgp_vip_v4(21), linger),
        yaml::peer("recorder", plan::ROUTER_ASN, plan::ROUTER_ASN, plan::CLIENT_V4.into(), &[]),
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
    let node = plan::node_v4(1).into();
    let mut rec = ExaNeighbor::to_router(plan::CLIENT_V4.into(), node, plan::CLIENT_V4);
    rec.passive = true;
    (rec.local_as, rec.peer_as) = (plan::ROUTER_ASN, plan::ROUTER_ASN);
    let recorder = ExaBgp::start(&lab, lab.client(), "recorder", &[rec]).unwrap();
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
