/**
 * A user in a real browser (Debian chromium, headless, driven by playwright-core) going through an
 * authorization server's login and consent pages (oidc-provider's devInteractions). Tests that use
 * it wrap themselves in `describeWith(['chromium'], …)` (test/helpers/installed.ts), so they skip
 * cleanly without chromium.
 */
import type { Browser, Page, Response } from 'playwright-core';
import { scaled } from './budget.js';
import { launchChromium } from './chromium.js';

/** Where the browser landed once the authorization server let it go. */
export interface ConsentOutcome {
  /** The final page's URL (for an OAuth client's redirect URI: with `code` and `state`, or `error`). */
  url: string;
  /** Its HTTP status (0 when the page had no HTTP response). */
  status: number;
  /** Its body text (`document.body.innerText`). */
  body: string;
}

/** Options of {@link consentInBrowser}. */
export interface ConsentOptions {
  /** The login name typed on the login page (the account id, the token's `sub`). */
  login: string;
  /** Any password (default "pw"). */
  password?: string;
  /** Press "[ Cancel ]" on the consent page instead of "Continue" (the client gets `error=access_denied`). */
  deny?: boolean;
  /** Budget for the whole walk, ms (default 20 s, scaled). */
  timeoutMs?: number;
}

let browser: Promise<Browser> | undefined;

function isLoopback(url: string): boolean {
  const host = new URL(url).hostname;
  return host === '127.0.0.1' || host === 'localhost' || host === '[::1]';
}

/**
 * Opens `url` in a fresh browser context (no cookies from earlier calls), follows its redirects to
 * the authorization server, signs in as `login` when the login page shows, presses "Continue" on
 * the consent page when it shows (or "[ Cancel ]" with `deny`), and resolves with the page the last redirect lands on. Requests
 * to hosts other than loopback are blocked (the pages load no outside fonts). The browser is
 * launched on first use and shared by the calls of one test file: call {@link closeBrowser} in
 * `afterAll`. Rejects when a page does not load within the budget.
 */
export async function consentInBrowser(url: string, opts: ConsentOptions): Promise<ConsentOutcome> {
  const b = await (browser ??= launchChromium());
  const context = await b.newContext();
  const timeout = opts.timeoutMs ?? scaled(20_000);
  context.setDefaultTimeout(timeout);
  context.setDefaultNavigationTimeout(timeout);
  await context.route(
    (u) => !isLoopback(u.href),
    (route) => route.abort(),
  );
  try {
    const page = await context.newPage();
    let response = await page.goto(url, { waitUntil: 'domcontentloaded' });
    for (let step = 0; step < 6; step++) {
      const next = await interact(page, opts);
      if (next === undefined) break;
      response = next;
    }
    const body = await page.evaluate(() => document.body?.innerText ?? '');
    return { url: page.url(), status: response?.status() ?? 0, body };
  } finally {
    await context.close();
  }
}

/** Acts on a login or consent page (resolving with the response it navigated to), or undefined on any other page. */
async function interact(page: Page, opts: ConsentOptions): Promise<Response | null | undefined> {
  const kind = await page.evaluate(() =>
    document.querySelector('form input[name=login]')
      ? 'login'
      : document.querySelector('form input[name=prompt][value=consent]')
        ? 'consent'
        : 'other',
  );
  if (kind === 'other') return undefined;
  let press = page.locator('form button[type=submit]').first();
  if (kind === 'login') {
    await page.fill('form input[name=login]', opts.login);
    await page.fill('form input[name=password]', opts.password ?? 'pw');
  } else if (opts.deny) {
    press = page.locator('a', { hasText: '[ Cancel ]' }).first();
  }
  const [response] = await Promise.all([page.waitForNavigation({ waitUntil: 'domcontentloaded' }), press.click()]);
  return response;
}

/** Closes the browser {@link consentInBrowser} launched (no-op when none). */
export async function closeBrowser(): Promise<void> {
  const b = browser;
  browser = undefined;
  if (b) await (await b).close();
}
