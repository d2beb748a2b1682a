// When the model could have written a file. The model's commands may write in an agent run's `cwd`
// while the run lasts; a file the server acts on later (an `aleph.toml`, a project's Claude Code
// hooks file) that changed then, in that folder or below it, may be the model's. The kernel sets a
// file's change time (ctime) on every write, link, rename or chmod, and nothing the model runs can
// set it back, so a ctime inside a run's window is a fact about the file, not about its content.
// A rename changes the moved folder's ctime only, not its contents': a file changed during a run
// and then moved into a folder of another run's whose cwd holds the first's, by a change of a folder
// on its way inside that run's cwd during it, after the file's, counts as changed during that run too. That
// folder's change time is its last change only (a later file made in it, by the user or a run there,
// hides the move): each run keeps its cwd's change time from before it began (the sandbox's mount
// points change the cwd), and a file found moved is remembered, with its change time, until that changes.
// The windows are kept in the state dir (`confined-writes.jsonl`, one line at a run's start and one
// at its end), so a restart remembers them; a window an earlier process left open ends when this
// one starts. In cluster mode every node also sends its entries to the others (`share`, `absorb`).
import {
  appendFileSync,
  lstatSync,
  mkdirSync,
  opendirSync,
  readFileSync,
  realpathSync,
  renameSync,
  statSync,
  writeFileSync,
  type Dir,
} from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { isWithin, type ProtectedPath } from '@aleph/sandbox';
import type * as ShellQuote from 'shell-quote';
import { identityOf } from './workdir-files.js';

/** One agent run: its `cwd` (real path), from its start to its end (ms since the epoch). */
export interface WriteWindow {
  readonly runId: string;
  readonly cwd: string;
  readonly from: number;
  readonly to: number;
  /** The cwd's own change time when the run began (ms), if known: what the run's changes there hid. */
  readonly cwdChanged?: number;
  /**
   * The cwd's identity (`dev:ino`) when the run began: a file under that folder is judged by it
   * after the folder was renamed or moved, or when it is reached by another path.
   */
  readonly cwdId?: string;
}

/** A change the model could have made: the run it was made in, and which path it was. */
export interface RunChange extends WriteWindow {
  /** The path that changed (one asked about as it is named, or what it leads to). */
  readonly path: string;
  /** The run that moved it into place, when that run's cwd is not `cwd`: `folder` (on its way) changed then. */
  readonly movedBy?: WriteWindow & { readonly folder: string };
}

/** `change` in words: "changed during agent run … in …" and, if so, how it was moved into place. */
export function describeChange(change: RunChange, times = false): string {
  const run = ({ runId, cwd, from, to }: WriteWindow): string =>
    `agent run ${runId} in ${cwd}${times ? ` (${new Date(from).toISOString()} to ${new Date(to).toISOString()})` : ''}`;
  const { movedBy } = change;
  return `changed during ${run(change)}${
    movedBy === undefined ? '' : `, then moved into place (${movedBy.folder} changed) during ${run(movedBy)}`
  }`;
}

/**
 * A command for the user's shell, its words quoted: a remedy names a path the model chose, and a
 * name holding `$(…)` must not run as the user who pastes it (shell-quote, loaded at first use).
 */
let shellQuoteModule: typeof ShellQuote | undefined;
export const quote = (words: readonly string[]): string =>
  (shellQuoteModule ??= createRequire(import.meta.url)('shell-quote') as typeof ShellQuote).quote([...words]);

/**
 * Why a config file is not read, when `writes` says a run could have written it (changed during a
 * run in its folder or above, or moved into place): the reason, with what the user does about it.
 */
export function distrustedConfig(writes: ConfinedWrites, path: string): string | undefined {
  const run = writes.changedDuringRun(path);
  return run === undefined
    ? undefined
    : `${path} ${describeChange(run, true)}, whose commands could write there: it is not read as configuration. Read it; if it is yours, \`${quote(['touch', path])}\` and start again.`;
}

/**
 * Every file and folder under `dir`, links not followed, or why not: past `max` entries or `depth`
 * folders down, the rest is not known.
 */
export function entriesUnder(dir: string, max = 1000, depth = 6): { paths: string[] } | { cut: string } {
  const paths: string[] = [];
  const walk = (folder: string, level: number): string | undefined => {
    let opened: Dir;
    try {
      opened = opendirSync(folder);
    } catch {
      return undefined; // missing, or not a folder
    }
    try {
      return walkOpened(opened, folder, level);
    } finally {
      opened.closeSync();
    }
  };
  // Read an entry at a time: a folder of a million entries costs no more than the first `max`.
  const walkOpened = (opened: Dir, folder: string, level: number): string | undefined => {
    for (let entry = opened.readSync(); entry !== null; entry = opened.readSync()) {
      const path = join(folder, entry.name);
      paths.push(path);
      if (paths.length > max) return `${dir} holds more than ${max} entries`;
      let folderThere = false;
      try {
        folderThere = lstatSync(path).isDirectory();
      } catch {
        // Gone since: nothing under it.
      }
      if (!folderThere) continue;
      if (level >= depth) return `${dir} is more than ${depth} folders deep`;
      const cut = walk(path, level + 1);
      if (cut !== undefined) return cut;
    }
    return undefined;
  };
  const cut = walk(dir, 1);
  return cut === undefined ? { paths } : { cut };
}

const FILE = 'confined-writes.jsonl';
/** Windows kept: the oldest go first once there are more. */
const MAX_WINDOWS = 5000;
/** A file system's clock and ours, and a change just before a run's first line was written. */
const SLACK_MS = 2000;
/** Files found moved into place, kept: the oldest go first once there are more. */
const MAX_MOVED = 1000;

/** A file's identity, `dev:ino` (undefined when it is not there). */
function identity(path: string): string | undefined {
  try {
    const stat = lstatSync(path, { throwIfNoEntry: false, bigint: true });
    return stat === undefined ? undefined : identityOf(stat);
  } catch {
    return undefined; // not ours to look at
  }
}

/** `path`'s real path, else `path` resolved as it is (missing). */
export const real = (path: string): string => {
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

type Start = Pick<WriteWindow, 'cwd' | 'from' | 'cwdChanged' | 'cwdId'>;

export class ConfinedWrites {
  readonly #file: string;
  readonly #windows: WriteWindow[] = [];
  readonly #open = new Map<string, Start>();
  /** An entry could not be written: the file is rewritten whole at the next one. */
  #lost = false;
  readonly #now: () => number;
  /** Files found moved into place: by their path and change time (`path\0ms`), what was found. */
  readonly #moved = new Map<string, RunChange>();
  /** Other nodes' runs not ended yet (cluster mode), by node and run (`node\0run`). */
  readonly #foreign = new Map<string, WriteWindow>();
  /** Where this node's entries go besides its file (cluster mode: every other node). */
  #share: ((entry: object) => void) | undefined;
  /** The ends this process gave runs an earlier one left open: for the other nodes too, once shared. */
  readonly #endedAtStart: object[] = [];

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
    const begun = new Map<string, Start>();
    for (const line of text.split('\n')) {
      let entry: {
        run?: unknown;
        cwd?: unknown;
        from?: unknown;
        cwdChanged?: unknown;
        cwdId?: unknown;
        to?: unknown;
        moved?: unknown;
        change?: unknown;
      };
      try {
        entry = JSON.parse(line) as typeof entry;
      } catch {
        continue;
      }
      if (typeof entry.moved === 'string' && typeof entry.change === 'object' && entry.change !== null) {
        this.#remember(entry.moved, entry.change as RunChange);
        continue;
      }
      if (typeof entry.run !== 'string') continue;
      if (typeof entry.cwd === 'string' && typeof entry.from === 'number')
        begun.set(entry.run, {
          cwd: entry.cwd,
          from: entry.from,
          ...(typeof entry.cwdChanged === 'number' ? { cwdChanged: entry.cwdChanged } : {}),
          ...(typeof entry.cwdId === 'string' ? { cwdId: entry.cwdId } : {}),
        });
      else if (typeof entry.to === 'number') {
        const start = begun.get(entry.run);
        begun.delete(entry.run);
        if (start !== undefined) this.#windows.push({ runId: entry.run, ...start, to: entry.to });
      }
    }
    // Runs of an earlier process that never ended (it was killed): their window lasts until now.
    for (const [runId, start] of begun) {
      this.#windows.push({ runId, ...start, to: started });
      this.#endedAtStart.push({ run: runId, to: started });
    }
    this.#windows.sort((a, b) => a.to - b.to);
    this.#windows.splice(0, Math.max(0, this.#windows.length - MAX_WINDOWS));
    if (begun.size > 0 || text.split('\n').length > 2 * MAX_WINDOWS) this.#rewrite();
  }

  /**
   * Cluster mode: each entry this node keeps from now on (a run's start and end, a file found
   * moved) goes to `sink` too, for the other nodes' `absorb`; so do the ends this process gave runs
   * an earlier one left open. The nodes share the projects' files, so each must know every node's
   * windows.
   */
  share(sink: (entry: object) => void): void {
    this.#share = sink;
    for (const entry of this.#endedAtStart.splice(0)) sink(entry);
  }

  /**
   * An entry another node kept (see `share`). A run of another node is open until an end of it
   * comes from any node (a run taken over ends on the node that took it): a node that is gone for
   * good leaves its runs' folders distrusted, which errs on the safe side.
   */
  absorb(entry: unknown, node: string): void {
    if (typeof entry !== 'object' || entry === null) return;
    const { run, cwd, from, cwdChanged, cwdId, to, moved, change } = entry as Record<string, unknown>;
    if (typeof moved === 'string' && typeof change === 'object' && change !== null) {
      this.#remember(moved, change as RunChange);
      return;
    }
    if (typeof run !== 'string') return;
    if (typeof cwd === 'string' && typeof from === 'number') {
      this.#foreign.set(`${node}\0${run}`, {
        runId: run,
        cwd,
        from,
        to: Infinity,
        ...(typeof cwdChanged === 'number' ? { cwdChanged } : {}),
        ...(typeof cwdId === 'string' ? { cwdId } : {}),
      });
    } else if (typeof to === 'number') this.#ended(run, to);
  }

  /** Closes the other nodes' windows of run `runId`: they end at `to`. */
  #ended(runId: string, to: number): void {
    for (const [key, window] of this.#foreign)
      if (window.runId === runId) {
        this.#foreign.delete(key);
        this.#windows.push({ ...window, to: Math.max(to, window.from) });
        if (this.#windows.length > MAX_WINDOWS) this.#windows.shift();
      }
  }

  /** A run starts in `cwd`: its window opens. Returns what ends it (once). */
  begin(runId: string, cwd: string): () => void {
    const where = real(cwd);
    const cwdChanged = changeTimes(where)[0]?.at;
    const cwdId = identity(where);
    const start: Start = {
      cwd: where,
      from: this.#now(),
      ...(cwdChanged === undefined ? {} : { cwdChanged }),
      ...(cwdId === undefined ? {} : { cwdId }),
    };
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
      this.#ended(runId, to);
      this.#append({ run: runId, to });
    };
  }

  /**
   * The run during which one of `paths` (each as it is and, for a link, what it leads to) last
   * changed while that run could write there, if there is one; else undefined.
   */
  changedDuringRun(...paths: string[]): RunChange | undefined {
    return this.changedDuringOtherRun(undefined, paths);
  }

  /**
   * `changedDuringRun`, leaving out the window of run `runId` (one that asks about its own start),
   * and the runs whose commands `writable` says could not change `path` (the sandbox kept it
   * read-only in their cwd: a change then was not theirs): one of `paths` for the run it changed
   * in, the folder on its way for the run that moved it.
   */
  changedDuringOtherRun(
    runId: string | undefined,
    paths: readonly string[],
    writable: (window: WriteWindow, path: string) => boolean = () => true,
  ): RunChange | undefined {
    const now = this.#now();
    const all: WriteWindow[] = [
      ...this.#windows,
      ...[...this.#open].map(([id, open]) => ({ runId: id, ...open, to: now })),
      ...[...this.#foreign.values()].map((open) => ({ ...open, to: now })),
    ];
    const windows = all.filter((window) => window.runId !== runId);
    const during = (at: number, window: WriteWindow): boolean =>
      at >= window.from - SLACK_MS && at <= window.to + SLACK_MS;
    // Under a run's cwd by its path, or by its identity: a folder above the path is that cwd,
    // renamed, moved or reached by another path since.
    const idsAbove = new Map<string, Set<string>>();
    const under = (where: string, window: WriteWindow): boolean => {
      if (isWithin(where, window.cwd)) return true;
      if (window.cwdId === undefined) return false;
      let ids = idsAbove.get(where);
      if (ids === undefined) {
        ids = new Set();
        for (let folder = where; ; folder = dirname(folder)) {
          const id = identity(folder);
          if (id !== undefined) ids.add(id);
          if (dirname(folder) === folder) break;
        }
        idsAbove.set(where, ids);
      }
      return ids.has(window.cwdId);
    };
    // A folder's change times: its own now, and from before each run in it began.
    const folderTimes = new Map<string, number[]>();
    const timesOf = (folder: string): number[] => {
      let times = folderTimes.get(folder);
      if (times === undefined) {
        times = changeTimes(folder)
          .slice(0, 1)
          .map(({ at }) => at);
        for (const { cwd, cwdChanged } of all)
          if (cwd === folder && cwdChanged !== undefined) times.push(cwdChanged);
        folderTimes.set(folder, times);
      }
      return times;
    };
    for (const path of paths)
      for (const { at, path: where } of changeTimes(path)) {
        const found = this.#moved.get(`${where}\0${at}`);
        const { movedBy } = found ?? {};
        if (
          found !== undefined &&
          movedBy !== undefined &&
          ![found.runId, movedBy.runId].includes(runId ?? '') &&
          writable(found, path) &&
          writable(movedBy, movedBy.folder)
        )
          return found;
        for (const window of windows)
          if (during(at, window) && under(where, window) && writable(window, path))
            return { ...window, path: where };
        // Moved into place: changed during a run, then a folder on its way, strictly inside another
        // run's cwd, changed during that one, not before the path did. The other run could move
        // only what lies in its cwd: the first run's cwd lies there too (a run elsewhere, while the
        // user edited the file, is not one).
        const changedIn = windows
          .filter((window) => during(at, window) && writable(window, path))
          .sort((a, b) => Number(at < b.from || at > b.to) - Number(at < a.from || at > a.to));
        if (changedIn.length === 0) continue;
        for (const window of windows) {
          if (window.to + SLACK_MS < at) continue;
          const first = changedIn.find((candidate) => isWithin(candidate.cwd, window.cwd));
          if (first === undefined) continue;
          for (let folder = dirname(where); folder !== window.cwd && isWithin(folder, window.cwd);) {
            const moved = timesOf(folder).some((changed) => changed >= at && during(changed, window));
            if (moved && writable(window, folder)) {
              const change = { ...first, path: where, movedBy: { ...window, folder } };
              const key = `${where}\0${at}`;
              this.#remember(key, change);
              this.#append({ moved: key, change });
              return change;
            }
            folder = dirname(folder);
          }
        }
      }
    return undefined;
  }

  #remember(key: string, change: RunChange): void {
    this.#moved.delete(key);
    this.#moved.set(key, change);
    for (const oldest of this.#moved.keys()) {
      if (this.#moved.size <= MAX_MOVED) break;
      this.#moved.delete(oldest);
    }
  }

  #append(entry: object): void {
    this.#share?.(entry);
    // An earlier line was lost (or left half written, which would take this one with it): the file
    // is written whole from what this process knows, its open windows too, as soon as it can be.
    if (this.#lost) {
      this.#lost = !this.#rewrite();
      return;
    }
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
        // A state dir that cannot be written: the windows of this process are still known to it,
        // and the next entry writes them all.
        this.#lost = true;
      }
    }
  }

  /** Writes the file whole (by a rename): whether it could. */
  #rewrite(): boolean {
    const lines = [
      ...this.#windows.flatMap(({ runId, to, ...start }) => [
        JSON.stringify({ run: runId, ...start }),
        JSON.stringify({ run: runId, to }),
      ]),
      ...[...this.#open].map(([runId, start]) => JSON.stringify({ run: runId, ...start })),
      ...[...this.#moved].map(([moved, change]) => JSON.stringify({ moved, change })),
    ];
    try {
      mkdirSync(dirname(this.#file), { recursive: true, mode: 0o700 });
      writeFileSync(`${this.#file}.tmp`, lines.length > 0 ? `${lines.join('\n')}\n` : '', { mode: 0o600 });
      renameSync(`${this.#file}.tmp`, this.#file);
      return true;
    } catch {
      return false; // kept as it was: read again at the next start
    }
  }
}
