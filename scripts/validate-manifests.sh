#!/usr/bin/env bash
# Cross-checks rendered manifests against the official Kubernetes 1.36 schema and the
# CRDs of the backends' kinds (MPIJob, Kubeflow Trainer) with an external strict validator.
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
files=()
# Every Kubernetes backend this hvdctl offers (`local` renders no manifests).
backends=$("$hvdctl" deploy --help | sed -n 's/.*\[possible values: \(.*\)\]/\1/p' | head -1 | tr -d ' ' | tr ',' '\n' | grep -vx local)
[ -n "$backends" ] || { echo "validate-manifests: no backend found in \`hvdctl deploy --help\`" >&2; exit 1; }
echo "validate-manifests: backends $(echo $backends)"
for t in horovod horovod-tensorflow horovod-elastic mpi-hello; do
  "$hvdctl" init "$work/$t" --template "$t" --no-input -q
  for b in $backends; do
    # Kubeflow Trainer runs no elastic Horovod (hvdctl refuses it).
    if [ "$t/$b" = horovod-elastic/trainjob ]; then continue; fi
    out="$work/$t-$b.yaml"
    "$hvdctl" -C "$work/$t" deploy --dry-run --backend "$b" --run-id r1234 \
      --set gpusPerWorker=1 --set 'volumes[0]={name: data, mountPath: /data, nfs: {server: nfs.example.com, path: /exports}}' \
      --set securityContext.runAsUser=1000 --set securityContext.fsGroup=1000 \
      --set imagePullPolicy=IfNotPresent --set shm=2Gi --set mpi.sshPort=2200 \
      --set 'volumes[1]={name: creds, mountPath: /creds, secret: {secretName: aws, items: [{key: k, path: k.txt, mode: 0400}], defaultMode: 0440, optional: true}}' \
      --set 'volumes[2]={name: cfg, mountPath: /cfg, configMap: {name: settings, defaultMode: 0644}}' \
      --set 'volumes[3]={name: scratch, mountPath: /scratch, emptyDir: {medium: Memory, sizeLimit: 1Gi}}' \
      --set 'storage[0]={name: ckpt, size: 10Gi, mountPath: /ckpt, storageClass: standard, accessModes: [ReadWriteMany]}' > "$out"
    # A non-root run without fsGroup (defaulted by hvdctl).
    "$hvdctl" -C "$work/$t" deploy --dry-run --backend "$b" --run-id r1234 \
      --set securityContext.runAsUser=1000 --set securityContext.runAsGroup=1000 > "$work/$t-$b-nonroot.yaml"
    "$hvdctl" -C "$work/$t" deploy --dry-run --backend "$b" --run-id r1234 > "$work/$t-$b-plain.yaml"
    # Queued runs: a Kueue LocalQueue, a Volcano queue. The validator knows no Volcano
    # PodGroup (native's): it is left out here; tests/it checks it against the Volcano CRD
    # (tests/fixtures/crds).
    "$hvdctl" -C "$work/$t" deploy --dry-run --backend "$b" --run-id r1234 \
      --set queue=team-a > "$work/$t-$b-kueue.yaml"
    "$hvdctl" -C "$work/$t" deploy --dry-run --backend "$b" --run-id r1234 \
      --set scheduling.volcano.queue=gpu --set scheduling.volcano.priorityClass=high |
      python3 -c 'import sys, yaml
docs = [d for d in yaml.safe_load_all(sys.stdin) if d and d.get("kind") != "PodGroup"]
yaml.safe_dump_all(docs, sys.stdout)' > "$work/$t-$b-volcano.yaml"
    files+=("$out" "$work/$t-$b-plain.yaml" "$work/$t-$b-nonroot.yaml" "$work/$t-$b-kueue.yaml" "$work/$t-$b-volcano.yaml")
  done
done
# One validator run for every file (it loads the 1.36 schema once); an error names its file
# (TEMPLATE-BACKEND[-VARIANT].yaml) and document.
echo "validate-manifests: ${#files[@]} files"
python3 "$validator" "${files[@]}" | sed "s|$work/||"
