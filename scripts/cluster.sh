#!/usr/bin/env bash
# Start three tokenringd nodes on loopback with unique names and ports, print
# their URLs, and stop them all on Ctrl-C. Used by `make cluster`.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/tokenringd}
CONFIG=${CONFIG:-}
cfg=()
[ -n "$CONFIG" ] && cfg=(-config "$CONFIG")

pids=()
stop() {
  trap - INT TERM EXIT
  echo "stopping ${pids[*]}"
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
}
trap stop INT TERM EXIT

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
wait
