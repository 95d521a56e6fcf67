#!/usr/bin/env bash
# Scale on one replica: the gateway's resident memory at idle, N open GET SSE streams (memory
# per stream, none lost), and tools/list over 10 upstreams of 100 tools each from the cache.
#
#   bash loadtest/scale.sh [STREAMS]          (default 2000)
#
# Idle sessions are measured by loadtest/sessions.sh. Everything binds to 127.0.0.1; every
# process started here is stopped on exit. JSON reports go to $OUT (target/loadtest/scale).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" scale
STREAMS="${1:-2000}"
OUT="${OUT:-$REPO/target/loadtest/scale}"
# Two descriptors per stream on the client, one on the gateway, plus upstreams.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
mkdir -p "$OUT"
rm -f "$OUT"/*.json
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# 1. Idle: the gateway with one tenant and two upstreams (stdio and HTTP), no traffic.
UP_PORT="$(free_port)"
"$DEMO" --http "127.0.0.1:$UP_PORT" >/dev/null 2>&1 &
PIDS+=("$!")
wait_port "$UP_PORT"
PORT="$(free_port)"
cat >"$WORK/idle.yaml" <<YAML
listen: 127.0.0.1:$PORT
sessions: {ttl: 1h}
tenants:
  - name: load
    upstreams:
      - {name: local, stdio: {command: "$DEMO", args: [--stdio], sharing: shared}}
      - {name: remote, http: {url: "http://127.0.0.1:$UP_PORT/mcp"}}
YAML
RUST_LOG=warn "$GW" run --config "$WORK/idle.yaml" --reload-poll 0 2>"$WORK/idle.log" &
GWPID=$!; PIDS+=("$GWPID")
wait_port "$PORT"
sleep 2
IDLE_KB="$(rss_kb "$GWPID")"
echo "{\"scenario\": \"idle\", \"gateway_rss_bytes\": $((IDLE_KB * 1024))}" | tee "$OUT/idle.json"

# 2. Open GET streams on the same gateway.
echo "== $STREAMS open GET streams" >&2
"$LOAD" streams --url "http://127.0.0.1:$PORT/t/load/mcp" --count "$STREAMS" --pid "$GWPID" --hold 20 \
    | tee "$OUT/streams.json"
kill "$GWPID"; wait "$GWPID" 2>/dev/null || true

# 3. tools/list over 10 upstreams x 100 tools (the demo's 3 + 97 generated), from the cache.
UPS=""
FIRST=""
for i in $(seq 1 10); do
    p="$(free_port)"
    "$DEMO" --http "127.0.0.1:$p" --extra-tools 97 >/dev/null 2>&1 &
    PIDS+=("$!")
    wait_port "$p"
    UPS+="      - {name: up$i, http: {url: \"http://127.0.0.1:$p/mcp\"}}"$'\n'
    FIRST="${FIRST:-http://127.0.0.1:$p/mcp}"
done
echo "== tools/list of one upstream (100 tools), directly" >&2
"$LOAD" calls --url "$FIRST" --list --sessions 4 --rate 200 --seconds 10 | tee "$OUT/catalog-direct.json"
PORT="$(free_port)"
cat >"$WORK/catalog.yaml" <<YAML
listen: 127.0.0.1:$PORT
sessions: {ttl: 1h}
tenants:
  - name: load
    upstreams:
$UPS
YAML
RUST_LOG=warn "$GW" run --config "$WORK/catalog.yaml" --reload-poll 0 2>"$WORK/catalog.log" &
PIDS+=("$!")
wait_port "$PORT"
echo "== tools/list over 10 upstreams x 100 tools" >&2
"$LOAD" calls --url "http://127.0.0.1:$PORT/t/load/mcp" --list --sessions 4 --rate 200 --seconds 10 \
    | tee "$OUT/catalog.json"
python3 - "$OUT/catalog.json" "$OUT/catalog-direct.json" <<'PY'
import json, sys
r, d = (json.load(open(p)) for p in sys.argv[1:3])
print(f"tools/list through the gateway (10 upstreams, 1,000 tools, one page): p50 {r['latency_ms']['p50']:.3f} ms, p99 {r['latency_ms']['p99']:.3f} ms, {r['errors']} errors")
print(f"tools/list of one upstream directly (100 tools): p50 {d['latency_ms']['p50']:.3f} ms, p99 {d['latency_ms']['p99']:.3f} ms, {d['errors']} errors")
PY
