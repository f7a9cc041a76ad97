#!/usr/bin/env bash
# Bounded fuzzing of every cargo-fuzz target in proto/fuzz.
#
#   testbed/fuzz.sh [--update-corpus] [BUDGET_SECONDS] [TARGET...]
#
# Builds the targets with cargo-fuzz on the default (stable) toolchain: release, debug
# assertions and overflow checks on, no sanitizer (which is what lets stable build them:
# the code under test is safe Rust, the crate's only unsafe being socket code, and ASan
# slows every execution). Then runs each target for BUDGET_SECONDS (default 60), as many
# at once as there are cores, from its committed corpus (proto/fuzz/corpus/<target>/,
# read-only) into a scratch directory. Prints per target the budget and libFuzzer's final
# stats (executions, executions per second, new units). Fails if any target crashes,
# times out or runs out of memory, printing the artifact path
# (proto/fuzz/artifacts/<target>/).
#
# --update-corpus merges what the run found into the committed corpus: the smallest set
# of new inputs that adds their coverage to it (libFuzzer -set_cover_merge=1, which keeps
# fewer files than -merge=1); committed files are never removed.
#
# Needs: cargo-fuzz; installed from crates.io (pinned, --locked) when missing.
# testbed/test.sh calls this with FERROLB_FUZZ_SECONDS (default 30) per target.
set -euo pipefail
cd "$(dirname "$0")/.."

update=false
budget=60
targets=()
for arg in "$@"; do
    case "$arg" in
        --update-corpus) update=true ;;
        -h | --help)
            sed -n '2,/^# Needs/p' "$0"
            exit 0
            ;;
        *[!0-9]*) targets+=("$arg") ;;
        *) budget="$arg" ;;
    esac
done

fuzz_dir=proto/fuzz
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cd "$fuzz_dir/fuzz_targets" && ls -- *.rs | sed 's/\.rs$//')
fi
CARGO_FUZZ_VERSION=0.13.2
if ! cargo fuzz --version > /dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz $CARGO_FUZZ_VERSION (cargo install --locked)"
    cargo install -q --locked --version "$CARGO_FUZZ_VERSION" cargo-fuzz > /tmp/ferrolb-cargo-fuzz-install.log 2>&1 || {
        echo "fuzz: could not install cargo-fuzz (see /tmp/ferrolb-cargo-fuzz-install.log)" >&2
        exit 2
    }
fi

started=$(date +%s)
build_flags=(--release --debug-assertions --sanitizer none --fuzz-dir "$fuzz_dir")
echo "fuzz: building ${targets[*]} (cargo fuzz build ${build_flags[*]})"
cargo fuzz build "${build_flags[@]}"
triple=$(rustc -vV | sed -n 's/^host: //p')
bin_dir="$fuzz_dir/target/$triple/release"
built=$(date +%s)

scratch=$(mktemp -d /tmp/ferrolb-fuzz.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
# One target per core at a time: each still gets its whole budget on a core of its own, and
# the wall time is that of the targets divided among the cores.
jobs=$(nproc)
fuzz_one() {
    local t=$1 corpus="$fuzz_dir/corpus/$1" artifacts="$fuzz_dir/artifacts/$1"
    mkdir -p "$corpus" "$artifacts" "$scratch/$t"
    local log="$scratch/$t.log" before found after status=ok execs artifact
    before=$(find "$corpus" -type f | wc -l)
    echo "fuzz: $t: budget ${budget}s, corpus $corpus ($before files)"
    # New inputs go to the first directory (scratch); the committed corpus is only read.
    if ! "$bin_dir/$t" -max_total_time="$budget" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$artifacts/" "$scratch/$t" "$corpus" > "$log" 2>&1; then
        status=FAILED
        artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
        {
            tail -n 40 "$log"
            echo "fuzz: $t: FAILED, artifact: ${artifact:-none written (see the log above)}"
            echo "fuzz: $t: reproduce with: $bin_dir/$t ${artifact:-ARTIFACT}"
        } > "$scratch/$t.failure"
    fi
    final_stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -n 1; }
    execs=$(final_stat number_of_executed_units)
    found=$(find "$scratch/$t" -type f | wc -l)
    after=$before
    if $update && [ "$status" = ok ] && [ "$found" -gt 0 ]; then
        "$bin_dir/$t" -set_cover_merge=1 "$corpus" "$scratch/$t" > "$scratch/$t.merge.log" 2>&1 ||
            { status=FAILED; cp "$scratch/$t.merge.log" "$scratch/$t.failure"; }
        after=$(find "$corpus" -type f | wc -l)
    fi
    echo "fuzz: $t: budget=${budget}s executions=${execs:-?} exec/s=$(final_stat average_exec_per_sec) new_units=$(final_stat new_units_added) found=$found corpus=$before->$after status=$status" > "$scratch/$t.line"
}
for t in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
    fuzz_one "$t" &
done
wait
failed=()
summary=()
for t in "${targets[@]}"; do
    if [ -f "$scratch/$t.failure" ]; then
        cat "$scratch/$t.failure"
        failed+=("$t")
    fi
    if [ -f "$scratch/$t.line" ]; then
        summary+=("$(cat "$scratch/$t.line")")
    else
        summary+=("fuzz: $t: no result (see above)")
        failed+=("$t")
    fi
done

finished=$(date +%s)
echo "fuzz: ---- summary (build $((built - started))s, total wall time $((finished - started))s) ----"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: FAILED: ${failed[*]}" >&2
    exit 1
fi
