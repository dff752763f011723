#!/bin/bash
# hvdctl launcher: installs the run's ssh key, waits until every worker's sshd answers, runs
# the training command (mpirun/horovodrun ...), then tells the workers to stop so no GPU idles.
# Shared by the `native` (Kubernetes) and `local` (Docker) backends.
#   HVDCTL_SSH_DIR       directory holding ssh-privatekey (default /etc/hvdctl/ssh)
#   HVDCTL_HOSTFILE      MPI hostfile, one "host slots=N" per line (default /etc/mpi/hostfile)
#   HVDCTL_SSHD_TIMEOUT  seconds to wait for all workers (default 300)
set -u
ssh_dir=${HVDCTL_SSH_DIR:-/etc/hvdctl/ssh}
hostfile=${HVDCTL_HOSTFILE:-/etc/mpi/hostfile}
timeout=${HVDCTL_SSHD_TIMEOUT:-300}
home=${HOME:-/root}

mkdir -p "$home/.ssh" && chmod 700 "$home/.ssh"
install -m 600 "$ssh_dir/ssh-privatekey" "$home/.ssh/id_ed25519"
cat > "$home/.ssh/config" <<'CFG'
Host *
  IdentityFile ~/.ssh/id_ed25519
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
  ConnectTimeout 10
  ConnectionAttempts 5
CFG
chmod 600 "$home/.ssh/config"

hosts=$(awk 'NF && $1 !~ /^#/ {print $1}' "$hostfile")
deadline=$((SECONDS + timeout))
for h in $hosts; do
  until (exec 3<>"/dev/tcp/$h/22") 2>/dev/null; do
    if (( SECONDS >= deadline )); then
      echo "hvdctl: worker $h did not accept ssh on port 22 within ${timeout}s; giving up" >&2
      exit 1
    fi
    sleep 1
  done
  echo "hvdctl: worker $h is ready"
done

# mpirun forwards LD_LIBRARY_PATH (-x) to the ranks; defined-but-empty when the image sets
# none, so Open MPI does not warn (glibc ignores an empty value).
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
"$@"
rc=$?
echo "hvdctl: training command exited with code $rc"

# Stop the workers: each worker's script exits once this file exists.
for h in $hosts; do
  ssh -o BatchMode=yes "$h" 'touch /tmp/hvdctl-done' >/dev/null 2>&1 &
done
wait
exit "$rc"
