#!/usr/bin/env bash
# A client that falls behind a flood of notifications: starts the gateway in front of the demo
# server's `flood` tool (stdio), has sy-load call it with COUNT notifications, pause after
# the first event and then read slowly — on the same connection, then again resuming on a new
# one — and prints one JSON report per run: what the client received, the gateway's peak
# memory growth and CPU time. The last two runs read as fast as they can, the last one while
# the stream is mirrored to a private redis-server (a copy that must not fall behind without
# bound).
#
#   bash loadtest/flood.sh [COUNT]      (default 100000)
#
# SY_GATEWAY=<binary> measures another gateway build against the same demo upstream (this
# checkout's switchyard-demo-server, which has the tool), e.g. a build from before a change.
# Everything binds to 127.0.0.1; every process started here is stopped on exit.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" flood
COUNT="${1:-100000}"
GATEWAY="${SY_GATEWAY:-$GW}"

run_one() { # $1 = label, $2 = store YAML, $3.. = extra sy-load args
    local label="$1" store="$2"; shift 2
    local port admin; port="$(free_port)"; admin="$(free_port)"
    cat >"$WORK/$label.yaml" <<YAML
listen: 127.0.0.1:$port
admin_listen: 127.0.0.1:$admin
sessions: {store: $store}
tenants:
  - name: load
    upstreams:
      - name: demo
        stdio: {command: "$DEMO", args: [--stdio, --hostile-tools]}
YAML
    if [[ "$store" != memory ]]; then "$GATEWAY" migrate --config "$WORK/$label.yaml" >&2; fi
    RUST_LOG=warn "$GATEWAY" run --config "$WORK/$label.yaml" 2>"$WORK/$label.log" &
    local gw=$!; PIDS+=("$gw")
    wait_port "$port"
    echo "== $label: $COUNT notifications" >&2
    "$LOAD" notification-flood --url "http://127.0.0.1:$port/t/load/mcp" --count "$COUNT" --pid "$gw" \
        --metrics "http://127.0.0.1:$admin/metrics" "$@"
    kill "$gw"; wait "$gw" 2>/dev/null || true
}

run_one slow-reader memory --pause 5 --read-rate 1000000
run_one resume memory --pause 5 --read-rate 1000000 --resume
run_one fast-reader memory --pause 0 --read-rate 0

RPORT="$(free_port)"
redis-server --bind 127.0.0.1 --port "$RPORT" --save "" --appendonly no --dir "$WORK" >"$WORK/redis.log" 2>&1 &
PIDS+=("$!")
wait_port "$RPORT"
run_one redis-fast-reader "{redis: {url: \"redis://127.0.0.1:$RPORT\", prefix: sy}}" --pause 0 --read-rate 0
