// A Sandbox wraps a command the model chose into one that runs confined by a policy: bubblewrap on
// Linux, sandbox-exec on macOS, or `none`. The mode decides what happens without a working
// backend: `required` throws (SandboxError), `auto` runs unconfined and says why, `off` never
// confines. Every backend, `none` included, strips the server's secrets from the environment.
import { spawnSync } from 'node:child_process';
import { accessSync, constants, mkdtempSync, realpathSync, rmSync, statSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { SandboxError } from './errors.js';
import { baseArgs, bubblewrapArgs, bubblewrapCommand, projectConfigArgs } from './internal/bubblewrap.js';
import { unixSocketFilterFile } from './internal/seccomp.js';
import { seatbeltProfile } from './internal/seatbelt.js';
import {
  isWithin,
  resolvePolicy,
  sandboxEnv,
  scrubEnv,
  type DeniedPath,
  type ResolvedPolicy,
  unsetNames,
  type SandboxPolicy,
} from './policy.js';

export interface SandboxCommand {
  readonly file: string;
  readonly args: readonly string[];
  readonly cwd: string;
  readonly env: Readonly<Record<string, string | undefined>>;
  /**
   * Files it may read, read-only, though a `denyRead` dir (or the private /tmp) hides them: the
   * caller's, never the model's (a hook's transcript in the state dir). Only regular files, and
   * none under the protected home paths or itself denied; others are left hidden.
   */
  readonly readable?: readonly string[];
}

export interface WrappedCommand {
  readonly file: string;
  readonly args: readonly string[];
  readonly cwd: string;
  /** The environment to spawn with. A spawner that merges it over its own is safe: the backend
   * unsets every other name it can know of (this process's and the command's). */
  readonly env: Record<string, string>;
}

export type SandboxBackend = 'bubblewrap' | 'sandbox-exec' | 'none';

export interface Sandbox {
  readonly backend: SandboxBackend;
  /** Throws SandboxError when the cwd is missing or denied. */
  wrap(command: SandboxCommand): WrappedCommand;
}

export type SandboxMode = 'auto' | 'required' | 'off';

export interface ConfiguredSandbox extends Sandbox {
  readonly mode: SandboxMode;
  /** Why commands run unconfined, when `backend` is `none`. */
  readonly unconfinedReason?: string;
  /**
   * The policy's denied paths, resolved (real paths), whatever the backend: for what confines by
   * path in-process (file tools), which must refuse them too.
   */
  readonly deniedPaths: readonly DeniedPath[];
  /** The policy's `readOnly` files that exist (real paths): the file tools refuse to write them too. */
  readonly readOnlyPaths: readonly string[];
}

export type SandboxProbe =
  | { readonly kind: 'available'; readonly backend: 'bubblewrap' | 'sandbox-exec'; readonly path: string }
  | { readonly kind: 'missing'; readonly reason: string }
  | { readonly kind: 'failed'; readonly reason: string };

export interface ProbeOptions {
  readonly platform?: NodeJS.Platform;
  /** The bwrap to use; default: `bwrap` on `PATH`. */
  readonly bwrapPath?: string;
  /** This process's environment (for `PATH`, and the names a spawner may merge in); default: process.env. */
  readonly env?: Readonly<Record<string, string | undefined>>;
}

export interface CreateSandboxOptions extends ProbeOptions {
  readonly mode: SandboxMode;
  /** Where `~` and the protected home paths resolve; default: the user's home. */
  readonly home?: string;
}

const SANDBOX_EXEC = '/usr/bin/sandbox-exec';

export const INSTALL_HINT =
  'install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)';

function onPath(name: string, env: Readonly<Record<string, string | undefined>>): string | undefined {
  for (const dir of (env['PATH'] ?? '').split(delimiter)) {
    if (dir === '') continue;
    try {
      accessSync(join(dir, name), constants.X_OK);
      return join(dir, name);
    } catch {
      // not here
    }
  }
  return undefined;
}

/** Whether this platform has a backend that works: runs one `true` under bwrap to find out. */
export function probeSandbox(options: ProbeOptions = {}): SandboxProbe {
  const platform = options.platform ?? process.platform;
  if (platform === 'darwin') {
    try {
      accessSync(SANDBOX_EXEC, constants.X_OK);
      return { kind: 'available', backend: 'sandbox-exec', path: SANDBOX_EXEC };
    } catch {
      return { kind: 'missing', reason: `${SANDBOX_EXEC} not found` };
    }
  }
  if (platform !== 'linux') return { kind: 'missing', reason: `no sandbox backend on ${platform}` };
  const path = options.bwrapPath ?? onPath('bwrap', options.env ?? process.env);
  if (path === undefined) return { kind: 'missing', reason: `bwrap not found on PATH: ${INSTALL_HINT}` };
  const failure = runBwrap(
    path,
    { file: path, args: [...baseArgs('off'), '--', 'true'] },
    'fails to start a sandbox',
  );
  return failure ?? { kind: 'available', backend: 'bubblewrap', path };
}

/** Runs bwrap once; a failure as a probe result naming its first line of stderr. */
function runBwrap(
  path: string,
  command: { file: string; args: readonly string[] },
  what: string,
): SandboxProbe | undefined {
  const result = spawnSync(command.file, command.args, {
    encoding: 'utf8',
    timeout: 10_000,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  if (result.error !== undefined) {
    return { kind: 'failed', reason: `${path} could not run: ${result.error.message}` };
  }
  if (result.status !== 0) {
    const first = result.stderr.split('\n').find((line) => line.trim() !== '') ?? `exit ${result.status}`;
    return { kind: 'failed', reason: `${path} ${what}: ${first.trim()}` };
  }
  return undefined;
}

/**
 * The policy itself, applied once to `true` in an empty cwd: a policy bwrap cannot apply (a mount
 * point it cannot make) fails here, at start, not on every command.
 */
function probePolicy(
  path: string,
  policy: ResolvedPolicy,
  filter: string | undefined,
): SandboxProbe | undefined {
  const cwd = mkdtempSync(join(tmpdir(), 'aleph-sandbox-probe-'));
  try {
    const command = bubblewrapCommand(path, filter, (fd) =>
      bubblewrapArgs(policy, realpathSync(cwd), { file: 'true', args: [] }, [], fd),
    );
    return runBwrap(path, command, 'fails to apply the sandbox policy');
  } finally {
    rmSync(cwd, { recursive: true, force: true });
  }
}

function confinedCwd(cwd: string, policy: ResolvedPolicy): string {
  let real: string;
  try {
    real = realpathSync(cwd);
    if (!statSync(real).isDirectory()) throw new Error('not a directory');
  } catch (error) {
    throw new SandboxError('cwd_missing', `cwd: ${cwd} is not a directory`, { cause: error });
  }
  const under = policy.deny.find((denied) => isWithin(real, denied.path));
  if (under !== undefined) {
    throw new SandboxError('cwd_denied', `cwd: ${real} is under the denied path ${under.path}`);
  }
  return real;
}

function readableFiles(paths: readonly string[] | undefined, policy: ResolvedPolicy): string[] {
  return (paths ?? []).flatMap((path) => {
    try {
      const real = realpathSync(path);
      const hidden = policy.deny.some(
        (denied) => denied.path === real || (denied.source === 'protected' && isWithin(real, denied.path)),
      );
      return statSync(real).isFile() && !hidden ? [real] : [];
    } catch {
      return []; // not there (yet): nothing to show
    }
  });
}

function unconfined(mode: SandboxMode, policy: ResolvedPolicy, reason: string): ConfiguredSandbox {
  return {
    backend: 'none',
    mode,
    unconfinedReason: reason,
    deniedPaths: policy.deny,
    readOnlyPaths: policy.readOnly,
    wrap: (command) => ({
      file: command.file,
      args: [...command.args],
      cwd: command.cwd,
      env: scrubEnv(command.env, policy.secretEnv),
    }),
  };
}

/** Builds the sandbox for a policy; throws SandboxError for a bad policy or, in `required` mode, no backend. */
export function createSandbox(policy: SandboxPolicy, options: CreateSandboxOptions): ConfiguredSandbox {
  const resolved = resolvePolicy(policy, options.home ?? homedir());
  const { mode } = options;
  if (mode === 'off') return unconfined(mode, resolved, 'sandbox mode is off');
  let probe = probeSandbox(options);
  // With the network off, no Unix sockets either: the host's (Docker, the session bus) are on the
  // read-only root. The file is checked on every command (a tmp cleaner may remove it).
  const filter = (): string | undefined => (resolved.network === 'off' ? unixSocketFilterFile() : undefined);
  if (probe.kind === 'available' && probe.backend === 'bubblewrap') {
    probe = probePolicy(probe.path, resolved, filter()) ?? probe;
  }
  switch (probe.kind) {
    case 'missing':
    case 'failed':
      if (mode === 'required') {
        throw new SandboxError(probe.kind === 'missing' ? 'backend_missing' : 'backend_failed', probe.reason);
      }
      return unconfined(mode, resolved, probe.reason);
    case 'available': {
      const { backend, path } = probe;
      const inherited = options.env ?? process.env;
      return {
        backend,
        mode,
        deniedPaths: resolved.deny,
        readOnlyPaths: resolved.readOnly,
        wrap: (command) => {
          const cwd = confinedCwd(command.cwd, resolved);
          const env = sandboxEnv(command.env, resolved);
          const unset = unsetNames([command.env, inherited], resolved);
          const readable = readableFiles(command.readable, resolved);
          if (backend === 'bubblewrap') {
            const confined = { ...command, readable };
            return {
              ...bubblewrapCommand(
                path,
                filter(),
                (fd) => bubblewrapArgs(resolved, cwd, confined, unset, fd),
                projectConfigArgs(cwd).created,
              ),
              cwd,
              env,
            };
          }
          const args = [
            '-p',
            seatbeltProfile({ cwd, deny: resolved.deny, network: resolved.network, readable }),
            '/usr/bin/env',
            ...unset.flatMap((name) => ['-u', name]),
            command.file,
            ...command.args,
          ];
          return { file: path, args, cwd, env };
        },
      };
    }
    default: {
      const never: never = probe;
      return never;
    }
  }
}
