#!/usr/bin/env bash
# The whole test suite: unit, property and lab tests with real routers.
set -euo pipefail
cd "$(dirname "$0")/.."
. testbed/prereqs.sh
# About 80 test binaries are built. Incremental caches and line tables roughly double
# what that leaves on disk and help only a rebuild, so the suite builds without them
# (a CI run on a nearly full disk failed with ENOSPC). Set either variable to keep them.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-0}"
echo "test.sh: $(df -h --output=avail . | tail -1 | tr -d ' ') free on the build disk"
# The real control plane (kube-apiserver, etcd, kube-controller-manager) from Go modules.
bash testbed/kube/build.sh
status=0
# Lab tests run the real binaries (testbed/tests/bgp_speaker.rs, real_*.rs; real_plugin.rs
# runs kubectl-ferrolb). `cargo test --workspace` builds them into target/debug before any
# test runs, since each of their packages has integration tests: a `cargo build -p` of them
# first would build them a second time, and tokio and everything above it with them, for
# the features of those four packages alone (the workspace adds tokio's test-util).
cargo test --workspace --no-fail-fast || status=$?
# Every fuzz target for a bounded time from its committed corpus (the corpora are also
# replayed by `cargo test`: proto/tests/fuzz_corpus.rs). A crash fails the suite.
bash testbed/fuzz.sh "${FERROLB_FUZZ_SECONDS:-30}" || status=$?
# Labs tear down on drop and on panic; this catches a test process that was killed.
cargo run -q -p ferrolb-testbed -- down --stale >/dev/null || true
echo "test.sh: target/ holds $(du -sh target | cut -f1), $(df -h --output=avail . | tail -1 | tr -d ' ') left free"
exit "$status"
