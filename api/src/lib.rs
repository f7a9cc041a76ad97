//! ferrolb's user contract: the CRD types of API.md, their one validator, and the
//! YAML object-stream reader/writer used for static files and checkpoints.
//!
//! * Types: [`IpAddressPool`], [`BgpPeer`], [`BgpAdvertisement`], [`L2Advertisement`],
//!   [`BfdProfile`], [`ControlPlaneVip`], [`ServiceAnnouncement`] (kube `CustomResource`s;
//!   `crds()` / `crd_files()` render their CRDs).
//! * Validation: put every object into a [`Config`] and call [`validate`] (all errors) or
//!   [`Config::validate`] (a [`ValidConfig`] or the errors). A controller or webhook that
//!   judges one object validates the whole set with that object in it and picks the
//!   object's errors with [`errors_for`], then writes [`valid_condition`] with
//!   [`set_condition`].
//! * Files: [`read_stream`] / [`parse_stream`] → [`ObjectStream`] →
//!   [`ObjectStream::validated_config`]; [`write_stream`] + [`write_atomically`] for
//!   checkpoints ([`Config::for_control_plane_vip`] picks what one holds).
//!
//! ```
//! use ferrolb_api::{parse_stream, errors_for, validate, Origin};
//!
//! let file = r#"
//! apiVersion: ferrolb.io/v1alpha1
//! kind: BGPPeer
//! metadata: {name: router-a}
//! spec: {myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, holdTime: 2s}
//! "#;
//! let stream = parse_stream("static.yaml", file).unwrap();
//! let errors = validate(&stream.config(), Origin::File);
//! let mine: Vec<_> = errors_for(&errors, "BGPPeer", "router-a").collect();
//! assert_eq!(mine[0].field, "spec.holdTime");
//! assert!(stream.validated_config("static.yaml").unwrap_err().to_string()
//!     .contains("static.yaml: invalid configuration:\n  document 1: BGPPeer/router-a: spec.holdTime"));
//! ```

pub mod address;
pub mod annotations;
pub mod community;
pub mod crd;
pub mod duration;
pub mod facts_node;
mod fast_yaml;
pub mod node_facts;
pub mod selector;
pub mod service_fields;
/// BGPPeer and BFDProfile → protocol settings (feature `settings`).
#[cfg(feature = "settings")]
pub mod settings;
pub mod slim;
pub mod stream;
pub mod validate;

pub use address::{AddressError, AddressRange};
pub use annotations::{
    ANNOTATION_ADDRESS_POOL, ANNOTATION_ALLOW_SHARED_IP, ANNOTATION_IP_ALLOCATED_FROM_POOL,
    ANNOTATION_LOAD_BALANCER_IPS, AnnotationValue, LoadBalancerIpsError, SERVICE_ANNOTATIONS,
    parse_load_balancer_ips, service_annotation,
};
pub use community::{Community, CommunityError};
pub use crd::*;
pub use duration::{Duration, DurationError};
pub use facts_node::FactsNode;
pub use node_facts::NodeFacts;
pub use selector::{Labels, selectors_match};
pub use service_fields::ServiceFields;
pub use slim::{ReadSlim, Slim};
pub use stream::{
    Object, ObjectStream, Source, StreamError, json_documents, parse_stream, parse_stream_services,
    read_stream, split_documents, write_atomically, write_stream,
};
pub use validate::{
    Config, Origin, ValidConfig, ValidationError, errors_for, set_condition, valid_condition, validate,
};

/// An object kube's watcher and reflector can follow, as every ferrolb binary watches
/// them (one name for the bounds the controller's and the speaker's watches share).
pub trait Watched:
    kube::Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Watched for K where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}
