// Shared helpers for the JS client scenario scripts (ts_client.mjs, ts2_client.mjs).
//
// Module resolution: the peer packages live in $SWITCHYARD_PEERS/js/node_modules
// (default <repo>/target/peers, i.e. ../../target/peers relative to this file),
// not next to these scripts, and NODE_PATH does not apply to ES module imports.
// importPeer('<package>[/subpath]') therefore resolves the specifier against that
// node_modules with the package's "exports" map (conditions node/import/default),
// then imports the resulting absolute file URL.

import { readFileSync, existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

export const PEERS = resolve(process.env.SWITCHYARD_PEERS || join(here, '..', '..', 'target', 'peers'));
export const NODE_MODULES = join(PEERS, 'js', 'node_modules');

const CONDITIONS = new Set(['node', 'import', 'default']);

function pickTarget(target) {
  if (typeof target === 'string') return target;
  if (Array.isArray(target)) {
    for (const t of target) {
      const r = pickTarget(t);
      if (r) return r;
    }
    return undefined;
  }
  if (target && typeof target === 'object') {
    for (const [cond, sub] of Object.entries(target)) {
      if (CONDITIONS.has(cond)) {
        const r = pickTarget(sub);
        if (r) return r;
      }
    }
  }
  return undefined;
}

export function resolvePeer(specifier) {
  const parts = specifier.split('/');
  const nameLen = specifier.startsWith('@') ? 2 : 1;
  const name = parts.slice(0, nameLen).join('/');
  const sub = parts.length > nameLen ? './' + parts.slice(nameLen).join('/') : '.';
  const pkgDir = join(NODE_MODULES, name);
  const pkgJson = join(pkgDir, 'package.json');
  if (!existsSync(pkgJson)) {
    throw new Error(`peer package ${name} not found in ${NODE_MODULES} (run scripts/install-test-deps.sh, or set SWITCHYARD_PEERS)`);
  }
  const pkg = JSON.parse(readFileSync(pkgJson, 'utf8'));
  let exp = pkg.exports;
  if (exp === undefined) {
    return join(pkgDir, sub === '.' ? (pkg.main || 'index.js') : sub);
  }
  if (typeof exp === 'string' || Array.isArray(exp) || !Object.keys(exp).some((k) => k.startsWith('.'))) {
    exp = { '.': exp };
  }
  let target;
  if (Object.hasOwn(exp, sub)) {
    target = pickTarget(exp[sub]);
  } else {
    // Subpath patterns ("./*"): longest matching prefix wins.
    const keys = Object.keys(exp).filter((k) => k.includes('*')).sort((a, b) => b.length - a.length);
    for (const k of keys) {
      const [pre, post] = k.split('*');
      if (sub.startsWith(pre) && sub.endsWith(post) && sub.length >= pre.length + post.length) {
        const star = sub.slice(pre.length, sub.length - post.length);
        const t = pickTarget(exp[k]);
        if (t) target = t.replaceAll('*', star);
        break;
      }
    }
  }
  if (!target) throw new Error(`${specifier}: subpath ${sub} is not exported by ${name}`);
  return join(pkgDir, target);
}

export function importPeer(specifier) {
  return import(pathToFileURL(resolvePeer(specifier)).href);
}

export function peerVersion(name) {
  return JSON.parse(readFileSync(join(NODE_MODULES, name, 'package.json'), 'utf8')).version;
}

// ---- scenario plumbing shared by the JS clients ----

export function log(tag, msg) {
  process.stderr.write(`${tag}: ${msg}\n`);
}

/**
 * Parse `<mcp-url> <scenario> [--mode M] [--prefix P] [--timeout SECONDS]`.
 */
export function parseArgs(argv, { modes, defaultMode, scenarios }) {
  const usage = `usage: <mcp-url> <scenario> [--mode ${modes.join('|')}] [--prefix P] [--timeout SECONDS]; scenarios: ${scenarios.join(', ')}`;
  const pos = [];
  const opts = { mode: defaultMode, prefix: undefined, timeout: 60 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value; ${usage}`);
      return argv[++i];
    };
    if (a === '--mode') opts.mode = val();
    else if (a.startsWith('--mode=')) opts.mode = a.slice(7);
    else if (a === '--prefix') opts.prefix = val();
    else if (a.startsWith('--prefix=')) opts.prefix = a.slice(9);
    else if (a === '--timeout') opts.timeout = Number(val());
    else if (a.startsWith('--timeout=')) opts.timeout = Number(a.slice(10));
    else if (a === '-h' || a === '--help') throw new Error(usage);
    else if (a.startsWith('--')) throw new Error(`unknown option ${a}; ${usage}`);
    else pos.push(a);
  }
  if (pos.length !== 2) throw new Error(usage);
  [opts.url, opts.scenario] = pos;
  if (!modes.includes(opts.mode)) throw new Error(`--mode must be one of ${modes.join(', ')}`);
  if (!scenarios.includes(opts.scenario)) throw new Error(`unknown scenario ${opts.scenario}; ${usage}`);
  if (!(opts.timeout > 0)) throw new Error('--timeout must be a positive number of seconds');
  return opts;
}

export function pickTool(names, suffix, prefix) {
  const found = names.filter((n) => n.endsWith(suffix) && (prefix === undefined || n.startsWith(prefix)));
  if (found.length !== 1) {
    throw new Error(
      `expected exactly one tool ending with ${JSON.stringify(suffix)}` +
        (prefix !== undefined ? ` and starting with ${JSON.stringify(prefix)}` : '') +
        `, found ${JSON.stringify(found)} among ${JSON.stringify(names)}`,
    );
  }
  return found[0];
}

export function textOf(result, tool) {
  if (result.isError) throw new Error(`tool ${tool} returned isError: ${JSON.stringify(result)}`);
  const t = (result.content || []).find((c) => c.type === 'text');
  if (!t) throw new Error(`tool ${tool} returned no text content: ${JSON.stringify(result)}`);
  return t.text;
}

/** All text blocks of a tool result joined with "\n". */
export function allTextOf(result, tool) {
  if (result.isError) throw new Error(`tool ${tool} returned isError: ${JSON.stringify(result)}`);
  const texts = (result.content || []).filter((c) => c.type === 'text').map((c) => c.text);
  if (texts.length === 0) throw new Error(`tool ${tool} returned no text content: ${JSON.stringify(result)}`);
  return texts.join('\n');
}

/** Text of the first text block of the first message of a sampling/createMessage request (or null). */
export function firstSamplingText(params) {
  const content = params?.messages?.[0]?.content;
  const blocks = Array.isArray(content) ? content : content ? [content] : [];
  return blocks.find((c) => c?.type === 'text')?.text ?? null;
}

/**
 * Walk one list method page by page for the `paging` scenario:
 * `fetchPage(cursor)` must request exactly ONE page (cursor undefined for the
 * first). Returns `{pages: [size, ...], [key]: [item, ...]}`; a capability the
 * server does not advertise yields `{pages: [], [key]: []}` without a request.
 */
export async function listPages(tag, what, advertised, fetchPage, items, key, cap) {
  const out = { pages: [], [key]: [] };
  if (!advertised) {
    log(tag, `${what}: server does not advertise the capability; not listing`);
    return out;
  }
  let cursor;
  for (let i = 0; i < cap; i++) {
    const page = await fetchPage(cursor);
    const got = items(page);
    out.pages.push(got.length);
    out[key].push(...got);
    cursor = page.nextCursor;
    if (!cursor) return out;
  }
  throw new Error(`${what} did not end after ${cap} pages`);
}

/**
 * Run `body()` with an overall deadline, print its result (or {sdk, error}) as
 * one JSON line on stdout, and exit 0/1. Exits explicitly so a stray open
 * socket cannot keep the process alive.
 */
export async function runMain(tag, sdk, scenario, timeoutSec, body) {
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${timeoutSec}s`)), timeoutSec * 1000);
  });
  try {
    const out = await Promise.race([body(), deadline]);
    clearTimeout(timer);
    process.stdout.write(JSON.stringify(out) + '\n', () => process.exit(0));
  } catch (e) {
    clearTimeout(timer);
    const msg = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
    log(tag, `FAILED: ${msg}`);
    if (e instanceof Error && e.stack) process.stderr.write(e.stack + '\n');
    if (e instanceof Error && e.cause) process.stderr.write(`cause: ${e.cause?.stack || e.cause}\n`);
    process.stdout.write(JSON.stringify({ sdk, scenario, error: msg }) + '\n', () => process.exit(1));
  }
}
