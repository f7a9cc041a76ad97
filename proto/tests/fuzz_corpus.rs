//! Replays every committed fuzz corpus (`proto/fuzz/corpus/<target>/`) through the
//! fuzz targets' own bodies, so input the fuzzer once found (or was seeded with) keeps
//! passing in the normal test suite: no panic, round-trip properties intact.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

#[path = "../fuzz/src/lib.rs"]
mod targets;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// File names under `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut v: Vec<String> =
        entries.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

#[test]
fn every_corpus_file_passes_its_target() {
    let mut failures = Vec::new();
    for (target, run) in targets::TARGETS {
        let dir = fuzz_dir().join("corpus").join(target);
        let files = names(&dir);
        assert!(!files.is_empty(), "{}: empty corpus", dir.display());
        for name in &files {
            let path = dir.join(name);
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| run(&data))) {
                let why = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("non-string panic");
                failures.push(format!("{}: {why}", path.display()));
            }
        }
        eprintln!("{target}: {} corpus files replayed", files.len());
    }
    assert!(failures.is_empty(), "{} corpus files fail:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn every_fuzz_target_and_corpus_is_replayed() {
    let mut replayed: Vec<String> = targets::TARGETS.iter().map(|(t, _)| t.to_string()).collect();
    replayed.sort();
    assert_eq!(names(&fuzz_dir().join("corpus")), replayed, "corpus directories");
    let bins: Vec<String> = names(&fuzz_dir().join("fuzz_targets"))
        .iter()
        .filter_map(|n| n.strip_suffix(".rs"))
        .map(String::from)
        .collect();
    assert_eq!(bins, replayed, "fuzz_targets/*.rs");
}
