#!/usr/bin/env bash
# Runs hvdctl's fuzz targets (fuzz/, cargo-fuzz with libFuzzer): each for MINUTES; an input
# that takes more than 10 s, makes one allocation of 256 MB or more, or brings the process
# over 2 GB (AddressSanitizer's own shadow and quarantine count there) is a finding. Prints each target's runs and whether it
# found anything; a finding is left in fuzz/artifacts/TARGET/ (fix it, then keep the input in
# fuzz/regressions/TARGET/, which the regular tests replay).
#
#   scripts/fuzz.sh [-t MINUTES] [-j PARALLEL] [-B] [TARGET...]   (default: 10 minutes, 1, all)
#
# -B runs the targets as last built (fuzz/target/), without building them again first.
#
# cargo-fuzz needs nightly flags: RUSTC_BOOTSTRAP=1 lets the stable toolchain take them.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=10
parallel=1
build=yes
targets=()
while [ $# -gt 0 ]; do
    case "$1" in
        -t) minutes="$2"; shift 2 ;;
        -j) parallel="$2"; shift 2 ;;
        -B) build=no; shift ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
        -*) echo "fuzz.sh: unknown flag $1" >&2; exit 2 ;;
        *) targets+=("$1"); shift ;;
    esac
done
export RUSTC_BOOTSTRAP=1
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cd fuzz && cargo fuzz list)
fi
[ "$build" = yes ] && cargo fuzz build
bin="fuzz/target/$(rustc -vV | sed -n 's/^host: //p')/release"
mkdir -p fuzz/logs

run() {
    local t="$1"
    mkdir -p "fuzz/corpus/$t" "fuzz/regressions/$t" "fuzz/artifacts/$t"
    # The first directory takes what the fuzzer adds; the seeds and the findings are read.
    local rc=0
    "$bin/$t" "fuzz/corpus/$t" "fuzz/seeds/$t" "fuzz/regressions/$t" \
        -artifact_prefix="fuzz/artifacts/$t/" -max_total_time=$((minutes * 60)) -timeout=10 \
        -rss_limit_mb=2048 -malloc_limit_mb=256 -print_final_stats=1 >"fuzz/logs/$t.log" 2>&1 || rc=$?
    echo "$rc" >"fuzz/logs/$t.rc"
}

running=0
for t in "${targets[@]}"; do
    rm -f "fuzz/logs/$t.rc"
    run "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$parallel" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait
status=0
for t in "${targets[@]}"; do
    if [ "$(cat "fuzz/logs/$t.rc" 2>/dev/null)" = 0 ]; then outcome="no finding"; else outcome="FOUND: see fuzz/logs/$t.log"; status=1; fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "fuzz/logs/$t.log" | tail -1)
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "fuzz/logs/$t.log" | tail -1)
    printf '%-16s %s min  %12s runs  peak %4s MB  %s\n' "$t" "$minutes" "${runs:-?}" "${rss:-?}" "$outcome"
done
exit $status
