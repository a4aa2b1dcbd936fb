/**
 * Debian's chromium, headless, driven by playwright-core, for the tests that need a real browser
 * (CORS, the admin page, an OAuth consent). They wrap themselves in `describeWith(['chromium'], …)`
 * (test/helpers/installed.ts), so they skip cleanly without it.
 */
import { chromium, type Browser } from 'playwright-core';
import { PROGRAMS } from './installed.js';

/** Launches headless chromium with no sandbox, GPU, QUIC or background network traffic. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: PROGRAMS.chromium,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}
