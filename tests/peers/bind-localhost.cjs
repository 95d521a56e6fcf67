'use strict';
// Node preload that forces every TCP listen onto 127.0.0.1.
//
//   node -r /abs/path/tests/peers/bind-localhost.cjs server.js ...
//
// Some peers (e.g. @modelcontextprotocol/server-everything's sse and
// streamableHttp modes) call `app.listen(PORT, cb)` without a host, which
// binds every interface. This patches net.Server.prototype.listen (which
// http.Server / https.Server / express's app.listen inherit) so that any
// port-based listen gets host 127.0.0.1, whatever host the caller asked for.
// Unix-socket paths, handles and fds are left alone.
//
// Handled signatures (per Node's net.Server#listen):
//   listen()                         listen(cb)
//   listen(port)                     listen(port, cb)
//   listen(port, backlog[, cb])      listen(port, host[, backlog][, cb])
//   listen({ port, host, ... }[, cb])
//
// Set BIND_LOCALHOST_DEBUG=1 to log each rewrite to stderr.

const net = require('node:net');

const HOST = '127.0.0.1';
const DEBUG = process.env.BIND_LOCALHOST_DEBUG === '1';
const origListen = net.Server.prototype.listen;

function isPortLike(v) {
  if (typeof v === 'number') return true;
  // Node accepts numeric strings as ports; a non-numeric string is a pipe path.
  return typeof v === 'string' && v.trim() !== '' && /^\d+$/.test(v.trim());
}

function rewrite(args) {
  const a = Array.from(args);
  if (a.length === 0 || typeof a[0] === 'function' || a[0] === undefined || a[0] === null) {
    // listen() / listen(cb) / listen(undefined, ...) -> random port, all interfaces.
    const rest = a[0] === undefined || a[0] === null ? a.slice(1) : a;
    return rewrite([0, ...rest]);
  }
  const first = a[0];
  if (isPortLike(first)) {
    if (typeof a[1] === 'string') {
      a[1] = HOST; // listen(port, host, ...)
    } else {
      a.splice(1, 0, HOST); // listen(port[, backlog][, cb])
    }
    return a;
  }
  if (typeof first === 'object') {
    // Options object; only port-based ones (or ones with neither port nor
    // path/handle/fd, which mean "random port") are TCP listens.
    const isTcp = first.path === undefined && first.handle === undefined &&
      first._handle === undefined && first.fd === undefined;
    if (isTcp) {
      a[0] = { ...first, host: HOST, ipv6Only: false };
    }
    return a;
  }
  return a; // string pipe path etc.
}

net.Server.prototype.listen = function bindLocalhostListen(...args) {
  const out = rewrite(args);
  if (DEBUG) {
    const show = (xs) => JSON.stringify(xs.map((x) => (typeof x === 'function' ? '[fn]' : x)));
    process.stderr.write(`bind-localhost: listen${show(args)} -> listen${show(out)}\n`);
  }
  return origListen.apply(this, out);
};
