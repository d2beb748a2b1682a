// A new tab (Alt+N, New terminal) whose shell is not there yet, in real Chromium against the real
// server: closed before its shell started, that shell ends (nobody saw it, so nothing is left
// running unseen); refused by the server (its terminal cap, `reject`), the tab says it did not start.
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  chromiumAvailable,
  consoleConfig,
  launchChromium,
  openConsole,
  startConsoleServer,
  waitForPrompt,
  type ConsoleServer,
} from './support.js';

const available = chromiumAvailable();

describe.skipIf(!available)('a new tab before its shell started', () => {
  let browser: Browser;
  let server: ConsoleServer;
  let page: Page;

  beforeAll(async () => {
    [server, browser] = await Promise.all([
      startConsoleServer(consoleConfig(undefined, '[pty]\nmax_sessions = 1\neviction = "reject"\n')),
      launchChromium(),
    ]);
    page = await openConsole(browser, server.consoleUrl);
  });

  afterAll(async () => {
    await browser?.close();
    await server?.stop();
  });

  /** Each listed session's row: `live` or `ended`. */
  const rows = () =>
    page.evaluate(() => [...document.querySelectorAll('.session-list li')].map((row) => row.className));

  it('closed while starting, its shell ends once it exists: not left running in Sessions', async () => {
    // Alt+N then Alt+W in one go: the tab is closed before the server can answer its pty.spawn.
    await page.evaluate(() => {
      for (const code of ['KeyN', 'KeyW'])
        window.dispatchEvent(
          new KeyboardEvent('keydown', {
            code,
            key: code.at(-1)!.toLowerCase(),
            altKey: true,
            bubbles: true,
          }),
        );
    });
    expect(await page.locator('.tabs [role="tab"]').count()).toBe(0);
    // The shell was started, then ended: listed as ended, none running.
    await expect.poll(rows).toEqual(['ended']);
  });

  it('refused by the server, the tab says it did not start, not "starting…"', async () => {
    await page.getByRole('button', { name: 'New terminal' }).first().click();
    await waitForPrompt(page);
    // The server takes one terminal and refuses the next (eviction = "reject").
    await page.keyboard.press('Alt+KeyN');
    await page.locator('.term-tab:not([hidden]) .notice', { hasText: 'Cannot start a terminal' }).waitFor();
    const tabs = page.locator('.tabs [role="tab"]');
    await expect.poll(() => tabs.nth(1).innerText()).toBe('2 not started');
    expect(await tabs.nth(1).getAttribute('title')).toContain('not started');
    expect(await page.title()).toBe('not started — Aleph');
  });

  it('the last tab closed with Alt+W leaves the keyboard on "New terminal", not on the page', async () => {
    const tabs = page.locator('.tabs [role="tab"]');
    while ((await tabs.count()) > 0) {
      const count = await tabs.count();
      await page.locator('.term-tab:not([hidden])').click();
      await page.keyboard.press('Alt+KeyW');
      await expect.poll(() => tabs.count()).toBe(count - 1);
    }
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('new-terminal');
    await page.keyboard.press('Enter'); // goes on from there: a new terminal
    await expect.poll(() => tabs.count()).toBe(1);
  });
});
