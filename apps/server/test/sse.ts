// The streaming half of the fake LLM: a reply as the providers' real server-sent events — OpenAI
// chat completion chunks (`data: {...}` … `data: [DONE]`) and Anthropic message events
// (`event: message_start` … `message_stop`) — written chunk by chunk, optionally slowly, or broken
// on purpose (a reset connection, a malformed chunk, a stall, a reply that never finishes).
import type { ServerResponse } from 'node:http';

export interface StreamedReply {
  readonly text: string;
  readonly calls: readonly { id: string; name: string; args: unknown }[];
  /** The wire's finish reason (OpenAI `finish_reason`, Anthropic `stop_reason`). */
  readonly finish: string | null;
  readonly usage: { input: number; output: number; cached: number };
}

/** How the next streamed reply is written. */
export interface StreamMode {
  /** The text is sent in this many pieces (default 3). */
  readonly chunks?: number;
  /** A pause before each event, ms. */
  readonly delayMs?: number;
  /** After this many events: `reset` destroys the socket, `close` ends the body cleanly. */
  readonly cutAfter?: number;
  readonly cut?: 'reset' | 'close';
  /** The second text piece is sent as a chunk that is not JSON. */
  readonly malformed?: boolean;
  /** After this many events, nothing more (the socket stays open). */
  readonly stallAfter?: number;
  /** Everything but the finish: no finish reason, no [DONE] / message_stop. */
  readonly noFinish?: boolean;
}

function pieces(text: string, count: number): string[] {
  if (text === '') return [];
  const size = Math.ceil(text.length / Math.max(1, count));
  const out: string[] = [];
  for (let at = 0; at < text.length; at += size) out.push(text.slice(at, at + size));
  return out;
}

const MALFORMED = '{"choices": [ {"delta": '; // cut JSON, as a broken proxy might send

function openAiEvents(reply: StreamedReply, model: string, mode: StreamMode): string[] {
  const base = { id: 'chatcmpl-stream', object: 'chat.completion.chunk', created: 1, model };
  const chunk = (delta: object, finish: string | null = null) =>
    JSON.stringify({ ...base, choices: [{ index: 0, delta, finish_reason: finish }] });
  const events = [chunk({ role: 'assistant', content: '' })];
  pieces(reply.text, mode.chunks ?? 3).forEach((piece, index) =>
    events.push(mode.malformed === true && index === 1 ? MALFORMED : chunk({ content: piece })),
  );
  reply.calls.forEach((call, index) => {
    const args = JSON.stringify(call.args);
    const half = Math.floor(args.length / 2);
    events.push(
      chunk({
        tool_calls: [
          {
            index,
            id: call.id,
            type: 'function',
            function: { name: call.name, arguments: args.slice(0, half) },
          },
        ],
      }),
      chunk({ tool_calls: [{ index, function: { arguments: args.slice(half) } }] }),
    );
  });
  const sse = (list: string[]) => list.map((data) => `data: ${data}\n\n`);
  if (mode.noFinish === true) return sse(events);
  events.push(chunk({}, reply.finish));
  events.push(
    JSON.stringify({
      ...base,
      choices: [],
      usage: {
        prompt_tokens: reply.usage.input,
        completion_tokens: reply.usage.output,
        total_tokens: reply.usage.input + reply.usage.output,
        prompt_tokens_details: { cached_tokens: reply.usage.cached },
      },
    }),
  );
  events.push('[DONE]');
  return sse(events);
}

function anthropicEvents(reply: StreamedReply, model: string, mode: StreamMode): string[] {
  const event = (type: string, data: object) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
  const events = [
    event('message_start', {
      message: {
        id: 'msg_stream',
        type: 'message',
        role: 'assistant',
        model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: {
          input_tokens: reply.usage.input - reply.usage.cached,
          output_tokens: 1,
          cache_read_input_tokens: reply.usage.cached,
          cache_creation_input_tokens: 0,
        },
      },
    }),
  ];
  let index = 0;
  const texts = pieces(reply.text, mode.chunks ?? 3);
  if (texts.length > 0) {
    events.push(event('content_block_start', { index, content_block: { type: 'text', text: '' } }));
    texts.forEach((piece, at) =>
      events.push(
        mode.malformed === true && at === 1
          ? `event: content_block_delta\ndata: ${MALFORMED}\n\n`
          : event('content_block_delta', { index, delta: { type: 'text_delta', text: piece } }),
      ),
    );
    events.push(event('content_block_stop', { index }));
    index += 1;
  }
  for (const call of reply.calls) {
    const args = JSON.stringify(call.args);
    const half = Math.floor(args.length / 2);
    events.push(
      event('content_block_start', {
        index,
        content_block: { type: 'tool_use', id: call.id, name: call.name, input: {} },
      }),
      event('content_block_delta', {
        index,
        delta: { type: 'input_json_delta', partial_json: args.slice(0, half) },
      }),
      event('content_block_delta', {
        index,
        delta: { type: 'input_json_delta', partial_json: args.slice(half) },
      }),
    );
    if (mode.noFinish === true) return events; // the call's block never stops
    events.push(event('content_block_stop', { index }));
    index += 1;
  }
  if (mode.noFinish === true) return events;
  events.push(
    event('message_delta', {
      delta: { stop_reason: reply.finish, stop_sequence: null },
      usage: { output_tokens: reply.usage.output },
    }),
    event('message_stop', {}),
  );
  return events;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Writes the reply as SSE in the request's format, as `mode` says; resolves when done (or given up). */
export async function writeSse(
  response: ServerResponse,
  format: 'openai' | 'anthropic',
  reply: StreamedReply,
  model: string,
  mode: StreamMode = {},
): Promise<void> {
  const events = format === 'openai' ? openAiEvents(reply, model, mode) : anthropicEvents(reply, model, mode);
  response.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  response.flushHeaders();
  for (const [count, data] of events.entries()) {
    if (response.destroyed) return;
    if (mode.stallAfter !== undefined && count >= mode.stallAfter) return; // silent, socket open
    if (mode.cutAfter !== undefined && count >= mode.cutAfter) {
      await sleep(50); // what was written reaches the client first: the cut is mid-reply
      if (mode.cut === 'close') response.end();
      else response.socket?.resetAndDestroy();
      return;
    }
    if (mode.delayMs) await sleep(mode.delayMs);
    if (response.destroyed) return;
    response.write(data);
  }
  if (mode.noFinish === true) return; // the body stays open: a reply whose parts never finish
  response.end();
}
