'use strict';
/**
 * A real OAuth 2 / OpenID Connect server for elicitd's end-to-end tests.
 *
 * One process plays both roles elicitd talks to:
 *   - an identity issuer (OIDC discovery, JWKS, authorization code + PKCE S256, nonce echoed into
 *     an RS256 ID token, RFC 9207 `iss` on every authorization response), and
 *   - a third-party API provider (rotating refresh tokens with reuse detection, RFC 7009
 *     revocation, and protected resources under /api that accept only tokens it issued), and
 *   - the authorization server of an MCP server's users: /__control/mint issues access tokens for
 *     an audience, opaque or as RFC 9068 JWTs, and /introspect answers RFC 7662 for them.
 *
 * It is written against Node's standard library only: the published mock servers redirect from
 * the authorize endpoint without a login page and accept any refresh token, which would let the
 * very bugs these tests exist for (wrong account, replayed refresh token, missing `iss` check)
 * pass unnoticed. Everything is in memory; a test resets it through the /__control API.
 *
 * Usage: node server.js [port] [host]   (or OAUTH_SERVER_PORT / OAUTH_SERVER_HOST; port 0 = any)
 * Prints exactly one line `READY http://HOST:PORT` on stdout once it accepts connections.
 */

const http = require('node:http');
const crypto = require('node:crypto');

const MAX_BODY_BYTES = 1024 * 1024;
const AUTH_REQUEST_TTL_SECONDS = 600;
const USERNAME_PATTERN = /^[A-Za-z0-9._@-]{1,64}$/;
const TOKEN_GRANT_TYPES = ['authorization_code', 'refresh_token'];

// ---------------------------------------------------------------------------------------------
// Signing key: generated per process, so a token from a previous run can never verify.
// ---------------------------------------------------------------------------------------------

const { privateKey, publicKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
const KEY_ID = crypto.randomBytes(8).toString('hex');
const PUBLIC_JWK = { ...publicKey.export({ format: 'jwk' }), kid: KEY_ID, alg: 'RS256', use: 'sig' };

// ---------------------------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------------------------

let issuer = ''; // set once listening, e.g. http://127.0.0.1:41234

function defaultConfig() {
  return {
    access_token_ttl: 3600,
    refresh_token_ttl: null, // seconds, or null for refresh tokens that never expire
    code_ttl: 60,
    id_token_ttl: 300,
    token_delay_ms: 0,
    rotate_refresh_tokens: true,
    // RFC 9700 §4.14.2: replaying a rotated refresh token revokes the whole grant, so a client
    // that refreshes twice in parallel loses the connection instead of silently getting away.
    revoke_family_on_reuse: true,
    issue_refresh_tokens: true,
    require_registered_clients: false,
    // undefined = the real issuer; null = omit `iss` (old servers); any string = mix-up attack.
    authorization_response_iss: undefined,
    // A named provider quirk family (PROFILES below); null = RFC 6749 to the letter.
    profile: null,
    // A real provider's paths answered as this server's own ({"/oauth/v2/token": "token"}), so a
    // catalog entry works unchanged but for its host.
    routes: null,
    // Where the account endpoint puts the account id and login (dotted paths), as the provider does.
    account_paths: null,
    // An API-key service's check (the `key_check` route): {header, accepted: [values], required:
    // {header: value}}; 200 when the header carries an accepted value and the required ones, else 401.
    key_check: null,
    // The accounts_server profile's accounts-server on the callback; null = this server as
    // http://localhost:<port> (another host name for the same process).
    accounts_server: null,
  };
}

// Quirk families a real provider has, each switched on by `profile` (tests/connections/test_quirks.py):
//   client_key      the client id arrives as client_key, scopes comma-separated (TikTok)
//   comma_scopes    scopes comma-separated in the request and the answer (Strava, Slack)
//   nested_token    Slack's oauth.v2.access answer: ok, authed_user, team; errors as 200 {ok:false}
//   callback_params the callback carries realmId (QuickBooks)
//   json_body       the token request is a JSON object (Square); the answer names merchant_id
//   instance_url    the token answer names instance_url and the identity URL id (Salesforce)
//   audience        authorize needs audience=api.atlassian.com and prompt=consent (Atlassian)
//   expiring_refresh the token answer says refresh_token_expires_in (GitHub Apps)
//   shop_hmac       the callback carries shop, host, timestamp and an HMAC-SHA256 of them keyed with
//                   the client's registered secret; comma scopes; associated_user (Shopify)
//   form_answer     the token answer is form-encoded unless the request accepts JSON (GitHub)
//   pkce_refused    a code_challenge is refused at authorize, a code_verifier at the token endpoint
//   accounts_server the callback names the data centre's token server: location and accounts-server (Zoho)
//   user_token      Slack's token acting as the person: scopes arrive as user_scope, the code's answer
//                   nests the token in authed_user (nothing at the top), a refresh answers flat
const PROFILES = ['accounts_server', 'user_token', 'shop_hmac', 'form_answer', 'client_key', 'comma_scopes', 'nested_token', 'callback_params', 'json_body', 'instance_url',
  'audience', 'expiring_refresh', 'pkce_refused'];
const profileIs = (name) => state.config.profile === name;
const commaScopes = () => profileIs('client_key') || profileIs('comma_scopes') || profileIs('nested_token')
  || profileIs('shop_hmac') || profileIs('user_token');

function freshState() {
  return {
    config: defaultConfig(),
    clients: new Map(),
    authRequests: new Map(),
    codes: new Map(),
    tokens: new Map(),
    planted: { access_token: [], refresh_token: [], code: [] },
    failNextRefresh: [],
    failNextAuthorize: [],
    failNextApi: [],
    stats: freshStats(),
    tokenRequests: [],
    revocations: [],
    sequence: 0,
  };
}

function freshStats() {
  return {
    token_calls: Object.fromEntries(TOKEN_GRANT_TYPES.map((g) => [g, 0])),
    authorize_calls: 0,
    login_submissions: 0,
    revocation_calls: 0,
    introspection_calls: 0,
    userinfo_calls: 0,
    api_calls: {},
  };
}

let state = freshState();

// ---------------------------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------------------------

const now = () => Date.now() / 1000;
const b64url = (buf) => Buffer.from(buf).toString('base64url');
const randomToken = (prefix) => `${prefix}_${crypto.randomBytes(24).toString('base64url')}`;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const accountId = (sub) => `acct-${sub}`;

function escapeHtml(value) {
  return String(value).replace(/[&<>"']/g, (c) => ({
    '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;',
  })[c]);
}

function takePlanted(kind) {
  return state.planted[kind].shift();
}

function signJwt(claims) {
  const header = { alg: 'RS256', typ: 'JWT', kid: KEY_ID };
  const input = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(claims))}`;
  const signature = crypto.sign('sha256', Buffer.from(input), privateKey);
  return `${input}.${b64url(signature)}`;
}

/** OIDC Core §3.1.3.6: left half of the SHA-256 of the access token. */
function atHash(accessToken) {
  const digest = crypto.createHash('sha256').update(accessToken, 'ascii').digest();
  return b64url(digest.subarray(0, digest.length / 2));
}

function pkceS256(verifier) {
  return b64url(crypto.createHash('sha256').update(verifier, 'ascii').digest());
}

function safeEqual(a, b) {
  const x = Buffer.from(String(a));
  const y = Buffer.from(String(b));
  return x.length === y.length && crypto.timingSafeEqual(x, y);
}

function tokenStatus(record, at = now()) {
  if (record.revoked_at !== null) return 'revoked';
  if (record.used_at !== null) return 'used';
  if (record.expires_at !== null && record.expires_at <= at) return 'expired';
  return 'active';
}

function publicToken(record) {
  return { ...record, status: tokenStatus(record) };
}

function revokeFamily(family, at = now()) {
  let count = 0;
  for (const record of state.tokens.values()) {
    if (record.family === family && record.revoked_at === null) {
      record.revoked_at = at;
      count += 1;
    }
  }
  return count;
}

// ---------------------------------------------------------------------------------------------
// HTTP plumbing
// ---------------------------------------------------------------------------------------------

function send(res, status, body, headers = {}) {
  res.writeHead(status, { 'Content-Length': Buffer.byteLength(body), ...headers });
  res.end(body);
}

function sendJson(res, status, value, headers = {}) {
  send(res, status, JSON.stringify(value), {
    'Content-Type': 'application/json',
    'Cache-Control': 'no-store',
    ...headers,
  });
}

function sendOAuthError(res, status, error, description, headers = {}) {
  const body = { error };
  if (description) body.error_description = description;
  sendJson(res, status, body, { Pragma: 'no-cache', ...headers });
}

function sendHtml(res, status, html) {
  send(res, status, html, {
    'Content-Type': 'text/html; charset=utf-8',
    'Cache-Control': 'no-store',
    'Referrer-Policy': 'no-referrer',
  });
}

function redirect(res, location, status = 302) {
  send(res, status, '', { Location: location, 'Cache-Control': 'no-store' });
}

async function readBody(req) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new HttpError(413, 'request body too large');
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

async function readForm(req) {
  return new URLSearchParams(await readBody(req));
}

async function readJson(req) {
  const text = await readBody(req);
  if (text.trim() === '') return {};
  try {
    const value = JSON.parse(text);
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      throw new Error('not an object');
    }
    return value;
  } catch {
    throw new HttpError(400, 'body must be a JSON object');
  }
}

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// ---------------------------------------------------------------------------------------------
// Discovery and keys
// ---------------------------------------------------------------------------------------------

function discoveryDocument() {
  return {
    issuer,
    authorization_endpoint: `${issuer}/authorize`,
    token_endpoint: `${issuer}/token`,
    userinfo_endpoint: `${issuer}/userinfo`,
    jwks_uri: `${issuer}/jwks`,
    revocation_endpoint: `${issuer}/revoke`,
    introspection_endpoint: `${issuer}/introspect`,
    scopes_supported: ['openid', 'profile', 'email', 'offline_access', 'files:read', 'files:write'],
    response_types_supported: ['code'],
    response_modes_supported: ['query'],
    grant_types_supported: ['authorization_code', 'refresh_token'],
    subject_types_supported: ['public'],
    id_token_signing_alg_values_supported: ['RS256'],
    token_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post', 'none'],
    revocation_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post', 'none'],
    code_challenge_methods_supported: ['S256'],
    claims_supported: ['iss', 'sub', 'aud', 'exp', 'iat', 'auth_time', 'nonce', 'at_hash',
      'preferred_username', 'name', 'email'],
    authorization_response_iss_parameter_supported: true,
  };
}

// ---------------------------------------------------------------------------------------------
// Authorization endpoint and login page
// ---------------------------------------------------------------------------------------------

function authorizationResponse(redirectUri, params) {
  const target = new URL(redirectUri);
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') target.searchParams.append(key, value);
  }
  const iss = state.config.authorization_response_iss === undefined
    ? issuer
    : state.config.authorization_response_iss;
  if (iss !== null) target.searchParams.append('iss', iss);
  return target.toString();
}

function errorPage(res, status, title, detail) {
  sendHtml(res, status, `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(title)}</title></head>
<body><main><h1 id="error-title">${escapeHtml(title)}</h1>
<p id="error-detail">${escapeHtml(detail)}</p></main></body></html>`);
}

function loginPage(res, status, request, message = '') {
  const scopes = request.scope ? request.scope.split(' ') : [];
  const scopeItems = scopes.map((s) => `<li>${escapeHtml(s)}</li>`).join('');
  sendHtml(res, status, `<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in - test OAuth server</title></head>
<body><main>
<h1>Sign in</h1>
<p>Application <strong id="client-id">${escapeHtml(request.client_id)}</strong> asks for:</p>
<ul id="scopes">${scopeItems}</ul>
${message ? `<p id="login-error" role="alert">${escapeHtml(message)}</p>` : ''}
<form id="login" method="post" action="/login">
  <input type="hidden" name="request_id" value="${escapeHtml(request.id)}">
  <label for="username">Username</label>
  <input id="username" name="username" type="text" autocomplete="username" required
         value="${escapeHtml(request.login_hint || '')}">
  <button id="approve" type="submit" name="action" value="approve">Sign in and allow</button>
  <button id="deny" type="submit" name="action" value="deny" formnovalidate>Deny</button>
</form>
</main></body></html>`);
}

function handleAuthorize(req, res, url) {
  state.stats.authorize_calls += 1;
  const q = url.searchParams;
  if (profileIs('client_key') && q.get('client_id')) {
    return errorPage(res, 400, 'Invalid request', 'this provider takes client_key, not client_id');
  }
  const clientId = profileIs('client_key') ? q.get('client_key') : q.get('client_id');
  const redirectUri = q.get('redirect_uri');
  // Errors about the client or the redirect URI must not redirect (RFC 6749 §4.1.2.1): the
  // redirect target is exactly what cannot be trusted yet.
  if (!clientId) return errorPage(res, 400, 'Invalid request', 'client_id is required');
  if (!redirectUri) return errorPage(res, 400, 'Invalid request', 'redirect_uri is required');
  try {
    new URL(redirectUri);
  } catch {
    return errorPage(res, 400, 'Invalid request', 'redirect_uri is not an absolute URL');
  }
  const client = state.clients.get(clientId);
  if (!client && state.config.require_registered_clients) {
    return errorPage(res, 400, 'Unknown client', `client_id ${clientId} is not registered`);
  }
  if (client && client.redirect_uris.length > 0 && !client.redirect_uris.includes(redirectUri)) {
    return errorPage(res, 400, 'Invalid redirect_uri', 'redirect_uri does not exactly match a registered one');
  }

  const stateParam = q.get('state') || undefined;
  const fail = (error, description) => redirect(res, authorizationResponse(redirectUri, {
    error, error_description: description, state: stateParam,
  }));
  if (q.get('response_type') !== 'code') return fail('unsupported_response_type', 'only response_type=code');
  const challenge = q.get('code_challenge');
  if (profileIs('pkce_refused')) {
    if (challenge) return fail('invalid_request', 'this provider does not support PKCE');
  } else {
    if (!challenge) return fail('invalid_request', 'PKCE is required: code_challenge missing');
    if (q.get('code_challenge_method') !== 'S256') return fail('invalid_request', 'code_challenge_method must be S256');
    if (!/^[A-Za-z0-9_-]{43}$/.test(challenge)) return fail('invalid_request', 'code_challenge is not a S256 value');
  }
  if (profileIs('audience') && (q.get('audience') !== 'api.atlassian.com' || q.get('prompt') !== 'consent')) {
    return fail('invalid_request', 'audience=api.atlassian.com and prompt=consent are required');
  }
  if (profileIs('user_token') && q.get('scope')) return fail('invalid_scope', 'a user token is asked with user_scope');
  const rawScope = (profileIs('user_token') ? q.get('user_scope') : q.get('scope')) || '';
  if (commaScopes() && rawScope.includes(' ')) return fail('invalid_scope', 'scopes are separated by commas here');
  const forced = state.failNextAuthorize.shift();
  if (forced) return fail(forced.error, forced.error_description);
  if ((q.get('prompt') || '').split(' ').includes('none')) return fail('login_required', 'no session at this server');

  const request = {
    id: crypto.randomBytes(16).toString('base64url'),
    client_id: clientId,
    redirect_uri: redirectUri,
    scope: commaScopes() ? rawScope.split(',').filter(Boolean).join(' ') : rawScope,
    state: stateParam,
    nonce: q.get('nonce') || undefined,
    code_challenge: challenge,
    login_hint: q.get('login_hint') || '',
    expires_at: now() + AUTH_REQUEST_TTL_SECONDS,
  };
  state.authRequests.set(request.id, request);
  return loginPage(res, 200, request);
}

async function handleLogin(req, res) {
  state.stats.login_submissions += 1;
  const form = await readForm(req);
  const request = state.authRequests.get(form.get('request_id') || '');
  if (!request || request.expires_at <= now()) {
    return errorPage(res, 400, 'Login expired', 'this sign-in request is unknown or has expired');
  }
  if (form.get('action') === 'deny') {
    state.authRequests.delete(request.id);
    return redirect(res, authorizationResponse(request.redirect_uri, {
      error: 'access_denied', error_description: 'the user denied the request', state: request.state,
    }), 303);
  }
  const username = (form.get('username') || '').trim();
  if (!USERNAME_PATTERN.test(username)) {
    return loginPage(res, 400, request, 'Username: 1-64 letters, digits, or . _ @ -');
  }
  state.authRequests.delete(request.id);
  const code = takePlanted('code') || randomToken('code');
  const at = now();
  state.codes.set(code, {
    code,
    client_id: request.client_id,
    redirect_uri: request.redirect_uri,
    scope: request.scope,
    nonce: request.nonce,
    code_challenge: request.code_challenge,
    sub: username,
    auth_time: Math.floor(at),
    expires_at: at + state.config.code_ttl,
    used: false,
    family: null,
  });
  const extra = profileIs('callback_params') ? { realmId: `9130${accountId(username).slice(-8)}` } : {};
  if (profileIs('accounts_server')) {
    extra.location = 'eu';
    extra['accounts-server'] = state.config.accounts_server || issuer.replace('127.0.0.1', 'localhost');
  }
  if (profileIs('shop_hmac')) {
    const signed = { code, state: request.state, shop: 'acme-store.myshopify.com', host: 'YWNtZQ', timestamp: String(Math.floor(at)) };
    const client = state.clients.get(request.client_id);
    const message = Object.keys(signed).sort().map((k) => `${k}=${signed[k]}`).join('&');
    const mac = crypto.createHmac('sha256', client && client.client_secret ? client.client_secret : '').update(message).digest('hex');
    return redirect(res, authorizationResponse(request.redirect_uri, { ...signed, hmac: mac }), 303);
  }
  return redirect(res, authorizationResponse(request.redirect_uri, { code, state: request.state, ...extra }), 303);
}

// ---------------------------------------------------------------------------------------------
// Client authentication (token and revocation endpoints)
// ---------------------------------------------------------------------------------------------

function decodeFormComponent(value) {
  return decodeURIComponent(value.replace(/\+/g, ' '));
}

/** Reads the client's credentials without judging them, so failed attempts are logged too. */
function clientCredentials(req, form) {
  const header = req.headers.authorization || '';
  if (header.toLowerCase().startsWith('basic ')) {
    const decoded = Buffer.from(header.slice(6).trim(), 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon < 0) throw { status: 401, error: 'invalid_client', description: 'malformed Basic credentials' };
    // RFC 6749 §2.3.1: both parts are form-urlencoded before being joined.
    const clientId = decodeFormComponent(decoded.slice(0, colon));
    if (form.get('client_id') && form.get('client_id') !== clientId) {
      throw { status: 400, error: 'invalid_request', description: 'client_id differs from Basic credentials' };
    }
    return { client_id: clientId, secret: decodeFormComponent(decoded.slice(colon + 1)), method: 'client_secret_basic' };
  }
  if (profileIs('client_key') && form.get('client_id')) {
    throw { status: 400, error: 'invalid_request', description: 'this provider takes client_key, not client_id' };
  }
  const clientId = profileIs('client_key') ? form.get('client_key') : form.get('client_id');
  if (!clientId) throw { status: 401, error: 'invalid_client', description: 'client authentication required' };
  const secret = form.get('client_secret');
  return { client_id: clientId, secret, method: secret ? 'client_secret_post' : 'none' };
}

/** Checks credentials against the registered client; unknown clients pass unless configured. */
function verifyClient(credentials) {
  const client = state.clients.get(credentials.client_id);
  if (!client) {
    if (state.config.require_registered_clients) {
      throw { status: 401, error: 'invalid_client', description: 'unknown client' };
    }
    return;
  }
  const secret = credentials.secret;
  if (client.client_secret !== null && (!secret || !safeEqual(secret, client.client_secret))) {
    throw { status: 401, error: 'invalid_client', description: 'client authentication failed' };
  }
}

// ---------------------------------------------------------------------------------------------
// Token issuance
// ---------------------------------------------------------------------------------------------

/** RFC 9068: a JWT access token for `audience` (a string or a list), signed like the ID tokens. */
function jwtAccessToken({ sub, clientId, scope, audience, resource, issuedAt, expiresAt, claimedIssuer,
  typ = 'at+jwt', extraClaims = null }) {
  const claims = {
    // Extra claims first (an operator's `groups`, say): the registered ones below always win.
    ...(extraClaims || {}),
    // Another server's URL here makes a forgery: a token that names a trusted issuer, signed by this one.
    iss: claimedIssuer || issuer,
    sub,
    aud: audience,
    client_id: clientId,
    scope,
    iat: Math.floor(issuedAt),
    nbf: Math.floor(issuedAt),
    exp: expiresAt === null ? null : Math.floor(expiresAt),
    jti: crypto.randomBytes(12).toString('base64url'),
  };
  if (expiresAt === null) delete claims.exp;
  if (audience === null) delete claims.aud;
  if (resource !== null) claims.resource = resource;
  const header = { alg: 'RS256', kid: KEY_ID };
  if (typ !== null) header.typ = typ;
  const input = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(claims))}`;
  return `${input}.${b64url(crypto.sign('sha256', Buffer.from(input), privateKey))}`;
}

function issueTokens({ sub, clientId, scope, nonce, authTime, family, grantType, withRefresh,
  audience = null, resource = null, format = 'opaque', ttl = undefined, claimedIssuer = null,
  typ = undefined, expires = true, extraClaims = null }) {
  const at = now();
  const config = state.config;
  const lifetime = ttl === undefined ? config.access_token_ttl : ttl;
  // `expires: false`: a token with no expiry at all (no `exp` in the JWT or the introspection answer).
  const expiresAt = expires ? at + lifetime : null;
  const accessToken = format === 'jwt'
    ? jwtAccessToken({ sub, clientId, scope, audience, resource, issuedAt: at, expiresAt, claimedIssuer, typ,
      extraClaims })
    : takePlanted('access_token') || randomToken('at');
  state.tokens.set(accessToken, {
    token: accessToken,
    kind: 'access',
    sub,
    client_id: clientId,
    scope,
    family,
    grant_type: grantType,
    issued_at: at,
    expires_at: expiresAt,
    used_at: null,
    revoked_at: null,
    replaced_by: null,
    audience,
  });
  const body = {
    access_token: accessToken,
    token_type: 'Bearer',
    expires_in: lifetime,
    scope,
  };
  if (expiresAt === null) delete body.expires_in;
  if (withRefresh) {
    const refreshToken = takePlanted('refresh_token') || randomToken('rt');
    state.tokens.set(refreshToken, {
      token: refreshToken,
      kind: 'refresh',
      sub,
      client_id: clientId,
      scope,
      family,
      grant_type: grantType,
      issued_at: at,
      expires_at: config.refresh_token_ttl === null ? null : at + config.refresh_token_ttl,
      used_at: null,
      revoked_at: null,
      replaced_by: null,
    });
    body.refresh_token = refreshToken;
    // GitHub's expiring refresh tokens: the answer says how long the refresh token lasts.
    if (config.refresh_token_ttl !== null) body.refresh_token_expires_in = config.refresh_token_ttl;
  }
  if (scope.split(' ').includes('openid')) {
    const claims = {
      iss: issuer,
      sub,
      aud: clientId,
      iat: Math.floor(at),
      exp: Math.floor(at) + config.id_token_ttl,
      auth_time: authTime,
      at_hash: atHash(accessToken),
      preferred_username: sub,
      name: sub.charAt(0).toUpperCase() + sub.slice(1),
      email: `${sub}@example.com`,
    };
    if (nonce !== undefined) claims.nonce = nonce;
    body.id_token = signJwt(claims);
  }
  return body;
}

function newFamily() {
  state.sequence += 1;
  return `grant-${state.sequence}`;
}

function grantAuthorizationCode(form, client) {
  const code = state.codes.get(form.get('code') || '');
  if (!code) throw { status: 400, error: 'invalid_grant', description: 'unknown authorization code' };
  if (code.used) {
    // RFC 6749 §4.1.2: a replayed code revokes what it already produced.
    if (code.family) revokeFamily(code.family);
    throw { status: 400, error: 'invalid_grant', description: 'authorization code already used' };
  }
  code.used = true;
  if (code.expires_at <= now()) throw { status: 400, error: 'invalid_grant', description: 'authorization code expired' };
  if (code.client_id !== client.client_id) throw { status: 400, error: 'invalid_grant', description: 'code was issued to another client' };
  if (form.get('redirect_uri') !== code.redirect_uri) {
    throw { status: 400, error: 'invalid_grant', description: 'redirect_uri does not match the authorization request' };
  }
  const verifier = form.get('code_verifier');
  if (profileIs('pkce_refused')) {
    if (verifier) throw { status: 400, error: 'invalid_request', description: 'this provider does not support PKCE' };
  } else {
    if (!verifier) throw { status: 400, error: 'invalid_request', description: 'code_verifier is required' };
    if (!/^[A-Za-z0-9._~-]{43,128}$/.test(verifier)) {
      throw { status: 400, error: 'invalid_request', description: 'code_verifier does not follow RFC 7636' };
    }
    if (!safeEqual(pkceS256(verifier), code.code_challenge)) {
      throw { status: 400, error: 'invalid_grant', description: 'PKCE verification failed' };
    }
  }
  code.family = newFamily();
  return issueTokens({
    sub: code.sub,
    clientId: code.client_id,
    scope: code.scope,
    nonce: code.nonce,
    authTime: code.auth_time,
    family: code.family,
    grantType: 'authorization_code',
    withRefresh: state.config.issue_refresh_tokens,
  });
}

function grantRefreshToken(form, client) {
  const presented = form.get('refresh_token') || '';
  const record = state.tokens.get(presented);
  if (!record || record.kind !== 'refresh') throw { status: 400, error: 'invalid_grant', description: 'unknown refresh token' };
  if (record.client_id !== client.client_id) throw { status: 400, error: 'invalid_grant', description: 'refresh token belongs to another client' };
  const forced = state.failNextRefresh.shift();
  if (forced) {
    // An invalid_grant means the provider has dropped the grant; make that true here as well.
    if (forced.error === 'invalid_grant') revokeFamily(record.family);
    throw { status: forced.status, error: forced.error, description: 'failure forced through /__control' };
  }
  const status = tokenStatus(record);
  if (status === 'used') {
    if (state.config.revoke_family_on_reuse) revokeFamily(record.family);
    throw { status: 400, error: 'invalid_grant', description: 'refresh token already used' };
  }
  if (status !== 'active') throw { status: 400, error: 'invalid_grant', description: `refresh token ${status}` };
  let scope = record.scope;
  const requested = form.get('scope');
  if (requested) {
    const granted = new Set(record.scope.split(' '));
    const wanted = requested.split(' ').filter(Boolean);
    if (!wanted.every((s) => granted.has(s))) {
      throw { status: 400, error: 'invalid_scope', description: 'scope exceeds the original grant' };
    }
    scope = wanted.join(' ');
  }
  const rotate = state.config.rotate_refresh_tokens;
  const body = issueTokens({
    sub: record.sub,
    clientId: record.client_id,
    scope,
    nonce: undefined,
    authTime: undefined,
    family: record.family,
    grantType: 'refresh_token',
    // Without rotation the client keeps using the refresh token it has, as with many providers.
    withRefresh: rotate && state.config.issue_refresh_tokens,
  });
  if (rotate) {
    record.used_at = now();
    record.replaced_by = body.refresh_token || null;
  }
  return body;
}

/** A token answer in the shape the profile's provider writes it. */
function shapedAnswer(body, sub, grantType) {
  const answer = { ...body };
  if (commaScopes() && typeof answer.scope === 'string') answer.scope = answer.scope.split(' ').join(',');
  if (profileIs('user_token')) {
    if (grantType === 'refresh_token') return { ok: true, ...answer, token_type: 'user' };
    const { access_token, refresh_token, expires_in, scope } = answer;
    return {
      ok: true,
      app_id: 'A0001',
      authed_user: { id: `U${accountId(sub).slice(-9)}`, scope, access_token, token_type: 'user', refresh_token, expires_in },
      team: { id: 'T0001', name: 'Acme' },
    };
  }
  if (profileIs('nested_token')) {
    return { ok: true, ...answer, authed_user: { id: `U${accountId(sub).slice(-9)}`, scope: answer.scope }, team: { id: 'T0001', name: 'Acme' } };
  }
  if (profileIs('shop_hmac')) answer.associated_user = { id: accountId(sub), email: `${sub}@example.com` };
  if (profileIs('json_body')) answer.merchant_id = `M${accountId(sub).slice(-10)}`;
  if (profileIs('instance_url')) {
    answer.instance_url = `${issuer}/instance`;
    answer.id = `${issuer}/id/00D000000000001/${accountId(sub)}`;
  }
  if ((profileIs('expiring_refresh') || profileIs('form_answer')) && answer.refresh_token) {
    answer.refresh_token_expires_in = state.config.refresh_token_ttl || 15897600;
  }
  return answer;
}

async function readTokenForm(req) {
  if (!profileIs('json_body')) return readForm(req);
  if (!(req.headers['content-type'] || '').startsWith('application/json')) {
    throw { status: 400, error: 'invalid_request', description: 'the token request is a JSON object here' };
  }
  const body = await readJson(req);
  return new URLSearchParams(Object.entries(body || {}).map(([k, v]) => [k, String(v)]));
}

async function handleToken(req, res) {
  const startedAt = now();
  let form;
  try {
    form = await readTokenForm(req);
  } catch (failure) {
    if (!failure || typeof failure.error !== 'string') throw failure;
    return sendOAuthError(res, failure.status, failure.error, failure.description);
  }
  const grantType = form.get('grant_type') || '';
  state.stats.token_calls[grantType] = (state.stats.token_calls[grantType] || 0) + 1;
  // The delay comes before any state is read, so parallel requests overlap exactly where a
  // client's missing lock would let them race.
  if (state.config.token_delay_ms > 0) await sleep(state.config.token_delay_ms);
  const entry = {
    host: req.headers.host || null,
    grant_type: grantType,
    client_id: null,
    auth_method: null,
    outcome: 'ok',
    error: null,
    started_at: startedAt,
    finished_at: null,
  };
  state.tokenRequests.push(entry);
  try {
    const client = clientCredentials(req, form);
    entry.client_id = client.client_id;
    entry.auth_method = client.method;
    verifyClient(client);
    let body;
    if (grantType === 'authorization_code') body = grantAuthorizationCode(form, client);
    else if (grantType === 'refresh_token') body = grantRefreshToken(form, client);
    else throw { status: 400, error: 'unsupported_grant_type', description: `grant_type ${grantType || '(none)'}` };
    entry.finished_at = now();
    const record = state.tokens.get(body.access_token);
    const answer = shapedAnswer(body, record ? record.sub : '', grantType);
    if (profileIs('form_answer') && !(req.headers.accept || '').includes('application/json')) {
      const form = new URLSearchParams(Object.entries(answer).map(([k, v]) => [k, String(v)]));
      return send(res, 200, form.toString(), { 'Content-Type': 'application/x-www-form-urlencoded' });
    }
    return sendJson(res, 200, answer, { Pragma: 'no-cache' });
  } catch (failure) {
    if (!failure || typeof failure.error !== 'string') throw failure;
    entry.outcome = 'error';
    entry.error = failure.error;
    entry.finished_at = now();
    // Slack answers every refusal with 200 and {ok: false, error}.
    if (profileIs('nested_token') || profileIs('user_token')) return sendJson(res, 200, { ok: false, error: failure.error });
    const headers = failure.status === 401 ? { 'WWW-Authenticate': 'Basic realm="token"' } : {};
    return sendOAuthError(res, failure.status, failure.error, failure.description, headers);
  }
}

/** RFC 7662: the calling client must authenticate; unknown, expired or revoked tokens are inactive. */
async function handleIntrospect(req, res) {
  state.stats.introspection_calls += 1;
  const form = await readForm(req);
  try {
    const client = clientCredentials(req, form);
    verifyClient(client);
  } catch (failure) {
    if (!failure || typeof failure.error !== 'string') throw failure;
    return sendOAuthError(res, failure.status, failure.error, failure.description);
  }
  const token = form.get('token');
  if (!token) return sendOAuthError(res, 400, 'invalid_request', 'token is required');
  const record = state.tokens.get(token);
  if (!record || tokenStatus(record) !== 'active') return sendJson(res, 200, { active: false });
  const body = {
    active: true,
    iss: issuer,
    sub: record.sub,
    client_id: record.client_id,
    scope: record.scope,
    token_type: record.kind === 'access' ? 'Bearer' : 'refresh_token',
    iat: Math.floor(record.issued_at),
  };
  if (record.expires_at !== null) body.exp = Math.floor(record.expires_at);
  if (record.audience !== null && record.audience !== undefined) body.aud = record.audience;
  return sendJson(res, 200, body);
}

async function handleRevoke(req, res) {
  state.stats.revocation_calls += 1;
  const form = await readForm(req);
  let client;
  try {
    client = clientCredentials(req, form);
    verifyClient(client);
  } catch (failure) {
    if (!failure || typeof failure.error !== 'string') throw failure;
    return sendOAuthError(res, failure.status, failure.error, failure.description);
  }
  const token = form.get('token');
  if (!token) return sendOAuthError(res, 400, 'invalid_request', 'token is required');
  const record = state.tokens.get(token);
  let revoked = 0;
  if (record && record.client_id === client.client_id) {
    // RFC 7009 §2.1: revoking a refresh token also invalidates the access tokens of its grant.
    if (record.kind === 'refresh') revoked = revokeFamily(record.family);
    else if (record.revoked_at === null) {
      record.revoked_at = now();
      revoked = 1;
    }
  }
  state.revocations.push({
    token,
    token_type_hint: form.get('token_type_hint'),
    client_id: client.client_id,
    auth_method: client.method,
    known: Boolean(record),
    kind: record ? record.kind : null,
    revoked_count: revoked,
    at: now(),
  });
  // RFC 7009 §2.2: unknown or already invalid tokens still get 200.
  return send(res, 200, '', { 'Cache-Control': 'no-store' });
}

// ---------------------------------------------------------------------------------------------
// Protected resources
// ---------------------------------------------------------------------------------------------

function bearer(req, res) {
  const header = req.headers.authorization || '';
  const match = /^Bearer\s+(\S+)$/i.exec(header);
  if (!match) {
    sendJson(res, 401, { error: 'invalid_request', error_description: 'Bearer token required' },
      { 'WWW-Authenticate': 'Bearer realm="api"' });
    return null;
  }
  const record = state.tokens.get(match[1]);
  if (!record || record.kind !== 'access' || tokenStatus(record) !== 'active') {
    const why = record && record.kind === 'access' ? `token ${tokenStatus(record)}` : 'unknown token';
    sendJson(res, 401, { error: 'invalid_token', error_description: why },
      { 'WWW-Authenticate': `Bearer realm="api", error="invalid_token", error_description="${why}"` });
    return null;
  }
  return record;
}

function profile(record) {
  return {
    id: accountId(record.sub),
    login: record.sub,
    sub: record.sub,
    name: record.sub.charAt(0).toUpperCase() + record.sub.slice(1),
    email: `${record.sub}@example.com`,
  };
}

function handleApi(req, res, path) {
  state.stats.api_calls[path] = (state.stats.api_calls[path] || 0) + 1;
  const forced = state.failNextApi.shift();
  if (forced) return sendJson(res, forced.status, { error: 'server_error' }, forced.headers);
  const record = bearer(req, res);
  if (!record) return undefined;
  const scopes = record.scope ? record.scope.split(' ') : [];
  if (path === '/userinfo') {
    state.stats.userinfo_calls += 1;
    const p = profile(record);
    return sendJson(res, 200, { sub: p.sub, preferred_username: p.login, name: p.name, email: p.email });
  }
  if (path === '/api/me') return sendJson(res, 200, { ...profile(record), scopes, client_id: record.client_id });
  if (path === 'resources') {
    // What Xero's /connections and Atlassian's accessible-resources answer: a list, one per
    // organisation or site the token reaches (both shapes in one item).
    const id = accountId(record.sub);
    return sendJson(res, 200, [{
      id: `cloud-${id}`, url: 'https://acme.atlassian.net', name: 'acme', scopes,
      tenantId: `tenant-${id}`, tenantType: 'ORGANISATION', tenantName: 'Acme Ltd',
    }]);
  }
  if (path === 'account') {
    const p = profile(record);
    const document = {};
    const paths = state.config.account_paths || { id: 'id', login: 'login' };
    const place = (dotted, value) => {
      const parts = dotted.split('.');
      let at = document;
      for (const part of parts.slice(0, -1)) at = (at[part] = at[part] || {});
      at[parts[parts.length - 1]] = value;
    };
    place(paths.id, p.id);
    if (paths.login) place(paths.login, p.login);
    return sendJson(res, 200, document);
  }
  return sendJson(res, 200, {
    account_id: accountId(record.sub),
    owner: record.sub,
    files: [
      { name: 'notes.txt', size: 120 },
      { name: 'report.pdf', size: 48213 },
    ],
  });
}

// ---------------------------------------------------------------------------------------------
// Control API for tests
// ---------------------------------------------------------------------------------------------

const CONFIG_TYPES = {
  access_token_ttl: 'integer',
  refresh_token_ttl: 'integer-or-null',
  code_ttl: 'integer',
  id_token_ttl: 'integer',
  token_delay_ms: 'integer',
  rotate_refresh_tokens: 'boolean',
  revoke_family_on_reuse: 'boolean',
  issue_refresh_tokens: 'boolean',
  require_registered_clients: 'boolean',
  authorization_response_iss: 'string-or-null',
  profile: 'profile',
  routes: 'object-or-null',
  account_paths: 'object-or-null',
  key_check: 'object-or-null',
  accounts_server: 'string-or-null',
};

function publicConfig() {
  const config = { ...state.config };
  if (config.authorization_response_iss === undefined) config.authorization_response_iss = issuer;
  return config;
}

function applyConfig(body) {
  for (const [key, value] of Object.entries(body)) {
    const kind = CONFIG_TYPES[key];
    if (!kind) throw new HttpError(400, `unknown config key ${key}`);
    const ok = {
      integer: Number.isInteger(value),
      'integer-or-null': value === null || Number.isInteger(value),
      boolean: typeof value === 'boolean',
      'string-or-null': value === null || typeof value === 'string',
      profile: value === null || PROFILES.includes(value),
      'object-or-null': value === null || (typeof value === 'object' && !Array.isArray(value)),
    }[kind];
    if (!ok) throw new HttpError(400, `${key} must be ${kind}`);
    if (key === 'token_delay_ms' && value < 0) throw new HttpError(400, 'token_delay_ms must be >= 0');
  }
  Object.assign(state.config, body);
}

function stringOrNull(body, key) {
  const value = body[key];
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string' || value === '') throw new HttpError(400, `${key} must be a non-empty string`);
  return value;
}

function positiveCount(body) {
  const count = body.count === undefined ? 1 : body.count;
  if (!Number.isInteger(count) || count < 1) throw new HttpError(400, 'count must be a positive integer');
  return count;
}

async function handleControl(req, res, url) {
  const path = url.pathname.slice('/__control'.length) || '/';
  const route = `${req.method} ${path}`;
  switch (route) {
    case 'GET /health':
      return sendJson(res, 200, { ok: true, issuer });
    case 'GET /stats':
      return sendJson(res, 200, state.stats);
    case 'POST /reset-stats':
      state.stats = freshStats();
      state.tokenRequests = [];
      state.revocations = [];
      return sendJson(res, 200, state.stats);
    case 'POST /reset':
      state = freshState();
      return sendJson(res, 200, { ok: true });
    case 'GET /config':
      return sendJson(res, 200, publicConfig());
    case 'POST /config':
      applyConfig(await readJson(req));
      return sendJson(res, 200, publicConfig());
    case 'GET /tokens': {
      const q = url.searchParams;
      const list = [...state.tokens.values()].map(publicToken).filter((t) =>
        (!q.get('kind') || t.kind === q.get('kind'))
        && (!q.get('sub') || t.sub === q.get('sub'))
        && (!q.get('status') || t.status === q.get('status')));
      return sendJson(res, 200, list);
    }
    case 'GET /token-requests':
      return sendJson(res, 200, state.tokenRequests);
    case 'GET /revocations':
      return sendJson(res, 200, state.revocations);
    case 'POST /fail-next-refresh': {
      const body = await readJson(req);
      const error = stringOrNull(body, 'error') || 'invalid_grant';
      const status = body.status === undefined ? (error === 'server_error' ? 500 : 400) : body.status;
      if (!Number.isInteger(status) || status < 400 || status > 599) throw new HttpError(400, 'status must be 4xx or 5xx');
      const count = positiveCount(body);
      for (let i = 0; i < count; i += 1) state.failNextRefresh.push({ error, status });
      return sendJson(res, 200, { pending: state.failNextRefresh.length });
    }
    case 'POST /fail-next-api': {
      // The next `count` calls of the resource API (/userinfo, /api/me, /api/files) answer `status`.
      const body = await readJson(req);
      const status = body.status === undefined ? 500 : body.status;
      if (!Number.isInteger(status) || status < 400 || status > 599) throw new HttpError(400, 'status must be 4xx or 5xx');
      const headers = body.retry_after === undefined ? {} : { 'Retry-After': String(body.retry_after) };
      const count = positiveCount(body);
      for (let i = 0; i < count; i += 1) state.failNextApi.push({ status, headers });
      return sendJson(res, 200, { pending: state.failNextApi.length });
    }
    case 'POST /fail-next-authorize': {
      const body = await readJson(req);
      const error = stringOrNull(body, 'error') || 'server_error';
      const description = stringOrNull(body, 'error_description') || 'failure forced through /__control';
      const count = positiveCount(body);
      for (let i = 0; i < count; i += 1) state.failNextAuthorize.push({ error, error_description: description });
      return sendJson(res, 200, { pending: state.failNextAuthorize.length });
    }
    case 'POST /plant': {
      const body = await readJson(req);
      for (const kind of Object.keys(body)) {
        if (!(kind in state.planted)) throw new HttpError(400, `cannot plant ${kind}`);
      }
      for (const kind of Object.keys(state.planted)) {
        const value = stringOrNull(body, kind);
        if (value === null) continue;
        if (state.tokens.has(value) || state.codes.has(value)) throw new HttpError(409, `${kind} value already issued`);
        state.planted[kind].push(value);
      }
      return sendJson(res, 200, state.planted);
    }
    case 'GET /clients':
      return sendJson(res, 200, [...state.clients.values()]);
    case 'POST /clients': {
      const body = await readJson(req);
      const clientId = stringOrNull(body, 'client_id');
      if (clientId === null) throw new HttpError(400, 'client_id is required');
      const redirectUris = body.redirect_uris === undefined ? [] : body.redirect_uris;
      if (!Array.isArray(redirectUris) || !redirectUris.every((u) => typeof u === 'string')) {
        throw new HttpError(400, 'redirect_uris must be a list of strings');
      }
      const client = { client_id: clientId, client_secret: stringOrNull(body, 'client_secret'), redirect_uris: redirectUris };
      state.clients.set(clientId, client);
      return sendJson(res, 200, client);
    }
    case 'POST /expire': {
      const body = await readJson(req);
      const token = stringOrNull(body, 'token');
      const sub = stringOrNull(body, 'sub');
      const at = now();
      let count = 0;
      for (const record of state.tokens.values()) {
        const matches = token !== null ? record.token === token : (record.kind === 'access' && (sub === null || record.sub === sub));
        if (matches && tokenStatus(record, at) === 'active') {
          record.expires_at = at - 1;
          count += 1;
        }
      }
      return sendJson(res, 200, { expired: count });
    }
    case 'POST /revoke': {
      const body = await readJson(req);
      const token = stringOrNull(body, 'token');
      const record = token === null ? undefined : state.tokens.get(token);
      if (!record) throw new HttpError(404, 'unknown token');
      return sendJson(res, 200, { revoked: revokeFamily(record.family) });
    }
    case 'POST /mint': {
      const body = await readJson(req);
      const sub = stringOrNull(body, 'sub');
      if (sub === null || !USERNAME_PATTERN.test(sub)) throw new HttpError(400, 'sub must be a username');
      // An access token for an MCP server: `audience` (a string or a list of strings) and
      // `resource` end up in the JWT or in the introspection answer; `ttl` may be negative (expired).
      const format = body.format === undefined ? 'opaque' : body.format;
      if (format !== 'opaque' && format !== 'jwt') throw new HttpError(400, 'format must be opaque or jwt');
      const audience = body.audience === undefined ? null : body.audience;
      const audienceOk = audience === null || typeof audience === 'string'
        || (Array.isArray(audience) && audience.every((a) => typeof a === 'string'));
      if (!audienceOk) throw new HttpError(400, 'audience must be a string or a list of strings');
      if (body.ttl !== undefined && !Number.isInteger(body.ttl)) throw new HttpError(400, 'ttl must be an integer');
      // `typ`: the JWT header's typ (null leaves it out; default at+jwt); `expires: false`: no exp.
      if (body.typ !== undefined && body.typ !== null && typeof body.typ !== 'string') {
        throw new HttpError(400, 'typ must be a string or null');
      }
      if (body.expires !== undefined && typeof body.expires !== 'boolean') {
        throw new HttpError(400, 'expires must be a boolean');
      }
      // `claims`: more claims for a JWT access token (e.g. {"groups": ["oncall"]}).
      const claimsOk = body.claims === undefined || (body.claims !== null && typeof body.claims === 'object'
        && !Array.isArray(body.claims));
      if (!claimsOk) throw new HttpError(400, 'claims must be an object');
      const tokens = issueTokens({
        sub,
        clientId: stringOrNull(body, 'client_id') || 'test-client',
        scope: body.scope === undefined ? 'openid' : String(body.scope),
        nonce: stringOrNull(body, 'nonce') || undefined,
        authTime: Math.floor(now()),
        family: newFamily(),
        grantType: 'mint',
        withRefresh: state.config.issue_refresh_tokens,
        audience,
        resource: stringOrNull(body, 'resource'),
        format,
        ttl: body.ttl,
        claimedIssuer: stringOrNull(body, 'iss'),
        typ: body.typ,
        expires: body.expires !== false,
        extraClaims: body.claims === undefined ? null : body.claims,
      });
      return sendJson(res, 200, tokens);
    }
    default:
      throw new HttpError(404, `no control route ${route}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Router
// ---------------------------------------------------------------------------------------------

async function route(req, res) {
  const url = new URL(req.url, issuer);
  const path = url.pathname;
  const method = req.method;
  if (path.startsWith('/__control')) return handleControl(req, res, url);
  if (method === 'GET' && (path === '/.well-known/openid-configuration'
    || path === '/.well-known/oauth-authorization-server')) {
    return sendJson(res, 200, discoveryDocument(), { 'Cache-Control': 'max-age=0' });
  }
  if (method === 'GET' && path === '/jwks') return sendJson(res, 200, { keys: [PUBLIC_JWK] });
  if (method === 'GET' && path === '/authorize') return handleAuthorize(req, res, url);
  if (method === 'POST' && path === '/login') return handleLogin(req, res);
  if (method === 'POST' && path === '/token') return handleToken(req, res);
  if (method === 'POST' && path === '/revoke') return handleRevoke(req, res);
  if (method === 'POST' && path === '/introspect') return handleIntrospect(req, res);
  if (method === 'GET' && ['/userinfo', '/api/me', '/api/files'].includes(path)) return handleApi(req, res, path);
  if (method === 'GET' && path === '/') return sendJson(res, 200, { issuer, discovery: `${issuer}/.well-known/openid-configuration` });
  const routed = (state.config.routes || {})[path];
  if (routed === 'authorize' && method === 'GET') return handleAuthorize(req, res, url);
  if (routed === 'token' && method === 'POST') return handleToken(req, res);
  if (routed === 'revoke' && method === 'POST') return handleRevoke(req, res);
  if (routed === 'account' && (method === 'GET' || method === 'POST')) return handleApi(req, res, 'account');
  if (routed === 'resources' && method === 'GET') return handleApi(req, res, 'resources');
  if (routed === 'key_check') {
    state.stats.api_calls.key_check = (state.stats.api_calls.key_check || 0) + 1;
    const check = state.config.key_check || {};
    const given = req.headers[String(check.header || 'authorization').toLowerCase()];
    const required = Object.entries(check.required || {}).every(([k, v]) => req.headers[k.toLowerCase()] === v);
    const ok = required && (check.accepted || []).includes(given);
    return sendJson(res, ok ? 200 : 401, ok ? { ok: true } : { error: 'invalid_api_key' });
  }
  throw new HttpError(404, `no route ${method} ${path}`);
}

const server = http.createServer((req, res) => {
  route(req, res).catch((err) => {
    const status = err instanceof HttpError ? err.status : 500;
    if (status === 500) process.stderr.write(`oauth-server: ${err && err.stack ? err.stack : err}\n`);
    if (!res.headersSent) sendJson(res, status, { error: status === 500 ? 'server_error' : 'invalid_request', error_description: err.message });
    else res.destroy();
  });
});

function parsePort(value) {
  const port = Number(value);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    process.stderr.write(`oauth-server: invalid port ${value}\n`);
    process.exit(2);
  }
  return port;
}

const port = parsePort(process.argv[2] || process.env.OAUTH_SERVER_PORT || process.env.PORT || '0');
const host = process.argv[3] || process.env.OAUTH_SERVER_HOST || '127.0.0.1';

server.listen(port, host, () => {
  const address = server.address();
  const shownHost = host.includes(':') ? `[${host}]` : host;
  issuer = `http://${shownHost}:${address.port}`;
  process.stdout.write(`READY ${issuer}\n`);
});

function shutdown() {
  server.close(() => process.exit(0));
  server.closeAllConnections();
}

process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
// With OAUTH_SERVER_EXIT_ON_STDIN_CLOSE=1 the server dies with the test process that spawned it,
// even when that process is killed without running its teardown.
if (process.env.OAUTH_SERVER_EXIT_ON_STDIN_CLOSE === '1') {
  process.stdin.on('end', shutdown);
  process.stdin.on('close', shutdown);
  process.stdin.resume();
}
