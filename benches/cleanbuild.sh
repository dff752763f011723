#!/usr/bin/env bash
# Clean debug build time of hvdctl at each REV given, one after the other on the same machine:
# each revision is checked out into a worktree of its own and built into a fresh target
# directory (dependencies must already be downloaded: `cargo fetch`).
# Usage: benches/cleanbuild.sh REV...   (prints "REV rc=N secs=S load=...", one line each)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for rev in "$@"; do
  d=$work/src-$rev t=$work/target-$rev
  git -C "$root" worktree add -q --detach "$d" "$rev"
  s=$(date +%s.%N)
  (cd "$d" && CARGO_TARGET_DIR=$t cargo build --offline -q -p hvdctl) >"$work/$rev.log" 2>&1
  rc=$?
  e=$(date +%s.%N)
  echo "$rev rc=$rc secs=$(echo "$e - $s" | bc) load=$(cut -d' ' -f1-3 /proc/loadavg)"
  git -C "$root" worktree remove --force "$d"
  rm -rf "$t"
done
