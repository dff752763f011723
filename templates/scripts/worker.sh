#!/bin/bash
# hvdctl worker: authorises the run's ssh key, runs sshd in the foreground of this container,
# and exits 0 when the launcher signals the end of the run (/tmp/hvdctl-done).
# Shared by the `native` (Kubernetes) and `local` (Docker) backends.
#   HVDCTL_SSH_DIR  directory holding ssh-publickey (default /etc/hvdctl/ssh)
set -u
ssh_dir=${HVDCTL_SSH_DIR:-/etc/hvdctl/ssh}
home=${HOME:-/root}

mkdir -p "$home/.ssh" && chmod 700 "$home/.ssh"
install -m 600 "$ssh_dir/ssh-publickey" "$home/.ssh/authorized_keys"
mkdir -p /run/sshd
ls /etc/ssh/ssh_host_*_key >/dev/null 2>&1 || ssh-keygen -A >/dev/null
rm -f /tmp/hvdctl-done

/usr/sbin/sshd -D -e &
sshd=$!
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
