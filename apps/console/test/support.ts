// What the browser tests and the bench share: the real server (apps/server's dist/main.js, started
// as a process, never imported) serving the console's dist/ itself, the console URL it prints, and
// Debian's chromium.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';

export const CHROMIUM = '/usr/bin/chromium';
export const SERVER_MAIN = resolve(import.meta.dirname, '../../server/dist/main.js');
export const ARTIFACTS = resolve(import.meta.dirname, '../artifacts');
const START_TIMEOUT_MS = 90_000;

/** Whether the browser suite can run; under CI a missing chromium is a failure, not a skip. */
export function chromiumAvailable(): boolean {
  if (existsSync(CHROMIUM)) return true;
  if (process.env['CI']) throw new Error(`${CHROMIUM} is missing: .ci/run installs Debian's chromium`);
  console.warn(`[console] skipped: ${CHROMIUM} is missing (apt-get install chromium)`);
  return false;
}

export interface ConsoleServer {
  /** The URL the server printed, `#token=` and all. */
  readonly consoleUrl: string;
  readonly origin: string;
  readonly token: string;
  readonly stateDir: string;
  readonly stdout: () => string;
  stop(): Promise<void>;
}

/** What a test's agent talks to: the fake provider's URL, and the run's limits. */
export interface TestAgent {
  readonly baseUrl: string;
  readonly maxIterations: number;
  readonly workdir?: string;
}

/**
 * An aleph.toml for a browser test: the gateway on a free port, no sleep inhibitor, and with `agent`
 * an `openai-compatible` agent on the fake provider; `extra` is appended as is.
 */
export function consoleConfig(agent?: TestAgent, extra = ''): string {
  const lines = ['[gateway]', 'port = 0'];
  if (agent !== undefined) {
    lines.push('[agent]', 'provider = "openai-compatible"', 'model = "fake-coder"');
    lines.push(`base_url = "${agent.baseUrl}"`);
    if (agent.workdir !== undefined) lines.push(`workdir = "${agent.workdir}"`);
    lines.push(`max_iterations = ${agent.maxIterations}`);
  }
  lines.push('[power]', 'inhibit_sleep = false');
  return `${lines.join('\n')}\n${extra}`;
}

export async function startConsoleServer(config: string): Promise<ConsoleServer> {
  const stateDir = mkdtempSync(join(tmpdir(), 'aleph-console-'));
  const configPath = join(stateDir, 'aleph.toml');
  writeFileSync(configPath, config);
  // Terminals run bash with a home of the test's own: the machine's ~/.bashrc (a prompt hook that
  // spawns programs can take seconds per prompt under load) is no part of what is tested here.
  const home = join(stateDir, 'home');
  mkdirSync(home);
  writeFileSync(join(home, '.bashrc'), "PS1='\\W\\$ '\nunset PROMPT_COMMAND\n");
  const child: ChildProcess = spawn(process.execPath, [SERVER_MAIN, '--config', configPath], {
    env: {
      ...process.env,
      ALEPH_STATE_DIR: stateDir,
      ALEPH_LOG_LEVEL: 'warn',
      SHELL: '/bin/bash',
      HOME: home,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<void>((done) => child.once('exit', () => done()));
  // Ready once it printed its config line; a loaded machine can take tens of seconds to get there.
  await new Promise<void>((ready, fail) => {
    const deadline = setTimeout(() => {
      child.kill('SIGKILL');
      fail(new Error(`the server printed no config line in ${START_TIMEOUT_MS} ms:\n${stdout}\n${stderr}`));
    }, START_TIMEOUT_MS);
    const check = () => {
      if (!/^config: /m.test(stdout)) return;
      clearTimeout(deadline);
      child.stdout!.off('data', check);
      ready();
    };
    child.stdout!.on('data', check);
    void exited.then(() => {
      clearTimeout(deadline);
      fail(new Error(`server exited: ${stderr}`));
    });
  });
  const token = /token: (\S+)/.exec(stdout)![1]!;
  const consoleUrl = /console: (\S+)/.exec(stdout)?.[1];
  if (consoleUrl === undefined)
    throw new Error(`the server printed no console URL (is apps/console built?):\n${stdout}`);
  return {
    consoleUrl,
    origin: new URL(consoleUrl).origin,
    token,
    stateDir,
    stdout: () => stdout,
    async stop() {
      if (child.exitCode === null) {
        child.kill('SIGTERM');
        await exited;
      }
      rmSync(stateDir, { recursive: true, force: true });
    },
  };
}

/** Chromium as the issue asks; playwright gives each launch a fresh temporary --user-data-dir. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    timeout: START_TIMEOUT_MS,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

/** Waits until the console is signed in and drawn (its New terminal button is there). */
export async function consoleReady(page: Page): Promise<void> {
  await page.getByRole('button', { name: 'New terminal' }).first().waitFor();
}

/** A new page on `url` (the printed console URL, or another origin's), once the console is ready. */
export async function openConsole(
  on: Browser | BrowserContext,
  url: string,
  viewport = { width: 1280, height: 800 },
): Promise<Page> {
  const page = await on.newPage({ viewport });
  await page.goto(url);
  await consoleReady(page);
  return page;
}

export async function screenshot(page: Page, name: string): Promise<void> {
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`) });
}

/**
 * Waits until the active terminal's cursor sits right after a shell prompt (`$ ` or `# `), so what
 * is typed next reaches the shell's line editor rather than the tty's echo of typed-ahead keys.
 */
export async function waitForPrompt(page: Page, timeout = 60_000): Promise<void> {
  await page.waitForFunction(
    () => {
      const buffer = (window as any).alephConsole?.terminal()?.buffer.active;
      if (buffer === undefined || buffer.type !== 'normal') return false;
      const line = buffer.getLine(buffer.baseY + buffer.cursorY);
      return /[#$] $/.test(line?.translateToString(false, 0, buffer.cursorX) ?? '');
    },
    undefined,
    { timeout, polling: 100 },
  );
}

/** Types a command line at the shell's prompt (waited for) and presses Enter. */
export async function runCommand(page: Page, command: string): Promise<void> {
  await waitForPrompt(page);
  await page.keyboard.type(command);
  await page.keyboard.press('Enter');
}

/** The text xterm holds for the active terminal (its buffer, not pixels). */
export function terminalLines(page: Page, which: 'screen' | 'all' = 'screen'): Promise<string[]> {
  return page.evaluate((w) => (window as any).alephConsole?.lines(w) ?? [], which);
}
