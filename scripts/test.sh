#!/usr/bin/env bash
# The project's test command (see README): install/refresh the pinned external
# MCP test peers, then run the Rust test suite against them.
#
#   scripts/test.sh [extra cargo test args...]     e.g. scripts/test.sh -- --nocapture
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

bash "$REPO/scripts/install-test-deps.sh"

export SWITCHYARD_PEERS="$REPO/target/peers"
echo "test.sh: SWITCHYARD_PEERS=$SWITCHYARD_PEERS; running: cargo test --locked $*" >&2
exec cargo test --locked "$@"
