// Drives the console in Debian's Chromium, headless, through playwright-core (no browser is
// downloaded): `node console_browser.mjs <phase> <config.json>`. The phases share a profile
// directory, so the session signed in by `create` is the one `verify` uses.
//
//   create  sign in (password, then the TOTP code), create a gateway with the `time` app, print
//           {"gateway_id", "key"}; screenshot every page
//   verify  the call made meanwhile is on the logs page (and opens) and on the analytics page
//   viewer  a viewer sees no write form; a forged POST is refused by the API's scope check
//
// Screenshots go to config.artifacts; config.docs_png gets the README's picture (docs/console.png).
import { chromium } from 'playwright-core';
import { createHmac } from 'node:crypto';
import { readFileSync, mkdirSync, existsSync } from 'node:fs';

const [phase, configPath] = process.argv.slice(2);
const config = JSON.parse(readFileSync(configPath, 'utf8'));
const CHROMIUM = '/usr/bin/chromium';
if (!existsSync(CHROMIUM)) {
  console.error(`Chromium is missing (${CHROMIUM}): install the Debian package chromium (scripts/install-deps.sh --tests)`);
  process.exit(3);
}

function base32(text) {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
  let bits = '';
  for (const c of text.replace(/=+$/, '').toUpperCase()) bits += alphabet.indexOf(c).toString(2).padStart(5, '0');
  const bytes = [];
  for (let i = 0; i + 8 <= bits.length; i += 8) bytes.push(parseInt(bits.slice(i, i + 8), 2));
  return Buffer.from(bytes);
}

// The code of the next 30-second step: the current one was used to turn MFA on, and a step is
// accepted once (the server takes one step of skew).
function totp(secret) {
  const counter = Buffer.alloc(8);
  counter.writeBigUInt64BE(BigInt(Math.floor(Date.now() / 1000 / 30) + 1));
  const mac = createHmac('sha1', base32(secret)).update(counter).digest();
  const at = mac[mac.length - 1] & 0xf;
  return String((mac.readUInt32BE(at) & 0x7fffffff) % 1000000).padStart(6, '0');
}

function check(ok, what) {
  if (!ok) throw new Error(what);
}

async function open(profile) {
  return chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1100, height: 760 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

async function shot(page, name) {
  mkdirSync(config.artifacts, { recursive: true });
  await page.screenshot({ path: `${config.artifacts}/${name}.png`, fullPage: true });
}

async function signIn(page, email, password, secret) {
  await page.goto(`${config.base}/auth/console/gateways`);
  check(page.url().includes('/auth/signin?next='), `no session: the sign-in page, not ${page.url()}`);
  await page.getByLabel('E-mail').fill(email);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  if (secret) {
    await page.getByLabel(/^Code/).fill(totp(secret));
    await page.getByRole('button', { name: 'Verify' }).click();
  }
  await page.waitForURL('**/auth/console/gateways');
}

async function create() {
  const context = await open(config.profile);
  const page = await context.newPage();
  await signIn(page, config.email, config.password, config.totp_secret);
  await shot(page, 'gateways-empty');
  await page.getByLabel('Name', { exact: true }).fill('Browser gateway');
  await page.getByRole('checkbox', { name: /Time/ }).check();
  await page.getByRole('button', { name: 'Create gateway' }).click();
  const key = (await page.locator('#secret').textContent()).trim();
  const link = await page.locator('main a[href*="/auth/console/gateways/"]').first().getAttribute('href');
  const gatewayId = link.split('/').pop();
  await shot(page, 'gateway-created');
  await page.goto(`${config.base}${link}`);
  check(!(await page.content()).includes(key), 'the key is shown once');
  await shot(page, 'gateway');
  for (const name of ['apps', 'keys', 'service-accounts', 'sessions', 'webhooks', 'alerts', 'ip-allowlist', 'mfa', 'team']) {
    await page.goto(`${config.base}/auth/console/${name}`);
    check((await page.title()).includes('toolgate console'), `${name}: ${await page.title()}`);
    await shot(page, name);
  }
  await context.close();
  console.log(JSON.stringify({ gateway_id: gatewayId, key }));
}

async function verify() {
  const context = await open(config.profile);
  const page = await context.newPage();
  await page.goto(`${config.base}/auth/console/logs?gateway_id=${config.gateway_id}`);
  const row = page.locator('table.logs tbody tr', { hasText: config.function });
  check(await row.count() >= 1, `the call is on the logs page: ${await page.locator('main').innerText()}`);
  await shot(page, 'logs');
  await row.first().locator('a').click();
  check(await page.locator('section.entry').count() === 1, 'the entry opens');
  await shot(page, 'log-entry');
  await page.goto(`${config.base}/auth/console/analytics?gateway_id=${config.gateway_id}&period=1h`);
  const total = Number((await page.locator('#total-requests').textContent()).trim());
  check(total >= 1, `analytics counts the call: ${total}`);
  check((await page.locator('figure', { hasText: config.function }).count()) >= 1, 'the top functions chart names it');
  await shot(page, 'analytics');
  await page.setViewportSize({ width: 1000, height: 600 });
  await page.goto(`${config.base}/auth/console/gateways`);
  await page.screenshot({ path: config.docs_png });
  await page.setViewportSize({ width: 390, height: 800 });
  await shot(page, 'gateways-phone');
  await context.close();
  console.log(JSON.stringify({ total }));
}

async function viewer() {
  const context = await open(config.viewer_profile);
  const page = await context.newPage();
  await signIn(page, config.viewer_email, config.password, null);
  for (const path of ['/auth/console/gateways', `/auth/console/gateways/${config.gateway_id}`, '/auth/console/apps']) {
    await page.goto(`${config.base}${path}`);
    const forms = await page.locator('main form[method="post"]').count();
    check(forms === 0, `${path}: a viewer sees ${forms} write forms`);
  }
  await shot(page, 'viewer-gateway');
  const csrf = (await context.cookies()).find((c) => c.name === 'toolgate_csrf').value;
  const forged = await page.request.post(`${config.base}/auth/console/gateways/${config.gateway_id}/delete`, {
    form: { csrf }, maxRedirects: 0,
  });
  const text = await forged.text();
  check(forged.status() === 403 && text.includes('INSUFFICIENT_SCOPE'), `forged POST: ${forged.status()} ${text}`);
  await context.close();
  console.log(JSON.stringify({ forged: forged.status() }));
}

const phases = { create, verify, viewer };
phases[phase]().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
