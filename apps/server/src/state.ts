// Where the server keeps its state: the token it generated, the session logs, and server.json
// (url + token) for the `aleph` CLI. The platform's state directory unless configured.
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

export function stateDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env['ALEPH_STATE_DIR']) return env['ALEPH_STATE_DIR'];
  switch (process.platform) {
    case 'darwin':
      return join(homedir(), 'Library', 'Application Support', 'aleph');
    case 'win32':
      return join(env['LOCALAPPDATA'] ?? join(homedir(), 'AppData', 'Local'), 'aleph');
    default:
      return join(env['XDG_STATE_HOME'] ?? join(homedir(), '.local', 'state'), 'aleph');
  }
}

/**
 * The state dir, made if absent and kept private (0700): it holds the token and every session's
 * log (prompts, instruction files, tool output).
 */
export function makeStateDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  try {
    chmodSync(dir, 0o700);
  } catch {
    // another user's folder: its own modes stand; what the server writes there is 0600 anyway
  }
}

function writePrivate(path: string, content: string): void {
  writeFileSync(path, content, { mode: 0o600 });
  chmodSync(path, 0o600);
}

/** The configured token, else the one generated on an earlier start, else a new one (stored). */
export function resolveToken(
  dir: string,
  configured: string | undefined,
): { token: string; generated: boolean } {
  if (configured !== undefined) return { token: configured, generated: false };
  makeStateDir(dir);
  const file = join(dir, 'token');
  if (existsSync(file)) {
    const token = readFileSync(file, 'utf8').trim();
    if (token.length >= 16) return { token, generated: false };
  }
  const token = randomBytes(24).toString('base64url');
  writePrivate(file, `${token}\n`);
  return { token, generated: true };
}

export interface ServerInfo {
  readonly url: string;
  readonly token: string;
  readonly pid: number;
}

export function writeServerInfo(dir: string, info: ServerInfo): void {
  makeStateDir(dir);
  writePrivate(join(dir, 'server.json'), `${JSON.stringify(info)}\n`);
}

export function readServerInfo(dir: string): ServerInfo | undefined {
  try {
    return JSON.parse(readFileSync(join(dir, 'server.json'), 'utf8')) as ServerInfo;
  } catch {
    return undefined;
  }
}

/**
 * The directory the user ran the command in: pnpm runs a package's scripts in the package's folder
 * and passes the user's as INIT_CWD (`pnpm start` in the repository root, `pnpm -C <repo> aleph`).
 */
export function invocationDir(env: NodeJS.ProcessEnv = process.env): string {
  return env['INIT_CWD'] || process.cwd();
}

/** This package's version (its package.json), for `--version`. */
export function packageVersion(): string {
  const manifest = readFileSync(new URL('../package.json', import.meta.url), 'utf8');
  return (JSON.parse(manifest) as { version: string }).version;
}
