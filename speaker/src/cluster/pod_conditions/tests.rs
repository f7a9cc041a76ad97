#![allow(clippy::unwrap_used)]
use super::*;
use crate::readiness::tests::pod;

#[test]
fn the_patch_changes_only_the_gate_condition_and_keeps_transition_time_while_status_holds() {
    let mut p = pod("a", "node1", "web", "10.0.0.1", true);
    let t0 = Time("2026-01-01T00:00:00Z".parse().unwrap());
    let t1 = Time("2026-01-02T00:00:00Z".parse().unwrap());
    let cond = |status| GateCondition { status, reason: "R".into(), message: "m".into() };
    let body = condition_patch(&p, &cond(false), &t0);
    assert_eq!(body["metadata"]["resourceVersion"], "1", "guarded by the resourceVersion");
    let cs = body["status"]["conditions"].as_array().unwrap();
    assert_eq!(cs.len(), 3);
    assert_eq!(cs[0]["type"], "ContainersReady");
    assert_eq!(cs[1]["type"], "Ready");
    assert_eq!((cs[2]["type"].as_str(), cs[2]["status"].as_str()), (Some(CONDITION_TYPE), Some("False")));
    // Store it, then: same status keeps t0, a flip takes the new time.
    p.status.as_mut().unwrap().conditions =
        serde_json::from_value(body["status"]["conditions"].clone()).unwrap();
    let same = condition_patch(&p, &cond(false), &t1);
    assert_eq!(same["status"]["conditions"][2]["lastTransitionTime"], "2026-01-01T00:00:00Z");
    assert_eq!(same["status"]["conditions"].as_array().unwrap().len(), 3, "replaced in place");
    let flip = condition_patch(&p, &cond(true), &t1);
    assert_eq!(flip["status"]["conditions"][2]["lastTransitionTime"], "2026-01-02T00:00:00Z");
    assert_eq!(flip["status"]["conditions"][2]["status"], "True");
}
