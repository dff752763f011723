#!/usr/bin/env bash
# Cross-checks rendered manifests against the official Kubernetes 1.36 schema and the
# MPIJob and Kubeflow Trainer CRDs with an external strict validator (kubeconform-like).
#   scripts/validate-manifests.sh [VALIDATOR]   (default: ../shared/tools/k8s-validate.py)
# Renders every template x backend with `hvdctl init --no-input` + `deploy --dry-run`.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
validator=${1:-$here/../shared/tools/k8s-validate.py}
if [ ! -f "$validator" ]; then
  echo "validate-manifests: no validator at $validator; skipping the schema cross-check" >&2
  exit 0
fi
hvdctl=${HVDCTL:-$here/target/debug/hvdctl}
[ -x "$hvdctl" ] || (cd "$here" && cargo build -q)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for t in horovod horovod-tensorflow horovod-elastic mpi-hello; do
  "$hvdctl" init "$work/$t" --template "$t" --no-input -q
  for b in mpijob native trainjob; do
    # Kubeflow Trainer runs no elastic Horovod (hvdctl refuses it).
    if [ "$t/$b" = horovod-elastic/trainjob ]; then continue; fi
    out="$work/$t-$b.yaml"
    "$hvdctl" -C "$work/$t" deploy --dry-run --backend "$b" --run-id r1234 \
      --set gpusPerWorker=1 --set 'volumes[0]={name: data, mountPath: /data, nfs: {server: nfs.example.com, path: /exports}}' \
      --set securityContext.runAsUser=1000 --set securityContext.fsGroup=1000 > "$out"
    "$hvdctl" -C "$work/$t" deploy --dry-run --backend "$b" --run-id r1234 > "$work/$t-$b-plain.yaml"
    for f in "$out" "$work/$t-$b-plain.yaml"; do
      if result=$(python3 "$validator" "$f" 2>&1); then
        echo "ok   $t/$b $(basename "$f"): $result"
      else
        echo "FAIL $t/$b $(basename "$f"): $result"
        status=1
      fi
    done
  done
done
exit $status
