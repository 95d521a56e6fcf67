#!/usr/bin/env python3
"""An MCP server written with the official Python SDK 2.x (`MCPServer`), for the gateway's
bridge tests: it speaks 2026-07-28 (stateless, `server/discover`) and the earlier revisions.

    py_server.py --port N

Streamable HTTP at http://127.0.0.1:N/mcp. Tools:
- `echo {message}` → "Echo: <message>"; `add {a, b}` → the sum;
- `trigger-elicitation-request` asks the user for a name, `trigger-sampling-request {prompt}`
  asks the client's LLM. Both ask through the SDK's resolvers: on 2026-07-28 the answer is an
  `input_required` result the client retries with `inputResponses`, on earlier revisions a
  server-to-client request in the middle of the call;
- `add-tool {name}` registers a tool `name` (answering "<name> called") and tells
  `subscriptions/listen` subscribers (and, on earlier revisions, the session) that the tool
  list changed;
- resource `res://counter` (its text is the count) and `touch {}`, which increments the count
  and tells `subscriptions/listen` subscribers of `res://counter` that it was updated.
Logs `ready on port N` on stderr once it listens.
"""

import argparse
import logging
import sys
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve, Sample
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CreateMessageResult, SamplingMessage, TextContent
from pydantic import BaseModel


class Person(BaseModel):
    name: str


def ask_name() -> Elicit[Person]:
    return Elicit("What is your name?", Person)


def ask_model(prompt: str) -> Sample:
    message = SamplingMessage(role="user", content=TextContent(type="text", text=prompt))
    return Sample([message], max_tokens=16)


server = MCPServer("switchyard-peer-py-server", instructions="Python SDK server for bridge tests.")


@server.tool(description="Echoes the message back.")
def echo(message: str) -> str:
    return f"Echo: {message}"


@server.tool(description="Adds two numbers.")
def add(a: float, b: float) -> str:
    return f"The sum of {a:g} and {b:g} is {a + b:g}."


@server.tool(name="trigger-elicitation-request", description="Asks the user for a name.")
def trigger_elicitation(person: Annotated[Person, Resolve(ask_name)]) -> str:
    return f"elicited name: {person.name}"


@server.tool(name="trigger-sampling-request", description="Asks the client's LLM.")
def trigger_sampling(
    prompt: str,
    sampled: Annotated[CreateMessageResult, Resolve(ask_model)],
    maxTokens: int = 16,  # noqa: N803 (the argument name the test clients send)
) -> str:
    content = sampled.content if isinstance(sampled.content, list) else [sampled.content]
    text = next((c.text for c in content if getattr(c, "type", None) == "text"), "")
    return f"LLM sampling result: {text}"


@server.tool(name="add-tool", description="Adds a tool and says the tool list changed.")
async def add_tool(name: str, ctx: Context) -> str:
    def added() -> str:
        return f"{name} called"

    server.add_tool(added, name=name, description="Added at run time.")
    await ctx.notify_tools_changed()
    return f"added {name}"


COUNTER = {"n": 0}


@server.resource("res://counter", description="A count that `touch` increments.")
def counter() -> str:
    return str(COUNTER["n"])


@server.tool(description="Increments res://counter and says it was updated.")
async def touch(ctx: Context) -> str:
    COUNTER["n"] += 1
    await ctx.notify_resource_updated("res://counter")
    return f"count {COUNTER['n']}"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    print(f"ready on port {args.port}", file=sys.stderr, flush=True)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"127.0.0.1:{args.port}"],
        allowed_origins=[],
    )
    anyio.run(
        lambda: server.run_streamable_http_async(
            host="127.0.0.1", port=args.port, transport_security=security
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
