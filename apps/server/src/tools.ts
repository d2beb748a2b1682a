// The built-in tools, each with its resource claim and kind. Paths are confined to the run's
// working directory (symlinks included). `shell` runs in a pty of the agents' own pool (visible to
// the gateway, so a client can watch it live); a command that does not exit 0 is an error.
import { lstatSync, realpathSync } from 'node:fs';
import { StringDecoder } from 'node:string_decoder';
import { join, relative, resolve } from 'node:path';
import type { AnyTool, Tool, ToolResult } from '@aleph/harness';
import type { ExitInfo, PtyManager } from '@aleph/pty';
import { shellSafetyProblem, type ScratchpadRow } from '@aleph/verification';
import { z } from 'zod';
import { spawnWhenFree, type TerminalShare } from './agent-ptys.js';
import { isWithin, PROTECTED_PROJECT_PATHS, protectedPathOf, type ProtectedPath } from '@aleph/sandbox';
import {
  confine,
  deniedBy,
  listInside,
  LIST_MAX_CHARS,
  LIST_MAX_ENTRIES,
  openInside,
  type ProtectedEntry,
  ProtectedSet,
  readCapped,
  RefusedPath,
  replaceInside,
  type DeniedEntry,
} from './workdir-files.js';

export const SHELL_OUTPUT_CAP = 64 * 1024;
const READ_CAP = 256 * 1024;
/** How many times edit_file counts an old_string that is not unique, at most. */
const MAX_COUNTED = 1000;
/** edit_file reads the whole file: past this size it refuses rather than hold it in memory. */
const EDIT_CAP = 16 * 1024 * 1024;

export interface Goal {
  readonly objective: string;
  readonly gateCommand?: string;
}

export interface ToolEnvironment {
  /** The run's working directory: every path is confined to it. */
  readonly cwd: string;
  /** Paths the sandbox denies: the file tools refuse them too, whatever the sandbox mode. */
  readonly denied?: readonly DeniedEntry[] | undefined;
  /** Files the sandbox keeps read-only besides the project's own (the server's config, hooks files). */
  readonly readOnly?: readonly DeniedEntry[] | undefined;
  /**
   * The identities recorded when the server started (its `denied` and `readOnly` paths); the
   * project's protected paths are added when the tools are made. Default: recorded now.
   */
  readonly protection?: ProtectedSet | undefined;
  /** Where `shell` commands run: the agents' own pool (`ServerPtys.agents`); a full pool is waited for. */
  readonly ptyManager: PtyManager;
  /** The run's share of that pool, its sub-agents' commands counted in it. */
  readonly terminalShare?: TerminalShare | undefined;
  readonly goals: Map<string, Goal>;
  readonly defaultShellTimeoutMs: number;
  /** The largest file `write_file` and `edit_file` write (`[sandbox.limits] file_size_mib`), as a command may. */
  readonly maxFileBytes?: number | undefined;
  /** Told when `shell` starts a pty, so clients can be pointed at it. */
  readonly onShell?: (info: { sessionId: string; ptySessionId: string; command: string }) => void;
}

/** Why `bytes` may not be written: over the file size a confined command may write. */
const overFileSize = (bytes: number, max: number | undefined): string | undefined =>
  max !== undefined && bytes > max
    ? `the file would be ${bytes} bytes, over the largest a command may write ([sandbox.limits] file_size_mib: ${max} bytes)`
    : undefined;

const guarded = async (work: () => Promise<ToolResult>): Promise<ToolResult> => {
  try {
    return await work();
  } catch (error) {
    return { output: (error as Error).message, isError: true };
  }
};

/**
 * A command's output as the model gets it, in bounded memory: its first quarter of `cap` characters
 * and its true end (CRLF as LF), with the exact count of what was cut between them.
 */
export class CappedOutput {
  readonly #decoder = new StringDecoder('utf8');
  readonly #headSize: number;
  #head = '';
  #tail = '';
  #total = 0;
  #carriedCr = false; // a CR at a chunk's end may start a CRLF

  constructor(readonly cap: number) {
    this.#headSize = Math.floor(cap / 4);
  }

  push(chunk: Buffer): void {
    this.#add(this.#decoder.write(chunk));
  }

  #add(raw: string, last = false): void {
    let text = (this.#carriedCr ? '\r' : '') + raw;
    this.#carriedCr = !last && text.endsWith('\r');
    if (this.#carriedCr) text = text.slice(0, -1);
    text = text.replace(/\r\n/g, '\n');
    this.#total += text.length;
    const room = this.#headSize - this.#head.length;
    if (room > 0) {
      this.#head += text.slice(0, room);
      text = text.slice(room);
    }
    this.#tail += text;
    const tailSize = this.cap - this.#headSize;
    if (this.#tail.length > 2 * tailSize) this.#tail = this.#tail.slice(-tailSize);
  }

  text(): string {
    this.#add(this.#decoder.end(), true);
    if (this.#total <= this.cap) return this.#head + this.#tail;
    const tail = this.#tail.slice(-(this.cap - this.#headSize));
    return `${this.#head}\n…[${this.#total - this.cap} characters cut]…\n${tail}`;
  }
}

/** How pty.list shows a sandboxed command: the backend and the model's command, at most 300 characters. */
function shownAs(backend: string, command: string): string {
  const shown = `[${backend}] /bin/sh -c ${command}`;
  return shown.length <= 300 ? shown : `${shown.slice(0, 299)}…`;
}

/** How a command ended, in words: a timeout, a cancellation, a signal (and why it was sent) or the exit code. */
function shellEnd(exit: ExitInfo, how: { timedOut: boolean; cancelled: boolean; timeoutMs: number }): string {
  if (how.timedOut) return `timed out after ${how.timeoutMs} ms; the command was killed`;
  if (how.cancelled) return 'cancelled; the command was killed';
  const why = exit.reason === 'exited' ? '' : ` (terminal ${exit.reason})`;
  if (exit.statusLost !== undefined) return `exit status unknown: ${exit.statusLost}`;
  if (exit.signal !== null) return `killed by ${exit.signal}${why}`;
  // A terminal closed under the command (a client's pty.close, eviction, shutdown): whatever code
  // it then exited with, it did not finish on its own, so it is never a success.
  return `exit code ${exit.exitCode}${why}`;
}

/** The server's protected paths as the file tools hold them: denied ones, then read-only ones. */
export function serverProtection(
  denied: readonly DeniedEntry[] = [],
  readOnly: readonly DeniedEntry[] = [],
): ProtectedSet {
  return new ProtectedSet([
    ...denied.map((entry): ProtectedEntry => ({ ...entry, access: 'denied' })),
    ...readOnly.map((entry): ProtectedEntry => ({ ...entry, access: 'read-only' })),
  ]);
}

/**
 * The project's own protected paths in `cwd` (what runs unconfined later reads), read-only, and the
 * read-only ones the sandbox adds there (a hook's symlink target, git's `core.hooksPath`).
 */
/** A file tool's path: a NUL byte would reach the system call as Node's own error. */
const toolPath = z
  .string()
  .min(1)
  .refine((path) => !path.includes('\0'), { error: 'must not contain a NUL byte' });

export function projectProtection(cwd: string, bySandbox: readonly ProtectedPath[] = []): ProtectedEntry[] {
  const key = (path: string): string => `${path} is kept read-only (what runs unconfined later reads it)`;
  const entries = PROTECTED_PROJECT_PATHS.map((path): ProtectedEntry => ({
    path: join(cwd, path),
    key: key(path),
    access: 'read-only',
  }));
  const gitFile = join(cwd, '.git'); // a worktree's or a submodule's `gitdir:` pointer
  if (lstatSync(gitFile, { throwIfNoEntry: false })?.isFile() === true)
    entries.push({ path: gitFile, key: key('.git'), access: 'read-only' });
  for (const { path, access } of bySandbox)
    if (access === 'read-only' && isWithin(path, cwd) && !entries.some((entry) => entry.path === path))
      entries.push({ path, key: key(relative(cwd, path)), access });
  return entries;
}

export function builtinTools(env: ToolEnvironment): AnyTool[] {
  const realCwd = realpathSync(env.cwd);
  // Read once: each read of process.env is a getenv per variable, for every command.
  const serverEnv = { ...process.env };
  const guard = {
    denied: env.denied,
    protection: (env.protection ?? serverProtection(env.denied, env.readOnly)).with(
      projectProtection(realCwd),
    ),
  };
  const pathKey = (path: string): string => {
    try {
      return confine(env.cwd, path, env.denied);
    } catch {
      return resolve(env.cwd, path);
    }
  };

  /** What the sandbox keeps read-only (run unconfined later) the file tools never write either. */
  const writable = (path: string): void => {
    const real = confine(env.cwd, path, env.denied);
    const inProject = protectedPathOf(realCwd, real);
    const why =
      inProject !== undefined
        ? `${inProject} is kept read-only (what runs unconfined later reads it)`
        : deniedBy(real, env.readOnly ?? [])?.key;
    if (why !== undefined) throw new RefusedPath(`refused: ${JSON.stringify(path)}: ${why}`);
  };

  const shell: Tool<{ command: string; timeout_secs?: number | undefined }> = {
    name: 'shell',
    description:
      'Run a shell command in the working directory (in a terminal). Returns its output and exit code.',
    input: z.object({ command: z.string().min(1), timeout_secs: z.number().positive().max(3600).optional() }),
    kind: 'evidence',
    timeoutMs: 3_600_000, // the command's own timeout below is the real bound
    execute: async ({ command, timeout_secs }, ctx) => {
      // The pty starts it with exactly the wrapped env (inheritEnv: false): nothing to unset inside.
      const bare = { file: '/bin/sh', args: ['-c', command], cwd: env.cwd, env: serverEnv, exactEnv: true };
      let spec: {
        file: string;
        args: readonly string[];
        cwd: string;
        env?: Record<string, string> | undefined;
        release?(): void;
      };
      try {
        spec = ctx.sandbox ? ctx.sandbox.wrap(bare) : { ...bare, env: undefined };
      } catch (error) {
        return { output: `not run: ${(error as Error).message}`, isError: true };
      }
      // [agent] tool_timeout_secs is a hard cap: the model may ask for less, never more.
      const timeoutMs = Math.min(env.defaultShellTimeoutMs, (timeout_secs ?? Infinity) * 1000);
      const started = Date.now();
      let session;
      try {
        // Waiting for a free agent terminal counts toward the command's timeout.
        session = await spawnWhenFree(
          env.ptyManager,
          {
            command: spec.file,
            args: [...spec.args],
            cwd: spec.cwd,
            ...(spec.env ? { env: spec.env, inheritEnv: false } : {}), // bwrap's own environ too
            cols: 200,
            rows: 50,
          },
          ctx.signal,
          // pty.list shows the command, not the sandbox's long command line around it
          ctx.sandbox && ctx.sandbox.backend !== 'none' ? shownAs(ctx.sandbox.backend, command) : undefined,
          timeoutMs,
          env.terminalShare,
        );
      } catch (error) {
        spec.release?.(); // never started
        if (ctx.signal.aborted) return { output: '[cancelled before a terminal came free]', isError: true };
        if ((error as Error).name === 'TimeoutError' || (error as Error).name === 'AbortError')
          return {
            output: `[timed out after ${timeoutMs} ms waiting for a free agent terminal; nothing ran]`,
            isError: true,
          };
        throw error;
      }
      env.onShell?.({ sessionId: ctx.sessionId, ptySessionId: session.id, command });
      const collected = new CappedOutput(SHELL_OUTPUT_CAP);
      session.onData((chunk) => collected.push(chunk));
      let timedOut = false;
      const timer = setTimeout(
        () => {
          timedOut = true;
          void session.close();
        },
        Math.max(0, timeoutMs - (Date.now() - started)),
      );
      const onAbort = (): void => void session.close();
      ctx.signal.addEventListener('abort', onAbort, { once: true });
      if (ctx.signal.aborted) onAbort(); // cancelled while the pty was spawning
      const exit = await session.exited;
      spec.release?.(); // its group is gone, however it ended (exit, timeout, cancel)
      clearTimeout(timer);
      ctx.signal.removeEventListener('abort', onAbort);
      const output = collected.text();
      const failed = timedOut || ctx.signal.aborted || exit.exitCode !== 0 || exit.reason !== 'exited';
      const end = shellEnd(exit, { timedOut, cancelled: ctx.signal.aborted, timeoutMs });
      return { output: `${output}\n[${end}]`, ...(failed ? { isError: true } : {}) };
    },
  };

  const readTool: Tool<{ path: string }> = {
    name: 'read_file',
    description: 'Read a UTF-8 text file in the working directory.',
    input: z.object({ path: toolPath }),
    kind: 'evidence',
    readOnly: true,
    claim: ({ path }) => ({ kind: 'shared', keys: [pathKey(path)] }),
    execute: ({ path }) =>
      guarded(async () => {
        await using file = await openInside(env.cwd, path, 'read', guard);
        return { output: await readCapped(file, READ_CAP) };
      }),
  };

  const writeTool: Tool<{ path: string; content: string }> = {
    name: 'write_file',
    description: 'Create or overwrite a file in the working directory with the given content.',
    input: z.object({ path: toolPath, content: z.string() }),
    kind: 'mutation',
    claim: ({ path }) => ({ kind: 'exclusive', keys: [pathKey(path)] }),
    execute: ({ path, content }) =>
      guarded(async () => {
        writable(path);
        const tooBig = overFileSize(Buffer.byteLength(content), env.maxFileBytes);
        if (tooBig !== undefined) return { output: `refused: ${path}: ${tooBig}`, isError: true };
        const written = await replaceInside(env.cwd, path, content, guard);
        return { output: `wrote ${Buffer.byteLength(content)} bytes to ${written}` };
      }),
  };

  const editTool: Tool<{ path: string; old_string: string; new_string: string }> = {
    name: 'edit_file',
    description: 'Replace the one exact occurrence of old_string with new_string in a file.',
    input: z.object({ path: toolPath, old_string: z.string().min(1), new_string: z.string() }),
    kind: 'mutation',
    claim: ({ path }) => ({ kind: 'exclusive', keys: [pathKey(path)] }),
    execute: ({ path, old_string, new_string }) =>
      guarded(async () => {
        writable(path);
        let text: string;
        {
          await using file = await openInside(env.cwd, path, 'edit', guard);
          if ((await file.stat()).size > EDIT_CAP)
            return {
              output: `refused: ${path} is over ${EDIT_CAP} bytes; edit it with the shell`,
              isError: true,
            };
          text = await file.readFile('utf8');
        }
        // Counted without a copy, up to a bound: a one-character old_string in a 16 MB file must not
        // hold the server (`split` made a 16-million-element array).
        let count = 0;
        for (let at = text.indexOf(old_string); at >= 0 && count <= MAX_COUNTED; count++)
          at = text.indexOf(old_string, at + old_string.length);
        if (count !== 1) {
          const times =
            count > MAX_COUNTED ? `more than ${MAX_COUNTED.toLocaleString('en-US')}` : String(count);
          return {
            output: `old_string occurs ${times} times in ${path}; it must occur exactly once`,
            isError: true,
          };
        }
        const edited = text.replace(old_string, () => new_string);
        const tooBig = overFileSize(Buffer.byteLength(edited), env.maxFileBytes);
        if (tooBig !== undefined) return { output: `refused: ${path}: ${tooBig}`, isError: true };
        await replaceInside(env.cwd, path, edited, guard);
        return { output: `edited ${path}` };
      }),
  };

  const listTool: Tool<{ path?: string | undefined }> = {
    name: 'list_files',
    description: 'List the entries of a directory in the working directory (directories end with /).',
    input: z.object({ path: toolPath.optional() }),
    kind: 'other',
    readOnly: true,
    claim: ({ path }) => ({ kind: 'shared', keys: [pathKey(path ?? '.')] }),
    execute: ({ path }) =>
      guarded(async () => {
        const { names, more } = await listInside(env.cwd, path ?? '.', guard);
        const listing = names.join('\n') || '(empty)';
        if (!more) return { output: listing };
        return {
          output: `${listing}\n[${names.length} entries listed, more not: a listing stops at ${LIST_MAX_ENTRIES.toLocaleString('en-US')} entries or ${LIST_MAX_CHARS / 1024} KiB of names; these are the first the folder gave, sorted; use the shell to list the rest, e.g. \`ls | head\`, \`find . -maxdepth 1 -name '*.ts'\`]`,
        };
      }),
  };

  const rowSchema = z.object({
    text: z.string().min(1),
    status: z.enum(['open', 'done', 'cancelled', 'blocked']),
  });
  const todoTool: Tool<{ items: ScratchpadRow[] }> = {
    name: 'todo',
    description: 'Replace the execution list. Each item: {text, status: open|done|cancelled|blocked}.',
    input: z.object({ items: z.array(rowSchema) }),
    kind: 'other',
    claim: () => ({ kind: 'exclusive', keys: ['todo'] }),
    execute: ({ items }) =>
      Promise.resolve({
        output:
          items
            .map(
              (item) =>
                `- [${item.status === 'done' ? 'x' : item.status === 'open' ? ' ' : '-'}] ${item.text}${item.status === 'cancelled' || item.status === 'blocked' ? ` (${item.status})` : ''}`,
            )
            .join('\n') || '(empty list)',
        scratchpad: items,
      }),
  };

  const goalTool: Tool<{ objective: string; gate_command?: string | undefined }> = {
    name: 'goal',
    description:
      'Record the objective of this run and, optionally, a gate_command that must pass (exit 0) before you may finish. ' +
      "The gate command may use only letters, digits, spaces and / - . _ : ' =.",
    input: z.object({ objective: z.string().min(1), gate_command: z.string().optional() }),
    kind: 'other',
    claim: () => ({ kind: 'exclusive', keys: ['goal'] }),
    execute: ({ objective, gate_command }, ctx) => {
      const problem = gate_command === undefined ? undefined : shellSafetyProblem(gate_command);
      if (problem !== undefined) {
        return Promise.resolve({
          output: `refused: gate_command: ${problem}; use a plain command such as "pnpm test"`,
          isError: true,
        });
      }
      env.goals.set(ctx.sessionId, { objective, ...(gate_command ? { gateCommand: gate_command } : {}) });
      return Promise.resolve({ output: `goal recorded${gate_command ? `; gate: ${gate_command}` : ''}` });
    },
  };

  return [shell, readTool, writeTool, editTool, listTool, todoTool, goalTool];
}
