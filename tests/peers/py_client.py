#!/usr/bin/env python3
"""MCP client scenario runner built on the official Python SDK (mcp==2.3.0).

Run with the venv installed by scripts/install-test-deps.sh:

    $SWITCHYARD_PEERS/venv/bin/python tests/peers/py_client.py <mcp-url> <scenario> \
        [--mode legacy|auto] [--prefix P] [--replicas URL,URL...] [--timeout SECONDS]

SWITCHYARD_PEERS defaults to <repo>/target/peers. Prints exactly ONE JSON object
on stdout (diagnostics go to stderr); exits 0 on success, non-zero with a
message on stderr on failure (stdout then carries {"sdk":..., "error": "..."}).

--mode   "auto" (default): the SDK probes `server/discover` (2026-07-28) and falls
         back to the `initialize` handshake; "legacy": initialize only.
--replicas  Round-robin every HTTP request over these gateway replicas (a load
         balancer without session affinity); the report gains `replicaHits`.
--prefix Only consider tools whose name starts with P (the gateway may expose the
         same tool from several upstreams as `<upstream>__<tool>`). Tools are
         otherwise selected by name suffix, and exactly one must match.

Scenarios: see SCENARIOS at the bottom (currently: everything, multiround, roundtrips, paging, steady,
reload)
and tests/peers/README.md.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2
from mcp import Client, Implementation, types
from mcp.client.streamable_http import streamable_http_client
from mcp.client.session import ClientRequestContext

SDK = f"python-mcp-{importlib.metadata.version('mcp')}"
LABEL = "python"  # the <sdk-label> in scenario messages (ts-sdk-v1 / ts-sdk-v2 in the JS clients)
LIST_PAGE_CAP = 100


class ScenarioError(Exception):
    pass


def log(msg: str) -> None:
    print(f"py_client: {msg}", file=sys.stderr, flush=True)


async def list_all_tools(client: Client) -> list[str]:
    names: list[str] = []
    cursor: str | None = None
    for _ in range(LIST_PAGE_CAP):
        page = await client.list_tools(cursor=cursor, cache_mode="bypass")
        names.extend(t.name for t in page.tools)
        cursor = page.next_cursor
        if not cursor:
            return names
    raise ScenarioError(f"tools/list did not end after {LIST_PAGE_CAP} pages")


def pick_tool(names: list[str], suffix: str, prefix: str | None) -> str:
    found = [n for n in names if n.endswith(suffix) and (prefix is None or n.startswith(prefix))]
    if len(found) != 1:
        raise ScenarioError(
            f"expected exactly one tool ending with {suffix!r}"
            + (f" and starting with {prefix!r}" if prefix else "")
            + f", found {found} among {names}"
        )
    return found[0]


def text_of(result: Any, tool: str) -> str:
    if result.is_error:
        raise ScenarioError(f"tool {tool} returned isError: {result.model_dump(mode='json', by_alias=True)}")
    texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    if not texts:
        raise ScenarioError(f"tool {tool} returned no text content: {result.model_dump(mode='json', by_alias=True)}")
    return texts[0]


def all_text_of(result: Any, tool: str) -> str:
    """All text blocks of a tool result joined with a newline."""
    if result.is_error:
        raise ScenarioError(f"tool {tool} returned isError: {result.model_dump(mode='json', by_alias=True)}")
    texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    if not texts:
        raise ScenarioError(f"tool {tool} returned no text content: {result.model_dump(mode='json', by_alias=True)}")
    return "\n".join(texts)


async def scenario_everything(client: Client, args: argparse.Namespace, out: dict[str, Any]) -> None:
    tools = await list_all_tools(client)
    out["tools"] = tools

    echo = pick_tool(tools, "echo", args.prefix)
    out["echo"] = text_of(await client.call_tool(echo, {"message": "hello from python"}), echo)

    add = pick_tool(tools, "get-sum", args.prefix)
    out["sum"] = text_of(await client.call_tool(add, {"a": 2, "b": 3}), add)

    lro = pick_tool(tools, "trigger-long-running-operation", args.prefix)
    progress: list[list[float | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append([value, total])

    result = await client.call_tool(lro, {"duration": 1, "steps": 4}, progress_callback=on_progress)
    out["longRunning"] = text_of(result, lro)
    out["progress"] = progress


def roundtrip_callbacks(out: dict[str, Any]) -> dict[str, Any]:
    """Client kwargs for the `roundtrips` scenario.

    The Python SDK has no explicit capability list: passing `sampling_callback`
    declares `sampling: {}` and passing `elicitation_callback` declares
    `elicitation: {form: {}, url: {}}` at initialize (and in the per-request
    capabilities on 2026-07-28, where the same callbacks answer the embedded
    input requests of an `input_required` result).
    """

    async def on_sampling(
        ctx: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        first = params.messages[0].content_as_list if params.messages else []
        text = next((c.text for c in first if getattr(c, "type", None) == "text"), None)
        log(f"sampling/createMessage: {len(params.messages)} message(s), first text {text!r}")
        out["samplingRequest"] = text
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=f"sampled by {LABEL}"),
            model="switchyard-test-model",
            stop_reason="endTurn",
        )

    async def on_elicitation(ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        log(f"elicitation/create ({params.mode}): {params.message!r}")
        out["elicitationMessage"] = params.message
        return types.ElicitResult(action="accept", content={"name": f"Ada {LABEL}", "check": True})

    return {"sampling_callback": on_sampling, "elicitation_callback": on_elicitation}


async def scenario_roundtrips(client: Client, args: argparse.Namespace, out: dict[str, Any]) -> None:
    tools = await list_all_tools(client)
    out["tools"] = tools

    # The handlers overwrite these; null in the output means the request never reached us.
    out["samplingRequest"] = None
    sampler = pick_tool(tools, "trigger-sampling-request", args.prefix)
    result = await client.call_tool(sampler, {"prompt": f"ping from {LABEL}", "maxTokens": 16})
    out["sampling"] = all_text_of(result, sampler)

    out["elicitationMessage"] = None
    elicitor = pick_tool(tools, "trigger-elicitation-request", args.prefix)
    out["elicitation"] = all_text_of(await client.call_tool(elicitor, {}), elicitor)


async def list_pages(what: str, advertised: bool, fetch: Callable[[str | None], Awaitable[Any]],
                     items: Callable[[Any], list[str]], key: str) -> dict[str, list[Any]]:
    """Walk one list method page by page; a capability the server does not advertise yields pages []."""
    pages: list[int] = []
    found: list[str] = []
    if not advertised:
        log(f"{what}: server does not advertise the capability; not listing")
        return {"pages": pages, key: found}
    cursor: str | None = None
    for _ in range(LIST_PAGE_CAP):
        page = await fetch(cursor)
        got = items(page)
        pages.append(len(got))
        found.extend(got)
        cursor = page.next_cursor
        if not cursor:
            return {"pages": pages, key: found}
    raise ScenarioError(f"{what} did not end after {LIST_PAGE_CAP} pages")


async def scenario_paging(client: Client, args: argparse.Namespace, out: dict[str, Any]) -> None:
    # Client.list_* fetch exactly one page per call (the SDK never auto-pages);
    # cache_mode="bypass" keeps the SEP-2549 response cache out of the way.
    caps = client.server_capabilities
    out["tools"] = await list_pages(
        "tools/list", caps.tools is not None,
        lambda c: client.list_tools(cursor=c, cache_mode="bypass"),
        lambda p: [t.name for t in p.tools], "names")
    out["prompts"] = await list_pages(
        "prompts/list", caps.prompts is not None,
        lambda c: client.list_prompts(cursor=c, cache_mode="bypass"),
        lambda p: [x.name for x in p.prompts], "names")
    out["resources"] = await list_pages(
        "resources/list", caps.resources is not None,
        lambda c: client.list_resources(cursor=c, cache_mode="bypass"),
        lambda p: [str(r.uri) for r in p.resources], "uris")
    out["resourceTemplates"] = await list_pages(
        "resources/templates/list", caps.resources is not None,
        lambda c: client.list_resource_templates(cursor=c, cache_mode="bypass"),
        lambda p: [str(r.uri_template) for r in p.resource_templates], "uriTemplates")


async def scenario_steady(client: Client, args: argparse.Namespace, out: dict[str, Any]) -> None:
    """`--calls` streamed long-running operations in a row (steady load while replicas restart);
    records each call's text and how many progress notifications it got."""
    tools = await list_all_tools(client)
    lro = pick_tool(tools, "trigger-long-running-operation", args.prefix)
    out["results"] = []
    out["progressCounts"] = []
    for _ in range(args.calls):
        progress: list[float] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append(value)

        result = await client.call_tool(lro, {"duration": 1, "steps": 5}, progress_callback=on_progress)
        out["results"].append(text_of(result, lro))
        out["progressCounts"].append(len(progress))


def reload_callbacks(out: dict[str, Any]) -> dict[str, Any]:
    """Client kwargs for the `reload` scenario: every server notification's method is recorded
    (out["notifications"]) and `out["_list_changed"]` is set when the tool list changes."""
    out["notifications"] = []
    out["_list_changed"] = anyio.Event()

    async def on_message(message: Any) -> None:
        root = getattr(message, "root", message)
        method = getattr(root, "method", None)
        if isinstance(method, str):
            out["notifications"].append(method)
            if method == "notifications/tools/list_changed":
                out["_list_changed"].set()

    return {"message_handler": on_message}


async def scenario_reload(client: Client, args: argparse.Namespace, out: dict[str, Any]) -> None:
    """One session across a gateway config reload: lists tools (the SDK caches the list),
    creates `--ready-file`, waits for `--go-file` (the test has changed the config by then),
    then waits for `notifications/tools/list_changed`, lists tools again through the SDK's
    cache (which the notification must have evicted), and calls `--call-tool`."""
    if not (args.ready_file and args.go_file and args.call_tool):
        raise ScenarioError("the reload scenario needs --ready-file, --go-file and --call-tool")
    out["before"] = sorted(t.name for t in (await client.list_tools()).tools)
    with open(args.ready_file, "w", encoding="utf-8") as f:
        f.write("listed\n")
    with anyio.fail_after(60):
        while not os.path.exists(args.go_file):
            await anyio.sleep(0.05)
    with anyio.fail_after(30):
        await out["_list_changed"].wait()
    out["after"] = sorted(t.name for t in (await client.list_tools()).tools)
    out["call"] = text_of(await client.call_tool(args.call_tool, {"message": "after reload"}), args.call_tool)
    del out["_list_changed"]


def multiround_callbacks(out: dict[str, Any]) -> dict[str, Any]:
    """Client kwargs for the `multiround` scenario: answers every form field it knows."""
    answers = {"name": f"Ada {LABEL}", "color": "blue", "ok": True, "context": "tests"}

    async def on_elicitation(ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        log(f"elicitation/create: {params.message!r}")
        out.setdefault("elicitationMessages", []).append(params.message)
        fields = (params.requested_schema or {}).get("properties", {})
        return types.ElicitResult(action="accept", content={k: answers[k] for k in fields if k in answers})

    return {"elicitation_callback": on_elicitation}


async def scenario_multiround(client: Client, args: argparse.Namespace, out: dict[str, Any]) -> None:
    """The conformance fixture's multi round-trip tools (served with `--stateless`): one
    question, then two rounds carrying the upstream's requestState."""
    for tool in ("test_input_required_result_elicitation", "test_input_required_result_multi_round"):
        out[tool] = all_text_of(await client.call_tool(tool, {}), tool)


SCENARIOS: dict[str, Callable[[Client, argparse.Namespace, dict[str, Any]], Awaitable[None]]] = {
    "everything": scenario_everything,
    "multiround": scenario_multiround,
    "roundtrips": scenario_roundtrips,
    "paging": scenario_paging,
    "steady": scenario_steady,
    "reload": scenario_reload,
}

# Extra Client(...) kwargs (handlers, hence declared capabilities) per scenario.
CLIENT_KWARGS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "roundtrips": roundtrip_callbacks,
    "multiround": multiround_callbacks,
    "reload": reload_callbacks,
}


def _num(v: Any) -> Any:
    # Render 1.0 as 1 so the JSON matches the JS clients' output.
    return int(v) if isinstance(v, float) and v.is_integer() else v


class ReconnectCounter(logging.Handler):
    """Counts the SDK's own reports of resuming a broken stream with Last-Event-ID."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "reconnecting" in record.getMessage():
            self.count += 1


class RoundRobin(httpx2.AsyncBaseTransport):
    """A load balancer without affinity, inside the client: every HTTP request (POST, GET,
    DELETE) goes to the next of several gateway replicas, whatever the URL says. Counts the
    requests each replica got (`replicaHits` in the report)."""

    def __init__(self, replicas: list[str]) -> None:
        self.targets = [httpx2.URL(r) for r in replicas]
        self.hits = [0] * len(replicas)
        self.next = 0
        self.inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        # Like a load balancer: a replica that refuses connections (restarting) is skipped.
        last_error: Exception | None = None
        for _ in range(len(self.targets)):
            i = self.next
            self.next = (self.next + 1) % len(self.targets)
            target = self.targets[i]
            request.url = request.url.copy_with(host=target.host, port=target.port)
            request.headers["host"] = f"{target.host}:{target.port}"
            try:
                response = await self.inner.handle_async_request(request)
            except httpx2.ConnectError as e:
                last_error = e
                continue
            self.hits[i] += 1
            return response
        assert last_error is not None
        raise last_error

    async def aclose(self) -> None:
        await self.inner.aclose()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"sdk": SDK, "mode": args.mode, "scenario": args.scenario}
    extra = CLIENT_KWARGS[args.scenario](out) if args.scenario in CLIENT_KWARGS else {}
    server: Any = args.url
    balancer: RoundRobin | None = None
    reconnects = ReconnectCounter()
    sdk_log = logging.getLogger("mcp.client.streamable_http")
    sdk_log.addHandler(reconnects)
    if sdk_log.getEffectiveLevel() > logging.INFO:
        sdk_log.setLevel(logging.INFO)
        sdk_log.propagate = False
    if args.replicas:
        balancer = RoundRobin(args.replicas.split(","))
        http = httpx2.AsyncClient(
            transport=balancer,
            timeout=httpx2.Timeout(30.0, read=300.0),
        )
        server = streamable_http_client(args.url, http_client=http)
    with anyio.fail_after(args.timeout):
        async with Client(
            server,
            mode=args.mode,
            read_timeout_seconds=args.timeout,
            client_info=Implementation(name="switchyard-peer-python", version=SDK),
            **extra,
        ) as client:
            out["protocolVersion"] = client.protocol_version
            info = client.server_info
            out["serverName"] = info.name if info else None
            out["serverVersion"] = info.version if info else None
            log(f"connected: protocol {out['protocolVersion']}, server {out['serverName']} {out['serverVersion']}")
            await SCENARIOS[args.scenario](client, args, out)
        # Leaving the context manager closes the session (HTTP DELETE with the session id).
    if balancer is not None:
        out["replicaHits"] = balancer.hits
    out["reconnections"] = reconnects.count
    if "progress" in out:
        out["progress"] = [[_num(p), _num(t)] for p, t in out["progress"]]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url")
    p.add_argument("scenario", choices=sorted(SCENARIOS))
    p.add_argument("--mode", choices=["legacy", "auto", "2026-07-28"], default="auto")
    p.add_argument("--prefix", default=None)
    p.add_argument("--calls", type=int, default=10, help="calls made by the `steady` scenario")
    p.add_argument(
        "--replicas",
        default=None,
        help="comma-separated base URLs (http://127.0.0.1:P,...): send each HTTP request to the next one",
    )
    p.add_argument("--timeout", type=float, default=60.0, help="overall deadline in seconds (default 60)")
    p.add_argument("--ready-file", default=None, help="`reload`: created once the first list is done")
    p.add_argument("--go-file", default=None, help="`reload`: waited for before listing again")
    p.add_argument("--call-tool", default=None, help="`reload`: the tool called after the reload")
    p.add_argument("--verbose", action="store_true", help="SDK debug logging to stderr")
    args = p.parse_args()
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, stream=sys.stderr)

    try:
        out = anyio.run(run, args)
    except BaseException as e:  # noqa: BLE001 - report anything, incl. ExceptionGroup / timeouts
        if isinstance(e, KeyboardInterrupt):
            raise
        msg = f"{type(e).__name__}: {e}"
        # Unwrap task-group exception groups to the first leaf for a readable message.
        leaf: BaseException = e
        while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
            leaf = leaf.exceptions[0]
        if leaf is not e:
            msg = f"{type(leaf).__name__}: {leaf}"
        if isinstance(leaf, TimeoutError):
            msg = f"timed out after {args.timeout}s ({msg})"
        log(f"FAILED: {msg}")
        traceback.print_exception(e, file=sys.stderr)
        print(json.dumps({"sdk": SDK, "scenario": args.scenario, "error": msg}), flush=True)
        return 1
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
