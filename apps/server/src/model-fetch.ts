// The model's HTTP requests, for the AI SDK's providers (their `fetch` option): node:http with
// kept-alive connections instead of the global fetch. A tool call is one streamed request; the
// global fetch (undici's Request, Response and their web streams around node's socket) cost the
// server more CPU per call than the rest of the request's path together. The providers still get a
// WHATWG Response with a ReadableStream body, and fail as the global fetch fails: `TypeError('fetch
// failed', { cause })` before an answer, the signal's reason on abort, `TypeError('terminated')` when
// the connection breaks mid-body. What node:http does not do (a redirect, a body that is not a
// string, a Request object) goes to the global fetch.
import { Agent, request as httpRequest, type IncomingMessage, type RequestOptions } from 'node:http';

type Send = (url: URL, options: RequestOptions) => ReturnType<typeof httpRequest>;
const plain: { send: Send; agent: Agent } = { send: httpRequest, agent: new Agent({ keepAlive: true }) };
/** node:https (and TLS) is loaded for the first https request, not by every server at start. */
let secure: Promise<{ send: Send; agent: Agent }> | undefined;
const secureClient = (): Promise<{ send: Send; agent: Agent }> =>
  (secure ??= import('node:https').then((https) => ({
    send: https.request,
    agent: new https.Agent({ keepAlive: true }),
  })));
const NULL_BODY = new Set([204, 205, 304]);
const REDIRECT = new Set([301, 302, 303, 307, 308]);

/** What the global fetch fails with on abort: the signal's reason (an Error unless the caller chose otherwise). */
const abortReason = (signal: AbortSignal): Error =>
  (signal.reason as Error | undefined) ?? new DOMException('This operation was aborted', 'AbortError');

/** Headers the providers pass (a plain object of strings), or undefined for anything else. */
function plainHeaders(headers: RequestInit['headers']): Record<string, string> | undefined {
  if (headers === undefined) return {};
  if (headers instanceof Headers || Array.isArray(headers)) return undefined;
  return headers as Record<string, string>;
}

/** The response's body as a web stream that reads from node's response as it is read itself. */
function bodyOf(response: IncomingMessage, signal: AbortSignal | undefined): ReadableStream<Uint8Array> {
  let done = false;
  let onAbort = (): void => {};
  const finish = (): boolean => {
    if (done) return false;
    done = true;
    signal?.removeEventListener('abort', onAbort);
    return true;
  };
  return new ReadableStream<Uint8Array>({
    start(controller) {
      const fail = (error: unknown): void => {
        if (!finish()) return;
        controller.error(error);
        response.destroy();
      };
      response.on('data', (chunk: Buffer) => {
        if (done) return;
        controller.enqueue(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
        if ((controller.desiredSize ?? 1) <= 0) response.pause();
      });
      response.once('end', () => {
        if (finish()) controller.close();
      });
      response.once('error', (cause) => fail(new TypeError('terminated', { cause })));
      response.once('close', () => fail(new TypeError('terminated')));
      if (signal !== undefined) {
        onAbort = () => fail(abortReason(signal));
        if (signal.aborted) return onAbort();
        signal.addEventListener('abort', onAbort, { once: true });
      }
    },
    pull() {
      response.resume();
    },
    cancel() {
      finish();
      response.destroy();
    },
  });
}

/** `fetch` for the model's API: see the top of this file. */
export const modelFetch: typeof fetch = (input, init = {}) => {
  const url = typeof input === 'string' ? new URL(input) : input instanceof URL ? input : undefined;
  const headers = plainHeaders(init.headers);
  const body = init.body ?? undefined;
  const signal = init.signal ?? undefined;
  if (
    url === undefined ||
    headers === undefined ||
    (body !== undefined && typeof body !== 'string') ||
    (url.protocol !== 'http:' && url.protocol !== 'https:')
  )
    return fetch(input, init);
  if (signal?.aborted) return Promise.reject(abortReason(signal));
  if (url.protocol === 'https:')
    return secureClient().then((client) => send(client, url, init, headers, body, signal));
  return send(plain, url, init, headers, body, signal);
};

function send(
  client: { send: Send; agent: Agent },
  url: URL,
  init: RequestInit,
  headers: Record<string, string>,
  body: string | undefined,
  signal: AbortSignal | undefined,
): Promise<Response> {
  return new Promise<Response>((resolve, reject) => {
    const request = client.send(url, {
      method: init.method ?? 'GET',
      headers: {
        'accept-encoding': 'identity',
        ...headers,
        ...(body === undefined ? {} : { 'content-length': String(Buffer.byteLength(body)) }),
      },
      agent: client.agent,
      ...(signal === undefined ? {} : { signal }),
    });
    request.once('error', (cause) =>
      reject(signal?.aborted ? abortReason(signal) : new TypeError('fetch failed', { cause })),
    );
    request.once('response', (response) => {
      const status = response.statusCode ?? 0;
      if (REDIRECT.has(status) && response.headers.location !== undefined) {
        response.resume(); // the global fetch follows redirects as the Fetch standard says
        resolve(fetch(url, init));
        return;
      }
      const names = response.rawHeaders;
      const pairs: [string, string][] = [];
      for (let at = 0; at < names.length; at += 2) pairs.push([names[at]!, names[at + 1]!]);
      if (NULL_BODY.has(status)) response.resume();
      resolve(
        new Response(NULL_BODY.has(status) ? null : bodyOf(response, signal), {
          status,
          statusText: response.statusMessage ?? '',
          headers: pairs,
        }),
      );
    });
    request.end(body);
  });
}
