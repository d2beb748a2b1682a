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

/** A third of the cap is the head, the rest the tail (a test log's failures and summary come last). */
const HEAD_BYTES = Math.floor(OUTPUT_CAP_BYTES / 3);
const isContinuation = (byte: number | undefined) => byte !== undefined && (byte & 0xc0) === 0x80;

/**
 * What the model is shown: at most OUTPUT_CAP_BYTES of `value` (UTF-8), its head and its tail with
 * "[… N bytes cut …]" between them. Never cuts a character in two.
 */
export function capForModel(value: string): string {
  const bytes = Buffer.from(value, 'utf8');
  if (bytes.length <= OUTPUT_CAP_BYTES) return value;
  let headEnd = HEAD_BYTES;
  while (headEnd > 0 && isContinuation(bytes[headEnd])) headEnd -= 1;
  let tailStart = bytes.length - (OUTPUT_CAP_BYTES - HEAD_BYTES);
  while (tailStart < bytes.length && isContinuation(bytes[tailStart])) tailStart += 1;
  const head = bytes.subarray(0, headEnd).toString('utf8');
  const tail = bytes.subarray(tailStart).toString('utf8');
  return `${head}\n[… ${tailStart - headEnd} bytes cut …]\n${tail}`;
}
