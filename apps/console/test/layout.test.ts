// The console at a desk and on a phone, and a live run as people read it, in real Chromium against
// the real server: the terminal keeps >= 40 columns at 390×844 with the agent panel as a drawer;
// a run of 10 shell calls keeps one tab (closed with the run) and Sessions names the model's
// commands; a fold the user opened stays open while the run goes on; the model's markdown is
// rendered without its script; axe-core finds no violation, signing in too. The README’s pictures
// are taken here (artifacts/, copied to docs/ by hand).
import { mkdtempSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
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
const SHELL_CALLS = 10;
const LONG_REPLY = [
  '# All done',
  '',
  'Ran **ten** commands; see [the docs](https://example.com/docs) and [this](javascript:alert(1)).',
  '',
  '<img src=x onerror="window.injected=1"><script>window.injected=2</script>',
  '',
  ...Array.from({ length: 2000 }, (_, n) => `- item ${n}: ${'lorem ipsum '.repeat(4)}`),
  '',
  'VERDICT: PASS',
].join('\n');

/** A write, an edit, then SHELL_CALLS shell commands (each a little slow), then a long markdown reply. */
function tenCalls(messages: Message[]): Reply {
  const done = messages.filter((message) => message.role === 'tool').length;
  if (done === 0)
    return { call: { name: 'write_file', args: { path: 'notes.md', content: 'one\ntwo\nthree\n' } } };
  if (done === 1)
    return {
      text: 'Editing the second line.',
      call: {
        name: 'edit_file',
        args: { path: 'notes.md', old_string: 'two\n', new_string: 'TWO, edited\n' },
      },
    };
  const shell = done - 2;
  if (shell < SHELL_CALLS)
    return { call: { name: 'shell', args: { command: `sleep 0.4; echo model-call-${shell + 1}` } } };
  return { text: LONG_REPLY };
}

describe.skipIf(!available)('the console at every width, and a run people can read', () => {
  let browser: Browser;
  let context: BrowserContext;
  let server: ConsoleServer;
  let llm: Awaited<ReturnType<typeof startFakeLlm>>;
  let work: string;
  let page: Page;

  beforeAll(async () => {
    work = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-console-layout-')));
    llm = await startFakeLlm(tenCalls);
    [server, browser] = await Promise.all([
      startConsoleServer(consoleConfig({ baseUrl: llm.baseUrl, workdir: work, maxIterations: 20 })),
      launchChromium(),
    ]);
    // bypassCSP only so the test can inject axe-core; the page's own CSP is checked elsewhere.
    context = await browser.newContext({ viewport: { width: 1280, height: 800 }, bypassCSP: true });
    page = await openConsole(context, server.consoleUrl);
    page.on('dialog', (dialog) => void dialog.accept());
  });

  afterAll(async () => {
    await browser?.close();
    await server?.stop();
    await llm?.close();
    rmSync(work, { recursive: true, force: true });
  });

  const cols = () => page.evaluate(() => (window as any).alephConsole.size().cols as number);

  it('a run of 10 shell calls: one tab at a time, closed with the run; opened folds stay open; Sessions names the commands', async () => {
    await page.keyboard.press('Alt+KeyN');
    await page.locator('.term-tab:not([hidden]) .xterm').waitFor();
    await page.getByLabel('Prompt').fill('run ten commands');
    await page.getByRole('button', { name: 'Run' }).click();
    const timeline = page.locator('.timeline');
    // Open the edit's details as soon as it is there, and scroll the result of the first call.
    const edit = timeline.locator('.tool', { hasText: 'edit_file' }).locator('details');
    await edit.waitFor({ timeout: 60_000 });
    await edit.locator('summary').click();
    const eventsAtOpen = await timeline.locator('li').count();
    let mostRunTabs = 0;
    const agentTabs = page.locator('.tab', { hasText: 'agent:' });
    while ((await timeline.locator('.end').count()) === 0) {
      mostRunTabs = Math.max(mostRunTabs, await agentTabs.count());
      expect(await edit.evaluate((details) => (details as HTMLDetailsElement).open)).toBe(true);
      await new Promise((done) => setTimeout(done, 100));
    }
    expect(await timeline.locator('li').count()).toBeGreaterThanOrEqual(eventsAtOpen + 20);
    expect(await edit.evaluate((details) => (details as HTMLDetailsElement).open)).toBe(true);
    expect(mostRunTabs).toBe(1);
    await expect.poll(() => agentTabs.count()).toBe(0); // closed with the run
    // The edit is a diff; the shell calls are labelled with the model's commands.
    expect(await edit.locator('.diff .removed').innerText()).toContain('- two');
    expect(await edit.locator('.diff .added').innerText()).toContain('+ TWO, edited');
    const summaries = await timeline.locator('.tool summary').allInnerTexts();
    expect(summaries.filter((text) => /^✓ shell sleep 0\.4; echo model-call-\d+$/.test(text))).toHaveLength(
      SHELL_CALLS,
    );
    await expect
      .poll(() => page.locator('.session-list .command').allInnerTexts())
      .toEqual(expect.arrayContaining([`agent: sleep 0.4; echo model-call-${SHELL_CALLS}`]));
    const labels = await page.locator('.session-list .command').allInnerTexts();
    expect(labels.some((label) => label.includes('filter=') || label.includes('bwrap'))).toBe(false);
    expect(labels).toContain('bash'); // the user's shell, by its program
    // The end line: turns, time, tokens.
    await expect
      .poll(() => timeline.locator('.end').innerText())
      .toMatch(/finished: the model stopped — 13 turns · [\d.]+ s · [\d,]+ tokens/);
  });

  it('renders the model’s markdown without its script, folded: the panel stays short', async () => {
    const reply = page.locator('.timeline .assistant', { hasText: 'All done' });
    expect(await reply.locator('h1').innerText()).toBe('All done');
    expect(await reply.locator('a[href="https://example.com/docs"]').getAttribute('rel')).toContain(
      'noopener',
    );
    expect(await reply.locator('a', { hasText: 'this' }).getAttribute('href')).toBeNull();
    expect(await reply.locator('img, script').count()).toBe(0);
    expect(await page.evaluate(() => (window as any).injected)).toBeUndefined();
    const height = await reply.evaluate((item) => item.getBoundingClientRect().height);
    expect(height).toBeLessThan(600);
    await reply.getByRole('button', { name: /^Show more/ }).click();
    expect(await reply.evaluate((item) => item.getBoundingClientRect().height)).toBeGreaterThan(5000);
    await reply.getByRole('button', { name: 'Show less' }).click();
  });

  it('at 1280×800 and at 390×844 (a phone): the terminal keeps >= 40 columns; the agent panel is a drawer', async () => {
    await page.getByRole('tab').first().click();
    await runCommand(page, `cd ${work} && clear && ls && cat notes.md && echo https://example.com/aleph`);
    await expect.poll(() => terminalLines(page)).toContain('TWO, edited');
    await waitForPrompt(page);
    await screenshot(page, 'console-1280x800'); // the README's pictures (docs/) are copies of these
    expect(await cols()).toBeGreaterThanOrEqual(80);

    await page.setViewportSize({ width: 390, height: 844 });
    await expect.poll(cols).toBeGreaterThanOrEqual(40);
    const side = page.locator('aside.side');
    await expect.poll(() => side.isVisible()).toBe(false);
    const terminalBox = await page.locator('.term-tab:not([hidden])').boundingBox();
    expect(terminalBox!.width).toBeGreaterThan(370);
    await runCommand(page, 'clear; stty size');
    const size = await page.evaluate(() => (window as any).alephConsole.size());
    await expect.poll(() => terminalLines(page)).toContain(`${size.rows} ${size.cols}`);
    await waitForPrompt(page);
    await screenshot(page, 'console-390x844');
    // From the terminal, Alt+A opens the drawer with the prompt focused: what is typed next is the
    // agent's, not the shell's (the drawer slides in, yet takes the focus at once).
    await page.locator('.term-tab:not([hidden]) .xterm').click();
    await page.keyboard.press('Alt+KeyA');
    await page.keyboard.type('for the agent');
    await expect.poll(() => side.isVisible()).toBe(true);
    const prompt = page.locator('#prompt');
    expect(await prompt.inputValue()).toBe('for the agent');
    expect(await terminalLines(page)).not.toContainEqual(expect.stringContaining('for the agent'));
    await prompt.fill('');
    await page.keyboard.press('Escape');
    await expect.poll(() => side.isVisible()).toBe(false);
    await page.getByRole('button', { name: 'Agent' }).click();
    await expect.poll(() => side.isVisible()).toBe(true);
    expect(await prompt.evaluate((element) => element === document.activeElement)).toBe(true);
    await screenshot(page, 'layout-phone-drawer');
    await page.keyboard.press('Escape');
    await expect.poll(() => side.isVisible()).toBe(false);
    await page.setViewportSize({ width: 1280, height: 800 });
  });

  it('axe-core reports no violation, at a desk, on a phone, with the drawer open, and signing in', async () => {
    const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
    const audit = async (on: Page) => {
      await on.addScriptTag({ content: axeSource });
      return on.evaluate(async () => {
        const result = await (window as any).axe.run(document, { resultTypes: ['violations'] });
        return (result.violations as { id: string; impact: string; nodes: { target: string[] }[] }[]).map(
          (violation) =>
            `${violation.impact} ${violation.id}: ${violation.nodes.map((node) => node.target.join(' ')).join(', ')}`,
        );
      });
    };
    expect(await audit(page)).toEqual([]);
    await page.setViewportSize({ width: 390, height: 844 });
    await page.getByRole('button', { name: 'Agent' }).click();
    expect(await audit(page)).toEqual([]);
    await page.keyboard.press('Escape');
    await page.setViewportSize({ width: 1280, height: 800 });
    // A page without the token: the sign-in form, then its answer to a wrong one.
    const signIn = await context.newPage();
    try {
      await signIn.goto(`${server.origin}/`);
      await signIn.getByLabel('Token').waitFor();
      expect(await audit(signIn)).toEqual([]);
      await signIn.getByLabel('Token').fill('not-the-token');
      await signIn.getByRole('button', { name: 'Sign in' }).click();
      await signIn.getByRole('alert').waitFor();
      expect(await audit(signIn)).toEqual([]);
    } finally {
      await signIn.close();
    }
  });
});
