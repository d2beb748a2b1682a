// A local endpoint that answers like an OpenAI-compatible chat-completions API, from a script: a
// function of the conversation so far (the console's copy of the server tests' fake, trimmed to the
// one wire the console's runs use). No LLM is reachable from CI.
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export type Reply =
  | { text: string }
  | { text?: string; call: { name: string; args: unknown } }
  | { hangMs: number }
  /** Streamed piece by piece; each promise is waited for before the pieces after it go. */
  | { pieces: (string | Promise<void>)[] };
export interface Message {
  role: string;
  content: string | null;
  tool_calls?: { function: { name: string } }[];
}

export async function startFakeLlm(
  brain: (messages: Message[]) => Reply,
): Promise<{ baseUrl: string; close(): Promise<void> }> {
  let counter = 0;
  const server = createServer((request, response) => {
    let raw = '';
    request.on('data', (chunk: Buffer) => (raw += chunk.toString()));
    request.on('end', () => {
      counter += 1;
      const body = JSON.parse(raw || '{}');
      const reply = brain(body.messages ?? []);
      if ('hangMs' in reply) {
        setTimeout(() => response.destroy(), reply.hangMs); // a model that never answers, until cut off
        return;
      }
      if ('pieces' in reply) return void streamPieces(response, body.model as string, reply.pieces);
      const message =
        'call' in reply
          ? {
              role: 'assistant',
              content: reply.text ?? null,
              tool_calls: [
                {
                  id: `call_${counter}`,
                  type: 'function',
                  function: { name: reply.call.name, arguments: JSON.stringify(reply.call.args) },
                },
              ],
            }
          : { role: 'assistant', content: reply.text };
      const finish = 'call' in reply ? 'tool_calls' : 'stop';
      const usage = { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 };
      if (body.stream === true) {
        // The wire the server's adapter reads: server-sent chat.completion.chunk events, then [DONE].
        const chunk = (delta: object, finishReason: string | null, extra: object = {}): string =>
          `data: ${JSON.stringify({
            id: `chatcmpl-${counter}`,
            object: 'chat.completion.chunk',
            created: Math.floor(Date.now() / 1000),
            model: body.model,
            choices: [{ index: 0, delta, finish_reason: finishReason }],
            ...extra,
          })}\n\n`;
        const parts = [chunk({ role: 'assistant', content: message.content ?? '' }, null)];
        if ('tool_calls' in message)
          parts.push(
            chunk({ tool_calls: message.tool_calls.map((call, index) => ({ index, ...call })) }, null),
          );
        parts.push(chunk({}, finish, { usage }), 'data: [DONE]\n\n');
        response.writeHead(200, { 'content-type': 'text/event-stream' }).end(parts.join(''));
        return;
      }
      response.writeHead(200, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          id: `chatcmpl-${counter}`,
          object: 'chat.completion',
          created: Math.floor(Date.now() / 1000),
          model: body.model,
          choices: [{ index: 0, message, finish_reason: finish }],
          usage,
        }),
      );
    });
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  return {
    baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
    close: () => new Promise((done) => server.close(() => done())),
  };
}

/** A reply streamed as server-sent chunks, one per piece, waiting where the script says. */
async function streamPieces(
  response: ServerResponse,
  model: string,
  pieces: (string | Promise<void>)[],
): Promise<void> {
  const chunk = (delta: object, finishReason: string | null, extra: object = {}): string =>
    `data: ${JSON.stringify({
      id: 'chatcmpl-pieces',
      object: 'chat.completion.chunk',
      created: Math.floor(Date.now() / 1000),
      model,
      choices: [{ index: 0, delta, finish_reason: finishReason }],
      ...extra,
    })}\n\n`;
  response.writeHead(200, { 'content-type': 'text/event-stream' });
  response.write(chunk({ role: 'assistant', content: '' }, null));
  for (const piece of pieces)
    if (typeof piece === 'string') response.write(chunk({ content: piece }, null));
    else await piece;
  const usage = { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 };
  response.end(chunk({}, 'stop', { usage }) + 'data: [DONE]\n\n');
}

/** Write a file, cat it through the shell tool, then stop (twice, if a stop hook vetoes the first). */
export function writeCatStop(messages: Message[]): Reply {
  const last = messages.at(-1);
  if (messages.some((message) => message.role === 'user' && message.content?.includes('think forever')))
    return { hangMs: 20_000 };
  const calls = messages.flatMap((message) => message.tool_calls ?? []).map((call) => call.function.name);
  if (last?.role === 'user' && messages.filter((message) => message.role === 'user').length > 1)
    return { text: "Checked again after the hook's feedback.\nVERDICT: PASS" };
  if (!calls.includes('write_file'))
    return {
      call: { name: 'write_file', args: { path: 'console.txt', content: 'hello from the console\n' } },
    };
  if (!calls.includes('shell')) return { call: { name: 'shell', args: { command: 'cat console.txt' } } };
  return { text: 'Wrote and read back console.txt.\nVERDICT: PASS' };
}
