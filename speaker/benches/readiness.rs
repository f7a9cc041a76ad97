//! Prints how long readiness-gate evaluation takes with 10k Local Services (3 endpoints
//! each) in the model and 100 gated pods on this node: the gate-pending count before
//! planning, and the desired conditions after it.
//! Run with `cargo bench -p ferrolb-speaker --bench readiness`; it reports, it does not judge.
use std::time::Instant;

use ferrolb_speaker::announce::Announced;
use ferrolb_speaker::model::ClusterModel;
use ferrolb_speaker::plan::Plan;
use ferrolb_speaker::readiness::{self, GatedPod, Inputs, RemoteAnnounced};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;

fn main() {
    let services = 10_000u32;
    let gated = 100u32;
    let build = Instant::now();
    let mut model = ClusterModel::new("ferrolb.io/lb");
    let ip = |i: u32| format!("198.18.{}.{}", i / 250, i % 250 + 1);
    for i in 0..services {
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": format!("s{i}"), "namespace": "default"},
            "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local", "selector": {"app": format!("s{i}")}},
            "status": {"loadBalancer": {"ingress": [{"ip": ip(i)}]}},
        }))
        .unwrap_or_default();
        model.upsert_service(&svc);
        let eps: Vec<_> = (0..3)
            .map(|n| {
                json!({
                    "addresses": [format!("10.{}.{}.{}", n, i / 250, i % 250 + 1)],
                    "nodeName": format!("node{}", n + 1),
                    "conditions": {"ready": n != 0},
                    "targetRef": {"kind": "Pod", "name": format!("s{i}-{n}"), "namespace": "default"},
                })
            })
            .collect();
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": format!("s{i}-x"), "namespace": "default", "labels": {"kubernetes.io/service-name": format!("s{i}")}},
            "addressType": "IPv4",
            "endpoints": eps,
        }))
        .unwrap_or_else(|_| EndpointSlice { address_type: "IPv4".into(), ..Default::default() });
        model.upsert_endpoint_slice(&slice);
    }
    let pods: Vec<GatedPod> = (0..gated)
        .filter_map(|i| {
            let i = i * (services / gated);
            let p: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("s{i}-0"), "namespace": "default", "labels": {"app": format!("s{i}")}},
                "spec": {"nodeName": "node1", "containers": [], "readinessGates": [{"conditionType": readiness::CONDITION_TYPE}]},
                "status": {"podIP": format!("10.0.{}.{}", i / 250, i % 250 + 1), "conditions": [{"type": "ContainersReady", "status": "True"}]},
            }))
            .ok()?;
            GatedPod::from_pod(&p)
        })
        .collect();
    println!(
        "model of {services} Services with 3 endpoints each, {} gated pods: built in {:?}",
        pods.len(),
        build.elapsed()
    );

    let rounds = 20u32;
    let t = Instant::now();
    let mut touched = 0;
    for r in 0..rounds {
        // Alternate between "all waiting" and "none waiting" so every round changes the model.
        let these = if r % 2 == 0 { &pods[..] } else { &[][..] };
        touched += readiness::apply_gate_pending(&mut model, these, "node1").len();
    }
    println!(
        "apply_gate_pending: {:?} per call ({touched} Service changes over {rounds} calls)",
        t.elapsed() / rounds
    );
    readiness::apply_gate_pending(&mut model, &pods, "node1");

    let plan = Plan::default();
    let announced = Announced::default();
    let remote = RemoteAnnounced::default();
    let inputs = Inputs { model: &model, me: "node1", plan: &plan, announced: &announced, remote: &remote };
    let t = Instant::now();
    let mut falses = 0;
    for _ in 0..rounds {
        falses = readiness::desired_all(&pods, &inputs).values().filter(|c| !c.status).count();
    }
    println!("desired_all for {} pods: {:?} per call ({falses} False)", pods.len(), t.elapsed() / rounds);
}
