#!/usr/bin/env bash
# Load-generator benchmark against a 3-node cluster on loopback: decisions
# made at the owner (-route owner) against decisions forwarded by another
# node (-route other), with peer batching opportunistic (the default), off,
# and lingering 500µs like Gubernator. Every run starts fresh nodes with the
# shipped defaults (LAN gossip, forward_timeout 15 ms, replication and
# handoff on); only the limits, which no request reaches, and the log level
# are the script's. BENCHMARKS.md, "Against Gubernator", quotes its ratios.
#   scripts/bench-cluster.sh [requests] [workers]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-30000}
C=${2:-64}
make -s build
cfg=$(mktemp)
cat > "$cfg" <<'YAML'
limits:
  default: {rpm: 100000000, tpm: 100000000000, concurrency: 100000}
YAML
pids=()
cleanup() { kill -TERM "${pids[@]}" 2>/dev/null || true; wait "${pids[@]}" 2>/dev/null || true; pids=(); }
trap 'cleanup; rm -f "$cfg"' EXIT

start() { # $@: extra tokenringd flags
  for i in 1 2 3; do
    join=()
    [ "$i" -gt 1 ] && join=(-join 127.0.0.1:17951)
    bin/tokenringd -name "b$i" -http "127.0.0.1:1808$i" -gossip "127.0.0.1:1795$i" "${join[@]}" \
      -config "$cfg" -log-level warn "$@" 2>>/tmp/tokenring-bench.log &
    pids+=($!)
    for _ in $(seq 100); do curl -fsS "http://127.0.0.1:1808$i/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
  done
  sleep 1 # let every node see all three
}

targets=http://127.0.0.1:18081,http://127.0.0.1:18082,http://127.0.0.1:18083
for mode in "opportunistic:" "unbatched:-peer-batch-max 1" "linger500us:-peer-batch-wait 500us"; do
  name=${mode%%:*}; flags=${mode#*:}
  # shellcheck disable=SC2086
  start $flags
  for route in owner other; do
    printf '%-14s ' "$name"
    bin/tokenring load -targets "$targets" -route "$route" -n "$N" -c "$C" -tenants 1000 -d 60s | tr '\n' ' '
    echo
  done
  cleanup
done
