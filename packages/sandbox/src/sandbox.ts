// A Sandbox wraps a command the model chose into one that runs confined by a policy: bubblewrap on
// Linux, sandbox-exec on macOS, or `none`. The mode decides what happens without a working
// backend: `required` throws (SandboxError), `auto` runs unconfined and says why, `off` never
// confines. Every backend, `none` included, strips the server's secrets from the environment.
import { spawnSync } from 'node:child_process';
import { accessSync, constants, lstatSync, mkdtempSync, realpathSync, rmSync, statSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { unsafeCwd } from './cwd.js';
import { SandboxError } from './errors.js';
import { baseArgs, bubblewrapArgs, bubblewrapCommand, mountedInside, onPath } from './internal/bubblewrap.js';
import {
  commandCgroup,
  commandsCpuGroup,
  findPidsCgroup,
  prlimitArgs,
  releaseCommandCgroup,
  type PidsCgroup,
  type ResolvedLimits,
} from './internal/limits.js';
import {
  keepStandIns,
  prepareMounts,
  protectedInProject,
  releaseStandIns,
} from './internal/project-mounts.js';
import { sandboxFilterFile } from './internal/seccomp.js';
import { seatbeltProfile } from './internal/seatbelt.js';
import {
  deniedByPath,
  denyNow,
  isWithin,
  realOrBelow,
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
  /**
   * True when the spawner starts the command with the wrapped `env` and nothing else (a pty's
   * `inheritEnv: false`, `child_process.spawn`'s `env`): no name then needs unsetting inside, and the
   * command line carries none. Default false: each name of this process's environment and of `env`
   * outside the allow-list is unset inside (`--unsetenv`, `env -u`), for a spawner that merges.
   */
  readonly exactEnv?: boolean | undefined;
}

export interface WrappedCommand {
  readonly file: string;
  readonly args: readonly string[];
  readonly cwd: string;
  /** The environment to spawn with. A spawner that merges it over its own is safe: the backend
   * unsets every other name it can know of (this process's and the command's). */
  readonly env: Record<string, string>;
  /**
   * Call once the command ended, however it ended (exit, kill of its group, timeout, cancel), or
   * when it never started: removes the empty stand-ins made for absent protected paths (a
   * `.claude` dir, `.git/commondir`) and the command's pids cgroup. Idempotent. A stand-in left
   * behind runs nothing (an empty dir or file; a `commondir` of `.`).
   */
  readonly release: () => void;
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
  /**
   * The policy's `readOnly` files, existing or not, and its `readOnlyFolders` that exist (real
   * paths): the file tools refuse to write them too.
   */
  readonly readOnlyPaths: readonly string[];
  /**
   * What a command in `cwd` may not change or read, by identity (device + inode), whatever the
   * backend: for what confines in-process (file tools), which should compare what it opened
   * against it (a hard link or a renamed ancestor has another name, never another identity).
   */
  protectedPaths(cwd: string): ProtectedPath[];
  /** The limits each command gets, and how the task count is bounded (or why it is not). */
  readonly limits: LimitsReport;
  /**
   * The CPU group every confined command joins before bwrap starts (root, cgroup v1's `cpu`;
   * weighted by `nice`), if there is one: a spawner that can put a command in a cgroup as soon as
   * it is forked (a pty's `cgroup`) should, so that what runs before the command's wrapper joins
   * it (a session of its own, an autogroup as heavy as this process) weighs no more than the rest.
   */
  readonly cpuGroup?: string;
  /**
   * For a series of commands in `cwd` (an agent's run): the empty stand-ins its commands make for
   * absent protected paths stay from one command to the next, instead of being made and removed
   * for each (removing a directory blocks for milliseconds on some filesystems), until the returned
   * function is called (idempotent; call it once the series ended). Nested keeps of one cwd share
   * it. A no-op without bubblewrap.
   */
  keep(cwd: string): () => void;
}

/** A protected path as it is now: `read-only` (not written) or `denied` (not read either). */
export interface ProtectedPath {
  readonly path: string;
  readonly access: 'read-only' | 'denied';
  readonly kind: 'dir' | 'file';
  readonly dev: number;
  readonly ino: number;
}

export interface LimitsReport extends ResolvedLimits {
  /** `rlimit`: RLIMIT_NPROC inside (not root); `cgroup`: a pids cgroup per command; `none`: unbounded (why in `note`). */
  readonly processesBy: 'rlimit' | 'cgroup' | 'none';
  /** `size`: the private /tmp and /dev/shm have `tmpBytes` each; `none`: no size (why in `note`). */
  readonly tmpBy: 'size' | 'none';
  /** What is not bounded here, and why. */
  readonly note?: string;
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
  /**
   * The confined commands' CPU priority against this process, as a niceness (0 to 19; default 0):
   * where they share a CPU group (root, cgroup v1's `cpu`: see `cpuGroup`), the group weighs as one
   * task of this niceness. Elsewhere give the commands this niceness where they are spawned.
   */
  readonly nice?: number;
}

const SANDBOX_EXEC = '/usr/bin/sandbox-exec';

export const INSTALL_HINT =
  'install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)';

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
    { file: path, args: [...baseArgs('off', false), '--', 'true'] },
    'fails to start a sandbox',
  );
  return failure ?? { kind: 'available', backend: 'bubblewrap', path };
}

/** Whether this bwrap can refuse user namespaces inside (`--disable-userns`, bubblewrap 0.8). */
function canDisableUserns(path: string): boolean {
  return runBwrap(path, { file: path, args: [...baseArgs('off', true), '--', 'true'] }, '') === undefined;
}

/** Whether this bwrap can size a tmpfs (`--size`, bubblewrap 0.8). */
function canSizeTmpfs(path: string, disableUserns: boolean): boolean {
  const args = [...baseArgs('off', disableUserns, 1024 ** 2), '--', 'true'];
  return runBwrap(path, { file: path, args }, '') === undefined;
}

const TMP_NOT_SIZED =
  'this bwrap cannot size a tmpfs (--size, bubblewrap 0.8): /tmp and /dev/shm have no size limit';

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
  disableUserns: boolean,
  tmpBytes: number | undefined,
): SandboxProbe | undefined {
  const cwd = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-sandbox-probe-')));
  const project = prepareMounts(cwd, policy, mountedInside(policy, cwd));
  try {
    const command = bubblewrapCommand(
      path,
      (seccompFd) =>
        bubblewrapArgs(policy, cwd, { file: 'true', args: [] }, [], {
          seccompFd,
          project: project.args,
          disableUserns,
          tmpBytes,
        }),
      { filterFile: filter },
    );
    return runBwrap(path, command, 'fails to apply the sandbox policy');
  } finally {
    releaseStandIns(project.standIns);
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
  const unsafe = unsafeCwd(real);
  if (unsafe !== undefined) {
    const what = {
      root: 'the root folder: the cwd',
      system: `in the system folder ${unsafe.folder}: the cwd`,
      holder: "a folder holding other people's folders: the cwd",
      shared_temp: 'a temporary folder all programs share: the cwd stands for the private /tmp and',
    }[unsafe.kind];
    const choose = unsafe.kind === 'shared_temp' ? 'a folder in it' : 'a project directory';
    throw new SandboxError('cwd_denied', `cwd: ${real} is ${what} is writable inside; choose ${choose}`);
  }
  const under = policy.deny.find((denied) => isWithin(real, denied.path));
  if (under !== undefined) {
    throw new SandboxError('cwd_denied', `cwd: ${real} is under the denied path ${under.path}`);
  }
  return real;
}

function isDirectory(path: string): boolean {
  try {
    return lstatSync(path).isDirectory();
  } catch {
    return false;
  }
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

/** The protected set of `cwd` with identities, for in-process checks. */
function protectedPaths(cwd: string, policy: ResolvedPolicy): ProtectedPath[] {
  let real: string;
  try {
    real = realpathSync(cwd);
  } catch {
    real = cwd;
  }
  const project = protectedInProject(real, policy);
  const entries: { path: string; access: ProtectedPath['access'] }[] = [
    ...denyNow(policy).map(({ path }) => ({ path, access: 'denied' as const })),
    ...[...policy.readOnly, ...project.readOnly].map((path) => ({ path, access: 'read-only' as const })),
  ];
  return entries.flatMap(({ path, access }) => {
    try {
      const stat = statSync(path);
      return [
        { path, access, kind: stat.isDirectory() ? 'dir' : 'file', dev: stat.dev, ino: stat.ino } as const,
      ];
    } catch {
      return [];
    }
  });
}

const NO_LIMITS_OFF = 'commands run unconfined: no limits';

function unconfined(mode: SandboxMode, policy: ResolvedPolicy, reason: string): ConfiguredSandbox {
  return {
    backend: 'none',
    mode,
    unconfinedReason: reason,
    deniedPaths: deniedByPath(policy),
    readOnlyPaths: [...policy.readOnly, ...policy.readOnlyFolders],
    protectedPaths: (cwd) => protectedPaths(cwd, policy),
    limits: { ...policy.limits, processesBy: 'none', tmpBy: 'none', note: NO_LIMITS_OFF },
    keep: () => () => {},
    wrap: (command) => ({
      file: command.file,
      args: [...command.args],
      cwd: command.cwd,
      env: scrubEnv(command.env, policy.secretEnv),
      release: () => {},
    }),
  };
}

/** How tasks are bounded here: RLIMIT_NPROC for a non-root user, a pids cgroup for root, if any. */
function limitsOf(
  policy: ResolvedPolicy,
  prlimit: string | undefined,
  tmpSized: boolean,
): { report: LimitsReport; cgroup?: PidsCgroup } {
  const report = (processesBy: LimitsReport['processesBy'], note?: string): LimitsReport => {
    const notes = [note, tmpSized ? undefined : TMP_NOT_SIZED].filter((text) => text !== undefined);
    const tmpBy = tmpSized ? 'size' : 'none';
    return { ...policy.limits, processesBy, tmpBy, ...(notes.length > 0 ? { note: notes.join('; ') } : {}) };
  };
  if (process.getuid?.() !== 0) {
    if (prlimit === undefined) return { report: report('none', 'prlimit (util-linux) not found: no limits') };
    return { report: report('rlimit') };
  }
  const cgroup = findPidsCgroup();
  if (cgroup !== undefined) return { report: report('cgroup'), cgroup };
  return {
    report: report(
      'none',
      'run as root with no writable pids cgroup: the number of processes is not bounded (RLIMIT_NPROC does not apply to uid 0)',
    ),
  };
}

/** Builds the sandbox for a policy; throws SandboxError for a bad policy or, in `required` mode, no backend. */
export function createSandbox(policy: SandboxPolicy, options: CreateSandboxOptions): ConfiguredSandbox {
  const resolved = resolvePolicy(policy, options.home ?? homedir(), options.env ?? process.env);
  const { mode, nice = 0 } = options;
  if (!(Number.isInteger(nice) && nice >= 0 && nice <= 19))
    throw new SandboxError('limit_invalid', `nice must be an integer from 0 to 19, got ${nice}`);
  if (mode === 'off') return unconfined(mode, resolved, 'sandbox mode is off');
  let probe = probeSandbox(options);
  // With the network off, no Unix sockets either: the host's (Docker, the session bus) are on the
  // read-only root. The file is checked on every command (a tmp cleaner may remove it).
  const filter = (): string | undefined => sandboxFilterFile(resolved.network);
  let disableUserns = false;
  let tmpBytes: number | undefined;
  if (probe.kind === 'available' && probe.backend === 'bubblewrap') {
    disableUserns = canDisableUserns(probe.path);
    if (canSizeTmpfs(probe.path, disableUserns)) tmpBytes = resolved.limits.tmpBytes;
    probe = probePolicy(probe.path, resolved, filter(), disableUserns, tmpBytes) ?? probe;
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
      const prlimit = backend === 'bubblewrap' ? onPath('prlimit', inherited) : undefined;
      const limits = limitsOf(resolved, prlimit, tmpBytes !== undefined);
      // As root RLIMIT_NPROC binds nothing (the pids cgroup counts): the other limits are set by the
      // wrapper's `ulimit` builtins, bwrap and the command inheriting them, with no prlimit process.
      const wrapperLimits = backend === 'bubblewrap' && process.getuid?.() === 0;
      const cpuGroup = backend === 'bubblewrap' ? commandsCpuGroup(nice) : undefined;
      return {
        backend,
        mode,
        ...(cpuGroup === undefined ? {} : { cpuGroup }),
        deniedPaths: deniedByPath(resolved),
        readOnlyPaths: [...resolved.readOnly, ...resolved.readOnlyFolders],
        protectedPaths: (cwd) => protectedPaths(cwd, resolved),
        limits:
          backend === 'bubblewrap'
            ? limits.report
            : {
                ...resolved.limits,
                processesBy: 'none',
                tmpBy: 'none',
                note: 'sandbox-exec: limits are not set on macOS',
              },
        keep: (cwd) => {
          if (backend !== 'bubblewrap') return () => {};
          try {
            return keepStandIns(realpathSync(cwd));
          } catch {
            return () => {}; // no such cwd: its commands are refused anyway
          }
        },
        wrap: (command) => {
          // Denied paths as they are now: a credential store made since the start is hidden too.
          const current: ResolvedPolicy = { ...resolved, deny: denyNow(resolved) };
          const cwd = confinedCwd(command.cwd, current);
          const env = sandboxEnv(command.env, resolved);
          const unset = command.exactEnv === true ? [] : unsetNames([command.env, inherited], resolved);
          const readable = readableFiles(command.readable, current);
          if (backend === 'bubblewrap') {
            const confined = { ...command, readable };
            const project = prepareMounts(cwd, current, mountedInside(current, cwd));
            const cgroup = limits.cgroup === undefined ? undefined : commandCgroup(limits.cgroup);
            let released = false;
            const release = (): void => {
              if (released) return;
              released = true;
              releaseStandIns(project.standIns);
              if (cgroup !== undefined) releaseCommandCgroup(cgroup);
            };
            const wrapped = bubblewrapCommand(
              path,
              (seccompFd) =>
                bubblewrapArgs(current, cwd, confined, unset, {
                  seccompFd,
                  project: project.args,
                  disableUserns,
                  tmpBytes,
                  prefix: wrapperLimits || prlimit === undefined ? [] : prlimitArgs(prlimit, resolved.limits),
                }),
              {
                filterFile: filter(),
                cgroup,
                processes: resolved.limits.processes,
                cpuGroup,
                ...(wrapperLimits || prlimit !== undefined ? { limits: resolved.limits } : {}),
                setsLimits: wrapperLimits,
              },
            );
            return { ...wrapped, cwd, env, release };
          }
          const args = [
            '-p',
            seatbeltProfile({
              cwd,
              deny: current.deny,
              network: resolved.network,
              readable,
              readOnly: resolved.readOnly,
              readOnlyFolders: resolved.readOnlyFolders,
              tempDir: realOrBelow(tmpdir()),
              gitIsDir: isDirectory(join(cwd, '.git')),
            }),
            '/usr/bin/env',
            ...unset.flatMap((name) => ['-u', name]),
            command.file,
            ...command.args,
          ];
          return { file: path, args, cwd, env, release: () => {} };
        },
      };
    }
    default: {
      const never: never = probe;
      return never;
    }
  }
}
