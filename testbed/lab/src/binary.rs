//! Where the programs a lab runs are: this workspace's binaries under `target/`, and
//! the control plane's multicall binary built by `testbed/kube/build.sh`.

use std::path::{Path, PathBuf};

use crate::Error;

/// The workspace's root, where its `Cargo.toml`, `Dockerfile` and `manifests/` are (this
/// crate is `testbed/lab/`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The workspace's target directory: `$CARGO_TARGET_DIR`, else `target/` beside the
/// workspace's `Cargo.toml`.
pub fn target_dir() -> PathBuf {
    std::env::var("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|_| workspace_root().join("target"))
}

/// One of this workspace's binaries (`ferrolb-speaker`, `ferrolb-controller`, `kubectl-ferrolb`,
/// `ferrolb-bootstrap`) for `profile`: `$FERROLB_<NAME>_BIN` (e.g. `FERROLB_SPEAKER_BIN`),
/// else `target/<profile>/<name>`.
pub fn workspace(name: &str, profile: &str) -> Result<PathBuf, Error> {
    if let Some(p) = from_env(name) {
        return Ok(p);
    }
    let p = target_dir().join(profile).join(name);
    if p.exists() {
        Ok(p)
    } else {
        Err(Error::Missing(format!(
            "{} not found: build it first (cargo build -p {name}{})",
            p.display(),
            if profile == "release" { " --release" } else { "" }
        )))
    }
}

/// The most recently built of the release and debug `name`, or `$FERROLB_<NAME>_BIN`.
pub fn newest(name: &str) -> Result<PathBuf, Error> {
    if let Some(p) = from_env(name) {
        return Ok(p);
    }
    let built = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    ["release", "debug"]
        .iter()
        .map(|profile| target_dir().join(profile).join(name))
        .filter(|p| p.exists())
        .max_by_key(built)
        .ok_or_else(|| {
            Error::Missing(format!(
                "no {name} under {}: build it first (cargo build -p {name} --release)",
                target_dir().display()
            ))
        })
}

/// `ferrolb-kube`, the multicall binary holding the real control plane:
/// `$FERROLB_KUBE_BIN`, else `target/kube/current/ferrolb-kube`.
pub fn kube() -> Result<PathBuf, Error> {
    built_by_kube_build("ferrolb-kube")
}

/// A program `testbed/kube/build.sh` builds (`ferrolb-kube`, `helm`): `$<NAME>_BIN`
/// ([`env_var`]), else `target/kube/current/<name>`.
pub fn built_by_kube_build(name: &str) -> Result<PathBuf, Error> {
    if let Some(p) = from_env(name) {
        return Ok(p);
    }
    let p = target_dir().join("kube").join("current").join(name);
    if p.exists() {
        Ok(p)
    } else {
        Err(Error::Missing(format!(
            "{} not found: build it first (testbed/kube/build.sh; testbed/test.sh runs it)",
            p.display()
        )))
    }
}

/// `$FERROLB_<NAME>_BIN` for `name` (`ferrolb-speaker`: `$FERROLB_SPEAKER_BIN`), when set.
pub fn from_env(name: &str) -> Option<PathBuf> {
    std::env::var(env_var(name)).ok().map(PathBuf::from)
}

/// The variable naming `name`'s binary: `ferrolb-speaker` → `FERROLB_SPEAKER_BIN`.
pub fn env_var(name: &str) -> String {
    format!("{}_BIN", name.replace('-', "_").to_uppercase())
}
