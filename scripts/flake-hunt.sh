#!/usr/bin/env bash
# Runs the workspace's test binaries again and again beside CPU burners, and names every test
# that failed even once, with its count. A test that fails 1 run in 15 passes almost every
# single run of scripts/test.sh and still breaks a landing on a fresh machine: only repetition
# finds it.
#
#   scripts/flake-hunt.sh [-n RUNS] [-l BURNERS] [-t MINUTES] [--it FILTER]... [--only NAME]...
#
#   -n RUNS      runs of each test binary (default 20)
#   -l BURNERS   CPU burners beside the runs (default 2)
#   -t MINUTES   start no new run after this long (default 60); what ran is reported
#   --it FILTER  also run the `it` binary (the integration tests, many minutes a run) with this
#                test-name filter, e.g. --it queues:: --it logs::lossless (repeatable); without
#                it, `it` is left out
#   --only NAME  run only the binaries whose label contains NAME (repeatable), e.g. --only queues
#
# The tests are built once (cargo test --no-run); each binary then runs directly with CI=true,
# so a run costs only the tests' own time. The services the tests need are started first
# (scripts/dev-services.sh, idempotent). Exit 0 when no test failed, 1 when one did (each
# failing test with its count and its first panic line), 2 when the tests do not build.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=20 burners=2 minutes=60
its=() only=()
while (($#)); do
    case $1 in
    -n) runs=$2; shift 2 ;;
    -l) burners=$2; shift 2 ;;
    -t) minutes=$2; shift 2 ;;
    --it) its+=("$2"); shift 2 ;;
    --only) only+=("$2"); shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "flake-hunt: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
for v in "$runs" "$burners" "$minutes"; do
    [[ $v =~ ^[0-9]+$ ]] || { echo "flake-hunt: $v: expected a whole number" >&2; exit 2; }
done

work=$(mktemp -d)
pids=()
cleanup() {
    [[ ${#pids[@]} == 0 ]] || kill "${pids[@]}" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

scripts/dev-services.sh >&2

# The test executables, each labelled package:kind:target (as cargo names them).
if ! cargo test --workspace --tests --no-run --message-format=json >"$work/build.json" 2>"$work/build.err"; then
    tail -c 3000 "$work/build.err" >&2
    echo "flake-hunt: the tests do not build" >&2
    exit 2
fi
declare -A exe_of=()
while IFS=$'\t' read -r label exe; do
    exe_of[$label]=$exe
done < <(python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        t = m["target"]
        # path+file:///…/fake-cluster#0.1.0, or …/dir#name@0.1.0 when name and directory differ
        url, _, frag = m["package_id"].partition("#")
        pkg = frag.split("@", 1)[0] if "@" in frag else url.rstrip("/").rsplit("/", 1)[-1]
        print(pkg + ":" + t["kind"][0] + ":" + t["name"] + "\t" + m["executable"])
' <"$work/build.json")

# The plan: (label, executable, filter) per run.
plan=()
while IFS= read -r label; do
    if ((${#only[@]})); then
        keep=0
        for o in "${only[@]}"; do [[ $label == *"$o"* ]] && keep=1; done
        ((keep)) || continue
    fi
    if [[ $label == *:test:it ]]; then
        for f in "${its[@]}"; do plan+=("it $f"$'\t'"${exe_of[$label]}"$'\t'"$f"); done
    else
        plan+=("$label"$'\t'"${exe_of[$label]}"$'\t')
    fi
done < <(printf '%s\n' "${!exe_of[@]}" | sort)
((${#plan[@]})) || { echo "flake-hunt: nothing to run" >&2; exit 2; }

for ((i = 0; i < burners; i++)); do
    (while :; do :; done) &
    pids+=($!)
done

declare -A ran=() failed=() why=()
start=$SECONDS deadline=$((SECONDS + minutes * 60))
for ((r = 1; r <= runs; r++)); do
    for entry in "${plan[@]}"; do
        ((SECONDS < deadline)) || break 2
        IFS=$'\t' read -r label exe filter <<<"$entry"
        out="$work/out"
        rc=0
        # A run that hangs is a failure too; the bound only keeps the hunt going.
        CI=true RUST_BACKTRACE=0 timeout --kill-after=30 $((minutes * 60)) \
            "$exe" ${filter:+"$filter"} >"$out" 2>&1 || rc=$?
        ran[$label]=$((${ran[$label]:-0} + 1))
        names=$(sed -nE 's/^test (.*) \.\.\. FAILED$/\1/p' "$out")
        if [[ -z $names && $rc != 0 ]]; then
            names="(the whole binary, exit $rc)"
        fi
        while IFS= read -r n; do
            [[ -n $n ]] || continue
            key="$label"$'\t'"$n"
            failed[$key]=$((${failed[$key]:-0} + 1))
            if [[ -z ${why[$key]:-} ]]; then
                # The first panic message of that test, else the output's last line.
                w=$(awk -v t="---- $n stdout ----" '$0 == t {f = 1; next} f && /panicked at/ {getline m; print $0 " " m; exit}' "$out")
                why[$key]=${w:-$(tail -n 1 "$out")}
            fi
        done <<<"$names"
        printf 'flake-hunt: run %d/%d  %-40s %s\n' "$r" "$runs" "$label" \
            "$([[ $rc == 0 ]] && echo ok || echo "FAILED (exit $rc)")" >&2
    done
done

total=0
for label in "${!ran[@]}"; do total=$((total + ran[$label])); done
echo "flake-hunt: $total runs of ${#ran[@]} binaries/filters in $((SECONDS - start)) s, $burners burner(s)"
while IFS= read -r label; do
    printf '  %3d runs  %s\n' "${ran[$label]}" "$label"
done < <(printf '%s\n' "${!ran[@]}" | sort)
if ((${#failed[@]} == 0)); then
    echo "flake-hunt: no test failed"
    exit 0
fi
echo "flake-hunt: FAILED at least once:"
for key in "${!failed[@]}"; do
    IFS=$'\t' read -r label n <<<"$key"
    printf '  %d/%d  %s  [%s]  %.200s\n' "${failed[$key]}" "${ran[$label]}" "$n" "$label" "${why[$key]}"
done | sort -t/ -k1,1nr
exit 1
