#!/usr/bin/env bash
# Local services for hvdctl's Docker tests: a real dockerd, a real registry with htpasswd
# auth on 127.0.0.1:5000, the Kubeflow Trainer SDK in a venv, and two base images made
# locally (nothing is pulled):
#   hvdctl-test/busybox:latest   FROM scratch + Debian's static busybox
#   hvdctl-test/debian:bookworm  debootstrap --variant=minbase, imported
# and, on request, Horovod bases built on the second from templates/bases/horovod-debian/
# Dockerfile (Open MPI from Debian + Horovod compiled from its sdist), one per framework:
#   hvdctl-test/horovod:0.28.1-cpu             FRAMEWORK=pytorch: Debian's PyTorch
#   hvdctl-test/horovod-tensorflow:0.28.1-cpu  FRAMEWORK=tensorflow: tensorflow-cpu 2.12
#
#   scripts/dev-services.sh          install what is missing, start everything (idempotent)
#   scripts/dev-services.sh horovod [horovod-tensorflow]
#                                    the same, then build those Horovod images unless current
#                                    (`horovod` also downloads TensorBoard's wheels once)
#   scripts/dev-services.sh stop     stop what this script started
#   scripts/dev-services.sh env      print the environment the tests read
#
# Runs as root (developers and CI alike), never reads stdin. State (logs, pid files, registry
# storage, htpasswd, cached debootstrap tarball) lives in $HVDCTL_SERVICES_DIR
# (default /tmp/hvdctl-services). The tests read "$HVDCTL_SERVICES_DIR/env".
set -euo pipefail

STATE="${HVDCTL_SERVICES_DIR:-/tmp/hvdctl-services}"
REGISTRY_ADDR="127.0.0.1:5000"
REGISTRY_USER="hvdctl"
DOCKER_SOCK="/var/run/docker.sock"
export DOCKER_HOST="unix://$DOCKER_SOCK"
# iproute2: `ip link` for the doctor test's second daemon (a bridge of its own).
PACKAGES=(docker.io docker-registry apache2-utils busybox-static debootstrap iproute2)

# The Horovod base. Its Dockerfile is also what `hvdctl init --base debian` gives users, so
# the build context is that directory: the Dockerfile plus vendor/ holding the Horovod sdist.
# The build's containers reach Debian's apt mirror, but may not reach the Python package
# index; the host downloads the sdist (and TensorFlow's wheels) into vendor/ once (vendor/ is
# not committed).
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HOROVOD_DIR="$REPO_DIR/templates/bases/horovod-debian"
# The image of each framework the Dockerfile's FRAMEWORK argument takes.
horovod_image() {
    case $1 in
    pytorch) echo "hvdctl-test/horovod:0.28.1-cpu" ;;
    tensorflow) echo "hvdctl-test/horovod-tensorflow:0.28.1-cpu" ;;
    esac
}
# The image carries the hash of its inputs in this label; a matching label means "current".
HOROVOD_LABEL="hvdctl.io/horovod-base-hash"

log() { printf 'dev-services: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ $(id -u) == 0 ]] || die "run as root (it installs packages and starts dockerd)"
mkdir -p "$STATE"

# Debian's docker.io CLI lives in /usr/bin; an unrelated newer client may shadow it in
# /usr/local/bin. Either talks to the daemon (API version negotiation), prefer Debian's.
docker_cli() {
    if [[ -x /usr/bin/docker ]]; then /usr/bin/docker "$@"; else docker "$@"; fi
}

pid_alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

install_packages() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [[ ${#missing[@]} == 0 ]] && return 0
    log "installing ${missing[*]}"
    # Keep the packages' maintainer scripts from starting their own services: this script
    # starts them itself, with its own configuration.
    local policy=/usr/sbin/policy-rc.d made_policy=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq </dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null >"$STATE/apt.log" 2>&1 ||
        { tail -n 30 "$STATE/apt.log" >&2; [[ $made_policy == 1 ]] && rm -f "$policy"; die "apt-get install failed"; }
    [[ $made_policy == 1 ]] && rm -f "$policy"
    return 0
}

docker_answers() { docker_cli info >/dev/null 2>&1; }

start_dockerd() {
    if docker_answers; then log "dockerd already answers on $DOCKER_SOCK"; return 0; fi
    log "starting dockerd (log: $STATE/dockerd.log)"
    pid_alive "$STATE/dockerd.pid" || rm -f "$STATE/dockerd.pid"
    # BuildKit's cache keeps every build context it was sent (one test sends 1 GiB) until a
    # policy collects it: without one, repeated test runs grew it past 40 GB. Ours keeps
    # 8 GB, collected after builds. A machine's own daemon.json is left to rule instead.
    local config=()
    if [[ ! -e /etc/docker/daemon.json ]]; then
        printf '%s\n' '{"builder": {"gc": {"enabled": true, "defaultKeepStorage": "8GB"}}}' >"$STATE/daemon.json"
        config=(--config-file "$STATE/daemon.json")
    fi
    setsid dockerd --host "unix://$DOCKER_SOCK" --pidfile "$STATE/dockerd.pid" "${config[@]}" \
        </dev/null >"$STATE/dockerd.log" 2>&1 &
    for _ in $(seq 1 120); do
        docker_answers && { log "dockerd is up"; return 0; }
        pid_alive "$STATE/dockerd.pid" || [[ ! -f $STATE/dockerd.pid ]] || break
        sleep 0.5
    done
    tail -n 30 "$STATE/dockerd.log" >&2
    die "dockerd did not answer on $DOCKER_SOCK"
}

registry_answers() {
    # The registry answers /v2/ with 401 when auth is on, 200 when not.
    local code
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://$REGISTRY_ADDR/v2/" 2>/dev/null || true)
    [[ $code == 401 || $code == 200 ]]
}

start_registry() {
    if [[ ! -f $STATE/registry-password ]]; then
        # A per-machine random password: the tests check that it never appears in any output.
        head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$STATE/registry-password"
        chmod 600 "$STATE/registry-password"
    fi
    local pass
    pass=$(cat "$STATE/registry-password")
    htpasswd -Bbn "$REGISTRY_USER" "$pass" >"$STATE/htpasswd" 2>/dev/null
    mkdir -p "$STATE/registry-data"
    cat >"$STATE/registry.yml" <<EOF
version: 0.1
log:
  level: info
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $STATE/registry-data
  delete:
    enabled: true
http:
  addr: $REGISTRY_ADDR
  secret: hvdctl-test-only
auth:
  htpasswd:
    realm: hvdctl-test-registry
    path: $STATE/htpasswd
EOF
    if registry_answers; then log "registry already answers on $REGISTRY_ADDR"; return 0; fi
    log "starting registry on $REGISTRY_ADDR (log: $STATE/registry.log)"
    setsid docker-registry serve "$STATE/registry.yml" </dev/null >"$STATE/registry.log" 2>&1 &
    echo $! >"$STATE/registry.pid"
    for _ in $(seq 1 60); do
        registry_answers && { log "registry is up"; return 0; }
        pid_alive "$STATE/registry.pid" || break
        sleep 0.5
    done
    tail -n 30 "$STATE/registry.log" >&2
    die "registry did not answer on $REGISTRY_ADDR"
}

image_exists() { docker_cli image inspect "$1" >/dev/null 2>&1; }

build_busybox() {
    local ref=hvdctl-test/busybox:latest
    image_exists "$ref" && { log "$ref exists"; return 0; }
    log "building $ref"
    local dir="$STATE/busybox-ctx"
    rm -rf "$dir" && mkdir -p "$dir/rootfs/bin" "$dir/rootfs/tmp" "$dir/rootfs/etc"
    cp /bin/busybox "$dir/rootfs/bin/busybox"
    local applet
    for applet in $(/bin/busybox --list); do
        [[ $applet == busybox ]] || ln -s busybox "$dir/rootfs/bin/$applet"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$dir/rootfs/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$dir/rootfs/etc/group"
    chmod 1777 "$dir/rootfs/tmp"
    cat >"$dir/Dockerfile" <<'EOF'
FROM scratch
COPY rootfs/ /
ENV PATH=/bin
CMD ["/bin/sh"]
EOF
    DOCKER_BUILDKIT=0 docker_cli build -q -t "$ref" "$dir" >/dev/null
    rm -rf "$dir"
}

build_debian() {
    local ref=hvdctl-test/debian:bookworm
    image_exists "$ref" && { log "$ref exists"; return 0; }
    local tarball="$STATE/cache/debian-bookworm-minbase.tar"
    if [[ ! -s $tarball ]]; then
        log "debootstrap bookworm (minbase), a few minutes the first time"
        local root="$STATE/debootstrap-root"
        rm -rf "$root" && mkdir -p "$STATE/cache"
        debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian \
            >"$STATE/debootstrap.log" 2>&1 || { tail -n 30 "$STATE/debootstrap.log" >&2; die "debootstrap failed"; }
        rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
        tar -C "$root" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
        rm -rf "$root"
    fi
    log "importing $ref"
    docker_cli import -c 'CMD ["bash"]' "$tarball" "$ref" >/dev/null
}

# The value of `ARG NAME=value` in the Horovod Dockerfile (quotes removed): the one place
# where the Horovod version, its sdist's sha256 and the TensorFlow pins are written down.
horovod_arg() {
    sed -n "s/^ARG $1=//p" "$HOROVOD_DIR/Dockerfile" | head -n 1 | tr -d '"'
}

# Hash of what a Horovod image is made of: its Dockerfile, the framework, the sdist (pinned by
# its sha256, which the build checks) and the Debian base image it is built FROM.
horovod_inputs_hash() {
    local base_id
    base_id=$(docker_cli image inspect -f '{{.Id}}' hvdctl-test/debian:bookworm 2>/dev/null) || base_id=none
    {
        printf 'dockerfile %s\n' "$(sha256sum <"$HOROVOD_DIR/Dockerfile" | cut -d' ' -f1)"
        printf 'framework %s\n' "$1"
        printf 'sdist %s\n' "$(horovod_arg HOROVOD_SDIST_SHA256)"
        printf 'base %s\n' "$base_id"
    } | sha256sum | cut -d' ' -f1
}

# Whether FRAMEWORK's image carries the hash HASH.
horovod_image_current() {
    local have
    have=$(docker_cli image inspect -f "{{index .Config.Labels \"$HOROVOD_LABEL\"}}" "$(horovod_image "$1")" 2>/dev/null) ||
        return 1
    [[ $have == "$2" ]]
}

# The host's pip (installing Debian's when the host has none).
host_pip() {
    local py=python3
    if ! "$py" -m pip --version >/dev/null 2>&1 </dev/null; then
        install_packages python3-pip
        py=/usr/bin/python3
    fi
    PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "$py" -m pip "$@" </dev/null
}

# vendor/horovod-VERSION.tar.gz: downloaded with the host's pip when missing, and checked
# against the sha256 the Dockerfile pins.
fetch_horovod_sdist() {
    local version sha vendor sdist
    version=$(horovod_arg HOROVOD_VERSION)
    sha=$(horovod_arg HOROVOD_SDIST_SHA256)
    [[ -n $version && -n $sha ]] ||
        die "$HOROVOD_DIR/Dockerfile lacks 'ARG HOROVOD_VERSION=' or 'ARG HOROVOD_SDIST_SHA256='"
    vendor="$HOROVOD_DIR/vendor"
    sdist="horovod-$version.tar.gz"
    if [[ -f $vendor/$sdist ]]; then
        [[ $(sha256sum <"$vendor/$sdist" | cut -d' ' -f1) == "$sha" ]] && return 0
        log "$vendor/$sdist does not have the pinned sha256; downloading it again"
        rm -f "$vendor/$sdist"
    fi
    log "downloading $sdist into $vendor (host pip)"
    mkdir -p "$vendor"
    host_pip download --no-deps --no-binary :all: "horovod==$version" -d "$vendor" \
        >"$STATE/horovod-download.log" 2>&1 || {
        tail -n 20 "$STATE/horovod-download.log" >&2
        die "cannot download the Horovod $version sdist from the package index; put $sdist into $vendor (pip download --no-deps --no-binary :all: horovod==$version -d $vendor) and run again"
    }
    [[ -f $vendor/$sdist ]] || die "pip did not save $vendor/$sdist (log: $STATE/horovod-download.log)"
    if [[ $(sha256sum <"$vendor/$sdist" | cut -d' ' -f1) != "$sha" ]]; then
        rm -f "$vendor/$sdist"
        die "the downloaded $sdist does not have the sha256 pinned in $HOROVOD_DIR/Dockerfile ($sha)"
    fi
}

# vendor/'s TensorFlow wheels (TENSORFLOW_REQUIREMENTS and their dependencies, for the
# image's Python 3.11), downloaded with the host's pip when there is no tensorflow_cpu wheel.
fetch_tensorflow_wheels() {
    local vendor="$HOROVOD_DIR/vendor" requirements
    compgen -G "$vendor/tensorflow_cpu-*.whl" >/dev/null && return 0
    requirements=$(horovod_arg TENSORFLOW_REQUIREMENTS)
    [[ -n $requirements ]] || die "$HOROVOD_DIR/Dockerfile lacks 'ARG TENSORFLOW_REQUIREMENTS='"
    log "downloading $requirements and their dependencies into $vendor (host pip, about 350 MB)"
    mkdir -p "$vendor"
    # shellcheck disable=SC2086 # the requirements are words
    host_pip download $requirements --only-binary :all: --platform manylinux2014_x86_64 \
        --python-version 3.11 --implementation cp --abi cp311 -d "$vendor" \
        >"$STATE/tensorflow-download.log" 2>&1 || {
        tail -n 20 "$STATE/tensorflow-download.log" >&2
        die "cannot download $requirements from the package index (log: $STATE/tensorflow-download.log)"
    }
}

# TensorBoard's wheels (and their dependencies) for the Horovod images' Python 3.11, for the
# tests that install it into an app image (`hvdctl tensorboard`): Debian does not package
# TensorBoard and build containers may not reach the package index. Pinned: 2.21.0 runs on
# the image's Debian numpy 1.24 (pip keeps it) with the protobuf wheel it brings. Downloaded
# once into $STATE/tensorboard-wheels; the tests read HVDCTL_TEST_TENSORBOARD_WHEELS.
TENSORBOARD_REQUIREMENT="tensorboard==2.21.0"
TENSORBOARD_WHEELS="$STATE/tensorboard-wheels"
fetch_tensorboard_wheels() {
    [[ -f $TENSORBOARD_WHEELS/.complete && $(cat "$TENSORBOARD_WHEELS/.complete") == "$TENSORBOARD_REQUIREMENT" ]] &&
        return 0
    log "downloading $TENSORBOARD_REQUIREMENT and its dependencies into $TENSORBOARD_WHEELS (host pip, about 40 MB)"
    rm -rf "$TENSORBOARD_WHEELS" && mkdir -p "$TENSORBOARD_WHEELS"
    host_pip download "$TENSORBOARD_REQUIREMENT" --only-binary :all: --platform manylinux2014_x86_64 \
        --python-version 3.11 --implementation cp --abi cp311 -d "$TENSORBOARD_WHEELS" \
        >"$STATE/tensorboard-download.log" 2>&1 || {
        tail -n 20 "$STATE/tensorboard-download.log" >&2
        rm -rf "$TENSORBOARD_WHEELS"
        # Not fatal: the tests that need the wheels are skipped (a failure under CI).
        log "warning: cannot download $TENSORBOARD_REQUIREMENT (log: $STATE/tensorboard-download.log)"
        return 0
    }
    printf '%s' "$TENSORBOARD_REQUIREMENT" >"$TENSORBOARD_WHEELS/.complete"
}

# The official Kubeflow Trainer SDK in a venv of the host's Python, for the test that reads
# a trainjob run through its TrainerClient. Made once into $STATE/kubeflow-sdk (beside it,
# then moved into place: a half-made venv is never used); the tests read
# HVDCTL_TEST_KUBEFLOW_SDK (its python) and make the same venv themselves when it is missing.
KUBEFLOW_SDK_REQUIREMENT="kubeflow==0.5.0"
KUBEFLOW_SDK="$STATE/kubeflow-sdk"
fetch_kubeflow_sdk() {
    [[ -f $KUBEFLOW_SDK/.complete && $(cat "$KUBEFLOW_SDK/.complete") == "$KUBEFLOW_SDK_REQUIREMENT" ]] &&
        return 0
    log "installing $KUBEFLOW_SDK_REQUIREMENT into $KUBEFLOW_SDK (a venv, about 60 MB)"
    python3 -m venv --help >/dev/null 2>&1 </dev/null || install_packages python3-venv
    rm -rf "$KUBEFLOW_SDK.tmp"
    { python3 -m venv "$KUBEFLOW_SDK.tmp" &&
        PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "$KUBEFLOW_SDK.tmp/bin/python" -m pip install \
            "$KUBEFLOW_SDK_REQUIREMENT"; } </dev/null >"$STATE/kubeflow-sdk-install.log" 2>&1 || {
        tail -n 20 "$STATE/kubeflow-sdk-install.log" >&2
        rm -rf "$KUBEFLOW_SDK.tmp"
        # Not fatal: the test that needs it makes the venv itself or fails saying why.
        log "warning: cannot install $KUBEFLOW_SDK_REQUIREMENT (log: $STATE/kubeflow-sdk-install.log)"
        return 0
    }
    printf '%s' "$KUBEFLOW_SDK_REQUIREMENT" >"$KUBEFLOW_SDK.tmp/.complete"
    rm -rf "$KUBEFLOW_SDK" && mv "$KUBEFLOW_SDK.tmp" "$KUBEFLOW_SDK"
}

# Builds FRAMEWORK's Horovod image unless its label says it is current.
build_horovod() {
    local fw=$1 image want old new started
    image=$(horovod_image "$fw")
    want=$(horovod_inputs_hash "$fw")
    if horovod_image_current "$fw" "$want"; then log "$image is current"; return 0; fi
    fetch_horovod_sdist
    [[ $fw == tensorflow ]] && fetch_tensorflow_wheels
    old=$(docker_cli image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
    local build_log="$STATE/horovod-$fw-build.log"
    log "building $image: Debian packages, then Horovod compiles; about 10 minutes on 2 cores (log: $build_log)"
    started=$SECONDS
    # The legacy builder, like the other images here and `hvdctl build`. --no-cache: the label
    # is the cache; a rebuild starts from fresh package lists, never from a stale apt layer.
    DOCKER_BUILDKIT=0 docker_cli build --no-cache --force-rm --target horovod \
        --build-arg BASE_IMAGE=hvdctl-test/debian:bookworm --build-arg "FRAMEWORK=$fw" \
        --label "$HOROVOD_LABEL=$want" -t "$image" "$HOROVOD_DIR" \
        </dev/null >"$build_log" 2>&1 || {
        tail -n 40 "$build_log" >&2
        die "building $image failed (log: $build_log)"
    }
    horovod_image_current "$fw" "$want" || die "$image lacks its $HOROVOD_LABEL label after the build"
    new=$(docker_cli image inspect -f '{{.Id}}' "$image")
    # The image it replaces, unless something still uses it, and the untagged image the
    # legacy builder leaves for the Dockerfile's `context` stage (the step's ` ---> ID`).
    if [[ -n $old && $old != "$new" ]]; then docker_cli image rm "$old" >/dev/null 2>&1 || true; fi
    local context_stage
    context_stage=$(awk '/RUN mkdir -p \/context\/vendor/ {f = 1} f && /^ ---> [0-9a-f]+$/ {print $2; exit}' \
        "$build_log")
    if [[ -n $context_stage ]]; then docker_cli image rm "$context_stage" >/dev/null 2>&1 || true; fi
    log "$image built in $((SECONDS - started))s"
}

write_env() {
    local horovod_lines="" fw var
    for fw in pytorch tensorflow; do
        if horovod_image_current "$fw" "$(horovod_inputs_hash "$fw")"; then
            var=HVDCTL_TEST_HOROVOD_IMAGE
            [[ $fw == tensorflow ]] && var=HVDCTL_TEST_HOROVOD_TENSORFLOW_IMAGE
            horovod_lines+="$var=$(horovod_image "$fw")"$'\n'
        fi
    done
    cat >"$STATE/env" <<EOF
DOCKER_HOST=$DOCKER_HOST
HVDCTL_TEST_REGISTRY=$REGISTRY_ADDR
HVDCTL_TEST_REGISTRY_USER=$REGISTRY_USER
HVDCTL_TEST_REGISTRY_PASSWORD=$(cat "$STATE/registry-password")
HVDCTL_TEST_BUSYBOX_IMAGE=hvdctl-test/busybox:latest
HVDCTL_TEST_DEBIAN_IMAGE=hvdctl-test/debian:bookworm
EOF
    printf '%s' "$horovod_lines" >>"$STATE/env"
    if [[ -f $TENSORBOARD_WHEELS/.complete ]]; then
        printf 'HVDCTL_TEST_TENSORBOARD_WHEELS=%s\n' "$TENSORBOARD_WHEELS" >>"$STATE/env"
    fi
    if [[ -f $KUBEFLOW_SDK/.complete ]]; then
        printf 'HVDCTL_TEST_KUBEFLOW_SDK=%s\n' "$KUBEFLOW_SDK/bin/python" >>"$STATE/env"
    fi
    chmod 600 "$STATE/env"
}

stop_one() {
    local name=$1 pidfile=$2
    if pid_alive "$pidfile"; then
        local pid
        pid=$(cat "$pidfile")
        log "stopping $name (pid $pid)"
        kill "$pid"
        for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    fi
    rm -f "$pidfile"
}

start_all() {
    install_packages "${PACKAGES[@]}"
    start_dockerd
    start_registry
    build_busybox
    build_debian
    fetch_kubeflow_sdk
}

case "${1:-start}" in
start)
    start_all
    write_env
    log "ready; environment for the tests in $STATE/env"
    ;;
horovod | horovod-tensorflow)
    start_all
    for what in "$@"; do
        case $what in
        horovod) build_horovod pytorch && fetch_tensorboard_wheels ;;
        horovod-tensorflow) build_horovod tensorflow ;;
        *) die "usage: $0 horovod [horovod-tensorflow]" ;;
        esac
    done
    write_env
    log "ready; environment for the tests in $STATE/env"
    ;;
stop)
    stop_one registry "$STATE/registry.pid"
    stop_one dockerd "$STATE/dockerd.pid"
    ;;
env)
    [[ -f $STATE/env ]] || die "no $STATE/env: run $0 first"
    cat "$STATE/env"
    ;;
*)
    die "usage: $0 [start|horovod [horovod-tensorflow]|horovod-tensorflow|stop|env]"
    ;;
esac
