//! The `Valid` condition of every configuration kind, written by the controller from the
//! one validator: observedGeneration, reason, message naming the field, and an Event on
//! each transition; nothing rewritten or re-announced by a restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use ferrolb_api::{
    BfdProfile, BfdProfileSpec, BgpAdvertisement, BgpAdvertisementSpec, BgpPeer, BgpPeerSpec,
    ControlPlaneVip, ControlPlaneVipBgp, ControlPlaneVipSpec, L2Advertisement, L2AdvertisementSpec, VipMode,
};
use ferrolb_controller::validity::{ConfigKind, REASON_INVALID, REASON_VALID};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

async fn create<K: ConfigKind + serde::Serialize>(client: &kube::Client, obj: &K) {
    Api::<K>::all(client.clone()).create(&PostParams::default(), obj).await.unwrap();
}

async fn patch_spec<K: ConfigKind>(client: &kube::Client, name: &str, spec: Value) {
    Api::<K>::all(client.clone())
        .patch(name, &PatchParams::default(), &Patch::Merge(json!({ "spec": spec })))
        .await
        .unwrap();
}

/// Waits until the object's `Valid` condition has this status at this generation.
async fn valid<K: ConfigKind>(client: &kube::Client, name: &str, status: &str, generation: i64) -> Condition {
    let api: Api<K> = Api::all(client.clone());
    until(&format!("{}/{name} Valid={status} at generation {generation}", K::KIND), || async {
        let obj = api.get(name).await.unwrap();
        obj.conditions()
            .iter()
            .find(|c| c.type_ == "Valid" && c.status == status && c.observed_generation == Some(generation))
            .cloned()
    })
    .await
}

fn peer(name: &str, address: &str, hold_time: &str) -> BgpPeer {
    let mut spec = BgpPeerSpec::new(64513, 64512, address);
    spec.hold_time = hold_time.into();
    BgpPeer::new(name, spec)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_bgp_peer_is_marked_and_its_fix_too() {
    let (client, server) = cluster().await;
    let ctl = start(&server, settings("c1", None));
    create(&client, &peer("router-a", "192.0.2.1", "2s")).await;

    let cond = valid::<BgpPeer>(&client, "router-a", "False", 1).await;
    assert_eq!(cond.reason, "Invalid");
    assert!(cond.message.starts_with("spec.holdTime: "), "{}", cond.message);
    let note = event(&client, "default", "router-a", REASON_INVALID).await;
    assert!(note.contains("BGPPeer/router-a: spec.holdTime") && note.contains("speakers keep"), "{note}");

    patch_spec::<BgpPeer>(&client, "router-a", json!({"holdTime": "90s"})).await;
    let cond = valid::<BgpPeer>(&client, "router-a", "True", 2).await;
    assert_eq!((cond.reason.as_str(), cond.message.as_str()), ("Valid", "configuration is valid"));
    let note = event(&client, "default", "router-a", REASON_VALID).await;
    assert!(note.contains("BGPPeer/router-a is valid now"), "{note}");
    assert_eq!(events(&client, "default", "router-a", REASON_INVALID).await.len(), 1);
    ctl.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_l2_advertisement_follows_its_spec_and_the_pools_it_names() {
    let (client, server) = cluster().await;
    let ctl = start(&server, settings("c1", None));
    let spec = L2AdvertisementSpec {
        ip_address_pools: vec!["lan".into()],
        interfaces: vec!["an-interface-name-too-long".into()],
        ..Default::default()
    };
    create(&client, &L2Advertisement::new("l2", spec)).await;
    let cond = valid::<L2Advertisement>(&client, "l2", "False", 1).await;
    assert!(
        cond.message.contains("spec.ipAddressPools[0]: no IPAddressPool is named \"lan\""),
        "{}",
        cond.message
    );
    assert!(cond.message.contains("spec.interfaces[0]"), "{}", cond.message);
    event(&client, "default", "l2", REASON_INVALID).await;

    // Fixing the spec leaves the missing pool: still invalid, with other errors, announced again.
    patch_spec::<L2Advertisement>(&client, "l2", json!({"interfaces": ["eth0"]})).await;
    let cond = valid::<L2Advertisement>(&client, "l2", "False", 2).await;
    assert!(!cond.message.contains("spec.interfaces"), "{}", cond.message);
    until("a second InvalidConfig Event", || async {
        (events(&client, "default", "l2", REASON_INVALID).await.len() == 2).then_some(())
    })
    .await;

    // Creating the pool it names makes it valid, with no edit of its own.
    create_pool(&client, pool("lan", &["192.0.2.0/29"])).await;
    valid::<L2Advertisement>(&client, "l2", "True", 2).await;
    event(&client, "default", "l2", REASON_VALID).await;
    ctl.stop().await.unwrap();
}

/// One valid and one invalid object of every kind but pools (controller.rs covers those).
async fn one_of_each(client: &kube::Client) {
    create_pool(client, pool("lan", &["192.0.2.0/29"])).await;
    create(client, &peer("good", "192.0.2.1", "90s")).await;
    create(client, &peer("bad", "192.0.2.2", "2s")).await;
    let adv = |pools: &[&str]| BgpAdvertisementSpec {
        ip_address_pools: pools.iter().map(|p| p.to_string()).collect(),
        ..Default::default()
    };
    create(client, &BgpAdvertisement::new("good", adv(&["lan"]))).await;
    create(
        client,
        &BgpAdvertisement::new("bad", BgpAdvertisementSpec { aggregation_length: 33, ..adv(&[]) }),
    )
    .await;
    let l2 = |interfaces: &[&str]| L2AdvertisementSpec {
        interfaces: interfaces.iter().map(|i| i.to_string()).collect(),
        ..Default::default()
    };
    create(client, &L2Advertisement::new("good", l2(&["eth0"]))).await;
    create(client, &L2Advertisement::new("bad", l2(&["eth0/1"]))).await;
    create(client, &BfdProfile::new("good", BfdProfileSpec::default())).await;
    create(client, &BfdProfile::new("bad", BfdProfileSpec { detect_multiplier: 1, ..Default::default() }))
        .await;
    let vip = |address: &str| ControlPlaneVipSpec {
        mode: VipMode::Bgp,
        bgp: Some(ControlPlaneVipBgp { peers: vec!["good".into()], communities: vec![] }),
        ..ControlPlaneVipSpec::new(address)
    };
    create(client, &ControlPlaneVip::new("good", vip("198.51.100.100"))).await;
    create(client, &ControlPlaneVip::new("bad", vip("192.0.2.3"))).await;
}

/// Waits for both conditions of one kind; returns the invalid one's message.
async fn good_and_bad<K: ConfigKind>(client: &kube::Client) -> String {
    valid::<K>(client, "good", "True", 1).await;
    valid::<K>(client, "bad", "False", 1).await.message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_gets_its_condition_and_a_restart_changes_nothing() {
    let (client, server) = cluster_on(ferrolb_fakeapi::FakeApiServer::new().with_request_log()).await;
    one_of_each(&client).await;
    let first = start(&server, settings("c1", None));
    for (kind, message, field) in [
        ("BGPPeer", good_and_bad::<BgpPeer>(&client).await, "spec.holdTime"),
        ("BGPAdvertisement", good_and_bad::<BgpAdvertisement>(&client).await, "spec.aggregationLength"),
        ("L2Advertisement", good_and_bad::<L2Advertisement>(&client).await, "spec.interfaces[0]"),
        ("BFDProfile", good_and_bad::<BfdProfile>(&client).await, "spec.detectMultiplier"),
        ("ControlPlaneVIP", good_and_bad::<ControlPlaneVip>(&client).await, "spec.address"),
    ] {
        assert!(message.starts_with(&format!("{field}: ")), "{kind}: {message}");
    }
    until("an InvalidConfig Event for each bad object", || async {
        (events(&client, "default", "bad", REASON_INVALID).await.len() == 5).then_some(())
    })
    .await;
    assert!(events(&client, "default", "good", REASON_INVALID).await.is_empty());
    assert!(
        events(&client, "default", "good", REASON_VALID).await.is_empty(),
        "valid from the start: no news"
    );
    // One write per object: an object is not judged again from a cache that does not
    // show the controller's own write yet (that would be a 409, or a second Event).
    let mut writes: Vec<(String, u16)> = server
        .request_log()
        .into_iter()
        .filter(|r| r.client.as_deref() == Some("c1") && r.is_write() && r.path.ends_with("/status"))
        .filter(|r| !r.path.contains("/ipaddresspools/"))
        .map(|r| (r.path, r.answered.map_or(0, |(_, status)| status)))
        .collect();
    writes.sort();
    assert_eq!(writes.len(), 10, "{writes:#?}");
    writes.dedup_by(|a, b| a.0 == b.0);
    assert!(writes.len() == 10 && writes.iter().all(|(_, status)| *status == 200), "{writes:#?}");
    first.stop().await.unwrap();

    // A second run finds every condition as it would write it: no write, no Event.
    let second = start(&server, settings("c2", None));
    // Processed: a change after the restart is judged (its condition written), so the
    // stored ones were judged before it.
    patch_spec::<BgpPeer>(&client, "bad", json!({"holdTime": "3s"})).await;
    valid::<BgpPeer>(&client, "bad", "True", 2).await;
    let writes: Vec<String> = server
        .request_log()
        .into_iter()
        .filter(|r| r.client.as_deref() == Some("c2") && r.is_write())
        .map(|r| format!("{:?} {}", r.verb, r.path))
        .filter(|w| !w.contains("/bgppeers/bad/status") && !w.contains("/events"))
        .collect();
    assert!(writes.is_empty(), "a restart with nothing to change wrote: {writes:?}");
    assert_eq!(events(&client, "default", "bad", REASON_INVALID).await.len(), 5, "nothing re-announced");
    second.stop().await.unwrap();
}
