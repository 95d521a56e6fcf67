#!/usr/bin/env bash
# Memory per idle session: starts the release gateway (in-memory store, then Redis on a private
# redis-server), opens N sessions with sy-load, and prints one JSON report per store.
#
#   bash loadtest/sessions.sh [N]      (default 10000)
#
# SY_GATEWAY=<binary> measures another gateway build (e.g. one before a change).
#
# Everything binds to 127.0.0.1; every process started here is stopped on exit.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" sessions
N="${1:-10000}"
GW="${SY_GATEWAY:-$GW}"

config() { # $1 = listen port, $2 = store YAML
    cat <<YAML
listen: 127.0.0.1:$1
sessions:
  ttl: 1h
  store: $2
tenants:
  - name: load
    # One client opens every session: lift the per-user bound (default 100) past N.
    limits: {sessions_per_user: $((N + 100))}
    upstreams:
      - name: demo
        stdio: {command: "$DEMO", args: [--stdio], sharing: shared}
YAML
}

run_one() { # $1 = label, $2 = store YAML, $3.. = extra sy-load args
    local label="$1" store="$2"; shift 2
    local port; port="$(free_port)"
    config "$port" "$store" >"$WORK/$label.yaml"
    if [[ "$store" != memory ]]; then "$GW" migrate --config "$WORK/$label.yaml" >&2; fi
    RUST_LOG=warn "$GW" run --config "$WORK/$label.yaml" 2>"$WORK/$label.log" &
    local gw=$!; PIDS+=("$gw")
    wait_port "$port"
    echo "== $label: $N sessions" >&2
    "$LOAD" sessions --url "http://127.0.0.1:$port/t/load/mcp" --count "$N" --pid "$gw" "$@" \
        | python3 -c "import json,sys; r=json.load(sys.stdin); r['store']='$label'; print(json.dumps(r))"
    kill "$gw"; wait "$gw" 2>/dev/null || true
}

run_one memory memory

RPORT="$(free_port)"
redis-server --bind 127.0.0.1 --port "$RPORT" --save "" --appendonly no --dir "$WORK" >"$WORK/redis.log" 2>&1 &
PIDS+=("$!")
wait_port "$RPORT"
run_one redis "{redis: {url: \"redis://127.0.0.1:$RPORT\", prefix: sy}}" --redis "redis://127.0.0.1:$RPORT" --prefix sy
