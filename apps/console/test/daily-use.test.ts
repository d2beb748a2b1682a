// One console page kept open as a user keeps it all day, in real Chromium against the real server:
// several tabs, a flood, a program's title, the Alt keys given to a program and back, tabs closed,
// a reload, and then a new tab still gets what is typed into it — at once after Alt+N or a click
// on New terminal, before the server has answered, never in the tab shown before.
import type { Browser, Page } from 'playwright-core';
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

describe.skipIf(!available)('a console page kept open all day', () => {
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

  const tabs = () => page.getByRole('tab').count();
  const shownSession = () =>
    page.evaluate(() => document.querySelector('.term-tab:not([hidden])')?.getAttribute('data-session'));
  /** Every line of a tab's terminal, by its session, whether it is the one shown or not. */
  const linesOf = (sessionId: string) =>
    page.evaluate((id) => (window as any).alephConsole.linesOf(id) as string[] | undefined, sessionId);

  it('a new tab takes the keys typed right after Alt+N or New terminal, after a day of use', async () => {
    // Morning: a tab, a command.
    await page.keyboard.press('Alt+KeyN');
    await expect.poll(tabs).toBe(1);
    await runCommand(page, 'echo morning-""tab');
    await expect.poll(() => terminalLines(page)).toContain('morning-tab');
    const first = (await shownSession())!;
    // A second tab whose program sets its title; its Alt keys given to a program, then back.
    await page.keyboard.press('Alt+KeyN');
    await expect.poll(tabs).toBe(2);
    await expect.poll(shownSession).not.toBe(first);
    await runCommand(page, `printf '\\033]2;%s\\007' 'watcher'`);
    await expect.poll(() => page.getByRole('tab', { selected: true }).innerText()).toContain('watcher');
    await page.getByLabel(/Alt keys/).uncheck();
    await page.locator('.term-tab:not([hidden]) .xterm').click();
    await runCommand(page, 'echo cat-""ready; cat -v');
    await expect.poll(() => terminalLines(page)).toContain('cat-ready');
    await page.keyboard.press('Alt+KeyW');
    await page.keyboard.press('Enter');
    await expect.poll(() => terminalLines(page)).toContain('^[w');
    await page.keyboard.press('Control+KeyD');
    await page.getByLabel(/Alt keys/).check();
    // A third tab with a flood, closed with Alt+W.
    await page.locator('.term-tab:not([hidden]) .xterm').click();
    await page.keyboard.press('Alt+KeyN');
    await expect.poll(tabs).toBe(3);
    await runCommand(page, 'seq 1 20000; echo flood-""done');
    await expect.poll(() => terminalLines(page)).toContain('flood-done');
    await page.keyboard.press('Alt+KeyW');
    await expect.poll(tabs).toBe(2);
    // Lunch: a reload (asked first), back on the first tab, a program printing a huge repeat count.
    page.once('dialog', (dialog) => void dialog.accept());
    await page.reload();
    await consoleReady(page);
    await expect.poll(tabs).toBe(2);
    await page.keyboard.press('Alt+Digit1');
    await expect.poll(shownSession).toBe(first);
    await page.locator('.term-tab:not([hidden]) .xterm').click();
    await runCommand(page, `clear; printf 'a\\033[2147483647b'; echo; echo repeat-""end`);
    await expect.poll(() => terminalLines(page)).toContain('repeat-end');
    // The second tab closed with its × button.
    await page.getByRole('button', { name: /^Close tab watcher/ }).click();
    await expect.poll(tabs).toBe(1);
    await page.locator('.term-tab:not([hidden]) .xterm').click();
    await waitForPrompt(page);

    // Evening: Alt+N and the command typed at once, as a user does, not waiting for the tab.
    await page.keyboard.press('Alt+KeyN');
    await page.keyboard.type('echo evening-""tab');
    await page.keyboard.press('Enter');
    await expect.poll(tabs).toBe(2);
    await expect.poll(shownSession).not.toBe(first);
    await expect.poll(() => terminalLines(page)).toContain('evening-tab');
    const evening = (await shownSession())!;
    // The tab shown before got none of it.
    expect((await linesOf(first))!.join('\n')).not.toContain('evening');
    // The same with the mouse: New terminal, then typing at once.
    await page.getByRole('button', { name: 'New terminal' }).first().click();
    await page.keyboard.type('echo clicked-""tab');
    await page.keyboard.press('Enter');
    await expect.poll(tabs).toBe(3);
    await expect.poll(() => terminalLines(page)).toContain('clicked-tab');
    expect((await linesOf(evening))!.join('\n')).not.toContain('clicked');
    await runCommand(page, 'echo still-""answering');
    await expect.poll(() => terminalLines(page)).toContain('still-answering');
  });
});
