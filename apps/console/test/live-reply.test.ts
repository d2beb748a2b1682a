// A reply the model is still writing, in real Chromium against the real server and a model that
// streams on cue: a page that opens, or reloads, mid-reply shows it from its first word (the server
// keeps the text so far), then follows it, each word once; the kept reply replaces it at the end,
// its control characters shown. A page that reads slowly gets the pieces merged (as the server
// merges them for it), one straddling the text so far: each word still once, in either order.
import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page, WebSocketRoute } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlm, type Message, type Reply } from './fake-llm.js';
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

  const merged = [gate(), gate(), gate()];
  const mergedReply: Reply = {
    pieces: [
      ...words('gamma', 10),
      merged[0]!.wait,
      ...words('delta', 5),
      merged[1]!.wait,
      ...words('delta', 10).slice(5),
      merged[2]!.wait,
      'VERDICT: PASS',
    ],
  };
  const asked = (messages: Message[], prompt: string) =>
    messages.some((message) => message.role === 'user' && message.content === prompt);

  beforeAll(async () => {
    work = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-console-live-')));
    llm = await startFakeLlm((messages) => (asked(messages, 'merge for slow readers') ? mergedReply : reply));
    [server, browser] = await Promise.all([
      startConsoleServer(consoleConfig({ baseUrl: llm.baseUrl, workdir: work, maxIterations: 2 })),
      launchChromium(),
    ]);
  });

  afterAll(async () => {
    first.open();
    second.open();
    for (const each of merged) each.open();
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

  /**
   * A page that reads slowly, played by a proxy of its socket: its first agent.list (and, if asked,
   * the answer) waits until released, and its agent.delta events wait, then go as one merged event,
   * as the server's mergeDeltas makes for a reader that is behind (the last piece's seq, the texts
   * joined).
   */
  async function slowReader(page: Page, holdAnswer: boolean) {
    const held = {
      request: '',
      id: undefined as unknown,
      answer: '',
      deltas: [] as { params: ReplyEvent }[],
    };
    let route: { page: WebSocketRoute; server: WebSocketRoute } | undefined;
    await page.routeWebSocket(/\/ws$/, (ws) => {
      const server = ws.connectToServer();
      route = { page: ws, server };
      ws.onMessage((message) => {
        if (typeof message === 'string' && held.request === '') {
          const request = JSON.parse(message) as { id?: unknown; method?: string };
          if (request.method === 'agent.list')
            return void Object.assign(held, { request: message, id: request.id });
        }
        server.send(message);
      });
      server.onMessage((message) => {
        if (typeof message === 'string') {
          const event = JSON.parse(message) as { id?: unknown; method?: string; params: ReplyEvent };
          if (event.method === 'agent.delta') return void held.deltas.push(event);
          if (holdAnswer && held.id !== undefined && event.id === held.id && held.answer === '')
            return void (held.answer = message);
        }
        ws.send(message);
      });
    });
    return {
      held,
      sendRequest: () => route!.server.send(held.request),
      sendAnswer: () => route!.page.send(held.answer),
      sendMerged: () => {
        const [head, ...rest] = held.deltas.splice(0);
        const params = { ...head!.params, seq: rest.at(-1)!.params.seq };
        params.text = [head!, ...rest].map((event) => event.params.text).join('');
        route!.page.send(JSON.stringify({ jsonrpc: '2.0', method: 'agent.delta', params }));
      },
    };
  }

  it('a page behind gets the pieces merged, some already in the reply so far: each word once', async () => {
    const page = await openConsole(browser, server.consoleUrl);
    await page.getByLabel('Prompt').fill('merge for slow readers');
    await page.getByRole('button', { name: 'Run' }).click();
    const gammas = words('gamma', 10).join('').trim();
    await expect.poll(() => streaming(page)).toBe(gammas);
    // Two slow pages open while the model is between words: their agent.list waits.
    const seedFirst = await (await browser.newContext()).newPage();
    const deltasFirst = await (await browser.newContext()).newPage();
    const readers = [await slowReader(seedFirst, false), await slowReader(deltasFirst, true)];
    for (const slow of [seedFirst, deltasFirst]) {
      await slow.goto(server.consoleUrl);
      await consoleReady(slow);
    }
    await expect.poll(() => readers.every((reader) => reader.held.request !== '')).toBe(true);
    // delta-1…5 are written: they wait for the slow pages; then the reply so far is read (up to delta-5).
    merged[0]!.open();
    const half = `${gammas} ${words('delta', 5).join('').trim()}`;
    await expect.poll(() => streaming(page)).toBe(half);
    for (const reader of readers) reader.sendRequest();
    await expect.poll(() => streaming(seedFirst)).toBe(half);
    await expect.poll(() => readers[1]!.held.answer !== '').toBe(true);
    // delta-6…10: then every delta held goes as one, delta-1 to delta-10 (before the reply so far, for one).
    merged[1]!.open();
    const whole = `${gammas} ${words('delta', 10).join('').trim()}`;
    await expect.poll(() => streaming(page)).toBe(whole);
    await expect.poll(() => readers.every((reader) => reader.held.deltas.length === 10)).toBe(true);
    readers[0]!.sendMerged();
    readers[1]!.sendMerged();
    readers[1]!.sendAnswer();
    await expect.poll(() => streaming(seedFirst)).toBe(whole);
    await expect.poll(() => streaming(deltasFirst)).toBe(whole);
    merged[2]!.open();
    await page.locator('.timeline .end', { hasText: 'finished' }).waitFor({ timeout: 60_000 });
  });
});

/** An agent.delta's params, as the server sends them. */
interface ReplyEvent {
  runId: string;
  sessionId: string;
  turn: number;
  seq: number;
  kind: string;
  text: string;
}
