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
// ACCESS_TOKEN_TTL (seconds) sets the access tokens' life. Revoking a token revokes every token
// of its grant (oidc-provider's rule): its refresh token too.
import http from 'node:http';
import { generateKeyPairSync } from 'node:crypto';
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
      getResourceServerInfo: (ctx, resource) => {
        if (!resource.startsWith('http://127.0.0.1:')) throw new errors.InvalidTarget();
        if (new URL(resource).pathname.startsWith('/gateway/')) {
          return { scope: 'mcp', audience: resource, accessTokenFormat: 'jwt', jwt: { sign: { alg: 'RS256' } } };
        }
        return { scope: 'openid', audience: resource, accessTokenFormat: 'opaque' };
      },
    },
  },
  findAccount: async (ctx, sub) => ({
    accountId: sub,
    claims: async () => ({ sub, email: `${sub}@example.com`, email_verified: !sub.startsWith('unverified') }),
  }),
  cookies: { keys: ['toolgate-tests-only'] },
});
server.on('request', provider.callback());
console.log(`oauth provider at http://127.0.0.1:${port}`);
