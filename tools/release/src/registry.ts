// A throw-away npm registry for the release test: Verdaccio (the devDependency of this private
// workspace) on a free port of a loopback address of its own, with its storage in a temp dir,
// publishing `@aleph/*` itself and proxying everything else to the registry npm is configured with.
// Invariants: `stop()` ends the server's process and nothing of it remains outside `dir`; the server
// also ends when the process that started it is gone, however it ended (it exits when its stdin, a
// pipe from this process, closes); its URL (a random loopback address) is, all but surely, one no
// earlier run used, so no npm cache entry of an earlier run can stand in for this run's packages.
// A server that exits before `stop()` says so on stderr, with its last output.
import { randomInt } from 'node:crypto';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';

export interface Registry {
  readonly url: string;
  /** The versions of `name` the registry holds, sorted ([] when it has none). */
  versions(name: string): Promise<string[]>;
  readonly token: string;
  /** An npm user config that points at the registry with its token: `npm_config_userconfig`. */
  readonly userconfig: string;
  stop(): Promise<void>;
}

async function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, host, () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address !== null
          ? resolve(address.port)
          : reject(new Error('no port')),
      );
    });
  });
}

function upstream(): string {
  const configured = spawnSync('npm', ['config', 'get', 'registry'], { encoding: 'utf8' }).stdout.trim();
  return configured.startsWith('http') ? configured : 'https://registry.npmjs.org/';
}

async function waitUntilUp(url: string, child: ChildProcess, log: () => string): Promise<void> {
  const deadline = Date.now() + 180_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`verdaccio exited (${child.exitCode}):\n${log()}`);
    try {
      if ((await fetch(`${url}-/ping`)).ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(`verdaccio did not answer within 180 s:\n${log()}`);
}

/**
 * A GET on a connection of its own (no agent): a pooled keep-alive socket that the registry closed
 * while idle (during a long publish) fails the next request with EPIPE.
 */
function getJson(url: string): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { agent: false, headers: { accept: 'application/json' } }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('error', reject);
      response.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        try {
          resolve({ status: response.statusCode ?? 0, body: text === '' ? undefined : JSON.parse(text) });
        } catch {
          reject(new Error(`${url}: ${response.statusCode} and not JSON: ${text.slice(0, 200)}`));
        }
      });
    });
    req.setTimeout(60_000, () => req.destroy(new Error(`${url}: no answer within 60 s`)));
    req.on('error', reject);
    req.end();
  });
}

/**
 * Loaded into the server (`--import`): its main thread exits when stdin, a pipe from this process,
 * ends. Worker threads (the logger's) load it too and have a stdin of their own that ends at once.
 */
const EXIT_WITH_PARENT = `import { isMainThread } from 'node:worker_threads';
if (isMainThread) {
  process.stdin.on('end', () => process.exit(0));
  process.stdin.on('error', () => process.exit(0));
  process.stdin.resume();
}
`;

export async function startRegistry(dir: string): Promise<Registry> {
  // 127.0.0.0/8 is loopback: an address of its own for this run (npm caches by URL).
  const host = `127.${randomInt(1, 255)}.${randomInt(0, 256)}.${randomInt(1, 255)}`;
  const port = await freePort(host);
  const url = `http://${host}:${port}/`;
  const config = join(dir, 'verdaccio.yaml');
  writeFileSync(
    config,
    [
      `storage: ${join(dir, 'storage')}`,
      'auth:',
      '  htpasswd:',
      `    file: ${join(dir, 'htpasswd')}`,
      '    max_users: 10',
      'uplinks:',
      '  upstream:',
      `    url: ${upstream()}`,
      '    timeout: 120s',
      'packages:',
      "  '@aleph/*':",
      '    access: $all',
      '    publish: $authenticated',
      "  '**':",
      '    access: $all',
      '    proxy: upstream',
      'web:',
      '  enable: false',
      'log: { type: stdout, format: pretty, level: warn }',
      '',
    ].join('\n'),
  );
  const bin = join(
    dirname(createRequire(import.meta.url).resolve('verdaccio/package.json')),
    'bin/verdaccio',
  );
  const exitWithParent = join(dir, 'exit-with-parent.mjs');
  writeFileSync(exitWithParent, EXIT_WITH_PARENT);
  const child = spawn(
    process.execPath,
    ['--import', pathToFileURL(exitWithParent).href, bin, '--config', config, '--listen', `${host}:${port}`],
    { cwd: dir, stdio: ['pipe', 'pipe', 'pipe'] },
  );
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output = (output + chunk.toString()).slice(-20_000)));
  child.stderr.on('data', (chunk: Buffer) => (output = (output + chunk.toString()).slice(-20_000)));
  let stopping = false;
  child.once('exit', (code, signal) => {
    if (!stopping) {
      process.stderr.write(`verdaccio exited unexpectedly (${code ?? signal}):\n${output.slice(-4000)}\n`);
    }
  });
  const stop = async (): Promise<void> => {
    stopping = true;
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  };
  try {
    await waitUntilUp(url, child, () => output);
    const response = await fetch(`${url}-/user/org.couchdb.user:aleph`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'aleph', password: 'release-test-only' }),
    });
    const { token } = (await response.json()) as { token?: string };
    if (!response.ok || token === undefined)
      throw new Error(`could not add a registry user: ${response.status}`);
    const userconfig = join(dir, 'npmrc');
    const host = url.replace(/^http:/, '');
    writeFileSync(userconfig, `registry=${url}\n${host}:_authToken=${token}\n`);
    const versions = async (name: string): Promise<string[]> => {
      const { status, body } = await getJson(`${url}${name.replace('/', '%2f')}`);
      if (status === 404) return [];
      if (status !== 200) throw new Error(`${name}: the registry answered ${status}`);
      return Object.keys((body as { versions?: Record<string, unknown> }).versions ?? {}).sort();
    };
    return { url, token, userconfig, versions, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}
