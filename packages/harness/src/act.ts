// ACT: run a turn's tool calls. Calls are partitioned by resource claim into ordered groups — no
// two calls in a group conflict; a group runs concurrently, groups one after another — and results
// come back in the model's order. A duplicate read-only call (name, canonical args) reuses the first
// result, within or across batches, until anything else runs; every call is bounded by its
// timeout; a throw, a timeout or bad args become an error result.
import { setMaxListeners } from 'node:events';
import { hashToolArgs } from '@aleph/verification';
import type { Context } from '@opentelemetry/api';
import type { ToolService } from './tool-service.js';
import { endSpan, startSpan, withSpan, type Traced } from './tracing.js';
import type { CommandSandbox, ResourceClaim, Tool, ToolCall, ToolInvocation, ToolResult } from './types.js';

export interface ActOutcome {
  readonly call: ToolCall;
  readonly result: ToolResult;
  readonly ok: boolean;
  readonly kind: 'mutation' | 'evidence' | 'other';
  readonly argsHash: string;
  readonly invocation: ToolInvocation;
  /** The call could not be run at all: an unknown tool or arguments its schema refuses (not a hook's deny). */
  readonly invalid?: boolean;
}

export interface ActOptions {
  readonly tools: ToolService;
  readonly sessionId: string;
  readonly signal: AbortSignal;
  readonly defaultTimeoutMs: number;
  /** A guardrail rewrote some call's args: run the whole batch serially. */
  readonly serial: boolean;
  readonly sandbox?: CommandSandbox | undefined;
  /** Reuse read-only results across batches (one per run); within the batch when absent. */
  readonly cache?: EvidenceCache | undefined;
  /** Calls a tool hook denied, by call id: each one's result is the reason, as an error. */
  readonly denied?: ReadonlyMap<string, string> | undefined;
  /** The span (context) tool spans go under. */
  readonly trace?: Context | undefined;
}

function keysOverlap(a: readonly string[], b: readonly string[]): boolean {
  return a.includes('*') || b.includes('*') || a.some((key) => b.includes(key));
}

export function conflicts(a: ResourceClaim, b: ResourceClaim): boolean {
  if (a.kind === 'none' || b.kind === 'none') return false;
  if (a.kind === 'shared' && b.kind === 'shared') return false;
  return keysOverlap(a.keys, b.keys);
}

/** Each call goes in the group right after the last group it conflicts with: order is kept where it matters. */
export function partition(claims: readonly ResourceClaim[], serial: boolean): number[][] {
  const groups: number[][] = [];
  claims.forEach((claim, index) => {
    if (serial) {
      groups.push([index]);
      return;
    }
    let lastConflict = -1;
    groups.forEach((group, groupIndex) => {
      if (group.some((other) => conflicts(claim, claims[other] as ResourceClaim))) lastConflict = groupIndex;
    });
    const target = lastConflict + 1;
    (groups[target] ??= []).push(index);
  });
  return groups;
}

/** The longest delay a Node timer keeps: past it, setTimeout fires after 1 ms. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** Every timer in the harness goes through this: a longer (or non-finite) duration waits the most a timer can. */
export function timerDelay(ms: number): number {
  return Number.isNaN(ms) ? MAX_TIMER_MS : Math.min(Math.max(0, ms), MAX_TIMER_MS);
}

class TimeoutError extends Error {}

async function runOne(
  call: ToolCall,
  options: ActOptions,
  parsedArgs: unknown,
  toolName: string,
): Promise<ToolResult> {
  const tool = options.tools.get(toolName);
  if (tool === undefined) return { output: `unknown tool "${toolName}"`, isError: true };
  const timeoutMs = tool.timeoutMs ?? options.defaultTimeoutMs;
  const traced = startSpan(
    'aleph.tool',
    { 'gen_ai.tool.name': toolName, 'gen_ai.tool.call.id': call.id },
    options.trace,
  );
  const result = await runTraced(call, options, parsedArgs, tool, timeoutMs, traced);
  endSpan(
    traced,
    { 'aleph.tool.ok': result.isError !== true },
    result.isError ? result.output.slice(0, 200) : undefined,
  );
  return result;
}

async function runTraced(
  call: ToolCall,
  options: ActOptions,
  parsedArgs: unknown,
  tool: Tool<unknown>,
  timeoutMs: number,
  traced: Traced,
): Promise<ToolResult> {
  const controller = new AbortController();
  const onAbort = (): void => controller.abort(options.signal.reason);
  options.signal.addEventListener('abort', onAbort, { once: true });
  let timer: NodeJS.Timeout | undefined;
  try {
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const timeout = new TimeoutError(`tool ${call.name} timed out after ${timeoutMs} ms`);
        reject(timeout); // settles the race first; the abort then tells the tool to stop
        controller.abort(timeout);
      }, timerDelay(timeoutMs));
    });
    const aborted = new Promise<never>((_, reject) => {
      if (options.signal.aborted) reject(new Error('cancelled'));
      controller.signal.addEventListener('abort', () => reject(controller.signal.reason as Error), {
        once: true,
      });
    });
    return await Promise.race([
      withSpan(traced, () =>
        tool.execute(parsedArgs, {
          signal: controller.signal,
          sessionId: options.sessionId,
          ...(options.sandbox ? { sandbox: options.sandbox } : {}),
        }),
      ),
      deadline,
      aborted,
    ]);
  } catch (error) {
    if (error instanceof TimeoutError) return { output: error.message, isError: true };
    if (options.signal.aborted) return { output: `tool ${call.name} was cancelled`, isError: true };
    return {
      output: `tool ${call.name} failed: ${(error as Error).message ?? String(error)}`,
      isError: true,
    };
  } finally {
    clearTimeout(timer);
    options.signal.removeEventListener('abort', onAbort);
  }
}

/** `name\0argsHash` → an earlier batch's result of a read-only call; any other call empties it. */
export type EvidenceCache = Map<string, ToolResult>;

export async function act(calls: readonly ToolCall[], options: ActOptions): Promise<ActOutcome[]> {
  // The batch's own signal, one listener on the caller's: each running call listens to it, and a
  // reply of many calls is not a listener leak (Node warns past 10 on one signal).
  const batch = new AbortController();
  setMaxListeners(0, batch.signal);
  const relay = (): void => batch.abort(options.signal.reason);
  if (options.signal.aborted) relay();
  else options.signal.addEventListener('abort', relay, { once: true });
  try {
    return await actOn(calls, { ...options, signal: batch.signal });
  } finally {
    options.signal.removeEventListener('abort', relay);
  }
}

async function actOn(calls: readonly ToolCall[], options: ActOptions): Promise<ActOutcome[]> {
  const parsed = calls.map((call) => {
    const reason = options.denied?.get(call.id);
    return reason === undefined
      ? options.tools.parse(call.name, call.args)
      : ({ ok: false, error: reason } as const);
  });
  const claims = parsed.map((entry): ResourceClaim =>
    entry.ok ? options.tools.claimOf(entry.tool, entry.args) : { kind: 'none' },
  );
  const hashes = calls.map((call) => hashToolArgs(call.args));
  const outcomes: (ActOutcome | undefined)[] = calls.map(() => undefined);
  // Only a read-only call (`readOnly: true`) is reused, and only while nothing else ran in between
  // (in the model's order): a write, a shell command or any tool not known to be read-only may
  // have changed what it read.
  const cache = options.cache ?? new Map<string, ToolResult>();
  const keys = calls.map((call, index) => `${call.name}\u0000${hashes[index] ?? ''}`);
  const firstByKey = new Map<string, number>();
  const duplicates = new Map<number, number | ToolResult>();
  let changed = false;
  parsed.forEach((entry, index) => {
    if (!entry.ok) return;
    const key = keys[index] as string;
    if (entry.tool.readOnly !== true) {
      firstByKey.clear();
      cache.clear();
      changed = true;
      return;
    }
    const earlier = firstByKey.get(key) ?? cache.get(key);
    if (earlier === undefined) firstByKey.set(key, index);
    else duplicates.set(index, earlier);
  });

  const execute = async (index: number): Promise<void> => {
    const call = calls[index] as ToolCall;
    const entry = parsed[index];
    const startedAt = Date.now();
    let result: ToolResult;
    let kind: ActOutcome['kind'] = 'other';
    let invalid = false;
    if (entry === undefined || !entry.ok) {
      result = { output: entry?.ok === false ? entry.error : 'invalid call', isError: true };
      invalid = options.denied?.has(call.id) !== true;
    } else {
      kind = entry.tool.kind ?? 'other';
      result = await runOne(call, options, entry.args, entry.tool.name);
    }
    const ok = result.isError !== true;
    outcomes[index] = {
      call,
      result,
      ok,
      kind,
      argsHash: hashes[index] ?? '',
      invocation: { callId: call.id, name: call.name, startedAt, endedAt: Date.now(), ok },
      ...(invalid ? { invalid } : {}),
    };
  };

  const unique = calls.map((_, index) => index).filter((index) => !duplicates.has(index));
  const groups = partition(
    unique.map((index) => claims[index] as ResourceClaim),
    options.serial,
  );
  for (const group of groups) {
    if (options.signal.aborted) break;
    await Promise.all(group.map((position) => execute(unique[position] as number)));
  }
  for (const [index, earlier] of duplicates) {
    const call = calls[index] as ToolCall;
    const original =
      typeof earlier === 'number'
        ? outcomes[earlier]
        : {
            result: earlier,
            ok: true,
            kind: (parsed[index]?.ok ? parsed[index].tool.kind : undefined) ?? 'other',
            argsHash: hashes[index] ?? '',
            invocation: {
              callId: call.id,
              name: call.name,
              startedAt: Date.now(),
              endedAt: Date.now(),
              ok: true,
            },
          };
    if (original === undefined) continue;
    outcomes[index] = {
      ...original,
      call,
      invocation: { ...original.invocation, callId: call.id, deduplicated: true },
    };
  }
  // A batch that ran nothing but reads leaves its results reusable by the next one.
  if (!changed && !options.signal.aborted) {
    outcomes.forEach((outcome, index) => {
      if (outcome?.ok) cache.set(keys[index] as string, outcome.result); // all were read-only
    });
  }
  return calls.map(
    (call, index) =>
      outcomes[index] ?? {
        call,
        result: { output: `tool ${call.name} was cancelled before it ran`, isError: true },
        ok: false,
        kind: 'other',
        argsHash: hashes[index] ?? '',
        invocation: {
          callId: call.id,
          name: call.name,
          startedAt: Date.now(),
          endedAt: Date.now(),
          ok: false,
        },
      },
  );
}
