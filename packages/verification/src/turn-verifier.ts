// The verifier contract: what a turn looks like to a verifier, and the verdict it returns.
// Every verifier judges structural signals only (exit codes, argument hashes, row counts);
// judging whether the task is complete is the model's job, in its prompt, never a verifier's.
import { createHash } from 'node:crypto';

export type VerifierVerdict =
  | { readonly kind: 'continue' }
  /** Forces one more turn; `feedback` is shown to the model. */
  | { readonly kind: 'veto'; readonly reason: string; readonly feedback: string; readonly source?: string }
  /**
   * Ends the loop. `stop`: a stop hook's `"continue": false` on the model's stop — the stop stands
   * and the run ends as one, `reason` being the hook's stopReason.
   */
  | { readonly kind: 'halt'; readonly reason: string; readonly source?: string; readonly stop?: true };

export const CONTINUE: VerifierVerdict = Object.freeze({ kind: 'continue' });

export interface ToolCallSummary {
  readonly name: string;
  readonly argsHash: string;
  readonly ok: boolean;
  readonly kind?: 'mutation' | 'evidence' | 'other';
}

export interface ScratchpadRow {
  readonly text: string;
  readonly status: 'open' | 'done' | 'cancelled' | 'blocked';
}

/** Per-model thresholds handed to the verifiers that use them. */
export interface RobustnessProfile {
  readonly toolLoopRepeatThreshold?: number;
  readonly toolLoopHaltThreshold?: number;
}

export interface TurnVerifyContext {
  readonly iterations: number;
  readonly toolCallsMade: number;
  readonly finalText: string;
  /** Newest last, at most TOOL_HISTORY_WINDOW; includes the calls proposed this turn. */
  readonly recentToolCalls: readonly ToolCallSummary[];
  /** How many of `recentToolCalls` (at the end) were proposed this turn; 1 when absent. */
  readonly callsThisTurn?: number;
  /** Set only when the model explicitly asked to stop. */
  readonly stopReason?: string;
  readonly sessionId?: string;
  readonly robustnessProfile?: RobustnessProfile;
  readonly scratchpad?: readonly ScratchpadRow[];
  /** The run's project root (its cwd): hooks run there and see it as `CLAUDE_PROJECT_DIR`. */
  readonly projectDir?: string;
  /** A Claude Code-format JSONL transcript of this session, handed to hooks as `transcript_path`. */
  readonly transcriptPath?: string;
  /** Claude Code's `permission_mode` for hooks (e.g. `default`, `acceptEdits`, `bypassPermissions`). */
  readonly permissionMode?: string;
  /**
   * Set by VerifierChain: this session's previous stop attempt was blocked by a Stop hook (a
   * verifier with `stopHook`): Claude Code's `stop_hook_active`. Aleph's own nudges do not set it.
   */
  readonly previousStopBlocked?: boolean;
}

export interface TurnVerifier {
  readonly name: string;
  /** Its veto is a Stop hook's block: the next stop attempt is told `stop_hook_active: true`. */
  readonly stopHook?: boolean;
  verify(ctx: TurnVerifyContext, signal: AbortSignal): Promise<VerifierVerdict>;
}

export const TOOL_HISTORY_WINDOW = 8;

function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (value !== null && typeof value === 'object') {
    const source = value as Record<string, unknown>;
    const sorted: Record<string, unknown> = {};
    for (const key of Object.keys(source).sort()) {
      if (source[key] !== undefined) sorted[key] = canonical(source[key]);
    }
    return sorted;
  }
  return value;
}

/** Canonical JSON (sorted keys, undefined dropped) → a short stable hash. `{a,b}` and `{b,a}` hash alike. */
export function hashToolArgs(args: unknown): string {
  const json = JSON.stringify(canonical(args)) ?? 'undefined';
  return createHash('sha256').update(json).digest('hex').slice(0, 16);
}

/** The key a verifier keeps per-session state under. */
export function sessionKey(ctx: TurnVerifyContext): string {
  return ctx.sessionId ?? '';
}
