// An endpoint whose every streamed reply is one huge `write_file` call, in OpenAI's chat completion
// chunks or Anthropic's message events (as the real providers stream a tool call's arguments), its
// `content` of `size` characters sent in `piece`-character events — or all in one event. It writes
// only as fast as the client reads (a full socket waits for `drain`) and counts what it wrote, so a
// client that stops reading early is seen: `written` stays far below the reply's size.
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface HugeReply {
  /** Characters of the call's `content`. */
  readonly size: number;
  /** Characters of content per event; `size` (or more) sends it all in one event. */
  readonly piece: number;
  /** The file the call writes. */
  readonly path: string;
}

export interface HugeReplyLlm {
  readonly baseUrl: string;
  /** Bytes written to each reply's body so far, in the order of the requests. */
  readonly written: number[];
  /** Each reply: whether the client closed the connection before the whole body was written. */
  readonly cutShort: boolean[];
  close(): Promise<void>;
}

function events(format: 'openai' | 'anthropic', reply: HugeReply): { head: string[]; tail: string[] } {
  const opening = JSON.stringify(JSON.stringify({ path: reply.path, content: '' }).slice(0, -2)).slice(1, -1);
  if (format === 'openai') {
    const chunk = (delta: object, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: 'chatcmpl-huge', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    return {
      head: [
        chunk({ role: 'assistant', content: '' }),
        // The call's first fragment: the arguments' opening, up to the content's first character.
        `data: {"id":"chatcmpl-huge","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_huge","type":"function","function":{"name":"write_file","arguments":"${opening}"}}]},"finish_reason":null}]}\n\n`,
      ],
      tail: [
        chunk({ tool_calls: [{ index: 0, function: { arguments: '"}' } }] }),
        chunk({}, 'tool_calls'),
        'data: [DONE]\n\n',
      ],
    };
  }
  const event = (type: string, data: object) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
  return {
    head: [
      event('message_start', {
        message: {
          id: 'msg_huge',
          type: 'message',
          role: 'assistant',
          model: 'm',
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: 1, output_tokens: 1 },
        },
      }),
      event('content_block_start', {
        index: 0,
        content_block: { type: 'tool_use', id: 'toolu_huge', name: 'write_file', input: {} },
      }),
      `event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"${opening}"}}\n\n`,
    ],
    tail: [
      event('content_block_delta', { index: 0, delta: { type: 'input_json_delta', partial_json: '"}' } }),
      event('content_block_stop', { index: 0 }),
      event('message_delta', {
        delta: { stop_reason: 'tool_use', stop_sequence: null },
        usage: { output_tokens: 1 },
      }),
      event('message_stop', {}),
    ],
  };
}

/** One event carrying `count` characters of content (`A`s: no escapes). */
function contentEvent(format: 'openai' | 'anthropic', count: number): string {
  const text = 'A'.repeat(count);
  return format === 'openai'
    ? `data: {"id":"chatcmpl-huge","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"${text}"}}]},"finish_reason":null}]}\n\n`
    : `event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"${text}"}}\n\n`;
}

async function writeReply(
  response: ServerResponse,
  format: 'openai' | 'anthropic',
  reply: HugeReply,
  count: (bytes: number) => void,
): Promise<void> {
  // In slices of 64 KiB, each once the socket took the last: one huge event is written as the
  // client reads it too.
  const write = async (data: string): Promise<boolean> => {
    for (let at = 0; at < data.length; at += 65_536) {
      if (response.destroyed) return false;
      const slice = data.slice(at, at + 65_536);
      count(Buffer.byteLength(slice));
      if (!response.write(slice))
        await new Promise<void>((resolve) => {
          response.once('drain', resolve);
          response.once('close', resolve);
        });
    }
    return !response.destroyed;
  };
  response.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  const { head, tail } = events(format, reply);
  for (const data of head) if (!(await write(data))) return;
  const piece = contentEvent(format, Math.min(reply.piece, reply.size));
  for (let sent = 0; sent < reply.size; sent += reply.piece) {
    const data = sent + reply.piece <= reply.size ? piece : contentEvent(format, reply.size - sent);
    if (!(await write(data))) return;
  }
  for (const data of tail) if (!(await write(data))) return;
  response.end();
}

export async function startHugeReplyLlm(reply: HugeReply): Promise<HugeReplyLlm> {
  const written: number[] = [];
  const cutShort: boolean[] = [];
  const server = createServer((request, response) => {
    request.resume();
    request.on('end', () => {
      const format = request.url === '/v1/messages' ? 'anthropic' : 'openai';
      const index = written.push(0) - 1;
      cutShort.push(false);
      response.on('close', () => {
        if (!response.writableFinished) cutShort[index] = true;
      });
      void writeReply(response, format, reply, (bytes) => (written[index]! += bytes));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    written,
    cutShort,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
