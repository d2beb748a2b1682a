// The `fetch` the providers' requests go through: a POST with a text body to an http(s) URL, over
// node:http on kept-alive connections, its body streamed as it arrives. Node's own fetch (undici)
// costs several times the CPU per model call (Request, Headers, resource timing, a web stream per
// step). Anything else — another method, a body that is not text, a redirect — goes to the global
// fetch unchanged. What the providers see is the same: a Response, a network failure as fetch's
// TypeError('fetch failed') with its cause (its code: ECONNREFUSED, ECONNRESET…), a cancel as the
// signal's reason. `boundedHttpFetch` also bounds what one reply may hold in memory where its bytes
// arrive: each server-sent event (a `text/event-stream` body, its events found by eventsource-parser)
// at most `maxBytes` characters, or the whole body of any other reply at most `maxBytes` bytes; past
// it the body fails with a BodyTooLargeError and its connection is closed.
import type { Agent as HttpAgent, ClientRequest, IncomingMessage, RequestOptions } from 'node:http';
import { StringDecoder } from 'node:string_decoder';
import { createParser, type EventSourceParser } from 'eventsource-parser';

interface Transport {
  readonly request: (
    url: URL,
    options: RequestOptions,
    reply: (response: IncomingMessage) => void,
  ) => ClientRequest;
  readonly agent: HttpAgent;
}

const transports = new Map<string, Promise<Transport>>();

/** node:http, or node:https at the first https request (a server without one never loads TLS). */
function transport(protocol: string): Promise<Transport> {
  let found = transports.get(protocol);
  if (found === undefined) {
    found = (protocol === 'https:' ? import('node:https') : import('node:http')).then((module) => ({
      request: module.request,
      agent: new module.Agent({ keepAlive: true }),
    }));
    transports.set(protocol, found);
  }
  return found;
}

/** Headers as node:http takes them (a Headers, pairs or a record). */
function headerRecord(headers: RequestInit['headers']): Record<string, string> {
  if (headers === undefined) return {};
  if (headers instanceof Headers || Array.isArray(headers))
    return Object.fromEntries(headers as Iterable<[string, string]>);
  return { ...(headers as Record<string, string>) };
}

/** A response's headers as fetch gives them: each name once, repeated values joined. */
function responseHeaders(raw: readonly string[]): Headers {
  const headers = new Headers();
  for (let index = 0; index + 1 < raw.length; index += 2) headers.append(raw[index]!, raw[index + 1]!);
  return headers;
}

/** The `code` of the error a bounded body fails with (providers test for it along the cause chain). */
export const BODY_TOO_LARGE = 'ALEPH_BODY_TOO_LARGE';

export class BodyTooLargeError extends Error {
  override readonly name = 'BodyTooLargeError';
  readonly code = BODY_TOO_LARGE;
  constructor(readonly maxBytes: number) {
    super(`the reply is larger than ${maxBytes} bytes in one piece`);
  }
}

/**
 * Counts a body as it arrives: per server-sent event, the characters the event stream's parser holds
 * (the line and the event not yet ended: LF, CRLF or CR line ends, a blank line ends an event), or
 * the whole body's bytes. `add` answers false once a count is past the bound.
 */
class BodyBound {
  #count = 0;
  #over = false;
  readonly #events: { decoder: StringDecoder; parser: EventSourceParser } | undefined;
  constructor(
    readonly maxBytes: number,
    perEvent: boolean,
  ) {
    this.#events = perEvent
      ? {
          decoder: new StringDecoder('utf8'),
          parser: createParser({
            maxBufferSize: maxBytes,
            onError: (error) => void (this.#over ||= error.type === 'max-buffer-size-exceeded'),
          }),
        }
      : undefined;
  }

  add(chunk: Uint8Array): boolean {
    if (this.#events === undefined) return (this.#count += chunk.byteLength) <= this.maxBytes;
    if (!this.#over) this.#events.parser.feed(this.#events.decoder.write(chunk));
    return !this.#over;
  }
}

const isEventStream = (contentType: string | null | undefined): boolean =>
  (contentType ?? '').toLowerCase().includes('text/event-stream');

/** Another fetch's body under the same bound (a redirect's, or a request httpFetch does not take). */
function bounded(response: Response, maxBytes: number | undefined): Response {
  if (maxBytes === undefined || response.body === null) return response;
  const bound = new BodyBound(maxBytes, isEventStream(response.headers.get('content-type')));
  const body = response.body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        if (!bound.add(chunk)) throw new BodyTooLargeError(maxBytes);
        controller.enqueue(chunk);
      },
    }),
  );
  return new Response(body, {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
}

const NULL_BODY = new Set([101, 204, 205, 304]);
/** `response`'s body as a web stream: read as it is pulled, paused while nobody reads. */
function bodyOf(
  response: IncomingMessage,
  signal: AbortSignal | undefined,
  maxBytes: number | undefined,
): ReadableStream<Uint8Array> {
  const bound =
    maxBytes === undefined
      ? undefined
      : new BodyBound(maxBytes, isEventStream(response.headers['content-type']));
  return new ReadableStream<Uint8Array>({
    start(controller) {
      const fail = (error: unknown): void => {
        try {
          controller.error(error);
        } catch {
          // closed already
        }
      };
      response.on('data', (chunk: Buffer) => {
        if (bound !== undefined && !bound.add(chunk)) {
          // Failed first (the destroy's own `aborted` must not be the reason), then closed: what is
          // past the bound is never read, let alone kept.
          fail(new BodyTooLargeError(bound.maxBytes));
          response.destroy();
          return;
        }
        controller.enqueue(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
        if ((controller.desiredSize ?? 1) <= 0) response.pause();
      });
      response.once('end', () => {
        try {
          controller.close();
        } catch {
          // errored already
        }
      });
      response.on('error', (error) => fail(signal?.aborted ? signal.reason : error));
      response.once('aborted', () =>
        fail(signal?.aborted ? signal.reason : Object.assign(new Error('aborted'), { code: 'ECONNRESET' })),
      );
    },
    pull() {
      response.resume();
    },
    cancel() {
      response.destroy();
    },
  });
}

/** A request body asking for a streamed reply (OpenAI's, Anthropic's `"stream": true`). */
const STREAM_ASKED = /"stream"\s*:\s*true\b/;

/** A streamed reply was asked for and the answer was a success of another kind. */
export class NotAStreamError extends Error {
  override readonly name = 'NotAStreamError';
  constructor(url: URL, status: number, contentType: string | undefined) {
    super(
      `the provider at ${url.origin}${url.pathname} answered ${status} with ${contentType === undefined ? 'no Content-Type' : `Content-Type ${contentType}`}, not a stream of events (text/event-stream): check [agent] base_url (an OpenAI-compatible API's usually ends in /v1)`,
    );
  }
}

/** fetch's TypeError for a request that never got an answer. */
const fetchFailed = (cause: unknown): TypeError => new TypeError('fetch failed', { cause });

export const httpFetch: typeof fetch = (input, init) => send(input, init, undefined);

/** httpFetch with each event of a streamed reply, or the whole of another reply, at most `maxBytes`. */
export const boundedHttpFetch =
  (maxBytes: number): typeof fetch =>
  (input, init) =>
    send(input, init, maxBytes);

async function send(
  input: Parameters<typeof fetch>[0],
  init: RequestInit = {},
  maxBytes: number | undefined,
): Promise<Response> {
  const method = (init.method ?? 'GET').toUpperCase();
  const body = init.body;
  const url = typeof input === 'string' ? new URL(input) : input instanceof URL ? input : undefined;
  if (
    url === undefined ||
    method !== 'POST' ||
    !(typeof body === 'string' || body === undefined || body === null) ||
    (url.protocol !== 'http:' && url.protocol !== 'https:') ||
    (init.redirect !== undefined && init.redirect !== 'follow')
  )
    return bounded(await fetch(input, init), maxBytes);
  const signal = init.signal ?? undefined;
  signal?.throwIfAborted();
  const { request, agent } = await transport(url.protocol);
  const reasonOf = (fallback: Error): Error => (signal?.aborted ? (signal.reason as Error) : fallback);
  signal?.throwIfAborted();
  const payload = body ?? '';
  const headers = headerRecord(init.headers);
  if (!Object.keys(headers).some((name) => name.toLowerCase() === 'content-length'))
    headers['content-length'] = String(Buffer.byteLength(payload));
  const response = await new Promise<IncomingMessage>((resolve, reject) => {
    const outgoing = request(url, { method, headers, agent }, resolve);
    const onAbort = (): void => void outgoing.destroy(signal!.reason as Error);
    signal?.addEventListener('abort', onAbort, { once: true });
    outgoing.once('close', () => signal?.removeEventListener('abort', onAbort));
    outgoing.on('error', (error) => reject(reasonOf(fetchFailed(error))));
    outgoing.end(payload);
  });
  const status = response.statusCode ?? 0;
  if (status >= 300 && status < 400 && response.headers.location !== undefined) {
    response.resume(); // fetch's own redirect rules (a 303 becomes a GET, and so on)
    return bounded(await fetch(url, init), maxBytes);
  }
  // A streamed reply asked for and a success that is no event stream (an HTML page, a JSON reply):
  // the wrong base URL, or a server that ignores `stream`. Said as such, not as a reply with nothing in it.
  const contentType = response.headers['content-type'];
  if (status >= 200 && status < 300 && !isEventStream(contentType) && STREAM_ASKED.test(payload)) {
    response.destroy();
    throw new NotAStreamError(url, status, contentType);
  }
  const empty = NULL_BODY.has(status) && response.resume(); // the connection goes back to the pool
  return new Response(empty ? null : bodyOf(response, signal, maxBytes), {
    status,
    statusText: response.statusMessage ?? '',
    headers: responseHeaders(response.rawHeaders),
  });
}
