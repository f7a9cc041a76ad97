#!/usr/bin/env bash
# The whole test suite: unit, property and lab tests with real routers.
set -euo pipefail
cd "$(dirname "$0")/.."
. testbed/prereqs.sh
status=0
# Lab tests run the real speaker binary (testbed/tests/bgp_speaker.rs).
cargo build -p ferrolb-speaker --bin ferrolb-speaker
cargo test --workspace --no-fail-fast || status=$?
# Labs tear down on drop and on panic; this catches a test process that was killed.
cargo run -q -p ferrolb-testbed -- down --stale >/dev/null || true
exit "$status"
