//! Settings that tests may override through `FERROLB_TEST_*` environment variables.
//!
//! The labs shorten timers that production must keep (the membership key rotation
//! window) by setting these on the debug binaries they build. A release binary must
//! behave as shipped whatever its environment holds, so every `FERROLB_TEST_*` read goes
//! through [`test_override`] (`proto/tests/test_overrides.rs` holds the workspace to
//! that), which a release build compiles down to `None`.

/// The value of the environment variable `name` in a debug build; `None` in a release
/// build (without `debug_assertions`), whatever the environment holds.
pub fn test_override(name: &str) -> Option<String> {
    if cfg!(debug_assertions) { std::env::var(name).ok() } else { None }
}
