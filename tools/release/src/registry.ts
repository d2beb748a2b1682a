// A throw-away npm registry for the release test: Verdaccio (the devDependency of this private
// workspace) on a free loopback port with its storage in a temp dir, publishing `@aleph/*` itself
// and proxying everything else to the registry npm is configured with. Invariant: `stop()` ends the
// server's process and nothing of it remains outside `dir`.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';

export interface Registry {
  readonly url: string;
  /** The versions of `name` the registry holds, sorted ([] when it has none). */
  versions(name: string): Promise<string[]>;
  readonly token: string;
  /** An npm user config that points at the registry with its token: `npm_config_userconfig`. */
  readonly userconfig: string;
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
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

export async function startRegistry(dir: string): Promise<Registry> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}/`;
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
  const child = spawn(process.execPath, [bin, '--config', config, '--listen', `127.0.0.1:${port}`], {
    cwd: dir,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output = (output + chunk.toString()).slice(-20_000)));
  child.stderr.on('data', (chunk: Buffer) => (output = (output + chunk.toString()).slice(-20_000)));
  const stop = async (): Promise<void> => {
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
