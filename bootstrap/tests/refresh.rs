//! Checkpoint refresh against the in-process fake apiserver: a change to the
//! ControlPlaneVIP rewrites the checkpoint atomically and keeps FILE.prev.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::time::Duration;

use ferrolb_api::{BgpPeer, BgpPeerSpec, ControlPlaneVip, ControlPlaneVipBgp, ControlPlaneVipSpec, VipMode};
use ferrolb_bootstrap::checkpoint;
use ferrolb_bootstrap::refresh::{self, Outcome};
use ferrolb_fakeapi::FakeApiServer;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

fn vip(address: &str) -> ControlPlaneVip {
    let mut spec = ControlPlaneVipSpec::new(address);
    spec.mode = VipMode::Bgp;
    spec.members =
        vec![ferrolb_api::ControlPlaneVipMember { name: "cp1".into(), address: "192.0.2.11".into() }];
    spec.bgp = Some(ControlPlaneVipBgp { peers: vec!["router-a".into()], communities: vec![] });
    ControlPlaneVip::new("apiserver", spec)
}

async fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..200 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn a_changed_vip_rewrites_the_checkpoint_and_keeps_prev() {
    let (client, server) = FakeApiServer::new().client();
    server.register_ferrolb_kind("ControlPlaneVIP", "controlplanevips", true).unwrap();
    server.register_ferrolb_kind("BGPPeer", "bgppeers", true).unwrap();
    server.register_ferrolb_kind("BFDProfile", "bfdprofiles", true).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.yaml");

    // Nothing served yet: the checkpoint is left alone.
    assert_eq!(refresh::refresh_once(&client, "apiserver", &path).await.unwrap(), Outcome::Absent);
    assert!(!path.exists());

    let peers: Api<BgpPeer> = Api::all(client.clone());
    peers
        .create(
            &PostParams::default(),
            &BgpPeer::new("router-a", BgpPeerSpec::new(64513, 64512, "192.0.2.1")),
        )
        .await
        .unwrap();
    peers
        .create(
            &PostParams::default(),
            &BgpPeer::new("unrelated", BgpPeerSpec::new(64513, 64512, "192.0.2.2")),
        )
        .await
        .unwrap();
    let vips: Api<ControlPlaneVip> = Api::all(client.clone());
    vips.create(&PostParams::default(), &vip("203.0.113.100")).await.unwrap();

    let (written_tx, written) = tokio::sync::watch::channel(0u64);
    let task = tokio::spawn(refresh::run(
        client.clone(),
        "apiserver".into(),
        path.clone(),
        Duration::from_secs(3600),
        Some(written_tx),
    ));
    wait_for("the first checkpoint", || path.exists()).await;
    let first = checkpoint::load(&path).unwrap();
    assert_eq!(first.vip().spec.address, "203.0.113.100");
    let peer_names: Vec<String> = first.config.peers.iter().map(kube::ResourceExt::name_any).collect();
    assert_eq!(peer_names, vec!["router-a"], "only the referenced peer is checkpointed");
    let first_text = std::fs::read_to_string(&path).unwrap();
    assert!(!first_text.contains("resourceVersion"), "{first_text}");

    // A change on the apiserver reaches the file; the old content is FILE.prev.
    vips.patch(
        "apiserver",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"address": "203.0.113.101"}})),
    )
    .await
    .unwrap();
    wait_for("the refreshed checkpoint", || {
        std::fs::read_to_string(&path).is_ok_and(|t| t.contains("203.0.113.101"))
    })
    .await;
    assert_eq!(std::fs::read_to_string(checkpoint::prev_path(&path)).unwrap(), first_text);
    assert_eq!(checkpoint::load(&path).unwrap().vip().spec.address, "203.0.113.101");
    // The running announcer is told about each rewrite.
    wait_for("two rewrites signalled", || *written.borrow() == 2).await;
    // No temp files left behind.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into())
        .collect();
    assert!(names.iter().all(|n| n == "checkpoint.yaml" || n == "checkpoint.yaml.prev"), "{names:?}");

    // An invalid VIP on the apiserver never replaces a good checkpoint.
    vips.patch(
        "apiserver",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"healthCheck": {"failureThreshold": 0}}})),
    )
    .await
    .unwrap();
    let outcome = refresh::refresh_once(&client, "apiserver", &path).await.unwrap();
    assert!(
        matches!(&outcome, Outcome::Invalid(e) if e.contains("spec.healthCheck.failureThreshold")),
        "{outcome:?}"
    );
    assert_eq!(checkpoint::load(&path).unwrap().vip().spec.address, "203.0.113.101");
    task.abort();
}

#[tokio::test]
async fn an_unchanged_vip_does_not_rewrite() {
    let (client, server) = FakeApiServer::new().client();
    server.register_ferrolb_kind("ControlPlaneVIP", "controlplanevips", true).unwrap();
    server.register_ferrolb_kind("BGPPeer", "bgppeers", true).unwrap();
    let peers: Api<BgpPeer> = Api::all(client.clone());
    peers
        .create(
            &PostParams::default(),
            &BgpPeer::new("router-a", BgpPeerSpec::new(64513, 64512, "192.0.2.1")),
        )
        .await
        .unwrap();
    let vips: Api<ControlPlaneVip> = Api::all(client.clone());
    vips.create(&PostParams::default(), &vip("203.0.113.100")).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.yaml");
    assert_eq!(refresh::refresh_once(&client, "apiserver", &path).await.unwrap(), Outcome::Written);
    assert_eq!(refresh::refresh_once(&client, "apiserver", &path).await.unwrap(), Outcome::Unchanged);
    // `kubectl apply` annotates what it applies; labels configure nothing either.
    vips.patch(
        "apiserver",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
            "labels": {"team": "infra"},
        }})),
    )
    .await
    .unwrap();
    assert_eq!(refresh::refresh_once(&client, "apiserver", &path).await.unwrap(), Outcome::Unchanged);
    assert!(!checkpoint::prev_path(&path).exists());
}
