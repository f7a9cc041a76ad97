//! ferrolb controller: assigns LoadBalancer Service addresses from pools.
//!
//! * [`ipam`]: the pure allocator (no Kubernetes types).
//! * [`model`]: Kubernetes objects → allocator inputs (the only place reading their fields).
//! * [`reconcile`]: `reconcile(key, ctx)`; [`service_write`]: its writes, conditional on
//!   the Service's version the decision read; [`memo`]: what it remembers of them; [`pool_sync`]: pool validation and status;
//!   [`validity`]: the `Valid` condition of every configuration kind.
//! * [`run`]: leader election, crash-consistent startup, watches; [`leader`]: the Lease decision.
//! * [`fence`]: deadlines on API calls, and the fence that stops a leader's writes when its term ends.
//! * [`migrate`]: `migrate-from-metallb`, MetalLB objects and annotations → ferrolb objects;
//!   [`metallb_notice`]: the one Event on a Service whose annotations are read in MetalLB's spelling.
//! * [`metrics`], [`http`]: `/metrics`, `/healthz`, `/readyz`; [`membership_secret`]: the speakers' membership-key Secret.
pub mod context;
pub mod error;
pub mod fence;
pub mod http;
pub mod ipam;
pub mod leader;
pub mod membership_secret;
pub mod memo;
pub mod metallb_notice;
pub mod metrics;
pub mod migrate;
pub mod model;
pub mod node_facts;
pub mod pool_sync;
pub mod queue;
pub mod reconcile;
pub mod run;
pub mod service_cache;
pub mod service_write;
pub mod validity;

/// Unit tests count the heap too (`metrics` tests the gauge).
#[cfg(test)]
#[global_allocator]
static TEST_ALLOC: ferrolb_runtime::heap::Counting = ferrolb_runtime::heap::Counting;

pub use context::Settings;
pub use error::Error;
pub use run::run;
