// A local LLM endpoint that speaks the providers' real wire formats — OpenAI chat completions
// (POST /v1/chat/completions) and Anthropic messages (POST /v1/messages) — and answers from a
// script: a function of the conversation so far. No LLM is reachable from CI; this is the next best.
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { writeSse, type StreamMode } from './sse.js';

export type { StreamMode } from './sse.js';

export interface Turn {
  readonly role: 'system' | 'user' | 'assistant' | 'tool';
  readonly text: string;
  readonly toolName?: string;
  readonly isError?: boolean;
  readonly toolCalls?: readonly { name: string; args: unknown }[];
}

export type Reply =
  /** `raw`: the wire's own finish reason instead (OpenAI `finish_reason`, Anthropic `stop_reason`). */
  | { text: string; finish?: 'length' | 'content_filter'; raw?: string | null }
  | { text?: string; call: { name: string; args: unknown } }
  | { text?: string; calls: { name: string; args: unknown }[] }; // several calls in one turn
export type Brain = (conversation: readonly Turn[], request: { model: string; tools: string[] }) => Reply;

/** An HTTP error the endpoint answers with instead of the brain, in the protocol's error format. */
export interface FakeFailure {
  readonly status: number;
  readonly message: string;
  /** OpenAI's `error.code` / Anthropic's `error.type`. */
  readonly code?: string;
  readonly headers?: Record<string, string>;
}

export interface FakeLlm {
  readonly baseUrl: string;
  readonly requests: {
    format: 'openai' | 'anthropic';
    body: any;
    headers: Record<string, unknown>;
    /** When the client closed the connection before the reply was whole (performance.now()). */
    closedAt?: number;
  }[];
  /** The next requests (one each, in order) get these errors; then the brain answers again. */
  failNext(...failures: FakeFailure[]): void;
  /** The next streamed replies (one each, in order) are written this way (`stream: true` requests). */
  streamNext(...modes: (StreamMode & { usage?: { input: number; output: number; cached: number } })[]): void;
  close(): Promise<void>;
}

function sendFailure(response: ServerResponse, format: 'openai' | 'anthropic', failure: FakeFailure): void {
  const body =
    format === 'openai'
      ? { error: { message: failure.message, type: 'invalid_request_error', code: failure.code ?? null } }
      : { type: 'error', error: { type: failure.code ?? 'api_error', message: failure.message } };
  response
    .writeHead(failure.status, { 'content-type': 'application/json', ...failure.headers })
    .end(JSON.stringify(body));
}

function fromOpenAi(body: any): Turn[] {
  const names = new Map<string, string>();
  return (body.messages ?? []).map((message: any): Turn => {
    for (const call of message.tool_calls ?? []) names.set(call.id, call.function.name);
    if (message.role === 'tool')
      return {
        role: 'tool',
        text: String(message.content),
        toolName: names.get(message.tool_call_id) ?? '?',
      };
    return {
      role: message.role,
      text:
        typeof message.content === 'string'
          ? message.content
          : (message.content ?? []).map((part: any) => part.text ?? '').join(''),
      ...(message.tool_calls
        ? {
            toolCalls: message.tool_calls.map((call: any) => ({
              name: call.function.name,
              args: JSON.parse(call.function.arguments),
            })),
          }
        : {}),
    };
  });
}

function fromAnthropic(body: any): Turn[] {
  const names = new Map<string, string>();
  const turns: Turn[] = [];
  if (body.system)
    turns.push({
      role: 'system',
      text: Array.isArray(body.system) ? body.system.map((b: any) => b.text).join('') : body.system,
    });
  for (const message of body.messages ?? []) {
    const blocks =
      typeof message.content === 'string' ? [{ type: 'text', text: message.content }] : message.content;
    const text = blocks
      .filter((b: any) => b.type === 'text')
      .map((b: any) => b.text)
      .join('');
    const uses = blocks.filter((b: any) => b.type === 'tool_use');
    for (const use of uses) names.set(use.id, use.name);
    const results = blocks.filter((b: any) => b.type === 'tool_result');
    for (const result of results) {
      const content =
        typeof result.content === 'string'
          ? result.content
          : (result.content ?? []).map((b: any) => b.text ?? '').join('');
      turns.push({
        role: 'tool',
        text: content,
        toolName: names.get(result.tool_use_id) ?? '?',
        ...(result.is_error ? { isError: true } : {}),
      });
    }
    if (results.length === 0 || text) {
      turns.push({
        role: message.role,
        text,
        ...(uses.length ? { toolCalls: uses.map((u: any) => ({ name: u.name, args: u.input })) } : {}),
      });
    }
  }
  return turns;
}

export async function startFakeLlm(brain: Brain): Promise<FakeLlm> {
  const requests: FakeLlm['requests'] = [];
  const failures: FakeFailure[] = [];
  const modes: Parameters<FakeLlm['streamNext']> = [];
  let counter = 0;
  const server: Server = createServer((request, response) => {
    let raw = '';
    request.on('data', (chunk) => (raw += chunk));
    request.on('end', () => {
      const body = JSON.parse(raw || '{}');
      counter += 1;
      const callsOf = (reply: Reply) =>
        'calls' in reply ? reply.calls : 'call' in reply ? [reply.call] : [];
      const watch = (entry: FakeLlm['requests'][number]) =>
        response.on('close', () => {
          if (!response.writableFinished) entry.closedAt = performance.now();
        });
      /** A `stream: true` request is answered with server-sent events. */
      const streamed = (
        format: 'openai' | 'anthropic',
        reply: Reply,
        finish: string | null,
        ids: string[],
      ) => {
        const mode = modes.shift() ?? {};
        void writeSse(
          response,
          format,
          {
            text: reply.text ?? '',
            calls: callsOf(reply).map((call, index) => ({ ...call, id: ids[index] ?? `call_${index}` })),
            finish,
            usage: mode.usage ?? { input: 12, output: 7, cached: 0 },
          },
          body.model,
          mode,
        );
      };
      if (request.url === '/v1/chat/completions') {
        const entry: FakeLlm['requests'][number] = { format: 'openai', body, headers: request.headers };
        requests.push(entry);
        watch(entry);
        const failure = failures.shift();
        if (failure !== undefined) return sendFailure(response, 'openai', failure);
        const reply = brain(fromOpenAi(body), {
          model: body.model,
          tools: (body.tools ?? []).map((t: any) => t.function.name),
        });
        const calls = callsOf(reply);
        const openAiFinish =
          'raw' in reply
            ? (reply.raw ?? null)
            : calls.length > 0
              ? 'tool_calls'
              : ('finish' in reply && reply.finish) || 'stop';
        const callIds = calls.map((_, index) =>
          index === 0 ? `call_${counter}` : `call_${counter}_${index}`,
        );
        if (body.stream === true) return streamed('openai', reply, openAiFinish, callIds);
        const message =
          calls.length > 0
            ? {
                role: 'assistant',
                content: reply.text ?? null,
                tool_calls: calls.map((call, index) => ({
                  id: index === 0 ? `call_${counter}` : `call_${counter}_${index}`,
                  type: 'function',
                  function: { name: call.name, arguments: JSON.stringify(call.args) },
                })),
              }
            : { role: 'assistant', content: reply.text || null };
        response.writeHead(200, { 'content-type': 'application/json' }).end(
          JSON.stringify({
            id: `chatcmpl-${counter}`,
            object: 'chat.completion',
            created: Math.floor(Date.now() / 1000),
            model: body.model,
            choices: [
              {
                index: 0,
                message,
                finish_reason:
                  'raw' in reply
                    ? reply.raw
                    : calls.length > 0
                      ? 'tool_calls'
                      : ('finish' in reply && reply.finish) || 'stop',
              },
            ],
            usage: { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 },
          }),
        );
      } else if (request.url === '/v1/messages') {
        const entry: FakeLlm['requests'][number] = { format: 'anthropic', body, headers: request.headers };
        requests.push(entry);
        watch(entry);
        const failure = failures.shift();
        if (failure !== undefined) return sendFailure(response, 'anthropic', failure);
        const reply = brain(fromAnthropic(body), {
          model: body.model,
          tools: (body.tools ?? []).map((t: any) => t.name),
        });
        const anthropicFinish =
          'raw' in reply
            ? (reply.raw ?? null)
            : callsOf(reply).length > 0
              ? 'tool_use'
              : !('finish' in reply) || reply.finish === undefined
                ? 'end_turn'
                : { length: 'max_tokens', content_filter: 'refusal' }[reply.finish];
        if (body.stream === true)
          return streamed(
            'anthropic',
            reply,
            anthropicFinish,
            callsOf(reply).map((_, index) =>
              index === 0 ? `toolu_${counter}` : `toolu_${counter}_${index}`,
            ),
          );
        const content = [
          ...(reply.text ? [{ type: 'text', text: reply.text }] : []),
          ...callsOf(reply).map((call, index) => ({
            type: 'tool_use',
            id: index === 0 ? `toolu_${counter}` : `toolu_${counter}_${index}`,
            name: call.name,
            input: call.args,
          })),
        ];
        response.writeHead(200, { 'content-type': 'application/json' }).end(
          JSON.stringify({
            id: `msg_${counter}`,
            type: 'message',
            role: 'assistant',
            model: body.model,
            content,
            stop_reason:
              'raw' in reply
                ? reply.raw
                : callsOf(reply).length > 0
                  ? 'tool_use'
                  : !('finish' in reply) || reply.finish === undefined
                    ? 'end_turn'
                    : { length: 'max_tokens', content_filter: 'refusal' }[reply.finish],
            stop_sequence: null,
            usage: { input_tokens: 12, output_tokens: 7 },
          }),
        );
      } else {
        response
          .writeHead(404, { 'content-type': 'application/json' })
          .end(JSON.stringify({ error: { message: `no route ${request.url}` } }));
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests,
    failNext: (...next) => void failures.push(...next),
    streamNext: (...next) => void modes.push(...next),
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections(); // a stalled stream must not hold the close
      }),
  };
}

/** The scenario of the server's end-to-end test: write a file, cat it through the shell, stop. */
export const writeCatStop: Brain = (conversation) => {
  const task = conversation.find((turn) => turn.role === 'user')?.text ?? '';
  const last = conversation.at(-1);
  if (task.includes('GOAL-TEST')) {
    if (last?.role === 'tool') return { text: `The gate was refused: ${last.text}\nVERDICT: FAIL` };
    return {
      call: { name: 'goal', args: { objective: 'prove the gate check', gate_command: 'true; touch pwned' } },
    };
  }
  const file = /file (\S+)/.exec(task)?.[1] ?? 'hello.txt';
  if (last?.role === 'user' && last.text !== task)
    return { text: `Checked again after the hook's feedback.\nVERDICT: PASS` };
  if (last?.role !== 'tool')
    return { call: { name: 'write_file', args: { path: file, content: `hello from ${file}\n` } } };
  if (last.toolName === 'write_file') return { call: { name: 'shell', args: { command: `cat ${file}` } } };
  return { text: `Wrote and read back ${file}.\nVERDICT: PASS` };
};
