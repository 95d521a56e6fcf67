// A real OAuth 2.1 / OpenID Connect authorization server for Switchyard's auth tests:
// npm `oidc-provider` (panva), issuing audience-bound JWT access tokens via the
// client_credentials grant with RFC 8707 resource indicators.
//
//   node oidc_provider.mjs --port P --key-id K [--alg RS256|ES256]
//
// Listens on 127.0.0.1:P with issuer http://127.0.0.1:P and prints exactly one line
// `READY <issuer>` on stdout once listening; everything else (oidc-provider notices and
// warnings, errors) goes to stderr. The signing key is generated at start with kid K, so a
// restart with another --key-id on the same port simulates a key rotation. See README.md.
//
// oidc-provider is imported by absolute path from $SWITCHYARD_PEERS/js/node_modules (through
// peer-import.mjs), like the SDK client scripts.

import { generateKeyPairSync } from 'node:crypto';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

// oidc-provider prints its development notices with console.info (stdout); stdout is
// reserved for the READY line, so route all console output to stderr before importing it.
for (const m of ['log', 'info', 'warn', 'debug']) console[m] = console.error;

const { importPeer } = await import('./peer-import.mjs');

function usage(msg) {
  process.stderr.write(`oidc_provider: ${msg}\nusage: node oidc_provider.mjs --port P --key-id K [--alg RS256|ES256]\n`);
  process.exit(2);
}

let args;
try {
  ({ values: args } = parseArgs({
    options: {
      port: { type: 'string' },
      'key-id': { type: 'string' },
      alg: { type: 'string', default: 'RS256' },
    },
    strict: true,
  }));
} catch (e) {
  usage(e.message);
}
const port = Number(args.port);
if (!Number.isInteger(port) || port <= 0 || port > 65535) usage('--port must be a TCP port');
const kid = args['key-id'];
if (!kid) usage('--key-id is required');
const alg = args.alg;
if (alg !== 'RS256' && alg !== 'ES256') usage('--alg must be RS256 or ES256');

const { default: Provider, errors } = await importPeer('oidc-provider');

const issuer = `http://127.0.0.1:${port}`;
const SCOPE = 'mcp files:read files:write admin';
const CLIENT_ID = 'switchyard-test';
const CLIENT_SECRET = 'switchyard-test-secret';

const { privateKey } = alg === 'RS256'
  ? generateKeyPairSync('rsa', { modulusLength: 2048 })
  : generateKeyPairSync('ec', { namedCurve: 'P-256' });
const jwk = { ...privateKey.export({ format: 'jwk' }), kid, alg, use: 'sig' };

const isHttpUrl = (s) => {
  const u = URL.parse(s);
  return !!u && (u.protocol === 'http:' || u.protocol === 'https:');
};

const provider = new Provider(issuer, {
  jwks: { keys: [jwk] },
  clients: [
    {
      // Registered as client_secret_basic, but oidc-provider 9 accepts the secret both in
      // an HTTP Basic header and as client_id/client_secret form fields (client_secret_post).
      client_id: CLIENT_ID,
      client_secret: CLIENT_SECRET,
      grant_types: ['client_credentials'],
      response_types: [],
      redirect_uris: [],
      token_endpoint_auth_method: 'client_secret_basic',
      id_token_signed_response_alg: alg,
    },
    {
      // A second confidential client: its tokens have another subject (another "user").
      client_id: 'switchyard-other',
      client_secret: 'switchyard-other-secret',
      grant_types: ['client_credentials'],
      response_types: [],
      redirect_uris: [],
      token_endpoint_auth_method: 'client_secret_basic',
      id_token_signed_response_alg: alg,
    },
  ],
  clientDefaults: { id_token_signed_response_alg: alg },
  enabledJWA: { idTokenSigningAlgValues: [alg] },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      // No default resource: without `resource` the token is opaque (not a JWT).
      defaultResource: async (_ctx, _client, oneOf) => oneOf,
      // Only matters for authorization_code / refresh_token grants (unused here).
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx, resource, _client) => {
        if (!isHttpUrl(resource)) {
          throw new errors.InvalidTarget('resource indicator must be an http(s) URL');
        }
        return {
          scope: SCOPE,
          audience: resource,
          accessTokenFormat: 'jwt',
          accessTokenTTL: resource.includes('/short/') ? 2 : 3600,
          jwt: { sign: { alg } },
        };
      },
    },
  },
  extraTokenClaims: async (_ctx, token) => {
    const scopes = new Set((token.scope || '').split(' '));
    return { groups: scopes.has('admin') ? 'admins' : 'users' };
  },
  ttl: {
    AccessToken: (_ctx, token) => token.resourceServer?.accessTokenTTL || 3600,
    ClientCredentials: (_ctx, token) => token.resourceServer?.accessTokenTTL || 3600,
  },
});

provider.on('server_error', (_ctx, err) => console.error('oidc_provider: server_error', err));

const server = createServer(provider.callback());
server.on('error', (err) => {
  process.stderr.write(`oidc_provider: listen on 127.0.0.1:${port} failed: ${err.message}\n`);
  process.exit(1);
});
server.listen(port, '127.0.0.1', () => {
  process.stdout.write(`READY ${issuer}\n`);
});

for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    server.close();
    process.exit(0);
  });
}
