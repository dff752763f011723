#!/usr/bin/env bash
# hvdctl's test command (the README's second command; .ci/run runs exactly this).
# On a fresh machine, as root: installs and starts what the tests need (dockerd, a registry
# with htpasswd auth, locally made base images), then runs every test of the workspace, the
# lints, and the schema cross-check of rendered manifests.
#
# HVDCTL_TEST_LOAD=N runs N CPU burners beside the tests (from the lints on): a busy machine is
# the normal case, and every test must pass on one.
set -euo pipefail
cd "$(dirname "$0")/.."

# The services, plus the Horovod base images (PyTorch, TensorFlow) the training tests use
# (made once per machine).
scripts/dev-services.sh horovod horovod-tensorflow
command -v kubectl >/dev/null || echo "test.sh: kubectl not found: the kubectl cross-checks will fail" >&2

# From here a fresh run writes ~3 GB under target/ (the build and clippy's) and up to ~10 GB
# under /var/lib/docker (the tests' images; BuildKit's cache, capped by dev-services.sh): say
# so up front when the disk cannot hold that, rather than fail at a link 10 minutes in.
# Incremental state doubles target/ and helps only a rebuild, which a CI run never does.
[[ -z ${CI:-} ]] || export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
free_gb=$(df -P --block-size=1G "${CARGO_TARGET_DIR:-.}" 2>/dev/null | awk 'NR==2{print $4}')
echo "test.sh: ${free_gb:-?} GB free on the disk of target/" >&2
[[ -z $free_gb || $free_gb -ge 13 ]] ||
    echo "test.sh: warning: the build and the tests need about 13 GB; expect 'No space left on device'" >&2

burners=()
stop_burners() { [[ ${#burners[@]} == 0 ]] || kill "${burners[@]}" 2>/dev/null || true; }
trap stop_burners EXIT
for ((i = 0; i < ${HVDCTL_TEST_LOAD:-0}; i++)); do
    (while :; do :; done) &
    burners+=($!)
done
[[ ${#burners[@]} == 0 ]] || echo "test.sh: ${#burners[@]} CPU burner(s) running beside the tests" >&2

# A failure never hides the rest: every step and every test runs, the failures are listed
# together at the end, and the script still exits non-zero.
failures=()
step() {
    local name=$1
    shift
    "$@" || failures+=("$name (exit $?)")
}
step "cargo fmt --check" cargo fmt --all --check
step "cargo clippy" cargo clippy --workspace --all-targets --quiet -- -D warnings
# Optional checks that could not run here list themselves in the tests' tmp dir.
skipped="${CARGO_TARGET_DIR:-target}/tmp/skipped.txt"
rm -f "$skipped"
# Every test's wall time: libtest's --report-time is behind -Z on a stable toolchain, so a
# runner lets only the test binaries accept it (nothing is compiled differently). Doc tests
# run apart: rustdoc runs them itself. --no-fail-fast: cargo goes on to the next test binary
# after one fails.
out="${CARGO_TARGET_DIR:-target}/tmp/test-output.txt"
mkdir -p "$(dirname "$out")"
host=$(rustc -vV | sed -n 's/^host: //p' | tr 'a-z.-' 'A-Z__')
step "cargo test" env "CARGO_TARGET_${host}_RUNNER=env RUSTC_BOOTSTRAP=1" \
    bash -c 'set -o pipefail; cargo test --workspace --no-fail-fast --lib --bins --tests -- -Z unstable-options --report-time 2>&1 | tee "$1"' _ "$out"
step "cargo test --doc" cargo test --workspace --no-fail-fast --doc
echo "test.sh: the slowest 10 tests:" >&2
# (sed reads all of sort's output: `head` would close the pipe early, and pipefail would
# take sort's SIGPIPE for a failure.)
sed -nE 's/^test (.*) \.\.\. ok <([0-9.]+)s>$/\2 s  \1/p' "$out" | sort -rn | sed -n '1,10s/^/  /p' >&2
if [[ -s $skipped ]]; then
    echo "test.sh: $(wc -l <"$skipped") optional check(s) skipped:" >&2
    sed 's/^/  /' "$skipped" >&2
else
    echo "test.sh: no test skipped" >&2
fi
step "validate-manifests" scripts/validate-manifests.sh
if ((${#failures[@]})); then
    echo "test.sh: FAILED: ${failures[*]}" >&2
    # Each failed test with the binary it is in (cargo's "Running" line before it).
    awk '/^ +Running /{bin = $2} /^test .* \.\.\. FAILED/{sub(/ \.\.\. FAILED.*/, ""); sub(/^test /, ""); print "  " $0 "   [" bin "]"}' "$out" >&2
    exit 1
fi
echo "test.sh: all tests passed"
