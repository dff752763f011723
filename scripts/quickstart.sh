#!/usr/bin/env bash
# The README's first command: installs hvdctl, then runs a whole MPI job on this machine's
# Docker engine with the mpi-hello template (2 workers x 2 slots), follows its logs to the
# allreduce sum, and removes it. Runs as root on a fresh Debian/Ubuntu machine with Rust:
# scripts/dev-services.sh installs and starts dockerd and makes a Debian base image locally.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=${HVDCTL_INSTALL_ROOT:-/usr/local}

cargo install --path "$root" --locked --quiet --root "$prefix" --target-dir "$root/target"
export PATH="$prefix/bin:$PATH"
"$root/scripts/dev-services.sh"

work=$(mktemp -d)/hello
hvdctl init "$work" --template mpi-hello --no-input
cd "$work"
hvdctl build --build-arg BASE_IMAGE=hvdctl-test/debian:bookworm --progress plain
hvdctl deploy --backend local --set workers=2 --set slotsPerWorker=2 --logs
hvdctl undeploy
echo "quickstart: done; the app is in $work (try: cd $work && hvdctl deploy --dry-run --backend native)"
