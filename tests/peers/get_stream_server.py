#!/usr/bin/env python3
"""A session-based (2025-06-18) Streamable HTTP MCP server that sends its requests to the client
on the standalone GET stream, never on the stream of the call that needs them — as servers
built on the Python SDK 1.x (FastMCP's `ctx.list_roots()`) do. Standard library only.

    get_stream_server.py --port N [--silent-get]

Endpoint http://127.0.0.1:N/mcp. Tool `roots {}`: sends `roots/list` on the GET stream (the
client must have one open), waits up to 20 s for the answer and returns the root URIs it got,
one per line ("no GET stream" or "no answer" otherwise). Unknown methods (`server/discover`
included) are -32601. Logs `ready on port N` on stderr once it listens; exits after 300 s.
With `--silent-get` a GET is read and never answered (no head, no stream: a server stuck or
slow there), and the connection held open for 60 s.
"""

import argparse
import json
import queue
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERSIONS = ("2025-03-26", "2025-06-18", "2025-11-25")
SESSIONS = {}  # session id -> {"streams": [Queue], "answers": {id: message}, "cond": Condition}
LOCK = threading.Lock()
SILENT_GET = False


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def reply(self, status, body=None, headers=()):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def session(self):
        sid = self.headers.get("Mcp-Session-Id")
        with LOCK:
            return sid, SESSIONS.get(sid)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            msg = json.loads(self.rfile.read(length))
        except ValueError:
            return self.reply(400, {"jsonrpc": "2.0", "id": None,
                                    "error": {"code": -32700, "message": "Parse error"}})
        method, mid = msg.get("method"), msg.get("id")
        if method == "initialize":
            asked = (msg.get("params") or {}).get("protocolVersion")
            sid = uuid.uuid4().hex
            with LOCK:
                SESSIONS[sid] = {"streams": [], "answers": {}, "cond": threading.Condition()}
            result = {"protocolVersion": asked if asked in VERSIONS else "2025-06-18",
                      "capabilities": {"tools": {}},
                      "serverInfo": {"name": "get-stream-server", "version": "1"}}
            return self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": result},
                              [("Mcp-Session-Id", sid)])
        sid, state = self.session()
        if state is None:
            if method is not None and mid is not None:
                return self.reply(200, {"jsonrpc": "2.0", "id": mid, "error": {
                    "code": -32601, "message": f"Method not found: {method}"}})
            return self.reply(404)
        if method is None:  # the client's answer to one of our requests
            with state["cond"]:
                state["answers"][msg.get("id")] = msg
                state["cond"].notify_all()
            return self.reply(202)
        if mid is None:  # a notification
            return self.reply(202)
        if method == "tools/list":
            tool = {"name": "roots", "description": "Lists the client's roots.",
                    "inputSchema": {"type": "object"}}
            return self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": {"tools": [tool]}})
        if method == "tools/call" and (msg.get("params") or {}).get("name") == "roots":
            return self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": {
                "content": [{"type": "text", "text": ask_roots(state)}]}})
        if method == "ping":
            return self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": {}})
        return self.reply(200, {"jsonrpc": "2.0", "id": mid, "error": {
            "code": -32601, "message": f"Method not found: {method}"}})

    def do_GET(self):
        if SILENT_GET:
            threading.Event().wait(60)  # bounded
            return None
        _, state = self.session()
        if state is None:
            return self.reply(404)
        out = queue.Queue()
        with LOCK:
            state["streams"].append(out)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        try:
            for _ in range(600):  # bounded: at most 300 s
                try:
                    event = out.get(timeout=0.5)
                    self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                except queue.Empty:
                    self.wfile.write(b": keep-alive\n\n")
                self.wfile.flush()
        except OSError:
            pass
        finally:
            with LOCK:
                state["streams"].remove(out)

    def do_DELETE(self):
        sid, state = self.session()
        with LOCK:
            SESSIONS.pop(sid, None)
        self.reply(200 if state else 404)


def ask_roots(state):
    rid = "roots-" + uuid.uuid4().hex[:8]
    with LOCK:
        streams = list(state["streams"])
    if not streams:
        return "no GET stream"
    streams[0].put({"jsonrpc": "2.0", "id": rid, "method": "roots/list"})
    with state["cond"]:
        state["cond"].wait_for(lambda: rid in state["answers"], timeout=20)
        answer = state["answers"].pop(rid, None)
    if answer is None:
        return "no answer"
    if "error" in answer:
        return "error " + json.dumps(answer["error"])
    return "\n".join(r.get("uri", "?") for r in answer.get("result", {}).get("roots", []))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--silent-get", action="store_true")
    args = p.parse_args()
    global SILENT_GET
    SILENT_GET = args.silent_get
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    threading.Timer(300, server.shutdown).start()
    print(f"ready on port {args.port}", file=sys.stderr, flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
