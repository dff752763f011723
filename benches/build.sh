#!/usr/bin/env bash
# Benchmark: `hvdctl build` vs `DOCKER_BUILDKIT=0 docker build` (the classic builder, the one
# hvdctl drives through POST /build) on the same daemon, in one run.
#
#   benches/build.sh            (REPS=5 by default; REPS=3 benches/build.sh for a quicker run)
#   CONTEXTS="b h" REPS=3 benches/build.sh     (only some contexts: a b c h; default a b c)
#
# Needs: root, the dockerd of scripts/dev-services.sh (started here if it does not answer) and
# its local base image hvdctl-test/busybox:latest. Builds target/release/hvdctl if it is
# missing or older than the sources (never `cargo clean`).
#
# Two contexts, made once in a temp dir under $TMPDIR (default /tmp, the disk dockerd uses):
#   A  ~2 GiB on disk, of which ~20 MiB is sent: `data/` (7 x 256 MiB allocated files plus
#      20,000 small files in 100 dirs) is excluded as a directory, 20,000 small `*.o` files
#      under `obj/` are excluded one by one by `**/*.o`, `src/` (~20 MiB, 2,000 files) is kept
#      except `*.log`; `!` exceptions bring back `data/manifest.json`, one dir of small files
#      and one log (so both tools must walk into excluded directories).
#   B  1 GiB fully sent: 4 x 256 MiB of /dev/urandom (incompressible). For BuildKit the same
#      files with `RUN --mount=type=bind,target=/ctx true` (see below).
#   C  baseline: only the app files (the daemon's fixed cost of running the two steps).
#   H  the horovod template (`hvdctl init --template horovod` on the horovod base of
#      `scripts/dev-services.sh horovod`), rebuilt after an edit of train.py before each run
#      (outside the timing), without --no-cache: the rebuild an ML user does all day.
# Tools: `hvdctl` (--builder legacy: the classic builder, tar upload), `hvdctl-bk` (--builder
# buildkit: the context through the session's file sync; the daemon keeps its copy of the
# context between runs, so after the first rep only changed files cross), `hvdctl-bk-cold`
# (the same after touching every file of the context outside the timing: every file crosses
# again, the first build of a context), `docker` (DOCKER_BUILDKIT=0 docker build) and, for B,
# `curl`.
# Each has an app (`hvdctl.yaml`) and the same Dockerfile for both tools:
#     FROM hvdctl-test/busybox:latest
#     RUN true
# It does not COPY the context: the daemon still receives the whole context and untars it
# before the first step (that transfer is what is compared), without also writing a 1 GiB
# layer per run, which would be the same work for both tools and only dilute the ratio.
# hvdctl labels its images (`hvdctl.io/app`, one more LABEL step); docker gets the same
# `--label`, so the daemon does the same steps for both. `--no-cache` for both.
#
# Per context: REPS repetitions, each running both tools back to back, alternating which goes
# first; wall time, CPU and peak RSS of the client process from /usr/bin/time, and the
# time until the daemon starts Step 1 (context sent and unpacked). For B also a floor: curl
# uploading a tar of B made beforehand (a client doing no work at all). The page cache is
# warm (the files were just written; nothing is dropped on a shared machine). Prints each run,
# then a markdown table of medians. Removes only its own images and its temp dir.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
REPS=${REPS:-5}
# HVDCTL=path measures another build of hvdctl (an older commit's, to compare); it is used as is.
GIVEN=${HVDCTL:-}
HVDCTL=${HVDCTL:-$ROOT/target/release/hvdctl}
# Debian's docker.io client (the daemon's own version) rather than another one on PATH.
if [[ -x /usr/bin/docker ]]; then DOCKER=/usr/bin/docker; else DOCKER=$(command -v docker); fi
export NO_COLOR=1
unset DOCKER_BUILDKIT

[[ $(id -u) == 0 ]] || { echo "build.sh: run as root" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/hvdctl-bench-build.XXXXXX")
IMAGES=()
cleanup() {
  local img
  for img in "${IMAGES[@]}"; do "$DOCKER" rmi -f "$img" >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

# --- prerequisites -------------------------------------------------------------------------
if [[ -z $GIVEN ]] && { [[ ! -x $HVDCTL ]] || [[ -n $(find src Cargo.toml Cargo.lock -newer "$HVDCTL" -print -quit) ]]; }; then
  echo "building $HVDCTL" >&2
  cargo build --release -q -p hvdctl </dev/null
fi
if ! "$DOCKER" info >/dev/null 2>&1 || ! "$DOCKER" image inspect hvdctl-test/busybox:latest >/dev/null 2>&1; then
  bash scripts/dev-services.sh </dev/null >&2
fi
export DOCKER_HOST=${DOCKER_HOST:-unix:///var/run/docker.sock}

echo "# build benchmark, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "machine: $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB RAM, $(uname -r)"
echo "daemon: $("$DOCKER" version -f '{{.Server.Version}}'), storage driver $("$DOCKER" info -f '{{.Driver}}'), root $("$DOCKER" info -f '{{.DockerRootDir}}')"
echo "docker client: $DOCKER $("$DOCKER" version -f '{{.Client.Version}}')"
echo "hvdctl: $HVDCTL ($(git log -1 --format=%h 2>/dev/null || echo '?')$(git diff --quiet -- src/image src/commands/build.rs 2>/dev/null || echo ', src/image modified'))"
echo "temp dir: $WORK on $(df --output=source "$WORK" | tail -1), docker root on $(df --output=source "$("$DOCKER" info -f '{{.DockerRootDir}}')" | tail -1)"
echo "reps: $REPS per tool and context"
echo "load before: $(uptime)"

# --- contexts ------------------------------------------------------------------------------
app() { # dir name
  printf 'name: %s\nimage: hvdctl-%s\ncommand: [/bin/true]\n' "$2" "$2" >"$1/hvdctl.yaml"
  printf 'FROM hvdctl-test/busybox:latest\nRUN true\n' >"$1/Dockerfile"
}
small_files() { # dir count size suffix: COUNT files of SIZE bytes of random data
  mkdir -p "$1"
  head -c $(($2 * $3)) /dev/urandom | split -b "$3" -a 4 -d --additional-suffix="$4" - "$1/f"
}

CONTEXTS=${CONTEXTS:-a b c}
want() { [[ " $CONTEXTS " == *" $1 "* ]]; }
t0=$(date +%s.%N)
A=$WORK/a
if want a; then
mkdir -p "$A/data/large"
for i in 0 1 2 3 4 5 6; do fallocate -l 256M "$A/data/large/part-$i.bin"; done
for d in $(seq -w 0 99); do small_files "$A/data/small/d$d" 200 8192 .npy; done
echo '{"shards": 7}' >"$A/data/manifest.json"
for d in $(seq -w 0 99); do small_files "$A/obj/d$d" 200 4096 .o; done
for d in $(seq -w 0 39); do small_files "$A/src/m$d" 50 10240 .py; done
small_files "$A/src/logs" 20 1024 .log
cat >"$A/.dockerignore" <<'EOF'
# datasets and build products stay out of the image
data
**/*.o
src/**/*.log
**/__pycache__
# but these go in
!data/manifest.json
!data/small/d42
!src/logs/f0007.log
EOF
app "$A" bench-a
fi

B=$WORK/b
BK=$WORK/bk
if want b; then
  mkdir -p "$B/data"
  for i in 0 1 2 3; do head -c 256M /dev/urandom >"$B/data/part-$i.bin"; done
  app "$B" bench-b
  # The same context as a tar file made beforehand, for the floor (curl uploading it).
  tar --format=gnu --owner=0 --group=0 --numeric-owner -cf "$B.tar" -C "$B" .
  # BuildKit fetches the context only for a step that uses it (`RUN true` would fetch
  # nothing): for it, the same files (hard links) with a step that bind-mounts the whole
  # context, which is synced before the step runs and written into no layer.
  cp -al "$B" "$BK"
  rm "$BK/Dockerfile"
  printf 'FROM hvdctl-test/busybox:latest\nRUN --mount=type=bind,target=/ctx true\n' >"$BK/Dockerfile"
fi
# C: just the app, for the fixed cost of the daemon running the steps.
C=$WORK/c
mkdir -p "$C"
app "$C" bench-c
H=$WORK/h
HBASE=${HVDCTL_TEST_HOROVOD_IMAGE:-hvdctl-test/horovod:0.28.1-cpu}
if want h; then
  "$HVDCTL" init "$H" --template horovod --no-input -q
fi
sync
printf 'contexts (%s) made in %.1f s\n' "$CONTEXTS" "$(echo "$(date +%s.%N) - $t0" | bc)"

# --- runs ----------------------------------------------------------------------------------
# run TOOL CTX NAME REP: one timed build; appends "wall_s rss_kib ctx_s" to $WORK/NAME.TOOL,
# where ctx_s is the time from the start until the daemon printed "Step 1/" (the context is
# then sent and unpacked); the rest is the daemon running the steps.
run() {
  local tool=$1 dir=$2 name=$3 rep=$4 tag img out=$WORK/$3.$1.$4 start
  tag="$tool-$rep"
  img="hvdctl-$name:$tag"
  IMAGES+=("$img")
  local cmd
  local nocache=(--no-cache) extra=()
  if [[ $name == bench-h ]]; then
    # A rebuild after a script edit: the cache is the point; the edit is not timed.
    nocache=()
    extra=(--build-arg "BASE_IMAGE=$HBASE")
    echo "# edit $tool $rep $(date +%s%N)" >>"$dir/train.py"
    img="$(sed -n 's/^image: *//p' "$dir/hvdctl.yaml" | tr -d "\"'"):$tag"
    IMAGES+=("$img")
  fi
  if [[ $name == bench-b && $tool == hvdctl-bk* ]]; then dir=$BK; fi
  if [[ $tool == hvdctl-bk-cold ]]; then
    find "$dir" -path "$dir/.hvdctl" -prune -o -type f -exec touch {} +
  fi
  case $tool in
    hvdctl) cmd=("$HVDCTL" -C "$dir" build --builder legacy --progress plain "${nocache[@]}" "${extra[@]}" --tag "$tag") ;;
    hvdctl-bk | hvdctl-bk-cold) cmd=("$HVDCTL" -C "$dir" build --builder buildkit --progress plain "${nocache[@]}" "${extra[@]}" --tag "$tag") ;;
    docker) cmd=("$DOCKER" build "${nocache[@]}" "${extra[@]}" --label "hvdctl.io/app=$name" -t "$img" "$dir") ;;
    # The floor: a client that does no work, uploading a tar made beforehand ($dir.tar).
    curl) cmd=(curl -sSfN --unix-socket "${DOCKER_HOST#unix://}" -X POST -H 'Content-Type: application/x-tar'
      -T "$dir.tar" "http://docker/v1.41/build?t=$img&nocache=1&rm=1&forcerm=1&labels=%7B%22hvdctl.io%2Fapp%22%3A%22$name%22%7D") ;;
  esac
  start=$(date +%s.%N)
  # Each output line is stamped as it arrives (the tools write to a pipe either way).
  if ! DOCKER_BUILDKIT=0 /usr/bin/time -f '%e %M %U %S' -o "$out.time" "${cmd[@]}" </dev/null 2>&1 |
    perl -MTime::HiRes=time -ne '$|=1; printf "%.3f %s", time, $_' >"$out.log"; then
    echo "$tool build of $name failed:" >&2
    tail -n 20 "$out.log" >&2
    exit 1
  fi
  local sent step1 wall rss user sys ctx
  if [[ $tool == curl ]]; then
    sent="$(stat -c %s "$dir.tar") B"
  else
    sent=$(grep -oE '(sent build context: |Sending build context to Docker daemon +)[0-9.]+ ?[A-Za-z]+' "$out.log" |
      sed -E 's/.*(context: |daemon +)//' | head -1)
  fi
  step1=$(grep -m1 -E '^[0-9.]+ (\{"stream":")?Step 1/' "$out.log" | cut -d' ' -f1 || true)
  # BuildKit has no "Step 1": the context is fetched while the steps are planned (0 = n/a).
  if [[ -n $step1 ]]; then ctx=$(echo "$step1 - $start" | bc -l); else ctx=0; fi
  read -r wall rss user sys <"$out.time"
  echo "$wall $rss $ctx $(echo "$user + $sys" | bc -l)" >>"$WORK/$name.$tool"
  echo "$sent" >"$WORK/$name.$tool.sent"
  printf '  %-7s %-6s rep %d: wall %6.2f s (to Step 1 %5.2f s)  CPU %4.2f s user + %4.2f s sys  peak RSS %5.1f MiB  context %s\n' \
    "$name" "$tool" "$rep" "$wall" "$ctx" "$user" "$sys" "$(echo "$rss / 1024" | bc -l)" "$sent"
  "$DOCKER" rmi "$img" >/dev/null 2>&1 || true
}

median() { # column file
  awk -v c="$1" '{print $c}' "$2" | sort -g | awk '{v[NR]=$1} END {
    if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2] + v[NR/2+1]) / 2 }'
}
maxcol() { awk -v c="$1" '$c > m {m = $c} END {print m}' "$2"; }

ALL=("a $A hvdctl hvdctl-bk docker" "b $B hvdctl hvdctl-bk hvdctl-bk-cold docker curl"
  "c $C hvdctl hvdctl-bk docker" "h $H hvdctl hvdctl-bk docker")
for ctx in "${ALL[@]}"; do
  set -- $ctx
  want "$1" || continue
  name=bench-$1 dir=$2
  shift 2
  tools=("$@")
  echo "== $name (load: $(cut -d' ' -f1-3 /proc/loadavg))"
  for rep in $(seq 1 "$REPS"); do
    # Rotate the order, so that no tool always goes first.
    for k in $(seq 0 $((${#tools[@]} - 1))); do
      run "${tools[$(((rep - 1 + k) % ${#tools[@]}))]}" "$dir" "$name" "$rep"
    done
  done
done
echo "load after: $(uptime)"

echo
echo "| context | tool | sent (last run) | wall (to Step 1) | ratio to docker (medians) | client CPU | peak RSS |"
echo "|---|---|---|---|---|---|---|"
for ctx in "bench-a|A: ~2 GiB, ~20 MiB sent" "bench-b|B: 1 GiB, all sent" "bench-c|C: baseline, app files only" "bench-h|H: horovod template, rebuild after a train.py edit"; do
  name=${ctx%%|*}
  label=${ctx#*|}
  [[ -f $WORK/$name.docker ]] || continue
  dw=$(median 1 "$WORK/$name.docker")
  for tool in hvdctl hvdctl-bk hvdctl-bk-cold docker; do
    h=$WORK/$name.$tool
    [[ -f $h ]] || continue
    hw=$(median 1 "$h")
    step=$(median 3 "$h")
    printf '| %s | %s | %s | %.2f s (%s) | **%.2f** | %.2f s | %.1f MiB |\n' "$label" "$tool" "$(cat "$h.sent")" \
      "$hw" "$(if [[ $step == 0 ]]; then echo n/a; else printf '%.2f s' "$step"; fi)" "$(echo "$hw / $dw" | bc -l)" \
      "$(median 4 "$h")" "$(echo "$(maxcol 2 "$h") / 1024" | bc -l)"
  done
done
c=$WORK/bench-b.curl
[[ -f $c ]] && printf '\nFloor for B, curl uploading a tar made beforehand (no client work): %.2f s (to Step 1 %.2f s), %.2f s CPU.\n' \
  "$(median 1 "$c")" "$(median 3 "$c")" "$(median 4 "$c")"
echo "Wall, to-Step-1 and CPU are medians of $REPS runs; peak RSS is the largest of the $REPS runs."
