#!/bin/bash
# hvdctl dev: one attempt, run in a warm launcher through exec as
#   bash -c "$(cat attempt.sh)" attempt LAUNCH-COMMAND...
# Stops the attempt still running (its whole process group: mpirun and what it started),
# waits until the launcher holds (launcher.sh's warm mode, or the operator launcher's hold)
# and every worker's sshd answers, then runs the launch command in a process group of its
# own, recorded so the next attempt can stop it. Output: stdout and stderr, merged.
#   HVDCTL_HOSTFILE      MPI hostfile (default /etc/mpi/hostfile)
#   HVDCTL_SSHD_TIMEOUT  seconds to wait for the launcher and the workers (default 300)
#   HVDCTL_SSH_PORT      the workers' sshd port (default 22 as root, 2222 otherwise)
set -u
exec 2>&1
d=/tmp/hvdctl-dev
mkdir -p "$d"
if [ -s "$d/pgid" ]; then
  old=$(cat "$d/pgid")
  # Its process group; only the process when there was no setsid.
  target=-$old
  kill -0 -- "$target" 2>/dev/null || target=$old
  if kill -TERM -- "$target" 2>/dev/null; then
    echo "hvdctl: stopping the previous attempt"
    for _ in $(seq 100); do kill -0 -- "$target" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "$target" 2>/dev/null
  fi
  rm -f "$d/pgid"
fi
timeout=${HVDCTL_SSHD_TIMEOUT:-300}
deadline=$((SECONDS + timeout))
until [ -s "$d/held" ]; do
  if (( SECONDS >= deadline )); then
    echo "hvdctl: the launcher did not reach warm mode within ${timeout}s" >&2
    exit 1
  fi
  sleep 0.2
done
HOME=$(cat "$d/held")
export HOME
uid=$(id -u)
if [ "$uid" = 0 ]; then port=${HVDCTL_SSH_PORT:-22}; else port=${HVDCTL_SSH_PORT:-2222}; fi
hostfile=${HVDCTL_HOSTFILE:-/etc/mpi/hostfile}
# sshd answers on $1: its banner read, an identification sent back (a connection closed
# without one is an error line in the worker's log; this visit sshd logs below ERROR).
sshd_answers() {
  (
    exec 3<>"/dev/tcp/$1/$port" || exit 1
    IFS= read -r -t 10 banner <&3 && [ "${banner#SSH-}" != "$banner" ] || exit 1
    printf 'SSH-2.0-hvdctl-probe\r\n' >&3
  ) 2>/dev/null
}
for h in $(awk -F'[ :]' 'NF && $1 !~ /^#/ {print $1}' "$hostfile"); do
  until sshd_answers "$h"; do
    if (( SECONDS >= deadline )); then
      echo "hvdctl: worker $h did not accept ssh on port $port within ${timeout}s" >&2
      exit 1
    fi
    sleep 0.2
  done
done
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
# setsid: a process group of its own (the pid is its id), so it can be stopped whole.
if command -v setsid >/dev/null; then setsid "$@" & else "$@" & fi
child=$!
echo "$child" > "$d/pgid"
trap 'kill -TERM -- "-$child" 2>/dev/null || kill -TERM "$child" 2>/dev/null' TERM INT HUP
wait "$child"
rc=$?
while kill -0 "$child" 2>/dev/null; do wait "$child"; rc=$?; done
[ "$(cat "$d/pgid" 2>/dev/null)" = "$child" ] && rm -f "$d/pgid"
exit "$rc"
