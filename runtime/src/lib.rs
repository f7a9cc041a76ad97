//! What every ferrolb binary runs besides its protocols and its Kubernetes glue: the
//! HTTP endpoint behind `/metrics`, `/healthz` and `/readyz` ([`http`]), the
//! `ferrolb_build_info` metric ([`build_info`]), the allocator that counts the live heap
//! ([`heap`]), the back-off of a listener whose
//! accepts fail ([`accept`], also under the BGP listener), the deadlines and request limits of
//! every Kubernetes client (`kube_client`, feature `kube`) and the `FERROLB_TEST_*` overrides that only
//! debug builds honour ([`test_env`]).
//!
//! It depends on no other ferrolb crate: `ferrolb-proto` and the binaries stand on it.

pub mod accept;
pub mod build_info;
pub mod heap;
pub mod http;
#[cfg(feature = "kube")]
pub mod kube_client;
pub mod test_env;
