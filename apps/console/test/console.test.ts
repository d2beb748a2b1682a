// The console in real Chromium against the real server process: sign-in, a terminal (typing,
// resize, reload with scrollback, vim's exact screen after 2 MB of output), an agent run against
// a fake provider with a vetoing stop hook, and a wrong token. One browser for the file; a
// screenshot of each screen lands in artifacts/ (gitignored).
import { chmodSync, mkdtempSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlm, writeCatStop } from './fake-llm.js';
import {
  chromiumAvailable,
  consoleConfig,
  consoleReady,
  launchChromium,
  runCommand,
  screenshot,
  startConsoleServer,
  terminalLines,
  type ConsoleServer,
} from './support.js';

const available = chromiumAvailable();

describe.skipIf(!available)('the console in Chromium', () => {
  let browser: Browser;
  let server: ConsoleServer;
  let bare: ConsoleServer;
  let llm: Awaited<ReturnType<typeof startFakeLlm>>;
  let work: string;
  let page: Page;

  beforeAll(async () => {
    work = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-console-work-')));
    const hook = join(work, 'block-once.sh');
    writeFileSync(
      hook,
      `#!/bin/sh\nif [ -f ${work}/blocked ]; then exit 0; fi\ntouch ${work}/blocked\necho "show me the file contents first" >&2\nexit 2\n`,
    );
    chmodSync(hook, 0o755);
    llm = await startFakeLlm(writeCatStop);
    [server, browser] = await Promise.all([
      startConsoleServer(
        consoleConfig(
          { baseUrl: llm.baseUrl, workdir: work, maxIterations: 8 },
          `[[stop_hooks]]\nname = "block-once"\ncommand = "${hook}"\ntimeout_secs = 10\n`,
        ),
      ),
      launchChromium(),
    ]);
    bare = await startConsoleServer(consoleConfig());
    page = await browser.newPage({ viewport: { width: 1400, height: 800 } });
    // The page asks before leaving while terminals are open: a reload says yes.
    page.on('dialog', (dialog) => void (dialog.type() === 'beforeunload' && dialog.accept()));
  });

  afterAll(async () => {
    await browser?.close();
    await server?.stop();
    await bare?.stop();
    await llm?.close();
    rmSync(work, { recursive: true, force: true });
  });

  const screen = () => terminalLines(page).then((lines) => lines.join('\n'));
  /** A line typed into the program in front (no prompt waited for). */
  const type = async (text: string) => {
    await page.keyboard.type(text);
    await page.keyboard.press('Enter');
  };
  /** A command line typed at the shell's prompt, once the prompt is there. */
  const command = (text: string) => runCommand(page, text);

  it('opens signed in from the printed URL, and keeps the token out of the address bar', async () => {
    expect(server.stdout()).toMatch(/^console: http:\/\/127\.0\.0\.1:\d+\/#token=\S+$/m);
    const response = await page.goto(server.consoleUrl);
    expect(response?.headers()['content-security-policy']).toMatch(/script-src 'self'(;|$)/);
    await consoleReady(page);
    expect(page.url()).not.toContain('token');
  });

  it('opens a terminal, types `echo hello` and sees hello rendered; a paste arrives too', async () => {
    await page.keyboard.press('Alt+KeyN');
    await page.locator('.term-tab:not([hidden]) .xterm').waitFor();
    await command('echo hel""lo');
    await expect.poll(() => terminalLines(page)).toContain('hello');
    // Paste, as the browser delivers it to xterm.js (bash takes it as a bracketed paste).
    await page.locator('.term-tab:not([hidden]) .xterm-helper-textarea').evaluate((textarea) => {
      const clipboardData = new DataTransfer();
      clipboardData.setData('text/plain', 'echo pas""ted');
      textarea.dispatchEvent(new ClipboardEvent('paste', { clipboardData, bubbles: true, cancelable: true }));
    });
    await page.keyboard.press('Enter');
    await expect.poll(() => terminalLines(page)).toContain('pasted');
    await screenshot(page, '1-terminal');
  });

  it('fits the terminal to the window: stty size follows the viewport', async () => {
    const before = await page.evaluate(() => (window as any).alephConsole.size());
    await page.setViewportSize({ width: 1000, height: 560 });
    await expect
      .poll(() => page.evaluate(() => (window as any).alephConsole.size().cols))
      .toBeLessThan(before.cols);
    const after = await page.evaluate(() => (window as any).alephConsole.size());
    await command('stty size');
    await expect.poll(() => terminalLines(page)).toContain(`${after.rows} ${after.cols}`);
    await screenshot(page, '2-resized');
    await page.setViewportSize({ width: 1400, height: 800 });
  });

  it('a paste over 64 KiB arrives whole and in order (in pieces the gateway takes)', async () => {
    const file = join(work, 'pasted.txt');
    let text = '';
    for (let n = 0; text.length < 200_000; n += 1) text += `${n.toString(36)}-`;
    text = text.slice(0, 200_000);
    await command(
      `stty raw -echo; echo ready-$((1+1)); head -c 200000 > ${file}; stty sane; echo pasted-$((100+1))`,
    );
    // Pasted once the command reads (bash out of its bracketed-paste mode, the tty raw).
    await expect.poll(() => terminalLines(page)).toContainEqual(expect.stringMatching(/^ready-2/));
    await page.locator('.term-tab:not([hidden]) .xterm-helper-textarea').evaluate((textarea, data) => {
      const clipboardData = new DataTransfer();
      clipboardData.setData('text/plain', data);
      textarea.dispatchEvent(new ClipboardEvent('paste', { clipboardData, bubbles: true, cancelable: true }));
    }, text);
    await expect
      .poll(() => statSync(file, { throwIfNoEntry: false })?.size, { timeout: 30_000 })
      .toBe(200_000);
    await expect.poll(() => terminalLines(page)).toContainEqual(expect.stringMatching(/pasted-101$/));
    expect(readFileSync(file, 'utf8')).toBe(text);
  });

  it('Ctrl+Shift+C copies the selection and sends the program nothing', async () => {
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: server.origin });
    // Once bash runs the line the tty echoes what is typed and cat writes it back: each line twice.
    await command('echo cat-""ready; cat -v');
    await expect.poll(() => terminalLines(page)).toContain('cat-ready');
    const count = (text: string) =>
      terminalLines(page).then((lines) => lines.filter((line) => line === text).length);
    await type('COPYME-TEXT');
    await expect.poll(() => count('COPYME-TEXT')).toBe(2);
    await page.evaluate(() => {
      const terminal = (window as any).alephConsole.terminal();
      const buffer = terminal.buffer.active;
      for (let row = buffer.length - 1; row >= 0; row -= 1)
        if (buffer.getLine(row).translateToString(true) === 'COPYME-TEXT')
          return terminal.selectLines(row, row);
    });
    await page.keyboard.press('Control+Shift+KeyC');
    try {
      await expect.poll(() => page.evaluate(() => navigator.clipboard.readText())).toBe('COPYME-TEXT');
      await type('still-alive'); // cat got no ^C: it echoes this back
      await expect.poll(() => count('still-alive')).toBe(2);
    } finally {
      await page.keyboard.press('Control+D'); // cat ends however this went: the next test types to bash
    }
  });

  it('draws emoji 2 columns wide, as programs (wcwidth) and the server’s snapshot count them', async () => {
    // `😀|`, then `😀😀` with `Z` written at column 3: over the second emoji, for a program.
    await command(`printf '\\360\\237\\230\\200|\\n\\360\\237\\230\\200\\360\\237\\230\\200\\033[3GZ\\n'`);
    const drawn = () =>
      page.evaluate(() => {
        const terminal = (window as any).alephConsole.terminal();
        const buffer = terminal.buffer.active;
        for (let row = buffer.length - 1; row >= 0; row -= 1) {
          const line = buffer.getLine(row);
          if (!line.translateToString(true).startsWith('😀|')) continue;
          let column = 0;
          while (column < terminal.cols && line.getCell(column).getChars() !== '|') column += 1;
          return { column, next: buffer.getLine(row + 1).translateToString(true) };
        }
        return undefined;
      });
    await expect.poll(drawn).toEqual({ column: 2, next: '😀Z' });
    await page.reload(); // drawn again from the server's snapshot
    await expect.poll(drawn).toEqual({ column: 2, next: '😀Z' });
  });

  it('reattaches after a reload with the scrollback', async () => {
    await command(`seq 1 10000 | tr '\\n' ' '; echo; echo seq-""end`); // 49 KB on 470 rows
    await expect.poll(() => terminalLines(page), { timeout: 90_000 }).toContain('seq-end');
    await page.reload();
    await expect.poll(() => terminalLines(page, 'all')).toContain('seq-end');
    expect(await terminalLines(page, 'all')).toContain('hello');
    await screenshot(page, '3-reloaded');
  }, 180_000);

  it('after 2 MB of output and vim, a reload shows vim’s exact screen; :q! leaves a clean prompt', async () => {
    const file = join(work, 'poem.txt');
    writeFileSync(file, 'alpha\nbeta\ngamma\n');
    await page.locator('.term-tab:not([hidden]) .xterm').click();
    await command('seq 1 300000 && echo seq-done');
    await expect.poll(() => terminalLines(page), { timeout: 240_000 }).toContain('seq-done');
    await command(`vim -u NONE -N ${file}`);
    await expect.poll(() => page.evaluate(() => (window as any).alephConsole.bufferType())).toBe('alternate');
    await expect.poll(screen).toMatch(/alpha\nbeta\ngamma\n~/);
    await page.keyboard.press('j'); // the cursor moves once vim has answered
    await expect
      .poll(() => page.evaluate(() => (window as any).alephConsole.cursor()))
      .toEqual({ x: 0, y: 1 });
    const watched = {
      lines: await terminalLines(page),
      cursor: await page.evaluate(() => (window as any).alephConsole.cursor()),
    };
    await page.reload();
    await expect
      .poll(async () => ({
        lines: await terminalLines(page),
        cursor: await page.evaluate(() => (window as any).alephConsole.cursor()),
      }))
      .toEqual(watched);
    expect(await page.evaluate(() => (window as any).alephConsole.bufferType())).toBe('alternate');
    await screenshot(page, '4-vim-reloaded');
    await page.locator('.term-tab:not([hidden]) .xterm').click();
    await type(':q!');
    await expect.poll(() => page.evaluate(() => (window as any).alephConsole.bufferType())).toBe('normal');
    await command('echo after-""vim');
    await expect.poll(() => terminalLines(page)).toContain('after-vim');
    const text = await screen();
    expect(text).not.toMatch(/^~/m); // none of vim's leftovers under the prompt
    expect(text).not.toContain('gamma');
    await screenshot(page, '5-vim-quit');
  }, 360_000);

  it('says when a session ends and why; Alt+W closes its tab, Alt+1 goes back', async () => {
    await page.keyboard.press('Alt+KeyN');
    await expect.poll(() => page.getByRole('tab').count()).toBe(2);
    await expect.poll(() => page.evaluate(() => (window as any).alephConsole.bufferType())).toBe('normal');
    await expect.poll(screen).toMatch(/[#$]/); // the new shell's prompt
    await command('exit 3');
    const notice = page.locator('.term-tab:not([hidden]) .notice');
    await expect.poll(() => notice.innerText()).toBe('Session ended — the program exited (code 3)');
    await expect.poll(() => page.getByRole('tab', { name: /\(ended\)/ }).count()).toBe(1);
    // Seen, not only present: nothing (xterm's own element) covers the notice.
    const seen = await notice.evaluate((element) => {
      const box = element.getBoundingClientRect();
      return box.height > 0 && document.elementFromPoint(box.x + 4, box.y + box.height / 2) === element;
    });
    expect(seen).toBe(true);
    await screenshot(page, '6-session-ended');
    await page.keyboard.press('Alt+KeyW');
    await expect.poll(() => page.getByRole('tab').count()).toBe(1);
    await page.keyboard.press('Alt+Digit1');
    await expect.poll(() => page.getByRole('tab', { selected: true }).innerText()).toContain('1 ');
  });

  it('runs an agent: its steps, tool calls, the veto and the final state appear; Sessions lists the shell call', async () => {
    await page.keyboard.press('Alt+KeyA');
    await page.keyboard.type('create the file console.txt');
    await page.keyboard.press('Control+Enter');
    const timeline = page.locator('.timeline');
    await timeline.locator('.end', { hasText: 'finished' }).waitFor({ timeout: 90_000 });
    await expect
      .poll(() => timeline.locator('.verdict.veto').innerText())
      .toContain('show me the file contents first');
    expect(await timeline.locator('.tool summary').allInnerTexts()).toEqual([
      expect.stringMatching(/✓ write_file .*console\.txt/),
      expect.stringMatching(/✓ shell .*cat console\.txt/),
    ]);
    expect(await timeline.locator('.step').count()).toBeGreaterThanOrEqual(3);
    // The shell call's session is listed by the model's command; its tab closed with the run.
    await expect
      .poll(() => page.locator('.session-list .command').allInnerTexts())
      .toContain('agent: cat console.txt');
    await expect.poll(() => page.locator('.tab', { hasText: 'agent:' }).count()).toBe(0);
    await timeline.locator('.tool details').first().locator('summary').click();
    await page.getByRole('tab').first().click();
    await page.locator('.term-tab:not([hidden]) .xterm').click(); // the keys go to the terminal
    await command(`clear; cd ${work} && ls && cat console.txt`);
    await expect.poll(() => terminalLines(page)).toContain('hello from the console');
    await expect
      .poll(async () => JSON.stringify((await terminalLines(page)).filter(Boolean).at(-1)))
      .toMatch(/[#$] ?"$/);
    await screenshot(page, '7-agent-run'); // the README's picture: a terminal beside a run
  });

  it('cancels a run from its Cancel button', async () => {
    await page.keyboard.press('Alt+KeyA');
    await page.keyboard.type('think forever');
    await page.keyboard.press('Control+Enter');
    const cancel = page.getByRole('button', { name: 'Cancel' });
    await cancel.waitFor();
    await cancel.click();
    await page.locator('.timeline .end', { hasText: 'cancelled' }).waitFor({ timeout: 60_000 });
    expect(await page.locator('.run-header .state').innerText()).toBe('cancelled');
  });

  it('says the token is wrong, and asks for it', async () => {
    const wrong = await browser.newPage();
    await wrong.goto(`${server.origin}/#token=not-the-token`);
    await wrong.getByRole('alert').filter({ hasText: 'Wrong token' }).waitFor();
    expect(await wrong.getByLabel('Token').isVisible()).toBe(true);
    await screenshot(wrong, '8-wrong-token');
    await wrong.close();
  });

  it('without a provider, says how to configure one', async () => {
    const other = await browser.newPage();
    await other.goto(bare.consoleUrl);
    await other.getByLabel('Prompt').fill('hello');
    await other.getByRole('button', { name: 'Run' }).click();
    const alert = other.locator('.message.no-provider');
    await alert.waitFor();
    expect(await alert.innerText()).toMatch(/\[agent\][\s\S]*provider = /);
    await screenshot(other, '9-no-provider');
    await other.close();
  });
});
