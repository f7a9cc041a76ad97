//! `FERROLB_TEST_*` environment overrides take effect in debug builds only: every read of
//! one in the workspace goes through `ferrolb_runtime::test_env::test_override`, and a debug
//! build (what the labs run) still honours them.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::path::{Path, PathBuf};
use std::time::Duration;

use ferrolb_proto::membership::{TEST_ROTATION_WINDOW_ENV, auth, rotation_window};

/// The one file allowed to read a `FERROLB_TEST_*` variable itself.
const HELPER: &str = "runtime/src/test_env.rs";

/// The workspace's Rust sources, as (path relative to the workspace, text).
fn workspace_sources() -> Vec<(String, String)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "target" {
                continue;
            }
            if path.is_dir() {
                walk(root, &path, out);
            } else if name.ends_with(".rs") {
                let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.push((rel, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out
}

/// Names of the constants that hold a `FERROLB_TEST_*` variable name.
fn override_constants(sources: &[(String, String)]) -> Vec<String> {
    let mut names = Vec::new();
    for (_, text) in sources {
        for line in text.lines().filter(|l| l.contains("\"FERROLB_TEST_")) {
            let Some((_, after)) = line.split_once("const ") else { continue };
            if let Some((name, _)) = after.split_once(':') {
                names.push(name.trim().to_owned());
            }
        }
    }
    names
}

/// Whether `text` holds `word` as a whole identifier.
fn has_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        let ident = |c: char| c.is_alphanumeric() || c == '_';
        !text[..i].ends_with(ident) && !text[i + word.len()..].starts_with(ident)
    })
}

#[test]
fn every_test_override_is_read_through_the_one_gate() {
    let sources = workspace_sources();
    let constants = override_constants(&sources);
    assert!(
        constants.iter().any(|c| c == "TEST_ROTATION_WINDOW_ENV"),
        "the scan missed the membership rotation window: {constants:?}"
    );
    let mentions_override =
        |args: &str| args.contains("FERROLB_TEST_") || constants.iter().any(|c| has_word(args, c));
    let mut direct = Vec::new();
    for (path, text) in sources.iter().filter(|(p, _)| p != HELPER) {
        for call in ["env::var(", "env::var_os(", "env!(", "option_env!("] {
            for (at, _) in text.match_indices(call) {
                // The call's arguments, across lines if rustfmt split them.
                let args = &text[at + call.len()..];
                let args = &args[..args.find(')').unwrap_or(args.len())];
                if mentions_override(args) {
                    direct.push(format!("{path}:{}", text[..at].lines().count()));
                }
            }
        }
    }
    assert!(
        direct.is_empty(),
        "read without test_env::test_override, so a release build would honour them: {direct:?}"
    );
    for c in &constants {
        let gated = sources.iter().any(|(_, text)| {
            text.match_indices("test_override(").any(|(at, _)| {
                let args = &text[at..];
                has_word(&args[..args.find(')').unwrap_or(args.len())], c)
            })
        });
        assert!(gated, "{c} is never read through test_override: the override does nothing");
    }
}

/// The window the parent test sets for the child run of the test below.
const CHILD_WINDOW_MS: u64 = 1234;
/// Marks the child run (not read through the gate, which a release build closes).
const CHILD: &str = "FERROLB_OVERRIDES_CHILD_RUN";

#[test]
fn a_debug_build_honours_the_rotation_override() {
    if std::env::var_os(CHILD).is_some() {
        let expected = if cfg!(debug_assertions) {
            Duration::from_millis(CHILD_WINDOW_MS)
        } else {
            auth::ROTATION_WINDOW
        };
        assert_eq!(rotation_window(), expected);
        return;
    }
    assert_eq!(rotation_window(), auth::ROTATION_WINDOW, "without the variable, the shipped window");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_debug_build_honours_the_rotation_override", "--test-threads=1"])
        .env(TEST_ROTATION_WINDOW_ENV, CHILD_WINDOW_MS.to_string())
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the child run failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 passed"), "the child run ran no test:\n{stdout}");
}
