// Replies a hostile model writes to break the page's markdown and diffs: in real Chromium against
// the real server, one nested past marked's stack (3,000 `>`), one that takes marked time in the
// square of its length (`_a` over 500 KB: minutes), and an edit of 60,000 changed lines (its diff:
// minutes). Each is drawn, the replies as text, the edit whole, and so is everything after.
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
// Quadratic emphasis under the length drawn as text, in lines: rendered piece by piece.
const TALL = `${Array.from({ length: 60 }, () => '_a'.repeat(2_000)).join('\n')}\nEND-OF-TALL`;
const lines = (prefix: string) =>
  Array.from({ length: 60_000 }, (_, index) => `${prefix}${index}`).join('\n');
const EDIT = { path: 'big.txt', old_string: lines('a'), new_string: lines('b') };

function hostile(): () => Reply {
  let turns = 0;
  const todo = { name: 'todo', args: { items: [] } };
  return () => {
    turns += 1;
    if (turns === 1) return { text: DEEP, call: todo };
    if (turns === 2) return { text: WIDE, call: todo };
    if (turns === 3) return { text: TALL, call: todo };
    if (turns === 4) return { call: { name: 'edit_file', args: EDIT } };
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
      startConsoleServer(consoleConfig({ baseUrl: llm.baseUrl, workdir: work, maxIterations: 7 })),
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

  it('a reply nested past the stack, one of quadratic emphasis and a huge edit are drawn, and the run to its end', async () => {
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
    const tall = timeline.locator('li.assistant', { hasText: 'END-OF-TALL' });
    expect(await tall.locator('.markdown p:not(.as-text)').count()).toBeGreaterThan(0); // markdown
    expect(await tall.locator('.markdown .as-text').count()).toBe(0);
    await timeline.locator('li.assistant', { hasText: 'All done here.' }).waitFor({ timeout: 5_000 });
    const edit = timeline.locator('li.tool', { hasText: 'edit_file' });
    await edit.locator('summary').click();
    const diff = await edit
      .locator('pre.diff')
      .evaluate((element) => [
        element.querySelector('.removed')?.textContent?.split('\n', 2),
        element.querySelector('.added')?.textContent?.split('\n', 2),
      ]);
    expect(diff).toEqual([
      ['- a0', '- a1'],
      ['+ b0', '+ b1'],
    ]);
  });
});
