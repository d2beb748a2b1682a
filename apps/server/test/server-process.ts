// Starts the real server (dist/main.js) as a child process on a free port with a temp config and
// state dir, and reads the URL and token it prints.
import { spawn, type ChildProcess } from 'node:child_process';
import { chownSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

export const MAIN = resolve(import.meta.dirname, '../dist/main.js');
export const CLI = resolve(import.meta.dirname, '../dist/cli.js');

export interface ServerProcess {
  readonly url: string;
  readonly token: string;
  readonly child: ChildProcess;
  readonly stateDir: string;
  readonly stdout: () => string;
  readonly stderr: () => string;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export async function startServerProcess(
  config: string,
  env: NodeJS.ProcessEnv = {},
  /** Where the config file is written (default: the state dir). */
  configDir?: string,
  /** A file the server inherits open on its fd 300, not close-on-exec (as a launcher may leak one). */
  inheritedFile?: string,
  /** Run the server as this user (this process being root): it owns the state dir and the config file. */
  user?: { readonly uid: number; readonly gid: number },
): Promise<ServerProcess> {
  const stateDir = mkdtempSync(join(tmpdir(), 'aleph-server-state-'));
  const configPath = join(configDir ?? stateDir, 'aleph.toml');
  writeFileSync(configPath, config);
  if (user !== undefined) for (const path of [stateDir, configPath]) chownSync(path, user.uid, user.gid);
  const argv = [process.execPath, MAIN, '--config', configPath];
  const [file, ...args] =
    inheritedFile === undefined ? argv : ['/bin/bash', '-c', 'exec "$@" 300>>"$0"', inheritedFile, ...argv];
  const child = spawn(file!, args, {
    env: { ...process.env, ...env, ALEPH_STATE_DIR: stateDir, ALEPH_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'pipe'],
    ...user,
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | null>((done) => child.once('exit', (code) => done(code)));
  await new Promise<void>((ready, fail) => {
    const check = setInterval(() => {
      if (/token: \S+/.test(stdout)) {
        clearInterval(check);
        ready();
      }
    }, 20);
    void exited.then((code) => {
      clearInterval(check);
      fail(new Error(`server exited with ${code}: ${stderr}`));
    });
  });
  return {
    url: /listening on (\S+)/.exec(stdout)![1]!,
    token: /token: (\S+)/.exec(stdout)![1]!,
    child,
    stateDir,
    stdout: () => stdout,
    stderr: () => stderr,
    async stop(signal = 'SIGTERM') {
      if (child.exitCode !== null) return child.exitCode;
      child.kill(signal);
      return exited;
    },
  };
}

/**
 * The aleph.toml of one node of a test cluster: the gateway on a free port with the cluster's
 * shared token, no sandbox, no sleep inhibitor, `agent` (a whole `[agent]` table) if given, and
 * `[cluster]` last, so keys appended to the text go into it.
 */
export function clusterNodeConfig(options: {
  readonly token: string;
  readonly natsUrl: string;
  readonly name: string;
  readonly node: string;
  readonly leaseTtlSecs: number;
  readonly agent?: string;
}): string {
  return `
[gateway]
port = 0
token = "${options.token}"
${options.agent ?? ''}
[sandbox]
mode = "off"

[power]
inhibit_sleep = false

[cluster]
servers = ["${options.natsUrl}"]
name = "${options.name}"
node = "${options.node}"
lease_ttl_secs = ${options.leaseTtlSecs}
`;
}

export function runToExit(
  args: string[],
  env: NodeJS.ProcessEnv = {},
  options: { cwd?: string } = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, args, {
      ...options,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('exit', (code) => done({ code, stdout, stderr }));
  });
}

export { processAlive as alive } from '@aleph/pty/testing';
