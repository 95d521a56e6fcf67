#!/usr/bin/env bash
# Memory per idle session, for each upstream kind and each store: starts the release gateway
# (in-memory store, then Redis on a private redis-server) in front of one upstream of the kind,
# opens N sessions with sy-load after a warm-up, and prints one JSON report per kind and store.
#
#   bash loadtest/sessions.sh [N]      (default 10000)
#
# The figure is what one more session costs: the N are opened after WARMUP sessions (default
# half as many as measured), so what a replica sets up once (allocator pages of each size,
# tables, code paged in) is not spread over them. WARMUP=32 gives the growth from a nearly
# fresh replica instead (the figures of the rounds before 2026-11-29).
#
# Upstream kinds (KINDS='<kinds>' picks some, default all):
#   stdio-shared       the demo server as one stdio process shared by every session
#   stdio-per-session  a demo server process per session: PROCESS_N sessions (default 200, a
#                      process each), the processes' memory reported apart
#                      (`child_pss_bytes_per_session`), not in the gateway's figure
#   http               the demo server over Streamable HTTP (an upstream session per session)
#   sse                the demo server over the 2024-11-05 HTTP+SSE transport (an open
#                      upstream stream per session)
# STORES='<stores>' picks memory and/or redis (default both).
# SY_GATEWAY=<binary> measures another gateway build (e.g. one before a change).
#
# Everything binds to 127.0.0.1; every process started here is stopped on exit.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" sessions
N="${1:-10000}"
PROCESS_N="${PROCESS_N:-200}"
KINDS="${KINDS:-stdio-shared stdio-per-session http sse}"
STORES="${STORES:-memory redis}"
GW="${SY_GATEWAY:-$GW}"

# The demo server over HTTP, for the http and sse kinds (one process for all runs).
UP_PORT="$(free_port)"
"$DEMO" --http "127.0.0.1:$UP_PORT" >/dev/null 2>"$WORK/upstream.log" &
PIDS+=("$!")
wait_port "$UP_PORT"

RPORT="$(free_port)"
redis-server --bind 127.0.0.1 --port "$RPORT" --save "" --appendonly no --dir "$WORK" >"$WORK/redis.log" 2>&1 &
PIDS+=("$!")
wait_port "$RPORT"

upstream() { # $1 = kind: the upstream's YAML (flow map)
    case "$1" in
        stdio-shared) echo "{name: demo, stdio: {command: \"$DEMO\", args: [--stdio], sharing: shared}}" ;;
        stdio-per-session) echo "{name: demo, stdio: {command: \"$DEMO\", args: [--stdio], sharing: per-session}}" ;;
        http) echo "{name: demo, http: {url: \"http://127.0.0.1:$UP_PORT/mcp\"}}" ;;
        sse) echo "{name: demo, sse: {url: \"http://127.0.0.1:$UP_PORT/sse\"}}" ;;
        *) echo "unknown upstream kind: $1 (stdio-shared, stdio-per-session, http, sse)" >&2; return 1 ;;
    esac
}

config() { # $1 = listen port, $2 = store YAML, $3 = upstream YAML, $4 = sessions
    cat <<YAML
listen: 127.0.0.1:$1
sessions:
  ttl: 1h
  store: $2
limits:
  max_session_processes: $(($4 + 100))
tenants:
  - name: load
    # One client opens every session: lift the per-user bounds past the sessions opened.
    limits: {sessions_per_user: $(($4 + 100)), session_processes: $(($4 + 100))}
    upstreams:
      - $3
YAML
}

run_one() { # $1 = kind, $2 = store label, $3 = store YAML, $4.. = extra sy-load args
    local kind="$1" label="$2" store="$3"; shift 3
    local port n="$N" up; port="$(free_port)"
    [[ "$kind" == stdio-per-session ]] && n="$PROCESS_N"
    local warm="${WARMUP:-$((n / 2))}"
    up="$(upstream "$kind")"
    config "$port" "$store" "$up" "$((n + warm))" >"$WORK/$kind-$label.yaml"
    if [[ "$label" != memory ]]; then "$GW" migrate --config "$WORK/$kind-$label.yaml" >&2; fi
    RUST_LOG=warn "$GW" run --config "$WORK/$kind-$label.yaml" --reload-poll 0 2>"$WORK/$kind-$label.log" &
    local gw=$!; PIDS+=("$gw")
    wait_port "$port"
    echo "== $kind, $label store: $n sessions after $warm" >&2
    "$LOAD" sessions --url "http://127.0.0.1:$port/t/load/mcp" --count "$n" --warmup "$warm" --pid "$gw" "$@" \
        | python3 -c "import json,sys; r=json.load(sys.stdin); r['upstream']='$kind'; r['store']='$label'; print(json.dumps(r))"
    kill "$gw"; wait "$gw" 2>/dev/null || true
}

for kind in $KINDS; do
    for store in $STORES; do
        case "$store" in
            memory) run_one "$kind" memory memory ;;
            redis)
                redis-cli -p "$RPORT" flushall >/dev/null
                run_one "$kind" redis "{redis: {url: \"redis://127.0.0.1:$RPORT\", prefix: sy}}" \
                    --redis "redis://127.0.0.1:$RPORT" --prefix sy ;;
            *) echo "unknown store: $store (memory, redis)" >&2; exit 1 ;;
        esac
    done
done
