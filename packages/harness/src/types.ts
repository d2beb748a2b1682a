// The harness's contracts: what a provider, a tool and a session store look like, and what a run
// reports. Values, not exceptions, for expected outcomes (a terminate reason, a tool result).
import type { ScratchpadRow, ToolHookAfter, ToolHookDecision, VerifierVerdict } from '@aleph/verification';
import type { ZodType } from 'zod';
import type { HarnessErrorInfo } from './errors.js';

export interface ToolCall {
  readonly id: string;
  readonly name: string;
  readonly args: unknown;
}

export type Message =
  | { readonly role: 'user'; readonly content: string }
  | { readonly role: 'assistant'; readonly content: string; readonly toolCalls?: readonly ToolCall[] }
  | {
      readonly role: 'tool';
      readonly toolCallId: string;
      readonly toolName: string;
      readonly content: string;
      readonly isError?: boolean;
    };

export interface ToolSpec {
  readonly name: string;
  readonly description: string;
  /** JSON Schema of the arguments. */
  readonly inputSchema: Record<string, unknown>;
}

export interface ThinkRequest {
  readonly system: string;
  /** The history itself, not a copy: between rewrites (a compaction, a guardrail) the same array each
   * turn, only appended to. Read it during the call, never change it, copy what you keep. */
  readonly messages: readonly Message[];
  readonly tools: readonly ToolSpec[];
}

export interface TokenUsage {
  /** Every input token, cached ones included. */
  readonly inputTokens: number;
  readonly outputTokens: number;
  /** Input tokens read from the provider's prompt cache (part of `inputTokens`), when it says. */
  readonly cachedInputTokens?: number;
}

/**
 * Why the provider stopped generating. Only `end_turn` (the model's explicit stop: OpenAI `stop`,
 * Anthropic `end_turn`/`stop_sequence`) with no tool calls and some text is a stop; with no tool
 * calls, `max_tokens` is a cut-off reply, `tool_use`, `error` and `other` are not a stop either, nor
 * is an empty reply: the model is told and the run goes on. `content_filter` ends the run as an
 * error; a missing or unknown value (from an untyped provider) is read as `other`.
 */
export type StopReason = 'end_turn' | 'tool_use' | 'max_tokens' | 'content_filter' | 'error' | 'other';

export interface ThinkResponse {
  readonly text: string;
  readonly toolCalls: readonly ToolCall[];
  readonly stopReason: StopReason;
  /** The provider's own finish reason as it sent it (`"tool_calls"`, `"pause_turn"`…), for messages. */
  readonly rawStopReason?: string;
  readonly usage?: TokenUsage;
}

/**
 * One part of a reply as the provider hands it to THINK. `text` and `tool-call-delta` are fragments
 * as the model writes them; `tool-call` is a finished call; `reasoning` is the model thinking (kept
 * by no one, but it is a sign of life); `usage` and `finish` close the reply. A provider that does
 * not stream hands over one `response` part: the whole reply.
 */
export type ReplyPart =
  | { readonly type: 'text'; readonly text: string }
  | { readonly type: 'reasoning'; readonly text: string }
  | {
      readonly type: 'tool-call-delta';
      readonly callId: string;
      readonly name: string;
      /** A fragment of the call's arguments, as JSON text. */
      readonly text: string;
    }
  | { readonly type: 'tool-call'; readonly call: ToolCall }
  | { readonly type: 'usage'; readonly usage: TokenUsage }
  | { readonly type: 'finish'; readonly stopReason: StopReason; readonly rawStopReason?: string }
  | { readonly type: 'response'; readonly response: ThinkResponse };

/**
 * The reply stream seam: THINK reads the parts in order and assembles the response. A reply is whole
 * only with a `finish` (or a `response`) part: a stream that ends, throws or stalls before it fails
 * the turn. Aborting the signal given with the request must end the stream (and its connection).
 */
export type ReplyStream = AsyncIterable<ReplyPart>;

export interface AiProvider {
  readonly id: string;
  /** The whole reply at once; THINK reads it as a one-part stream when there is no `stream`. */
  think(request: ThinkRequest, signal: AbortSignal): Promise<ThinkResponse>;
  /** The reply as it is written; preferred by THINK when present. */
  stream?(request: ThinkRequest, signal: AbortSignal): ReplyStream;
}

/**
 * What clients are told while a reply is written (`RunOptions.onDelta`). `seq` counts from 0 in each
 * turn. `text` deltas concatenated are the reply's text; `replace` says the reply's final text after
 * an output guardrail rewrote it (clients show it instead of what they had).
 */
export type ReplyDelta =
  | { readonly kind: 'text'; readonly iteration: number; readonly seq: number; readonly text: string }
  | {
      readonly kind: 'tool_args';
      readonly iteration: number;
      readonly seq: number;
      readonly callId: string;
      readonly name: string;
      readonly text: string;
    }
  | { readonly kind: 'replace'; readonly iteration: number; readonly seq: number; readonly text: string };

export type ResourceClaim =
  | { readonly kind: 'none' }
  | { readonly kind: 'shared'; readonly keys: readonly string[] }
  | { readonly kind: 'exclusive'; readonly keys: readonly string[] };

export interface ToolResult {
  readonly output: string;
  readonly isError?: boolean;
  /** The execution list after this call (the `todo` tool); read by ScratchpadGoalVerifier. */
  readonly scratchpad?: readonly ScratchpadRow[];
  /** The session id of a sub-agent this call dispatched; reported as the step's `splitChild`. */
  readonly splitChild?: string;
}

/** Runs a command confined by a policy (the same shape as @aleph/sandbox's `Sandbox`). */
export interface CommandSandbox {
  readonly backend: 'bubblewrap' | 'sandbox-exec' | 'none';
  wrap(command: {
    readonly file: string;
    readonly args: readonly string[];
    readonly cwd: string;
    readonly env: Readonly<Record<string, string | undefined>>;
  }): {
    readonly file: string;
    readonly args: readonly string[];
    readonly cwd: string;
    readonly env: Record<string, string>;
    /** Call once the command ended however it ended (or never started): the sandbox cleans up. */
    release?(): void;
  };
}

export interface ToolContext {
  readonly signal: AbortSignal;
  readonly sessionId: string;
  /** Wrap every command the model chose in this (HarnessDeps.sandbox). */
  readonly sandbox?: CommandSandbox;
}

export interface Tool<A = unknown> {
  readonly name: string;
  readonly description: string;
  readonly input: ZodType<A>;
  /** The JSON Schema the model is shown, when it is not `input`'s (an MCP tool's, as its server sent it). */
  readonly inputSchema?: Record<string, unknown>;
  readonly timeoutMs?: number;
  readonly kind?: 'mutation' | 'evidence' | 'other';
  /**
   * The call only reads (a file, a listing): a duplicate (name, args) reuses the first result until
   * anything that is not read-only runs. A shell command is never read-only, evidence or not.
   */
  readonly readOnly?: boolean;
  /** Which resources a call uses; a tool without a claim is exclusive on everything. */
  claim?(args: A): ResourceClaim;
  execute(args: A, ctx: ToolContext): Promise<ToolResult>;
}

/**
 * A tool of any argument type, for collections of tools. `Tool<A>` is invariant in `A` (its zod
 * schema produces A, its execute consumes A), so a list of different tools needs `any` here.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyTool = Tool<any>;

export interface ToolInvocation {
  readonly callId: string;
  readonly name: string;
  readonly startedAt: number;
  readonly endedAt: number;
  readonly ok: boolean;
  /** True when this result was reused from an identical call in the same stage. */
  readonly deduplicated?: boolean;
}

export interface TurnStep {
  readonly state: 'continue' | 'done';
  /** Successful tool calls this turn. */
  readonly executed: number;
  readonly vetoed: boolean;
  readonly splitChild?: string;
  readonly iteration: number;
  /** Why this turn failed without running anything: the provider's message (ECONNREFUSED, 5xx, …). */
  readonly error?: string;
  /** From the request to the reply's first part, ms (streaming: the first token). */
  readonly firstTokenMs?: number;
  /** The tokens this turn's reply used, as the provider reported them. */
  readonly usage?: TokenUsage;
}

export type TerminateReason =
  /** `stopReason`: a stop hook ended the run on the model's stop (`"continue": false`), and why. */
  | { readonly kind: 'model_stop'; readonly stopReason?: string }
  | { readonly kind: 'halted'; readonly by: string; readonly reason: string }
  | { readonly kind: 'max_iterations' }
  /**
   * Turns that failed in the loop's machinery: the provider call failed, the reply was cut off or not
   * an explicit stop (empty, no finish, `tool_use` with no calls), or no call could be run (unknown
   * tool, bad args). `lastError`: the last such turn's cause.
   */
  | { readonly kind: 'consecutive_failures'; readonly count: number; readonly lastError?: string }
  | { readonly kind: 'cancelled' }
  | { readonly kind: 'error'; readonly error: HarnessErrorInfo }
  /** The log has no `terminate` event and no process is running it: found after a crash. */
  | { readonly kind: 'interrupted' };

/** One turn's figures, in a run's result. */
export interface TurnFigures {
  readonly iteration: number;
  readonly firstTokenMs?: number;
  readonly usage?: TokenUsage;
}

export interface RunResult {
  readonly sessionId: string;
  readonly terminateReason: TerminateReason;
  readonly iterations: number;
  /** Input + output tokens of every reply. */
  readonly totalTokens: number;
  /** The run's tokens, summed over its turns (`cachedInputTokens` counted in `inputTokens`). */
  readonly usage?: TokenUsage;
  /** Each turn that got a reply: its time to first token and its tokens. */
  readonly turns?: readonly TurnFigures[];
  readonly toolTimeline: readonly ToolInvocation[];
  readonly finalText: string;
}

export type SessionEventBody =
  /** A prompt; `cwd` is the run's project root, when the caller gave one. */
  | { readonly type: 'user'; readonly content: string; readonly cwd?: string }
  | {
      readonly type: 'assistant';
      readonly content: string;
      readonly toolCalls: readonly ToolCall[];
      readonly usage?: TokenUsage;
    }
  | {
      readonly type: 'tool_result';
      readonly callId: string;
      readonly name: string;
      readonly output: string;
      readonly isError: boolean;
      readonly scratchpad?: readonly ScratchpadRow[];
    }
  | { readonly type: 'verdict'; readonly verdict: VerifierVerdict }
  | { readonly type: 'feedback'; readonly content: string }
  | {
      readonly type: 'compaction';
      readonly mode: 'compact' | 'truncate';
      readonly fromTokens: number;
      readonly toTokens: number;
    }
  | { readonly type: 'turn_step'; readonly step: TurnStep }
  | { readonly type: 'terminate'; readonly reason: TerminateReason }
  /**
   * A run took the session over from its log (its node was lost). Logged first, so a store with
   * fenced appends refuses whatever the earlier holder still tries to append.
   */
  | { readonly type: 'resumed' };

export type SessionEvent = SessionEventBody & { readonly seq: number; readonly at: number };

export interface SessionLoad {
  readonly events: readonly SessionEvent[];
  /** The last line was cut short (a crash mid-write) and was skipped. */
  readonly tornTail: boolean;
  /** Lines (1-based) that were not JSON or not an event: skipped, never fatal to the rest. */
  readonly corruptLines?: readonly number[];
}

export interface AppendOptions {
  /** The last sequence the writer saw (-1: none): the append is refused if the log has another. */
  readonly after?: number;
}

export interface LoadOptions {
  /** The first sequence to read back (default 0). */
  readonly from?: number;
}

/** A session as a list of runs shows it, read from its log. */
export interface SessionSummary {
  readonly sessionId: string;
  /** `running` while its log has no `terminate` after the last prompt and a run holds it open. */
  readonly state: 'running' | 'ended';
  /** The last run's end; `interrupted` when its log never ended and no run holds it (a crash). */
  readonly terminateReason?: TerminateReason;
  /** The first prompt, and when it was logged. */
  readonly prompt?: string;
  readonly startedAt?: number;
  readonly endedAt?: number;
  readonly cwd?: string;
  readonly corruptLines?: readonly number[];
  /** Why its log could not be read at all (a log past the longest string there is); nothing else is known. */
  readonly unreadable?: string;
}

/**
 * The session log seam: an append-only event log per session, read back by sequence. Sequences count
 * from 0 in each session, one per event, with no gaps. An append may be fenced: `after` names the
 * last sequence its writer saw (-1 for an empty log), and the append is refused with a
 * `HarnessError` of code `conflict` when the log has moved on (another writer appended), so two
 * writers never interleave one session. The default implementations keep JSON lines on disk
 * (`createFileSessionStore`) or events in memory (`InMemorySessionStore`); a cluster keeps one
 * stream subject per session.
 */
export interface SessionStore {
  create(options?: { parentId?: string }): Promise<string>;
  append(sessionId: string, event: SessionEventBody, options?: AppendOptions): Promise<SessionEvent>;
  /** Makes everything appended so far durable (the file store fsyncs). Called at turn boundaries. */
  flush(sessionId: string): Promise<void>;
  /** The session's events in sequence order; with `from`, those whose `seq` is `from` or later. */
  load(sessionId: string, options?: LoadOptions): Promise<SessionLoad>;
  list(): Promise<string[]>;
  /** The run on this session ended (the harness calls it last): flush, and release its handles. */
  end?(sessionId: string): Promise<void>;
  /** Every session with its state, for listing runs after a restart. */
  summaries?(): Promise<SessionSummary[]>;
  /** The session's Claude Code–format transcript (for hooks' `transcript_path`), if the store keeps one. */
  transcriptPath?(sessionId: string): string | undefined;
  close?(): Promise<void>;
}

export interface Guardrails {
  /** May rewrite messages before they reach the provider. */
  input?(messages: readonly Message[]): readonly Message[];
  /** May rewrite the provider's response. */
  output?(response: ThinkResponse): ThinkResponse;
  /** May rewrite a call's args (e.g. mask secrets). A rewrite makes the whole batch run serially. */
  toolArgs?(call: ToolCall): unknown;
}

export interface ToolHookContext {
  readonly sessionId: string;
  readonly signal: AbortSignal;
  /** The run's project root (its cwd), when the caller gave one. */
  readonly projectDir?: string;
  readonly transcriptPath?: string;
  readonly permissionMode?: string;
  /** `after` only: how long the call ran. */
  readonly durationMs?: number;
}

export type { ToolHookAfter, ToolHookDecision };

/**
 * Pre/PostToolUse: a generic hook point the server adapts Claude Code's tool hooks to. A `stop`
 * (before: the batch is not run; after: `stop`) ends the run `halted` once the batch's hooks ran.
 */
export interface ToolHooks {
  before?(call: ToolCall, ctx: ToolHookContext): Promise<ToolHookDecision>;
  /** `feedback` is shown to the model before its next Think; `stop`'s reason is for the user. */
  after?(call: ToolCall, result: ToolResult, ctx: ToolHookContext): Promise<void | ToolHookAfter>;
}

export interface ContextBudgetOptions {
  /**
   * Estimated tokens a request may use: the tool definitions' share first, the messages the rest
   * (never under a quarter).
   */
  readonly maxTokens: number;
  /** Summarises the oldest messages when stubbing tool outputs is not enough. */
  readonly compactor?: (messages: readonly Message[]) => string;
  /** Tool outputs longer than this (chars) are stubbed first when over budget. Default 400. */
  readonly stubOver?: number;
}
