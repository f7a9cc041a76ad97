//! The typed object of a stream, and how a [`Config`] maps to and from objects.

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use serde::Serialize;

use crate::crd::{
    BfdProfile, BgpAdvertisement, BgpPeer, ControlPlaneVip, IpAddressPool, L2Advertisement,
    ServiceAnnouncement,
};
use crate::validate::Config;

/// One object of a stream, typed.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Object {
    /// ferrolb.io IPAddressPool.
    IpAddressPool(Box<IpAddressPool>),
    /// ferrolb.io BGPPeer.
    BgpPeer(Box<BgpPeer>),
    /// ferrolb.io BGPAdvertisement.
    BgpAdvertisement(Box<BgpAdvertisement>),
    /// ferrolb.io L2Advertisement.
    L2Advertisement(Box<L2Advertisement>),
    /// ferrolb.io BFDProfile.
    BfdProfile(Box<BfdProfile>),
    /// ferrolb.io ControlPlaneVIP.
    ControlPlaneVip(Box<ControlPlaneVip>),
    /// ferrolb.io ServiceAnnouncement.
    ServiceAnnouncement(Box<ServiceAnnouncement>),
    /// core/v1 Node.
    Node(Box<Node>),
    /// core/v1 Service.
    Service(Box<Service>),
    /// discovery.k8s.io/v1 EndpointSlice.
    EndpointSlice(Box<EndpointSlice>),
}

macro_rules! object_from {
    ($($variant:ident($ty:ty)),* $(,)?) => {$(
        impl From<$ty> for Object {
            fn from(o: $ty) -> Self {
                Self::$variant(o.into())
            }
        }
    )*};
}

object_from!(
    IpAddressPool(IpAddressPool),
    BgpPeer(BgpPeer),
    BgpAdvertisement(BgpAdvertisement),
    L2Advertisement(L2Advertisement),
    BfdProfile(BfdProfile),
    ControlPlaneVip(ControlPlaneVip),
    ServiceAnnouncement(ServiceAnnouncement),
    Node(Node),
    Service(Service),
    EndpointSlice(EndpointSlice),
);

impl Object {
    /// Kind as written in `kind:`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::IpAddressPool(_) => "IPAddressPool",
            Self::BgpPeer(_) => "BGPPeer",
            Self::BgpAdvertisement(_) => "BGPAdvertisement",
            Self::L2Advertisement(_) => "L2Advertisement",
            Self::BfdProfile(_) => "BFDProfile",
            Self::ControlPlaneVip(_) => "ControlPlaneVIP",
            Self::ServiceAnnouncement(_) => "ServiceAnnouncement",
            Self::Node(_) => "Node",
            Self::Service(_) => "Service",
            Self::EndpointSlice(_) => "EndpointSlice",
        }
    }

    /// `metadata.name`, or `metadata.generateName` when there is no name.
    pub fn name(&self) -> String {
        match self {
            Self::IpAddressPool(o) => o.name_any(),
            Self::BgpPeer(o) => o.name_any(),
            Self::BgpAdvertisement(o) => o.name_any(),
            Self::L2Advertisement(o) => o.name_any(),
            Self::BfdProfile(o) => o.name_any(),
            Self::ControlPlaneVip(o) => o.name_any(),
            Self::ServiceAnnouncement(o) => o.name_any(),
            Self::Node(o) => o.name_any(),
            Self::Service(o) => o.name_any(),
            Self::EndpointSlice(o) => o.name_any(),
        }
    }
}

impl Config {
    /// The objects of this configuration, in a stable order, e.g. to write a checkpoint.
    pub fn to_objects(&self) -> Vec<Object> {
        let mut out: Vec<Object> = Vec::new();
        out.extend(self.control_plane_vips.iter().cloned().map(Object::from));
        out.extend(self.bfd_profiles.iter().cloned().map(Object::from));
        out.extend(self.peers.iter().cloned().map(Object::from));
        out.extend(self.pools.iter().cloned().map(Object::from));
        out.extend(self.bgp_advertisements.iter().cloned().map(Object::from));
        out.extend(self.l2_advertisements.iter().cloned().map(Object::from));
        out
    }

    /// The ferrolb configuration kinds among `objects`, in their order; other kinds are
    /// left out.
    pub fn from_objects<'a>(objects: impl IntoIterator<Item = &'a Object>) -> Config {
        let mut c = Config::default();
        for o in objects {
            match o {
                Object::IpAddressPool(x) => c.pools.push((**x).clone()),
                Object::BgpPeer(x) => c.peers.push((**x).clone()),
                Object::BgpAdvertisement(x) => c.bgp_advertisements.push((**x).clone()),
                Object::L2Advertisement(x) => c.l2_advertisements.push((**x).clone()),
                Object::BfdProfile(x) => c.bfd_profiles.push((**x).clone()),
                Object::ControlPlaneVip(x) => c.control_plane_vips.push((**x).clone()),
                Object::ServiceAnnouncement(_)
                | Object::Node(_)
                | Object::Service(_)
                | Object::EndpointSlice(_) => {}
            }
        }
        c
    }
}
