#!/usr/bin/env bash
# Runs RSS_SPLIT_BIN with this script's arguments and appends to RSS_SPLIT_OUT the peaks of its
# anonymous memory (heap, stacks: what the program allocates) and of its file-backed resident
# pages (the binary's and libraries' code and data: grows with the binary's size, shared and
# reclaimable), sampled from /proc/PID/smaps_rollup as fast as a shell loop goes. To split
# `hvdctl logs`' peak RSS in benches/logs.sh:
#
#   RSS_SPLIT_BIN=target/release/hvdctl RSS_SPLIT_OUT=/tmp/split.txt \
#     HVDCTL=$PWD/benches/rss-split.sh benches/logs.sh
set -uo pipefail
"${RSS_SPLIT_BIN:?the program to run}" "$@" &
pid=$!
anon=0 file=0
while kill -0 "$pid" 2>/dev/null; do
  read -r a r < <(awk '/^Anonymous:/ {a = $2} /^Rss:/ {r = $2} END {print a + 0, r + 0}' \
    "/proc/$pid/smaps_rollup" 2>/dev/null || echo "0 0")
  ((a > anon)) && anon=$a
  ((r - a > file)) && file=$((r - a))
done
wait "$pid"
rc=$?
echo "$(basename "$RSS_SPLIT_BIN") $1: peak anonymous $anon KB, peak file-backed $file KB" >>"${RSS_SPLIT_OUT:-/dev/stderr}"
exit $rc
