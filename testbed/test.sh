#!/usr/bin/env bash
# The whole test suite: unit, property and lab tests with real routers.
set -euo pipefail
cd "$(dirname "$0")/.."
. testbed/prereqs.sh
# The real control plane (kube-apiserver, etcd, kube-controller-manager) from Go modules.
bash testbed/kube/build.sh
status=0
# Lab tests run the real binaries (testbed/tests/bgp_speaker.rs, real_*.rs; real_plugin.rs
# runs kubectl-ferrolb).
cargo build -p ferrolb-speaker -p ferrolb-controller -p ferrolb-bootstrap -p kubectl-ferrolb
cargo test --workspace --no-fail-fast || status=$?
# Every fuzz target for a bounded time from its committed corpus (the corpora are also
# replayed by `cargo test`: proto/tests/fuzz_corpus.rs). A crash fails the suite.
bash testbed/fuzz.sh "${FERROLB_FUZZ_SECONDS:-30}" || status=$?
# Labs tear down on drop and on panic; this catches a test process that was killed.
cargo run -q -p ferrolb-testbed -- down --stale >/dev/null || true
exit "$status"
