// The console as one of several viewers, in real Chromium against the real server: closing a tab
// detaches (the session, another user's or an agent's command, runs on) and ending is its own
// action; the viewer used last sets the pty's size; with no `[agent] workdir` the run form asks for
// a directory; a turn's failed calls are counted as the CLI counts them. The server has no
// `[agent] workdir`, as the README's example config.
import { existsSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlm, type Message, type Reply } from './fake-llm.js';
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

let lengthyReplies = 0;

/** One tool call chosen by the prompt, then a stop. */
function byPrompt(messages: Message[]): Reply {
  const prompt = messages.find((message) => message.role === 'user')?.content ?? '';
  // Two replies of 700 KB: the run's log is more than one agent.history page (1 MiB at most). Told
  // apart by a count, not by the conversation: the server truncates a context that large.
  if (prompt.includes('write at length'))
    return (lengthyReplies += 1) > 1
      ? { text: `Second reply, at length: ${'y'.repeat(700_000)}\nVERDICT: PASS` }
      : { text: `First reply: ${'x'.repeat(700_000)}`, call: { name: 'read_file', args: { path: 'a.txt' } } };
  if (messages.some((message) => message.role === 'tool')) return { text: 'Done.\nVERDICT: PASS' };
  if (prompt.includes('wait for go'))
    return {
      call: {
        name: 'shell',
        args: { command: 'echo waiting; while [ ! -f go ]; do sleep 0.1; done; echo finished-after-go' },
      },
    };
  if (prompt.includes('read a missing file'))
    return { call: { name: 'read_file', args: { path: 'no-such-file.txt' } } };
  return { text: 'Nothing to do.\nVERDICT: PASS' };
}

describe.skipIf(!available)('the console among other viewers', () => {
  let browser: Browser;
  let server: ConsoleServer;
  let llm: Awaited<ReturnType<typeof startFakeLlm>>;
  let work: string;
  let page: Page;

  beforeAll(async () => {
    work = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-console-viewers-')));
    llm = await startFakeLlm(byPrompt);
    [server, browser] = await Promise.all([
      startConsoleServer(consoleConfig({ baseUrl: llm.baseUrl, maxIterations: 4 })),
      launchChromium(),
    ]);
    page = await openConsole(browser, server.consoleUrl, { width: 1400, height: 800 });
  });

  afterAll(async () => {
    await browser?.close();
    await server?.stop();
    await llm?.close();
    rmSync(work, { recursive: true, force: true });
  });

  const list = (on: Page = page) =>
    on.evaluate(
      () =>
        (window as any).alephConsole.request('pty.list', {}) as Promise<
          { sessionId: string; cols: number; rows: number; exit: { reason: string } | null }[]
        >,
    );
  const activeSession = (on: Page) =>
    on.evaluate(() => document.querySelector('.term-tab:not([hidden])')?.getAttribute('data-session'));
  const size = (on: Page) => on.evaluate(() => (window as any).alephConsole.size());
  const type = (on: Page, text: string) => runCommand(on, text);
  /** A second viewer: its own page (and sessionStorage), at another window size. */
  const secondViewer = (width: number, height: number): Promise<Page> =>
    openConsole(browser, server.consoleUrl, { width, height });
  const newTerminal = async (): Promise<string> => {
    const before = await activeSession(page);
    await page.getByRole('button', { name: 'New terminal' }).first().click();
    // The new tab is shown at once; its session once the server has answered.
    await expect
      .poll(async () => {
        const shown = await activeSession(page);
        return typeof shown === 'string' && shown !== before;
      })
      .toBe(true);
    return (await activeSession(page))!;
  };
  const openFromSessions = async (on: Page, sessionId: string) => {
    await on
      .locator(`.session-list li[data-session="${sessionId}"]`)
      .getByRole('button', { name: 'Open' })
      .click();
    await expect.poll(() => activeSession(on)).toBe(sessionId);
  };

  it('without [agent] workdir, the run form asks for a directory, runs in it, and offers it again', async () => {
    const directory = page.getByLabel('Directory');
    expect(await directory.inputValue()).toBe('');
    await page.getByLabel('Prompt').fill('say hello');
    await page.getByRole('button', { name: 'Run' }).click();
    const alert = page.locator('.agent .message');
    await alert.waitFor();
    expect(await alert.innerText()).toMatch(/^Directory: enter the absolute path .*no \[agent\] workdir/);
    expect(await directory.getAttribute('aria-invalid')).toBe('true');
    expect(await directory.evaluate((input) => input === document.activeElement)).toBe(true);
    await screenshot(page, 'viewers-1-directory-missing');

    await directory.fill('relative/path');
    await page.getByRole('button', { name: 'Run' }).click();
    await expect.poll(() => alert.innerText()).toBe('Directory: relative/path is not an absolute path');

    await directory.fill(work);
    await page.getByRole('button', { name: 'Run' }).click();
    await page.locator('.timeline .end', { hasText: 'finished' }).waitFor({ timeout: 60_000 });
    expect(await alert.isHidden()).toBe(true);
    expect(await directory.getAttribute('aria-invalid')).toBeNull();
    // Another browser (nothing remembered) is offered the directory of the last run.
    const other = await secondViewer(1000, 700);
    await expect.poll(() => other.getByLabel('Directory').inputValue()).toBe(work);
    await other.close();
  });

  it('counts a turn whose one call failed as the CLI does: 1 tool call (1 failed)', async () => {
    await page.getByLabel('Prompt').fill('read a missing file');
    await page.getByRole('button', { name: 'Run' }).click();
    const timeline = page.locator('.timeline');
    await timeline.locator('.tool', { hasText: 'read_file' }).waitFor({ timeout: 60_000 });
    await timeline.locator('.end', { hasText: 'finished' }).waitFor({ timeout: 60_000 });
    expect(await timeline.locator('.tool summary').allInnerTexts()).toEqual([
      expect.stringMatching(/^✗ read_file /),
    ]);
    expect(await timeline.locator('.step').allInnerTexts()).toEqual([
      'Turn 1: 1 tool call (1 failed)',
      'Turn 2: 0 tool calls',
    ]);
  });

  it('a run whose log is several agent.history pages is drawn to its end', async () => {
    await page.getByLabel('Prompt').fill('write at length');
    await page.getByRole('button', { name: 'Run' }).click();
    const timeline = page.locator('.timeline');
    await timeline.locator('.user', { hasText: 'write at length' }).waitFor();
    await timeline.locator('.end', { hasText: 'finished' }).waitFor({ timeout: 90_000 });
    await expect
      .poll(() =>
        timeline
          .locator('.assistant:not(.streaming)')
          .allInnerTexts()
          .then((texts) => texts.map((text) => text.slice(0, 40))),
      )
      .toEqual([
        expect.stringMatching(/^First reply: x+/),
        expect.stringMatching(/^Second reply, at length: y+/),
      ]);
    expect(await timeline.locator('.streaming').count()).toBe(0);
  });

  it("closing the tab of an agent's command detaches: the command runs on and its result is whole", async () => {
    rmSync(join(work, 'go'), { force: true });
    await page.getByLabel('Prompt').fill('wait for go');
    await page.getByRole('button', { name: 'Run' }).click();
    const agentTab = page.locator('.tab', { hasText: 'agent:' });
    await agentTab.waitFor({ timeout: 60_000 });
    await agentTab.getByRole('button', { name: /^Close tab / }).click();
    await expect.poll(() => agentTab.count()).toBe(0);
    expect(existsSync(join(work, 'go'))).toBe(false);
    writeFileSync(join(work, 'go'), '');
    const call = page.locator('.timeline .tool', { hasText: 'shell' });
    await expect.poll(() => call.locator('summary').innerText(), { timeout: 30_000 }).toMatch(/^[✓✗] shell /);
    const result = (await call.locator('.result').textContent()) ?? '';
    expect(result).toMatch(/waiting\s+finished-after-go/);
    expect(result).not.toMatch(/killed/);
    expect(await call.locator('summary').innerText()).toMatch(/^✓ shell /);
  });

  it("closing another viewer's tab leaves the session running for its owner; End… ends it, after a confirm", async () => {
    const sessionId = await newTerminal();
    const other = await secondViewer(900, 500);
    try {
      await openFromSessions(other, sessionId);
      await other.keyboard.press('Alt+KeyW');
      await expect.poll(() => other.getByRole('tab').count()).toBe(0);
      await expect.poll(() => other.locator('.session-list li.live').count()).toBeGreaterThan(0);
      expect((await list()).find((session) => session.sessionId === sessionId)?.exit).toBeNull();
      await page.locator('.term-tab:not([hidden]) .xterm').click();
      await type(page, 'echo still-""here');
      await expect.poll(() => terminalLines(page)).toContain('still-here');

      // Ending is explicit: a dismissed confirm ends nothing, an accepted one ends it for everyone.
      const end = other
        .locator(`.session-list li[data-session="${sessionId}"]`)
        .getByRole('button', { name: /^End session / });
      other.once('dialog', (dialog) => void dialog.dismiss());
      await end.click();
      expect((await list()).find((session) => session.sessionId === sessionId)?.exit).toBeNull();
      other.once('dialog', (dialog) => void dialog.accept());
      await end.click();
      await expect
        .poll(() => page.locator('.term-tab:not([hidden]) .notice').innerText())
        .toMatch(/^Session ended — closed/);
      await screenshot(page, 'viewers-2-ended-by-another');
    } finally {
      await other.close();
    }
  });

  it('the viewer used last sets the size: focusing or typing takes it back, as tmux’s window-size latest', async () => {
    const sessionId = await newTerminal();
    await waitForPrompt(page);
    const big = await size(page);
    const other = await secondViewer(900, 500);
    try {
      await openFromSessions(other, sessionId);
      // Fitted to its smaller window once drawn (the snapshot came at the pty's size): smaller both
      // ways (a fit can land in two steps, the width before the height, as the layout settles).
      await expect
        .poll(() => size(other).then((other) => other.cols < big.cols && other.rows < big.rows))
        .toBe(true);
      // Typed into the terminal itself (focused by a click), at its size from then on.
      await other.locator('.term-tab:not([hidden]) .xterm').click();
      const small = await size(other);
      await type(other, 'stty size');
      await expect.poll(() => terminalLines(other)).toContain(`${small.rows} ${small.cols}`);
      // The first viewer sees it was sized elsewhere, and takes the size back by using its terminal.
      await expect
        .poll(() => page.locator('.term-tab:not([hidden]) .size-note').innerText())
        .toContain(`Sized ${small.cols}×${small.rows} by another viewer`);
      await page.locator('.term-tab:not([hidden]) .xterm').click();
      await type(page, 'stty size');
      await expect.poll(() => terminalLines(page)).toContain(`${big.rows} ${big.cols}`);
      await expect.poll(() => page.locator('.term-tab:not([hidden]) .size-note').isHidden()).toBe(true);
      await screenshot(page, 'viewers-3-size-latest');
    } finally {
      await other.close();
    }
  });

  it('a session sized past the snapshot cap by another client opens: the tab takes its size back, or follows the scrollback', async () => {
    const errors: string[] = [];
    page.on('pageerror', (error) => errors.push(error.message));
    const request = (method: string, params: unknown) =>
      page.evaluate(([m, p]) => (window as any).alephConsole.request(m, p), [method, params] as const);
    const spawned = async (args: string[]): Promise<string> => {
      const { sessionId } = (await request('pty.spawn', {
        command: '/bin/bash',
        args,
        cols: 80,
        rows: 24,
        env: { PS1: 'PROMPT$ ' },
      })) as { sessionId: string };
      await request('pty.resize', { sessionId, cols: 10000, rows: 60 }); // 600 000 cells: no snapshot
      await expect.poll(() => page.locator(`.session-list li[data-session="${sessionId}"]`).count()).toBe(1);
      return sessionId;
    };
    // A live one: the tab gives it its own size, then shows its screen and what is typed.
    const live = await spawned(['--norc', '-i']);
    await openFromSessions(page, live);
    await page.locator('.term-tab:not([hidden]) .xterm').click();
    await type(page, 'echo VISIBLE-$((6*7))');
    await expect.poll(() => terminalLines(page)).toContain('VISIBLE-42');
    const fitted = await size(page);
    expect(fitted.cols).toBeLessThan(10000);
    const listed = (await list()).find((session) => session.sessionId === live)!;
    expect({ cols: listed.cols, rows: listed.rows }).toEqual(fitted);
    // One that ended at that size (it can no longer be resized): its scrollback, and its end.
    const ended = await spawned(['--norc', '-c', 'read line; echo TAIL-$((6*7)); exit 3']);
    await request('pty.input', { sessionId: ended, data: btoa('\r') });
    await expect.poll(async () => (await list()).find((s) => s.sessionId === ended)?.exit).not.toBeNull();
    await expect.poll(() => page.locator(`.session-list li[data-session="${ended}"] button`).count()).toBe(1);
    await openFromSessions(page, ended);
    await expect.poll(() => terminalLines(page)).toContain('TAIL-42');
    await expect
      .poll(() => page.locator('.term-tab:not([hidden]) .notice').innerText())
      .toContain('Session ended');
    expect(errors).toEqual([]);
    await screenshot(page, 'viewers-4-too-large');
  });
  it('a terminal query is answered once however many viewers show the session: by the one used last', async () => {
    const sessionId = await newTerminal();
    await waitForPrompt(page);
    // Asks for the cursor position once (DSR 6), then counts the answers that came in 3 s.
    const ask = async (on: Page, mark: string) => {
      await on.locator('.term-tab:not([hidden]) .xterm').click();
      await type(
        on,
        `stty -echo -icanon min 0 time 10; printf '\\033[6n'; sleep 3; a=$(dd bs=4096 count=1 2>/dev/null); stty sane; echo ${mark}=$(printf %s "$a" | tr -cd R | wc -c)`,
      );
      await expect
        .poll(() => terminalLines(on), { timeout: 20_000 })
        .toContainEqual(expect.stringMatching(new RegExp(`^${mark}=\\d+$`)));
      return (await terminalLines(on)).find((line) => line.startsWith(`${mark}=`));
    };
    expect(await ask(page, 'ALONE')).toBe('ALONE=1'); // a sole viewer answers
    const other = await secondViewer(900, 500);
    try {
      await openFromSessions(other, sessionId);
      await expect.poll(() => terminalLines(other)).toContainEqual('ALONE=1');
      expect(await ask(page, 'TWO')).toBe('TWO=1'); // the other page's xterm.js answered too
      // Now the other one is used last: its first key takes the size, and the first viewer knows
      // once it sees that (pty.list, every 2 s: a query in between is still answered by both).
      await other.locator('.term-tab:not([hidden]) .xterm').click();
      await other.keyboard.press('Space');
      await other.keyboard.press('Backspace');
      await expect.poll(() => page.locator('.term-tab:not([hidden]) .size-note').isHidden()).toBe(false);
      expect(await ask(other, 'OTHER')).toBe('OTHER=1');
    } finally {
      await other.close();
    }
  }, 120_000); // three asks of 3 s each, and polls: slow on a loaded machine
});
