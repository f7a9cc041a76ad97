#!/usr/bin/env bash
# One real kubelet by hand (#17 point 2 exploration; see KUBELET.md):
#   kubelet.sh up NODE NETNS PKI_DIR SERVER   containerd (CRI on) + pause image + kubelet
#   kubelet.sh down NODE                        stops both, unmounts, removes cgroups
# NODE: the Node name (and hostname override); NETNS: a named network namespace
# (/run/netns/NETNS, e.g. a testbed lab node) or "host"; PKI_DIR: the cluster's pki/
# (ca.crt, ca.key); SERVER: the apiserver URL as seen from NETNS, or "standalone".
# State: /tmp/ferrolb-kubelet/NODE/. Needs ferrolb-kube with the kubelet (build.sh).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
kube=${CARGO_TARGET_DIR:-$here/../../target}/kube/current/ferrolb-kube
PAUSE=localhost/ferrolb/pause:1
cmd=$1 node=$2
dir=/tmp/ferrolb-kubelet/$node
cgroot=ferrolb-kubelet-$node
controllers="unified cpu cpuacct cpuset memory devices freezer blkio pids systemd hugetlb net_cls net_prio perf_event rdma misc"

# Started in the background: nsenter and setsid exec, so $! is the daemon's own pid.
# (nsenter, not `ip netns exec`: that remounts /sys and would hide the cgroup mounts.)
innet() { if [ "$netns" = host ]; then echo setsid; else echo nsenter --net=/run/netns/$netns setsid; fi; }

pause_image() { # OCI archive by hand: oci-layout, index.json, blobs (layer, config, manifest)
  local w=$dir/pause-oci; rm -rf "$w"; mkdir -p "$w/rootfs" "$w/blobs/sha256"
  gcc -static -Os -s -o "$w/rootfs/pause" "$here/pause/pause.c"
  tar --numeric-owner --owner=0 --group=0 --mtime=@0 -C "$w/rootfs" -cf "$w/layer.tar" pause
  blob() { local d; d=$(sha256sum "$1" | cut -c1-64); cp "$1" "$w/blobs/sha256/$d"; echo "$d $(stat -c %s "$1")"; }
  read -r ld ls < <(blob "$w/layer.tar")
  printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$ld" >"$w/config.json"
  read -r cd cs < <(blob "$w/config.json")
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' "$cd" "$cs" "$ld" "$ls" >"$w/manifest.json"
  read -r md ms < <(blob "$w/manifest.json")
  printf '{"imageLayoutVersion":"1.0.0"}' >"$w/oci-layout"
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"1"}}]}' "$md" "$ms" "$PAUSE" >"$w/index.json"
  tar -C "$w" -cf "$dir/pause.tar" oci-layout index.json blobs
}

# The kubelet sets these host-wide (protectKernelDefaults: false); the last `down` puts
# them back. (protectKernelDefaults: true makes the kubelet refuse to start instead.)
sysctls="vm.overcommit_memory kernel.panic kernel.panic_on_oops"
saved=/tmp/ferrolb-kubelet/sysctl.saved

up() {
  netns=$3 pki=$4 server=$5
  mkdir -p /tmp/ferrolb-kubelet
  [ -f $saved ] || sysctl $sysctls | sed 's/ = /=/' >$saved
  mkdir -p "$dir"/{manifests,cni/net.d,cni/bin,kubelet}
  dir=$(cd "$dir" && pwd)
  # cgroupRoot must exist in every v1 hierarchy before the kubelet starts.
  for c in $controllers; do [ -d /sys/fs/cgroup/$c ] && mkdir -p /sys/fs/cgroup/$c/$cgroot; done
  # A CNI config only so that CRI reports NetworkReady (hostNetwork pods never call it).
  cat >"$dir/cni/net.d/10-ferrolb.conflist" <<CNI
{"cniVersion":"0.4.0","name":"ferrolb-hostnet-only","plugins":[{"type":"loopback"}]}
CNI
  cat >"$dir/containerd.toml" <<TOML
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
[grpc]
  address = "$dir/containerd.sock"
[ttrpc]
  address = "$dir/containerd.sock.ttrpc"
[debug]
  address = "$dir/containerd-debug.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE"
  enable_cdi = false
  # This machine drops CAP_SYS_RESOURCE: runc cannot lower oom_score_adj (the sandbox asks
  # -998) and fails with "can't get final child's PID from pipe: EOF". Keep it >= containerd's.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        # runc's state, else /run/containerd/runc shared by every containerd.
        Root = "$dir/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$dir/cni/bin"
    conf_dir = "$dir/cni/net.d"
TOML
  $(innet) containerd --config "$dir/containerd.toml" </dev/null >"$dir/containerd.log" 2>&1 &
  echo $! >"$dir/containerd.pid"
  for _ in $(seq 100); do ctr --address "$dir/containerd.sock" version >/dev/null 2>&1 && break; sleep 0.2; done
  pause_image
  ctr --address "$dir/containerd.sock" -n k8s.io images import "$dir/pause.tar"
  kubeconfig=$dir/kubeconfig
  if [ "$server" = standalone ]; then kubeconfig=; fi # static pods only, no apiserver
  # Client cert system:node:NODE (group system:nodes), signed by the cluster CA.
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$dir/kubelet.key" \
    -subj "/O=system:nodes/CN=system:node:$node" -out "$dir/kubelet.csr" 2>/dev/null
  openssl x509 -req -in "$dir/kubelet.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 2 -out "$dir/kubelet.crt" 2>/dev/null
  cat >"$dir/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "$server", certificate-authority: "$pki/ca.crt"}}]
users: [{name: u, user: {client-certificate: "$dir/kubelet.crt", client-key: "$dir/kubelet.key"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
KC
  cat >"$dir/kubelet.yaml" <<CFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$dir/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: /$cgroot
failSwapOn: false
failCgroupV1: false
staticPodPath: $dir/manifests
podLogsDir: $dir/pod-logs
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: AlwaysAllow}
readOnlyPort: 0
healthzPort: 0
resolvConf: /etc/resolv.conf
evictionHard: {memory.available: "1Mi"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
CFG
  cat >"$dir/manifests/pause.yaml" <<POD
apiVersion: v1
kind: Pod
metadata: {name: pause, namespace: default}
spec:
  hostNetwork: true
  containers: [{name: pause, image: $PAUSE, imagePullPolicy: Never}]
POD
  $(innet) "$kube" kubelet --config="$dir/kubelet.yaml" ${kubeconfig:+--kubeconfig=$kubeconfig} \
    --root-dir="$dir/kubelet" --cert-dir="$dir/kubelet/pki" --hostname-override="$node" ${NODE_IP:+--node-ip=$NODE_IP} \
    -v=2 </dev/null >"$dir/kubelet.log" 2>&1 &
  echo $! >"$dir/kubelet.pid"
  echo "kubelet $node: log $dir/kubelet.log, containerd log $dir/containerd.log"
}

down() {
  [ -d "$dir" ] || { echo "nothing at $dir"; return; }
  dir=$(cd "$dir" && pwd)
  if [ -f "$dir/kubelet.pid" ]; then kill "$(cat "$dir/kubelet.pid")" 2>/dev/null || true; sleep 1; fi
  local sock=$dir/containerd.sock
  if [ -S "$sock" ]; then
    for id in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr --address "$sock" -n k8s.io tasks kill -s SIGKILL "$id" 2>/dev/null || true
    done
    sleep 1
    for id in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do ctr --address "$sock" -n k8s.io tasks delete -f "$id" 2>/dev/null || true; done
  fi
  # shims are reparented; they name the socket on their command line
  for p in $(pgrep -f -- "-address $sock" || true); do kill -9 "$p" 2>/dev/null || true; done
  if [ -f "$dir/containerd.pid" ]; then
    pid=$(cat "$dir/containerd.pid"); kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  fi
  { grep -o " $dir[^ ]*" /proc/self/mounts || true; } | sort -r | while read -r m; do umount -l "$m" || true; done
  for c in $controllers; do
    [ -d /sys/fs/cgroup/$c/$cgroot ] && find /sys/fs/cgroup/$c/$cgroot -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  rm -rf "$dir"
  # Hardcoded, not under --root-dir: the device manager's socket (one per host!) and
  # the /var/log/containers symlinks.
  if [ -z "$(find /tmp/ferrolb-kubelet -mindepth 1 -maxdepth 1 -type d)" ]; then
    rm -f /var/lib/kubelet/device-plugins/kubelet.sock
    rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet 2>/dev/null || true
  fi
  find /var/log/containers -maxdepth 1 -lname "$dir/*" -delete 2>/dev/null || true
  rmdir /var/log/containers 2>/dev/null || true
  if [ -f $saved ] && [ -z "$(find /tmp/ferrolb-kubelet -mindepth 1 -maxdepth 1 -type d)" ]; then
    sysctl -q -w $(cat $saved) && rm -f $saved
  fi
  echo "kubelet $node down"
}

case $cmd in up) up "$@" ;; down) down ;; *) echo "usage: $0 up|down NODE ..." >&2; exit 2 ;; esac
