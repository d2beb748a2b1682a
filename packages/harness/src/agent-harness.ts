// The Think → Act loop. Each turn: PREPARE (fit the context) → THINK (sleep guard held, provider
// call bounded by turnTimeoutMs) → RESOLVE → verifier chain → ACT → FINALIZE (log, flush, step).
// It ends only on the model's explicit stop (allowed by the chain), a verifier halt, a hard cap,
// the consecutive-failure watchdog, cancellation or an error — and says which, precisely. Counters
// live here; everything else lives in the session log.
import {
  hashToolArgs as hashArgs,
  TOOL_HISTORY_WINDOW,
  type ScratchpadRow,
  type ToolCallSummary,
  type TurnVerifyContext,
  type VerifierChain,
  type VerifierVerdict,
} from '@aleph/verification';
import { act, timerDelay, type ActOutcome, type EvidenceCache } from './act.js';
import { fitToBudget, History } from './context-budget.js';
import { HarnessError } from './errors.js';
import { AGENT_ROLE_PROMPT } from './prompt.js';
import { ToolService } from './tool-service.js';
import { endSpan, startSpan, type Traced } from './tracing.js';
import type {
  HarnessDeps,
  HarnessErrorInfo,
  Message,
  RunResult,
  SessionEvent,
  SessionEventBody,
  StopReason,
  TerminateReason,
  ThinkResponse,
  TokenUsage,
  ToolCall,
  ToolHookContext,
  ToolHookDecision,
  ToolInvocation,
  TurnStep,
} from './types.js';

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
}

export const DEFAULT_MAX_ITERATIONS = 50;
export const DEFAULT_TURN_TIMEOUT_MS = 300_000;
export const DEFAULT_TOOL_TIMEOUT_MS = 120_000;
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

class StallError extends Error {
  constructor(readonly elapsedMs: number) {
    super(`the provider did not answer within ${elapsedMs} ms`);
  }
}

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
      break;
    default: {
      const unreachable: never = event;
      throw new HarnessError('session', `unknown session event ${JSON.stringify(unreachable)}`);
    }
  }
}

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
    let iterations = 0;
    let totalTokens = 0;
    let finalText = '';
    let failures = 0;
    let lastError: string | undefined;

    // Where the run is, as hooks and verifiers are told (Claude Code's cwd, transcript_path, …).
    const transcriptPath = sessions.transcriptPath?.(sessionId);
    const where: ToolHookContext = {
      sessionId,
      signal,
      permissionMode: input.permissionMode ?? 'bypassPermissions',
      ...(input.cwd === undefined ? {} : { projectDir: input.cwd }),
      ...(transcriptPath === undefined ? {} : { transcriptPath }),
    };
    const log = async (event: SessionEventBody): Promise<void> => {
      const stored = await sessions.append(sessionId, event);
      apply(state, event);
      options.onEvent?.(stored);
    };
    const running = startSpan('aleph.run', {
      'aleph.session.id': sessionId,
      'gen_ai.request.model': deps.provider.id,
      ...(input.cwd === undefined ? {} : { 'aleph.cwd': input.cwd }),
    });
    const finish = async (reason: TerminateReason): Promise<RunResult> => {
      const failed = reason.kind === 'error' || reason.kind === 'consecutive_failures';
      endSpan(
        running,
        {
          'aleph.terminate.reason': reason.kind,
          'aleph.iterations': iterations,
          'gen_ai.usage.total_tokens': totalTokens,
        },
        failed
          ? reason.kind === 'error'
            ? describeError(reason.error)
            : (reason.lastError ?? reason.kind)
          : undefined,
      );
      try {
        await log({ type: 'terminate', reason });
        await sessions.flush(sessionId);
      } catch {
        // The run's answer matters more than the last log line.
      }
      await sessions.end?.(sessionId).catch(() => undefined);
      return {
        sessionId,
        terminateReason: reason,
        iterations,
        totalTokens,
        toolTimeline: timeline,
        finalText,
      };
    };

    try {
      // A taken-over run goes on from its log; its turns so far count toward maxIterations.
      if (input.resume === true && events.some((event) => event.type === 'user'))
        iterations = events.filter((event) => event.type === 'turn_step').length;
      else await log({ type: 'user', content: input.prompt, ...(input.cwd ? { cwd: input.cwd } : {}) });
      for (;;) {
        if (signal.aborted) return await finish({ kind: 'cancelled' });
        if (iterations >= maxIterations) return await finish({ kind: 'max_iterations' });
        iterations += 1;
        const turning = startSpan('aleph.turn', { 'aleph.turn.iteration': iterations }, running.context);
        const outcome = await this.#turn({
          state,
          sessionId,
          iterations,
          signal,
          log,
          timeline,
          where,
          trace: turning,
        }).catch((error: unknown) => {
          endSpan(turning, {}, errorMessage(error)); // the run's own end follows, below
          throw error;
        });
        endSpan(
          turning,
          {
            'aleph.turn.state': outcome.step?.state ?? 'done',
            'aleph.turn.executed': outcome.step?.executed ?? 0,
            'aleph.turn.vetoed': outcome.step?.vetoed ?? false,
          },
          outcome.step?.error ??
            (outcome.end?.kind === 'error' ? describeError(outcome.end.error) : undefined),
        );
        if (outcome.usage) totalTokens += outcome.usage;
        if (outcome.text !== undefined) finalText = outcome.text;
        if (outcome.failed !== undefined) {
          failures += 1;
          lastError = outcome.failed;
        } else if (outcome.step !== undefined) {
          failures = 0;
          lastError = undefined;
        }
        if (outcome.step !== undefined) await log({ type: 'turn_step', step: outcome.step });
        await sessions.flush(sessionId); // the turn boundary: everything so far is durable
        if (outcome.step !== undefined) options.onStep?.(outcome.step);
        if (outcome.end !== undefined) return await finish(outcome.end);
        if (failures >= maxFailures) {
          const cause = lastError === undefined ? {} : { lastError };
          return await finish({ kind: 'consecutive_failures', count: failures, ...cause });
        }
      }
    } catch (error) {
      if (signal.aborted) return await finish({ kind: 'cancelled' });
      const message = errorMessage(error);
      const kind = error instanceof HarnessError && error.code === 'session' ? 'session' : 'llm';
      return await finish({ kind: 'error', error: { kind, message } });
    }
  }

  async #turn(turn: {
    state: RunState;
    sessionId: string;
    iterations: number;
    signal: AbortSignal;
    log: (event: SessionEventBody) => Promise<void>;
    timeline: ToolInvocation[];
    where: ToolHookContext;
    trace: Traced;
    // `failed`: why the turn failed in the loop's machinery (it counts toward the watchdog).
  }): Promise<{ step?: TurnStep; end?: TerminateReason; failed?: string; usage?: number; text?: string }> {
    const deps = this.#deps;
    const { state, signal, log } = turn;

    // PREPARE
    const fitted = fitToBudget(state.conversation.messages, deps.contextBudget, state.conversation.tokens);
    if (fitted.mode !== 'none') {
      await log({
        type: 'compaction',
        mode: fitted.mode,
        fromTokens: fitted.fromTokens,
        toTokens: fitted.toTokens,
      });
    }
    const messages = deps.guardrails?.input?.(fitted.messages) ?? fitted.messages;

    // THINK — the sleep guard is held from here until the turn returns, whatever way it returns.
    using _guard = deps.power?.inhibitSleep('Aleph agent loop');
    const thinking = startSpan(
      'aleph.think',
      { 'gen_ai.request.model': deps.provider.id },
      turn.trace.context,
    );
    let response: ThinkResponse;
    try {
      response = await this.#think(
        {
          system: deps.systemPrompt ?? AGENT_ROLE_PROMPT,
          messages, // the history itself: a copy is O(history) a turn (ThinkRequest's contract)
          tools: this.#tools.specs(),
        },
        signal,
      );
    } catch (error) {
      endSpan(thinking, {}, errorMessage(error));
      if (signal.aborted) return { end: { kind: 'cancelled' } };
      if (error instanceof StallError)
        return { end: { kind: 'error', error: { kind: 'stalled_turn', elapsedMs: error.elapsedMs } } };
      const message = errorMessage(error);
      // A fatal error (a bad key, an unknown model) will not heal by asking again.
      if ((error as { fatal?: unknown } | null)?.fatal === true)
        return { end: { kind: 'error', error: { kind: 'llm', message } } };
      await log({ type: 'feedback', content: `[harness] the provider call failed: ${message}` });
      return {
        failed: message,
        step: { state: 'continue', executed: 0, vetoed: false, iteration: turn.iterations, error: message },
      };
    }
    response = deps.guardrails?.output?.(response) ?? response;
    const usage = response.usage ? response.usage.inputTokens + response.usage.outputTokens : 0;
    const stopReason = stopReasonOf(response);
    endSpan(thinking, {
      'gen_ai.usage.input_tokens': response.usage?.inputTokens ?? 0,
      'gen_ai.usage.output_tokens': response.usage?.outputTokens ?? 0,
      'gen_ai.response.finish_reasons': [stopReason],
    });
    if (stopReason === 'content_filter') {
      await log({ type: 'assistant', content: response.text, toolCalls: [], ...usageOf(response) });
      const message = "the provider's content filter stopped the reply";
      return { end: { kind: 'error', error: { kind: 'llm', message } }, usage, text: response.text };
    }

    // RESOLVE
    const calls = response.toolCalls.map((call) => ({
      ...call,
      id: call.id || `call_${turn.iterations}_${call.name}`,
    }));
    let rewritten = false;
    const effective: ToolCall[] = calls.map((call) => {
      if (deps.guardrails?.toolArgs === undefined) return call;
      const args = deps.guardrails.toolArgs(call);
      if (args !== call.args) rewritten = true;
      return { ...call, args };
    });
    await log({ type: 'assistant', content: response.text, toolCalls: calls, ...usageOf(response) });
    const notStopped = calls.length === 0 ? notAStop(response, stopReason) : undefined;
    if (notStopped !== undefined) {
      // Not a stop. Say so and go on, bounded by the watchdog; the model alone decides it is done.
      const message = notStopped;
      const nudge = stopReason === 'max_tokens' || stopReason === 'error' ? CUT_OFF : NO_STOP;
      await log({ type: 'feedback', content: `[harness] ${message}: ${nudge}` });
      const step: TurnStep = { state: 'continue', executed: 0, vetoed: false, iteration: turn.iterations };
      return { step: { ...step, error: message }, failed: message, usage, text: response.text };
    }
    const stopRequested = calls.length === 0;

    // Verifier chain
    // The tool's declared kind is enough here; ACT validates the arguments once.
    const proposed: ToolCallSummary[] = effective.map((call) => ({
      name: call.name,
      argsHash: hashArgs(call.args),
      ok: true,
      kind: this.#tools.get(call.name)?.kind ?? 'other',
    }));
    const context: TurnVerifyContext = {
      iterations: turn.iterations,
      toolCallsMade: state.toolCallsMade + proposed.length,
      finalText: response.text,
      recentToolCalls: recent([...state.history, ...proposed]),
      callsThisTurn: proposed.length,
      sessionId: turn.sessionId,
      ...(turn.where.projectDir === undefined ? {} : { projectDir: turn.where.projectDir }),
      ...(turn.where.transcriptPath === undefined ? {} : { transcriptPath: turn.where.transcriptPath }),
      ...(turn.where.permissionMode === undefined ? {} : { permissionMode: turn.where.permissionMode }),
      ...(deps.robustnessProfile ? { robustnessProfile: deps.robustnessProfile } : {}),
      ...(stopRequested ? { stopReason } : {}),
      ...(state.scratchpad ? { scratchpad: state.scratchpad } : {}),
    };
    const verdict = deps.verifier
      ? await this.#verify(context, signal, turn.trace)
      : { kind: 'continue' as const };
    if (verdict.kind !== 'continue') await log({ type: 'verdict', verdict });
    if (verdict.kind === 'halt') {
      return {
        end: { kind: 'halted', by: verdict.source ?? 'verifier', reason: verdict.reason },
        usage,
        text: response.text,
      };
    }
    if (verdict.kind === 'veto') {
      // The proposed calls are answered, not run; the model reads why in the feedback.
      for (const call of effective) {
        await log({
          type: 'tool_result',
          callId: call.id,
          name: call.name,
          output: `not executed: ${verdict.reason}`,
          isError: true,
        });
      }
      this.#remember(
        state,
        proposed.map((summary) => ({ ...summary, ok: false })),
      );
      // A blocked stop starts a new attempt with new feedback (a Ralph loop's next iteration): the
      // same command run again then is not a tool loop, so the streaks start over.
      if (stopRequested) state.history = [];
      await log({ type: 'feedback', content: verdict.feedback });
      return {
        step: { state: 'continue', executed: 0, vetoed: true, iteration: turn.iterations },
        usage,
        text: response.text,
      };
    }
    if (stopRequested) {
      return {
        step: { state: 'done', executed: 0, vetoed: false, iteration: turn.iterations },
        end: { kind: 'model_stop' },
        usage,
        text: response.text,
      };
    }

    // ACT — PreToolUse first: a hook may deny a call (its result is the reason) or rewrite its args.
    const hooked = await this.#beforeTools(effective, turn.where);
    if (hooked.stops.length > 0) {
      // A kill switch: nothing of the batch runs (a denied call's result is still its reason).
      for (const call of effective) {
        const output = hooked.denied.get(call.id) ?? 'not run: a tool hook stopped the run';
        await log({ type: 'tool_result', callId: call.id, name: call.name, output, isError: true });
      }
      const step: TurnStep = { state: 'done', executed: 0, vetoed: false, iteration: turn.iterations };
      return { step, end: hookStop('PreToolUse', hooked.stops), usage, text: response.text };
    }
    const acting = startSpan('aleph.act', { 'aleph.act.calls': effective.length }, turn.trace.context);
    const outcomes: ActOutcome[] = await act(hooked.calls, {
      tools: this.#tools,
      sessionId: turn.sessionId,
      signal,
      defaultTimeoutMs: deps.defaultToolTimeoutMs ?? DEFAULT_TOOL_TIMEOUT_MS,
      serial: rewritten || hooked.rewritten,
      sandbox: deps.sandbox,
      cache: state.cache,
      denied: hooked.denied,
      trace: acting.context,
    });
    endSpan(acting, { 'aleph.act.ok': outcomes.filter((outcome) => outcome.ok).length });
    if (signal.aborted) return { end: { kind: 'cancelled' }, usage, text: response.text };

    // FINALIZE
    let splitChild: string | undefined;
    for (const outcome of outcomes) {
      await log({
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
    // PostToolUse: what the hooks say about the results is read before the next Think.
    const hooks = deps.toolHooks;
    const stops: string[] = [];
    if (hooks?.after !== undefined) {
      const ran = outcomes.filter((outcome) => !hooked.denied.has(outcome.call.id));
      const notes = await Promise.all(
        ran.map(async (outcome) =>
          hooks.after?.(outcome.call, outcome.result, turn.where).catch(() => undefined),
        ),
      );
      const feedback = notes.flatMap((note) => (note?.feedback ? [note.feedback] : []));
      if (feedback.length > 0) await log({ type: 'feedback', content: feedback.join('\n\n') });
      stops.push(...notes.flatMap((note) => (note?.stop ? [note.stop] : [])));
    }
    this.#remember(
      state,
      outcomes.map((outcome) => ({
        name: outcome.call.name,
        argsHash: outcome.argsHash,
        ok: outcome.ok,
        kind: outcome.kind,
      })),
    );
    const step: TurnStep = {
      state: stops.length > 0 ? 'done' : 'continue',
      executed: outcomes.filter((outcome) => outcome.ok).length,
      vetoed: false,
      iteration: turn.iterations,
      ...(splitChild ? { splitChild } : {}),
    };
    // A call that ran (an error result included) or that a hook denied is something the model reads
    // and acts on; only a turn none of whose calls could be run at all is a failure of the loop.
    const invalid = outcomes.every((outcome) => outcome.invalid === true);
    const failed = invalid ? { failed: `no call could be run: ${outcomes.at(-1)?.result.output}` } : {};
    if (stops.length > 0) return { step, end: hookStop('PostToolUse', stops), usage, text: response.text };
    return { step, ...failed, usage, text: response.text };
  }

  async #verify(context: TurnVerifyContext, signal: AbortSignal, parent: Traced): Promise<VerifierVerdict> {
    const verifying = startSpan('aleph.verify', {}, parent.context);
    const verdict = await (this.#deps.verifier as VerifierChain).run(context, signal);
    endSpan(verifying, {
      'aleph.verdict': verdict.kind,
      ...(verdict.kind === 'continue' ? {} : { 'aleph.verdict.reason': verdict.reason }),
      ...(verdict.kind !== 'continue' && verdict.source ? { 'aleph.verdict.source': verdict.source } : {}),
    });
    return verdict;
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

  #remember(state: RunState, summaries: readonly ToolCallSummary[]): void {
    state.history = recent([...state.history, ...summaries]);
    state.toolCallsMade += summaries.length;
  }

  async #think(
    request: Parameters<HarnessDeps['provider']['think']>[0],
    signal: AbortSignal,
  ): Promise<ThinkResponse> {
    const timeoutMs = this.#deps.turnTimeoutMs ?? DEFAULT_TURN_TIMEOUT_MS;
    const controller = new AbortController();
    const onAbort = (): void => controller.abort(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    const started = performance.now();
    let timer: NodeJS.Timeout | undefined;
    let onCancel: (() => void) | undefined;
    try {
      return await Promise.race([
        this.#deps.provider.think(request, controller.signal),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => {
            const stall = new StallError(Math.round(performance.now() - started));
            controller.abort(stall);
            reject(stall);
          }, timerDelay(timeoutMs));
        }),
        new Promise<never>((_, reject) => {
          onCancel = () => reject(new Error('cancelled'));
          if (signal.aborted) onCancel();
          else signal.addEventListener('abort', onCancel, { once: true });
        }),
      ]);
    } finally {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      if (onCancel !== undefined) signal.removeEventListener('abort', onCancel);
    }
  }
}
