#!/usr/bin/env bash
# The demo: a lab with a real router, announced service addresses, a client reaching them.
# --kubelets: on real kubelets from ferrolb's image (testbed/src/demo/kubelets.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
. testbed/prereqs.sh
bash testbed/kube/build.sh
cargo build -q -p ferrolb-testbed -p ferrolb-speaker -p ferrolb-controller -p ferrolb-bootstrap -p kubectl-ferrolb
exec ./target/debug/ferrolb-testbed demo "$@"
