//! Checkpoint refresh against the in-process fake apiserver: a change to the
//! ControlPlaneVIP rewrites the checkpoint atomically and keeps FILE.prev; a hung read
//! fails after its deadline; failures are counted and logged at warn.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Logs, PATIENCE};
use ferrolb_api::{BgpPeer, BgpPeerSpec, ControlPlaneVip, ControlPlaneVipBgp, ControlPlaneVipSpec, VipMode};
use ferrolb_bootstrap::checkpoint;
use ferrolb_bootstrap::metrics::Metrics;
use ferrolb_bootstrap::refresh::{self, CALL_TIMEOUT, Outcome, RefreshError};
use ferrolb_fakeapi::FakeApiServer;
use ferrolb_fakeapi::wait::until_within;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use tracing::instrument::WithSubscriber;

fn vip(address: &str) -> ControlPlaneVip {
    let mut spec = ControlPlaneVipSpec::new(address);
    spec.mode = VipMode::Bgp;
    spec.members =
        vec![ferrolb_api::ControlPlaneVipMember { name: "cp1".into(), address: "192.0.2.11".into() }];
    spec.bgp = Some(ControlPlaneVipBgp { peers: vec!["router-a".into()], communities: vec![] });
    ControlPlaneVip::new("apiserver", spec)
}

/// A fake apiserver serving the ferrolb kinds, with the VIP and its peer `router-a`.
async fn served() -> (kube::Client, FakeApiServer) {
    let (client, server) = FakeApiServer::new().client();
    for (kind, plural) in
        [("ControlPlaneVIP", "controlplanevips"), ("BGPPeer", "bgppeers"), ("BFDProfile", "bfdprofiles")]
    {
        server.register_ferrolb_kind(kind, plural, true).unwrap();
    }
    let peer = BgpPeer::new("router-a", BgpPeerSpec::new(64513, 64512, "192.0.2.1"));
    Api::<BgpPeer>::all(client.clone()).create(&PostParams::default(), &peer).await.unwrap();
    Api::<ControlPlaneVip>::all(client.clone())
        .create(&PostParams::default(), &vip("203.0.113.100"))
        .await
        .unwrap();
    (client, server)
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
        Arc::new(Metrics::new()),
    ));
    until_within("the first checkpoint", PATIENCE, || async { path.exists().then_some(()) }).await;
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
    until_within("the refreshed checkpoint", PATIENCE, || async {
        std::fs::read_to_string(&path).is_ok_and(|t| t.contains("203.0.113.101")).then_some(())
    })
    .await;
    assert_eq!(std::fs::read_to_string(checkpoint::prev_path(&path)).unwrap(), first_text);
    assert_eq!(checkpoint::load(&path).unwrap().vip().spec.address, "203.0.113.101");
    // The running announcer is told about each rewrite.
    until_within("two rewrites signalled", PATIENCE, || async { (*written.borrow() == 2).then_some(()) })
        .await;
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
    let (client, _server) = served().await;
    let vips: Api<ControlPlaneVip> = Api::all(client.clone());
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

#[tokio::test]
async fn a_checkpoint_that_does_not_load_never_replaces_a_good_prev() {
    let (client, _server) = served().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.yaml");
    let prev = checkpoint::prev_path(&path);
    assert_eq!(refresh::refresh_once(&client, "apiserver", &path).await.unwrap(), Outcome::Written);
    let good = std::fs::read_to_string(&path).unwrap();
    // Not YAML (a torn or hand-mangled file), then YAML that does not validate.
    let invalid = good.replace("192.0.2.11", "not-an-address");
    for bad in ["kind: [unterminated", invalid.as_str()] {
        std::fs::write(&prev, &good).unwrap();
        std::fs::write(&path, bad).unwrap();
        assert!(checkpoint::load_one(&path).is_err(), "the test's broken file loads:\n{bad}");
        assert_eq!(refresh::refresh_once(&client, "apiserver", &path).await.unwrap(), Outcome::Written);
        assert_eq!(std::fs::read_to_string(&prev).unwrap(), good, "FILE.prev replaced by:\n{bad}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), good);
    }
}

/// Runs `refresh_once`, failing the test if it takes more than twice [`CALL_TIMEOUT`].
async fn refresh_bounded(client: &kube::Client, path: &std::path::Path) -> Result<Outcome, RefreshError> {
    tokio::time::timeout(CALL_TIMEOUT * 2, refresh::refresh_once(client, "apiserver", path))
        .await
        .expect("refresh_once hung past its deadline")
}

#[tokio::test(start_paused = true)]
async fn a_read_that_gets_no_answer_fails_after_the_deadline() {
    let (client, server) = served().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.yaml");
    server.set_hanging(true);
    let start = tokio::time::Instant::now();
    let err = refresh_bounded(&client, &path).await.unwrap_err();
    assert_eq!(start.elapsed(), CALL_TIMEOUT, "{err}");
    assert!(
        matches!(&err, RefreshError::NoAnswer { what, after } if what == "ControlPlaneVIP apiserver" && *after == CALL_TIMEOUT),
        "{err:?}"
    );
    assert_eq!(err.metric_label(), "timeout");
    assert!(!path.exists());
}

#[tokio::test(start_paused = true)]
async fn a_peer_read_that_gets_no_answer_fails_after_the_deadline() {
    use tower::ServiceExt;
    let (_, server) = served().await;
    // The VIP is answered; reads of its BGPPeer are never answered.
    let fake = server.service();
    let holding = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let fake = fake.clone();
        async move {
            if req.uri().path().contains("/bgppeers/") {
                std::future::pending::<()>().await;
            }
            fake.oneshot(req).await
        }
    });
    let client = kube::Client::new(holding, "default");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.yaml");
    let start = tokio::time::Instant::now();
    let err = refresh_bounded(&client, &path).await.unwrap_err();
    assert_eq!(start.elapsed(), CALL_TIMEOUT, "{err}");
    assert!(matches!(&err, RefreshError::NoAnswer { what, .. } if what == "BGPPeer router-a"), "{err:?}");
    assert!(!path.exists());
}

#[tokio::test]
async fn a_failing_refresh_is_counted_and_logged_at_warn_once() {
    let (client, server) = served().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.yaml");
    let metrics = Arc::new(Metrics::new());
    let logs = Logs::default();
    server.set_unavailable(true);
    let resync = Duration::from_millis(50);
    let task = tokio::spawn(
        refresh::run(client, "apiserver".into(), path.clone(), resync, None, metrics.clone())
            .with_subscriber(logs.dispatch()),
    );
    until_within("three failed refreshes counted", PATIENCE, || async {
        (metrics.refresh_errors("api") >= 3).then_some(())
    })
    .await;
    let warnings = logs.at("WARN");
    assert_eq!(warnings.len(), 1, "the same failure is logged once: {:#?}", logs.lines());
    assert!(
        warnings[0].contains("checkpoint not refreshed")
            && warnings[0].contains("ControlPlaneVIP apiserver")
            && warnings[0].contains("reason=\"api\""),
        "{warnings:?}"
    );
    assert!(
        metrics
            .encode()
            .lines()
            .any(|l| l.starts_with("ferrolb_bootstrap_checkpoint_refresh_errors_total{reason=\"api\"} ")),
        "{}",
        metrics.encode()
    );
    assert!(!path.exists());

    // Back: the checkpoint is written, and the recovery logged.
    server.set_unavailable(false);
    until_within("the checkpoint", PATIENCE, || async { path.exists().then_some(()) }).await;
    until_within("the recovery logged", PATIENCE, || async {
        logs.at("INFO").iter().any(|l| l.contains("works again")).then_some(())
    })
    .await;
    task.abort();
}
