#!/usr/bin/env bash
# Regenerates speaker/hot-text.ld: the functions a release speaker runs from its start to
# rest, gathered by the linker into one section so that fewer text pages are resident
# (#15; testbed/src/hot_text.rs says why). Run it after a change that moves what runs at
# start, then rebuild; `bench bgp-scale` prints the speaker's RSS at rest to compare.
# Each scenario runs the release speaker under callgrind, which is ~50x slower: the
# figures the benches print meanwhile mean nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
. testbed/prereqs.sh
command -v valgrind >/dev/null || apt-get install -y -q valgrind >/dev/null
bash testbed/kube/build.sh
cargo build --release -p ferrolb-speaker -p ferrolb-controller -p ferrolb-testbed
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
# Static-file mode, one BGP session, Established and at rest, then 1000 Services.
run "$testbed" bench bgp-scale --sizes 1000 --systems ferrolb
# Kubernetes mode on the real apiserver: watchers, ServiceAnnouncements, a restart.
run "$testbed" bench whole-path --services 20 --existing 200
"$testbed" hot-text --out speaker/hot-text.ld "${profiles[@]}"
