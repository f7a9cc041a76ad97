//! The `Valid` condition of every configuration kind: computed by the one validator
//! (`ferrolb_api::validate`, every object together, since they refer to each other),
//! written to the object's status with `observedGeneration`, and announced by an Event
//! when it flips or its errors change. The stored condition is the memory, so a restart
//! (or a new leader) writes and announces nothing that is already there.
//!
//! IPAddressPools take the same path for their condition ([`valid_update`],
//! [`announce`]); [`crate::pool_sync`] writes it together with their counts.

use std::collections::BTreeMap;
use std::fmt::Debug;

use ferrolb_api::validate::kind;
use ferrolb_api::{
    BfdProfile, BgpAdvertisement, BgpPeer, CONDITION_VALID, Config, ControlPlaneVip, IpAddressPool,
    L2Advertisement, Origin, ValidationError, errors_for, set_condition, valid_condition, validate,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{debug, info, warn};

use crate::context::{Context, versioned_ref};

/// Event reason when an object becomes invalid or its errors change.
pub const REASON_INVALID: &str = "InvalidConfig";
/// Event reason when an invalid object becomes valid.
pub const REASON_VALID: &str = "ValidConfig";

/// A configuration kind whose status carries the `Valid` condition.
pub trait ConfigKind: ferrolb_api::Watched {
    /// The kind as the validator names it.
    const KIND: &'static str;
    /// What keeps running while an object of this kind is invalid (said in the Event).
    const WHILE_INVALID: &'static str;
    /// Its `status.conditions`.
    fn conditions(&self) -> &[Condition];
}

macro_rules! config_kind {
    ($ty:ty, $kind:expr, $while_invalid:expr) => {
        impl ConfigKind for $ty {
            const KIND: &'static str = $kind;
            const WHILE_INVALID: &'static str = $while_invalid;
            fn conditions(&self) -> &[Condition] {
                self.status.as_ref().map_or(&[], |s| &s.conditions)
            }
        }
    };
}

const SPEAKERS_KEEP: &str = "speakers keep the last valid configuration until it is fixed";
config_kind!(IpAddressPool, kind::IP_ADDRESS_POOL, "the last valid configuration stays in force");
config_kind!(BgpPeer, kind::BGP_PEER, SPEAKERS_KEEP);
config_kind!(BgpAdvertisement, kind::BGP_ADVERTISEMENT, SPEAKERS_KEEP);
config_kind!(L2Advertisement, kind::L2_ADVERTISEMENT, SPEAKERS_KEEP);
config_kind!(BfdProfile, kind::BFD_PROFILE, SPEAKERS_KEEP);
config_kind!(ControlPlaneVip, kind::CONTROL_PLANE_VIP, "ferrolb-bootstrap keeps its last valid checkpoint");

/// How an object's `Valid` condition changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// It became invalid, or is still invalid with other errors.
    Invalid,
    /// It was invalid and is valid now.
    Valid,
}

/// `current` with the `Valid` condition set from `errors` (the transition time kept while
/// the status stays), and the change that calls for an Event. A first condition that
/// says valid is not a change.
pub fn valid_update(
    current: &[Condition],
    errors: &[ValidationError],
    generation: Option<i64>,
) -> (Vec<Condition>, Option<Change>) {
    let new = valid_condition(errors, generation, Time(Timestamp::now()));
    let old = current.iter().find(|c| c.type_ == CONDITION_VALID);
    let change = match old {
        _ if new.status == "True" => old.filter(|o| o.status != "True").map(|_| Change::Valid),
        Some(o) if o.status == new.status && o.message == new.message => None,
        _ => Some(Change::Invalid),
    };
    let mut conditions = current.to_vec();
    set_condition(&mut conditions, new);
    (conditions, change)
}

/// Logs a change of an object's `Valid` condition and publishes its Event.
pub async fn announce<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    obj: &K,
    kind: &str,
    errors: &[ValidationError],
    change: Change,
    while_invalid: &str,
) {
    let object = format!("{kind}/{}", obj.meta().name.as_deref().unwrap_or_default());
    match change {
        Change::Invalid => {
            let msg = errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
            warn!(%object, "invalid ({while_invalid}): {msg}");
            let note = format!("{msg}; {while_invalid}");
            ctx.event(&versioned_ref(obj), EventType::Warning, REASON_INVALID, note).await;
        }
        Change::Valid => {
            info!(%object, "valid now");
            let note = format!("{object} is valid now");
            ctx.event(&versioned_ref(obj), EventType::Normal, REASON_VALID, note).await;
        }
    }
}

/// Objects whose status was written here and whose write the watch cache does not show
/// yet. Judged again from the cache meanwhile, they would be written again (a 409 with
/// the read resourceVersion, or a second Event), so they are skipped until their watch
/// event, which brings another pass, has come.
#[derive(Debug, Default)]
pub struct Unseen(BTreeMap<(&'static str, String), String>);

impl Unseen {
    /// Whether the cache still shows the version our last write replaced.
    pub fn pending<K: Resource>(&mut self, kind: &'static str, obj: &K) -> bool {
        let key = (kind, obj.meta().name.clone().unwrap_or_default());
        match self.0.get(&key) {
            Some(rv) if obj.meta().resource_version.as_ref() == Some(rv) => true,
            Some(_) => {
                self.0.remove(&key);
                false
            }
            None => false,
        }
    }

    /// Records a write over this version of the object.
    pub fn wrote<K: Resource>(&mut self, kind: &'static str, obj: &K) {
        if let Some(rv) = obj.meta().resource_version.clone() {
            self.0.insert((kind, obj.meta().name.clone().unwrap_or_default()), rv);
        }
    }
}

/// The watch caches of every configuration kind.
#[derive(Clone)]
pub struct ConfigStores {
    /// IPAddressPools (their condition is [`crate::pool_sync`]'s to write).
    pub pools: Store<IpAddressPool>,
    /// BGPPeers.
    pub peers: Store<BgpPeer>,
    /// BGPAdvertisements.
    pub bgp_advertisements: Store<BgpAdvertisement>,
    /// L2Advertisements.
    pub l2_advertisements: Store<L2Advertisement>,
    /// BFDProfiles.
    pub bfd_profiles: Store<BfdProfile>,
    /// ControlPlaneVIPs.
    pub control_plane_vips: Store<ControlPlaneVip>,
}

fn objects<K: ConfigKind>(store: &Store<K>) -> Vec<K> {
    store.state().iter().map(|o| (**o).clone()).collect()
}

impl ConfigStores {
    /// Resolves once every cache holds its first full list: judging references before
    /// would call an object invalid for a target not listed yet.
    pub async fn wait_until_ready(&self) {
        let _ = self.pools.wait_until_ready().await;
        let _ = self.peers.wait_until_ready().await;
        let _ = self.bgp_advertisements.wait_until_ready().await;
        let _ = self.l2_advertisements.wait_until_ready().await;
        let _ = self.bfd_profiles.wait_until_ready().await;
        let _ = self.control_plane_vips.wait_until_ready().await;
    }

    fn config(&self) -> Config {
        Config {
            pools: objects(&self.pools),
            peers: objects(&self.peers),
            bgp_advertisements: objects(&self.bgp_advertisements),
            l2_advertisements: objects(&self.l2_advertisements),
            bfd_profiles: objects(&self.bfd_profiles),
            control_plane_vips: objects(&self.control_plane_vips),
        }
    }

    /// Validates everything together and writes the `Valid` conditions that changed, of
    /// every kind but pools. Returns whether every write went through.
    pub async fn sync(&self, ctx: &Context, unseen: &mut Unseen) -> bool {
        let config = self.config();
        let errors = validate(&config, Origin::Cluster);
        for (kind, count) in invalid_counts(&config, &errors) {
            ctx.metrics.set_invalid(kind, count);
        }
        // Every write is attempted: one failure does not hold up the others.
        let results = [
            sync_kind(ctx, &config.peers, &errors, unseen).await,
            sync_kind(ctx, &config.bgp_advertisements, &errors, unseen).await,
            sync_kind(ctx, &config.l2_advertisements, &errors, unseen).await,
            sync_kind(ctx, &config.bfd_profiles, &errors, unseen).await,
            sync_kind(ctx, &config.control_plane_vips, &errors, unseen).await,
        ];
        results.iter().all(|ok| *ok)
    }
}

/// How many objects of each kind the validator rejects: those whose `Valid` is False
/// (pools included, though pool_sync.rs writes their condition).
pub fn invalid_counts(config: &Config, errors: &[ValidationError]) -> [(&'static str, usize); 6] {
    fn count<K: ResourceExt>(objects: &[K], kind: &str, errors: &[ValidationError]) -> usize {
        objects.iter().filter(|o| errors_for(errors, kind, &o.name_any()).next().is_some()).count()
    }
    [
        (kind::IP_ADDRESS_POOL, count(&config.pools, kind::IP_ADDRESS_POOL, errors)),
        (kind::BGP_PEER, count(&config.peers, kind::BGP_PEER, errors)),
        (kind::BGP_ADVERTISEMENT, count(&config.bgp_advertisements, kind::BGP_ADVERTISEMENT, errors)),
        (kind::L2_ADVERTISEMENT, count(&config.l2_advertisements, kind::L2_ADVERTISEMENT, errors)),
        (kind::BFD_PROFILE, count(&config.bfd_profiles, kind::BFD_PROFILE, errors)),
        (kind::CONTROL_PLANE_VIP, count(&config.control_plane_vips, kind::CONTROL_PLANE_VIP, errors)),
    ]
}

/// Writes each object's `Valid` condition where it differs from the stored one.
async fn sync_kind<K: ConfigKind>(
    ctx: &Context,
    objects: &[K],
    errors: &[ValidationError],
    unseen: &mut Unseen,
) -> bool {
    let mut ok = true;
    for obj in objects {
        if unseen.pending(K::KIND, obj) {
            continue;
        }
        let name = obj.name_any();
        let errs: Vec<ValidationError> = errors_for(errors, K::KIND, &name).cloned().collect();
        let (conditions, change) = valid_update(obj.conditions(), &errs, obj.meta().generation);
        if conditions == obj.conditions() {
            continue;
        }
        if !write_conditions(ctx, obj, &conditions).await {
            ok = false;
            continue;
        }
        unseen.wrote(K::KIND, obj);
        if let Some(change) = change {
            announce(ctx, obj, K::KIND, &errs, change, K::WHILE_INVALID).await;
        }
    }
    ok
}

/// Writes `status.conditions`. The whole list is written, so the write is guarded by the
/// resourceVersion read: a condition another writer added meanwhile is never dropped
/// (409; the caller retries from the newer object). Whether it was written.
async fn write_conditions<K: ConfigKind>(ctx: &Context, obj: &K, conditions: &[Condition]) -> bool {
    let api: Api<K> = Api::all(ctx.client.clone());
    let name = obj.name_any();
    let patch = json!({
        "metadata": {"resourceVersion": obj.resource_version()},
        "status": {"conditions": conditions},
    });
    match ctx.call(api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))).await {
        Ok(_) => true,
        // Deleted meanwhile: nothing to write.
        Err(e) if e.status() == Some(404) => true,
        Err(e) if e.status() == Some(409) => {
            debug!(object = %format!("{}/{name}", K::KIND), "changed meanwhile; writing the Valid condition again");
            false
        }
        Err(e) => {
            warn!(object = %format!("{}/{name}", K::KIND), error = %e, "cannot write the Valid condition");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(field: &str) -> ValidationError {
        ValidationError {
            kind: kind::BGP_PEER,
            name: "a".into(),
            field: field.into(),
            problem: "bad".into(),
            fix: "fix it".into(),
        }
    }

    #[test]
    fn invalid_objects_are_counted_per_kind_and_exported() {
        let peer = |name: &str, hold: &str| {
            let mut spec = ferrolb_api::BgpPeerSpec::new(64513, 64512, format!("192.0.2.{}", name.len()));
            spec.hold_time = hold.into();
            BgpPeer::new(name, spec)
        };
        let bad_adv = BgpAdvertisement::new(
            "adv",
            ferrolb_api::BgpAdvertisementSpec { peers: vec!["missing".into()], ..Default::default() },
        );
        let config = Config {
            peers: vec![peer("a", "90s"), peer("bb", "2s"), peer("ccc", "1s")],
            bgp_advertisements: vec![bad_adv],
            ..Config::default()
        };
        let errors = validate(&config, Origin::Cluster);
        let counts = invalid_counts(&config, &errors);
        assert!(counts.contains(&(kind::BGP_PEER, 2)), "{counts:?}");
        assert!(counts.contains(&(kind::BGP_ADVERTISEMENT, 1)), "{counts:?}");
        assert!(counts.contains(&(kind::IP_ADDRESS_POOL, 0)), "{counts:?}");

        let metrics = crate::metrics::Metrics::new();
        for (kind, count) in counts {
            metrics.set_invalid(kind, count);
        }
        let text = metrics.encode();
        assert!(text.contains("ferrolb_controller_invalid_objects{kind=\"BGPPeer\"} 2"), "{text}");
        assert!(text.contains("ferrolb_controller_invalid_objects{kind=\"ControlPlaneVIP\"} 0"), "{text}");
    }

    #[test]
    fn a_write_is_unseen_until_the_cache_shows_another_version() {
        let mut peer = BgpPeer::new("a", ferrolb_api::BgpPeerSpec::new(64513, 64512, "192.0.2.1"));
        peer.metadata.resource_version = Some("1".into());
        let mut unseen = Unseen::default();
        assert!(!unseen.pending(kind::BGP_PEER, &peer));
        unseen.wrote(kind::BGP_PEER, &peer);
        assert!(unseen.pending(kind::BGP_PEER, &peer), "the cache still shows version 1");
        assert!(!unseen.pending(kind::BGP_ADVERTISEMENT, &peer), "per kind");
        peer.metadata.resource_version = Some("2".into());
        assert!(!unseen.pending(kind::BGP_PEER, &peer));
        peer.metadata.resource_version = Some("1".into());
        assert!(!unseen.pending(kind::BGP_PEER, &peer), "forgotten once seen");
    }

    #[test]
    fn changes_are_flips_and_new_errors_only() {
        // A first valid condition is no change; a first invalid one is.
        let (valid, change) = valid_update(&[], &[], Some(1));
        assert_eq!((valid[0].status.as_str(), valid[0].observed_generation, change), ("True", Some(1), None));
        let (invalid, change) = valid_update(&valid, &[error("spec.holdTime")], Some(2));
        assert_eq!((invalid[0].status.as_str(), change), ("False", Some(Change::Invalid)));
        assert!(invalid[0].message.starts_with("spec.holdTime: bad"), "{}", invalid[0].message);
        // The same errors again: the same conditions, no Event.
        let (again, change) = valid_update(&invalid, &[error("spec.holdTime")], Some(2));
        assert_eq!((again == invalid, change), (true, None));
        // Other errors: announced again, the transition time kept.
        let (other, change) = valid_update(&invalid, &[error("spec.peerPort")], Some(3));
        assert_eq!(change, Some(Change::Invalid));
        assert_eq!(other[0].last_transition_time, invalid[0].last_transition_time);
        // Fixed: back to True with the new generation.
        let (fixed, change) = valid_update(&other, &[], Some(4));
        assert_eq!((fixed[0].status.as_str(), fixed[0].observed_generation), ("True", Some(4)));
        assert_eq!(change, Some(Change::Valid));
        // Another kind's conditions are kept.
        let foreign = Condition { type_: "Other".into(), ..valid[0].clone() };
        let (both, _) = valid_update(std::slice::from_ref(&foreign), &[], Some(1));
        assert_eq!((both.len(), &both[0]), (2, &foreign));
    }
}
