#!/usr/bin/env bash
# The connection-level attacks of the README's "Limits" section, each against a fresh gateway
# (release build, one tenant `demo` with the demo server as a stdio upstream, on 127.0.0.1):
#   1. slowloris: 1,000 connections that never finish a request head, held 30 s
#   2. slow bodies: 300 clients announcing 1,000,000 bytes, sending 900,000, then stalling
#   3. flood: NOFILE + 2,000 idle connections against a gateway limited to NOFILE descriptors
# Each prints one JSON report (sy-load) with what the gateway answered, when it closed, its
# memory, and whether /healthz (MCP and admin listeners) answered during the attack.
#
# Usage: [ATTACKS="slowloris slow_bodies flood"] bash loadtest/attacks.sh [GATEWAY_BINARY] [NOFILE]
#   GATEWAY_BINARY: default this checkout's release build; give an older build to compare.
#   NOFILE: the gateway's RLIMIT_NOFILE (soft = hard) for every run, default 4096.
# All connections come from 127.0.0.1, so a gateway with a per-client cap is given
# `max_connections_per_client: 100000` (to model attackers on many addresses; the default cap
# of 512 would refuse most of each attack with 429 first). Everything else is the default.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" attacks
TARGET="${1:-$GW}"
NOFILE="${2:-4096}"
ulimit -n "$(ulimit -Hn)"   # the attacker needs more descriptors than the gateway has

config() { # <port> <admin port> <file>
    cat >"$3" <<EOF
listen: 127.0.0.1:$1
admin_listen: 127.0.0.1:$2
tenants:
  - name: demo
    upstreams:
      - name: local
        stdio: {command: "$DEMO", args: [--stdio]}
EOF
    # Builds that know the connection limits get the per-client cap lifted (see above).
    local lifted="$3.lifted"
    { echo "limits: {max_connections_per_client: 100000}"; cat "$3"; } >"$lifted"
    if "$TARGET" check --config "$lifted" >/dev/null 2>&1; then mv "$lifted" "$3"; else rm -f "$lifted"; fi
}

start() { # <name>: starts the gateway; sets PORT, ADMIN, GPID
    PORT=$(free_port); ADMIN=$(free_port)
    config "$PORT" "$ADMIN" "$WORK/$1.yaml"
    (ulimit -n "$NOFILE"; exec "$TARGET" run --config "$WORK/$1.yaml") 2>"$WORK/$1.log" &
    GPID=$!; PIDS+=("$GPID")
    wait_port "$PORT"; wait_port "$ADMIN"
    sleep 0.5
    echo "# $1: gateway pid $GPID, RLIMIT_NOFILE $NOFILE, RSS at start $(awk '/VmRSS/{print $2" "$3}' /proc/$GPID/status)" >&2
}

stop() { # <name>: stops the gateway, counts accept errors in its log
    kill "$GPID" 2>/dev/null || true
    wait "$GPID" 2>/dev/null || true
    echo "# $1: 'accept failed' lines in the gateway log: $(grep -c 'accept failed' "$WORK/$1.log" || true)" >&2
}

probes() { echo --probe "http://127.0.0.1:$PORT/healthz" --probe "http://127.0.0.1:$ADMIN/healthz"; }

slowloris() {
    start slowloris
    "$LOAD" slowloris --addr "127.0.0.1:$PORT" --count 1000 --hold 30 $(probes)
    stop slowloris
}

slow_bodies() {
    start slow-bodies
    "$LOAD" slow-bodies --addr "127.0.0.1:$PORT" --path /t/demo/mcp --count 300 \
        --length 1000000 --sent 900000 --hold 30 --pid "$GPID"
    stop slow-bodies
}

flood() {
    start flood
    "$LOAD" connection-flood --addr "127.0.0.1:$PORT" --count $((NOFILE + 2000)) --hold 5 --pid "$GPID" \
        --metrics "http://127.0.0.1:$ADMIN/metrics" $(probes)
    stop flood
}

for attack in ${ATTACKS:-slowloris slow_bodies flood}; do "$attack"; done
