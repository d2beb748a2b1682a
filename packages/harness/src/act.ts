// ACT: run a turn's tool calls. Calls are partitioned by resource claim into ordered groups — no
// two calls in a group conflict; a group runs concurrently, groups one after another — and results
// come back in the model's order. A duplicate (name, canonical args) reuses the first result; every
// call is bounded by its timeout; a throw, a timeout or bad args become an error result.
import { hashToolArgs } from '@aleph/verification';
import type { ToolService } from './tool-service.js';
import type { CommandSandbox, ResourceClaim, ToolCall, ToolInvocation, ToolResult } from './types.js';

export interface ActOutcome {
  readonly call: ToolCall;
  readonly result: ToolResult;
  readonly ok: boolean;
  readonly kind: 'mutation' | 'evidence' | 'other';
  readonly argsHash: string;
  readonly invocation: ToolInvocation;
}

export interface ActOptions {
  readonly tools: ToolService;
  readonly sessionId: string;
  readonly signal: AbortSignal;
  readonly defaultTimeoutMs: number;
  /** A guardrail rewrote some call's args: run the whole batch serially. */
  readonly serial: boolean;
  readonly sandbox?: CommandSandbox | undefined;
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
      }, timeoutMs);
    });
    const aborted = new Promise<never>((_, reject) => {
      if (options.signal.aborted) reject(new Error('cancelled'));
      controller.signal.addEventListener('abort', () => reject(controller.signal.reason as Error), {
        once: true,
      });
    });
    return await Promise.race([
      tool.execute(parsedArgs, {
        signal: controller.signal,
        sessionId: options.sessionId,
        ...(options.sandbox ? { sandbox: options.sandbox } : {}),
      }),
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

export async function act(calls: readonly ToolCall[], options: ActOptions): Promise<ActOutcome[]> {
  const parsed = calls.map((call) => options.tools.parse(call.name, call.args));
  const claims = parsed.map((entry): ResourceClaim =>
    entry.ok ? options.tools.claimOf(entry.tool, entry.args) : { kind: 'none' },
  );
  const hashes = calls.map((call) => hashToolArgs(call.args));
  const outcomes: (ActOutcome | undefined)[] = calls.map(() => undefined);
  const firstByKey = new Map<string, number>();
  const duplicates = new Map<number, number>();
  calls.forEach((call, index) => {
    const key = `${call.name}\u0000${hashes[index] ?? ''}`;
    const first = firstByKey.get(key);
    if (first === undefined) firstByKey.set(key, index);
    else duplicates.set(index, first);
  });

  const execute = async (index: number): Promise<void> => {
    const call = calls[index] as ToolCall;
    const entry = parsed[index];
    const startedAt = Date.now();
    let result: ToolResult;
    let kind: ActOutcome['kind'] = 'other';
    if (entry === undefined || !entry.ok) {
      result = { output: entry?.ok === false ? entry.error : 'invalid call', isError: true };
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
  for (const [index, first] of duplicates) {
    const original = outcomes[first];
    if (original === undefined) continue;
    const call = calls[index] as ToolCall;
    outcomes[index] = {
      ...original,
      call,
      invocation: { ...original.invocation, callId: call.id, deduplicated: true },
    };
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
