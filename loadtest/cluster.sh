#!/usr/bin/env bash
# Scale on Redis Cluster: a 3-primary, 3-replica cluster started here, N idle sessions opened
# through 3 gateway replicas at once (a third each) — memory per session in each gateway and in
# Redis (the primaries' `used_memory`, summed), sessions opened per second, keys per primary —
# then saturation throughput of SSE-streamed calls (3 progress notifications each) through one
# gateway on the cluster against one on a single Redis, interleaved rounds, medians.
#
#   bash loadtest/cluster.sh [N] [ROUNDS] [SECONDS]     (defaults 100000, 3, 5)
#
# Everything binds to 127.0.0.1; every process started here is stopped on exit. JSON reports go
# to $OUT (target/loadtest/cluster).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" cluster
N="${1:-100000}"
ROUNDS="${2:-3}"
SECONDS_RUN="${3:-5}"
OUT="${OUT:-$REPO/target/loadtest/cluster}"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
mkdir -p "$OUT"
rm -f "$OUT"/*.json
command -v redis-cli >/dev/null || { echo "redis-cli missing: bash scripts/install-test-deps.sh installs it" >&2; exit 1; }

# 1. The cluster: six nodes, `--cluster-replicas 1` makes three of them replicas. A node also
# listens on its port + 10000 (the cluster bus), so ports are picked below 55536 with both free.
cluster_port() {
    python3 - <<'PY'
import random, socket
for _ in range(1000):
    p = random.randint(20000, 45000)
    try:
        for q in (p, p + 10000):
            s = socket.socket(); s.bind(("127.0.0.1", q)); s.close()
        print(p); break
    except OSError:
        pass
PY
}
NODES=()
for i in 1 2 3 4 5 6; do
    p="$(cluster_port)"
    mkdir -p "$WORK/node-$p"
    redis-server --bind 127.0.0.1 --port "$p" --cluster-enabled yes \
        --cluster-config-file "$WORK/node-$p/nodes.conf" --cluster-node-timeout 5000 \
        --save "" --appendonly no --dir "$WORK/node-$p" >"$WORK/node-$p.log" 2>&1 &
    PIDS+=("$!")
    NODES+=("$p")
done
for p in "${NODES[@]}"; do wait_port "$p"; done
redis-cli --cluster create $(printf '127.0.0.1:%s ' "${NODES[@]}") --cluster-replicas 1 \
    --cluster-yes >"$WORK/create.log" 2>&1 \
    || { cat "$WORK/create.log" >&2; echo "cluster create failed" >&2; exit 1; }
for _ in $(seq 1 300); do
    ok=0
    for p in "${NODES[@]}"; do
        redis-cli -p "$p" CLUSTER INFO | grep -q '^cluster_state:ok' && ok=$((ok + 1))
    done
    [[ "$ok" == 6 ]] && break
    sleep 0.1
done
[[ "$ok" == 6 ]] || { echo "the cluster did not reach cluster_state:ok" >&2; exit 1; }
PRIMARIES=()
for p in "${NODES[@]}"; do
    [[ "$(redis-cli -p "$p" ROLE | head -1)" == master ]] && PRIMARIES+=("$p")
done
[[ "${#PRIMARIES[@]}" == 3 ]] || { echo "expected 3 primaries, found ${#PRIMARIES[@]}" >&2; exit 1; }
SEEDS="$(printf '"redis://127.0.0.1:%s", ' "${PRIMARIES[@]}")"
CLUSTER_STORE="{redis: {cluster: [${SEEDS%, }], prefix: sy}}"

used_memory() { # the primaries' used_memory, summed
    local total=0 p
    for p in "${PRIMARIES[@]}"; do
        total=$((total + $(redis-cli -p "$p" INFO memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p')))
    done
    echo "$total"
}

config() { # $1 = listen port, $2 = store YAML, $3 = upstream YAML
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
      - $3
YAML
}

gateway() { # $1 = label, $2 = store YAML, $3 = upstream YAML; sets PORT and GW_PID
    PORT="$(free_port)"
    config "$PORT" "$2" "$3" >"$WORK/$1.yaml"
    "$GW" migrate --config "$WORK/$1.yaml" >&2
    RUST_LOG=warn "$GW" run --config "$WORK/$1.yaml" 2>"$WORK/$1.log" &
    GW_PID=$!
    PIDS+=("$GW_PID")
    wait_port "$PORT"
}

# 2. N idle sessions over three replicas.
STDIO_UP="{name: demo, stdio: {command: \"$DEMO\", args: [--stdio], sharing: shared}}"
MEM_BEFORE="$(used_memory)"
LOADERS=()
for r in 1 2 3; do
    gateway "replica-$r" "$CLUSTER_STORE" "$STDIO_UP"
    echo "== replica $r (port $PORT): $((N / 3)) sessions" >&2
    "$LOAD" sessions --url "http://127.0.0.1:$PORT/t/load/mcp" --count "$((N / 3))" --pid "$GW_PID" \
        >"$OUT/sessions.replica-$r.json" &
    LOADERS+=("$!")
done
for l in "${LOADERS[@]}"; do wait "$l"; done
MEM_AFTER="$(used_memory)"
KEYS=()
for p in "${PRIMARIES[@]}"; do KEYS+=("$(redis-cli -p "$p" DBSIZE)"); done
python3 - "$OUT" "$MEM_BEFORE" "$MEM_AFTER" "${KEYS[@]}" >"$OUT/sessions.json" <<'PY'
import json, sys
out, before, after, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), [int(k) for k in sys.argv[4:]]
rs = [json.load(open(f"{out}/sessions.replica-{r}.json")) for r in (1, 2, 3)]
n = sum(r["sessions"] for r in rs)
print(json.dumps({
    "scenario": "idle sessions on a 3-primary cluster through 3 replicas",
    "sessions": n,
    "sessions_per_second": n / max(r["seconds"] for r in rs),
    "gateway_bytes_per_session": [round(r["gateway_bytes_per_session"]) for r in rs],
    "gateway_rss_after_bytes": [r["gateway_rss_after_bytes"] for r in rs],
    "redis_used_memory_per_session_bytes": round((after - before) / n),
    "keys_per_primary": keys,
}))
PY
cat "$OUT/sessions.json"
for pid in "${PIDS[@]:6}"; do kill "$pid" 2>/dev/null || true; done

# 3. Streamed calls: one gateway on the cluster, one on a single Redis, same HTTP upstream.
UP_PORT="$(free_port)"
"$DEMO" --http "127.0.0.1:$UP_PORT" >/dev/null 2>"$WORK/upstream.log" &
PIDS+=("$!")
wait_port "$UP_PORT"
HTTP_UP="{name: demo, http: {url: \"http://127.0.0.1:$UP_PORT/mcp\"}}"
SINGLE="$(free_port)"
redis-server --bind 127.0.0.1 --port "$SINGLE" --save "" --appendonly no --dir "$WORK" >"$WORK/single.log" 2>&1 &
PIDS+=("$!")
wait_port "$SINGLE"
declare -A URL CPU
gateway calls-cluster "{redis: {cluster: [${SEEDS%, }], prefix: calls}}" "$HTTP_UP"
URL[cluster]="http://127.0.0.1:$PORT/t/load/mcp"; CPU[cluster]="$GW_PID"
gateway calls-single "{redis: {url: \"redis://127.0.0.1:$SINGLE\", prefix: calls}}" "$HTTP_UP"
URL[single]="http://127.0.0.1:$PORT/t/load/mcp"; CPU[single]="$GW_PID"
for round in $(seq 1 "$ROUNDS"); do
    for t in single cluster; do
        echo "== streamed calls, $t, round $round" >&2
        "$LOAD" calls --url "${URL[$t]}" --sessions 32 --seconds "$SECONDS_RUN" --warmup 1 \
            --cpu "gateway=${CPU[$t]}" --tool sleep --arguments '{"ms":0,"steps":3}' --progress \
            >"$OUT/streamed.$t.$round.json"
    done
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, sys, statistics
out, rounds = sys.argv[1], int(sys.argv[2])
def med(t, f):
    return statistics.median(f(json.load(open(f"{out}/streamed.{t}.{r}.json"))) for r in range(1, rounds + 1))
rows = {}
for t in ("single", "cluster"):
    rows[t] = {
        "calls_per_s": med(t, lambda x: x["throughput_per_s"]),
        "p50_ms": med(t, lambda x: x["latency_ms"]["p50"]),
        "p99_ms": med(t, lambda x: x["latency_ms"]["p99"]),
        "gw_cpu_us_per_call": med(t, lambda x: x["cpu_us_per_call"]["gateway"]),
        "errors": sum(json.load(open(f"{out}/streamed.{t}.{r}.json"))["errors"] for r in range(1, rounds + 1)),
    }
rows["cluster_vs_single"] = rows["cluster"]["calls_per_s"] / rows["single"]["calls_per_s"]
print(json.dumps({"scenario": f"streamed calls, median of {rounds} rounds", **rows}))
PY
