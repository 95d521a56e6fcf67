// A browser page's MCP client, built on the official TypeScript SDK v1
// (@modelcontextprotocol/sdk 1.32.2: Client + StreamableHTTPClientTransport), for the CORS
// test (tests/it/cors.rs). The test bundles this file with esbuild (pinned in package.json)
// for the browser and serves it, with a small page, from 127.0.0.1 origins of its own; a
// headless Chromium loads the page.
//
//   /?gateway=<mcp-url>
//
// The page talks to the gateway across origins: initialize, tools/list, a tools/call of the
// demo server's `sleep` with progress, and the GET stream the SDK opens after initialize
// (it must deliver `notifications/tools/list_changed`, which the test makes the gateway send
// by reloading its config), then ends the session with DELETE. It reports to its own origin
// (same-origin, no CORS involved) by POSTing JSON to /report, twice: `phase: "connected"`
// once the call is done (the test then reloads the gateway), and `phase: "done"` at the end
// or at the first failure (`error`: what the SDK threw, e.g. the browser's "Failed to fetch"
// for a request CORS refused). Every report is also written into the page and the console.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

/** How long the page waits for the GET stream's notification. */
const LIST_CHANGED_WAIT_MS = 20000;

const gateway = new URL(location.href).searchParams.get('gateway');
const report = { origin: location.origin, phase: 'connected', errors: [] };

async function send(phase) {
  report.phase = phase;
  const text = JSON.stringify(report);
  console.log(`switchyard-cors-report ${text}`);
  document.getElementById('out').textContent = text;
  await fetch('/report', { method: 'POST', body: text });
}

function describe(e) {
  return e instanceof Error ? `${e.name}: ${e.message}` : String(e);
}

async function run() {
  let heard;
  const listChanged = new Promise((resolve) => { heard = resolve; });
  const transport = new StreamableHTTPClientTransport(new URL(gateway));
  const client = new Client({ name: 'switchyard-browser-page', version: '0.0.0' });
  // Errors outside a request (the GET stream's, say) land here.
  client.onerror = (e) => report.errors.push(describe(e));
  client.setNotificationHandler(ToolListChangedNotificationSchema, () => heard(true));

  await client.connect(transport);
  report.sessionId = transport.sessionId ?? null;
  report.protocolVersion = transport.protocolVersion ?? null;
  report.server = client.getServerVersion()?.name ?? null;

  const { tools } = await client.listTools();
  report.tools = tools.map((t) => t.name);

  const progress = [];
  const result = await client.callTool({ name: 'sleep', arguments: { ms: 600, steps: 3 } }, undefined, {
    onprogress: (p) => progress.push([p.progress, p.total ?? null]),
  });
  report.call = result.content?.[0]?.text ?? null;
  report.progress = progress;
  await send('connected');

  const timeout = new Promise((resolve) => setTimeout(() => resolve(false), LIST_CHANGED_WAIT_MS));
  report.listChanged = await Promise.race([listChanged, timeout]);
  const after = await client.listTools();
  report.toolsAfter = after.tools.map((t) => t.name);

  await transport.terminateSession();
  report.terminated = transport.sessionId === undefined;
  await client.close();
}

try {
  await run();
} catch (e) {
  report.error = describe(e);
}
await send('done');
