#!/bin/bash
# hvdctl launcher: installs the run's ssh key, waits until every worker's sshd answers, runs
# the training command (mpirun/horovodrun ...), then tells the workers to stop so no GPU idles.
# Terminated (pod deleted, deadline, eviction, Ctrl-C), it stops the command and the workers
# before it exits. Shared by the `native` (Kubernetes) and `local` (Docker) backends.
#   HVDCTL_SSH_DIR       directory holding ssh-privatekey (default /etc/hvdctl/ssh)
#   HVDCTL_HOSTFILE      MPI hostfile, one host per line, first word the host (default /etc/mpi/hostfile)
#   HVDCTL_SSHD_TIMEOUT  seconds to wait for all workers (default 300)
#   HVDCTL_SSH_PORT      the workers' sshd port (default 22 as root, 2222 otherwise; see worker.sh)
#   HVDCTL_KEEP_WORKERS  1: leave the workers running after the command (cleanPodPolicy None)
#   HVDCTL_DEV           1: warm mode (`hvdctl dev`): once the workers answer, hold instead of
#                        running the command; each attempt runs it through exec (attempt.sh)
# Every line this script writes itself starts with "hvdctl: ": the run's `firstLog` phase (the
# training command's first line) skips them, so keep that prefix on any new message.
set -u
ssh_dir=${HVDCTL_SSH_DIR:-/etc/hvdctl/ssh}
hostfile=${HVDCTL_HOSTFILE:-/etc/mpi/hostfile}
timeout=${HVDCTL_SSHD_TIMEOUT:-300}
uid=$(id -u)
if [ "$uid" = 0 ]; then port=${HVDCTL_SSH_PORT:-22}; else port=${HVDCTL_SSH_PORT:-2222}; fi
if [ -z "${HOME:-}" ] || [ "$HOME" = / ] || ! mkdir -p "$HOME/.ssh" 2>/dev/null; then
  export HOME="/tmp/hvdctl-home-$uid"
  mkdir -p "$HOME/.ssh"
fi
chmod 700 "$HOME/.ssh"
install -m 600 "$ssh_dir/ssh-privatekey" "$HOME/.ssh/id_ed25519"
cat > "$HOME/.ssh/config" <<CFG
Host *
  Port $port
  IdentityFile ~/.ssh/id_ed25519
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
  ConnectTimeout 10
  ConnectionAttempts 5
CFG
chmod 600 "$HOME/.ssh/config"

# Open MPI's "host slots=N", MPICH's "host:N": the host is what comes before ' ' or ':'.
hosts=$(awk -F'[ :]' 'NF && $1 !~ /^#/ {print $1}' "$hostfile")
# Whether sshd answers on $1: its banner read, a client's identification sent back, then
# closed. sshd logs such a visit at INFO (below the workers' ERROR level); a connection closed
# without identification would be an error line in the worker's log every time.
sshd_answers() {
  (
    exec 3<>"/dev/tcp/$1/$port" || exit 1
    IFS= read -r -t 10 banner <&3 && [ "${banner#SSH-}" != "$banner" ] || exit 1
    printf 'SSH-2.0-hvdctl-probe\r\n' >&3
  ) 2>/dev/null
}
deadline=$((SECONDS + timeout))
for h in $hosts; do
  until sshd_answers "$h"; do
    if (( SECONDS >= deadline )); then
      echo "hvdctl: worker $h did not accept ssh on port $port within ${timeout}s; giving up" >&2
      exit 1
    fi
    sleep 1
  done
  echo "hvdctl: worker $h is ready"
done

if [ "${HVDCTL_DEV:-0}" = 1 ]; then
  # Warm mode: the workers keep their sshd; attempts read the HOME that holds the ssh setup.
  mkdir -p /tmp/hvdctl-dev && printf '%s\n' "$HOME" > /tmp/hvdctl-dev/held
  echo "hvdctl: warm mode: the launcher holds; hvdctl dev runs each attempt"
  trap 'exit 143' TERM INT
  while :; do sleep 3600 & wait $!; done
fi

stop_workers() {
  [ "${HVDCTL_KEEP_WORKERS:-0}" = 1 ] && return
  # Each worker's script exits once this file exists.
  for h in $hosts; do
    ssh -o BatchMode=yes "$h" 'touch /tmp/hvdctl-done' >/dev/null 2>&1 &
  done
  wait
}

# mpirun forwards LD_LIBRARY_PATH (-x) to the ranks; defined-but-empty when the image sets
# none, so Open MPI does not warn (glibc ignores an empty value).
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
terminated=
trap 'terminated=1; kill -TERM "$child" 2>/dev/null' TERM INT
"$@" &
child=$!
wait "$child"
rc=$?
# A trapped signal ends `wait` early: wait again until the command has really ended.
while kill -0 "$child" 2>/dev/null; do
  wait "$child"
  rc=$?
done
if [ -n "$terminated" ]; then
  echo "hvdctl: the launcher was terminated; stopped the training command (exit $rc), stopping the workers" >&2
  stop_workers
  exit 143
fi
echo "hvdctl: training command exited with code $rc"
stop_workers
exit "$rc"
