#!/usr/bin/env bash
# Benchmark at the size users train at: one native run of W workers (1 slot each, plus the
# launcher: W+1 pods) on `fake-cluster --kubelet synthetic`, every container printing LINES
# lines, hvdctl against kubectl on the same cluster in the same run, verb by verb:
#
#   deploy    hvdctl deploy --wait (every pod Running)  |  kubectl apply -f (the same objects,
#             rendered by `hvdctl deploy --dry-run`) + kubectl wait --for=…Running
#   status    hvdctl status                             |  kubectl get pods -l
#   logs -f   hvdctl logs -f, to the end                |  kubectl logs -f -l … --prefix
#   undeploy  hvdctl undeploy (waits until gone)        |  kubectl delete --cascade=foreground
#                                                       |    --wait (the Job's pod gone too)
#
# Each verb: wall time and peak RSS (`/usr/bin/time -v`), the API requests the fake server
# counted (its /fake/stats), and for logs every line counted.
#
#   benches/scale.sh [WORKERS...]     (default: 256 1024)
#   LINES=10000 RATE=125 benches/scale.sh 256
#
# RATE is each container's lines per second: the containers must outlive the deploy and its
# wait (LINES/RATE seconds; 80 s by default), so both clients follow live streams.
# Release builds; kubectl on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
LINES=${LINES:-10000}
RATE=${RATE:-125}
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(256 1024)
TMP=$(mktemp -d)
# DETAIL=1 splits the requests by resource too. KEEP=1 keeps every command's output (and the fake server's) in the temp dir, said at the end.
trap 'kill $FC_PID 2>/dev/null || true; if [ -n "${KEEP:-}" ]; then echo "outputs kept in $TMP"; else rm -rf "$TMP"; fi' EXIT
export NO_COLOR=1 CI=true

cargo build --release -q -p fake-cluster --bin fake-cluster
[[ -n ${HVDCTL:-} ]] || cargo build --release -q --bin hvdctl
HVDCTL=${HVDCTL:-$PWD/target/release/hvdctl}

export KUBECONFIG=$TMP/kubeconfig
# 1 CPU per worker by default: enough nodes for the largest run, twice over.
max=0
for w in "${SIZES[@]}"; do ((w > max)) && max=$w; done
target/release/fake-cluster --listen 127.0.0.1:0 --kubeconfig "$KUBECONFIG" \
  --nodes $((max / 16 + 2)) --node-cpu 32 --node-memory 256Gi >"$TMP/fc.out" 2>"$TMP/fc.err" &
FC_PID=$!
for _ in $(seq 200); do [ -s "$TMP/fc.out" ] && break; sleep 0.05; done
URL=$(head -1 "$TMP/fc.out")
KC="kubectl --cache-dir $TMP/kcache"
$KC get ns >/dev/null # kubectl's discovery cache warm, as a user's would be

"$HVDCTL" init "$TMP/app" --template mpi-hello --no-input -q
APP_NAME=$(awk '/^name:/ {print $2}' "$TMP/app/hvdctl.yaml")
HV=("$HVDCTL" -C "$TMP/app")

requests() { # what the fake server counted since the last reset, e.g. "12 (list 3, watch 2, …)"
  curl -s "$URL/fake/stats" | python3 -c '
import json, sys
s = json.load(sys.stdin)
detail = sys.argv[1] == "1"
verbs = {k: v for k, v in s["by"].items() if detail or " " not in k}
print(s["total"], "(" + ", ".join(f"{k} {v}" for k, v in sorted(verbs.items())) + ")")' "${DETAIL:-0}"
}

# measure NAME CMD...: runs CMD under time -v, with the server's counters reset first.
measure() {
  local name=$1
  shift
  curl -s -X POST "$URL/fake/stats/reset" >/dev/null
  /usr/bin/time -v -o "$TMP/$name.time" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" || {
    echo "$name failed: $*" >&2
    tail -5 "$TMP/$name.err" >&2
  }
  local wall rss
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$TMP/$name.time")
  rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$TMP/$name.time")
  printf '%s|%s|%s' "$wall" "$((rss / 1024)) MB" "$(requests)"
}

# The kubectl side waits as a user would: every pod of the run Running.
kubectl_deploy() { # run file pods
  $KC apply -f "$2" >/dev/null
  # The launcher's pod is made by its Job: wait until the run has all its pods, then Running.
  until [ "$($KC get pods -l "hvdctl.io/run=$1" -o name | wc -l)" -ge "$3" ]; do sleep 0.2; done
  $KC wait --for=jsonpath='{.status.phase}'=Running pod -l "hvdctl.io/run=$1" --timeout=600s >/dev/null
}
export -f kubectl_deploy
export KC

row() { # verb client "wall|rss|requests" [extra]
  IFS='|' read -r wall rss req <<<"$3"
  printf '| %s | %s | %s | %s | %s | %s |\n' "$1" "$2" "$wall" "$rss" "$req" "${4:-}"
}

for W in "${SIZES[@]}"; do
  PODS=$((W + 1))
  EXPECTED=$((PODS * LINES))
  SET=(--backend native --set "workers=$W" --set "env.FAKE_KUBELET_LINES=$LINES" --set "env.FAKE_KUBELET_RATE=$RATE")
  echo
  echo "### $W workers ($PODS pods), $LINES lines per container at $RATE lines/s"
  echo
  echo '| verb | client | wall | peak RSS | API requests | |'
  echo '|---|---|---|---|---|---|'
  HR=h$W
  KR=k$W
  "${HV[@]}" deploy --dry-run "${SET[@]}" --run-id "$KR" >"$TMP/$KR.yaml"

  # hvdctl: deploy and wait; status; follow every log to the end; undeploy.
  row deploy hvdctl "$(measure hv-deploy "${HV[@]}" -q deploy --skip-checks --no-push --wait "${SET[@]}" --run-id "$HR")"
  row status hvdctl "$(measure hv-status "${HV[@]}" status "$HR")"
  r=$(measure hv-logs "${HV[@]}" logs -f "$HR")
  row "logs -f" hvdctl "$r" "$(wc -l <"$TMP/hv-logs.out") of $EXPECTED lines"
  row undeploy hvdctl "$(measure hv-undeploy "${HV[@]}" -q undeploy "$HR")"

  # kubectl: the same objects, the same steps (ONLY=hvdctl skips them).
  [ "${ONLY:-}" != hvdctl ] || continue
  row deploy kubectl "$(measure k-deploy bash -c 'kubectl_deploy "$@"' _ "$KR" "$TMP/$KR.yaml" "$PODS")"
  row status kubectl "$(measure k-status $KC get pods -l "hvdctl.io/run=$KR")"
  r=$(measure k-logs $KC logs -f -l "hvdctl.io/run=$KR" --prefix --tail=-1 --max-log-requests $((PODS + 10)))
  row "logs -f" kubectl "$r" "$(wc -l <"$TMP/k-logs.out") of $EXPECTED lines"
  row undeploy kubectl "$(measure k-undeploy $KC delete -f "$TMP/$KR.yaml" --cascade=foreground --wait)"
done
