//! The build script of every binary crate (`build = "../buildinfo/build.rs"` in the
//! Cargo.toml of speaker, controller, bootstrap and testbed): stamps which build this is.
//!
//! * `FERROLB_REVISION`: `$FERROLB_REVISION` when set (the Docker build has no `.git`:
//!   `docker build --build-arg FERROLB_REVISION=$(git rev-parse --short HEAD) .`), else
//!   `git rev-parse --short HEAD` with `-dirty` when tracked files differ from it, else
//!   `unknown`. Exported as `ferrolb_build_info{version, revision}`.
//! * `FERROLB_VERSION`: what `--version` prints after the binary's name, `0.1.0 (1a2b3c4)`.
//! * `hot-text.ld`, when the crate has one (the speaker): the code run from start to rest,
//!   linked first and together; `FERROLB_HOT_TEXT=off` leaves it out, for the profiles
//!   that write it (`testbed/hot-text.sh`).
//!
//! It runs again when HEAD moves (a commit, a checkout) or `$FERROLB_REVISION` changes,
//! not on every edit, so that an edit does not rebuild four crates: between commits,
//! `-dirty` tells how the tree was when HEAD last moved.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=FERROLB_REVISION");
    let revision = match std::env::var("FERROLB_REVISION") {
        Ok(r) if !r.trim().is_empty() => r.trim().to_owned(),
        _ => from_git().unwrap_or_else(|| "unknown".to_owned()),
    };
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    println!("cargo:rustc-env=FERROLB_REVISION={revision}");
    println!("cargo:rustc-env=FERROLB_VERSION={version} ({revision})");
    hot_text();
}

/// `hot-text.ld` beside the crate's Cargo.toml (the speaker's): the linker script that lays
/// out together the functions run from start to rest, so that fewer text pages are
/// resident (testbed/release/src/hot_text.rs). lld and GNU ld both read it.
///
/// `FERROLB_HOT_TEXT=off` links without it: valgrind keeps the symbols of known sections
/// only, so a speaker with a `.text.hot` section shows its hot functions as `???` in the
/// callgrind profiles that `testbed/hot-text.sh` turns into the script.
fn hot_text() {
    let script = Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default()).join("hot-text.ld");
    if script.exists() && std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rerun-if-changed={}", script.display());
        println!("cargo:rerun-if-env-changed=FERROLB_HOT_TEXT");
        if std::env::var("FERROLB_HOT_TEXT").as_deref() == Ok("off") {
            return;
        }
        println!("cargo:rustc-link-arg-bins=-Wl,-T,{}", script.display());
    }
}

/// The short hash of HEAD, `-dirty` when tracked files changed; None without git or a
/// repository. Asks to be run again when HEAD or the branch it names moves.
fn from_git() -> Option<String> {
    let hash = git(&["rev-parse", "--short", "HEAD"]).filter(|h| !h.is_empty())?;
    // HEAD names the branch (or holds the hash when detached); the branch's ref is a
    // loose file, or a line of packed-refs once packed. `--git-path` finds both in a
    // worktree too (refs live in the common directory).
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        // A path that does not exist would make cargo run this script on every build.
        if let Some(path) = git(&["rev-parse", "--git-path", &name]).filter(|p| Path::new(p).exists())
            && let Ok(path) = std::fs::canonicalize(path)
        {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    // Read-only: the index is not refreshed, so this never contends with a git command
    // running beside the build.
    let changes = git(&["--no-optional-locks", "status", "--porcelain", "--untracked-files=no"]);
    Some(match changes {
        Some(c) if !c.is_empty() => format!("{hash}-dirty"),
        _ => hash,
    })
}

/// `git ARGS` in the crate's directory: its trimmed output, None when it cannot run or fails.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout).ok().map(|s| s.trim().to_owned())
}
