// What a terminal user expects of a tab, in real Chromium against the real server: scrollback,
// the active tab and the titles kept over a reload; the title following the program (OSC 0/2);
// a prompt before leaving; the page's Alt keys given to the program per tab; http(s) links that
// open (and a `javascript:` one that does not); a favicon; a repeat count of 2^31 that does not
// block the page; a smaller second viewer not garbled; a paste that stays text, control characters
// dropped (it cannot end bracketed paste and run itself).
import type { Browser, Page } from 'playwright-core';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  chromiumAvailable,
  consoleConfig,
  consoleReady,
  launchChromium,
  openConsole,
  runCommand,
  startConsoleServer,
  terminalLines,
  waitForPrompt,
  type ConsoleServer,
} from './support.js';

const available = chromiumAvailable();

describe.skipIf(!available)('a terminal tab as a terminal user expects', () => {
  let browser: Browser;
  let server: ConsoleServer;
  let page: Page;

  beforeAll(async () => {
    [server, browser] = await Promise.all([startConsoleServer(consoleConfig()), launchChromium()]);
    page = await openConsole(browser, server.consoleUrl);
  });

  afterAll(async () => {
    await browser?.close();
    await server?.stop();
  });

  const command = (text: string) => runCommand(page, text);
  /** Reloads, saying yes to the leave-page prompt (and returns whether it was asked). */
  const reload = async (): Promise<boolean> => {
    let asked = false;
    const onDialog = (dialog: { type(): string; accept(): Promise<void> }) => {
      asked ||= dialog.type() === 'beforeunload';
      void dialog.accept();
    };
    page.on('dialog', onDialog);
    await page.reload();
    page.off('dialog', onDialog);
    await consoleReady(page);
    return asked;
  };

  it('keeps 3001 lines of scrollback, the active tab and the titles over a reload (asking first)', async () => {
    await page.keyboard.press('Alt+KeyN');
    await page.locator('.term-tab:not([hidden]) .xterm').waitFor();
    await command(`seq 1 3000; echo scroll-""end`);
    await expect.poll(() => terminalLines(page), { timeout: 30_000 }).toContain('scroll-end');
    const count = async () => (await terminalLines(page, 'all')).filter((line) => /^\d+$/.test(line)).length;
    expect(await count()).toBe(3000);
    // A second tab whose program sets its title (OSC 2), then back to the first.
    await page.keyboard.press('Alt+KeyN');
    await expect.poll(() => page.getByRole('tab').count()).toBe(2);
    await command(`printf '\\033]2;%s\\007' 'build <b>watch</b>'`);
    await expect
      .poll(() => page.getByRole('tab', { selected: true }).innerText())
      .toContain('build <b>watch</b>');
    expect(await page.title()).toBe('build <b>watch</b> — Aleph');
    expect(await page.locator('.tabs b').count()).toBe(0); // text, not markup
    await page.keyboard.press('Alt+Digit1');
    await expect.poll(() => page.getByRole('tab', { selected: true }).innerText()).toMatch(/^1 /);
    expect(await reload()).toBe(true);
    await expect.poll(() => page.getByRole('tab').count()).toBe(2);
    await expect.poll(() => page.getByRole('tab', { selected: true }).innerText()).toMatch(/^1 /);
    expect(await page.getByRole('tab').nth(1).innerText()).toContain('build <b>watch</b>');
    await expect.poll(count).toBe(3000);
  });

  it('gives the page’s Alt keys to the program in one tab when asked', async () => {
    await page.locator('.term-tab:not([hidden]) .xterm').click();
    await command('echo cat-""ready; cat -v'); // Alt+N reaches cat, not the shell's line editor
    await expect.poll(() => terminalLines(page)).toContain('cat-ready');
    await page.getByLabel(/Alt keys/).uncheck();
    await page.locator('.term-tab:not([hidden]) .xterm').click();
    await page.keyboard.press('Alt+KeyN');
    await page.keyboard.press('Enter');
    await expect.poll(() => terminalLines(page)).toContain('^[n');
    expect(await page.getByRole('tab').count()).toBe(2); // no new tab
    await page.keyboard.press('Control+KeyD');
    await page.getByLabel(/Alt keys/).check();
    await page.locator('.term-tab:not([hidden]) .xterm').click();
    await page.keyboard.press('Alt+KeyN');
    await expect.poll(() => page.getByRole('tab').count()).toBe(3);
    await page.keyboard.press('Alt+KeyW');
    await expect.poll(() => page.getByRole('tab').count()).toBe(2);
  });

  it('opens an http(s) link in a new tab; a javascript: one is not a link', async () => {
    await page.keyboard.press('Alt+Digit1');
    await page.locator('.term-tab:not([hidden]) .xterm').click();
    await command('clear; echo https://example.com/from-terminal; echo "javascript:alert(1)"');
    await expect.poll(() => terminalLines(page)).toContain('https://example.com/from-terminal');
    await waitForPrompt(page);
    await page.context().route('https://example.com/**', (route) => route.fulfill({ body: 'a page' }));
    /** The middle of the first cell of the line that holds `text`, in page coordinates. */
    const cellOf = (text: string) =>
      page.evaluate((wanted) => {
        const terminal = (window as any).alephConsole.terminal();
        const screen = terminal.element.querySelector('.xterm-screen').getBoundingClientRect();
        const buffer = terminal.buffer.active;
        for (let row = 0; row < terminal.rows; row += 1)
          if (buffer.getLine(buffer.viewportY + row).translateToString(true) === wanted)
            return {
              x: screen.x + (screen.width / terminal.cols) * 3.5,
              y: screen.y + (screen.height / terminal.rows) * (row + 0.5),
            };
        return undefined;
      }, text);
    const link = (await cellOf('https://example.com/from-terminal'))!;
    await page.mouse.move(link.x, link.y);
    const popup = page.waitForEvent('popup', { timeout: 30_000 });
    await page.mouse.click(link.x, link.y);
    expect((await popup).url()).toContain('example.com/from-terminal');
    const script = (await cellOf('javascript:alert(1)'))!;
    await page.mouse.move(script.x, script.y);
    const opened = page.waitForEvent('popup', { timeout: 2000 }).then(
      () => true,
      () => false,
    );
    await page.mouse.click(script.x, script.y);
    expect(await opened).toBe(false);
  });

  it('serves a favicon', async () => {
    const href = await page.locator('link[rel=icon]').getAttribute('href');
    const response = await page.request.get(new URL(href!, page.url()).href);
    expect(response.status()).toBe(200);
    expect(response.headers()['content-type']).toBe('image/svg+xml');
  });

  it('a program printing a repeat count of 2^31 does not block the page', async () => {
    await page.keyboard.press('Alt+KeyN');
    await page.locator('.term-tab:not([hidden]) .xterm').waitFor();
    await command(`clear; printf 'a\\033[2147483647b\\033[2147483647L'; echo; echo repeat-""end`);
    await expect.poll(() => terminalLines(page), { timeout: 30_000 }).toContain('repeat-end');
    await command('echo still-""answering');
    await expect.poll(() => terminalLines(page), { timeout: 30_000 }).toContain('still-answering');
  });

  it('a smaller second viewer draws the screen at the pty’s size, not garbled', async () => {
    await page.keyboard.press('Alt+Digit1');
    const sessionId = await page.evaluate(() =>
      document.querySelector('.term-tab:not([hidden])')?.getAttribute('data-session'),
    );
    const other = await browser.newPage({ viewport: { width: 700, height: 500 } });
    try {
      await other.goto(server.consoleUrl);
      await other.getByRole('button', { name: 'Agent' }).click(); // narrow: Sessions is in the drawer
      await other
        .locator(`.session-list li[data-session="${sessionId}"]`)
        .getByRole('button', { name: 'Open' })
        .click();
      await other.locator('.term-tab:not([hidden]) .xterm').waitFor();
      // The big viewer takes the size back and draws a line as wide as its window.
      await page.locator('.term-tab:not([hidden]) .xterm').click();
      const big = await page.evaluate(() => (window as any).alephConsole.size());
      await command(`clear; printf '%0${big.cols - 1}d|\\n' 0; echo wide-""done`);
      await expect.poll(() => terminalLines(page)).toContain('wide-done');
      // The small one follows at the pty's size: the wide line is one line there too.
      await expect.poll(() => other.evaluate(() => (window as any).alephConsole.size())).toEqual(big);
      await expect.poll(() => terminalLines(other)).toContain('wide-done');
      const wide = `${'0'.repeat(big.cols - 1)}|`;
      expect(await terminalLines(other)).toContain(wide);
      expect(await other.locator('.term-tab:not([hidden]) .size-note').innerText()).toMatch(
        /^Sized \d+×\d+ by another viewer/,
      );
    } finally {
      await other.close();
    }
  });
  it('Sessions says how long a terminal nobody views has left before the idle TTL ends it', async () => {
    const shown = () =>
      page.evaluate(() => document.querySelector('.term-tab:not([hidden])')?.getAttribute('data-session'));
    const before = await shown();
    await page.keyboard.press('Alt+KeyN');
    // The new tab, once its session is there (it is shown at once, its session once the server answers).
    await expect
      .poll(async () => {
        const id = await shown();
        return typeof id === 'string' && id !== before;
      })
      .toBe(true);
    const sessionId = await shown();
    await page.locator(`.term-tab[data-session="${sessionId}"] .xterm`).waitFor();
    await waitForPrompt(page);
    const expiry = page.locator(`.session-list li[data-session="${sessionId}"] .expiry`);
    await expect.poll(() => expiry.innerText()).toBe('kept while viewed');
    await page.keyboard.press('Alt+KeyW'); // detached: the server's default TTL, 10 min, runs
    await expect.poll(() => expiry.innerText()).toMatch(/^no viewer: ends in (10m 0s|9m \d+s) if left idle$/);
    // Viewed in another page only: the server says it is kept.
    const other = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    try {
      await other.goto(server.consoleUrl);
      await other
        .locator(`.session-list li[data-session="${sessionId}"]`)
        .getByRole('button', { name: 'Open' })
        .click();
      await expect.poll(() => expiry.innerText()).toBe('kept: viewed elsewhere, or no idle limit');
    } finally {
      await other.close();
    }
    await expect.poll(() => expiry.innerText()).toMatch(/^no viewer: ends in /);
  });
  it('pastes text as text: control characters are dropped, so a paste cannot end bracketed paste and run itself', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'aleph-paste-'));
    const context = await browser.newContext({ permissions: ['clipboard-read', 'clipboard-write'] });
    try {
      const paster = await openConsole(context, server.consoleUrl);
      const paste = async (text: string) => {
        await paster.evaluate((t) => navigator.clipboard.writeText(t), text);
        await paster.keyboard.press('Control+Shift+KeyV'); // the browser's own paste, as a user's
      };
      await paster.getByRole('button', { name: 'New terminal' }).first().click();
      await paster.locator('.term-tab:not([hidden]) .xterm').waitFor();
      await waitForPrompt(paster);
      // What a page or a model's reply can hide in copied text: the end of the paste bracket, ^U, a CR.
      const file = join(dir, 'ran');
      await paste(`echo pasted-one\x1b[201~\x15touch ${file}\r`);
      await paster.keyboard.press('Enter');
      await expect.poll(() => terminalLines(paster)).toContain(`pasted-one[201~touch ${file}`);
      expect(existsSync(file)).toBe(false);
      // Every other control character is dropped too (tab and line ends kept): C0, DEL, C1.
      // Pasted once cat reads: bash turns bracketed paste off before it runs a line, and its output
      // (cat-2, not the typed cat-$((1+1))) shows xterm.js has seen that.
      await runCommand(paster, 'echo cat-$((1+1)); cat -A');
      await expect.poll(() => terminalLines(paster)).toContain('cat-2');
      await paste('a\x01b\x1bc\x7fd\u009be\tf');
      await paster.keyboard.press('Enter');
      await expect.poll(() => terminalLines(paster)).toContain('abcde^If$');
      await paster.keyboard.press('Control+KeyD');
    } finally {
      await context.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
