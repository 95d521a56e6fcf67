#!/usr/bin/env python3
"""A stdio MCP server that reads JSON the way most MCP peers do: with Python's `json`, where the
last of two members with the same name wins (as with JSON.parse and pydantic). The gateway's
parser-differential tests use it to show what such an upstream would execute, and to send the
gateway messages with duplicate member names.

    lastwins_server.py [--dup-list]

Every answer says what this server read (last-wins):
- tools/call `echo`, `get-env`: "called <name>"; `whoami`: "id <the JSON-RPC id it received>";
- tools/call `slow` (arguments.note): sends notifications/progress with the progressToken it read
  and message "<note>", waits arguments.ms (default 1000) and answers "slow <note>"; `echo` with a
  progressToken sends one progress notification first, likewise;
- tools/call `dup-result`: answers with a result holding a duplicate member;
- tools/call `dup-progress`: sends a progress notification with a duplicated progressToken, then
  answers "done";
- resources/read: contents [{uri: <uri read>, text: "read <uri>"}];
- completion/complete: values ["<ref.type> <ref.name or ref.uri>"];
- `--dup-list`: tools/list holds an entry with two `name` members.
"""

import argparse
import json
import sys
import threading
import time

SUPPORTED = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]
lock = threading.Lock()


def write(text):
    with lock:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


def send(msg):
    write(json.dumps(msg))


def text_result(text):
    return {"content": [{"type": "text", "text": text}]}


def progress(token, message):
    send({"jsonrpc": "2.0", "method": "notifications/progress",
          "params": {"progressToken": token, "progress": 1, "message": message}})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dup-list", action="store_true")
    args = p.parse_args()
    schema = {"type": "object", "properties": {"note": {"type": "string"}, "ms": {"type": "integer"}}}
    names = ["echo", "get-env", "whoami", "slow", "dup-result", "dup-progress"]
    tools = [{"name": n, "inputSchema": schema} for n in names]

    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        msg = json.loads(line)
        mid = msg.get("id")
        method = msg.get("method")
        params = msg.get("params") or {}
        if method is None or mid is None:
            continue
        if method == "initialize":
            version = params.get("protocolVersion")
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": version if version in SUPPORTED else SUPPORTED[0],
                "capabilities": {"tools": {}, "resources": {}, "prompts": {}, "completions": {}},
                "serverInfo": {"name": "lastwins", "version": "1"}}})
        elif method == "tools/list":
            if args.dup_list:
                entries = ",".join(json.dumps(t) for t in tools)
                dup = '{"name":"shown","name":"hidden-by-dup","inputSchema":{"type":"object"}}'
                write('{"jsonrpc":"2.0","id":%s,"result":{"tools":[%s,%s]}}' % (json.dumps(mid), entries, dup))
            else:
                send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
        elif method == "tools/call":
            name = params.get("name")
            arguments = params.get("arguments") or {}
            token = (params.get("_meta") or {}).get("progressToken")
            note = arguments.get("note", "")
            if name == "whoami":
                send({"jsonrpc": "2.0", "id": mid, "result": text_result("id %s" % json.dumps(mid))})
            elif name == "slow":
                def later(mid=mid, token=token, note=note, ms=arguments.get("ms", 1000)):
                    if token is not None:
                        progress(token, note)
                    time.sleep(ms / 1000)
                    send({"jsonrpc": "2.0", "id": mid, "result": text_result("slow " + note)})
                threading.Thread(target=later, daemon=True).start()
            elif name == "dup-result":
                write('{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"a","text":"b"}]}}'
                      % json.dumps(mid))
            elif name == "dup-progress":
                write('{"jsonrpc":"2.0","method":"notifications/progress","params":'
                      '{"progressToken":%s,"progressToken":%s,"progress":1}}'
                      % (json.dumps(token), json.dumps(token)))
                send({"jsonrpc": "2.0", "id": mid, "result": text_result("done")})
            else:
                if token is not None:
                    progress(token, note)
                send({"jsonrpc": "2.0", "id": mid, "result": text_result("called %s" % name)})
        elif method == "resources/list":
            send({"jsonrpc": "2.0", "id": mid, "result": {"resources": [
                {"uri": "lw://public", "name": "public"}]}})
        elif method == "resources/read":
            uri = params.get("uri")
            send({"jsonrpc": "2.0", "id": mid, "result": {"contents": [
                {"uri": uri, "text": "read %s" % uri}]}})
        elif method == "prompts/list":
            send({"jsonrpc": "2.0", "id": mid, "result": {"prompts": [{"name": "p"}, {"name": "secret"}]}})
        elif method == "completion/complete":
            ref = params.get("ref") or {}
            what = ref.get("name", ref.get("uri"))
            send({"jsonrpc": "2.0", "id": mid, "result": {"completion": {
                "values": ["%s %s" % (ref.get("type"), what)]}}})
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": mid, "result": {}})
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no " + method}})


if __name__ == "__main__":
    main()
