//! The custom resources of API.md: group `ferrolb.io`, version `v1alpha1`.

// Several `printcolumn(type_ = "string", ..)` in one `#[kube]` look like duplicates to clippy.
#![allow(clippy::duplicated_attributes)]

mod announcement;
mod bfd;
mod bgp;
mod cpvip;
pub mod defaults;
mod l2;
mod manifests;
mod pool;
pub mod rules;

pub use announcement::{
    AnnouncementProtocol, ServiceAnnouncement, ServiceAnnouncementSpec, ServiceAnnouncementStatus, ServiceRef,
};
pub use bfd::{BfdProfile, BfdProfileSpec, BfdProfileStatus};
pub use bgp::{
    AddressFamily, BgpAdvertisement, BgpAdvertisementSpec, BgpAdvertisementStatus, BgpPeer, BgpPeerSpec,
    BgpPeerStatus, DynamicAsn, GracefulRestart, LinkBandwidth, SecretKeyRef,
};
pub use cpvip::{
    ControlPlaneVip, ControlPlaneVipBgp, ControlPlaneVipMember, ControlPlaneVipSpec, ControlPlaneVipStatus,
    HealthCheck, VipMode,
};
pub use l2::{L2Advertisement, L2AdvertisementSpec, L2AdvertisementStatus, L2Mode, NodePreference};
pub use manifests::{ManifestError, REGENERATE, crd_files, crds};
pub use pool::{IpAddressPool, IpAddressPoolSpec, IpAddressPoolStatus, ServiceAllocation};

/// API group of every ferrolb kind.
pub const GROUP: &str = "ferrolb.io";
/// API version of every ferrolb kind.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` as written in objects.
pub const API_VERSION: &str = "ferrolb.io/v1alpha1";

/// Default `spec.loadBalancerClass` served (`--lb-class`).
pub const DEFAULT_LOAD_BALANCER_CLASS: &str = "ferrolb.io/lb";
/// Pod readiness gate condition type.
pub const READINESS_GATE_CONDITION: &str = "ferrolb.io/load-balancer-ready";
/// RFC 8326 GRACEFUL_SHUTDOWN community, sent while draining.
pub const GRACEFUL_SHUTDOWN_COMMUNITY: &str = "65535:0";
/// The same community as (ASN, value).
pub const GRACEFUL_SHUTDOWN: (u16, u16) = (65535, 0);
/// Condition type every ferrolb kind carries.
pub const CONDITION_VALID: &str = "Valid";
/// Name of the Secret holding the speakers' membership key.
pub const MEMBERSHIP_SECRET_NAME: &str = "ferrolb-membership";
/// The data key of that Secret holding the key (the controller writes it, speakers read it).
pub const MEMBERSHIP_SECRET_KEY: &str = "key";
/// Namespace ferrolb's workloads run in when nothing else says so.
pub const DEFAULT_NAMESPACE: &str = "ferrolb-system";

/// The namespace a ferrolb workload runs in: `POD_NAMESPACE` (downward API), else the
/// service account's namespace file, else [`DEFAULT_NAMESPACE`].
pub fn default_namespace() -> String {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| DEFAULT_NAMESPACE.into())
}

/// Longest Event note ferrolb writes (the apiserver refuses notes over 1 kB).
pub const EVENT_NOTE_MAX: usize = 1000;

/// `note` cut to [`EVENT_NOTE_MAX`] bytes at a character boundary.
pub fn event_note(mut note: String) -> String {
    if note.len() > EVENT_NOTE_MAX {
        let mut cut = EVENT_NOTE_MAX;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
    }
    note
}

/// Default speaker membership port.
pub const SPEAKER_MEMBERSHIP_PORT: u16 = 7946;

#[cfg(test)]
mod event_note_tests {
    use super::*;

    #[test]
    fn notes_are_cut_at_the_limit_on_a_character_boundary() {
        assert_eq!(event_note("short".into()), "short");
        let ascii = event_note("x".repeat(EVENT_NOTE_MAX + 10));
        assert_eq!(ascii.len(), EVENT_NOTE_MAX);
        // "é" is two bytes: the byte limit falls inside one, which is dropped whole.
        let wide = event_note(format!("x{}", "é".repeat(EVENT_NOTE_MAX)));
        assert_eq!(wide.len(), EVENT_NOTE_MAX - 1);
        assert!(wide.ends_with('é'));
    }
}
