#!/usr/bin/env python3
"""A stdio MCP server of the stateless revision (2026-07-28) only, slow to start (as a server
launched with `uvx` that first downloads its packages): it reads nothing for `--delay` seconds
(default 6), then answers in order of arrival. `server/discover` gets a DiscoverResult;
`initialize` after a `server/discover` is refused, as dual-era SDKs refuse it on a connection
already serving 2026-07-28; `tools/list` has `echo`, `tools/call echo {message}` answers it.
Standard library only.
"""

import argparse
import json
import sys
import time

V = "2026-07-28"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--delay", type=float, default=6.0)
    args = p.parse_args()
    time.sleep(args.delay)
    modern = False
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        method, mid = msg.get("method"), msg.get("id")
        if mid is None or method is None:
            continue
        if method == "server/discover":
            modern = True
            result = {"supportedVersions": [V], "capabilities": {"tools": {}},
                      "serverInfo": {"name": "slow-modern", "version": "1"},
                      "resultType": "complete"}
            out = {"jsonrpc": "2.0", "id": mid, "result": result}
        elif method == "initialize":
            why = "connection is serving the 2026-07-28 protocol" if modern else "unsupported"
            out = {"jsonrpc": "2.0", "id": mid, "error": {"code": -32600, "message": why}}
        elif method == "tools/list":
            tool = {"name": "echo", "inputSchema": {"type": "object"}}
            out = {"jsonrpc": "2.0", "id": mid, "result": {"tools": [tool], "resultType": "complete"}}
        elif method == "tools/call":
            text = (msg.get("params") or {}).get("arguments", {}).get("message", "")
            out = {"jsonrpc": "2.0", "id": mid, "result": {
                "content": [{"type": "text", "text": text}], "resultType": "complete"}}
        else:
            out = {"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "not found"}}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
