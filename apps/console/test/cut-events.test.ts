// A run whose log holds events over what the server sends whole (an agent.history event over about
// 1 MiB comes cut, `cut` saying where): in real Chromium against the real server, a model writes a
// tool call's argument and then a reply past that bound. The page says where each was cut and how
// much is left out, and "Show all" reads the event whole (agent.historyEvent) and draws it in place.
import { readFileSync, mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Locator, Page } from 'playwright-core';
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

/** About 1.3 M characters of lines: over the history's 1 MiB an event, and far under a reply's bound. */
const long = (what: string) =>
  `${Array.from({ length: 26_000 }, (_, index) => `line ${index + 1} of the long ${what}, words to fill it`).join('\n')}\nEND-OF-${what.toUpperCase()}`;
const ARGUMENT = long('argument');
const REPLY = long('reply');

/** Writes a long file, then replies at length, then stops (the server compacts the long turns away). */
function writeLong(): () => Reply {
  let turns = 0;
  return () => {
    turns += 1;
    if (turns === 1) return { call: { name: 'write_file', args: { path: 'long.txt', content: ARGUMENT } } };
    if (turns === 2) return { text: REPLY };
    return { text: 'Done.\nVERDICT: PASS' };
  };
}

describe.skipIf(!available)('events the server sent cut', () => {
  let browser: Browser;
  let server: ConsoleServer;
  let llm: Awaited<ReturnType<typeof startFakeLlm>>;
  let work: string;
  let page: Page;

  beforeAll(async () => {
    work = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-console-cut-')));
    llm = await startFakeLlm(writeLong());
    [server, browser] = await Promise.all([
      startConsoleServer(consoleConfig({ baseUrl: llm.baseUrl, workdir: work, maxIterations: 4 })),
      launchChromium(),
    ]);
    // bypassCSP only so the test can inject axe-core; the page's own CSP is checked elsewhere.
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, bypassCSP: true });
    page = await context.newPage();
    await page.goto(server.consoleUrl);
    await page.getByRole('button', { name: 'New terminal' }).first().waitFor();
  });

  afterAll(async () => {
    await browser?.close();
    await server?.stop();
    await llm?.close();
    rmSync(work, { recursive: true, force: true });
  });

  const text = (locator: Locator) => locator.evaluate((element) => element.textContent ?? '');
  /** The count a cut note says is left out. */
  const leftOut = async (note: Locator) => {
    const said = /… ([\d,]+) more characters not shown/.exec(await text(note));
    return said === null ? undefined : Number(said[1]!.replaceAll(',', ''));
  };

  it('a reply and a tool call argument over the bound say so where cut, and Show all draws them whole', async () => {
    await page.getByLabel('Prompt').fill('write at length');
    await page.getByRole('button', { name: 'Run' }).click();
    const timeline = page.locator('.timeline');
    await timeline.locator('.end', { hasText: 'finished' }).waitFor({ timeout: 90_000 });

    // The reply: its excerpt, and how much is left out, said at its end.
    const reply = timeline.locator('li.assistant', { hasText: 'line 1 of the long reply' });
    const replyNote = reply.locator('.cut');
    const replyExcerpt = (await text(reply.locator('.markdown'))).length;
    const replyLeftOut = await leftOut(replyNote);
    expect(replyLeftOut).toBeGreaterThan(100_000);
    expect(replyLeftOut).toBeLessThan(REPLY.length - 500_000);
    expect(await text(reply)).not.toContain('END-OF-REPLY');
    expect(replyExcerpt).toBeGreaterThan(500_000);

    // The call: its argument's excerpt, said cut inside the call.
    const call = timeline.locator('li.tool', { hasText: 'write_file' });
    await call.locator('summary').click();
    const callNote = call.locator('.cut');
    expect(await leftOut(callNote)).toBeGreaterThan(100_000);
    expect(await text(call)).not.toContain('END-OF-ARGUMENT');

    // The notes are as accessible as the rest of the page.
    const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
    await page.addScriptTag({ content: axeSource });
    const violations = await page.evaluate(async () => {
      const result = await (window as any).axe.run(
        { include: [['.timeline .cut']] },
        { resultTypes: ['violations'] },
      );
      return (result.violations as { id: string }[]).map((violation) => violation.id);
    });
    expect(violations).toEqual([]);

    // Show all: the whole reply in place of the excerpt, folded as any long text, the note gone.
    await replyNote.getByRole('button', { name: 'Show all' }).click();
    await expect.poll(() => text(reply), { timeout: 60_000 }).toContain('END-OF-REPLY');
    expect(await replyNote.count()).toBe(0);
    expect(await reply.locator('.markdown.folded').count()).toBe(1);
    expect(await reply.getByRole('button', { name: /^Show more/ }).innerText()).toContain(
      `${Math.round(REPLY.length / 1024)} KB`,
    );
    // The call's argument, the same way, inside the call.
    await callNote.getByRole('button', { name: 'Show all' }).click();
    await expect.poll(() => text(call), { timeout: 60_000 }).toContain('END-OF-ARGUMENT');
    expect(await callNote.count()).toBe(0);
    expect(await call.locator('summary').innerText()).toContain('long.txt (26001 lines)');
    // Only one reply item: the whole one replaced the excerpt, nothing drawn twice.
    expect(await timeline.locator('li.assistant', { hasText: 'line 1 of the long reply' }).count()).toBe(1);
  });
});
