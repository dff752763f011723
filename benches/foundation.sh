#!/usr/bin/env bash
# Benchmarks for the foundation (issue: CLI, rendering) and the cluster lifecycle:
#   1. start-up: `hvdctl --version` vs `kubectl version --client`
#   2. `deploy --dry-run` of a 1024-worker native job
#   3. deploy of a 256-worker native job to fake-cluster: wall time and HTTP requests,
#      vs `kubectl apply --server-side -f` of the same rendered manifests
# Needs: a release build (cargo build --release -p hvdctl -p fake-cluster), hyperfine, kubectl.
# Usage: benches/foundation.sh [OUT.md]   (prints markdown; figures go to docs/benchmarks.md)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
hv=$root/target/release/hvdctl
fc=$root/target/release/fake-cluster
[ -x "$hv" ] && [ -x "$fc" ] || (cd "$root" && cargo build --release -q -p hvdctl -p fake-cluster)
work=$(mktemp -d)
trap 'kill $fcpid 2>/dev/null || true; rm -rf "$work"' EXIT
export NO_COLOR=1 CI=true

echo "## start-up"
hyperfine -N --warmup 20 --runs 200 --export-markdown "$work/startup.md" \
  "$hv --version" "kubectl version --client" >/dev/null
cat "$work/startup.md"

echo
echo "## deploy --dry-run, native, 1024 workers"
"$hv" init "$work/app" --template mpi-hello --no-input -q
hyperfine -N --warmup 5 --runs 30 --export-markdown "$work/dry.md" \
  "$hv -C $work/app deploy --dry-run --backend native --set workers=1024 --run-id r1" >/dev/null
cat "$work/dry.md"
"$hv" -C "$work/app" deploy --dry-run --backend native --set workers=1024 --run-id r1 | wc -c | sed 's/^/output bytes: /'

echo
echo "## deploy of a 256-worker native job to fake-cluster vs kubectl apply --server-side"
"$fc" --listen 127.0.0.1:0 --kubeconfig "$work/kc" > "$work/fc.out" 2>&1 &
fcpid=$!
until [ -s "$work/fc.out" ]; do sleep 0.1; done
url=$(head -1 "$work/fc.out")
export KUBECONFIG=$work/kc
runs=5
for i in $(seq 1 $runs); do
  "$hv" -C "$work/app" deploy --dry-run --backend native --set workers=256 --run-id "k$i" > "$work/k$i.yaml"
done
kc="kubectl --cache-dir $work/kcache"
$kc get ns >/dev/null   # warm kubectl's discovery cache, as a user's would be
hyperfine -N --runs $runs --export-markdown "$work/deploy.md" \
  -P i 1 $runs \
  "$hv -C $work/app -q deploy --backend native --set workers=256 --run-id h{i}" \
  "$kc apply --server-side -f $work/k{i}.yaml" >/dev/null
cat "$work/deploy.md"
curl -s -X POST "$url/fake/stats/reset" >/dev/null
"$hv" -C "$work/app" -q deploy --backend native --set workers=256 --run-id hreq
echo "hvdctl requests: $(curl -s "$url/fake/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])')"
"$hv" -C "$work/app" deploy --dry-run --backend native --set workers=256 --run-id kreq > "$work/kreq.yaml"
curl -s -X POST "$url/fake/stats/reset" >/dev/null
$kc apply --server-side -f "$work/kreq.yaml" >/dev/null
echo "kubectl requests: $(curl -s "$url/fake/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])')"
