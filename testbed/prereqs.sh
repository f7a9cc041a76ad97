# Sourced by testbed/demo.sh and testbed/test.sh: fails with one clear line on what it
# cannot fix (not root, no network namespaces, no Rust toolchain) and installs the
# Debian packages the lab needs when they are missing.

die() { echo "ferrolb: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root: the testbed creates network namespaces and raw sockets"
command -v cargo >/dev/null 2>&1 \
  || die "no Rust toolchain: install one with rustup (https://rustup.rs), then run this again"

# binary → Debian package
declare -A FERROLB_PKGS=(
  [ip]=iproute2 [nstat]=iproute2 [ping]=iputils-ping [bird]=bird2 [birdc]=bird2
  [vtysh]=frr [gobgpd]=gobgpd [gobgp]=gobgpd [exabgp]=exabgp [python3]=python3
  [arping]=arping [ndisc6]=ndisc6 [tcpdump]=tcpdump [keepalived]=keepalived
  [kubectl]=kubernetes-client [faketime]=faketime [stress-ng]=stress-ng
  # promtool: the alert rules' unit tests (testbed/tests/monitoring_rules.rs).
  [promtool]=prometheus
  # The image without a registry, imported and run by a private containerd
  # (testbed/tests/image.rs); the CA bundle goes into the image as distroless's does.
  [containerd]=containerd [ctr]=containerd [runc]=runc [update-ca-certificates]=ca-certificates
  # Real kubelets (testbed/tests/real_kubelet.rs, cluster up --kubelets): the daemons
  # enter a node's network namespace only (nsenter), the pause image is built with cc -static.
  [nsenter]=util-linux [cc]=gcc
  # Partitions of the membership port alone (testbed/tests/l2_partition.rs).
  [nft]=nftables
)
missing=()
for bin in "${!FERROLB_PKGS[@]}"; do
  PATH="$PATH:/usr/sbin:/sbin:/usr/lib/frr" command -v "$bin" >/dev/null 2>&1 || missing+=("${FERROLB_PKGS[$bin]}")
done
[ -x /usr/lib/frr/bgpd ] || missing+=(frr)
# Pod networking of the real kubelets (CNI bridge + host-local).
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
# cc -static needs the static C library.
[ -f "/usr/lib/$(uname -m)-linux-gnu/libc.a" ] || missing+=(libc6-dev)
if ((${#missing[@]})); then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  echo "ferrolb: installing ${missing[*]}" >&2
  command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and no apt-get to install them"
  # Installing must not start host-wide router daemons: hold services back meanwhile.
  policy_added=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && policy_added=1
  fi
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
    >/tmp/ferrolb-apt.log 2>&1 || { ((policy_added)) && rm -f /usr/sbin/policy-rc.d; die "could not install ${missing[*]} (see /tmp/ferrolb-apt.log)"; }
  ((policy_added)) && rm -f /usr/sbin/policy-rc.d
fi

# Strict Kubernetes schema validation of manifests/ (api/tests/manifests.rs).
if ! command -v kubernetes-validate >/dev/null 2>&1; then
  command -v python3 >/dev/null 2>&1 || die "no python3 to install kubernetes-validate with"
  echo "ferrolb: installing kubernetes-validate (pip)" >&2
  if ! python3 -m pip --version >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pip >/tmp/ferrolb-pip.log 2>&1
  fi
  # Debian's own python3 refuses system-wide installs (PEP 668) unless told otherwise.
  pip_install() { python3 -m pip install -q --disable-pip-version-check "$@" kubernetes-validate >>/tmp/ferrolb-pip.log 2>&1; }
  { pip_install || pip_install --break-system-packages; } && hash -r \
    && { command -v kubernetes-validate >/dev/null 2>&1 || { command -v pyenv >/dev/null 2>&1 && pyenv rehash; }; } \
    && command -v kubernetes-validate >/dev/null 2>&1 \
    || die "could not install kubernetes-validate with pip (see /tmp/ferrolb-pip.log)"
fi

ip netns add "flb-probe-$$" 2>/dev/null && ip netns del "flb-probe-$$" \
  || die "network namespaces do not work here (ip netns add failed): a container needs CAP_SYS_ADMIN"
