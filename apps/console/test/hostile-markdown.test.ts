// Replies a hostile model writes to break the page's markdown: in real Chromium against the real
// server, one nested past marked's stack (3,000 `>`) and one that takes marked time in the square
// of its length (`_a` over 500 KB: minutes). Both are drawn, as text, and so is everything after.
import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlm, type Reply } from './fake-llm.js';
import {
  chromiumAvailable,
  consoleConfig,
  launchChromium,
  startConsoleServer,
  type ConsoleServer,
} from './support.js';

const available = chromiumAvailable();

const DEEP = `${'>'.repeat(3000)} END-OF-DEEP`;
const WIDE = `${'_a'.repeat(260_000)} END-OF-WIDE`;

function hostile(): () => Reply {
  let turns = 0;
  const todo = { name: 'todo', args: { items: [] } };
  return () => {
    turns += 1;
    if (turns === 1) return { text: DEEP, call: todo };
    if (turns === 2) return { text: WIDE, call: todo };
    return { text: 'All done here.\nVERDICT: PASS' };
  };
}

describe.skipIf(!available)('replies that break markdown', () => {
  let browser: Browser;
  let server: ConsoleServer;
  let llm: Awaited<ReturnType<typeof startFakeLlm>>;
  let work: string;
  let page: Page;

  beforeAll(async () => {
    work = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-console-markdown-')));
    llm = await startFakeLlm(hostile());
    [server, browser] = await Promise.all([
      startConsoleServer(consoleConfig({ baseUrl: llm.baseUrl, workdir: work, maxIterations: 5 })),
      launchChromium(),
    ]);
    page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
    await page.goto(server.consoleUrl);
    await page.getByRole('button', { name: 'New terminal' }).first().waitFor();
  });

  afterAll(async () => {
    await browser?.close();
    await server?.stop();
    await llm?.close();
    rmSync(work, { recursive: true, force: true });
  });

  it('a reply nested past the stack and one of quadratic emphasis are drawn as text, and the run to its end', async () => {
    await page.getByLabel('Prompt').fill('break the page');
    await page.getByRole('button', { name: 'Run' }).click();
    const timeline = page.locator('.timeline');
    await timeline.locator('.end', { hasText: 'finished' }).waitFor({ timeout: 60_000 });
    const text = (hasText: string) =>
      timeline
        .locator('li.assistant', { hasText })
        .locator('.markdown .as-text')
        .evaluate((element) => element.textContent ?? '', undefined, { timeout: 30_000 });
    expect(await text('END-OF-DEEP')).toBe(DEEP);
    expect(await text('END-OF-WIDE')).toBe(WIDE);
    await timeline.locator('li.assistant', { hasText: 'All done here.' }).waitFor({ timeout: 5_000 });
  });
});
