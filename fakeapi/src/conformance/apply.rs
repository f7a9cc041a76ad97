//! Server-side apply: managers, conflicts, force, removal, the status subresource.

use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use super::Env;
use super::fixtures::{api_code, service};

pub(super) async fn server_side_apply_tracks_managers_and_force_wins(env: &Env) {
    let svcs: Api<Service> = env.api();
    let policy = |value: &str| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"externalTrafficPolicy": value}})
    };
    // Apply creates.
    let alice = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}], "externalTrafficPolicy": "Local"},
    });
    let created = svcs.patch("web", &PatchParams::apply("alice"), &Patch::Apply(&alice)).await.unwrap();
    let managers: Vec<_> =
        created.metadata.managed_fields.unwrap().into_iter().map(|m| m.manager.unwrap()).collect();
    assert_eq!(managers, vec!["alice".to_string()]);

    // Bob wants another value for a field Alice owns: conflict.
    let err =
        svcs.patch("web", &PatchParams::apply("bob"), &Patch::Apply(policy("Cluster"))).await.unwrap_err();
    let kube::Error::Api(status) = err else { panic!("expected a Status") };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(
        status.message.contains("alice") && status.message.contains(".spec.externalTrafficPolicy"),
        "{}",
        status.message
    );

    // Same value: shared ownership, no conflict.
    svcs.patch("web", &PatchParams::apply("bob"), &Patch::Apply(policy("Local"))).await.unwrap();

    // Force takes the field over.
    let forced = svcs
        .patch("web", &PatchParams::apply("bob").force(), &Patch::Apply(policy("Cluster")))
        .await
        .unwrap();
    assert_eq!(forced.spec.unwrap().external_traffic_policy.as_deref(), Some("Cluster"));

    // Alice applying again without the field she no longer owns keeps Bob's value.
    let mut alice_again = alice.clone();
    alice_again["spec"].as_object_mut().unwrap().remove("externalTrafficPolicy");
    alice_again["metadata"]["labels"] = json!({"owner": "alice"});
    let after = svcs.patch("web", &PatchParams::apply("alice"), &Patch::Apply(alice_again)).await.unwrap();
    assert_eq!(after.spec.unwrap().external_traffic_policy.as_deref(), Some("Cluster"));
    assert_eq!(after.metadata.labels.unwrap()["owner"], "alice");
}

pub(super) async fn fields_changed_by_an_update_conflict_with_a_later_apply(env: &Env) {
    let cms: Api<ConfigMap> = env.api();
    let applied =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
    cms.patch("c", &PatchParams::apply("alice"), &Patch::Apply(&applied)).await.unwrap();
    // An ordinary (non-apply) write by another manager takes ownership of what it changed.
    let pp = PatchParams { field_manager: Some("kubectl-edit".into()), ..Default::default() };
    cms.patch("c", &pp, &Patch::Merge(json!({"data": {"a": "edited"}}))).await.unwrap();
    let err = cms.patch("c", &PatchParams::apply("alice"), &Patch::Apply(&applied)).await.unwrap_err();
    assert_eq!(api_code(err), (409, "Conflict".into()));
    let ops: Vec<_> = cms
        .get("c")
        .await
        .unwrap()
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .map(|m| (m.manager.unwrap(), m.operation.unwrap()))
        .collect();
    assert!(ops.contains(&("kubectl-edit".into(), "Update".into())), "{ops:?}");
}

pub(super) async fn apply_to_status_touches_only_status(env: &Env) {
    let svcs: Api<Service> = env.api();
    svcs.create(&PostParams::default(), &service("web")).await.unwrap();
    let status = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"ports": [{"port": 1}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}},
    });
    let pp = PatchParams::apply("ferrolb-controller").force();
    let after = svcs.patch_status("web", &pp, &Patch::Apply(&status)).await.unwrap();
    assert_eq!(
        after.status.unwrap().load_balancer.unwrap().ingress.unwrap()[0].ip.as_deref(),
        Some("192.0.2.10")
    );
    assert_eq!(after.spec.unwrap().ports.unwrap()[0].port, 80);
    let entry = after
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .find(|m| m.manager.as_deref() == Some("ferrolb-controller"))
        .expect("a managedFields entry for the status manager");
    assert_eq!((entry.operation.as_deref(), entry.subresource.as_deref()), (Some("Apply"), Some("status")));
}

pub(super) async fn apply_removes_fields_its_manager_stopped_setting(env: &Env) {
    let cms: Api<ConfigMap> = env.api();
    let two = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}});
    cms.patch("c", &PatchParams::apply("m"), &Patch::Apply(two)).await.unwrap();
    let one = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
    let after = cms.patch("c", &PatchParams::apply("m"), &Patch::Apply(one)).await.unwrap();
    assert_eq!(after.data.unwrap().len(), 1);
}

/// Lists with keys (`ports` by port and protocol, `conditions` by type …) merge element by
/// element: two managers each own their own entries.
pub(super) async fn apply_merges_keyed_lists_element_by_element(env: &Env) {
    let svcs: Api<Service> = env.api();
    let port = |name: &str, port: i32| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"type": "LoadBalancer", "ports": [{"name": name, "port": port, "protocol": "TCP"}]}})
    };
    svcs.patch("web", &PatchParams::apply("alice"), &Patch::Apply(port("http", 80))).await.unwrap();
    let both =
        svcs.patch("web", &PatchParams::apply("bob"), &Patch::Apply(port("https", 443))).await.unwrap();
    let ports: Vec<i32> = both.spec.unwrap().ports.unwrap().iter().map(|p| p.port).collect();
    assert_eq!(ports, [80, 443]);
}

/// The server drops an empty map (`metadata.labels: {}`) from the object, but its applier
/// still owns it: another manager applying the same empty map conflicts.
pub(super) async fn an_applied_empty_map_stays_owned_after_the_server_drops_it(env: &Env) {
    let cms: Api<ConfigMap> = env.api();
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {}}, "data": {"a": "1"}});
    let created = cms.patch("c", &PatchParams::apply("alice"), &Patch::Apply(&applied)).await.unwrap();
    assert_eq!(created.metadata.labels, None, "the empty map is not stored");
    let err = cms.patch("c", &PatchParams::apply("bob"), &Patch::Apply(&applied)).await.unwrap_err();
    let kube::Error::Api(status) = err else { panic!("expected a Status") };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(status.message.contains(".metadata.labels"), "{}", status.message);
}
