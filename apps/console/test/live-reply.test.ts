// A reply the model is still writing, in real Chromium against the real server and a model that
// streams on cue: a page that opens, or reloads, mid-reply shows it from its first word (the server
// keeps the text so far), then follows it, each word once; the kept reply replaces it at the end,
// its control characters shown.
import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlm, type Reply } from './fake-llm.js';
import {
  chromiumAvailable,
  consoleConfig,
  consoleReady,
  launchChromium,
  openConsole,
  startConsoleServer,
  type ConsoleServer,
} from './support.js';

const available = chromiumAvailable();

/** A gate the model's stream waits at until the test opens it. */
function gate(): { wait: Promise<void>; open: () => void } {
  let open = () => {};
  const wait = new Promise<void>((resolve) => (open = resolve));
  return { wait, open };
}

const words = (prefix: string, count: number) =>
  Array.from({ length: count }, (_, index) => `${prefix}-${index + 1} `);

describe.skipIf(!available)('a reply being written, seen from a page that opens or reloads mid-reply', () => {
  let browser: Browser;
  let server: ConsoleServer;
  let llm: Awaited<ReturnType<typeof startFakeLlm>>;
  let work: string;
  const first = gate();
  const second = gate();
  const reply: Reply = {
    pieces: [
      ...words('alpha', 20),
      first.wait,
      ...words('beta', 10),
      second.wait,
      'ls -la\x1b[201~\x15touch x\n',
      'VERDICT: PASS',
    ],
  };

  beforeAll(async () => {
    work = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-console-live-')));
    llm = await startFakeLlm(() => reply);
    [server, browser] = await Promise.all([
      startConsoleServer(consoleConfig({ baseUrl: llm.baseUrl, workdir: work, maxIterations: 2 })),
      launchChromium(),
    ]);
  });

  afterAll(async () => {
    first.open();
    second.open();
    await browser?.close();
    await server?.stop();
    await llm?.close();
    rmSync(work, { recursive: true, force: true });
  });

  const streaming = (page: Page) =>
    page.evaluate(() => document.querySelector('.timeline .streaming')?.textContent?.trim() ?? '');

  it('shows the reply from its first word, then follows it, each word once', async () => {
    const page = await openConsole(browser, server.consoleUrl);
    await page.getByLabel('Prompt').fill('write slowly');
    await page.getByRole('button', { name: 'Run' }).click();
    const alpha = words('alpha', 20).join('').trim();
    await expect.poll(() => streaming(page)).toBe(alpha);
    // Another browser opens while the model is between words: what it wrote so far is there.
    const other = await openConsole(await browser.newContext(), server.consoleUrl);
    await expect.poll(() => streaming(other)).toBe(alpha);
    // A reload of the page that started it keeps it too.
    await page.reload();
    await consoleReady(page);
    await expect.poll(() => streaming(page)).toBe(alpha);
    // Then each new word follows, once, on both.
    first.open();
    const both = `${alpha} ${words('beta', 10).join('').trim()}`;
    await expect.poll(() => streaming(page)).toBe(both);
    await expect.poll(() => streaming(other)).toBe(both);
    // The kept reply replaces the streamed one at the end.
    second.open();
    for (const viewer of [page, other]) {
      await viewer.locator('.timeline .end', { hasText: 'finished' }).waitFor({ timeout: 60_000 });
      expect(await viewer.locator('.timeline .streaming').count()).toBe(0);
      const kept = await viewer.locator('.timeline .assistant').innerText();
      expect(kept).toContain('beta-10');
      // Control characters the model wrote are shown, not hidden in text one copy away from a terminal.
      expect(kept).toContain('ls -la␛[201~␕touch x');
      expect(kept).not.toMatch(/[\x00-\x08\x0b-\x1f\x7f-\x9f]/);
    }
  });
});
