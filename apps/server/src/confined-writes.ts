// When the model could have written a file. The model's commands may write in an agent run's `cwd`
// while the run lasts; a file the server acts on later (an `aleph.toml`, a project's Claude Code
// hooks file) that changed then, in that folder or below it, may be the model's. The kernel sets a
// file's change time (ctime) on every write, link, rename or chmod, and nothing the model runs can
// set it back, so a ctime inside a run's window is a fact about the file, not about its content.
// The windows are kept in the state dir (`confined-writes.jsonl`, one line at a run's start and one
// at its end), so a restart remembers them; a window an earlier process left open ends when this
// one starts.
import {
  appendFileSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  realpathSync,
  renameSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { isWithin, type ProtectedPath } from '@aleph/sandbox';

/** One agent run: its `cwd` (real path), from its start to its end (ms since the epoch). */
export interface WriteWindow {
  readonly runId: string;
  readonly cwd: string;
  readonly from: number;
  readonly to: number;
}

const FILE = 'confined-writes.jsonl';
/** Windows kept: the oldest go first once there are more. */
const MAX_WINDOWS = 5000;
/** A file system's clock and ours, and a change just before a run's first line was written. */
const SLACK_MS = 2000;

const real = (path: string): string => {
  try {
    return realpathSync(path);
  } catch {
    return resolve(path);
  }
};

/** A path's change times: of the entry itself and, for a link, of what it leads to. */
function changeTimes(path: string): { at: number; path: string }[] {
  const times: { at: number; path: string }[] = [];
  try {
    // BigInt stats: Node 20's shared stat array, left holding a FIFO's, broke the next import().
    times.push({ at: Number(lstatSync(path, { bigint: true }).ctimeNs / 1_000_000n), path: resolve(path) });
    times.push({ at: Number(statSync(path, { bigint: true }).ctimeNs / 1_000_000n), path: real(path) });
  } catch {
    // Missing, or a dangling link: what there is was checked.
  }
  return times;
}

/**
 * Whether `file` was out of reach of the commands of a run that started at `since` in a cwd the
 * sandbox keeps `kept` in (its protected paths there, as they are now): its name lies in a
 * protected dir or is a protected file (a mount point: it cannot be replaced), and what it leads to
 * is protected too (a link into a writable folder is not). A protected path made since (a home dot
 * entry kept only while it exists, made by the run) kept nothing then.
 */
export function keptFrom(file: string, kept: readonly ProtectedPath[], since: number): boolean {
  let target: { dev: number; ino: number };
  try {
    target = statSync(file);
  } catch {
    return false;
  }
  const before = kept.filter(({ path }) => {
    try {
      const born = Number(statSync(path, { bigint: true }).birthtimeNs / 1_000_000n);
      return born > 0 && born < since; // unknown (0): not known to have kept anything
    } catch {
      return false;
    }
  });
  const named = (path: string): boolean =>
    before.some((entry) => entry.path === path || (entry.kind === 'dir' && isWithin(path, entry.path)));
  const same = before.some((entry) => entry.dev === target.dev && entry.ino === target.ino);
  return named(resolve(file)) && (same || named(real(file)));
}

export class ConfinedWrites {
  readonly #file: string;
  readonly #windows: WriteWindow[] = [];
  readonly #open = new Map<string, { cwd: string; from: number }>();
  readonly #now: () => number;

  /** Reads the windows kept in `stateDir` (a missing or torn file reads as what it holds). */
  constructor(stateDir: string, now: () => number = Date.now) {
    this.#now = now;
    this.#file = join(stateDir, FILE);
    const started = now();
    let text = '';
    try {
      text = readFileSync(this.#file, 'utf8');
    } catch {
      // None yet.
    }
    const begun = new Map<string, { cwd: string; from: number }>();
    for (const line of text.split('\n')) {
      let entry: { run?: unknown; cwd?: unknown; from?: unknown; to?: unknown };
      try {
        entry = JSON.parse(line) as typeof entry;
      } catch {
        continue;
      }
      if (typeof entry.run !== 'string') continue;
      if (typeof entry.cwd === 'string' && typeof entry.from === 'number')
        begun.set(entry.run, { cwd: entry.cwd, from: entry.from });
      else if (typeof entry.to === 'number') {
        const start = begun.get(entry.run);
        begun.delete(entry.run);
        if (start !== undefined) this.#windows.push({ runId: entry.run, ...start, to: entry.to });
      }
    }
    // Runs of an earlier process that never ended (it was killed): their window lasts until now.
    for (const [runId, start] of begun) this.#windows.push({ runId, ...start, to: started });
    this.#windows.sort((a, b) => a.to - b.to);
    this.#windows.splice(0, Math.max(0, this.#windows.length - MAX_WINDOWS));
    if (begun.size > 0 || text.split('\n').length > 2 * MAX_WINDOWS) this.#rewrite();
  }

  /** A run starts in `cwd`: its window opens. Returns what ends it (once). */
  begin(runId: string, cwd: string): () => void {
    const start = { cwd: real(cwd), from: this.#now() };
    this.#open.set(runId, start);
    this.#append({ run: runId, ...start });
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.#open.delete(runId);
      const to = this.#now();
      this.#windows.push({ runId, ...start, to });
      if (this.#windows.length > MAX_WINDOWS) this.#windows.shift();
      this.#append({ run: runId, to });
    };
  }

  /**
   * The run during which one of `paths` (each as it is and, for a link, what it leads to) last
   * changed while that run could write there, if there is one; else undefined.
   */
  changedDuringRun(...paths: string[]): WriteWindow | undefined {
    return this.changedDuringOtherRun(undefined, paths);
  }

  /**
   * `changedDuringRun`, leaving out the window of run `runId` (one that asks about its own start),
   * and the runs whose commands `writable` says could not write the file (the sandbox kept it
   * read-only in their cwd: a change then was not theirs).
   */
  changedDuringOtherRun(
    runId: string | undefined,
    paths: readonly string[],
    writable: (window: WriteWindow) => boolean = () => true,
  ): WriteWindow | undefined {
    const now = this.#now();
    const windows = [
      ...this.#windows,
      ...[...this.#open].map(([id, open]) => ({ runId: id, ...open, to: now })),
    ].filter((window) => window.runId !== runId);
    for (const path of paths)
      for (const { at, path: where } of changeTimes(path))
        for (const window of windows)
          if (
            at >= window.from - SLACK_MS &&
            at <= window.to + SLACK_MS &&
            isWithin(where, window.cwd) &&
            writable(window)
          )
            return window;
    return undefined;
  }

  #append(entry: object): void {
    const line = `${JSON.stringify(entry)}\n`;
    try {
      appendFileSync(this.#file, line, { mode: 0o600 });
    } catch (error) {
      try {
        // The state dir made only when it is missing: a mkdir of one that exists locks its parent
        // (a shared temp dir) and waited there for milliseconds at each run's start and end.
        if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
        mkdirSync(dirname(this.#file), { recursive: true, mode: 0o700 });
        appendFileSync(this.#file, line, { mode: 0o600 });
      } catch {
        // A state dir that cannot be written: the windows of this process are still known to it.
      }
    }
  }

  #rewrite(): void {
    const lines = this.#windows.flatMap(({ runId, cwd, from, to }) => [
      JSON.stringify({ run: runId, cwd, from }),
      JSON.stringify({ run: runId, to }),
    ]);
    try {
      mkdirSync(dirname(this.#file), { recursive: true, mode: 0o700 });
      writeFileSync(`${this.#file}.tmp`, lines.length > 0 ? `${lines.join('\n')}\n` : '', { mode: 0o600 });
      renameSync(`${this.#file}.tmp`, this.#file);
    } catch {
      // Kept as it was: read again at the next start.
    }
  }
}
