//! The readiness gate `ferrolb.io/load-balancer-ready` end to end: real
//! `ferrolb-speaker --kubeconfig` processes on two nodes against the fake apiserver,
//! with BIRD as the router. A gated pod behind a Local Service on node1 (its endpoint
//! not ready, its containers ready) is False while no session carries the route, True
//! once node1 really announced it (BIRD has the route), False with a reason once the
//! router is gone; a restart of node1's speaker does not flap it (startup hold). A gated pod behind a Cluster Service that only node2 advertises is
//! True from node2's ServiceAnnouncement. A pod without the gate is never written.
//!
//! Needs `target/debug/ferrolb-speaker` (testbed/test.sh builds it first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferrolb_lab::addressing::node_ip as v4;
use ferrolb_lab::kubeapi::{FakeCluster, Objects};
use ferrolb_lab::process::Proc;
use ferrolb_lab::routers::{self, Bird, RouterSpec};
use ferrolb_lab::speaker::{start_kube, yaml};
use ferrolb_lab::{Error, Lab, LabConfig, addressing, client, wait};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(30);
const METRICS_PORT: u16 = 9123;
const GATE: &str = "ferrolb.io/load-balancer-ready";
/// Local Service `local`, announced by BGP from every node with a serving endpoint.
const LOCAL_VIP: &str = "203.0.113.20";
/// Cluster Service `web`, from a pool only node2 advertises.
const WEB_VIP: &str = "203.0.113.70";

fn speaker(lab: &Lab, cluster: &FakeCluster, i: usize) -> Proc {
    start_kube(lab, cluster.kubeconfig(), i, "gspeaker", Some(SocketAddr::new(v4(i), METRICS_PORT))).unwrap()
}

fn objects() -> String {
    let service = |name: &str, policy: &str, vip: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default}}\nspec: {{type: LoadBalancer, externalTrafficPolicy: {policy}, selector: {{app: {name}}}, ports: [{{port: 80, protocol: TCP}}]}}\nstatus: {{loadBalancer: {{ingress: [{{ip: \"{vip}\"}}]}}}}\n"
        )
    };
    // The gated pod's endpoint is neither ready nor serving (the gate holds it back);
    // the pod without the gate is not ready either (its containers are not).
    let slice = format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: local-a, namespace: default, labels: {{kubernetes.io/service-name: local}}}}\naddressType: IPv4\nendpoints:\n- addresses: [198.18.0.1]\n  nodeName: {n1}\n  conditions: {{ready: false, serving: false}}\n  targetRef: {{kind: Pod, name: local-0, namespace: default}}\n- addresses: [198.18.0.2]\n  nodeName: {n1}\n  conditions: {{ready: false, serving: false}}\n  targetRef: {{kind: Pod, name: plain-0, namespace: default}}\n",
        n1 = addressing::node_name(1)
    );
    yaml::stream(&[
        yaml::node(1),
        yaml::node(2),
        yaml::pool("public", &["203.0.113.0/26"]),
        yaml::pool("edge", &["203.0.113.64/26"]),
        yaml::peer("router", addressing::NODE_ASN, addressing::ROUTER_ASN, addressing::ROUTER_V4.into(), &[]),
        yaml::bgp_advertisement("public", &["ipAddressPools: [public]"]),
        yaml::bgp_advertisement(
            "edge",
            &["ipAddressPools: [edge]", "nodeSelectors: [{matchLabels: {rack: r2}}]"],
        ),
        service("local", "Local", LOCAL_VIP),
        service("web", "Cluster", WEB_VIP),
        slice,
    ])
}

/// Creates a pod on node1 and gives it the status a kubelet would.
fn create_pod(cluster: &FakeCluster, name: &str, app: &str, ip: &str, gate: bool, containers_ready: bool) {
    let mut spec = json!({"nodeName": addressing::node_name(1), "containers": [{"name": "c", "image": "registry.invalid/app"}]});
    if gate {
        spec["readinessGates"] = json!([{"conditionType": GATE}]);
    }
    cluster
        .apply(&json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"app": app}}, "spec": spec}))
        .unwrap();
    let ready = if containers_ready { "True" } else { "False" };
    let status = json!({"status": {"podIP": ip, "podIPs": [{"ip": ip}], "conditions": [
        {"type": "PodScheduled", "status": "True"},
        {"type": "ContainersReady", "status": ready},
        {"type": "Ready", "status": "False"},
    ]}});
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    cluster.block_on(pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))).unwrap();
}

fn stored(cluster: &FakeCluster, name: &str) -> Value {
    cluster.api().get_json("v1", "pods", Some("default"), name).expect("pod stored")
}

fn gate_of(pod: &Value) -> Option<Value> {
    pod["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == GATE).cloned()
}

/// Waits until the pod's gate condition satisfies `ok`; returns it.
fn wait_gate(lab: &Lab, cluster: &FakeCluster, pod: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let r =
        wait::until(&format!("{pod}: {what}"), T, || Ok(gate_of(&stored(cluster, pod)).filter(|c| ok(c))));
    match r {
        Ok(c) => c,
        Err(e) => panic!("{e}; pod now {}\n{}", stored(cluster, pod), lab.logs(80)),
    }
}

#[test]
fn the_gate_follows_what_node1_really_announces_and_pods_without_it_are_untouched() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let cluster = FakeCluster::start(&lab).unwrap();
    cluster.apply_stream(&objects()).unwrap();
    create_pod(&cluster, "local-0", "local", "198.18.0.1", true, true);
    create_pod(&cluster, "plain-0", "local", "198.18.0.2", false, true);
    create_pod(&cluster, "web-0", "web", "198.18.0.3", true, true);
    let plain_before = stored(&cluster, "plain-0");
    let mut s1 = speaker(&lab, &cluster, 1);
    let _s2 = speaker(&lab, &cluster, 2);

    // No router yet: node1 plans the Local address (its pod waits only for the gate, so
    // it counts as serving there) but no session carries it: False, pending.
    let c = wait_gate(&lab, &cluster, "local-0", "False, AnnouncementPending", |c| {
        c["status"] == "False" && c["reason"] == "AnnouncementPending"
    });
    let msg = c["message"].as_str().unwrap();
    assert!(msg.contains(LOCAL_VIP) && msg.contains("BGP UPDATE"), "{msg}");

    // Cluster: only node2 advertises the address; its ServiceAnnouncement makes it True.
    let c = wait_gate(&lab, &cluster, "web-0", "True from node2's announcement", |c| c["status"] == "True");
    assert_eq!(c["reason"], "Announced");
    assert!(c["message"].as_str().unwrap().contains("announced by node node2"), "{c}");

    // The router comes up: True once node1's UPDATE went out, and BIRD has the route
    // from node1 (node2 has no endpoint, so it does not announce it).
    let t = Instant::now();
    let mut bird = Bird::start(&lab, &RouterSpec::default()).unwrap();
    let c = wait_gate(&lab, &cluster, "local-0", "True once announced", |c| c["status"] == "True");
    println!("router started → gate True: {:?} (50 ms polling)", t.elapsed());
    assert_eq!(c["reason"], "Announced");
    assert!(c["message"].as_str().unwrap().contains("by BGP to router"), "{c}");
    let r = routers::wait_rib(&bird, &format!("{LOCAL_VIP}/32"), &[v4(1)], T);
    assert!(r.is_ok(), "{r:?}\n{}", lab.logs(60));

    // node1's speaker crashes and the router restarts meanwhile: the new process starts
    // with no session. The pod, True throughout, is not written at all (no flap to False
    // while the new process's session comes up: the startup hold).
    let true_version = stored(&cluster, "local-0")["metadata"]["resourceVersion"].clone();
    s1.kill();
    bird.process().kill();
    let _s1 = speaker(&lab, &cluster, 1);
    let metrics_of_node1 =
        || client::http_get(lab.client(), SocketAddr::new(v4(1), METRICS_PORT), "/metrics", T);
    wait::until("node1's new speaker synced with its gated pods", T, || {
        let m = metrics_of_node1()?;
        Ok::<_, Error>(
            (m.contains("ferrolb_speaker_model_synced 1") && m.contains("ferrolb_readiness_pods_gated 2"))
                .then_some(()),
        )
    })
    .unwrap();
    // Without the hold, the first evaluation writes False within milliseconds (no timer:
    // the margin of wait::stays covers the write); the hold itself lasts far longer.
    let version = || Ok(stored(&cluster, "local-0")["metadata"]["resourceVersion"].clone());
    let kept = |v: &Value| *v == true_version;
    wait::stays("the gate unwritten while the session is down", Duration::ZERO, version, kept).unwrap();
    let mut bird = Bird::start(&lab, &RouterSpec::default()).unwrap();
    let r = routers::wait_rib(&bird, &format!("{LOCAL_VIP}/32"), &[v4(1)], T);
    assert!(r.is_ok(), "{r:?}\n{}", lab.logs(60));
    wait::stays("the gate unwritten once the session is up", Duration::ZERO, version, kept).unwrap();

    // The router goes away (its sessions with it): False with the reason.
    let t = Instant::now();
    bird.process().kill();
    let c =
        wait_gate(&lab, &cluster, "local-0", "False after the session went down", |c| c["status"] == "False");
    println!("router killed → gate False: {:?} (50 ms polling)", t.elapsed());
    assert_eq!(c["reason"], "AnnouncementPending", "{c}");
    assert!(c["message"].as_str().unwrap().contains("has not sent its BGP UPDATE"), "{c}");

    // The pod without the gate was never written.
    let plain = stored(&cluster, "plain-0");
    assert_eq!(plain["metadata"]["resourceVersion"], plain_before["metadata"]["resourceVersion"]);
    assert_eq!(gate_of(&plain), None);

    // ferrolb_readiness_*: node1's restarted speaker sees two gated pods and wrote
    // only the False after the router went away (nothing at its start). The apiserver
    // stores the False before the speaker reads the patch's answer and counts it: wait
    // for the count to show, then require exactly that one write.
    let metrics = wait::until("node1's readiness metrics", T, || {
        let m = metrics_of_node1()?;
        let counted = m.contains("ferrolb_readiness_conditions_written_total{status=\"False\"");
        Ok::<_, Error>((m.contains("ferrolb_readiness_pods_gated 2") && counted).then_some(m))
    })
    .unwrap();
    let written = |status: &str, reason: &str| {
        let line =
            format!("ferrolb_readiness_conditions_written_total{{status=\"{status}\",reason=\"{reason}\"}} ");
        metrics.lines().find_map(|l| l.strip_prefix(&line)).map(str::to_owned)
    };
    assert_eq!(written("False", "AnnouncementPending").as_deref(), Some("1"), "{metrics}");
    assert_eq!(written("True", "Announced"), None, "{metrics}");
    assert!(metrics.contains("ferrolb_readiness_write_errors_total"), "{metrics}");
}
