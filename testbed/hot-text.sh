#!/usr/bin/env bash
# Regenerates speaker/hot-text.ld: the functions a release speaker runs from its start to
# rest, gathered by the linker into one section so that fewer text pages are resident
# (#15; testbed/release/src/hot_text.rs says why). Run it after a change that moves what runs at
# start; it ends by building the benches' speaker with the new list, so `bench bgp-scale`
# right after prints the speaker's RSS at rest to compare.
# Each scenario runs the release speaker under callgrind, which is ~50x slower: the
# figures the benches print meanwhile mean nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
. testbed/prereqs.sh
command -v valgrind >/dev/null || apt-get install -y -q valgrind >/dev/null
bash testbed/kube/build.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
testbed=./target/release/ferrolb-testbed
profiles=()
# One scenario: the command, with every speaker it starts run under callgrind. Callgrind
# writes its profile at exit and the benches SIGKILL their speakers, so it dumps every
# 200k basic blocks instead: only the last few milliseconds of each speaker are lost.
run() {
    local dir="$work/${#profiles[@]}"
    mkdir -p "$dir"
    cat > "$work/speaker" <<WRAP
#!/bin/sh
exec valgrind -q --tool=callgrind --demangle=no --dump-instr=no --compress-strings=no \\
  --dump-every-bb=200000 --callgrind-out-file="$dir/%p" "$PWD/target/release/ferrolb-speaker" "\$@"
WRAP
    chmod +x "$work/speaker"
    FERROLB_SPEAKER_BIN="$work/speaker" "$@" >/dev/null
    # The dumps in the order callgrind wrote them: by process, then by number (PID.N).
    mapfile -t -O "${#profiles[@]}" profiles < <(ls "$dir" | sort -t. -k1,1n -k2,2n | sed "s|^|$dir/|")
}
scenarios() {
    # Static-file mode, one BGP session, Established and at rest, then 1000 Services.
    run "$testbed" bench bgp-scale --sizes 1000 --systems ferrolb
    # Kubernetes mode on the real apiserver: watchers, ServiceAnnouncements, a restart.
    run "$testbed" bench whole-path --services 20 --existing 200
}
# Which instantiations of a generic function exist depends on the features a build
# unifies over the packages it builds, so the speaker is profiled as built by both builds
# that matter: the benches' (with the controller and the testbed) and the image's (the
# Dockerfile's --bin set, what operators run). Their patterns are merged.
# Both are linked without the hot-text script: valgrind names only the functions of the
# sections it knows, so those of a .text.hot section would come out as `???`.
benches_build() { cargo build --release -p ferrolb-speaker -p ferrolb-controller -p ferrolb-testbed; }
FERROLB_HOT_TEXT=off benches_build
scenarios
# The testbed binary stays from the build above; this one replaces the speaker's.
image_bins=$(sed -n 's/^ARG BINARIES="\(.*\)"$/\1/p' Dockerfile)
[ -n "$image_bins" ] || { echo "no ARG BINARIES in Dockerfile" >&2; exit 1; }
FERROLB_HOT_TEXT=off cargo build --release --locked $(printf -- '--bin %s ' $image_bins)
scenarios
"$testbed" hot-text --out speaker/hot-text.ld "${profiles[@]}"
# Leave the benches' build in place, linked with the new list.
benches_build
