//! The ferrolb image without a registry: an OCI image archive that `ctr images import`
//! takes, assembled from the workspace's binaries the way the Dockerfile assembles the
//! published image (same binaries, same user, same entrypoint), and checked against it.
//!
//! The Dockerfile stays the published recipe. Its base (distroless cc-debian12:nonroot)
//! is rebuilt here from the host: the users it defines, its directories and environment,
//! the CA certificates, and the shared libraries `ldd` says the binaries load.
//!
//! [`Dockerfile`] reads the recipe, [`build`] assembles the image from it, [`inspect()`]
//! and [`check`] read an archive back; the OCI layout both sides share is in `layout`.

mod assemble;
mod dockerfile;
mod inspect;
mod layout;
pub mod tar;

pub use assemble::{build, workspace_binaries};
pub use dockerfile::Dockerfile;
pub use inspect::{Image, check, inspect, layer_file};
pub use layout::{Built, write_image};

/// The name `ctr images import` gives the image unless told otherwise.
pub const DEFAULT_NAME: &str = "docker.io/library/ferrolb:dev";
/// The image configuration label naming its version: the tag it was built for.
pub const VERSION_LABEL: &str = "org.opencontainers.image.version";
