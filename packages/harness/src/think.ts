// THINK's reading of a reply: the provider's stream of parts (a one-part stream when it does not
// stream) assembled into one response, each part handed on as it comes. Invariant: `readReply`
// settles exactly once and never waits past its bounds — the turn timeout (a stall: the run ends),
// the first-token and idle timeouts and a stream that ends or breaks before its finish (a failed
// turn: the watchdog counts it), or the caller's cancellation. Whatever ends it aborts the request.
import { timerDelay } from './act.js';
import type {
  AiProvider,
  ReplyPart,
  ReplyStream,
  StopReason,
  ThinkRequest,
  ThinkResponse,
  TokenUsage,
  ToolCall,
} from './types.js';

/** The turn timeout passed: THINK stalled (the run ends `stalled_turn`). */
export class StallError extends Error {
  constructor(readonly elapsedMs: number) {
    super(`the provider did not answer within ${elapsedMs} ms`);
  }
}

/** The reply could not be read whole: the turn fails with this message (a timeout, a cut stream). */
export class ReplyError extends Error {}

/** The caller cancelled. */
class CancelledError extends Error {}

export interface ReadReplyOptions {
  /** Bounds the whole reply; past it the run stalls. */
  readonly turnTimeoutMs: number;
  /** From the request to the first part; past it the turn fails. */
  readonly firstTokenTimeoutMs?: number | undefined;
  /** Between two parts; past it the turn fails. */
  readonly idleTimeoutMs?: number | undefined;
  /** Each part, as it comes. */
  readonly onPart?: ((part: ReplyPart) => void) | undefined;
}

export interface ReadReply {
  readonly response: ThinkResponse;
  /** From the request to the first part, ms. */
  readonly firstTokenMs: number;
}

/** The provider's reply as a stream: its own, or its whole reply as one `response` part. */
export function replyStream(provider: AiProvider, request: ThinkRequest, signal: AbortSignal): ReplyStream {
  if (provider.stream !== undefined) return provider.stream(request, signal);
  const whole = provider.think(request, signal);
  return {
    [Symbol.asyncIterator]() {
      let given = false;
      return {
        async next(): Promise<IteratorResult<ReplyPart>> {
          if (given) return { done: true, value: undefined };
          given = true;
          return { done: false, value: { type: 'response', response: await whole } };
        },
      };
    },
  };
}

/** Builds the response from its parts; a reply without its finish is not a reply. */
export class ReplyAssembler {
  #text = '';
  readonly #calls: ToolCall[] = [];
  #usage: TokenUsage | undefined;
  #finish: { stopReason: StopReason; rawStopReason?: string } | undefined;
  #whole: ThinkResponse | undefined;

  add(part: ReplyPart): void {
    switch (part.type) {
      case 'text':
        this.#text += part.text;
        break;
      case 'tool-call':
        this.#calls.push(part.call);
        break;
      case 'usage':
        this.#usage = part.usage;
        break;
      case 'finish':
        this.#finish = {
          stopReason: part.stopReason,
          ...(part.rawStopReason === undefined ? {} : { rawStopReason: part.rawStopReason }),
        };
        break;
      case 'response':
        this.#whole = part.response;
        break;
      case 'reasoning':
      case 'tool-call-delta':
        break; // signs of progress; the finished call comes as a `tool-call`
      default: {
        const unreachable: never = part;
        throw new ReplyError(`unknown reply part ${JSON.stringify(unreachable)}`);
      }
    }
  }

  response(): ThinkResponse {
    if (this.#whole !== undefined) return this.#whole;
    if (this.#finish === undefined)
      throw new ReplyError('the reply stream ended before its finish: the reply is incomplete');
    return {
      text: this.#text,
      toolCalls: this.#calls,
      ...this.#finish,
      ...(this.#usage === undefined ? {} : { usage: this.#usage }),
    };
  }
}

/**
 * Reads the stream `open` gives for a signal that aborts when reading ends early, bounded by the
 * timeouts and `signal`. Throws StallError, ReplyError, the stream's own error, or (cancelled) an
 * error with `signal` aborted.
 */
export async function readReply(
  open: (signal: AbortSignal) => ReplyStream,
  signal: AbortSignal,
  options: ReadReplyOptions,
): Promise<ReadReply> {
  const controller = new AbortController();
  const started = performance.now();
  let interrupt!: (error: Error) => void;
  const interrupted = new Promise<never>((_, reject) => {
    interrupt = (error) => {
      reject(error);
      controller.abort(error); // after the reject: the race is settled by our reason, not the stream's
    };
  });
  interrupted.catch(() => undefined);
  const onCancel = (): void => interrupt(new CancelledError('cancelled'));
  signal.addEventListener('abort', onCancel, { once: true });
  const timers: NodeJS.Timeout[] = [];
  const after = (ms: number | undefined, error: () => Error): NodeJS.Timeout | undefined => {
    if (ms === undefined) return undefined;
    const timer = setTimeout(() => interrupt(error()), timerDelay(ms));
    timers.push(timer);
    return timer;
  };
  const elapsed = (): number => Math.round(performance.now() - started);
  after(options.turnTimeoutMs, () => new StallError(elapsed()));
  const firstToken = after(
    options.firstTokenTimeoutMs,
    () => new ReplyError(`no reply within ${options.firstTokenTimeoutMs} ms (the first-token timeout)`),
  );
  let idle: NodeJS.Timeout | undefined;
  const assembler = new ReplyAssembler();
  let firstTokenMs: number | undefined;
  let iterator: AsyncIterator<ReplyPart> | undefined;
  try {
    if (signal.aborted) onCancel();
    iterator = open(controller.signal)[Symbol.asyncIterator]();
    for (;;) {
      const next = await Promise.race([iterator.next(), interrupted]);
      if (next.done === true) break;
      if (firstTokenMs === undefined) {
        firstTokenMs = elapsed();
        clearTimeout(firstToken);
        idle = after(
          options.idleTimeoutMs,
          () =>
            new ReplyError(`the reply stalled: no part for ${options.idleTimeoutMs} ms (the idle timeout)`),
        );
      } else idle?.refresh();
      assembler.add(next.value);
      options.onPart?.(next.value);
    }
    return { response: assembler.response(), firstTokenMs: firstTokenMs ?? elapsed() };
  } catch (error) {
    controller.abort(error); // closes the request of a stream that broke or was given up
    void iterator?.return?.()?.catch(() => undefined);
    throw error;
  } finally {
    for (const timer of timers) clearTimeout(timer);
    signal.removeEventListener('abort', onCancel);
  }
}
