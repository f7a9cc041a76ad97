//! The parts the event loop owns. Each keeps its own state and knows nothing of the
//! loop: the handlers (`super::on_*`) hand each what it needs and act on what it says.
//!
//! * `feed`: Kubernetes mode, the watchers' updates into the model;
//! * `cluster`: Kubernetes mode, the API side (status writer, Secrets, gate, watchers);
//! * `gate`: the pod readiness gate `ferrolb.io/load-balancer-ready`;
//! * `l2`: membership, the claim rule and the L2 announcer;
//! * `rotation`: key and password rotation;
//! * `drain`: drain and handover timers.

pub(super) mod cluster;
pub(super) mod drain;
pub(super) mod feed;
pub(super) mod gate;
pub(super) mod l2;
pub(super) mod rotation;
