// Extension Stop hooks: in-process handlers registered for HookEvent.Stop, plus Claude Code
// `hooks.json` files, whose Stop command hooks run unchanged. Fail-open, like StopHookVerifier.
import { readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { z } from 'zod';
import { VerificationError } from './errors.js';
import { HookRunner, type HookRunnerOptions } from './internal/hook-runner.js';
import {
  ShellStopHook,
  type StopHookContext,
  type StopHookHandler,
  type StopHookVerdict,
} from './stop-hooks.js';
import type { TurnVerifier, TurnVerifyContext, VerifierVerdict } from './turn-verifier.js';

export const HookEvent = { Stop: 'Stop' } as const;
export type HookEvent = (typeof HookEvent)[keyof typeof HookEvent];

export type StopHookFunction = (ctx: StopHookContext, signal: AbortSignal) => Promise<StopHookVerdict>;

const hooksFileSchema = z.object({
  hooks: z
    .object({
      Stop: z
        .array(
          z.object({
            matcher: z.string().optional(),
            hooks: z.array(
              z.object({
                type: z.string(),
                command: z.string().min(1).optional(),
                timeout: z.number().positive().optional(),
              }),
            ),
          }),
        )
        .optional(),
    })
    .loose(),
});

/** The Stop command hooks of a Claude Code `hooks.json` (timeouts there are in seconds). */
export function loadHooksFile(path: string): ShellStopHook[] {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (error) {
    throw new VerificationError('invalid_hooks_file', `${path}: ${(error as Error).message}`, {
      cause: error,
    });
  }
  const parsed = hooksFileSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new VerificationError(
      'invalid_hooks_file',
      `${path}: ${issue?.path.join('.') ?? ''} ${issue?.message ?? 'is invalid'}`.trim(),
    );
  }
  const hooks: ShellStopHook[] = [];
  for (const [groupIndex, group] of (parsed.data.hooks.Stop ?? []).entries()) {
    for (const [index, hook] of group.hooks.entries()) {
      if (hook.type !== 'command' || hook.command === undefined) continue;
      hooks.push(
        new ShellStopHook({
          name: `${path}#Stop[${groupIndex}].hooks[${index}]`,
          command: hook.command,
          timeoutMs: (hook.timeout ?? 60) * 1000,
          cwd: dirname(path),
        }),
      );
    }
  }
  return hooks;
}

export class ExtensionStopHookVerifier implements TurnVerifier {
  readonly name = 'extension_stop_hooks';
  readonly #handlers: StopHookHandler[] = [];
  readonly #runner: HookRunner;

  constructor(options: HookRunnerOptions & { readonly files?: readonly string[] } = {}) {
    this.#runner = new HookRunner(options);
    for (const file of options.files ?? []) this.#handlers.push(...loadHooksFile(file));
  }

  get handlers(): readonly StopHookHandler[] {
    return this.#handlers;
  }

  /** Registers a handler; returns a function that unregisters it. */
  register(event: HookEvent, handler: StopHookHandler | StopHookFunction, name = 'extension'): () => void {
    if (event !== HookEvent.Stop)
      throw new VerificationError('invalid_config', `unknown hook event ${String(event)}`);
    const entry: StopHookHandler = typeof handler === 'function' ? { name, evaluate: handler } : handler;
    this.#handlers.push(entry);
    return () => {
      const index = this.#handlers.indexOf(entry);
      if (index >= 0) this.#handlers.splice(index, 1);
    };
  }

  verify(ctx: TurnVerifyContext, signal: AbortSignal): Promise<VerifierVerdict> {
    return this.#runner.run([...this.#handlers], ctx, signal);
  }
}
