# Shared by the loadtest scripts (sourced, not run): a work directory, every process started
# recorded in PIDS and stopped on exit, the binaries built (release unless SY_PROFILE says
# otherwise: the gateway $GW, the demo server $DEMO, sy-load $LOAD), and port helpers.
# Usage: source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" <label>
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/sy-$1.XXXXXX")"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

command -v redis-server >/dev/null || { echo "redis-server missing: bash scripts/install-test-deps.sh installs it" >&2; exit 1; }
# SY_PROFILE=debug measures a debug build instead (quicker to build, slower to run).
PROFILE="${SY_PROFILE:-release}"
# SY_NO_BUILD=1 measures the binaries already in target/ as they are.
if [[ -n "${SY_NO_BUILD:-}" ]]; then
    :
elif [[ "$PROFILE" == release ]]; then
    cargo build --release --locked -p switchyard -p switchyard-demo-server -p switchyard-loadtest >&2
else
    cargo build --locked -p switchyard -p switchyard-demo-server -p switchyard-loadtest >&2
fi
GW="$REPO/target/$PROFILE/switchyard"
DEMO="$REPO/target/$PROFILE/switchyard-demo-server"
LOAD="$REPO/target/$PROFILE/sy-load"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# wait_port PORT [TRIES]: up to TRIES looks 50 ms apart (default 200: 10 s).
wait_port() {
    for _ in $(seq 1 "${2:-200}"); do
        (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "nothing listens on 127.0.0.1:$1" >&2; return 1
}
