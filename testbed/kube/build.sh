#!/usr/bin/env bash
# Builds ferrolb-kube — the real kube-apiserver, kube-controller-manager, etcd and
# kubectl in one multicall binary — from the official Go modules pinned in go.mod,
# when it is missing. Output: target/kube/<hash of the inputs>/ferrolb-kube, and the
# link target/kube/current. A second run with the same inputs costs nothing.
# Sourced or run by testbed/test.sh and testbed/demo.sh; prints one line when it builds
# and fails with one clear line when it cannot.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
target=${CARGO_TARGET_DIR:-$here/../../target}/kube
die() { echo "ferrolb: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "no Go toolchain (go) to build the Kubernetes control plane with: install Go 1.26 or newer"
hash=$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" "$here/build.sh" | sha256sum | cut -c1-16)
version=$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")
major=${version#v}; minor=${major#*.}; major=${major%%.*}; minor=${minor%%.*}
# What hack/lib/version.sh stamps into a release build, so /version and kubectl say v1.37.
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
out=$target/$hash
if [ ! -x "$out/ferrolb-kube" ]; then
  mkdir -p "$out"
  echo "ferrolb: building the Kubernetes control plane (k8s.io/kubernetes $version) into $out — several minutes the first time" >&2
  start=$(date +%s)
  (cd "$here" && go build -trimpath -ldflags="$ldflags" -o "$out/ferrolb-kube.tmp" .) >"$out/build.log" 2>&1 \
    || die "building the Kubernetes control plane failed: $(grep -m1 -v '^go: downloading' "$out/build.log" || true) (whole log: $out/build.log)"
  mv "$out/ferrolb-kube.tmp" "$out/ferrolb-kube"
  echo "ferrolb: built the Kubernetes control plane in $(($(date +%s) - start)) s" >&2
fi
ln -sfn ferrolb-kube "$out/kubectl"
ln -sfn "$hash" "$target/current"
# Builds of other inputs are 190 MB each: keep only this one.
find "$target" -mindepth 1 -maxdepth 1 -type d ! -name "$hash" -exec rm -rf {} +
