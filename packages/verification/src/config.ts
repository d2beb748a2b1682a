// `[[stop_hooks]]` from TOML (smol-toml), validated with zod. A bad entry is an error that names the
// entry and the field; no entries means no StopHookVerifier at all (the stage is skipped).
import { parse as parseToml, TomlError } from 'smol-toml';
import { z } from 'zod';
import { VerificationError } from './errors.js';
import type { HookOutcomeListener } from './hook-outcome.js';
import type { HookRunnerOptions } from './internal/hook-runner.js';
import type { CommandWrapper } from './internal/run-process.js';
import { ShellStopHook } from './stop-hooks.js';
import { StopHookVerifier } from './stop-hook-verifier.js';

export const stopHookEntrySchema = z.strictObject({
  name: z.string({ error: 'must be a string' }).min(1, { error: 'must not be empty' }),
  command: z.string({ error: 'must be a string' }).min(1, { error: 'must not be empty' }),
  timeout_secs: z
    .number({ error: 'must be a positive number' })
    .positive({ error: 'must be a positive number' })
    .optional(),
  /** Run this hook inside the sandbox (the `wrap` the caller passes); unconfined by default. */
  sandbox: z.boolean({ error: 'must be true or false' }).optional(),
});

export const stopHooksSchema = z.array(stopHookEntrySchema, {
  error: 'must be an array of tables ([[stop_hooks]])',
});

export type StopHookEntry = z.infer<typeof stopHookEntrySchema>;

export function formatIssuePath(path: readonly PropertyKey[]): string {
  return path.reduce<string>(
    (out, part) =>
      typeof part === 'number' ? `${out}[${part}]` : out === '' ? String(part) : `${out}.${String(part)}`,
    '',
  );
}

export function parseStopHookEntries(value: unknown): StopHookEntry[] {
  const parsed = stopHooksSchema.safeParse(value ?? []);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const path = formatIssuePath(['stop_hooks', ...(issue?.path ?? [])]);
  const message =
    issue?.code === 'unrecognized_keys'
      ? `has an unknown key ${issue.keys.map((key) => JSON.stringify(key)).join(', ')}`
      : (issue?.message ?? 'is invalid');
  throw new VerificationError('invalid_config', `${path} ${message}`);
}

export function buildStopHooksFromConfig(
  config: string | { readonly stop_hooks?: unknown },
  options: HookRunnerOptions & {
    readonly cwd?: string;
    /** Used for entries with `sandbox = true`. */
    readonly wrap?: CommandWrapper;
    /** Environment variable names no hook sees (`ALEPH_TOKEN`, the provider key …). */
    readonly stripEnv?: readonly string[];
    readonly onHookOutcome?: HookOutcomeListener;
  } = {},
): StopHookVerifier | null {
  let table: { readonly stop_hooks?: unknown };
  if (typeof config === 'string') {
    try {
      table = parseToml(config);
    } catch (error) {
      const where = error instanceof TomlError ? ` (line ${error.line}, column ${error.column})` : '';
      throw new VerificationError('invalid_config', `invalid TOML${where}: ${(error as Error).message}`, {
        cause: error,
      });
    }
  } else {
    table = config;
  }
  const entries = parseStopHookEntries(table.stop_hooks);
  if (entries.length === 0) return null;
  const hooks = entries.map(
    (entry) =>
      new ShellStopHook({
        name: entry.name,
        command: entry.command,
        ...(entry.timeout_secs === undefined ? {} : { timeoutMs: entry.timeout_secs * 1000 }),
        ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
        ...(entry.sandbox === true && options.wrap !== undefined ? { wrap: options.wrap } : {}),
        stripEnv: options.stripEnv,
        onHookOutcome: options.onHookOutcome,
      }),
  );
  return new StopHookVerifier(hooks, options);
}
