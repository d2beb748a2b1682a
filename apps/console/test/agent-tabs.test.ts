// The tab that follows an agent run's `shell` commands, over a reload, in real Chromium against the
// real server: the tab a reload brings back is still the run's — the run's next command takes its
// place and the run's end closes it — and a run that ended while the page was away does not leave
// its tab behind.
import { mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
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

/** A command that runs until the test writes `file` in the run's directory. */
const waitFor = (name: string, file: string) => `echo ${name}; while [ ! -f ${file} ]; do sleep 0.1; done`;

function byPrompt(messages: Message[]): Reply {
  const prompt = messages.find((message) => message.role === 'user')?.content ?? '';
  const results = messages.filter((message) => message.role === 'tool').length;
  if (prompt.includes('two commands')) {
    if (results === 0) return { call: { name: 'shell', args: { command: waitFor('first-call', 'go-1') } } };
    if (results === 1) return { call: { name: 'shell', args: { command: 'echo second-call' } } };
  }
  if (prompt.includes('while away') && results === 0)
    return { call: { name: 'shell', args: { command: waitFor('away-call', 'go-2') } } };
  return { text: 'Done.\nVERDICT: PASS' };
}

describe.skipIf(!available)('an agent run’s command tab over a reload', () => {
  let browser: Browser;
  let server: ConsoleServer;
  let llm: Awaited<ReturnType<typeof startFakeLlm>>;
  let work: string;
  let page: Page;

  beforeAll(async () => {
    work = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-console-agent-tabs-')));
    llm = await startFakeLlm(byPrompt);
    [server, browser] = await Promise.all([
      startConsoleServer(consoleConfig({ baseUrl: llm.baseUrl, workdir: work, maxIterations: 6 })),
      launchChromium(),
    ]);
    page = await openConsole(browser, server.consoleUrl);
    page.on('dialog', (dialog) => void dialog.accept());
  });

  afterAll(async () => {
    writeFileSync(join(work, 'go-1'), '');
    writeFileSync(join(work, 'go-2'), '');
    await browser?.close();
    await server?.stop();
    await llm?.close();
    rmSync(work, { recursive: true, force: true });
  });

  const agentTabs = () => page.locator('.tab', { hasText: 'agent:' }).count();
  const run = async (prompt: string) => {
    await page.getByLabel('Prompt').fill(prompt);
    await page.getByRole('button', { name: 'Run' }).click();
  };
  const runsDone = (on: Page) =>
    on.evaluate(async () => {
      const runs = (await (window as any).alephConsole.request('agent.list', {})) as { state: string }[];
      return runs.length > 0 && runs.every((listed) => listed.state === 'done');
    });

  it('the reloaded tab gives way to the run’s next command and closes with the run', async () => {
    await run('two commands');
    await expect.poll(agentTabs).toBe(1);
    await page.reload();
    await consoleReady(page);
    await expect.poll(agentTabs).toBe(1); // brought back by the reload
    writeFileSync(join(work, 'go-1'), '');
    await page.locator('.timeline .end', { hasText: 'finished' }).waitFor({ timeout: 60_000 });
    await expect.poll(agentTabs).toBe(0);
  });

  it('a run that ended while the page was away leaves no tab when it comes back', async () => {
    await run('while away');
    await expect.poll(agentTabs).toBe(1);
    await page.goto('about:blank'); // the page is left: it keeps its tabs for its return
    writeFileSync(join(work, 'go-2'), '');
    const other = await openConsole(browser, server.consoleUrl);
    try {
      await expect.poll(() => runsDone(other)).toBe(true);
    } finally {
      await other.close();
    }
    await page.goto(`${server.origin}/`);
    await consoleReady(page);
    // Once the page has reopened its tabs, the run's is not among them (its session stays listed).
    await expect
      .poll(() =>
        page.evaluate(() =>
          (JSON.parse(sessionStorage.getItem('aleph.tabs') ?? '[]') as { label?: string }[]).some((tab) =>
            tab.label?.startsWith('agent:'),
          ),
        ),
      )
      .toBe(false);
    expect(await agentTabs()).toBe(0);
  });
});
