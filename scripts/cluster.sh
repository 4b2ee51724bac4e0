#!/usr/bin/env bash
# Start three tokenringd nodes on loopback with unique names and ports, print
# their URLs, and stop them all on Ctrl-C. Used by `make cluster`.
#
# Ctrl-C stops the nodes one at a time, newest first, each with SIGTERM (a
# drain: it hands its partitions to the others, which are still there to
# acknowledge them, and leaves gossip while others hear it), and exits 0.
# The nodes run in process groups of their own (set -m), so that the
# terminal's SIGINT reaches this script and not all three at once.
set -euo pipefail
set -m
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/tokenringd}
CONFIG=${CONFIG:-}
cfg=()
[ -n "$CONFIG" ] && cfg=(-config "$CONFIG")

pids=()
stop() {
  trap - INT TERM EXIT
  local i st failed=0
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill -TERM "${pids[i]}" 2>/dev/null || continue
    echo "stopping n$((i + 1)) (pid ${pids[i]})"
    st=0
    wait "${pids[i]}" || st=$?
    if [ "$st" -ne 0 ]; then
      echo "n$((i + 1)) exited with status $st (log /tmp/tokenring-n$((i + 1)).log)" >&2
      failed=1
    fi
  done
  [ ${#pids[@]} -gt 0 ] && echo "stopped"
  return "$failed"
}
trap 'stop; exit $?' INT TERM
trap stop EXIT

for i in 1 2 3; do
  join=()
  [ "$i" -gt 1 ] && join=(-join 127.0.0.1:7951)
  "$BIN" -name "n$i" -http "127.0.0.1:808$i" -peer "127.0.0.1:795$((i + 3))" \
    -gossip "127.0.0.1:795$i" "${join[@]}" "${cfg[@]}" 2> "/tmp/tokenring-n$i.log" &
  pids+=($!)
  # the first node must be up before the others join it
  for _ in $(seq 50); do curl -fsS "http://127.0.0.1:808$i/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
done
for i in 1 2 3; do
  echo "n$i: http://127.0.0.1:808$i  (log /tmp/tokenring-n$i.log)"
done
echo "ring: curl -s http://127.0.0.1:8081/admin/ring ; Ctrl-C stops all three"
if [ -t 0 ]; then
  # On a terminal a foreground job of its own holds it (set -m), so Ctrl-C's
  # SIGINT goes to that job alone: not to make, which would otherwise die
  # of it whatever this script does. The job exits 0 on it (a job killed by
  # SIGINT would make this script exit 130); the script then stops the
  # nodes in order and exits 0, and so does make.
  (trap 'exit 0' INT; while :; do sleep 1; done) || true
  stop
  exit # stop's status: 0 when every node stopped cleanly
else
  wait
fi
