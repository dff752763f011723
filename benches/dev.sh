#!/usr/bin/env bash
# Benchmark of the edit loop: time from saving a one-line change of the training script to
# the first log line it prints, `hvdctl dev` (the change copied into the warm run, the launch
# command run again by exec) versus the rebuild path a user has without it
# (`hvdctl build [--push] && hvdctl deploy --logs`), in the same run on the same machine:
#   * the local backend (the rebuild path needs no push there);
#   * native and mpijob on the fake cluster's Docker kubelet (the rebuild path pushes to the
#     test registry; the pods then find the image on this one Docker host);
#   * the mpi-hello app and the horovod template (horovodrun, 2 workers, tiny epochs).
# The change inserts `print("bench-edit-N", flush=True)` at the top of the script; the figure
# is the time from the write to the first stdout line holding `bench-edit-N`.
# Usage: benches/dev.sh [RUNS]   (default 3; prints markdown for docs/benchmarks.md)
#   APPS="mpi-hello horovod"  BACKENDS="local native mpijob"  to measure fewer cells
# Needs: scripts/dev-services.sh start (+ horovod for the horovod app); release builds of
# hvdctl and fake-cluster (built when missing).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-3}
hv=${HVDCTL:-$root/target/release/hvdctl}
fc=${FAKE_CLUSTER:-$root/target/release/fake-cluster}
[ -x "$hv" ] && [ -x "$fc" ] || (cd "$root" && cargo build --release -q -p hvdctl -p fake-cluster)
eval "$("$root/scripts/dev-services.sh" env)"
export NO_COLOR=1 CI=true
work=$(mktemp -d); echo "work: $work" >&2
fc_pid=
trap '[ -n "$fc_pid" ] && kill $fc_pid 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

# Registry credentials for `build --push`, in a config of this run only.
export DOCKER_CONFIG=$work/docker
mkdir -p "$DOCKER_CONFIG"
auth=$(printf '%s:%s' "$HVDCTL_TEST_REGISTRY_USER" "$HVDCTL_TEST_REGISTRY_PASSWORD" | base64 -w0)
printf '{"auths":{"%s":{"auth":"%s"}}}\n' "$HVDCTL_TEST_REGISTRY" "$auth" >"$DOCKER_CONFIG/config.json"

# One fake cluster with the Docker kubelet and the MPI Operator, for native and mpijob.
export KUBECONFIG=$work/kubeconfig
"$fc" --listen 127.0.0.1:0 --kubeconfig "$KUBECONFIG" --mpi-operator --kubelet docker \
  --pause-image "$HVDCTL_TEST_BUSYBOX_IMAGE" >"$work/fc.out" 2>"$work/fc.err" &
fc_pid=$!
for _ in $(seq 100); do [ -s "$work/fc.out" ] && break; sleep 0.05; done

# measure MODE APP_DIR SCRIPT RUNS CMD...: MODE dev starts CMD once and edits RUNS times;
# MODE rebuild edits, then runs CMD (a shell line) per edit. Prints the seconds, one a line.
measure() {
  python3 - "$@" <<'EOF'
import os, queue, signal, subprocess, sys, threading, time
mode, app, script, runs, cmd = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:]
path = os.path.join(app, script)
original = open(path).read()

def edit(i):
    with open(path, "w") as f:
        f.write('print("bench-edit-%d", flush=True)\n' % i + original)

def start(argv):
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=open(os.path.join(app, "..", "stderr-%s.log" % mode), "a"), text=True, start_new_session=True)
    q = queue.Queue()
    def pump():
        for line in p.stdout:
            q.put((time.monotonic(), line))
        q.put((time.monotonic(), None))
    threading.Thread(target=pump, daemon=True).start()
    return p, q

def wait_for(q, marker, limit):
    deadline = time.monotonic() + limit
    while True:
        at, line = q.get(timeout=max(0.1, deadline - time.monotonic()))
        if line is None:
            sys.exit("the command ended before printing %r" % marker)
        if marker in line:
            return at

def stop(p):
    os.killpg(p.pid, signal.SIGINT)
    try:
        p.wait(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)

try:
    if mode == "dev":
        p, q = start(cmd)
        wait_for(q, "#1 ", 300)    # attempt 1 is printing: the run is warm
        time.sleep(2)
        for i in range(runs):
            edit(i)
            t0 = time.monotonic()
            print("%.2f" % (wait_for(q, "bench-edit-%d" % i, 300) - t0), flush=True)
            time.sleep(2)
        stop(p)
    else:
        for i in range(runs):
            edit(i)
            t0 = time.monotonic()
            p, q = start(["sh", "-c", cmd[0] % {"i": i}])
            print("%.2f" % (wait_for(q, "bench-edit-%d" % i, 900) - t0), flush=True)
            stop(p)
            subprocess.run(cmd[1] % {"i": i}, shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
finally:
    open(path, "w").write(original)
EOF
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min), $(nproc) cores"
echo
echo "| app | backend | \`hvdctl dev\`: save → new line (s), median [all] | rebuild path: save → new line (s), median [all] | rebuild path |"
echo "| --- | --- | --- | --- | --- |"
for app in ${APPS:-mpi-hello horovod}; do
  case $app in
    mpi-hello) base=$HVDCTL_TEST_DEBIAN_IMAGE script=hello.py
      settings=(--set workers=2) ;;
    horovod) base=$HVDCTL_TEST_HOROVOD_IMAGE script=train.py
      settings=(--set workers=2 --set mpi.launcher=horovodrun --set parameters.epochs=1
        --set env.SYNTHETIC_SAMPLES=2000 --set env.OMP_NUM_THREADS=1) ;;
  esac
  dir=$work/$app/app
  mkdir -p "$work/$app"
  "$hv" init "$dir" --template "$app" --no-input -q
  repo=$HVDCTL_TEST_REGISTRY/bench/$app
  settings+=(--set "image=$repo" --set "build.args.BASE_IMAGE=$base")
  "$hv" -C "$dir" build "${settings[@]}" --progress plain >/dev/null 2>&1
  image=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["image"])' "$dir/.hvdctl/image.json")
  for backend in ${BACKENDS:-local native mpijob}; do
    dev=$(measure dev "$dir" "$script" "$runs" "$hv" -C "$dir" dev --backend "$backend" \
      --image "$image" "${settings[@]}" | tr '\n' ' ')
    s="${settings[*]}"
    case $backend in
      local) build="build $s --progress plain >/dev/null 2>&1" ; what="build && deploy --logs" ;;
      *) build="build --push $s --progress plain >/dev/null 2>&1" ; what="build --push && deploy --logs" ;;
    esac
    rebuild=$(measure rebuild "$dir" "$script" "$runs" \
      "$hv -C $dir $build && $hv -C $dir deploy --backend $backend --run-id bn%(i)d $s --logs" \
      "$hv -C $dir undeploy bn%(i)d" | tr '\n' ' ')
    echo "| $app | $backend | $(echo $dev | tr ' ' '\n' | median) [$dev] | $(echo $rebuild | tr ' ' '\n' | median) [$rebuild] | \`$what\` |"
  done
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
