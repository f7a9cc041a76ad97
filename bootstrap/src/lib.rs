//! ferrolb bootstrap: announces the apiserver VIP from a checkpointed config, gated on
//! the local apiserver's health, with no apiserver needed to start.
//!
//! * [`checkpoint`]: read with fallback to `FILE.prev`, render, one-line errors.
//! * [`health`]: the health monitor (pure) and the HTTPS prober of the local apiserver.
//! * [`bgp`]: BGP mode (every healthy member announces; drain with GRACEFUL_SHUTDOWN).
//! * [`l2`]: L2 mode: who holds the VIP (sans-IO [`l2::holder`]), health carried in the
//!   SWIM membership name, following the membership key file, other nodes' claims.
//! * [`run`]: `ferrolb-bootstrap run`, the loops that drive them (BGP or L2 mode over
//!   checkpoint reloads), here so tests drive what the binary runs.
//! * [`addr`]: interface addresses marked as ferrolb's (IFA_PROTO).
//! * [`refresh`]: rewriting the checkpoint from the local apiserver.
//! * [`credentials`]: the least-privilege client certificate and kubeconfig.
//! * [`manifest`]: the static pod.
//! * [`metrics`]: `ferrolb_bootstrap_*` metrics, liveness and readiness.
pub mod addr;
pub mod bgp;
pub mod checkpoint;
pub mod credentials;
pub mod health;
pub mod l2;
pub mod manifest;
pub mod metrics;
pub mod refresh;
pub mod run;
