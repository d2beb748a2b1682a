// The Think → Act loop, as stages. Each turn: PREPARE (fit the context) → THINK (sleep guard held;
// the reply read as a stream, bounded by turnTimeoutMs) → RESOLVE → verifier chain → ACT → FINALIZE
// (log, flush, step). Each stage returns a union of what can happen next, and `run` switches over
// one TurnOutcome. It ends only on the model's explicit stop (allowed by the chain), a verifier
// halt, a hard cap, the consecutive-failure watchdog, cancellation or an error — and says which,
// precisely. Counters live here; everything else lives in the session log.
import type { PowerCapability } from '@aleph/power';
import {
  hashToolArgs as hashArgs,
  TOOL_HISTORY_WINDOW,
  type RobustnessProfile,
  type ScratchpadRow,
  type ToolCallSummary,
  type TurnVerifyContext,
  type VerifierChain,
  type VerifierVerdict,
} from '@aleph/verification';
import { act, type ActOutcome, type EvidenceCache } from './act.js';
import { fitToBudget, History, historyBudget, toolSpecTokens } from './context-budget.js';
import { HarnessError, type HarnessErrorInfo } from './errors.js';
import { readReply, replyStream, ReplyError, StallError } from './think.js';
import { ToolService } from './tool-service.js';
import { endSpan, startSpan, type Traced } from './tracing.js';
import type {
  AiProvider,
  AnyTool,
  CommandSandbox,
  ContextBudgetOptions,
  Guardrails,
  Message,
  ReplyDelta,
  ReplyPart,
  RunResult,
  SessionEvent,
  SessionEventBody,
  SessionStore,
  StopReason,
  TerminateReason,
  ThinkResponse,
  TokenUsage,
  ToolCall,
  ToolHookContext,
  ToolHookDecision,
  ToolHooks,
  ToolInvocation,
  TurnFigures,
  TurnStep,
} from './types.js';

export interface HarnessDeps {
  readonly provider: AiProvider;
  readonly tools: ToolService | readonly AnyTool[];
  readonly sessions: SessionStore;
  readonly verifier?: VerifierChain;
  readonly power?: PowerCapability;
  readonly maxIterations?: number;
  /** Bounds THINK: past it the run ends `stalled_turn`. */
  readonly turnTimeoutMs?: number;
  /** From the request to the reply's first part: past it the turn fails (the watchdog counts it). */
  readonly firstTokenTimeoutMs?: number;
  /** Between two parts of a streamed reply: past it the turn fails (the watchdog counts it). */
  readonly idleTimeoutMs?: number;
  readonly defaultToolTimeoutMs?: number;
  /** Calls one reply may make (`DEFAULT_MAX_TOOL_CALLS_PER_TURN`): the rest are answered, not run. */
  readonly maxToolCallsPerTurn?: number;
  /**
   * Characters of tool output one turn keeps, in the model's order (`DEFAULT_MAX_TOOL_RESULT_CHARS_PER_TURN`):
   * past them a result is replaced by a note saying so, in the log and to the model.
   */
  readonly maxToolResultCharsPerTurn?: number;
  readonly maxConsecutiveFailures?: number;
  readonly contextBudget?: ContextBudgetOptions;
  readonly guardrails?: Guardrails;
  readonly systemPrompt?: string;
  /** Per-model verifier thresholds, handed to every verifier in the context. */
  readonly robustnessProfile?: RobustnessProfile;
  readonly toolHooks?: ToolHooks;
  /** Awaited before the history is compacted to fit the context budget (Claude Code's PreCompact hooks). */
  readonly beforeCompaction?: (info: {
    sessionId: string;
    fromTokens: number;
    toTokens: number;
  }) => Promise<void>;
  /** Handed to tools as `ToolContext.sandbox`; the harness never runs a command itself. */
  readonly sandbox?: CommandSandbox;
}

export interface RunInput {
  readonly prompt: string;
  /** Resume this session from its log; a new session when absent. */
  readonly sessionId?: string;
  /** The run's project root (the tools' cwd): hooks get it as `cwd`/`CLAUDE_PROJECT_DIR`. */
  readonly cwd?: string;
  /** Told to hooks as Claude Code's `permission_mode` (default `bypassPermissions`: nobody asks). */
  readonly permissionMode?: string;
  /**
   * Take over a run whose log already holds its prompt (its node was lost): the prompt is not
   * appended again, completed turns are not repeated, and a call without a result is told to the
   * model as interrupted.
   */
  readonly resume?: boolean;
}

export interface RunOptions {
  readonly signal?: AbortSignal;
  onStep?(step: TurnStep): void;
  /** Every event as it is appended to the log. */
  onEvent?(event: SessionEvent): void;
  /** The reply as it is written: text and tool-argument fragments, and a guardrail's rewrite. */
  onDelta?(delta: ReplyDelta): void;
}

// The agent role prompt. Completion is the model's judgment, made here in words: it ends with its
// own VERDICT. No code reads that verdict to decide anything — verifiers only give receipts.
export const AGENT_ROLE_PROMPT = `You are a careful software agent working in a real workspace through tools.

Work in small verified steps. Keep an execution list with the todo tool for any task with more than
one step, and mark each row done, cancelled or blocked as you go. After you change a file, check the
change: run the tests or the build, or read the file back.

When you believe the task is complete — or you cannot go further — stop calling tools and reply with
a summary that ends with your own verdict block:

VERDICT: PASS | FAIL | PARTIAL
- what you checked, and how (the command, the file you read back)
- what is left, if anything

Be honest: PASS only what you verified. Hooks may reject your stop and tell you why; read their
feedback, act on it, and stop again when you have.`;

export const DEFAULT_MAX_ITERATIONS = 50;
export const DEFAULT_TURN_TIMEOUT_MS = 300_000;
export const DEFAULT_TOOL_TIMEOUT_MS = 120_000;
/** Tool calls one reply may make; the model's API clients see tens at most. */
export const DEFAULT_MAX_TOOL_CALLS_PER_TURN = 64;
/** Characters of tool output one turn keeps (1 MiB of ASCII). */
export const DEFAULT_MAX_TOOL_RESULT_CHARS_PER_TURN = 1024 * 1024;
export const DEFAULT_MAX_CONSECUTIVE_FAILURES = 3;

const STOP_REASONS: ReadonlySet<string> = new Set<StopReason>([
  'end_turn',
  'tool_use',
  'max_tokens',
  'content_filter',
  'error',
  'other',
]);

/** The provider's finish reason, as one of ours; a missing or unknown one is `other`, never a stop. */
function stopReasonOf(response: ThinkResponse): StopReason {
  return response.stopReason && STOP_REASONS.has(response.stopReason) ? response.stopReason : 'other';
}

/**
 * Why a reply with no tool calls is not a stop, or undefined when it is one. Only the model's explicit
 * stop (`end_turn`) with something said stops: a cut-off reply, a `tool_use` finish with no calls, a
 * missing or unknown finish, an error finish — and an empty reply, whatever its finish (a provider-side
 * anomaly: Anthropic documents empty `end_turn` replies after tool results, to be answered by asking
 * the model to go on) — are told to the model, and each counts toward the failure watchdog.
 */
function notAStop(response: ThinkResponse, stopReason: StopReason): string | undefined {
  const raw = response.rawStopReason === undefined ? 'none' : JSON.stringify(response.rawStopReason);
  switch (stopReason) {
    case 'max_tokens':
      return 'the reply was cut off at the output token limit';
    case 'error':
      return 'the provider ended the reply with an error';
    case 'tool_use':
      return `the reply ended for tool calls (finish reason ${raw}) but had none`;
    case 'other':
    case 'content_filter':
      return `the reply had no tool calls and no explicit stop (finish reason ${raw})`;
    case 'end_turn':
      return response.text.trim() === '' ? 'the reply was empty: no text and no tool calls' : undefined;
    default: {
      const unreachable: never = stopReason;
      return unreachable;
    }
  }
}

function usageOf(response: ThinkResponse): { usage?: TokenUsage } {
  return response.usage ? { usage: response.usage } : {};
}

function addUsage(total: TokenUsage, usage: TokenUsage | undefined): TokenUsage {
  if (usage === undefined) return total;
  return {
    inputTokens: total.inputTokens + usage.inputTokens,
    outputTokens: total.outputTokens + usage.outputTokens,
    cachedInputTokens: (total.cachedInputTokens ?? 0) + (usage.cachedInputTokens ?? 0),
  };
}

function describeError(error: HarnessErrorInfo): string {
  return 'message' in error ? error.message : error.kind;
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message || error.name : String(error);
}

/**
 * The verifier's view of the history: the last TOOL_HISTORY_WINDOW calls, reaching further back
 * while they repeat the last one, so a loop-halt threshold above the window can still fire.
 */
function recent(history: readonly ToolCallSummary[]): ToolCallSummary[] {
  const last = history.at(-1);
  let streak = 0;
  while (
    streak < history.length &&
    history[history.length - 1 - streak]?.name === last?.name &&
    history[history.length - 1 - streak]?.argsHash === last?.argsHash
  )
    streak += 1;
  return history.slice(-Math.max(TOOL_HISTORY_WINDOW, streak));
}

/** A tool hook's `stop` (Claude Code's `continue: false`): the run ends; the reason is for the user. */
function hookStop(event: 'PreToolUse' | 'PostToolUse', reasons: readonly string[]): TerminateReason {
  return { kind: 'halted', by: `${event} hook`, reason: [...new Set(reasons)].join('\n') };
}

const CUT_OFF =
  'your reply is incomplete and was not taken as a stop. Continue from where it broke off; keep replies shorter, and split long output across tool calls.';

const NO_STOP =
  'it was not taken as a stop. Go on with the task: call the tools you need, or, if you are done, end with a reply that says so.';

/** What a session's log says, folded into what the next turn needs. */
interface RunState {
  /** The messages and their token estimate, kept as they grow (PREPARE reads it every turn). */
  conversation: History;
  history: ToolCallSummary[];
  /** Read-only results reusable by a later identical call (this run only). */
  cache: EvidenceCache;
  scratchpad: ScratchpadRow[] | undefined;
  toolCallsMade: number;
}

function foldEvents(events: readonly SessionEvent[]): RunState {
  const state: RunState = {
    conversation: new History(),
    history: [],
    cache: new Map(),
    scratchpad: undefined,
    toolCallsMade: 0,
  };
  for (const event of events) apply(state, event);
  // A run killed mid-ACT left tool calls without results; providers refuse such a history, and the
  // model should know those calls did not (or may not have) run.
  const answered = new Set(
    state.conversation.messages.flatMap((message) => (message.role === 'tool' ? [message.toolCallId] : [])),
  );
  const repaired: Message[] = [];
  for (const message of state.conversation.messages) {
    repaired.push(message);
    if (message.role !== 'assistant') continue;
    for (const call of message.toolCalls ?? []) {
      if (answered.has(call.id)) continue;
      repaired.push({
        role: 'tool',
        toolCallId: call.id,
        toolName: call.name,
        content: INTERRUPTED,
        isError: true,
      });
    }
  }
  if (repaired.length > state.conversation.messages.length) state.conversation.reset(repaired);
  return state;
}

const INTERRUPTED =
  'no result: the previous run was interrupted before this call finished; check its effect before repeating it';

function apply(state: RunState, event: SessionEventBody): void {
  switch (event.type) {
    case 'user':
      state.conversation.push({ role: 'user', content: event.content });
      break;
    case 'feedback':
      state.conversation.push({ role: 'user', content: event.content });
      break;
    case 'assistant':
      // An empty reply is logged but not sent back: it says nothing, and Anthropic refuses an
      // assistant message with no content.
      if (event.content.trim() === '' && event.toolCalls.length === 0) break;
      state.conversation.push({
        role: 'assistant',
        content: event.content,
        ...(event.toolCalls.length ? { toolCalls: event.toolCalls } : {}),
      });
      break;
    case 'tool_result':
      state.conversation.push({
        role: 'tool',
        toolCallId: event.callId,
        toolName: event.name,
        content: event.output,
        ...(event.isError ? { isError: true } : {}),
      });
      if (event.scratchpad !== undefined) state.scratchpad = [...event.scratchpad];
      break;
    case 'verdict':
    case 'compaction':
    case 'turn_step':
    case 'terminate':
    case 'resumed':
      break;
    default: {
      const unreachable: never = event;
      throw new HarnessError('session', `unknown session event ${JSON.stringify(unreachable)}`);
    }
  }
}

/** What a turn's reply adds to the run's figures, however the turn ends. */
interface Reply {
  readonly text: string;
  readonly usage?: TokenUsage;
  readonly firstTokenMs?: number;
}

/**
 * How a turn ended, the one thing `run` switches over. `continued`: the run goes on (the failure
 * streak is over). `failed`: the turn failed in the loop's machinery — the provider call, a reply
 * that was not a stop, a batch none of whose calls could run — and counts toward the watchdog.
 * `ended`: the run ends with `reason`.
 */
export type TurnOutcome =
  | { readonly kind: 'continued'; readonly step: TurnStep; readonly reply: Reply }
  | { readonly kind: 'failed'; readonly step: TurnStep; readonly cause: string; readonly reply?: Reply }
  | {
      readonly kind: 'ended';
      readonly reason: TerminateReason;
      readonly step?: TurnStep;
      readonly reply?: Reply;
    };

/** THINK's result: a whole reply, or the turn's outcome without one. */
type Thought =
  | { readonly kind: 'reply'; readonly response: ThinkResponse; readonly reply: Reply }
  | { readonly kind: 'none'; readonly outcome: TurnOutcome };

/** RESOLVE's result: calls to act on, a stop to put to the chain, or the turn's outcome. */
type Resolution =
  | {
      readonly kind: 'calls';
      /** As the model sent them (ids filled in); `effective`: after the args guardrail. */
      readonly calls: readonly ToolCall[];
      readonly effective: readonly ToolCall[];
      readonly rewritten: boolean;
    }
  | { readonly kind: 'stop'; readonly stopReason: StopReason }
  | { readonly kind: 'outcome'; readonly outcome: TurnOutcome };

/** ACT's result: the batch ran (possibly in part), or the turn's outcome without results to finish. */
type Acted =
  | { readonly kind: 'ran'; readonly outcomes: readonly ActOutcome[]; readonly denied: ReadonlySet<string> }
  | { readonly kind: 'outcome'; readonly outcome: TurnOutcome };

/** One turn's fixed facts, handed to each stage. */
interface Turn {
  readonly state: RunState;
  readonly sessionId: string;
  readonly iteration: number;
  readonly signal: AbortSignal;
  readonly log: (event: SessionEventBody) => Promise<void>;
  readonly timeline: ToolInvocation[];
  readonly where: ToolHookContext;
  readonly trace: Traced;
  readonly onDelta: ((delta: ReplyDelta) => void) | undefined;
}

/** A run's counters (the rest lives in the log), changed only by `run` as each turn's outcome comes. */
interface Counters {
  iterations: number;
  totalTokens: number;
  usage: TokenUsage;
  turns: TurnFigures[];
  finalText: string;
  failures: number;
  lastError: string | undefined;
}

const step = (iteration: number, fields: Partial<Omit<TurnStep, 'iteration'>> = {}): TurnStep => ({
  state: 'continue',
  executed: 0,
  vetoed: false,
  iteration,
  ...fields,
});

export class AgentHarness {
  readonly #deps: HarnessDeps;
  readonly #tools: ToolService;

  constructor(deps: HarnessDeps) {
    this.#deps = deps;
    this.#tools = deps.tools instanceof ToolService ? deps.tools : new ToolService(deps.tools);
  }

  get tools(): ToolService {
    return this.#tools;
  }

  async run(input: RunInput, options: RunOptions = {}): Promise<RunResult> {
    const deps = this.#deps;
    const signal = options.signal ?? new AbortController().signal;
    const sessions = deps.sessions;
    const sessionId = input.sessionId ?? (await sessions.create());
    const { events } = input.sessionId === undefined ? { events: [] } : await sessions.load(sessionId);
    const state = foldEvents(events);
    const maxIterations = deps.maxIterations ?? DEFAULT_MAX_ITERATIONS;
    const maxFailures = deps.maxConsecutiveFailures ?? DEFAULT_MAX_CONSECUTIVE_FAILURES;
    const timeline: ToolInvocation[] = [];
    const counters: Counters = {
      iterations: 0,
      totalTokens: 0,
      usage: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 },
      turns: [],
      finalText: '',
      failures: 0,
      lastError: undefined,
    };
    const where = whereOf(input, sessionId, signal, sessions.transcriptPath?.(sessionId));
    // Appends are fenced: a second writer on this session (another run) is refused, not interleaved.
    let lastSeq = events.at(-1)?.seq ?? -1;
    const log = async (event: SessionEventBody): Promise<void> => {
      const stored = await sessions.append(sessionId, event, { after: lastSeq });
      lastSeq = stored.seq;
      apply(state, event);
      options.onEvent?.(stored);
    };
    const running = startSpan('aleph.run', {
      'aleph.session.id': sessionId,
      'gen_ai.request.model': deps.provider.id,
      ...(input.cwd === undefined ? {} : { 'aleph.cwd': input.cwd }),
    });
    const finish = (reason: TerminateReason): Promise<RunResult> =>
      this.#finish({ reason, sessionId, counters, timeline, log, trace: running });

    try {
      // A taken-over run goes on from its log; its turns so far count toward maxIterations.
      if (input.resume === true && events.some((event) => event.type === 'user')) {
        counters.iterations = events.filter((event) => event.type === 'turn_step').length;
        await log({ type: 'resumed' });
      } else await log({ type: 'user', content: input.prompt, ...(input.cwd ? { cwd: input.cwd } : {}) });
      for (;;) {
        if (signal.aborted) return await finish({ kind: 'cancelled' });
        if (counters.iterations >= maxIterations) return await finish({ kind: 'max_iterations' });
        counters.iterations += 1;
        const turn: Turn = {
          state,
          sessionId,
          iteration: counters.iterations,
          signal,
          log,
          timeline,
          where,
          trace: startSpan('aleph.turn', { 'aleph.turn.iteration': counters.iterations }, running.context),
          onDelta: options.onDelta?.bind(options),
        };
        const outcome = await this.#turn(turn).catch((error: unknown) => {
          endSpan(turn.trace, {}, errorMessage(error)); // the run's own end follows, below
          throw error;
        });
        endTurnSpan(turn.trace, outcome);
        count(counters, outcome);
        if (outcome.step !== undefined) await log({ type: 'turn_step', step: outcome.step });
        await sessions.flush(sessionId); // the turn boundary: everything so far is durable
        if (outcome.step !== undefined) options.onStep?.(outcome.step);
        switch (outcome.kind) {
          case 'ended':
            return await finish(outcome.reason);
          case 'failed':
          case 'continued':
            break;
          default: {
            const unreachable: never = outcome;
            throw new HarnessError('session', `unknown turn outcome ${JSON.stringify(unreachable)}`);
          }
        }
        if (counters.failures >= maxFailures) {
          const cause = counters.lastError === undefined ? {} : { lastError: counters.lastError };
          return await finish({ kind: 'consecutive_failures', count: counters.failures, ...cause });
        }
      }
    } catch (error) {
      if (signal.aborted) return await finish({ kind: 'cancelled' });
      const message = errorMessage(error);
      const session =
        error instanceof HarnessError && (error.code === 'session' || error.code === 'conflict');
      const kind = session ? 'session' : 'llm';
      return await finish({ kind: 'error', error: { kind, message } });
    }
  }

  /** The run's end: its span, the `terminate` event, the log made durable and released. */
  async #finish(end: {
    reason: TerminateReason;
    sessionId: string;
    counters: Counters;
    timeline: readonly ToolInvocation[];
    log: (event: SessionEventBody) => Promise<void>;
    trace: Traced;
  }): Promise<RunResult> {
    const { reason, sessionId, counters } = end;
    const sessions = this.#deps.sessions;
    const failed = reason.kind === 'error' || reason.kind === 'consecutive_failures';
    endSpan(
      end.trace,
      {
        'aleph.terminate.reason': reason.kind,
        'aleph.iterations': counters.iterations,
        'gen_ai.usage.total_tokens': counters.totalTokens,
        'gen_ai.usage.input_tokens': counters.usage.inputTokens,
        'gen_ai.usage.output_tokens': counters.usage.outputTokens,
        'gen_ai.usage.cache_read.input_tokens': counters.usage.cachedInputTokens ?? 0,
      },
      failed
        ? reason.kind === 'error'
          ? describeError(reason.error)
          : (reason.lastError ?? reason.kind)
        : undefined,
    );
    try {
      await end.log({ type: 'terminate', reason });
      await sessions.flush(sessionId);
    } catch {
      // The run's answer matters more than the last log line.
    }
    await sessions.end?.(sessionId).catch(() => undefined);
    return {
      sessionId,
      terminateReason: reason,
      iterations: counters.iterations,
      totalTokens: counters.totalTokens,
      usage: counters.usage,
      turns: counters.turns,
      toolTimeline: end.timeline,
      finalText: counters.finalText,
    };
  }

  /** One turn: the stages in order, each result matched; the sleep guard is held throughout. */
  async #turn(turn: Turn): Promise<TurnOutcome> {
    const messages = await this.#prepare(turn);
    // THINK onwards — the sleep guard is held from here until the turn returns, whatever way.
    using _guard = this.#deps.power?.inhibitSleep('Aleph agent loop');
    const thought = await this.#think(turn, messages);
    if (thought.kind === 'none') return thought.outcome;
    const { response, reply } = thought;
    const resolved = await this.#resolve(turn, response, reply);
    if (resolved.kind === 'outcome') return resolved.outcome;
    const verdict = await this.#verify(turn, response, resolved);
    switch (verdict.kind) {
      case 'halt':
        if (verdict.stop === true && resolved.kind === 'stop')
          return {
            kind: 'ended',
            reason: { kind: 'model_stop', stopReason: verdict.reason },
            step: step(turn.iteration, { state: 'done', ...figures(reply) }),
            reply,
          };
        return {
          kind: 'ended',
          reason: { kind: 'halted', by: verdict.source ?? 'verifier', reason: verdict.reason },
          reply,
        };
      case 'veto':
        return this.#veto(turn, resolved, verdict, reply);
      case 'continue':
        break;
      default: {
        const unreachable: never = verdict;
        throw new HarnessError('session', `unknown verdict ${JSON.stringify(unreachable)}`);
      }
    }
    if (resolved.kind === 'stop')
      return {
        kind: 'ended',
        reason: { kind: 'model_stop' },
        step: step(turn.iteration, { state: 'done', ...figures(reply) }),
        reply,
      };
    const acted = await this.#act(turn, resolved, reply);
    if (acted.kind === 'outcome') return acted.outcome;
    return this.#finalize(turn, acted, reply);
  }

  /**
   * PREPARE: the history fitted to what the tool definitions leave of the context budget (the fit
   * is logged), then the input guardrail.
   */
  async #prepare(turn: Turn): Promise<readonly Message[]> {
    const { conversation } = turn.state;
    const budget = historyBudget(this.#deps.contextBudget, toolSpecTokens(this.#tools.specs()));
    const fitted = fitToBudget(conversation.messages, budget, conversation.tokens);
    if (fitted.mode !== 'none') {
      await this.#deps.beforeCompaction?.({
        sessionId: turn.sessionId,
        fromTokens: fitted.fromTokens,
        toTokens: fitted.toTokens,
      });
      await turn.log({
        type: 'compaction',
        mode: fitted.mode,
        fromTokens: fitted.fromTokens,
        toTokens: fitted.toTokens,
      });
    }
    return this.#deps.guardrails?.input?.(fitted.messages) ?? fitted.messages;
  }

  /**
   * THINK: the reply read from the provider's stream (deltas handed on as they come), then the
   * output guardrail (a rewrite is sent as the reply's final text). A provider failure is a failed
   * turn, told to the model; a stall, a fatal error or a cancellation end the run.
   */
  async #think(turn: Turn, messages: readonly Message[]): Promise<Thought> {
    const deps = this.#deps;
    const thinking = startSpan(
      'aleph.think',
      { 'gen_ai.request.model': deps.provider.id },
      turn.trace.context,
    );
    const request = {
      system: deps.systemPrompt ?? AGENT_ROLE_PROMPT,
      messages, // the history itself: a copy is O(history) a turn (ThinkRequest's contract)
      tools: this.#tools.specs(),
    };
    const deltas = deltasOf(turn);
    let read;
    try {
      read = await readReply((signal) => replyStream(deps.provider, request, signal), turn.signal, {
        turnTimeoutMs: deps.turnTimeoutMs ?? DEFAULT_TURN_TIMEOUT_MS,
        firstTokenTimeoutMs: deps.firstTokenTimeoutMs,
        idleTimeoutMs: deps.idleTimeoutMs,
        onPart: deltas?.part,
      });
    } catch (error) {
      endSpan(thinking, {}, errorMessage(error));
      return { kind: 'none', outcome: await this.#thinkFailed(turn, error) };
    }
    const response = deps.guardrails?.output?.(read.response) ?? read.response;
    if (response.text !== read.response.text) deltas?.replace(response.text);
    const stopReason = stopReasonOf(response);
    endSpan(thinking, {
      'gen_ai.usage.input_tokens': response.usage?.inputTokens ?? 0,
      'gen_ai.usage.output_tokens': response.usage?.outputTokens ?? 0,
      'gen_ai.usage.cache_read.input_tokens': response.usage?.cachedInputTokens ?? 0,
      'gen_ai.response.finish_reasons': [stopReason],
      'gen_ai.server.time_to_first_token': read.firstTokenMs / 1000,
    });
    const reply: Reply = {
      text: response.text,
      firstTokenMs: read.firstTokenMs,
      ...usageOf(response),
    };
    return { kind: 'reply', response, reply };
  }

  /** Why THINK got no reply, as the turn's outcome. */
  async #thinkFailed(turn: Turn, error: unknown): Promise<TurnOutcome> {
    if (turn.signal.aborted) return { kind: 'ended', reason: { kind: 'cancelled' } };
    if (error instanceof StallError)
      return {
        kind: 'ended',
        reason: { kind: 'error', error: { kind: 'stalled_turn', elapsedMs: error.elapsedMs } },
      };
    const message = errorMessage(error);
    // A fatal error (a bad key, an unknown model) will not heal by asking again.
    if (!(error instanceof ReplyError) && (error as { fatal?: unknown } | null)?.fatal === true)
      return { kind: 'ended', reason: { kind: 'error', error: { kind: 'llm', message } } };
    await turn.log({ type: 'feedback', content: `[harness] the provider call failed: ${message}` });
    return { kind: 'failed', cause: message, step: step(turn.iteration, { error: message }) };
  }

  /**
   * RESOLVE: the reply logged, its calls given ids and passed through the args guardrail. A reply with
   * no calls is a stop only when the model said so explicitly (else the model is told: a failed turn);
   * a content-filter finish ends the run.
   */
  async #resolve(turn: Turn, response: ThinkResponse, reply: Reply): Promise<Resolution> {
    const stopReason = stopReasonOf(response);
    if (stopReason === 'content_filter') {
      await turn.log({ type: 'assistant', content: response.text, toolCalls: [], ...usageOf(response) });
      const message = "the provider's content filter stopped the reply";
      return {
        kind: 'outcome',
        outcome: { kind: 'ended', reason: { kind: 'error', error: { kind: 'llm', message } }, reply },
      };
    }
    const calls = response.toolCalls.map((call) => ({
      ...call,
      id: call.id || `call_${turn.iteration}_${call.name}`,
    }));
    const guardrails = this.#deps.guardrails;
    let rewritten = false;
    const effective = calls.map((call): ToolCall => {
      if (guardrails?.toolArgs === undefined) return call;
      const args = guardrails.toolArgs(call);
      if (args !== call.args) rewritten = true;
      return { ...call, args };
    });
    await turn.log({ type: 'assistant', content: response.text, toolCalls: calls, ...usageOf(response) });
    if (calls.length > 0) return { kind: 'calls', calls, effective, rewritten };
    const notStopped = notAStop(response, stopReason);
    if (notStopped === undefined) return { kind: 'stop', stopReason };
    // Not a stop. Say so and go on, bounded by the watchdog; the model alone decides it is done.
    const nudge = stopReason === 'max_tokens' || stopReason === 'error' ? CUT_OFF : NO_STOP;
    await turn.log({ type: 'feedback', content: `[harness] ${notStopped}: ${nudge}` });
    return {
      kind: 'outcome',
      outcome: {
        kind: 'failed',
        cause: notStopped,
        step: step(turn.iteration, { error: notStopped, ...figures(reply) }),
        reply,
      },
    };
  }

  /** The verifier chain over the proposed calls (or the stop); a verdict other than continue is logged. */
  async #verify(
    turn: Turn,
    response: ThinkResponse,
    resolved: Exclude<Resolution, { kind: 'outcome' }>,
  ): Promise<VerifierVerdict> {
    const chain = this.#deps.verifier;
    if (chain === undefined) return { kind: 'continue' };
    const { state, where } = turn;
    const proposed = resolved.kind === 'calls' ? this.#summaries(resolved.effective) : [];
    const context: TurnVerifyContext = {
      iterations: turn.iteration,
      toolCallsMade: state.toolCallsMade + proposed.length,
      finalText: response.text,
      recentToolCalls: recent([...state.history, ...proposed]),
      callsThisTurn: proposed.length,
      sessionId: turn.sessionId,
      ...(where.projectDir === undefined ? {} : { projectDir: where.projectDir }),
      ...(where.transcriptPath === undefined ? {} : { transcriptPath: where.transcriptPath }),
      ...(where.permissionMode === undefined ? {} : { permissionMode: where.permissionMode }),
      ...(this.#deps.robustnessProfile ? { robustnessProfile: this.#deps.robustnessProfile } : {}),
      ...(resolved.kind === 'stop' ? { stopReason: resolved.stopReason } : {}),
      ...(state.scratchpad ? { scratchpad: state.scratchpad } : {}),
    };
    const verifying = startSpan('aleph.verify', {}, turn.trace.context);
    const verdict = await chain.run(context, turn.signal);
    endSpan(verifying, {
      'aleph.verdict': verdict.kind,
      ...(verdict.kind === 'continue' ? {} : { 'aleph.verdict.reason': verdict.reason }),
      ...(verdict.kind !== 'continue' && verdict.source ? { 'aleph.verdict.source': verdict.source } : {}),
    });
    if (verdict.kind !== 'continue') await turn.log({ type: 'verdict', verdict });
    return verdict;
  }

  /** The proposed calls as the verifiers see them: the tool's declared kind (ACT validates the args). */
  #summaries(calls: readonly ToolCall[]): ToolCallSummary[] {
    return calls.map((call) => ({
      name: call.name,
      argsHash: hashArgs(call.args),
      ok: true,
      kind: this.#tools.get(call.name)?.kind ?? 'other',
    }));
  }

  /**
   * A veto: the proposed calls are answered, not run, and the model reads why in the feedback. A
   * vetoed stop starts a new attempt (a Ralph loop's next iteration): the tool-call streaks start
   * over, so the same command run again then is not a tool loop.
   */
  async #veto(
    turn: Turn,
    resolved: Exclude<Resolution, { kind: 'outcome' }>,
    verdict: Extract<VerifierVerdict, { kind: 'veto' }>,
    reply: Reply,
  ): Promise<TurnOutcome> {
    const { state } = turn;
    if (resolved.kind === 'calls') {
      for (const call of resolved.effective) {
        await turn.log({
          type: 'tool_result',
          callId: call.id,
          name: call.name,
          output: `not executed: ${verdict.reason}`,
          isError: true,
        });
      }
      const refused = this.#summaries(resolved.effective).map((summary) => ({ ...summary, ok: false }));
      state.history = recent([...state.history, ...refused]);
      state.toolCallsMade += refused.length;
    } else {
      state.history = []; // the stop was vetoed: a new attempt, new streaks
    }
    await turn.log({ type: 'feedback', content: verdict.feedback });
    return { kind: 'continued', step: step(turn.iteration, { vetoed: true, ...figures(reply) }), reply };
  }

  /**
   * ACT: PreToolUse first — a hook may deny a call (its result is the reason), rewrite its args, or
   * stop the run (nothing of the batch runs) — then the batch, partitioned by resource claim.
   */
  async #act(turn: Turn, resolved: Extract<Resolution, { kind: 'calls' }>, reply: Reply): Promise<Acted> {
    const deps = this.#deps;
    // A reply's calls past the cap are answered without running (nor asking a hook about them).
    const maxCalls = deps.maxToolCallsPerTurn ?? DEFAULT_MAX_TOOL_CALLS_PER_TURN;
    const all = resolved.effective;
    const hooked = await this.#beforeTools(all.slice(0, maxCalls), turn.where);
    for (const call of all.slice(maxCalls))
      hooked.denied.set(
        call.id,
        `not run: one reply may make at most ${maxCalls} tool calls and this one made ${all.length}; make the rest in a later turn`,
      );
    hooked.calls = [...hooked.calls, ...all.slice(maxCalls)];
    if (hooked.stops.length > 0) {
      for (const call of resolved.effective) {
        const output = hooked.denied.get(call.id) ?? 'not run: a tool hook stopped the run';
        await turn.log({ type: 'tool_result', callId: call.id, name: call.name, output, isError: true });
      }
      return {
        kind: 'outcome',
        outcome: {
          kind: 'ended',
          reason: hookStop('PreToolUse', hooked.stops),
          step: step(turn.iteration, { state: 'done', ...figures(reply) }),
          reply,
        },
      };
    }
    const acting = startSpan(
      'aleph.act',
      { 'aleph.act.calls': resolved.effective.length },
      turn.trace.context,
    );
    const outcomes = await act(hooked.calls, {
      tools: this.#tools,
      sessionId: turn.sessionId,
      signal: turn.signal,
      defaultTimeoutMs: deps.defaultToolTimeoutMs ?? DEFAULT_TOOL_TIMEOUT_MS,
      serial: resolved.rewritten || hooked.rewritten,
      sandbox: deps.sandbox,
      cache: turn.state.cache,
      denied: hooked.denied,
      trace: acting.context,
    });
    endSpan(acting, { 'aleph.act.ok': outcomes.filter((outcome) => outcome.ok).length });
    keepWithin(outcomes, deps.maxToolResultCharsPerTurn ?? DEFAULT_MAX_TOOL_RESULT_CHARS_PER_TURN);
    if (turn.signal.aborted)
      return { kind: 'outcome', outcome: { kind: 'ended', reason: { kind: 'cancelled' }, reply } };
    return { kind: 'ran', outcomes, denied: new Set(hooked.denied.keys()) };
  }

  /**
   * FINALIZE: the results logged and remembered, PostToolUse read (its feedback is the next user
   * message; its stop ends the run once every hook of the batch ran), the step made.
   */
  async #finalize(turn: Turn, acted: Extract<Acted, { kind: 'ran' }>, reply: Reply): Promise<TurnOutcome> {
    const { outcomes } = acted;
    let splitChild: string | undefined;
    for (const outcome of outcomes) {
      await turn.log({
        type: 'tool_result',
        callId: outcome.call.id,
        name: outcome.call.name,
        output: outcome.result.output,
        isError: !outcome.ok,
        ...(outcome.result.scratchpad ? { scratchpad: outcome.result.scratchpad } : {}),
      });
      turn.timeline.push(outcome.invocation);
      splitChild ??= outcome.result.splitChild;
    }
    const stops = await this.#afterTools(turn, outcomes, acted.denied);
    const summaries = outcomes.map((outcome) => ({
      name: outcome.call.name,
      argsHash: outcome.argsHash,
      ok: outcome.ok,
      kind: outcome.kind,
    }));
    turn.state.history = recent([...turn.state.history, ...summaries]);
    turn.state.toolCallsMade += summaries.length;
    const made = step(turn.iteration, {
      state: stops.length > 0 ? 'done' : 'continue',
      executed: outcomes.filter((outcome) => outcome.ok).length,
      ...(splitChild ? { splitChild } : {}),
      ...figures(reply),
    });
    if (stops.length > 0) return { kind: 'ended', reason: hookStop('PostToolUse', stops), step: made, reply };
    // A call that ran (an error result included) or that a hook denied is something the model reads
    // and acts on; only a turn none of whose calls could be run at all is a failure of the loop.
    if (outcomes.every((outcome) => outcome.invalid === true)) {
      const cause = `no call could be run: ${outcomes.at(-1)?.result.output}`;
      return { kind: 'failed', cause, step: made, reply };
    }
    return { kind: 'continued', step: made, reply };
  }

  /** PostToolUse for the calls that ran: their feedback logged; the stops' reasons returned. */
  async #afterTools(
    turn: Turn,
    outcomes: readonly ActOutcome[],
    denied: ReadonlySet<string>,
  ): Promise<string[]> {
    const hooks = this.#deps.toolHooks;
    if (hooks?.after === undefined) return [];
    const ran = outcomes.filter((outcome) => !denied.has(outcome.call.id));
    const notes = await Promise.all(
      ran.map(async (outcome) =>
        hooks
          .after?.(outcome.call, outcome.result, {
            ...turn.where,
            durationMs: outcome.invocation.endedAt - outcome.invocation.startedAt,
          })
          .catch(() => undefined),
      ),
    );
    const feedback = notes.flatMap((note) => (note?.feedback ? [note.feedback] : []));
    if (feedback.length > 0) await turn.log({ type: 'feedback', content: feedback.join('\n\n') });
    return notes.flatMap((note) => (note?.stop ? [note.stop] : []));
  }

  /** PreToolUse for a batch. A hook that throws denies its call: a guard that failed certifies nothing. */
  async #beforeTools(
    calls: readonly ToolCall[],
    where: ToolHookContext,
  ): Promise<{
    calls: readonly ToolCall[];
    denied: Map<string, string>;
    rewritten: boolean;
    stops: string[];
  }> {
    const denied = new Map<string, string>();
    const stops: string[] = [];
    const hooks = this.#deps.toolHooks;
    if (hooks?.before === undefined) return { calls, denied, rewritten: false, stops };
    let rewritten = false;
    const decisions = await Promise.all(
      calls.map((call) =>
        (hooks.before?.(call, where) ?? Promise.resolve<ToolHookDecision>({ kind: 'allow' })).catch(
          (error: unknown): ToolHookDecision => ({
            kind: 'deny',
            reason: `a tool hook failed, so the call was not run: ${errorMessage(error)}`,
          }),
        ),
      ),
    );
    const hooked = calls.map((call, index) => {
      const decision = decisions[index] ?? { kind: 'allow' };
      if (decision.kind === 'deny') denied.set(call.id, decision.reason);
      if (decision.kind === 'stop') stops.push(decision.reason);
      if (decision.kind !== 'rewrite') return call;
      rewritten = true;
      return { ...call, args: decision.args };
    });
    return { calls: hooked, denied, rewritten, stops };
  }
}

/**
 * One turn's tool output, bounded: in the model's order, results are kept whole until `max`
 * characters are spent; each one after is replaced by a note saying how long it was and why.
 */
function keepWithin(outcomes: ActOutcome[], max: number): void {
  let spent = 0;
  outcomes.forEach((outcome, index) => {
    const { output } = outcome.result;
    spent += output.length;
    if (spent <= max) return;
    outcomes[index] = {
      ...outcome,
      result: {
        ...outcome.result,
        output: `[${output.length} characters of output not kept: this turn's tool results passed ${max} characters; ask for it again in a turn of its own]`,
      },
    };
  });
}

/** Where the run is, as hooks and verifiers are told (Claude Code's cwd, transcript_path, …). */
function whereOf(
  input: RunInput,
  sessionId: string,
  signal: AbortSignal,
  transcriptPath: string | undefined,
): ToolHookContext {
  return {
    sessionId,
    signal,
    permissionMode: input.permissionMode ?? 'bypassPermissions',
    ...(input.cwd === undefined ? {} : { projectDir: input.cwd }),
    ...(transcriptPath === undefined ? {} : { transcriptPath }),
  };
}

/** A step's figures from its reply: time to first token and tokens. */
function figures(reply: Reply): Pick<TurnStep, 'firstTokenMs' | 'usage'> {
  return {
    ...(reply.firstTokenMs === undefined ? {} : { firstTokenMs: reply.firstTokenMs }),
    ...(reply.usage === undefined ? {} : { usage: reply.usage }),
  };
}

/** The run's counters after a turn: tokens, figures, the final text, the failure streak. */
function count(counters: Counters, outcome: TurnOutcome): void {
  const { reply } = outcome;
  if (reply !== undefined) {
    if (reply.usage) {
      counters.totalTokens += reply.usage.inputTokens + reply.usage.outputTokens;
      counters.usage = addUsage(counters.usage, reply.usage);
    }
    counters.turns.push({ iteration: outcome.step?.iteration ?? counters.iterations, ...figures(reply) });
    counters.finalText = reply.text;
  }
  if (outcome.kind === 'failed') {
    counters.failures += 1;
    counters.lastError = outcome.cause;
  } else if (outcome.step !== undefined) {
    counters.failures = 0;
    counters.lastError = undefined;
  }
}

function endTurnSpan(traced: Traced, outcome: TurnOutcome): void {
  const ended = outcome.kind === 'ended' ? outcome.reason : undefined;
  endSpan(
    traced,
    {
      'aleph.turn.state': outcome.step?.state ?? 'done',
      'aleph.turn.executed': outcome.step?.executed ?? 0,
      'aleph.turn.vetoed': outcome.step?.vetoed ?? false,
    },
    outcome.step?.error ?? (ended?.kind === 'error' ? describeError(ended.error) : undefined),
  );
}

/** The turn's deltas, numbered from 0: text and tool-argument fragments, and a rewrite's final text. */
function deltasOf(
  turn: Turn,
): { part: (part: ReplyPart) => void; replace: (text: string) => void } | undefined {
  const onDelta = turn.onDelta;
  if (onDelta === undefined) return undefined;
  const iteration = turn.iteration;
  let seq = 0;
  return {
    part(part) {
      if (part.type === 'text' && part.text !== '')
        onDelta({ kind: 'text', iteration, seq: seq++, text: part.text });
      else if (part.type === 'response' && part.response.text !== '')
        onDelta({ kind: 'text', iteration, seq: seq++, text: part.response.text });
      else if (part.type === 'tool-call-delta' && part.text !== '')
        onDelta({
          kind: 'tool_args',
          iteration,
          seq: seq++,
          callId: part.callId,
          name: part.name,
          text: part.text,
        });
    },
    replace(text) {
      onDelta({ kind: 'replace', iteration, seq: seq++, text });
    },
  };
}
