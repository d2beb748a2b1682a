// What the browser tests and the bench share: the real server (apps/server's dist/main.js, started
// as a process, never imported), the console URL it prints, Debian's chromium, and a fake LLM that
// speaks the OpenAI chat-completions wire.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { extname, join, resolve } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';

export const CHROMIUM = '/usr/bin/chromium';
export const SERVER_MAIN = resolve(import.meta.dirname, '../../server/dist/main.js');
export const DIST = resolve(import.meta.dirname, '../dist');
export const ARTIFACTS = resolve(import.meta.dirname, '../artifacts');

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

/** The CSP the console is built for (xterm.js injects <style> elements, hence style-src inline). */
export const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript',
  '.css': 'text/css',
  '.svg': 'image/svg+xml',
};

/**
 * Until the gateway serves static files itself: dist/ from a local http server with the console's
 * CSP, and `/ws` and `/healthz` piped byte for byte to the gateway (so the socket is same-origin).
 */
async function serveDist(gatewayPort: number): Promise<{ origin: string; close(): Promise<void> }> {
  const pipe = (socket: Socket, head: string): void => {
    socket.setNoDelay(true);
    // No Nagle on either leg: a keystroke's frame must not wait for the peer's delayed ACK (40 ms).
    const upstream = connect({ port: gatewayPort, host: '127.0.0.1', noDelay: true }, () => {
      upstream.write(head);
      socket.pipe(upstream).pipe(socket);
    });
    upstream.on('error', () => socket.destroy());
    socket.on('error', () => upstream.destroy());
  };
  const rawHead = (request: IncomingMessage): string =>
    `${request.method} ${request.url} HTTP/1.1\r\n${request.rawHeaders
      .map((value, index) => (index % 2 === 0 ? `${value}: ` : `${value}\r\n`))
      .join('')}\r\n`;
  const server: Server = createServer((request, response) => {
    const path = (request.url ?? '/').split(/[?#]/)[0]!;
    if (path === '/healthz') {
      response.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
      return;
    }
    const file = resolve(DIST, `.${path === '/' ? '/index.html' : path}`);
    if (!file.startsWith(DIST) || !existsSync(file)) {
      response.writeHead(404).end();
      return;
    }
    response
      .writeHead(200, {
        'content-type': TYPES[extname(file)] ?? 'application/octet-stream',
        'content-security-policy': CSP,
      })
      .end(readFileSync(file));
  });
  server.on('upgrade', (request, socket) => pipe(socket as Socket, rawHead(request)));
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise((done) => server.close(() => done())),
  };
}

export async function startConsoleServer(config: string): Promise<ConsoleServer> {
  const stateDir = mkdtempSync(join(tmpdir(), 'aleph-console-'));
  const configPath = join(stateDir, 'aleph.toml');
  writeFileSync(configPath, config);
  const child: ChildProcess = spawn(process.execPath, [SERVER_MAIN, '--config', configPath], {
    env: { ...process.env, ALEPH_STATE_DIR: stateDir, ALEPH_LOG_LEVEL: 'warn', SHELL: '/bin/bash' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<void>((done) => child.once('exit', () => done()));
  await new Promise<void>((ready, fail) => {
    const check = setInterval(() => {
      if (/^config: /m.test(stdout)) ready();
    }, 20);
    void exited.then(() => fail(new Error(`server exited: ${stderr}`)));
    void Promise.race([exited, new Promise((done) => setTimeout(done, 30_000))]).then(() =>
      clearInterval(check),
    );
  }).finally(() => undefined);
  const token = /token: (\S+)/.exec(stdout)![1]!;
  const printed = /console: (\S+)/.exec(stdout)?.[1];
  let fallback: Awaited<ReturnType<typeof serveDist>> | undefined;
  if (printed === undefined)
    fallback = await serveDist(Number(/listening on ws:\/\/[^:]+:(\d+)/.exec(stdout)![1]));
  const consoleUrl = printed ?? `${fallback!.origin}/#token=${encodeURIComponent(token)}`;
  return {
    consoleUrl,
    origin: new URL(consoleUrl).origin,
    token,
    stateDir,
    stdout: () => stdout,
    async stop() {
      await fallback?.close();
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
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

export async function screenshot(page: Page, name: string): Promise<void> {
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`) });
}

/** The text xterm holds for the active terminal (its buffer, not pixels). */
export function terminalLines(page: Page, which: 'screen' | 'all' = 'screen'): Promise<string[]> {
  return page.evaluate((w) => (window as any).alephConsole?.lines(w) ?? [], which);
}
