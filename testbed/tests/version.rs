//! `--version` of every binary prints `NAME VERSION (REVISION)`: the crate version and
//! the git commit it was built from (buildinfo/build.rs), `-dirty` when the tree had
//! changes, `unknown` without git, or `$FERROLB_REVISION` when the build set it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::path::PathBuf;
use std::process::Command;

/// `git rev-parse --short HEAD` of the work tree, when git and the repository are here.
fn head() -> Option<String> {
    let out = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A revision as buildinfo/build.rs writes it from git: a short hash, maybe `-dirty`.
fn is_git_revision(r: &str) -> bool {
    let hash = r.strip_suffix("-dirty").unwrap_or(r);
    (7..=40).contains(&hash.len()) && hash.chars().all(|c| c.is_ascii_hexdigit())
}

#[test]
fn every_binary_prints_its_version_and_git_revision() {
    let mut binaries: Vec<(&str, PathBuf)> = ["ferrolb-speaker", "ferrolb-controller", "ferrolb-bootstrap"]
        .into_iter()
        .map(|name| (name, ferrolb_lab::binary::workspace(name, "debug").unwrap()))
        .collect();
    binaries.push(("ferrolb-testbed", PathBuf::from(env!("CARGO_BIN_EXE_ferrolb-testbed"))));
    // Set for the tests, it was set for the builds (cargo test builds with the same environment).
    let forced = std::env::var("FERROLB_REVISION").ok().filter(|r| !r.trim().is_empty());
    let forced = forced.as_deref().map(str::trim);
    let head = head();
    for (name, path) in binaries {
        let out = Command::new(&path).arg("--version").output().unwrap();
        assert!(out.status.success(), "{name} --version: {out:?}");
        let line = String::from_utf8(out.stdout).unwrap();
        let line = line.trim_end();
        let revision = line
            .strip_prefix(&format!("{name} {} (", env!("CARGO_PKG_VERSION")))
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or_else(|| {
                panic!("{name} --version printed {line:?}, not \"{name} VERSION (REVISION)\"")
            });
        match (forced, &head) {
            (Some(f), _) => assert_eq!(revision, f, "{name}: $FERROLB_REVISION"),
            (None, Some(head)) => assert!(
                revision.strip_suffix("-dirty").unwrap_or(revision) == head && is_git_revision(revision),
                "{name} says it is {revision:?} but HEAD is {head}: rebuild it (cargo build -p {name})"
            ),
            (None, None) => assert_eq!(revision, "unknown", "{name}: built without git"),
        }
    }
}
