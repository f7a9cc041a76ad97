//! ferrolb's release tooling, apart from the product's build: the Helm chart generated
//! from the kustomize sources ([`chart`]), the OCI image assembled
//! from the workspace's binaries without a registry ([`image`]), and the speaker's
//! hot-text linker script ([`hot_text`]) that `testbed/hot-text.sh` writes into
//! `speaker/hot-text.ld`. The speaker's build reads only that committed file; nothing
//! here is a dependency of a product crate.

pub mod chart;
pub mod hot_text;
pub mod image;
