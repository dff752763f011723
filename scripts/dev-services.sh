#!/usr/bin/env bash
# Local services for hvdctl's Docker tests: a real dockerd, a real registry with htpasswd
# auth on 127.0.0.1:5000, and two base images made locally (nothing is pulled):
#   hvdctl-test/busybox:latest   FROM scratch + Debian's static busybox
#   hvdctl-test/debian:bookworm  debootstrap --variant=minbase, imported
#
#   scripts/dev-services.sh          install what is missing, start everything (idempotent)
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
PACKAGES=(docker.io docker-registry apache2-utils busybox-static debootstrap)

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
    for p in "${PACKAGES[@]}"; do
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
    setsid dockerd --host "unix://$DOCKER_SOCK" --pidfile "$STATE/dockerd.pid" \
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

write_env() {
    cat >"$STATE/env" <<EOF
DOCKER_HOST=$DOCKER_HOST
HVDCTL_TEST_REGISTRY=$REGISTRY_ADDR
HVDCTL_TEST_REGISTRY_USER=$REGISTRY_USER
HVDCTL_TEST_REGISTRY_PASSWORD=$(cat "$STATE/registry-password")
HVDCTL_TEST_BUSYBOX_IMAGE=hvdctl-test/busybox:latest
HVDCTL_TEST_DEBIAN_IMAGE=hvdctl-test/debian:bookworm
EOF
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

case "${1:-start}" in
start)
    install_packages
    start_dockerd
    start_registry
    build_busybox
    build_debian
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
    die "usage: $0 [start|stop|env]"
    ;;
esac
