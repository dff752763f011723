#!/usr/bin/env bash
# Benchmark: `hvdctl logs -f` vs `kubectl logs -f -l … --prefix` on the same fake cluster.
#
#   benches/logs.sh [PODS] [LINES] [RATE]    (default 32 pods × 100,000 lines, no faults)
#
# 1. "finished": one native-style run (launcher Job + PODS-1 worker pods, hvdctl's labels)
#    writes LINES lines per container as fast as the fake kubelet goes (1 µs apart). Once the
#    job has completed, each client prints every pod's log once to a file.
# 2. "live": the same run again, written at RATE lines/s per container (default 20,000; the
#    launcher 10% slower, so the job ends after the workers' last lines, as with mpirun); both
#    clients start together while every container is still writing and follow to the end.
# Wall time and peak RSS come from `/usr/bin/time -v`, correctness from counting lines.
# Release builds.
set -euo pipefail
cd "$(dirname "$0")/.."
PODS=${1:-32}
LINES=${2:-100000}
LIVE_RATE=${3:-20000}
APP=perf
TMP=$(mktemp -d)
trap 'kill $FC_PID 2>/dev/null || true; rm -rf "$TMP"' EXIT

cargo build --release -q -p fake-cluster --bin fake-cluster
[[ -n ${HVDCTL:-} ]] || cargo build --release -q --bin hvdctl
# HVDCTL=path runs another build of hvdctl (an older commit's, to compare) on the same scenario.
HVDCTL=${HVDCTL:-$PWD/target/release/hvdctl}

export KUBECONFIG=$TMP/kubeconfig
target/release/fake-cluster --listen 127.0.0.1:0 --kubeconfig "$KUBECONFIG" --mpi-operator >"$TMP/fc.out" 2>"$TMP/fc.err" &
FC_PID=$!
for _ in $(seq 100); do [ -s "$TMP/fc.out" ] && break; sleep 0.05; done
echo "fake-cluster at $(head -1 "$TMP/fc.out")"

labels() { # role
  printf '{"app.kubernetes.io/managed-by":"hvdctl","hvdctl.io/app":"%s","hvdctl.io/run":"%s","hvdctl.io/role":"%s"}' "$APP" "$RUN" "$1"
}
container() { # name rate
  printf '{"name":"%s","image":"hvd:bench","env":[{"name":"FAKE_KUBELET_LINES","value":"%s"},{"name":"FAKE_KUBELET_RATE","value":"%s"}]}' "$1" "$LINES" "$2"
}
create_run() { # run-id rate
RUN=$1
RATE=$2
JOB=$APP-$RUN
SEL="app.kubernetes.io/managed-by=hvdctl,hvdctl.io/run=$RUN"
{
  printf '{"apiVersion":"v1","kind":"List","items":['
  printf '{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"%s-launcher","labels":%s},"spec":{"backoffLimit":0,"template":{"metadata":{"labels":%s},"spec":{"restartPolicy":"Never","containers":[%s]}}}}' \
    "$JOB" "$(labels launcher)" "$(labels launcher)" "$(container launcher "$((RATE * 9 / 10))")"
  for i in $(seq 0 $((PODS - 2))); do
    printf ',{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s-worker-%d","labels":%s},"spec":{"restartPolicy":"Never","containers":[%s]}}' \
      "$JOB" "$i" "$(labels worker)" "$(container worker "$RATE")"
  done
  printf ']}'
} >"$TMP/run.json"
kubectl create --validate=false -f "$TMP/run.json" >/dev/null
}
EXPECTED=$((PODS * LINES))

measure() { # name cmd...
  local name=$1
  shift
  /usr/bin/time -v -o "$TMP/$name.time" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" || true
  local wall rss lines
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$TMP/$name.time")
  rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$TMP/$name.time")
  lines=$(wc -l <"$TMP/$name.out")
  user=$(awk -F': ' '/User time/ {print $2}' "$TMP/$name.time")
  sys=$(awk -F': ' '/System time/ {print $2}' "$TMP/$name.time")
  printf '%-8s wall %-8s user %-6s sys %-6s peak RSS %6d KB  lines %d of %d\n' "$name" "$wall" "$user" "$sys" "$rss" "$lines" "$EXPECTED"
}

echo "== finished: $PODS pods x $LINES lines, job completed before the clients start"
create_run done 0
kubectl wait --for=condition=complete "job/$JOB-launcher" --timeout=120s >/dev/null
kubectl wait --for=jsonpath='{.status.phase}'=Succeeded pod -l "hvdctl.io/run=$RUN" --timeout=120s >/dev/null
for _ in 1 2; do
  measure kubectl kubectl logs -f -l "$SEL" --prefix --max-log-requests=64 --tail=-1
  measure hvdctl "$HVDCTL" logs "$RUN" -f
done

echo "== live: $PODS pods x $LINES lines at $LIVE_RATE lines/s each, both clients following from the start"
create_run live "$LIVE_RATE"
kubectl wait --for=jsonpath='{.status.phase}'=Running pod -l "hvdctl.io/run=$RUN" --timeout=120s >/dev/null
measure kubectl kubectl logs -f -l "$SEL" --prefix --max-log-requests=64 --tail=-1 &
K=$!
measure hvdctl "$HVDCTL" logs "$RUN" -f &
H=$!
wait $K $H
if [ "${BENCH_VERBOSE:-}" ]; then tail -3 "$TMP/hvdctl.err" "$TMP/kubectl.err"; fi
