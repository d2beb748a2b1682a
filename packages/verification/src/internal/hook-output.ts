// Claude Code's JSON on a hook's stdout at exit 0, parsed whole (before any cap), and the cap on
// what is fed to the model. Anything that is not a JSON object is plain text: Claude Code allows.
// A field of the wrong type is ignored, as if absent.
import { z } from 'zod';
import { OUTPUT_CAP_BYTES } from './run-process.js';

const optional = <T extends z.ZodType>(schema: T) => schema.optional().catch(undefined);

const hookJsonSchema = z.object({
  continue: optional(z.boolean()),
  stopReason: optional(z.string()),
  suppressOutput: optional(z.boolean()),
  systemMessage: optional(z.string()),
  decision: optional(z.string()),
  reason: optional(z.string()),
  hookSpecificOutput: optional(
    z.object({
      permissionDecision: optional(z.string()),
      permissionDecisionReason: optional(z.string()),
      updatedInput: optional(z.record(z.string(), z.unknown())),
      additionalContext: optional(z.string()),
    }),
  ),
});

export type HookJson = z.infer<typeof hookJsonSchema>;

export function parseHookJson(stdout: string): HookJson | undefined {
  const trimmed = stdout.trim();
  if (!trimmed.startsWith('{')) return undefined;
  try {
    const parsed = hookJsonSchema.safeParse(JSON.parse(trimmed));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

/** What the model is shown, cut at OUTPUT_CAP_BYTES (UTF-8) with a note saying how much was cut. */
export function capForModel(value: string): string {
  const bytes = Buffer.from(value, 'utf8');
  if (bytes.length <= OUTPUT_CAP_BYTES) return value;
  const kept = bytes
    .subarray(0, OUTPUT_CAP_BYTES)
    .toString('utf8')
    .replace(/\uFFFD$/, '');
  return `${kept}\n[… ${bytes.length - OUTPUT_CAP_BYTES} more bytes cut]`;
}
