//! ferrolb's user contract: the CRD types of API.md, their one validator, and the
//! YAML object-stream reader/writer used for static files and checkpoints.

pub mod address;
pub mod annotations;
pub mod community;
pub mod crd;
pub mod duration;
pub mod selector;
pub mod stream;
pub mod validate;

pub use address::{AddressError, AddressRange};
pub use annotations::{
    LoadBalancerIpsError, MembershipKey, MembershipKeyError, parse_load_balancer_ips,
};
pub use community::{Community, CommunityError};
pub use crd::*;
pub use duration::{Duration, DurationError};
pub use selector::selectors_match;
pub use stream::{
    Object, ObjectStream, Source, StreamError, parse_stream, read_stream, write_atomically,
    write_stream,
};
pub use validate::{
    Config, Origin, ValidConfig, ValidationError, errors_for, set_condition, valid_condition,
    validate,
};
