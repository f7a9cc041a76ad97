//! The speaker is linked with `speaker/hot-text.ld` (buildinfo/build.rs): the functions
//! it runs from start to rest come first, in a section of their own (#15 point 3).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::process::Command;

/// (address, size) of each section of `binary` named `name`, read with `readelf -SW`.
fn section(binary: &std::path::Path, name: &str) -> Option<(u64, u64)> {
    let out = Command::new("readelf").arg("-SW").arg(binary).output().expect("readelf runs");
    assert!(
        out.status.success(),
        "readelf -SW {}: {}",
        binary.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).lines().find_map(|line| {
        // "  [16] .text.hot  PROGBITS  00000000002e9fb0 2e8fb0 4819d4 00  AX  0   0 16"
        let fields: Vec<&str> = line.split(']').nth(1)?.split_whitespace().collect();
        (fields.first() == Some(&name)).then(|| {
            let hex = |i: usize| u64::from_str_radix(fields[i], 16).expect("hex field");
            (hex(2), hex(4))
        })
    })
}

#[test]
fn the_speakers_start_and_rest_code_is_laid_out_first_and_together() {
    let speaker = ferrolb_lab::speaker::binary("debug").expect("testbed/test.sh builds the debug speaker");
    let script = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../speaker/hot-text.ld"))
        .expect("speaker/hot-text.ld is committed");
    let patterns = script.lines().filter(|l| l.trim_start().starts_with("*(.text.")).count();
    assert!(patterns > 500, "speaker/hot-text.ld names {patterns} functions");

    let (hot, hot_size) = section(&speaker, ".text.hot").expect("the speaker has a .text.hot section");
    let (text, _) = section(&speaker, ".text").expect("the speaker has a .text section");
    assert!(hot < text, ".text.hot at {hot:#x} should come before .text at {text:#x}");
    // Most patterns match in a debug build too; a script that matched nothing (stale
    // names, a mangling that changed) would leave the section nearly empty.
    assert!(hot_size > 256 * 1024, ".text.hot holds only {hot_size} bytes");
}
