// The instruction files a run's model reads after Aleph's role prompt, in this order: the user's
// `CLAUDE.md` (`$CLAUDE_CONFIG_DIR/CLAUDE.md`, else `~/.claude/CLAUDE.md`), then for each folder from
// the git root down to the run's cwd its `AGENTS.md`, `CLAUDE.md`, `.claude/CLAUDE.md` and
// `CLAUDE.local.md` — the more specific later. `@path` imports in the CLAUDE files are followed as
// Claude Code follows them (relative to the importing file, `~/` from home, never inside code, at
// most 5 hops), each imported file right after the one importing it; an import may reach the project
// (the git root) and the user's Claude folder, nothing else. Each file is capped, and so is the whole;
// a cut says so in the prompt. Nothing here throws: a file that cannot be read, an import cycle, an
// import from outside, a cap reached — each is a warning naming the file, and the run goes on.
import { readModelWritableFile, type ModelFile } from '@aleph/sandbox';
import { lstatSync, realpathSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { deniedBy, type DeniedEntry } from './workdir-files.js';

/** Characters of one file the model gets; the rest is cut (and the cut said). */
export const INSTRUCTION_FILE_CAP = 40_000;
/** Characters of the whole section: the files, each one's heading and cut note, the preamble. */
export const INSTRUCTION_TOTAL_CAP = 100_000;
/** Files loaded; past it, loading stops (said once, naming the file it stopped at). */
export const MAX_INSTRUCTION_FILES = 100;
/** Warnings listed; the rest are counted in one more. */
export const MAX_INSTRUCTION_WARNINGS = 20;
/** Characters of one warning: past it, its middle (a long import path) is left out and counted. */
export const MAX_INSTRUCTION_WARNING_CHARS = 1_000;

/** A warning within MAX_INSTRUCTION_WARNING_CHARS: its beginning and its end (the reason), the middle counted. */
function bounded(warning: string): string {
  if (warning.length <= MAX_INSTRUCTION_WARNING_CHARS) return warning;
  const head = 600;
  const tail = 300;
  return `${warning.slice(0, head)} … (${warning.length - head - tail} characters not shown) … ${warning.slice(-tail)}`;
}

const PREAMBLE = `# Instruction files\n\nThe user's and the project's instructions (AGENTS.md, CLAUDE.md), in this order: the user's own first, then the project's from its root down to the working folder. Follow them; where two differ, the later (more specific) one wins.\n\n`;
/** How many `@path` hops are followed from a file found by its name (Claude Code: 5). */
export const MAX_IMPORT_DEPTH = 5;

export interface LoadedInstructionFile {
  /** Relative to the project root when inside it, `~/…` under home, else absolute. */
  readonly path: string;
  /** The file's size in bytes. */
  readonly bytes: number;
  /** True when only its first part was sent (a cap). */
  readonly cut?: boolean;
  /** The file that imported it with `@path`. */
  readonly importedBy?: string;
}

export interface InstructionFiles {
  /** The section for the system prompt; '' when no file was found. */
  readonly text: string;
  readonly files: readonly LoadedInstructionFile[];
  /** What was not loaded and why, each naming the file (and the import). */
  readonly warnings: readonly string[];
}

export interface InstructionFilesOptions {
  /** The run's cwd. */
  readonly cwd: string;
  /** Default: the OS home. */
  readonly home?: string;
  /** Default: `$CLAUDE_CONFIG_DIR`, else `<home>/.claude`. */
  readonly userDir?: string;
  /** Paths never read (the sandbox's denied paths: deny_read, ~/.ssh, the state dir, the config). */
  readonly denied?: readonly DeniedEntry[] | undefined;
}

/** The folder holding `.git` (a folder, or a worktree's file) at or above `cwd`; `cwd` when there is none. */
export function projectRoot(cwd: string): string {
  for (let folder = cwd; ; folder = dirname(folder)) {
    if (exists(join(folder, '.git'))) return folder;
    if (dirname(folder) === folder) return cwd;
  }
}

function exists(path: string): boolean {
  try {
    lstatSync(path, { bigint: true }); // bigint: a FIFO in Node 20's shared stat array broke the next import()
    return true;
  } catch {
    return false;
  }
}

const inside = (root: string, path: string): boolean => {
  const rel = relative(root, path);
  return rel === '' || (rel !== '..' && !rel.startsWith(`..${sep}`) && !isAbsolute(rel));
};

/** `@path` tokens outside code spans and fenced blocks; `@name` without `/` or `.` is a mention. */
export function importsOf(text: string): string[] {
  const found: string[] = [];
  let fence: string | undefined;
  for (const line of text.split('\n')) {
    const marker = /^\s*(`{3,}|~{3,})/.exec(line)?.[1];
    if (marker !== undefined) {
      if (fence === undefined) fence = marker[0];
      else if (marker[0] === fence) fence = undefined;
      continue;
    }
    if (fence !== undefined) continue;
    const prose = line.replace(/(`+)[\s\S]*?\1/g, ' ');
    for (const match of prose.matchAll(/(?:^|\s)@((?:[^\s\\]|\\ )+)/g)) {
      const path = trimPunctuation(match[1]!.replace(/\\ /g, ' ').replace(/#.*$/, ''));
      if (/[/.]/.test(path)) found.push(path);
    }
  }
  return found;
}

/** `path` without the punctuation that ends a sentence around it, in linear time. */
function trimPunctuation(path: string): string {
  let end = path.length;
  while (end > 0 && '),.;:!?'.includes(path[end - 1]!)) end -= 1;
  return path.slice(0, end);
}

/** The warning for a file not read (`outside`: the caller says it), or none (a file looked for by name is not there). */
function refusal(
  read: Exclude<ModelFile, { kind: 'read' }>,
  said: string,
  imported: boolean,
  denied: readonly DeniedEntry[],
): string | undefined {
  if (read.kind === 'missing') return imported ? `${said} not found; skipped` : undefined;
  switch (read.why) {
    case 'unresolved':
      return imported
        ? `${said} not found; skipped`
        : `${said}: cannot be read (${read.code ?? 'error'}); skipped`;
    case 'outside':
      return 'outside';
    case 'denied': {
      const under = deniedBy(read.real ?? '', denied);
      return `${said} is under ${under?.path ?? read.under ?? ''}, denied by ${under?.key ?? 'the sandbox'}; skipped`;
    }
    case 'not_file':
      return `${said} is not a file; skipped`;
    case 'changed':
      return `${said} changed while it was being opened; skipped`;
    default:
      return `${said} cannot be read (${read.code ?? 'error'}); skipped`;
  }
}

export function loadInstructionFiles(options: InstructionFilesOptions): InstructionFiles {
  const home = options.home ?? homedir();
  const userDir = options.userDir ?? process.env['CLAUDE_CONFIG_DIR'] ?? join(home, '.claude');
  let cwd: string;
  try {
    cwd = realpathSync(options.cwd);
  } catch {
    return {
      text: '',
      files: [],
      warnings: [`${options.cwd}: the run's cwd cannot be read; no instruction file loaded`],
    };
  }
  const root = projectRoot(cwd);
  const realUserDir = ((): string => {
    try {
      return realpathSync(userDir);
    } catch {
      return userDir;
    }
  })();
  const files: LoadedInstructionFile[] = [];
  const warnings: string[] = [];
  let unsaid = 0;
  const warn = (warning: string): void => {
    if (warnings.length < MAX_INSTRUCTION_WARNINGS) warnings.push(bounded(warning));
    else unsaid += 1;
  };
  const sections: string[] = [];
  const loaded = new Set<string>();
  let total = PREAMBLE.length;
  let stoppedAt: string | undefined;
  const stop = (said: string, why: string): void => {
    stoppedAt = `${said} and any instruction file after it not loaded: ${why}`;
  };
  const shown = (path: string): string =>
    inside(root, path)
      ? relative(root, path) || '.'
      : inside(home, path) && home !== '/'
        ? `~/${relative(home, path)}`
        : path;

  /** Loads `path` and what it imports; `chain` holds the real paths importing it (for cycles). */
  const add = (path: string, chain: readonly string[], importedBy?: string): void => {
    if (stoppedAt !== undefined) return;
    const name = shown(path);
    const said = importedBy === undefined ? name : `${importedBy}: @${name}`;
    const outside = `${said} is outside the project (${root}) and the user's Claude folder; skipped`;
    if (
      importedBy !== undefined &&
      !inside(root, path) &&
      !inside(realUserDir, path) &&
      !inside(userDir, path)
    ) {
      warn(outside);
      return;
    }
    // Its heading and the blank line before it count in the total, as its text does.
    const heading = `## ${name}${importedBy === undefined ? '' : ` (imported by ${importedBy})`}\n\n`;
    const left = INSTRUCTION_TOTAL_CAP - total - heading.length - (sections.length === 0 ? 0 : 2);
    const room = Math.min(INSTRUCTION_FILE_CAP, left);
    // Never blocks (a FIFO), never follows a link out of the project and the Claude folder, nor to a
    // denied path, and checks again what it opened (a folder on the way swapped for a link since).
    const read = readModelWritableFile(path, {
      roots: [root, realUserDir],
      denied: (options.denied ?? []).map((entry) => entry.path),
      maxBytes: Math.max(room, 0) * 4 + 4, // UTF-8: at most 4 bytes a character
      larger: 'head',
    });
    if (read.kind !== 'read') {
      const warning = refusal(read, said, importedBy !== undefined, options.denied ?? []);
      // A file found by its name that is a link out of the project: the model may have made it.
      const linked = `${said} is a link outside the project (${root}) and the user's Claude folder; skipped`;
      if (warning === 'outside') warn(importedBy === undefined ? linked : outside);
      else if (warning !== undefined) warn(warning);
      return;
    }
    const { real } = read;
    if (chain.includes(real)) {
      warn(`${said} is an import cycle (${[...chain, real].map(shown).join(' → ')}); not loaded again`);
      return;
    }
    if (loaded.has(real)) return; // already in the prompt (found by name, or imported before)
    loaded.add(real);
    const full = `the instruction files already fill ${INSTRUCTION_TOTAL_CAP} characters`;
    if (files.length >= MAX_INSTRUCTION_FILES)
      return stop(said, `at most ${MAX_INSTRUCTION_FILES} instruction files are loaded`);
    if (room <= 0) return stop(said, full);
    const size = read.bytes;
    const head = { text: read.text, whole: read.whole };
    if (head.text.includes('\u0000')) {
      warn(`${said} is not text (it holds NUL bytes); skipped`);
      return;
    }
    const cut = !head.whole || head.text.length > room;
    const cutSaid = (chars: number): string =>
      `only its first ${chars} characters of ${size} bytes were sent (cap: ${
        chars < INSTRUCTION_FILE_CAP
          ? `${INSTRUCTION_TOTAL_CAP} characters for all instruction files`
          : `${INSTRUCTION_FILE_CAP} characters per file`
      })`;
    const note = (chars: number): string => `\n\n[Cut here: ${cutSaid(chars)}.]`;
    // A cut one's note counts too: the text gives it room (the figure in it only gets shorter).
    const keep = cut ? Math.min(INSTRUCTION_FILE_CAP, left - note(room).length) : head.text.length;
    if (keep <= 0) return stop(said, full);
    const kept = head.text.slice(0, keep);
    if (cut) warn(`${said} cut: ${cutSaid(kept.length)}`);
    files.push({
      path: name,
      bytes: size,
      ...(cut ? { cut } : {}),
      ...(importedBy === undefined ? {} : { importedBy }),
    });
    const section = `${heading}${kept.trim()}${cut ? note(kept.length) : ''}`;
    total += section.length + (sections.length === 0 ? 0 : 2);
    sections.push(section);
    // Imports: in CLAUDE files and in what they import (AGENTS.md is read as it is, like other agents do).
    if (importedBy === undefined && !/^CLAUDE(\.local)?\.md$/.test(real.slice(real.lastIndexOf(sep) + 1)))
      return;
    for (const target of importsOf(kept)) {
      const resolved = target.startsWith('~/') ? join(home, target.slice(2)) : resolve(dirname(path), target);
      if (chain.length + 1 > MAX_IMPORT_DEPTH)
        warn(`${name}: @${target} not followed: imports are followed at most ${MAX_IMPORT_DEPTH} deep`);
      else add(resolved, [...chain, real], name);
    }
  };

  add(join(userDir, 'CLAUDE.md'), []);
  const folders: string[] = [];
  for (let folder = cwd; ; folder = dirname(folder)) {
    folders.unshift(folder);
    if (folder === root || dirname(folder) === folder) break;
  }
  for (const folder of folders)
    for (const file of ['AGENTS.md', 'CLAUDE.md', join('.claude', 'CLAUDE.md'), 'CLAUDE.local.md'])
      add(join(folder, file), []);

  if (stoppedAt !== undefined) warnings.push(bounded(stoppedAt));
  if (unsaid > 0) warnings.push(`${unsaid} more warning(s) about instruction files not listed`);
  const text = sections.length === 0 ? '' : `${PREAMBLE}${sections.join('\n\n')}`;
  return { text, files, warnings };
}
