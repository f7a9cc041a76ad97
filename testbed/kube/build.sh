#!/usr/bin/env bash
# Builds ferrolb-kube — the real kube-apiserver, kube-controller-manager, etcd and
# kubectl in one multicall binary — from the official Go modules pinned in go.mod, and
# kwok (sigs.k8s.io/kwok, pinned in kwok/go.mod: fake Nodes and pods, see KWOK.md) with
# the stages it runs, and helm (helm.sh/helm/v3, pinned in helm/go.mod: the chart's
# tests) when they are missing. Output: target/kube/<hash of the inputs>/
# {ferrolb-kube,kwok,kwok-stages.yaml,helm}, and the link target/kube/current. A second run
# with the same inputs costs nothing; a program whose own inputs did not change is taken
# from the previous build instead of being built again.
# Sourced or run by testbed/test.sh and testbed/demo.sh; prints one line per build and
# fails with one clear line when it cannot.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
target=${CARGO_TARGET_DIR:-$here/../../target}/kube
die() { echo "ferrolb: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "no Go toolchain (go) to build the Kubernetes control plane with: install Go 1.26 or newer"
version=$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")
kwok_version=$(awk '$1=="sigs.k8s.io/kwok" && $2 ~ /^v/ {print $2; exit}' "$here/kwok/go.mod")
major=${version#v}; minor=${major#*.}; major=${major%%.*}; minor=${minor%%.*}
# What hack/lib/version.sh stamps into a release build, so /version and kubectl say v1.37.
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
# Each program's key: its module and how it is built.
kube_key=$( (cat "$here/go.mod" "$here/go.sum" "$here/main.go"; echo "$ldflags") | sha256sum | cut -c1-16)
kwok_key=$( (cat "$here/kwok/go.mod" "$here/kwok/go.sum" "$here/kwok/main.go"; echo "-s -w") | sha256sum | cut -c1-16)
# helm as its release Makefile stamps it: its version, and the Kubernetes version its
# libraries are (what `helm template` and `helm lint` assume without a cluster).
helm_version=$(awk '$1=="helm.sh/helm/v3" && $2 ~ /^v/ {print $2; exit}' "$here/helm/go.mod")
helm_k8s_minor=$(awk '$1=="k8s.io/client-go" {split($2, v, "."); print v[2]; exit}' "$here/helm/go.mod")
helm_ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  helm_ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$helm_k8s_minor"
done
helm_key=$( (cat "$here/helm/go.mod" "$here/helm/go.sum"; echo "$helm_ldflags") | sha256sum | cut -c1-16)
hash=$( (echo "$kube_key $kwok_key $helm_key"; cat "$here/build.sh") | sha256sum | cut -c1-16)
out=$target/$hash
mkdir -p "$out"

# reuse NAME KEY FILES...: links FILES of an earlier build of NAME with the same KEY into
# $out (links, not moves: target/kube/current keeps working until it points here).
reuse() {
  local name=$1 key=$2 prev; shift 2
  [ -x "$out/$name" ] && return 0
  for prev in "$target"/*/"$name.key"; do
    [ -f "$prev" ] && [ "$(cat "$prev")" = "$key" ] && [ -x "$(dirname "$prev")/$name" ] || continue
    for f in "$@" "$name.key"; do ln -f "$(dirname "$prev")/$f" "$out/$f"; done
    return 0
  done
  return 1
}

if ! reuse ferrolb-kube "$kube_key" ferrolb-kube; then
  echo "ferrolb: building the Kubernetes control plane (k8s.io/kubernetes $version) into $out — several minutes the first time" >&2
  start=$(date +%s)
  (cd "$here" && go build -trimpath -ldflags="$ldflags" -o "$out/ferrolb-kube.tmp" .) >"$out/build.log" 2>&1 \
    || die "building the Kubernetes control plane failed: $(grep -m1 -v '^go: downloading' "$out/build.log" || true) (whole log: $out/build.log)"
  mv "$out/ferrolb-kube.tmp" "$out/ferrolb-kube"
  echo "$kube_key" >"$out/ferrolb-kube.key"
  echo "ferrolb: built the Kubernetes control plane in $(($(date +%s) - start)) s" >&2
fi

if ! reuse kwok "$kwok_key" kwok kwok-stages.yaml; then
  echo "ferrolb: building kwok (sigs.k8s.io/kwok $kwok_version) into $out" >&2
  start=$(date +%s)
  (cd "$here/kwok" && go build -trimpath -ldflags="-s -w" -o "$out/kwok.tmp" .) >"$out/build-kwok.log" 2>&1 \
    || die "building kwok failed: $(grep -m1 -v '^go: downloading' "$out/build-kwok.log" || true) (whole log: $out/build-kwok.log)"
  # The stages kwokctl gives a kwok it runs beside a cluster, from the same module:
  # Nodes become Ready (and keep a Lease, with --node-lease-duration-seconds); pods
  # become Running and Ready with an IP and go away once deleted.
  module=$(cd "$here/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok) \
    || die "kwok's module sigs.k8s.io/kwok $kwok_version is not in the module cache (go list -m failed)"
  stages=$module/kustomize/stage
  for f in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
    pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
    [ -f "$stages/$f.yaml" ] || die "kwok $kwok_version has no stage $f.yaml (in $stages)"
    printf -- '---\n'; cat "$stages/$f.yaml"
  done >"$out/kwok-stages.yaml"
  mv "$out/kwok.tmp" "$out/kwok"
  echo "$kwok_key" >"$out/kwok.key"
  echo "ferrolb: built kwok in $(($(date +%s) - start)) s" >&2
fi
if ! reuse helm "$helm_key" helm; then
  echo "ferrolb: building helm (helm.sh/helm/v3 $helm_version) into $out" >&2
  start=$(date +%s)
  (cd "$here/helm" && go build -trimpath -ldflags="$helm_ldflags" -o "$out/helm.tmp" helm.sh/helm/v3/cmd/helm) \
    >"$out/build-helm.log" 2>&1 \
    || die "building helm failed: $(grep -m1 -v '^go: downloading' "$out/build-helm.log" || true) (whole log: $out/build-helm.log)"
  mv "$out/helm.tmp" "$out/helm"
  echo "$helm_key" >"$out/helm.key"
  echo "ferrolb: built helm in $(($(date +%s) - start)) s" >&2
fi
ln -sfn ferrolb-kube "$out/kubectl"
ln -sfn "$hash" "$target/current"
# Builds of other inputs are 290 MB each: keep only this one.
find "$target" -mindepth 1 -maxdepth 1 -type d ! -name "$hash" -exec rm -rf {} +
