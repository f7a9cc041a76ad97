//! The one validator: every component runs user configuration through [`validate`].
//!
//! Errors name the object (kind/name), the field path and the fix. They quote the
//! offending value except where it could be secret; no field of these kinds holds a
//! secret value (passwords live in Secrets or files, referenced by name or path).

use std::collections::BTreeSet;
use std::fmt;
use std::ops::Deref;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

use crate::crd::{
    BfdProfile, BgpAdvertisement, BgpPeer, CONDITION_VALID, ControlPlaneVip, IpAddressPool, L2Advertisement,
};
use crate::selector::is_dns_subdomain;

mod bfd;
mod bgp;
mod check;
mod l2;
mod pool;
mod vip;

use bfd::check_bfd;
use bgp::{check_bgp_advertisement, check_duplicate_sessions, check_peer};
use check::Check;
use l2::check_l2_advertisement;
use pool::{check_overlaps, check_pool};
use vip::{check_vip, check_vip_addresses};

/// Kind names as users see them, used in errors.
pub mod kind {
    /// IPAddressPool.
    pub const IP_ADDRESS_POOL: &str = "IPAddressPool";
    /// BGPPeer.
    pub const BGP_PEER: &str = "BGPPeer";
    /// BGPAdvertisement.
    pub const BGP_ADVERTISEMENT: &str = "BGPAdvertisement";
    /// L2Advertisement.
    pub const L2_ADVERTISEMENT: &str = "L2Advertisement";
    /// BFDProfile.
    pub const BFD_PROFILE: &str = "BFDProfile";
    /// ControlPlaneVIP.
    pub const CONTROL_PLANE_VIP: &str = "ControlPlaneVIP";
}

/// Every ferrolb object that configures announcements, validated together.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Config {
    /// IPAddressPools.
    pub pools: Vec<IpAddressPool>,
    /// BGPPeers.
    pub peers: Vec<BgpPeer>,
    /// BGPAdvertisements.
    pub bgp_advertisements: Vec<BgpAdvertisement>,
    /// L2Advertisements.
    pub l2_advertisements: Vec<L2Advertisement>,
    /// BFDProfiles.
    pub bfd_profiles: Vec<BfdProfile>,
    /// ControlPlaneVIPs.
    pub control_plane_vips: Vec<ControlPlaneVip>,
}

/// Where a configuration comes from; a few rules differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Objects read from the Kubernetes API.
    Cluster,
    /// A static file or a bootstrap checkpoint: no apiserver to read Secrets from.
    File,
}

/// A [`Config`] that passed [`validate`]; only this type should drive announcements.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ValidConfig(Config);

impl ValidConfig {
    /// The validated objects.
    pub fn into_inner(self) -> Config {
        self.0
    }
}

impl Deref for ValidConfig {
    type Target = Config;
    fn deref(&self) -> &Config {
        &self.0
    }
}

impl Config {
    /// What a bootstrap checkpoint holds: the named ControlPlaneVIP and the BGPPeers and
    /// BFDProfiles it refers to (unknown references are left for [`validate`] to report).
    pub fn for_control_plane_vip(&self, name: &str) -> Option<Config> {
        let vip = self.control_plane_vips.iter().find(|v| v.name_any() == name)?;
        let peer_names: BTreeSet<&str> =
            vip.spec.bgp.iter().flat_map(|b| b.peers.iter().map(String::as_str)).collect();
        let peers: Vec<BgpPeer> =
            self.peers.iter().filter(|p| peer_names.contains(p.name_any().as_str())).cloned().collect();
        let bfd_names: BTreeSet<&str> = peers.iter().filter_map(|p| p.spec.bfd_profile.as_deref()).collect();
        let bfd_profiles =
            self.bfd_profiles.iter().filter(|b| bfd_names.contains(b.name_any().as_str())).cloned().collect();
        Some(Config { control_plane_vips: vec![vip.clone()], peers, bfd_profiles, ..Config::default() })
    }

    /// Validates the whole set; all errors at once, so users fix them in one go.
    pub fn validate(self, origin: Origin) -> Result<ValidConfig, Vec<ValidationError>> {
        let errors = validate(&self, origin);
        if errors.is_empty() { Ok(ValidConfig(self)) } else { Err(errors) }
    }
}

/// One problem in one field of one object.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ValidationError {
    /// Kind, e.g. `BGPPeer`.
    pub kind: &'static str,
    /// Object name.
    pub name: String,
    /// Field path, e.g. `spec.addresses[2]`.
    pub field: String,
    /// What is wrong.
    pub problem: String,
    /// How to fix it.
    pub fix: String,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}: {}: {}; fix: {}", self.kind, self.name, self.field, self.problem, self.fix)
    }
}

/// Errors about one object.
pub fn errors_for<'a>(
    errors: &'a [ValidationError],
    kind: &'a str,
    name: &'a str,
) -> impl Iterator<Item = &'a ValidationError> + 'a {
    errors.iter().filter(move |e| e.kind == kind && e.name == name)
}

/// The `Valid` condition for one object, from its errors (see [`errors_for`]).
pub fn valid_condition<'a>(
    errors: impl IntoIterator<Item = &'a ValidationError>,
    observed_generation: Option<i64>,
    now: Time,
) -> Condition {
    let messages: Vec<String> =
        errors.into_iter().map(|e| format!("{}: {}; fix: {}", e.field, e.problem, e.fix)).collect();
    let (status, reason, message) = if messages.is_empty() {
        ("True", "Valid", "configuration is valid".to_owned())
    } else {
        ("False", "Invalid", messages.join("\n"))
    };
    Condition {
        type_: CONDITION_VALID.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation,
        last_transition_time: now,
    }
}

/// Sets `new` in `conditions`, keeping the old transition time when the status did not change.
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(old) => {
            if old.status == new.status {
                new.last_transition_time = old.last_transition_time.clone();
            }
            *old = new;
        }
        None => conditions.push(new),
    }
}

/// Validates every object and every reference between them.
pub fn validate(config: &Config, origin: Origin) -> Vec<ValidationError> {
    let mut errors = Vec::new();
    let pool_names = names(&config.pools, kind::IP_ADDRESS_POOL, &mut errors);
    let peer_names = names(&config.peers, kind::BGP_PEER, &mut errors);
    let bfd_names = names(&config.bfd_profiles, kind::BFD_PROFILE, &mut errors);
    names(&config.bgp_advertisements, kind::BGP_ADVERTISEMENT, &mut errors);
    names(&config.l2_advertisements, kind::L2_ADVERTISEMENT, &mut errors);
    names(&config.control_plane_vips, kind::CONTROL_PLANE_VIP, &mut errors);

    let mut ranges = Vec::new();
    for pool in &config.pools {
        let mut c = Check::new(kind::IP_ADDRESS_POOL, pool, &mut errors);
        check_pool(&mut c, pool, &mut ranges);
    }
    check_overlaps(&ranges, &mut errors);
    check_duplicate_sessions(&config.peers, &mut errors);
    check_vip_addresses(&config.control_plane_vips, &ranges, &mut errors);
    for peer in &config.peers {
        let mut c = Check::new(kind::BGP_PEER, peer, &mut errors);
        check_peer(&mut c, peer, &bfd_names, origin);
    }
    for adv in &config.bgp_advertisements {
        let mut c = Check::new(kind::BGP_ADVERTISEMENT, adv, &mut errors);
        check_bgp_advertisement(&mut c, adv, &pool_names, &peer_names);
    }
    for adv in &config.l2_advertisements {
        let mut c = Check::new(kind::L2_ADVERTISEMENT, adv, &mut errors);
        check_l2_advertisement(&mut c, adv, &pool_names);
    }
    for bfd in &config.bfd_profiles {
        let mut c = Check::new(kind::BFD_PROFILE, bfd, &mut errors);
        check_bfd(&mut c, bfd);
    }
    for vip in &config.control_plane_vips {
        let mut c = Check::new(kind::CONTROL_PLANE_VIP, vip, &mut errors);
        check_vip(&mut c, vip, &peer_names);
    }
    errors
}

/// Collects names, reporting missing, malformed and duplicate ones.
fn names<K: ResourceExt>(
    objects: &[K],
    kind: &'static str,
    errors: &mut Vec<ValidationError>,
) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for o in objects {
        let name = o.name_any();
        let mut c = Check::new(kind, o, errors);
        if name.is_empty() {
            c.err("metadata.name", "the object has no name", "set metadata.name");
        } else if !is_dns_subdomain(&name) {
            c.err(
                "metadata.name",
                format!("{name:?} is not a valid name"),
                "use lowercase letters, digits, '-' and '.', at most 253 characters",
            );
        }
        if !seen.insert(name.clone()) {
            c.err(
                "metadata.name",
                format!("another {kind} is also named {name:?}"),
                "give every object of a kind its own name",
            );
        }
    }
    seen
}

#[cfg(test)]
mod tests;
