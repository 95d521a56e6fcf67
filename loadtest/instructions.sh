#!/usr/bin/env bash
# Instructions per forwarded call, counted with callgrind: the measure of a change's cost that
# a busy or shared machine does not blur (timings on two shared cores move by a third from one
# hour to the next; instruction counts move by about 1 %). The release gateway runs under
# `valgrind --tool=callgrind` in front of the demo upstream over HTTP while `sy-load calls`
# drives SESSIONS sessions, once for SHORT and once for LONG measured seconds; the figure is the
# difference of the two runs' instruction totals over the difference of their calls, so
# start-up, session set-up, warm-up and shut-down, the same in both, drop out.
#
#   bash loadtest/instructions.sh [SHORT] [LONG]   (measured seconds, default 3 and 12)
#
# Environment: CALLS=plain (default: `echo`, answered as one JSON body) or streamed (`sleep`
# with 3 progress steps and a progress token: answered over SSE with 3 notifications first);
# STORE=memory (default) or redis (a private redis-server; durable SSE events, the default);
# SESSIONS (default 8); RUNS (pairs of runs, default 1; each pair's figure is printed, so the
# spread between them shows); SY_GATEWAY=<binary> counts another build (e.g. one from before a
# change, or target/pgo/switchyard). Under callgrind the gateway runs ~50 times slower, so a
# pair of runs takes about a minute. The callgrind outputs and load reports are kept in $OUT
# (default target/loadtest/instructions) for `callgrind_annotate` (the gateway's release
# profile keeps line tables, so functions and lines are named). Needs valgrind
# (`apt-get install valgrind`). ALLOCS=N also counts the calls into the heap allocator by the
# code that made them and prints each pair's allocations per call with the N sites that make
# the most (loadtest/alloc_sites.py; needs `addr2line`, from binutils). Everything binds to 127.0.0.1; every process started here is
# stopped on exit.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" instructions
command -v valgrind >/dev/null || { echo "instructions: valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
GW="${SY_GATEWAY:-$GW}"
SHORT="${1:-3}"
LONG="${2:-12}"
CALLS_KIND="${CALLS:-plain}"
STORE_KIND="${STORE:-memory}"
SESSIONS="${SESSIONS:-8}"
RUNS="${RUNS:-1}"
ALLOCS="${ALLOCS:-}"
VG_ARGS=()
if [[ -n "$ALLOCS" ]]; then
    command -v addr2line >/dev/null || { echo "instructions: ALLOCS needs addr2line (apt-get install binutils)" >&2; exit 1; }
    VG_ARGS=(--dump-instr=yes --compress-strings=no --compress-pos=no)
fi
OUT="${OUT:-$REPO/target/loadtest/instructions}"
mkdir -p "$OUT"
case "$CALLS_KIND" in
    plain) LOAD_ARGS=() ;;
    streamed) LOAD_ARGS=(--tool sleep --arguments '{"ms":0,"steps":3}' --progress) ;;
    *) echo "instructions: CALLS is plain or streamed, not $CALLS_KIND" >&2; exit 1 ;;
esac
(( LONG > SHORT )) || { echo "instructions: LONG ($LONG) must be longer than SHORT ($SHORT)" >&2; exit 1; }

UP_PORT="$(free_port)"
"$DEMO" --http "127.0.0.1:$UP_PORT" >/dev/null 2>"$WORK/upstream.log" &
PIDS+=("$!")
wait_port "$UP_PORT"
case "$STORE_KIND" in
    memory) STORE_YAML=memory ;;
    redis)
        RPORT="$(free_port)"
        redis-server --bind 127.0.0.1 --port "$RPORT" --save "" --appendonly no --dir "$WORK" >"$WORK/redis.log" 2>&1 &
        PIDS+=("$!")
        wait_port "$RPORT"
        STORE_YAML="{redis: {url: \"redis://127.0.0.1:$RPORT\", prefix: ins}}"
        ;;
    *) echo "instructions: STORE is memory or redis, not $STORE_KIND" >&2; exit 1 ;;
esac

# One run: the gateway under callgrind for $1 measured seconds; prints "<calls> <instructions>".
counted_run() {
    local seconds="$1" name="$2" port aport pid
    port="$(free_port)"; aport="$(free_port)"
    cat >"$WORK/$name.yaml" <<YAML
listen: 127.0.0.1:$port
admin_listen: 127.0.0.1:$aport
sessions:
  ttl: 1h
  store: $STORE_YAML
tenants:
  - name: load
    limits: {sessions_per_user: 1000000}
    upstreams:
      - {name: demo, http: {url: "http://127.0.0.1:$UP_PORT/mcp"}}
YAML
    if [[ "$STORE_KIND" == redis ]]; then "$GW" migrate --config "$WORK/$name.yaml" >&2; fi
    valgrind --tool=callgrind "${VG_ARGS[@]}" --callgrind-out-file="$OUT/$name.callgrind" \
        "$GW" run --config "$WORK/$name.yaml" --reload-poll 0 >/dev/null 2>"$OUT/$name.log" &
    pid=$!
    PIDS+=("$pid")
    # Slow to start under valgrind: up to a minute.
    wait_port "$port" 1200
    "$LOAD" calls --url "http://127.0.0.1:$port/t/load/mcp" --sessions "$SESSIONS" \
        --seconds "$seconds" --warmup 1 "${LOAD_ARGS[@]}" >"$OUT/$name.json"
    # A graceful stop: callgrind writes its counts when the process exits.
    kill -TERM "$pid"
    wait "$pid" || true
    python3 - "$OUT/$name.json" "$OUT/$name.callgrind" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
if report.get("errors"):
    sys.exit(f"instructions: the load saw errors: {report['errors']}")
total = next(int(l.split()[1]) for l in open(sys.argv[2]) if l.startswith(("summary:", "totals:")))
print(report["calls"], total)
PY
}

echo "instructions: $CALLS_KIND calls, $STORE_KIND store, $SESSIONS sessions, ${SHORT} s and ${LONG} s runs, $GW" >&2
for run in $(seq 1 "$RUNS"); do
    read -r c1 i1 < <(counted_run "$SHORT" "run$run-short")
    read -r c2 i2 < <(counted_run "$LONG" "run$run-long")
    (( c2 > c1 )) || { echo "instructions: the long run made no more calls ($c2) than the short one ($c1)" >&2; exit 1; }
    echo "run $run: $(( (i2 - i1) / (c2 - c1) )) instructions per call ($c1 and $c2 calls; $i1 and $i2 instructions)"
    if [[ -n "$ALLOCS" ]]; then
        python3 "$(dirname "${BASH_SOURCE[0]}")/alloc_sites.py" "$GW" \
            "$OUT/run$run-short.callgrind" "$c1" "$OUT/run$run-long.callgrind" "$c2" "$ALLOCS"
    fi
done
