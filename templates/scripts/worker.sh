#!/bin/bash
# hvdctl worker: authorises the run's ssh key, runs sshd in the foreground of this container,
# and exits 0 when the launcher signals the end of the run (/tmp/hvdctl-done).
# Shared by the `native` (Kubernetes) and `local` (Docker) backends.
# sshd logs at level ERROR: every mpirun/horovodrun connection would otherwise write three
# lines or more (accepted key, disconnect) between the ranks' output; what fails still shows
# here, and the launcher's ssh says why it could not log in (the run's reason quotes it).
#   HVDCTL_SSH_DIR   directory holding ssh-publickey (default /etc/hvdctl/ssh)
#   HVDCTL_SSH_PORT  sshd's port (default 22 as root; 2222 otherwise, where sshd runs as the
#                    container's user with its own configuration and host key)
# A non-root user needs an entry in the image's /etc/passwd (sshd and ssh refuse a uid
# without one); the app templates' images create `mpiuser` (uid 1000).
set -u
ssh_dir=${HVDCTL_SSH_DIR:-/etc/hvdctl/ssh}
uid=$(id -u)
if [ "$uid" = 0 ]; then port=${HVDCTL_SSH_PORT:-22}; else port=${HVDCTL_SSH_PORT:-2222}; fi
# A uid without a home (or one it cannot write) still needs a place for its ssh files.
if [ -z "${HOME:-}" ] || [ "$HOME" = / ] || ! mkdir -p "$HOME/.ssh" 2>/dev/null; then
  export HOME="/tmp/hvdctl-home-$uid"
  mkdir -p "$HOME/.ssh"
fi
chmod 700 "$HOME/.ssh"
install -m 600 "$ssh_dir/ssh-publickey" "$HOME/.ssh/authorized_keys"
rm -f /tmp/hvdctl-done

if [ "$uid" = 0 ]; then
  mkdir -p /run/sshd
  ls /etc/ssh/ssh_host_*_key >/dev/null 2>&1 || ssh-keygen -A >/dev/null
  /usr/sbin/sshd -D -e -o LogLevel=ERROR -p "$port" &
else
  # sshd as an ordinary user: its own host key and configuration, a port above 1024, and
  # logins only as this user (which is all MPI needs).
  d="$HOME/.hvdctl-sshd"
  mkdir -p "$d" && chmod 700 "$d"
  [ -f "$d/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$d/host_ed25519"
  cat > "$d/sshd_config" <<CFG
Port $port
HostKey $d/host_ed25519
AuthorizedKeysFile $HOME/.ssh/authorized_keys
PidFile $d/sshd.pid
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
LogLevel ERROR
CFG
  /usr/sbin/sshd -D -e -f "$d/sshd_config" &
fi
sshd=$!
# sshd itself says nothing when all goes well: one line that the worker is up.
echo "hvdctl: sshd started on port $port (it logs errors only)"
trap 'kill "$sshd" 2>/dev/null; exit 0' TERM INT
while kill -0 "$sshd" 2>/dev/null; do
  if [ -e /tmp/hvdctl-done ]; then
    kill "$sshd" 2>/dev/null
    wait "$sshd"
    echo "hvdctl: the launcher finished; worker exiting"
    exit 0
  fi
  sleep 1
done
wait "$sshd"
rc=$?
echo "hvdctl: sshd exited with code $rc" >&2
exit "$rc"
