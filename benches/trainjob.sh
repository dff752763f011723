#!/usr/bin/env bash
# deploy → first rank line: the same mpi-hello app (2 workers × 2 slots) on the `trainjob`
# backend (Kubeflow Trainer v2.3 as fake-cluster --trainer plays it: TrainJob → JobSet →
# Jobs → pods, the launcher made once every node is Ready) and on `mpijob` (the fake MPI
# Operator, launcherCreationPolicy WaitForWorkersReady), both on one fake cluster whose Docker
# kubelet runs the pods as real containers on the same dockerd. Runs alternate between the
# backends. Seconds from the start of `hvdctl deploy --logs` to its first rank-tagged line
# (`launcher rN | …`) and to its exit (job done).
# Usage: benches/trainjob.sh [RUNS] (default 3)   IMAGE=an mpi-hello image (default: built here)
# Needs: scripts/dev-services.sh (dockerd, busybox and debian test images); prints markdown.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-3}
hv=${HVDCTL:-$root/target/debug/hvdctl}
fc=${FAKE_CLUSTER:-$root/target/debug/fake-cluster}
[ -x "$hv" ] && [ -x "$fc" ] || (cd "$root" && cargo build -q --workspace)
export NO_COLOR=1 CI=true
work=$(mktemp -d)
"$fc" --kubeconfig "$work/kc" --kubelet docker --mpi-operator --trainer \
  --pause-image "${HVDCTL_TEST_BUSYBOX_IMAGE:-hvdctl-test/busybox:latest}" > "$work/url" 2> "$work/fc.log" &
fcpid=$!
trap 'kill $fcpid 2>/dev/null; wait $fcpid 2>/dev/null; rm -rf "$work"' EXIT
until [ -s "$work/url" ]; do
  kill -0 $fcpid 2>/dev/null || { cat "$work/fc.log" >&2; exit 1; }
  sleep 0.1
done
export KUBECONFIG=$work/kc
"$hv" init "$work/hello" --template mpi-hello --no-input -q
image=${IMAGE:-}
if [ -z "$image" ]; then
  "$hv" -C "$work/hello" build --tag bench \
    --build-arg "BASE_IMAGE=${HVDCTL_TEST_DEBIAN_IMAGE:-hvdctl-test/debian:bookworm}" --progress plain >/dev/null 2>&1
  image=hello:bench
fi

timed() {
  python3 - "$@" <<'PY'
import re, subprocess, sys, time
start = time.monotonic()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
first = None
for line in p.stdout:
    if first is None and re.match(r"launcher r\d+ \| ", line):
        first = time.monotonic() - start
end = time.monotonic() - start
if p.wait() != 0 or first is None:
    sys.exit("%s exited %d" % (sys.argv[1:4], p.returncode))
print("%.2f %.2f" % (first, end))
PY
}

declare -A first done_
for i in $(seq 1 "$runs"); do
  for b in trainjob mpijob; do
    read -r f d < <(timed "$hv" -C "$work/hello" deploy --backend $b --run-id "${b:0:1}$i" \
      --image "$image" --no-push --logs --set workers=2 --set slotsPerWorker=2)
    first[$b]+="$f, "; done_[$b]+="$d, "
    "$hv" -C "$work/hello" undeploy "${b:0:1}$i" -q >/dev/null 2>&1
  done
done
echo "| backend | deploy → first rank line (s) | deploy → job done (s) |"
echo "| --- | --- | --- |"
for b in trainjob mpijob; do
  echo "| $b | ${first[$b]%, } | ${done_[$b]%, } |"
done
