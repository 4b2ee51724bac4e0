#!/usr/bin/env bash
# Start three tokenringd nodes on loopback with unique names and ports, print
# their URLs, and stop them all on Ctrl-C. Used by `make cluster`.
#
# Node i (1 to 3) listens on 127.0.0.1, HTTP port HTTP_PORT+i-1, peer port
# PEER_PORT+i-1 and gossip port GOSSIP_PORT+i-1 (default 8081, 7954 and
# 7951: HTTP 8081-8083, peer 7954-7956, gossip 7951-7953), and writes its log
# to /tmp/tokenring-nI-HTTPPORT.log. Another cluster beside it, say:
#
#   HTTP_PORT=9081 PEER_PORT=9954 GOSSIP_PORT=9951 scripts/cluster.sh
#   make cluster CLUSTER_HTTP=9081 CLUSTER_PEER=9954 CLUSTER_GOSSIP=9951
#
# It prints the `tokenring load -targets ...` line that drives these nodes.
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

HTTP_PORT=${HTTP_PORT:-8081}
PEER_PORT=${PEER_PORT:-7954}
GOSSIP_PORT=${GOSSIP_PORT:-7951}
ports=()
for v in HTTP_PORT PEER_PORT GOSSIP_PORT; do
  if ! [[ ${!v} =~ ^[0-9]+$ ]] || ((${!v} < 1 || ${!v} + 2 > 65535)); then
    echo "$v=${!v}: want the first node's port (node i gets $v+i-1, up to 65535)" >&2
    exit 2
  fi
  ports+=("${!v}" "$((${!v} + 1))" "$((${!v} + 2))")
done
if [ "$(printf '%s\n' "${ports[@]}" | sort -u | wc -l)" -ne 9 ]; then
  echo "HTTP_PORT=$HTTP_PORT PEER_PORT=$PEER_PORT GOSSIP_PORT=$GOSSIP_PORT: the nine ports (three a node) overlap" >&2
  exit 2
fi
http() { echo "127.0.0.1:$((HTTP_PORT + $1 - 1))"; }
logfile() { echo "/tmp/tokenring-n$1-$((HTTP_PORT + $1 - 1)).log"; }

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
      echo "n$((i + 1)) exited with status $st (log $(logfile $((i + 1))))" >&2
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
  [ "$i" -gt 1 ] && join=(-join "127.0.0.1:$GOSSIP_PORT")
  "$BIN" -name "n$i" -http "$(http "$i")" -peer "127.0.0.1:$((PEER_PORT + i - 1))" \
    -gossip "127.0.0.1:$((GOSSIP_PORT + i - 1))" "${join[@]}" "${cfg[@]}" 2> "$(logfile "$i")" &
  pids+=($!)
  # the first node must be up before the others join it
  ready=0
  for _ in $(seq 100); do
    curl -fsS "http://$(http "$i")/readyz" >/dev/null 2>&1 && { ready=1; break; }
    kill -0 "${pids[-1]}" 2>/dev/null || break # exited: a port taken, a bad config
    sleep 0.1
  done
  if [ "$ready" -ne 1 ]; then
    echo "n$i not ready on http://$(http "$i") after 10 s; its log ($(logfile "$i")):" >&2
    tail -n 20 "$(logfile "$i")" >&2
    exit 1 # the EXIT trap stops the nodes started
  fi
done
targets=()
for i in 1 2 3; do
  echo "n$i: http://$(http "$i")  (log $(logfile "$i"))"
  targets+=("http://$(http "$i")")
done
echo "ring: curl -s http://$(http 1)/admin/ring ; Ctrl-C stops all three"
echo "load: bin/tokenring load -targets $(IFS=,; echo "${targets[*]}") -d 10s"
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
