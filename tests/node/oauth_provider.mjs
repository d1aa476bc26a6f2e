// A real OAuth 2.0 / OpenID provider (`oidc-provider`) for toolgate's app-OAuth tests: the
// authorization server of an app that requires bearer tokens. Listens on 127.0.0.1 at a port
// the OS picks (the tests read it from /proc) and serves one confidential client:
//   client_id toolgate-app, client_secret from CLIENT_SECRET, redirect URI from REDIRECT_URI,
//   authorization code with PKCE (required), refresh tokens, revocation, introspection, resource
//   indicators (RFC 8707: tokens for a resource on 127.0.0.1 carry it as `aud`), and the
//   development sign-in and consent pages (any login name signs in).
// For toolgate's gateways (resources whose path starts with /gateway/, test_gateway_oauth.py):
// dynamic client registration (RFC 7591), scope `mcp`, and access tokens that are JWTs signed
// with the provider's RSA key (RFC 9068), which the gateway verifies with the provider's JWKS.
// For toolgate's web sign-in (test_web_signin_oidc.py), when SIGNIN_REDIRECT_URI is set: a
// second confidential client `toolgate-signin` (secret CLIENT_SECRET) whose ID tokens carry the
// user's `email` (`<login>@example.com`) and `email_verified` (false for logins that start with
// "unverified").
// For toolgate's token exchange (test_token_exchange.py), when TOKEN_EXCHANGE is set: the
// client `toolgate-app` may also use client_credentials and OAuth 2.0 Token Exchange (RFC 8693),
// and a client `toolgate-basic` (same secret, HTTP Basic authentication) token exchange alone.
// oidc-provider has no token exchange of its own, so the grant is registered here
// (`registerGrantType`), following RFC 8693 section 2: `subject_token` must be a live token of
// this provider (a JWT it signed, verified with its key, or an access token it holds) of the
// `subject_token_type` named; `resource` (RFC 8707) must be a resource this provider serves
// (else `invalid_target`), `audience`, when sent, must name it too; the answer is an access
// token for that resource (`aud`) whose subject is the subject token's, with
// `issued_token_type`. GET /test/exchanges answers how many tokens it issued and refused.
// ACCESS_TOKEN_TTL (seconds) sets the access tokens' life. Revoking a token revokes every token
// of its grant (oidc-provider's rule): its refresh token too.
import http from 'node:http';
import { createPublicKey, generateKeyPairSync } from 'node:crypto';
import { jwtVerify } from 'jose';
import Provider, { errors } from 'oidc-provider';

const server = http.createServer();
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const { port } = server.address();

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: 'tests-rs256', use: 'sig', alg: 'RS256' };

const clients = [{
  client_id: 'toolgate-app',
  client_secret: process.env.CLIENT_SECRET,
  redirect_uris: [process.env.REDIRECT_URI],
  grant_types: ['authorization_code', 'refresh_token'],
  response_types: ['code'],
  token_endpoint_auth_method: 'client_secret_post',
}];
const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const exchanging = Boolean(process.env.TOKEN_EXCHANGE);
if (exchanging) {
  clients[0].grant_types.push('client_credentials', TOKEN_EXCHANGE);
  // The same, authenticating with HTTP Basic (RFC 6749 section 2.3.1).
  clients.push({
    client_id: 'toolgate-basic',
    client_secret: process.env.CLIENT_SECRET,
    grant_types: [TOKEN_EXCHANGE],
    response_types: [],
    redirect_uris: [],
    token_endpoint_auth_method: 'client_secret_basic',
  });
}
if (process.env.SIGNIN_REDIRECT_URI) {
  clients.push({
    client_id: 'toolgate-signin',
    client_secret: process.env.CLIENT_SECRET,
    redirect_uris: [process.env.SIGNIN_REDIRECT_URI],
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_post',
  });
}

/** The resource servers this provider mints tokens for: those on this host. */
function resourceServerInfo(resource) {
  if (!resource.startsWith('http://127.0.0.1:')) throw new errors.InvalidTarget();
  if (new URL(resource).pathname.startsWith('/gateway/')) {
    return { scope: 'mcp', audience: resource, accessTokenFormat: 'jwt', jwt: { sign: { alg: 'RS256' } } };
  }
  return { scope: 'openid', audience: resource, accessTokenFormat: 'opaque' };
}

const provider = new Provider(`http://127.0.0.1:${port}`, {
  jwks: { keys: [signingKey] },
  claims: { openid: ['sub'], email: ['email', 'email_verified'] },
  conformIdTokenClaims: false,
  scopes: ['openid', 'offline_access', 'mcp'],
  clients,
  pkce: { required: () => true },
  ttl: { AccessToken: Number(process.env.ACCESS_TOKEN_TTL || 3600) },
  issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
  features: {
    devInteractions: { enabled: true },
    registration: { enabled: true },
    revocation: { enabled: true },
    introspection: { enabled: true },
    // RFC 8707: a client that names a resource (an MCP server on this host) gets tokens for it
    // alone (their `aud`); one that names none gets tokens without an audience.
    resourceIndicators: {
      enabled: true,
      defaultResource: (ctx, client, oneOf) => oneOf ?? undefined,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, resource) => resourceServerInfo(resource),
    },
    clientCredentials: { enabled: exchanging },
  },
  findAccount: async (ctx, sub) => ({
    accountId: sub,
    claims: async () => ({ sub, email: `${sub}@example.com`, email_verified: !sub.startsWith('unverified') }),
  }),
  cookies: { keys: ['toolgate-tests-only'] },
});
const TOKEN_TYPE = {
  jwt: 'urn:ietf:params:oauth:token-type:jwt',
  accessToken: 'urn:ietf:params:oauth:token-type:access_token',
};
const exchanges = { issued: 0, refused: 0 };

/** The subject of `token`, a live token of this provider of type `type` (RFC 8693 section 2.1). */
async function subjectOf(token, type) {
  if (type === TOKEN_TYPE.jwt) {
    try {
      const { payload } = await jwtVerify(token, createPublicKey(privateKey), {
        issuer: provider.issuer, algorithms: ['RS256'],
      });
      return payload.sub;
    } catch {
      throw new errors.InvalidGrant('subject_token is not a live JWT of this issuer');
    }
  }
  if (type === TOKEN_TYPE.accessToken) {
    const found = await provider.AccessToken.find(token);
    if (!found || found.isExpired) throw new errors.InvalidGrant('subject_token is not a live access token of this issuer');
    return found.accountId;
  }
  throw new errors.InvalidRequest('unsupported subject_token_type');
}

async function tokenExchange(ctx) {
  const { params, client } = ctx.oidc;
  try {
    if (!params.subject_token) throw new errors.InvalidRequest('subject_token is required');
    if (!params.subject_token_type) throw new errors.InvalidRequest('subject_token_type is required');
    if (params.actor_token) throw new errors.InvalidRequest('actor_token is not supported');
    if (params.requested_token_type && params.requested_token_type !== TOKEN_TYPE.accessToken) {
      throw new errors.InvalidRequest('only access tokens are issued');
    }
    const sub = await subjectOf(params.subject_token, params.subject_token_type);
    if (!sub) throw new errors.InvalidGrant('subject_token names no subject');
    const { resource, audience } = params;
    if (typeof resource !== 'string') throw new errors.InvalidTarget('exactly one resource is required');
    const info = resourceServerInfo(resource);
    if (audience !== undefined && audience !== resource) throw new errors.InvalidTarget('unknown audience');
    const token = new provider.AccessToken({ accountId: sub, client, gty: TOKEN_EXCHANGE });
    token.resourceServer = new provider.ResourceServer(resource, info);
    const value = await token.save();
    exchanges.issued += 1;
    ctx.body = {
      access_token: value,
      issued_token_type: TOKEN_TYPE.accessToken,
      token_type: 'Bearer',
      expires_in: token.expiration,
    };
  } catch (e) {
    exchanges.refused += 1;
    throw e;
  }
}

if (exchanging) {
  provider.registerGrantType(TOKEN_EXCHANGE, tokenExchange, [
    'subject_token', 'subject_token_type', 'actor_token', 'actor_token_type', 'requested_token_type',
    'resource', 'audience', 'scope',
  ]);
}

const callback = provider.callback();
server.on('request', (req, res) => {
  if (req.method === 'GET' && req.url === '/test/exchanges') {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify(exchanges));
    return;
  }
  callback(req, res);
});
console.log(`oauth provider at http://127.0.0.1:${port}`);
