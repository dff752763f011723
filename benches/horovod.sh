#!/usr/bin/env bash
# Benchmark of a real Horovod training on the local backend (the `horovod` template on the
# Horovod base that `scripts/dev-services.sh horovod` makes):
#   1. time from `hvdctl deploy --backend local --logs` to rank 0's "rank 0 of 2" line
#      (containers, sshd, launcher, Python + Horovod initialised) and to its "first step" line
#      (the first allreduce of gradients is done);
#   2. step time of the 2-rank job across two worker containers (hvdctl, horovodrun over ssh)
#      versus `horovodrun -np 2` inside one container of the same image (the floor: no
#      network between the ranks, no ssh).
# Both jobs run the same train.py with the same settings, one thread per rank.
# Usage: benches/horovod.sh [RUNS]   (default 3; prints markdown for docs/benchmarks.md)
#   SAMPLES=N  synthetic training samples per epoch (default 24000: epochs of seconds, so that
#              the step time is not lost in the timer's noise)
# Needs: scripts/dev-services.sh horovod; an hvdctl binary (HVDCTL, default the release build).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-3}
hv=${HVDCTL:-$root/target/release/hvdctl}
[ -x "$hv" ] || (cd "$root" && cargo build --release -q -p hvdctl)
base=${HVDCTL_TEST_HOROVOD_IMAGE:-hvdctl-test/horovod:0.28.1-cpu}
export DOCKER_HOST=${DOCKER_HOST:-unix:///var/run/docker.sock} NO_COLOR=1 CI=true
docker=/usr/bin/docker; [ -x $docker ] || docker=docker
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

samples=${SAMPLES:-24000} epochs=3 batch=64
settings=(--set mpi.launcher=horovodrun --set workers=2 --set slotsPerWorker=1
  --set parameters.epochs=$epochs --set env.SYNTHETIC_SAMPLES=$samples
  --set env.OMP_NUM_THREADS=1)

"$hv" init "$work/hvd" --template horovod --no-input -q
"$hv" -C "$work/hvd" build --tag bench --build-arg "BASE_IMAGE=$base" --progress plain >/dev/null 2>&1
image=hvd:bench

# Seconds from the start of COMMAND to the first stdout line containing each marker, then
# the epoch times rank 0 printed (epochs 2.. only: the first one warms up).
timed() {
  python3 - "$@" <<'EOF'
import re, subprocess, sys, time
start = time.monotonic()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, text=True)
seen, epochs = {}, []
for line in p.stdout:
    for marker in ("rank 0 of 2", "first step:"):
        if marker in line and marker not in seen:
            seen[marker] = time.monotonic() - start
    m = re.search(r"epoch (\d+)/\d+: .* time=([0-9.]+)s", line)
    if m and int(m.group(1)) > 1:
        epochs.append(float(m.group(2)))
if p.wait() != 0:
    sys.exit("%s exited %d" % (sys.argv[1:3], p.returncode))
print("%.2f %.2f %s" % (seen["rank 0 of 2"], seen["first step:"], " ".join(map(str, epochs))))
EOF
}

steps=$(( (samples / 2 + batch - 1) / batch ))
echo "| run | deploy → rank 0 up (s) | deploy → first step (s) | hvdctl local, 2 containers: step (ms) | horovodrun -np 2, one container: step (ms) | ratio |"
echo "| --- | --- | --- | --- | --- | --- |"
for i in $(seq 1 "$runs"); do
  read -r up first e1 e2 < <(timed "$hv" -C "$work/hvd" deploy --backend local --image $image \
    --no-push --logs -q --run-id "b$i" "${settings[@]}")
  "$hv" -C "$work/hvd" undeploy "b$i" -q >/dev/null
  read -r _ _ o1 o2 < <(timed $docker run --rm -e OMP_NUM_THREADS=1 -e PYTHONUNBUFFERED=1 \
    -e SYNTHETIC_SAMPLES=$samples -e EPOCHS=$epochs $image \
    horovodrun -np 2 -H localhost:2 python3 /app/train.py)
  python3 - "$i" "$up" "$first" "$e1" "$e2" "$o1" "$o2" "$steps" <<'EOF' | tee -a "$work/rows"
import sys
i, up, first, e1, e2, o1, o2, steps = sys.argv[1:]
two = (float(e1) + float(e2)) / 2 / int(steps) * 1000
one = (float(o1) + float(o2)) / 2 / int(steps) * 1000
print("| %s | %s | %s | %.1f | %.1f | %.2f× |" % (i, up, first, two, one, two / one))
EOF
done
python3 - "$work/rows" <<'EOF'
import statistics, sys
rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in open(sys.argv[1])]
col = lambda k: [float(r[k].rstrip("×")) for r in rows]
two, one = statistics.median(col(3)), statistics.median(col(4))
print("| median | %.2f | %.2f | %.1f | %.1f | %.2f× |"
      % (statistics.median(col(1)), statistics.median(col(2)), two, one, two / one))
EOF
echo
echo "step = mean epoch time of epochs 2–$epochs (rank 0's \`time=\`, training only) / $steps steps" \
  "($samples samples, batch $batch × 2 ranks); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
