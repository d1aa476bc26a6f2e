// Drives the console in Debian's Chromium, headless, through playwright-core (no browser is
// downloaded): `node console_browser.mjs <phase> <config.json>`. The phases share a profile
// directory, so the session signed in by `create` is the one `verify` uses.
//
//   create  sign in (password, then the TOTP code), create a gateway with the `time` app, print
//           {"gateway_id", "key"}; screenshot every page
//   verify  the call made meanwhile is on the logs page (and opens) and on the analytics page;
//           every control is named and the keyboard focus visible
//   viewer  the owner sees write forms where a viewer sees none; a viewer's forged POST is
//           refused by the API's scope check
//   layout  every page at 1280 px and at 390 px: no id, time, state or button wraps inside (its
//           height is one line), nothing is wider than the window (a wide table scrolls in its
//           box); a tool called from the gateway's playground; a screenshot of each page and width
//   oauth   sign in (password), "Connect with OAuth" on the apps page, sign in and consent at the
//           app's authorization server (oidc-provider's development pages), back on the apps page:
//           print {"status", "notice"} of the app's row
//   link    open the connect link an MCP client was given (config.url, on the public URL), sign in
//           there as config.email; with config.refused, print {"status", "text"} of the refusal;
//           else "Connect with OAuth" in the page's connect section, sign in as config.login at the
//           authorization server, back on the apps page: print {"notice", "own"} (the row's own status)
//
// Screenshots go to config.artifacts; config.docs_png gets the README's picture (docs/console.png).
// Every phase fails on a console error, an uncaught exception or a CSP violation of toolgate's pages.
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

// What went wrong on toolgate's own pages, whatever the phase: a `console` error (Chromium logs a
// failed load and a refused script or style there), an uncaught exception (`pageerror`), and each
// Content Security Policy violation the page reports (`securitypolicyviolation`, relayed by an
// init script as a console error). A phase that saw any fails, naming them (`finish`).
const broken = [];

function ours(url) {
  return [config.base, config.public_url].some((origin) => origin && url.startsWith(origin));
}

async function open(profile) {
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1100, height: 760 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  await context.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (e) => {
      console.error(`CSP violation: ${e.violatedDirective} blocked ${e.blockedURI || 'inline'} at ${e.sourceFile}:${e.lineNumber}`);
    });
  });
  const watch = (page) => {
    page.on('console', (msg) => {
      if (msg.type() === 'error' && ours(page.url())) broken.push(`console error on ${page.url()}: ${msg.text()} (${msg.location().url})`);
    });
    page.on('pageerror', (e) => {
      if (ours(page.url())) broken.push(`page error on ${page.url()}: ${e.message}`);
    });
  };
  context.pages().forEach(watch);
  context.on('page', watch);
  return context;
}

// Fails the phase if any page of toolgate's broke; else prints its result.
function finish(result) {
  check(broken.length === 0, `the pages broke:\n${broken.join('\n')}`);
  console.log(JSON.stringify(result));
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
  finish({ gateway_id: gatewayId, key });
}

// Keyboard and screen readers: every control of these pages has a name (a <label>, an
// aria-label or its text), and the first Tab reaches the "skip to content" link with a visible
// focus ring.
async function accessible(page) {
  for (const path of ['/auth/console/gateways', `/auth/console/gateways/${config.gateway_id}`, '/auth/console/apps',
    '/auth/console/keys', '/auth/console/logs', '/auth/console/webhooks', '/auth/console/ip-allowlist']) {
    await page.goto(`${config.base}${path}`);
    const unnamed = await page.evaluate(() => [...document.querySelectorAll('input:not([type=hidden]), select, textarea, button')]
      .filter((e) => !(e.labels && e.labels.length) && !e.getAttribute('aria-label') && !e.textContent.trim())
      .map((e) => e.outerHTML));
    check(unnamed.length === 0, `${path}: controls without a name: ${unnamed.join(' ')}`);
    await page.keyboard.press('Tab');
    const focus = await page.evaluate(() => {
      const e = document.activeElement;
      const s = getComputedStyle(e);
      return { cls: e.className, style: s.outlineStyle, width: s.outlineWidth };
    });
    check(focus.cls === 'skip' && focus.style !== 'none' && focus.width !== '0px',
      `${path}: the first Tab reaches the skip link, its focus visible: ${JSON.stringify(focus)}`);
  }
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
  await accessible(page);
  await page.setViewportSize({ width: 1000, height: 600 });
  await page.goto(`${config.base}/auth/console/gateways`);
  await page.screenshot({ path: config.docs_png });
  await page.setViewportSize({ width: 390, height: 800 });
  await shot(page, 'gateways-phone');
  await context.close();
  finish({ total });
}

const WRITABLE = () => ['/auth/console/gateways', `/auth/console/gateways/${config.gateway_id}`, '/auth/console/apps'];

async function writeForms(page, path) {
  await page.goto(`${config.base}${path}`);
  return page.locator('main form[method="post"]').count();
}

async function viewer() {
  // The control: on the same pages the owner (signed in by `create`) sees write forms, so the
  // viewer's none below is the role's doing, not a selector that matches nothing.
  const owner = await open(config.profile);
  const ownerPage = await owner.newPage();
  const ownerForms = {};
  for (const path of WRITABLE()) {
    ownerForms[path] = await writeForms(ownerPage, path);
    check(ownerForms[path] > 0, `${path}: the owner sees no write form (${ownerPage.url()})`);
  }
  await owner.close();
  const context = await open(config.viewer_profile);
  const page = await context.newPage();
  await signIn(page, config.viewer_email, config.password, null);
  for (const path of WRITABLE()) {
    const forms = await writeForms(page, path);
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
  finish({ forged: forged.status(), owner_forms: ownerForms });
}

// The provider sends the browser back to the server's public URL, which the links also name:
// served by the server under test. Fetched with the browser's own headers (its cookies) and
// answered as is: redirecting the request instead would make Chromium drop the cookies of a
// navigation that came from another site.
async function servePublicUrl(context) {
  await context.route(`${config.public_url}/**`, async (route) => {
    const response = await route.fetch({
      url: config.base + route.request().url().slice(config.public_url.length),
      headers: await route.request().allHeaders(),
      maxRedirects: 0,
    });
    // A redirect it answers goes to the server itself (Chromium would not route that request).
    const headers = response.headers();
    if (headers.location && headers.location.startsWith('/')) headers.location = config.base + headers.location;
    await route.fulfill({ response, headers });
  });
}

async function link() {
  const context = await open(config.profile);
  await servePublicUrl(context);
  const page = await context.newPage();
  await page.goto(config.url);
  check(page.url().includes('/auth/signin?next='), `the link signs the person in first, not ${page.url()}`);
  await page.getByLabel('E-mail').fill(config.email);
  await page.getByLabel('Password').fill(config.password);
  const back = page.waitForResponse((r) => r.url().includes('/auth/console/apps?connect='));
  await page.getByRole('button', { name: 'Sign in' }).click();
  const landed = await back;
  await shot(page, config.refused ? 'link-refused' : 'link-connect');
  if (config.refused) {
    const text = await page.locator('main').innerText();
    // Chromium logs the 403 of the page itself as a failed load: that is the refusal expected.
    const failed = broken.findIndex((b) => b.includes('status of 403'));
    if (failed >= 0) broken.splice(failed, 1);
    await context.close();
    finish({ status: landed.status(), text });
    return;
  }
  check(landed.status() === 200, `the connect page: ${landed.status()}`);
  const section = page.locator('#connect');
  await section.getByRole('button', { name: `Connect with OAuth ${config.app_id}`, exact: true }).click();
  await page.waitForURL(`${config.issuer}/**`);
  await page.locator('input[name="login"]').fill(config.login);
  await page.locator('input[name="password"]').fill('any');
  await page.locator('button[type="submit"]').click();
  await page.getByRole('button', { name: /Continue/ }).click();
  await page.waitForURL('**/auth/console/apps');
  await shot(page, 'link-connected');
  const notice = (await page.locator('.notice').count()) ? await page.locator('.notice').textContent() : '';
  const row = page.locator('tbody tr', { hasText: config.app_id });
  const own = (await row.locator('td').nth(7).textContent()).trim();
  await context.close();
  finish({ notice, own });
}

async function oauth() {
  const context = await open(config.profile);
  await servePublicUrl(context);
  const page = await context.newPage();
  await signIn(page, config.email, config.password, null);
  await page.goto(`${config.base}/auth/console/apps`);
  const row = () => page.locator('tbody tr', { hasText: config.app_name });
  await row().getByRole('button', { name: /Connect with OAuth/ }).click();
  await page.waitForURL(`${config.issuer}/**`);
  await shot(page, 'oauth-provider-sign-in');
  await page.locator('input[name="login"]').fill('alice');
  await page.locator('input[name="password"]').fill('any');
  await page.locator('button[type="submit"]').click();
  await page.getByRole('button', { name: /Continue/ }).click();
  await page.waitForURL('**/auth/console/apps');
  await shot(page, 'apps-oauth-connected');
  const status = (await row().locator('td').nth(3).textContent()).trim();
  const notice = (await page.locator('.notice').count()) ? await page.locator('.notice').textContent() : '';
  await context.close();
  finish({ status, notice });
}

// The elements that must stay on one line: ids, times, states, buttons, inline code.
const ONE_LINE = 'button, .id, td.id, time, :not(pre) > code, th, .cards .figure, .badge';

async function wrapped(page) {
  // A wrapped text has line boxes at more than one height: its range's rectangles.
  return page.evaluate((selector) => [...document.querySelectorAll(selector)]
    .filter((e) => e.getClientRects().length > 0 && e.textContent.trim() !== '')
    .filter((e) => {
      const range = document.createRange();
      range.selectNodeContents(e);
      const tops = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.bottom)));
      return tops.size > 1;
    })
    .map((e) => `${e.tagName.toLowerCase()}.${e.className}: ${e.textContent.trim().slice(0, 60)}`), ONE_LINE);
}

// The elements that reach past the window's right edge (what makes a page wider than it).
async function overflowing(page) {
  return page.evaluate(() => [...document.querySelectorAll('body *')]
    .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1)
    .filter((e) => !e.closest('.scroll, pre, dd, .visually-hidden'))
    .slice(0, 5).map((e) => `${e.tagName.toLowerCase()}.${e.className}`).join(', '));
}

async function layout() {
  const context = await open(config.profile);
  const page = await context.newPage();
  const pages = {
    home: '/auth/console', gateways: '/auth/console/gateways', gateway: `/auth/console/gateways/${config.gateway_id}`,
    apps: '/auth/console/apps', keys: '/auth/console/keys', 'service-accounts': '/auth/console/service-accounts',
    sessions: '/auth/console/sessions?state=all', logs: '/auth/console/logs', analytics: '/auth/console/analytics?period=1h',
    'tool-changes': `/auth/console/tool-changes?gateway_id=${config.gateway_id}`, webhooks: '/auth/console/webhooks',
    alerts: '/auth/console/alerts', 'ip-allowlist': '/auth/console/ip-allowlist', mfa: '/auth/console/mfa',
    team: '/auth/console/team', account: '/auth/',
  };
  const problems = [];
  for (const width of [1280, 390]) {
    await page.setViewportSize({ width, height: 800 });
    for (const [name, path] of Object.entries(pages)) {
      await page.goto(`${config.base}${path}`);
      for (const w of await wrapped(page)) problems.push(`${name} at ${width} px: ${w} wraps`);
      // The page follows the navigation (at a phone's width, below it) with no empty band between.
      const gap = await page.evaluate(() => {
        const nav = document.querySelector('nav[aria-label="Console"]');
        const main = document.querySelector('main');
        return nav && main ? Math.round(main.getBoundingClientRect().top - nav.getBoundingClientRect().bottom) : 0;
      });
      if (gap > 24) problems.push(`${name} at ${width} px: ${gap} px of nothing between the navigation and the page`);
      const wide = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      if (wide > 1) problems.push(`${name} at ${width} px: the page is ${wide} px wider than the window (${await overflowing(page)})`);
      await shot(page, `${name}-${width}`);
    }
  }
  // The playground: the tool picked, its form filled, called; the result and its log entry.
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.goto(`${config.base}/auth/console/gateways/${config.gateway_id}?tool=${config.function}#playground`);
  await page.locator('section.playground').scrollIntoViewIfNeeded();
  await shot(page, 'playground');
  await page.locator('[name="arg.format"]').fill('YYYY-MM-DD');
  await page.locator('[name="arg.timezone"]').fill('UTC');
  await page.getByRole('button', { name: `Call ${config.function}` }).click();
  check(await page.locator('#call-ok').count() === 1, `the playground's call: ${await page.locator('main').innerText()}`);
  const answer = (await page.locator('#call-text-0').textContent()).trim();
  const requestId = (await page.locator('#request-id').textContent()).trim();
  check(await page.locator('#call-log').count() === 1, 'the result links its log entry');
  await shot(page, 'playground-result');
  for (const w of await wrapped(page)) problems.push(`playground result: ${w} wraps`);
  // The call's log entry, opened from the result.
  await page.locator('#call-log').click();
  check(await page.locator('section.entry').count() === 1, `the call's log entry opens: ${page.url()}`);
  check((await page.locator('section.entry').innerText()).includes(requestId), 'the entry is the call\'s');
  await shot(page, 'playground-log-entry');
  await context.close();
  check(problems.length === 0, `the layout breaks words:\n${problems.join('\n')}`);
  finish({ answer, request_id: requestId, pages: Object.keys(pages) });
}

const phases = { create, verify, viewer, oauth, layout, link };
phases[phase]().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
