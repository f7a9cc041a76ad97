//! Object lifecycles: owner-reference GC, finalizers, CRDs and their objects.

use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{CustomResource, CustomResourceExt, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::Env;
use super::fixtures::{api_code, cm, service};
use crate::wait::until;

fn owned_by(name: &str, owner: &Service) -> ConfigMap {
    let mut c = cm(name, &[]);
    c.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Service".into(),
        name: owner.name_any(),
        uid: owner.metadata.uid.clone().unwrap(),
        ..Default::default()
    }]);
    c
}

/// The uids `name`'s owner references point at, once it exists.
async fn owner_uids(cms: &Api<ConfigMap>, name: &str) -> Vec<String> {
    let obj = cms.get(name).await.unwrap();
    obj.metadata.owner_references.unwrap_or_default().into_iter().map(|r| r.uid).collect()
}

/// Owner-reference GC; a real cluster's collector (kube-controller-manager) works
/// asynchronously, so every outcome is polled for.
pub(super) async fn owner_reference_garbage_collection(env: &Env) {
    let svcs: Api<Service> = env.api();
    let cms: Api<ConfigMap> = env.api();
    let web = svcs.create(&PostParams::default(), &service("web")).await.unwrap();
    let other = svcs.create(&PostParams::default(), &service("other")).await.unwrap();
    let other_uid = other.metadata.uid.clone().unwrap();
    cms.create(&PostParams::default(), &owned_by("dependent", &web)).await.unwrap();
    let mut two_owners = owned_by("shared", &web);
    two_owners
        .metadata
        .owner_references
        .as_mut()
        .unwrap()
        .extend(owned_by("x", &other).metadata.owner_references.unwrap());
    cms.create(&PostParams::default(), &two_owners).await.unwrap();
    cms.create(&PostParams::default(), &cm("unrelated", &[])).await.unwrap();

    svcs.delete("web", &DeleteParams::default()).await.unwrap();
    until("dependent to be garbage-collected", || async {
        cms.get_opt("dependent").await.unwrap().is_none().then_some(())
    })
    .await;
    // The surviving owner keeps it alive; the reference to the deleted one goes.
    until("shared to lose its reference to web", || async {
        (owner_uids(&cms, "shared").await == [other_uid.clone()]).then_some(())
    })
    .await;
    assert!(cms.get_opt("unrelated").await.unwrap().is_some());

    // Orphan propagation keeps dependents and strips the reference before the owner goes.
    cms.create(&PostParams::default(), &owned_by("orphan", &other)).await.unwrap();
    // A real collector strips only the references it has seen, and one created just before
    // its owner's deletion may reach it after (a busy kube-controller-manager did so once
    // in CI: the orphan was then collected as a dependent whose owner is gone). A canary
    // made after it and collected shows the collector has read the ConfigMaps that far: it
    // reads them from one watch, in order, and collects the canary only once it has read it.
    let canary = svcs.create(&PostParams::default(), &service("canary")).await.unwrap();
    cms.create(&PostParams::default(), &owned_by("canary", &canary)).await.unwrap();
    svcs.delete("canary", &DeleteParams::default()).await.unwrap();
    until("the canary to be garbage-collected", || async {
        cms.get_opt("canary").await.unwrap().is_none().then_some(())
    })
    .await;
    svcs.delete("other", &DeleteParams::orphan()).await.unwrap();
    until("other to be deleted", || async { svcs.get_opt("other").await.unwrap().is_none().then_some(()) })
        .await;
    for name in ["orphan", "shared"] {
        assert_eq!(owner_uids(&cms, name).await, Vec::<String>::new(), "{name} orphaned");
    }
}

pub(super) async fn finalizers_hold_deletion_until_removed(env: &Env) {
    let cms: Api<ConfigMap> = env.api();
    let mut c = cm("held", &[]);
    c.metadata.finalizers = Some(vec!["ferrolb.io/cleanup".into()]);
    cms.create(&PostParams::default(), &c).await.unwrap();
    cms.delete("held", &DeleteParams::default()).await.unwrap();
    let held = cms.get("held").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    cms.patch("held", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .unwrap();
    assert!(cms.get_opt("held").await.unwrap().is_none());
}

/// A ferrolb-like cluster-scoped kind with a status subresource.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "ferrolb.io",
    version = "v1alpha1",
    kind = "TestPool",
    plural = "testpools",
    status = "TestPoolStatus"
)]
struct TestPoolSpec {
    addresses: Vec<String>,
}

/// Status of [`TestPool`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
struct TestPoolStatus {
    allocated: u32,
}

pub(super) async fn custom_resources_are_served_after_crd_registration(env: &Env) {
    let pools: Api<TestPool> = Api::all(env.client());
    assert_eq!(api_code(pools.list(&ListParams::default()).await.unwrap_err()).0, 404);

    let crds: Api<CustomResourceDefinition> = Api::all(env.client());
    crds.create(&PostParams::default(), &TestPool::crd()).await.unwrap();
    until("the CRD to be Established", || async {
        let crd = crds.get(TestPool::crd_name()).await.unwrap();
        let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
        conditions.iter().any(|c| c.type_ == "Established" && c.status == "True").then_some(())
    })
    .await;
    let pool = TestPool::new("lan", TestPoolSpec { addresses: vec!["192.0.2.0/24".into()] });
    let created = pools.create(&PostParams::default(), &pool).await.unwrap();
    assert_eq!(created.metadata.namespace, None, "cluster-scoped");
    // Custom resources count generations: what the controller reports as observedGeneration.
    assert_eq!(created.metadata.generation, Some(1));
    let st = pools
        .patch_status("lan", &PatchParams::default(), &Patch::Merge(json!({"status": {"allocated": 3}})))
        .await
        .unwrap();
    assert_eq!(st.status.unwrap().allocated, 3);
    assert_eq!(st.metadata.generation, Some(1), "status writes do not bump generation");
    let mut main = pools.get("lan").await.unwrap();
    main.status = Some(TestPoolStatus { allocated: 99 });
    main.spec.addresses.push("198.51.100.0/24".into());
    let replaced = pools.replace("lan", &PostParams::default(), &main).await.unwrap();
    assert_eq!(
        (replaced.spec.addresses.len(), replaced.status.unwrap().allocated),
        (2, 3),
        "main write ignores .status"
    );
    assert_eq!(replaced.metadata.generation, Some(2), "spec writes bump generation");
    let labelled = pools
        .patch("lan", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"l": "v"}}})))
        .await
        .unwrap();
    assert_eq!(labelled.metadata.generation, Some(2), "metadata writes do not bump generation");
    assert_eq!(pools.list(&ListParams::default()).await.unwrap().items.len(), 1);

    // Deleting the CRD takes its objects with it (on a real cluster once its finalizer ran).
    crds.delete(TestPool::crd_name(), &DeleteParams::default()).await.unwrap();
    until("the kind to be no longer served", || async {
        match pools.list(&ListParams::default()).await {
            Err(e) => {
                assert_eq!(api_code(e).0, 404);
                Some(())
            }
            Ok(_) => None,
        }
    })
    .await;
}
