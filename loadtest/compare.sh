#!/usr/bin/env bash
# Side by side in one run: the same tools/call workload against the demo upstream over HTTP
# directly, through a plain reverse proxy for reference (nginx, when installed), then through
# the gateway (in-memory store, Redis store — durable SSE events, the default, and
# `events: fast` — a stdio upstream, and a tenant checking the access token every request
# carries: gateway-auth), and the ratios. Two loads: saturation (closed loop,
# as fast as answers come) and a moderate paced rate (latency added by the gateway), plus
# SSE-streamed calls with progress (and, when LOADS names it, `streamed-paced`: those at the
# moderate rate, for the latency a streamed call gets).
#
#   bash loadtest/compare.sh [SECONDS] [ROUNDS]  (measured seconds per run, default 5; rounds,
#                                                 default 3)
#
# Each round runs every target once, in turn, so a slow spell of a shared machine hits all of
# them; the table shows the median of the rounds, and the CPU time the gateway and the HTTP
# upstream spent per call (from /proc, over the measured window), which a busy shared machine
# blurs less than throughput. (The stdio upstream's CPU is its child process's, not shown.)
# Below it, for the closed loops, each target's per-round ratio to direct and to nginx (its
# throughput over the reference's in the same round): median and spread.
# For Redis-backed targets, the Redis commands and the Redis server's CPU time a call costs
# (INFO commandstats and /proc over the run;
# each run's INFO commandstats and the gateway's /metrics before and after are kept next to
# its report: commands by kind, Redis round trips by operation).
# The gateways log as in production (RUST_LOG unset: info, text; an audit line per tool call)
# to a file. Environment: SESSIONS (saturation, default 32), RATE (moderate load, calls/s, default 500),
# RATE_SESSIONS (default 16). Everything binds to 127.0.0.1; every process started here is
# stopped on exit. The JSON reports are kept in $OUT (default target/loadtest/compare).
#
# Before/after a change, in the same interleaved rounds: SY_BASELINE=<gateway binary> (e.g. a
# build from before it, copied out of target/) adds base-memory, base-redis, base-stdio and base-auth, that build in
# front of the same upstream; LIMITS='<flow map>' (a tenant's `limits:`, e.g. "{requests_per_user:
# {rate: 1000000/s}}") adds limited-memory and limited-redis, this build with those limits.
# ONLY='<targets>' measures just those (and direct, the reference), e.g. ONLY="gateway-memory
# base-memory". LOADS='<loads>' runs just those of saturation, moderate and streamed, e.g. the
# streamed Redis case alone: LOADS=streamed ONLY="gateway-redis base-redis"; the two event
# modes: LOADS="streamed streamed-paced" ONLY="gateway-redis gateway-redis-fast".
# CONNECTIONS=per-session gives each session of the load a connection of its own, as separate
# hosts have (default: the sessions take turns on one shared pool of connections).
# SMOKE=1 exits non-zero when any target had errors or made no call (CI runs
# `SMOKE=1 SY_PROFILE=debug bash loadtest/compare.sh 1 1`: seconds, and never judged on timings).
# SY_GATEWAY=<binary> runs the gateway targets with another build of it (scripts/build-pgo.sh
# trains its instrumented build on this load).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" compare
GW="${SY_GATEWAY:-$GW}"
SECONDS_RUN="${1:-5}"
ROUNDS="${2:-3}"
SESSIONS="${SESSIONS:-32}"
RATE="${RATE:-500}"
RATE_SESSIONS="${RATE_SESSIONS:-16}"
LOADS="${LOADS:-saturation moderate streamed}"
OUT="${OUT:-$REPO/target/loadtest/compare}"
case "${CONNECTIONS:-pooled}" in
    pooled) CONN_ARGS="" ;;
    per-session) CONN_ARGS="--connection-per-session" ;;
    *) echo "compare: CONNECTIONS is pooled or per-session, not $CONNECTIONS" >&2; exit 1 ;;
esac
mkdir -p "$OUT"
rm -f "$OUT"/*.json

# The fast upstream: the project's demo server (Rust), over HTTP.
UP_PORT="$(free_port)"
"$DEMO" --http "127.0.0.1:$UP_PORT" >/dev/null 2>"$WORK/upstream.log" &
UP_PID=$!
PIDS+=("$UP_PID")
wait_port "$UP_PORT"
UPSTREAM="http://127.0.0.1:$UP_PORT/mcp"

RPORT="$(free_port)"
redis-server --bind 127.0.0.1 --port "$RPORT" --save "" --appendonly no --dir "$WORK" >"$WORK/redis.log" 2>&1 &
REDIS_PID=$!
PIDS+=("$REDIS_PID")
wait_port "$RPORT"

declare -A TARGET=([direct]="$UPSTREAM")
declare -A CPU=([direct]="--cpu upstream=$UP_PID")
declare -A ADMIN=()
# $1 = target name, $2 = store YAML, $3 = upstream YAML, $4 = gateway binary (default this
# build's), $5 = the tenant's limits (flow map, default none), $6 = more of the tenant's YAML
# (its `auth`); sets TARGET[$1]
gateway() {
    local label="$1" bin="${4:-$GW}" limits="" port aport; port="$(free_port)"; aport="$(free_port)"
    # Every session of the load comes from one address: the per-user session cap
    # (default 100) is lifted past what the rounds open; other limits come from $5.
    # (A baseline older than `sessions_per_user` refuses the key: SY_BASELINE_LIMITS=0 leaves
    # its limits as they were.)
    if [[ "$bin" == "$GW" || "${SY_BASELINE_LIMITS:-1}" == 1 ]]; then
        local extra="${5:-}"; extra="${extra#\{}"; extra="${extra%\}}"
        limits="    limits: {sessions_per_user: 1000000${extra:+, $extra}}"
    elif [[ -n "${5:-}" ]]; then limits="    limits: $5"; fi
    cat >"$WORK/$label.yaml" <<YAML
listen: 127.0.0.1:$port
admin_listen: 127.0.0.1:$aport
sessions:
  ttl: 1h
  store: $2
tenants:
  - name: load
$limits
${6:-}
    upstreams:
      - $3
YAML
    if [[ "$2" != memory ]]; then "$bin" migrate --config "$WORK/$label.yaml" >&2; fi
    "$bin" run --config "$WORK/$label.yaml" --reload-poll 0 >/dev/null 2>"$WORK/$label.log" &
    local pid=$!
    PIDS+=("$pid")
    wait_port "$port"
    TARGET[$label]="http://127.0.0.1:$port/t/load/mcp"
    ADMIN[$label]="http://127.0.0.1:$aport"
    CPU[$label]="--cpu gateway=$pid --cpu upstream=$UP_PID"
}

# The reference: a plain reverse proxy (nginx, one worker process, keep-alive connections to
# the upstream, no buffering) forwarding bytes without reading them. What it costs is the floor
# any HTTP proxy pays on this machine (sockets, wake-ups); the gateway is measured against it
# too. Left out, and said so, when nginx is not installed (apt-get install nginx-light).
NGINX="$(command -v nginx || { [[ -x /usr/sbin/nginx ]] && echo /usr/sbin/nginx; } || true)"
if [[ -n "$NGINX" ]]; then
    NPORT="$(free_port)"
    mkdir -p "$WORK/nginx"
    cat >"$WORK/nginx/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $WORK/nginx/body;
  proxy_temp_path $WORK/nginx/proxy;
  upstream demo { server 127.0.0.1:$UP_PORT; keepalive 64; }
  server {
    listen 127.0.0.1:$NPORT;
    location / {
      proxy_pass http://demo;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
CONF
    "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" 2>"$WORK/nginx/stderr.log" &
    PIDS+=("$!")
    wait_port "$NPORT"
    NGINX_WORKER="$(pgrep -P "$(cat "$WORK/nginx/nginx.pid")" | head -n 1)"
    TARGET[nginx]="http://127.0.0.1:$NPORT/mcp"
    CPU[nginx]="--cpu gateway=$NGINX_WORKER --cpu upstream=$UP_PID"
else
    echo "compare: nginx is not installed; the reference row (a plain reverse proxy) is left out" >&2
fi

# The authenticated path (gateway-auth, base-auth): the tenant checks every request's access
# token, an RS256 JWT (RSA-2048) whose key set `issuer.py` serves on 127.0.0.1, as a host's
# requests carry one in production; the load sends it with each request.
declare -A AUTH_ARGS=()
start_issuer() {
    command -v openssl >/dev/null || { echo "compare: openssl is needed for the gateway-auth target (apt-get install openssl)" >&2; exit 1; }
    local iport; iport="$(free_port)"
    mkdir -p "$WORK/issuer"
    python3 "$REPO/loadtest/issuer.py" "$WORK/issuer" "$iport" "https://issuer.load.test" \
        "https://load.test/mcp" 2>"$WORK/issuer.log" &
    PIDS+=("$!")
    wait_port "$iport"
    [[ -s "$WORK/issuer/token" ]] || { echo "compare: issuer.py wrote no token" >&2; cat "$WORK/issuer.log" >&2; exit 1; }
    AUTH_YAML="    auth: {issuer: \"https://issuer.load.test\", jwks_url: \"http://127.0.0.1:$iport/jwks\", audiences: [\"https://load.test/mcp\"], algorithms: [RS256]}"
}
HTTP_UP="{name: demo, http: {url: \"$UPSTREAM\"}}"
STDIO_UP="{name: demo, stdio: {command: \"$DEMO\", args: [--stdio], sharing: shared, pool_size: 2}}"
# $1 = key prefix, $2 = extra settings (e.g. "events: fast")
redis_store() { echo "{redis: {url: \"redis://127.0.0.1:$RPORT\", prefix: $1${2:+, $2}}}"; }
ORDER=(direct)
if [[ -n "$NGINX" ]]; then ORDER+=(nginx); fi
ORDER+=(gateway-memory gateway-redis gateway-redis-fast gateway-stdio gateway-auth)
if [[ -n "${SY_BASELINE:-}" ]]; then ORDER+=(base-memory base-redis base-stdio base-auth); fi
if [[ -n "${LIMITS:-}" ]]; then ORDER+=(limited-memory limited-redis); fi
if [[ -n "${ONLY:-}" ]]; then
    ONLY_ORDER=(direct)
    for t in "${ORDER[@]}"; do
        if [[ " $ONLY " == *" $t "* ]]; then ONLY_ORDER+=("$t"); fi
    done
    ORDER=("${ONLY_ORDER[@]}")
fi
wanted() { [[ " ${ORDER[*]} " == *" $1 "* ]]; }
if wanted gateway-memory; then gateway gateway-memory memory "$HTTP_UP"; fi
if wanted gateway-redis; then gateway gateway-redis "$(redis_store sy)" "$HTTP_UP"; fi
if wanted gateway-redis-fast; then gateway gateway-redis-fast "$(redis_store syf "events: fast")" "$HTTP_UP"; fi
if wanted gateway-stdio; then gateway gateway-stdio memory "$STDIO_UP"; fi
if wanted base-memory; then gateway base-memory memory "$HTTP_UP" "$SY_BASELINE"; fi
if wanted base-redis; then gateway base-redis "$(redis_store base)" "$HTTP_UP" "$SY_BASELINE"; fi
if wanted base-stdio; then gateway base-stdio memory "$STDIO_UP" "$SY_BASELINE"; fi
if wanted gateway-auth || wanted base-auth; then start_issuer; fi
if wanted gateway-auth; then
    gateway gateway-auth memory "$HTTP_UP" "$GW" "" "$AUTH_YAML"
    AUTH_ARGS[gateway-auth]="--bearer-file $WORK/issuer/token"
fi
if wanted base-auth; then
    gateway base-auth memory "$HTTP_UP" "$SY_BASELINE" "" "$AUTH_YAML"
    AUTH_ARGS[base-auth]="--bearer-file $WORK/issuer/token"
fi
if wanted limited-memory; then gateway limited-memory memory "$HTTP_UP" "$GW" "$LIMITS"; fi
if wanted limited-redis; then gateway limited-redis "$(redis_store lim)" "$HTTP_UP" "$GW" "$LIMITS"; fi

# The CPU time (clock ticks, user and system) the Redis server has used so far.
redis_cpu_ticks() { awk '{print $14 + $15}' "/proc/$REDIS_PID/stat"; }

# Commands Redis has run so far (every kind, from INFO commandstats).
redis_commands() {
    redis-cli -p "$RPORT" INFO commandstats | sed -n 's/^cmdstat_[^:]*:calls=\([0-9]*\),.*/\1/p' \
        | awk '{n += $1} END {print n + 0}'
}

measure() { # $1 = load name, $2.. = sy-load args
    local load="$1"; shift
    for round in $(seq 1 "$ROUNDS"); do
        for t in "${ORDER[@]}"; do
            echo "== $load, round $round: $t" >&2
            local before="" before_cpu=""; if [[ "$t" == *redis* ]]; then
                before="$(redis_commands)"
                before_cpu="$(redis_cpu_ticks)"
                redis-cli -p "$RPORT" INFO commandstats >"$OUT/$load.$t.$round.cmdstats-before"
                curl -s "${ADMIN[$t]}/metrics" >"$OUT/$load.$t.$round.metrics-before" || true
            fi
            # shellcheck disable=SC2086 # CPU, AUTH_ARGS and CONN_ARGS hold separate arguments
            "$LOAD" calls --url "${TARGET[$t]}" --seconds "$SECONDS_RUN" --warmup 1 ${CPU[$t]} \
                ${AUTH_ARGS[$t]:-} ${CONN_ARGS} "$@" \
                >"$OUT/$load.$t.$round.json"
            # Redis targets: the commands the run cost (warm-up and session setup included).
            if [[ -n "$before" ]]; then
                echo $(( $(redis_commands) - before )) >"$OUT/$load.$t.$round.redis"
                echo $(( $(redis_cpu_ticks) - before_cpu )) >"$OUT/$load.$t.$round.redis-cpu"
                redis-cli -p "$RPORT" INFO commandstats >"$OUT/$load.$t.$round.cmdstats-after"
                curl -s "${ADMIN[$t]}/metrics" >"$OUT/$load.$t.$round.metrics-after" || true
            fi
        done
    done
}

load_wanted() { [[ " $LOADS " == *" $1 "* ]]; }
if load_wanted saturation; then measure saturation --sessions "$SESSIONS"; fi
if load_wanted moderate; then measure moderate --sessions "$RATE_SESSIONS" --rate "$RATE"; fi
if load_wanted streamed; then
    measure streamed --sessions "$SESSIONS" --tool sleep --arguments '{"ms":0,"steps":3}' --progress
fi
if load_wanted streamed-paced; then
    measure streamed-paced --sessions "$RATE_SESSIONS" --rate "$RATE" --tool sleep \
        --arguments '{"ms":0,"steps":3}' --progress
fi

python3 - "$OUT" "$ROUNDS" "$LOADS" "${ORDER[@]}" <<'PY'
import json, sys, os, statistics
out, rounds, loads, order = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4:]
loads = [l for l in ("saturation", "moderate", "streamed", "streamed-paced") if l in loads]
def runs(load, t):
    return [json.load(open(os.path.join(out, f"{load}.{t}.{r}.json"))) for r in range(1, rounds + 1)]
def med(load, t):
    rs = runs(load, t)
    m = lambda f: statistics.median(f(x) for x in rs)
    return {
        "tput": m(lambda x: x["throughput_per_s"]),
        "p50": m(lambda x: x["latency_ms"]["p50"]), "p90": m(lambda x: x["latency_ms"]["p90"]),
        "p99": m(lambda x: x["latency_ms"]["p99"]), "errors": sum(x["errors"] for x in rs),
        "spread": (min(x["throughput_per_s"] for x in rs), max(x["throughput_per_s"] for x in rs)),
        "gw_cpu": m(lambda x: x["cpu_us_per_call"].get("gateway", 0.0)),
        "up_cpu": m(lambda x: x["cpu_us_per_call"].get("upstream", 0.0)),
        "redis": redis_per_call(load, t, rs, "redis", 1.0),
        "redis_cpu": redis_per_call(load, t, rs, "redis-cpu", 1e6 / os.sysconf("SC_CLK_TCK")),
    }
def redis_per_call(load, t, rs, kind, scale):
    # Redis's commands (or CPU time, in clock ticks) over the whole run (1 s warm-up included)
    # per call, the warm-up's calls estimated at the measured rate.
    paths = [os.path.join(out, f"{load}.{t}.{r}.{kind}") for r in range(1, rounds + 1)]
    if not all(os.path.exists(p) for p in paths):
        return None
    return statistics.median(
        int(open(p).read()) * scale / max(1.0, x["calls"] * (x["seconds"] + 1) / x["seconds"])
        for p, x in zip(paths, rs))
print(f"median of {rounds} rounds of {json.load(open(os.path.join(out, f'{loads[0]}.direct.1.json')))['seconds']:.0f} s each")
print(f"{'load':<14} {'target':<18} {'calls/s':>9} {'(min-max)':>15} {'ratio':>6} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'errors':>6} {'gw cpu us/call':>14} {'upstream cpu us/call':>20} {'redis cmds/call':>15} {'redis cpu us/call':>17}")
for load in loads:
    base = med(load, "direct")
    for t in order:
        x = med(load, t)
        lo, hi = x["spread"]
        print(f"{load:<14} {t:<18} {x['tput']:>9.0f} {f'({lo:.0f}-{hi:.0f})':>15} {x['tput']/base['tput']:>6.2f} {x['p50']:>8.3f} {x['p90']:>8.3f} {x['p99']:>8.3f} {x['errors']:>6} {x['gw_cpu']:>14.1f} {x['up_cpu']:>20.1f} {'-' if x['redis'] is None else format(x['redis'], '.2f'):>15} {'-' if x['redis_cpu'] is None else format(x['redis_cpu'], '.1f'):>17}")
# Each round's throughput over the reference's in that same round (direct, and nginx when
# measured): the median and spread of those ratios, which a slow spell hitting one round blurs
# less than the ratio of the medians above. Closed loops only (a paced load's ratio is 1).
for load in [l for l in loads if l in ("saturation", "streamed")]:
    for ref in [r for r in ("direct", "nginx") if r in order]:
        for t in [t for t in order if t not in ("direct", ref)]:
            rs = sorted(a["throughput_per_s"] / max(1e-9, b["throughput_per_s"])
                        for a, b in zip(runs(load, t), runs(load, ref)))
            print(f"per-round ratio ({load}) {t} / {ref}: median {statistics.median(rs):.2f} ({rs[0]:.2f}-{rs[-1]:.2f})")
for paced in ("moderate", "streamed-paced"):
    base = med(paced, "direct") if paced in loads else None
    for t in order[1:] if base else []:
        x = med(paced, t)
        print(f"added latency ({paced}) at {runs(paced, t)[0]['rate_target']:.0f} calls/s, {t}: p50 {x['p50']-base['p50']:+.3f} ms, p99 {x['p99']-base['p99']:+.3f} ms")
# A smoke run (SMOKE=1, the CI's) fails on errors or on a target that made no call; never on
# timings.
if os.environ.get("SMOKE") == "1":
    bad = [(load, t, med(load, t)) for load in loads for t in order]
    bad = [(load, t, x) for load, t, x in bad if x["errors"] > 0 or x["tput"] <= 0]
    for load, t, x in bad:
        print(f"smoke: {load} {t}: {x['errors']} errors, {x['tput']:.0f} calls/s", file=sys.stderr)
    sys.exit(1 if bad else 0)
PY
