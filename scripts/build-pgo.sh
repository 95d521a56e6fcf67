#!/usr/bin/env bash
# A profile-guided release build of the gateway (PGO). An instrumented build of the gateway
# runs the side-by-side load (loadtest/compare.sh: memory and Redis stores, an HTTP and a stdio
# upstream, a tenant checking access tokens; plain calls at saturation and at a paced rate, calls streamed over SSE with
# progress), the counts it wrote are merged, and the release build is made again with them, so
# the compiler lays out and inlines the code by how a forwarded call actually runs. Same
# source, same behaviour; measured in README, Performance ("A profile-guided build").
#
#   bash scripts/build-pgo.sh          the gateway at target/pgo/switchyard
#
# Needs llvm-profdata of the LLVM version rustc is built on (`rustc -vV`): rustup's
# `llvm-tools` component, or Debian's `llvm-<major>` package (rustc 1.95: LLVM 22,
# `apt-get install llvm-22`); the load needs redis-server (scripts/install-test-deps.sh) and
# openssl (the authenticated target's token issuer).
# Environment: PGO_SECONDS (seconds per load in training, default 3), LLVM_PROFDATA (the tool).
# Two release builds from nothing (~6 min each on two cores) and ~1 min of load.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

HOST="$(rustc -vV | sed -n 's/^host: //p')"
LLVM_MAJOR="$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')"

# The profile's format is the LLVM version's: a tool of another major version cannot read it.
profdata_major() { "$1" --version 2>/dev/null | sed -n 's/.*LLVM version \([0-9]*\).*/\1/p' | head -n 1; }
find_profdata() {
    local c
    for c in "${LLVM_PROFDATA:-}" "$(rustc --print sysroot)/lib/rustlib/$HOST/bin/llvm-profdata" \
        "llvm-profdata-$LLVM_MAJOR" "/usr/lib/llvm-$LLVM_MAJOR/bin/llvm-profdata" llvm-profdata; do
        [[ -n "$c" ]] && command -v "$c" >/dev/null 2>&1 || continue
        if [[ "$(profdata_major "$c")" == "$LLVM_MAJOR" ]]; then command -v "$c"; return 0; fi
    done
    return 1
}
PROFDATA="$(find_profdata)" || {
    echo "build-pgo: no llvm-profdata of LLVM $LLVM_MAJOR (rustc's): 'rustup component add llvm-tools'" \
        "or 'apt-get install llvm-$LLVM_MAJOR', or set LLVM_PROFDATA" >&2
    exit 1
}
command -v redis-server >/dev/null || {
    echo "build-pgo: redis-server missing (the training load uses a Redis store):" \
        "bash scripts/install-test-deps.sh installs it" >&2
    exit 1
}

OUT="$REPO/target/pgo"
rm -rf "$OUT/raw" "$OUT/train"
mkdir -p "$OUT/raw"

# Builds go to their own target directories, for the host target named explicitly, so the
# flags reach the gateway and its dependencies but not build scripts and proc macros.
echo "build-pgo: the instrumented build" >&2
RUSTFLAGS="-Cprofile-generate=$OUT/raw" CARGO_TARGET_DIR="$OUT/gen" \
    cargo build --release --locked -p switchyard --target "$HOST"

echo "build-pgo: training (loadtest/compare.sh ${PGO_SECONDS:-3} 1 with the instrumented gateway)" >&2
LLVM_PROFILE_FILE="$OUT/raw/%p-%m.profraw" SY_GATEWAY="$OUT/gen/$HOST/release/switchyard" \
    ONLY="gateway-memory gateway-redis gateway-redis-fast gateway-stdio gateway-auth" OUT="$OUT/train" \
    bash loadtest/compare.sh "${PGO_SECONDS:-3}" 1 >&2
shopt -s nullglob
raw=("$OUT"/raw/*.profraw)
if (( ${#raw[@]} == 0 )); then
    echo "build-pgo: the instrumented gateway wrote no profile (did it exit on SIGTERM?)" >&2
    exit 1
fi
"$PROFDATA" merge -o "$OUT/switchyard.profdata" "${raw[@]}"

echo "build-pgo: the release build with the profile" >&2
RUSTFLAGS="-Cprofile-use=$OUT/switchyard.profdata" CARGO_TARGET_DIR="$OUT/use" \
    cargo build --release --locked -p switchyard --target "$HOST"
cp "$OUT/use/$HOST/release/switchyard" "$OUT/switchyard"
echo "build-pgo: $OUT/switchyard (profile: ${#raw[@]} processes, $OUT/switchyard.profdata)" >&2
