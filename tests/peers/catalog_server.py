#!/usr/bin/env python3
"""A small stdio MCP server for the gateway's catalog tests (hand-written JSON-RPC, no SDK).

    catalog_server.py [--tools N] [--resources N] [--page-size N] [--invalid] [--batch]
                      [--links] [--no-resources]

- tools/list, prompts/list and resources/list are paginated (`--page-size`, cursor = offset);
- tools t0..t{N-1} answer "<name> called"; `add_tool {name}` adds a tool at run time and sends
  notifications/tools/list_changed (capability tools.listChanged = true);
- `--invalid` adds definitions that break the spec's rules (bad names, bad x-mcp-header), which
  a gateway must leave out of its lists;
- it has the `resources` capability (never `subscribe`, and no `resources/metadata`: -32601)
  unless `--no-resources`, which leaves the capability and the resources/* methods out;
- `--links` adds a tool `link` whose result holds a `resource_link` (res://item/0) and an
  embedded `resource` (res://embedded);
- `--batch` (protocol version 2025-03-26 only) answers each tools/call with one JSON-RPC batch:
  a progress notification, then the response.
"""

import argparse
import json
import sys

SUPPORTED = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]


def schema(extra=None):
    props = {"x": {"type": "string"}}
    if extra:
        props.update(extra)
    return {"type": "object", "properties": props}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tools", type=int, default=5)
    p.add_argument("--resources", type=int, default=5)
    p.add_argument("--page-size", type=int, default=2)
    p.add_argument("--invalid", action="store_true")
    p.add_argument("--batch", action="store_true")
    p.add_argument("--links", action="store_true")
    p.add_argument("--no-resources", action="store_true")
    args = p.parse_args()

    tools = [{"name": f"t{i}", "description": f"tool {i}", "inputSchema": schema()} for i in range(args.tools)]
    tools.append({"name": "add_tool", "description": "adds a tool", "inputSchema": schema({"name": {"type": "string"}})})
    if args.links:
        tools.append({"name": "link", "description": "returns resource URIs", "inputSchema": schema()})
    if args.invalid:
        tools += [
            {"name": "bad name", "inputSchema": schema()},
            {"name": "x" * 130, "inputSchema": schema()},
            {"name": "bad_header", "inputSchema": schema({"o": {"type": "object", "x-mcp-header": "O"}})},
            {"name": "dup_header", "inputSchema": schema({
                "a": {"type": "string", "x-mcp-header": "Region"},
                "b": {"type": "string", "x-mcp-header": "region"}})},
            {"name": "good_header", "inputSchema": schema({"r": {"type": "string", "x-mcp-header": "Region"}})},
        ]
    resources = [{"uri": f"res://item/{i}", "name": f"item{i}", "mimeType": "text/plain"} for i in range(args.resources)]
    prompts = [{"name": f"p{i}"} for i in range(3)]

    def send(msg):
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()

    def page(items, key, params):
        start = int((params or {}).get("cursor") or 0)
        end = start + args.page_size
        result = {key: items[start:end]}
        if end < len(items):
            result["nextCursor"] = str(end)
        return result

    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        method, rid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
        if method is None or rid is None:
            continue  # notifications and responses
        if method == "initialize":
            v = params.get("protocolVersion")
            capabilities = {"tools": {"listChanged": True}, "prompts": {}}
            if not args.no_resources:
                capabilities["resources"] = {}
            result = {
                "protocolVersion": "2025-03-26" if args.batch else v if v in SUPPORTED else SUPPORTED[0],
                "capabilities": capabilities,
                "serverInfo": {"name": "catalog-server", "version": "1"},
            }
        elif method == "ping":
            result = {}
        elif method == "tools/list":
            result = page(tools, "tools", params)
        elif method == "prompts/list":
            result = page(prompts, "prompts", params)
        elif method.startswith("resources/") and args.no_resources:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"Method not found: {method}"}})
            continue
        elif method == "resources/list":
            result = page(resources, "resources", params)
        elif method == "resources/templates/list":
            result = {"resourceTemplates": []}
        elif method == "resources/read":
            uri = params.get("uri")
            result = {"contents": [{"uri": uri, "mimeType": "text/plain", "text": f"content of {uri}"}]}
        elif method == "tools/call" and params.get("name") == "add_tool":
            name = params.get("arguments", {}).get("name", "added")
            tools.append({"name": name, "inputSchema": schema()})
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            result = {"content": [{"type": "text", "text": f"added {name}"}]}
        elif method == "tools/call" and args.links and params.get("name") == "link":
            result = {"content": [
                {"type": "resource_link", "uri": "res://item/0", "name": "item0"},
                {"type": "resource", "resource": {"uri": "res://embedded", "text": "embedded"}},
            ]}
        elif method == "tools/call" and any(t["name"] == params.get("name") for t in tools):
            result = {"content": [{"type": "text", "text": f"{params['name']} called"}]}
            if args.batch:
                token = (params.get("_meta") or {}).get("progressToken")
                progress = {"jsonrpc": "2.0", "method": "notifications/progress",
                            "params": {"progressToken": token, "progress": 1, "total": 1}}
                send([progress, {"jsonrpc": "2.0", "id": rid, "result": result}])
                continue
        elif method == "tools/call":
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": f"Unknown tool: {params.get('name')}"}})
            continue
        else:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"Method not found: {method}"}})
            continue
        send({"jsonrpc": "2.0", "id": rid, "result": result})


if __name__ == "__main__":
    main()
