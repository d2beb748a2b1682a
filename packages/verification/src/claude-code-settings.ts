// Claude Code hook settings, found where Claude Code looks: `~/.claude/settings.json`, then the
// project's `.claude/settings.json` and `.claude/settings.local.json`, then files the caller names
// (`[hooks] files`) and plugins (`<plugin>/hooks/hooks.json`, with `CLAUDE_PLUGIN_ROOT`). Hooks
// from all of them are merged; identical ones run once. What Aleph does not run (other events,
// `prompt`/`agent`/`http` hooks) is a warning at load that names the hook, never a silent skip.
import { readModelWritableFile, type ModelFile } from '@aleph/sandbox';
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { basename, dirname, join, relative, resolve, sep } from 'node:path';
import { z } from 'zod';
import { VerificationError } from './errors.js';
import { compileLinear, type LinearRegex } from './internal/linear-regex.js';
import { CLAUDE_CODE_HOOK_TIMEOUT_MS } from './stop-hooks.js';

/** The longest timer Node.js can set (2^31-1 ms); a longer one would fire after 1 ms. */
export const MAX_HOOK_TIMEOUT_SECS = 2_147_483;

export const CLAUDE_CODE_EVENTS = [
  'Stop',
  'SubagentStop',
  'PreToolUse',
  'PostToolUse',
  'PostToolUseFailure',
  'SessionStart',
  'UserPromptSubmit',
  'PreCompact',
  'Notification',
  'SessionEnd',
] as const;
export type ClaudeCodeEvent = (typeof CLAUDE_CODE_EVENTS)[number];
const TOOL_EVENTS: readonly string[] = ['PreToolUse', 'PostToolUse', 'PostToolUseFailure'];

export interface ClaudeCodeCommandHook {
  /** `<file>#<Event>[group].hooks[index]`, the file relative to the project (or `~/…`). */
  readonly name: string;
  readonly event: ClaudeCodeEvent;
  /**
   * Tool events: a tool name, `A|B`, a regex, or `*`/empty for every tool. SessionStart: the source,
   * PreCompact: the trigger, Notification: the type, SessionEnd: the reason (UserPromptSubmit: none).
   */
  readonly matcher?: string;
  /** PreToolUse/PostToolUse: a permission rule (`Bash(git *)`) the call must match, or the hook does not run. */
  readonly if?: string;
  readonly command: string;
  readonly args?: readonly string[];
  readonly timeoutMs: number;
  readonly pluginRoot?: string;
  /**
   * Runs through the runner's `wrap` (the sandbox): its file is one the caller's `sandboxFile` named
   * (the model's commands may have written it).
   */
  readonly sandbox?: boolean;
}

export interface ClaudeCodeHooks {
  readonly hooks: readonly ClaudeCodeCommandHook[];
  /** One line per hook or event Aleph does not run, naming it. */
  readonly warnings: readonly string[];
  /** The files that were read, in order. */
  readonly files: readonly string[];
}

export interface DiscoverClaudeCodeHooksOptions {
  /** The run's project root: `.claude/settings*.json` are read there, and every hook runs there. */
  readonly projectDir: string;
  /**
   * The home whose `.claude/settings.json` is read; `null` skips user settings. Default: Claude
   * Code's own rule, `$CLAUDE_CONFIG_DIR/settings.json`, else `~/.claude/settings.json`.
   */
  readonly home?: string | null;
  /** More hooks files (`[hooks] files`), already resolved by the caller; a missing one is an error. */
  readonly files?: readonly string[];
  /** Plugin folders, each with a `hooks/hooks.json`. */
  readonly plugins?: readonly string[];
  /**
   * Real paths the project's settings files may not lead to (the sandbox's denied paths): such a
   * file, or one whose real path is outside the project, is skipped with a warning, never read.
   */
  readonly deniedPaths?: readonly string[] | undefined;
  /**
   * For each hooks file that is there (the project's, the user's `~/.claude/settings.json`, which
   * may be a link into a project, `files`, plugins'): why its hooks must run in the sandbox (it
   * changed while the model's commands could write it), a warning after the file's name; such a
   * file's `disableAllHooks` is not obeyed (said). Undefined: they run as the user.
   */
  readonly sandboxFile?: ((file: string) => string | undefined) | undefined;
}

const hookEntrySchema = z.looseObject({
  type: z.string(),
  command: z.string().min(1).optional(),
  args: z.array(z.string()).optional(),
  timeout: z.number().positive().optional(),
  if: z.string().optional(),
});
const hooksFileSchema = z.looseObject({
  disableAllHooks: z.boolean().optional(),
  hooks: z
    .record(
      z.string(),
      z.array(z.looseObject({ matcher: z.string().optional(), hooks: z.array(hookEntrySchema) })),
    )
    .optional(),
});

function displayPath(path: string, projectDir: string, home: string | null): string {
  const fromProject = relative(projectDir, path);
  if (!fromProject.startsWith('..') && !fromProject.startsWith(sep)) return fromProject;
  if (home !== null && path.startsWith(home + sep)) return `~/${relative(home, path)}`;
  return path;
}

/**
 * A hooks file's text, read by @aleph/sandbox's readModelWritableFile (never blocking: a FIFO in its
 * place held the thread for good; a regular file of at most 1 MiB), else invalid_hooks_file.
 */
function settingsText(path: string, read: ModelFile = readModelWritableFile(path)): string {
  if (read.kind === 'read') return read.text;
  const why = read.kind === 'missing' ? 'does not exist' : read.reason;
  throw new VerificationError('invalid_hooks_file', `${path}: ${why}`);
}

interface ParsedHooksFile {
  hooks: ClaudeCodeCommandHook[];
  warnings: string[];
  disableAllHooks: boolean;
}

/** A hooks file's hooks (settings file or plugin `hooks.json`). */
export function parseClaudeCodeHooksFile(
  path: string,
  displayName: string = path,
  pluginRoot?: string,
): ParsedHooksFile {
  return parseHooksText(settingsText(path), path, displayName, pluginRoot, false);
}

function parseHooksText(
  text: string,
  path: string,
  displayName: string,
  pluginRoot: string | undefined,
  sandbox: boolean,
): ParsedHooksFile {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (error) {
    // Never the text itself (V8 quotes it): a project file may be a link the model made.
    const at = / at position \d+(?: \(line \d+ column \d+\))?/.exec((error as Error).message)?.[0] ?? '';
    throw new VerificationError('invalid_hooks_file', `${path}: not valid JSON${at}`);
  }
  const parsed = hooksFileSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new VerificationError(
      'invalid_hooks_file',
      `${path}: ${issue?.path.join('.') ?? ''} ${issue?.message ?? 'is invalid'}`.trim(),
    );
  }
  const hooks: ClaudeCodeCommandHook[] = [];
  const warnings: string[] = [];
  for (const [event, groups] of Object.entries(parsed.data.hooks ?? {})) {
    if (!(CLAUDE_CODE_EVENTS as readonly string[]).includes(event)) {
      warnings.push(
        `${displayName}: ${event} hooks are not run by Aleph (it runs ${CLAUDE_CODE_EVENTS.join(', ')})`,
      );
      continue;
    }
    for (const [groupIndex, group] of groups.entries()) {
      for (const [index, entry] of group.hooks.entries()) {
        const name = `${displayName}#${event}[${groupIndex}].hooks[${index}]`;
        if (entry.type !== 'command') {
          warnings.push(`${name}: type "${entry.type}" hooks are not run by Aleph (only "command"); skipped`);
          continue;
        }
        if (entry.command === undefined) {
          warnings.push(`${name}: a command hook without "command"; skipped`);
          continue;
        }
        if (entry.if !== undefined && !TOOL_EVENTS.includes(event)) {
          warnings.push(`${name}: "if" is only read on tool events; as in Claude Code, this hook never runs`);
          continue;
        }
        if (entry.timeout !== undefined && entry.timeout > MAX_HOOK_TIMEOUT_SECS)
          warnings.push(
            `${name}: timeout ${entry.timeout} s is longer than Node.js can wait; ${MAX_HOOK_TIMEOUT_SECS} s is used`,
          );
        if ('onFailure' in entry)
          warnings.push(`${name}: "onFailure" is not read by Aleph; a failing hook is reported and ignored`);
        if (group.matcher !== undefined && matcherProblem(group.matcher) !== undefined)
          warnings.push(
            `${name}: matcher ${JSON.stringify(group.matcher)} ${matcherProblem(group.matcher)}; it matches nothing`,
          );
        hooks.push({
          name,
          event: event as ClaudeCodeEvent,
          ...(group.matcher === undefined ? {} : { matcher: group.matcher }),
          ...(entry.if === undefined ? {} : { if: entry.if }),
          command: entry.command,
          ...(entry.args === undefined ? {} : { args: entry.args }),
          timeoutMs:
            entry.timeout === undefined
              ? CLAUDE_CODE_HOOK_TIMEOUT_MS
              : Math.min(entry.timeout, MAX_HOOK_TIMEOUT_SECS) * 1000,
          ...(pluginRoot === undefined ? {} : { pluginRoot }),
          ...(sandbox ? { sandbox } : {}),
        });
      }
    }
  }
  return { hooks, warnings, disableAllHooks: parsed.data.disableAllHooks === true };
}

/** A `hooks/hooks.json` inside a folder with `.claude-plugin/plugin.json` is a plugin's. */
function pluginRootOf(file: string): string | undefined {
  const folder = dirname(file);
  if (basename(file) !== 'hooks.json' || basename(folder) !== 'hooks') return undefined;
  const root = dirname(folder);
  return existsSync(join(root, '.claude-plugin', 'plugin.json')) ? root : undefined;
}

export function discoverClaudeCodeHooks(options: DiscoverClaudeCodeHooksOptions): ClaudeCodeHooks {
  const projectDir = resolve(options.projectDir);
  const home = options.home === undefined ? homedir() : options.home;
  const configDir = process.env['CLAUDE_CONFIG_DIR'];
  const userSettings =
    options.home === undefined && configDir !== undefined && configDir !== ''
      ? join(resolve(configDir), 'settings.json')
      : home === null
        ? undefined
        : join(home, '.claude', 'settings.json');
  const sources: { path: string; required: boolean; pluginRoot?: string; project?: boolean }[] = [
    ...(userSettings === undefined ? [] : [{ path: userSettings, required: false }]),
    { path: join(projectDir, '.claude', 'settings.json'), required: false, project: true },
    { path: join(projectDir, '.claude', 'settings.local.json'), required: false, project: true },
    ...(options.files ?? []).map((file) => {
      const pluginRoot = pluginRootOf(resolve(file));
      return { path: resolve(file), required: true, ...(pluginRoot === undefined ? {} : { pluginRoot }) };
    }),
    ...(options.plugins ?? []).map((root) => ({
      path: join(resolve(root), 'hooks', 'hooks.json'),
      required: true,
      pluginRoot: resolve(root),
    })),
  ];
  const hooks: ClaudeCodeCommandHook[] = [];
  const warnings: string[] = [];
  const files: string[] = [];
  const seen = new Set<string>();
  let disabledBy: string | undefined;
  for (const source of sources) {
    if (files.includes(source.path)) continue;
    if (!source.required && !existsSync(source.path)) continue;
    const shown = displayPath(source.path, projectDir, home);
    const project = source.project === true;
    // The project's own files (the model can write them): a link out of the project or to a denied path is skipped.
    const read = readModelWritableFile(
      source.path,
      project ? { roots: [projectDir], denied: options.deniedPaths } : {},
    );
    if (read.kind === 'refused' && (read.why === 'outside' || read.why === 'denied')) {
      warnings.push(`${shown}: ${read.reason}; skipped`);
      continue;
    }
    const text = settingsText(source.path, read);
    const why = options.sandboxFile?.(source.path);
    if (why !== undefined) warnings.push(`${shown}: ${why}`);
    const loaded = parseHooksText(text, source.path, shown, source.pluginRoot, why !== undefined);
    files.push(source.path);
    warnings.push(...loaded.warnings);
    // A file the model may have written does not turn off the user's hooks (nor its own).
    if (loaded.disableAllHooks && why !== undefined)
      warnings.push(`${shown}: "disableAllHooks": true is not obeyed: the file may be the model's`);
    else if (loaded.disableAllHooks) disabledBy ??= displayPath(source.path, projectDir, home);
    for (const hook of loaded.hooks) {
      // Claude Code runs identical hook commands once.
      const key = JSON.stringify([
        hook.event,
        hook.matcher ?? '',
        hook.if ?? '',
        hook.command,
        hook.args ?? null,
        hook.pluginRoot ?? null,
      ]);
      if (seen.has(key)) continue;
      seen.add(key);
      hooks.push(hook);
    }
  }
  // Claude Code: `"disableAllHooks": true` in any settings file turns every hook off.
  if (disabledBy !== undefined)
    return {
      hooks: [],
      warnings: [...warnings, `${disabledBy}: "disableAllHooks": true; no Claude Code hook runs`],
      files,
    };
  return { hooks, warnings, files };
}

/**
 * Why a matcher cannot be used, or undefined: an invalid regex, or one RE2 does not match (a
 * backreference or a lookaround: V8 would take exponential time on some names, and a project's
 * file, maybe the model's, would hold the server).
 */
export function matcherProblem(matcher: string): string | undefined {
  if (matcher === '*') return undefined; // match-all, as matcherMatches reads it (no regular expression)
  try {
    new RegExp(matcher);
  } catch (error) {
    return `is not a valid regular expression (${(error as Error).message})`;
  }
  const linear = compileLinear(matcher);
  return 'problem' in linear ? linear.problem : undefined;
}

/**
 * Claude Code's matcher rule: absent, empty or `*` matches every tool; letters, digits, `_` and
 * `|` only → exact names; anything else is a regular expression, matched by RE2 in time linear in
 * the name. Tried on every given name.
 */
export function matcherMatches(matcher: string | undefined, names: readonly string[]): boolean {
  if (matcher === undefined || matcher === '' || matcher === '*') return true;
  if (/^[\w|]+$/.test(matcher)) {
    const alternatives = matcher.split('|');
    return names.some((name) => alternatives.includes(name));
  }
  if (matcherProblem(matcher) !== undefined) return false;
  const pattern = compileLinear(matcher) as LinearRegex; // unanchored, as Claude Code tests it
  return names.some((name) => pattern.test(name));
}
