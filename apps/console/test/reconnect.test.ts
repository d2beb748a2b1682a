// A dropped connection, in real Chromium against the real server, through a TCP proxy the test
// cuts: the page says it is disconnected, reconnects by itself once the server is reachable again,
// the terminal shows exactly what the program printed meanwhile (sha256 of the text), and keys
// typed while down are queued (said on the page) and arrive once it is back.
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  chromiumAvailable,
  consoleConfig,
  launchChromium,
  openConsole,
  runCommand,
  screenshot,
  startConsoleServer,
  terminalLines,
  waitForPrompt,
  type ConsoleServer,
} from './support.js';

const available = chromiumAvailable();

/** A loopback TCP proxy that can be cut (every connection dropped, new ones refused) and restored. */
async function startProxy(
  target: URL,
): Promise<{ origin: string; cut(): void; restore(): void; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  let down = false;
  const server: Server = createServer((client) => {
    if (down) return void client.destroy();
    const upstream = connect(Number(target.port), target.hostname);
    for (const [from, to] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      sockets.add(from);
      from.pipe(to);
      from.on('error', () => to.destroy());
      from.on('close', () => {
        sockets.delete(from);
        to.destroy();
      });
    }
  });
  await new Promise<void>((ready) => server.listen(0, '127.0.0.1', ready));
  const port = (server.address() as { port: number }).port;
  return {
    origin: `http://127.0.0.1:${port}`,
    cut() {
      down = true;
      for (const socket of sockets) socket.destroy();
    },
    restore() {
      down = false;
    },
    close: () =>
      new Promise((done) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => done());
      }),
  };
}

describe.skipIf(!available)('the console over a connection that drops', () => {
  let browser: Browser;
  let server: ConsoleServer;
  let proxy: Awaited<ReturnType<typeof startProxy>>;
  let page: Page;
  let work: string;

  beforeAll(async () => {
    work = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-console-reconnect-')));
    [server, browser] = await Promise.all([startConsoleServer(consoleConfig()), launchChromium()]);
    proxy = await startProxy(new URL(server.origin));
    page = await openConsole(browser, `${proxy.origin}/#token=${encodeURIComponent(server.token)}`);
    page.on('dialog', (dialog) => void dialog.accept()); // the leave-page prompt
  });

  afterAll(async () => {
    await browser?.close();
    await proxy?.close();
    await server?.stop();
    rmSync(work, { recursive: true, force: true });
  });

  const type = async (text: string) => {
    await page.keyboard.type(text);
    await page.keyboard.press('Enter');
  };
  const status = () => page.locator('header .status').innerText();

  it('reconnects by itself after a 5 s cut; the screen holds exactly what the program printed', async () => {
    await page.keyboard.press('Alt+KeyN');
    await page.locator('.term-tab:not([hidden]) .xterm').waitFor();
    const file = join(work, 'printed.txt');
    // ~8 s of output (more on a loaded machine), printed through the cut; `tee` keeps the program's own copy.
    await runCommand(
      page,
      `clear; for i in $(seq 1 400); do echo "row $i of the program"; sleep 0.02; done | tee ${file}; echo loop-""done`,
    );
    await expect
      .poll(() => terminalLines(page))
      .toContainEqual(expect.stringMatching(/^row \d+ of the program$/));
    proxy.cut();
    const banner = page.locator('.link-banner');
    await banner.filter({ hasText: 'Disconnected from the server' }).waitFor({ timeout: 60_000 });
    expect(await status()).toBe('disconnected');
    await screenshot(page, 'reconnect-1-down');
    await new Promise((done) => setTimeout(done, 5000));
    proxy.restore();
    await expect.poll(status, { timeout: 30_000 }).toBe('connected');
    expect(await banner.isHidden()).toBe(true);
    await expect.poll(() => terminalLines(page, 'all'), { timeout: 90_000 }).toContain('loop-done');
    const lines = await terminalLines(page, 'all');
    const first = lines.indexOf('row 1 of the program');
    const last = lines.indexOf('row 400 of the program');
    expect(first).toBeGreaterThanOrEqual(0);
    const shown = lines.slice(first, last + 1).join('\n') + '\n';
    const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');
    expect(sha256(shown)).toBe(sha256(readFileSync(file, 'utf8')));
  });

  it('keys typed while down are queued, said, and arrive once the connection is back', async () => {
    await waitForPrompt(page); // what is typed while down goes to the shell's line editor
    proxy.cut();
    await page.locator('.link-banner').filter({ hasText: 'Disconnected' }).waitFor({ timeout: 60_000 });
    await page.locator('.term-tab:not([hidden]) .xterm').click();
    await type('echo typed-while-down-$((6*7))');
    const note = page.locator('.term-tab:not([hidden]) .link-note');
    await expect.poll(() => note.innerText()).toMatch(/\d+ bytes typed are queued/);
    await expect
      .poll(() => page.locator('.link-banner .queued').innerText())
      .toMatch(/\d+ bytes typed are queued/);
    await screenshot(page, 'reconnect-2-queued');
    await new Promise((done) => setTimeout(done, 2000));
    proxy.restore();
    await expect.poll(status, { timeout: 30_000 }).toBe('connected');
    await expect.poll(() => terminalLines(page)).toContain('typed-while-down-42');
    expect(await note.isHidden()).toBe(true);
  });

  it('refuses typing past the queue visibly (the bell and the note), never silently', async () => {
    proxy.cut();
    await page.locator('.link-banner').filter({ hasText: 'Disconnected' }).waitFor({ timeout: 60_000 });
    await page.locator('.term-tab:not([hidden]) .xterm-helper-textarea').evaluate((textarea) => {
      const clipboardData = new DataTransfer();
      clipboardData.setData('text/plain', 'x'.repeat(10_000));
      textarea.dispatchEvent(new ClipboardEvent('paste', { clipboardData, bubbles: true, cancelable: true }));
    });
    const note = page.locator('.term-tab:not([hidden]) .link-note');
    await expect.poll(() => note.innerText()).toMatch(/10\d{3} bytes refused/);
    // Still said after another try to reconnect (each failed try redraws the link's state).
    const tries = () => page.locator('.link-banner').innerText();
    const before = /try (\d+)/.exec(await tries())?.[1];
    await page.locator('.link-banner').getByRole('button', { name: 'Reconnect now' }).click();
    await expect.poll(async () => /try (\d+)/.exec(await tries())?.[1]).not.toBe(before);
    expect(await note.innerText()).toMatch(/10\d{3} bytes refused/);
    proxy.restore();
    await expect.poll(status, { timeout: 30_000 }).toBe('connected');
  });

  it('a new tab asked for while down starts once the connection is back, with what was typed into it', async () => {
    proxy.cut();
    await page.locator('.link-banner').filter({ hasText: 'Disconnected' }).waitFor({ timeout: 60_000 });
    const tabs = await page.getByRole('tab').count();
    await page.keyboard.press('Alt+KeyN');
    await expect.poll(() => page.getByRole('tab').count()).toBe(tabs + 1);
    await type('echo started-""after-$((6*7))');
    const note = page.locator('.term-tab:not([hidden]) .link-note');
    await expect.poll(() => note.innerText()).toMatch(/\d+ bytes typed are queued/);
    proxy.restore();
    await expect.poll(status, { timeout: 30_000 }).toBe('connected');
    await expect.poll(() => terminalLines(page)).toContain('started-after-42');
    expect(await page.getByRole('tab').count()).toBe(tabs + 1);
  });
});

describe.skipIf(!available)('the console when the server shuts down', () => {
  it('says the server shut down and its terminals ended with it, not that typing is queued', async () => {
    const [server, browser] = await Promise.all([startConsoleServer(consoleConfig()), launchChromium()]);
    try {
      const page = await openConsole(browser, server.consoleUrl);
      page.on('dialog', (dialog) => void dialog.accept());
      await page.keyboard.press('Alt+KeyN');
      await page.locator('.term-tab:not([hidden]) .xterm').waitFor();
      await waitForPrompt(page);
      await server.stop(); // SIGTERM: the server ends its terminals and closes with 1001
      const banner = page.locator('.link-banner');
      await banner.filter({ hasText: 'The server shut down' }).waitFor({ timeout: 60_000 });
      expect(await banner.innerText()).toContain('(code 1001)');
      expect(await page.locator('.link-banner .queued').innerText()).toContain(
        'Its terminals ended with it, so what you type now is not kept.',
      );
      await expect
        .poll(() => page.locator('.term-tab:not([hidden])').innerText())
        .toContain('Session ended — the server shut down');
      await screenshot(page, 'reconnect-5-shutdown');
    } finally {
      await browser.close();
      await server.stop();
    }
  });
});
