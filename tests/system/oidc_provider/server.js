// Minimal OpenID Connect provider for the end-to-end tests.
//
// Built on oidc-provider (pinned in package.json) with its built-in
// development interaction screens (login + consent). Any login name is
// accepted with any password; the login name becomes the account id / `sub`.
//
// Configuration comes from environment variables (see README.md):
//   OIDC_PORT                        required, TCP port on 127.0.0.1
//   OIDC_CLIENT_ID                   required
//   OIDC_CLIENT_SECRET               required
//   OIDC_REDIRECT_URIS               required, JSON array of exact redirect URIs
//   OIDC_ISSUER                      optional, default http://127.0.0.1:<port>
//   OIDC_TOKEN_ENDPOINT_AUTH_METHOD  optional, client_secret_basic (default) | client_secret_post
//   OIDC_PROFILE_IN_ID_TOKEN=1       optional, put the profile and email claims in the ID
//                                    token too (by default they are at userinfo only)
//   OIDC_VERBOSE=1                   optional, show oidc-provider's dev-mode warnings/notices
//   OIDC_EXIT_ON_STDIN_EOF=1         optional, exit when stdin closes (set by the Python
//                                    harness so a crashed test run never leaves an orphan)
//
// Errors (server errors and OAuth error responses) are printed to stderr.

import { generateKeyPair as generateKeyPairCb, randomBytes } from 'node:crypto';
import { promisify } from 'node:util';

const generateKeyPair = promisify(generateKeyPairCb);

function fail(message) {
  console.error(`oidc harness: ${message}`);
  process.exit(2);
}

// --- Quiet the dev-mode chatter -------------------------------------------
// oidc-provider prints "oidc-provider WARNING:/NOTICE:" lines for every
// development default (in-memory adapter, devInteractions, ...), and an
// "Unsupported runtime" warning on Node < 22 at *import* time. That is why
// console is patched before the dynamic import below.
if (process.env.OIDC_VERBOSE !== '1') {
  const isDevChatter = (args) => typeof args[0] === 'string'
    && /oidc-provider (WARNING|NOTICE):/.test(args[0]);
  for (const method of ['warn', 'info']) {
    const original = console[method].bind(console);
    console[method] = (...args) => { if (!isDevChatter(args)) original(...args); };
  }
}

// Start generating the signing key now; RSA keygen (~0.3-0.8 s) then overlaps
// with loading oidc-provider instead of adding to startup time.
const keyPairPromise = generateKeyPair('rsa', { modulusLength: 2048 });

const { default: Provider } = await import('oidc-provider');

// --- Inputs ----------------------------------------------------------------
const env = process.env;
const port = Number.parseInt(env.OIDC_PORT ?? '', 10);
if (!Number.isInteger(port) || port <= 0 || port > 65535) fail('OIDC_PORT must be a TCP port number');
if (!env.OIDC_CLIENT_ID) fail('OIDC_CLIENT_ID is required');
if (!env.OIDC_CLIENT_SECRET) fail('OIDC_CLIENT_SECRET is required');
let redirectUris;
try {
  redirectUris = JSON.parse(env.OIDC_REDIRECT_URIS ?? '');
} catch {
  fail('OIDC_REDIRECT_URIS must be a JSON array of strings');
}
if (!Array.isArray(redirectUris) || redirectUris.length === 0
    || !redirectUris.every((u) => typeof u === 'string')) {
  fail('OIDC_REDIRECT_URIS must be a non-empty JSON array of strings');
}
const issuer = env.OIDC_ISSUER || `http://127.0.0.1:${port}`;
const authMethod = env.OIDC_TOKEN_ENDPOINT_AUTH_METHOD || 'client_secret_basic';
if (!['client_secret_basic', 'client_secret_post'].includes(authMethod)) {
  fail('OIDC_TOKEN_ENDPOINT_AUTH_METHOD must be client_secret_basic or client_secret_post');
}

// --- Accounts --------------------------------------------------------------
// Every login is valid. Claims are derived deterministically from the login
// name so tests can predict them (mirrored by expected_claims() in
// tests/helpers/oidc_harness.py):
//   "alice"      -> name "Alice Example", email "alice@example.com"
//   "bob.smith"  -> name "Bob Smith Example", email "bob.smith@example.com"
//   "carol@x.io" -> name "Carol Example", email "carol@x.io"
// A login that starts with "admin" is in the group "admins", any other in "staff"; a
// login that contains "unverified" has email_verified false.
function claimsFor(accountId) {
  const local = accountId.split('@')[0];
  const parts = local.split(/[._-]+/).filter(Boolean)
    .map((p) => p.charAt(0).toUpperCase() + p.slice(1));
  const givenName = parts[0] ?? local;
  return {
    sub: accountId,
    name: [...parts, 'Example'].join(' '),
    given_name: givenName,
    family_name: 'Example',
    email: accountId.includes('@') ? accountId : `${accountId}@example.com`,
    email_verified: !accountId.includes('unverified'),
    groups: accountId.startsWith('admin') ? ['admins'] : ['staff'],
  };
}

// --- Keys --------------------------------------------------------------------
// A fresh RS256 signing key per process (generation started above) instead of
// oidc-provider's built-in, publicly known development keys; every provider
// instance therefore has a distinct `kid`.
const { privateKey } = await keyPairPromise;
const signingJwk = {
  ...privateKey.export({ format: 'jwk' }),
  kid: `harness-${randomBytes(4).toString('hex')}`,
  alg: 'RS256',
  use: 'sig',
};

// --- Provider ------------------------------------------------------------------
const provider = new Provider(issuer, {
  clients: [{
    client_id: env.OIDC_CLIENT_ID,
    client_secret: env.OIDC_CLIENT_SECRET,
    // Web client: redirect_uri is matched by exact string comparison.
    redirect_uris: redirectUris,
    response_types: ['code'],
    grant_types: ['authorization_code'],
    token_endpoint_auth_method: authMethod,
    id_token_signed_response_alg: 'RS256',
  }],
  // oidc-provider only *requires* PKCE for public clients by default
  // (confidential clients may omit it). We want the stricter behaviour;
  // S256 is the only method oidc-provider supports.
  pkce: { required: () => true },
  // Advertise only what the single client may use.
  responseTypes: ['code'],
  clientAuthMethods: ['client_secret_basic', 'client_secret_post'],
  scopes: ['openid', 'profile', 'email'],
  claims: {
    openid: ['sub'],
    profile: ['name', 'given_name', 'family_name', 'groups'],
    email: ['email', 'email_verified'],
  },
  // By default (OIDC Core 5.4), claims requested by scope (name, email) are
  // returned from userinfo only, not in the ID token. OIDC_PROFILE_IN_ID_TOKEN=1
  // puts them in the ID token too, as some providers do.
  ...(env.OIDC_PROFILE_IN_ID_TOKEN === '1' ? { conformIdTokenClaims: false } : {}),
  async findAccount(ctx, sub) {
    return {
      accountId: sub,
      async claims() { return claimsFor(sub); },
    };
  },
  // Plain error page (the default one pulls a web font from Google). Shown
  // for errors that cannot be redirected to the client, e.g. unknown client or
  // unregistered redirect_uri; walk_login() reports its text.
  async renderError(ctx, out) {
    const esc = (v) => String(v).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
    ctx.type = 'html';
    ctx.body = `<!DOCTYPE html><html><head><title>OIDC provider error</title></head><body>
<h1>OIDC provider error</h1>
${Object.entries(out).map(([k, v]) => `<pre>${esc(k)}: ${esc(v)}</pre>`).join('\n')}
</body></html>`;
  },
  jwks: { keys: [signingJwk] },
  cookies: { keys: [randomBytes(32).toString('base64url')] },
  features: {
    devInteractions: { enabled: true }, // built-in login + consent HTML forms
    userinfo: { enabled: true },
    rpInitiatedLogout: { enabled: true },
    // Not needed by the tests; keep the surface small.
    pushedAuthorizationRequests: { enabled: false },
    dPoP: { enabled: false },
    resourceIndicators: { enabled: false },
  },
  // Explicit TTLs (seconds); also avoids "you SHOULD change" notices.
  ttl: {
    AccessToken: 3600,
    AuthorizationCode: 60,
    IdToken: 3600,
    Interaction: 600,
    Session: 3600,
    Grant: 3600,
  },
});

// --- Error reporting -----------------------------------------------------------
provider.on('server_error', (ctx, err) => {
  console.error(`oidc-provider server_error ${ctx?.method} ${ctx?.path}:`, err);
});
for (const event of ['authorization.error', 'grant.error', 'userinfo.error',
  'end_session.error', 'jwks.error', 'discovery.error']) {
  provider.on(event, (ctx, err) => {
    const detail = err.error_detail ? ` (${err.error_detail})` : '';
    console.error(`oidc-provider ${event}: ${err.error}: ${err.error_description}${detail}`);
  });
}

// --- Lifecycle -------------------------------------------------------------------
const server = provider.listen(port, '127.0.0.1', () => {
  console.log(`oidc harness listening on ${issuer} (pid ${process.pid})`);
});
server.on('error', (err) => fail(`cannot listen on 127.0.0.1:${port}: ${err.message}`));

const shutdown = () => process.exit(0);
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
if (env.OIDC_EXIT_ON_STDIN_EOF === '1') {
  // The parent keeps our stdin open; EOF means it went away.
  process.stdin.on('end', shutdown);
  process.stdin.on('error', shutdown);
  process.stdin.resume();
}
