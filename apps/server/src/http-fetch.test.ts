import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { BODY_TOO_LARGE, boundedHttpFetch, httpFetch } from './http-fetch.js';

type Handler = (request: IncomingMessage, body: string, response: ServerResponse) => void;
let handler: Handler = (_request, _body, response) => response.end();
let server: Server;
let base: string;
beforeAll(async () => {
  server = createServer((request, response) => {
    let body = '';
    request.setEncoding('utf8');
    request.on('data', (chunk: string) => (body += chunk));
    request.on('end', () => handler(request, body, response));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

const post = (path: string, init: RequestInit = {}): Promise<Response> =>
  httpFetch(`${base}${path}`, { method: 'POST', body: '{"a":1}', ...init });

describe('httpFetch', () => {
  it('sends the body and headers; answers the status, headers and body as fetch does', async () => {
    let seen: { method?: string; headers?: IncomingMessage['headers']; body?: string } = {};
    handler = (request, body, response) => {
      seen = { method: request.method!, headers: request.headers, body };
      response.writeHead(201, 'Made', [
        ['content-type', 'text/plain'],
        ['x-many', 'one'],
        ['x-many', 'two'],
      ]);
      response.end('héllo');
    };
    const response = await post('/v1/x', { headers: { 'Content-Type': 'application/json', 'x-key': 'k' } });
    expect(seen).toMatchObject({ method: 'POST', body: '{"a":1}' });
    expect(seen.headers).toMatchObject({
      'content-type': 'application/json',
      'x-key': 'k',
      'content-length': '7',
    });
    expect(response).toBeInstanceOf(Response);
    expect([response.status, response.statusText, response.ok]).toEqual([201, 'Made', true]);
    expect(response.headers.get('x-many')).toBe('one, two');
    expect(await response.text()).toBe('héllo');
  });

  it('streams the body as it arrives', async () => {
    let finish = (): void => undefined;
    handler = (_request, _body, response) => {
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      response.write('data: 1\n\n');
      finish = () => response.end('data: 2\n\n');
    };
    const response = await post('/stream');
    const reader = response.body!.getReader();
    const first = await reader.read();
    expect(new TextDecoder().decode(first.value)).toBe('data: 1\n\n'); // before the server ended
    finish();
    const rest: string[] = [];
    for (let part = await reader.read(); !part.done; part = await reader.read())
      rest.push(new TextDecoder().decode(part.value));
    expect(rest.join('')).toBe('data: 2\n\n');
  });

  it('an error status is a Response too, its body readable', async () => {
    handler = (_request, _body, response) =>
      response.writeHead(429, { 'retry-after': '3' }).end('{"error":{"message":"slow down"}}');
    const response = await post('/limited');
    expect([response.status, response.ok, response.headers.get('retry-after')]).toEqual([429, false, '3']);
    expect(await response.json()).toEqual({ error: { message: 'slow down' } });
  });

  it('a streamed reply asked for and a success of another kind (a web page, JSON) fails naming what came', async () => {
    handler = (_request, _body, response) =>
      response.writeHead(200, { 'content-type': 'text/html' }).end('<html>a web page</html>');
    const streamed = post('/v1/chat/completions', { body: '{"model":"m","stream":true}' });
    await expect(streamed).rejects.toThrow(
      `the provider at ${base}/v1/chat/completions answered 200 with Content-Type text/html, not a stream of events (text/event-stream): check [agent] base_url`,
    );
    await expect(streamed).rejects.not.toBeInstanceOf(TypeError); // not a network failure: not retried
    // Not asked for a stream: the reply is the caller's to read.
    const plain = await post('/v1/chat/completions', { body: '{"model":"m","stream":false}' });
    expect(await plain.text()).toBe('<html>a web page</html>');
    // An event stream passes.
    handler = (_request, _body, response) =>
      response.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' }).end('data: {}\n\n');
    const events = await post('/v1/chat/completions', { body: '{"stream": true}' });
    expect(await events.text()).toBe('data: {}\n\n');
  });

  it('a refused connection: fetch’s TypeError with the cause’s code (the SDK retries on it)', async () => {
    const port = await new Promise<number>((resolve) => {
      const probe = createNetServer().listen(0, '127.0.0.1', () => {
        const { port: free } = probe.address() as AddressInfo;
        probe.close(() => resolve(free));
      });
    });
    const failure = httpFetch(`http://127.0.0.1:${port}/v1`, { method: 'POST', body: '{}' });
    await expect(failure).rejects.toThrow(new TypeError('fetch failed'));
    await expect(failure).rejects.toMatchObject({ cause: { code: 'ECONNREFUSED' } });
  });

  it('a cancel before the answer rejects with the signal’s reason; during the body, the read does', async () => {
    handler = () => undefined; // never answers
    const early = new AbortController();
    const waiting = post('/hang', { signal: early.signal });
    setTimeout(() => early.abort(), 20);
    await expect(waiting).rejects.toMatchObject({ name: 'AbortError' });

    handler = (_request, _body, response) => {
      response.writeHead(200);
      response.write('part');
    };
    const late = new AbortController();
    const response = await post('/half', { signal: late.signal });
    const reader = response.body!.getReader();
    await reader.read();
    late.abort();
    await expect(reader.read()).rejects.toMatchObject({ name: 'AbortError' });
  });

  it('follows a redirect as fetch does, and leaves other requests to fetch', async () => {
    handler = (request, body, response) => {
      if (request.url === '/old') response.writeHead(307, { location: '/new' }).end();
      else response.end(`${request.method} ${request.url} ${body}`);
    };
    expect(await (await post('/old')).text()).toBe('POST /new {"a":1}');
    expect(await (await httpFetch(`${base}/get`)).text()).toBe('GET /get ');
  });

  it('an answer without a body (204) has a null body, as fetch gives it', async () => {
    handler = (_request, _body, response) => response.writeHead(204).end();
    const response = await post('/empty');
    expect([response.status, response.body]).toEqual([204, null]);
    expect(await (await post('/empty')).text()).toBe(''); // the next request is answered
  });

  it('keeps the connection for the next request', async () => {
    handler = (request, _body, response) => response.end(String(request.socket.remotePort));
    const first = await (await post('/port')).text();
    const second = await (await post('/port')).text();
    expect(second).toBe(first);
  });
});

describe('boundedHttpFetch', () => {
  const bounded = (path: string, maxBytes: number) =>
    boundedHttpFetch(maxBytes)(`${base}${path}`, { method: 'POST', body: '{}' });
  const event = (size: number, end = '\n\n') => `data: ${'x'.repeat(size)}${end}`;

  it('a streamed body: each event within the bound passes, however many; LF and CRLF blank lines end one', async () => {
    handler = (_request, _body, response) => {
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      for (let index = 0; index < 50; index += 1) response.write(event(80, index % 2 ? '\r\n\r\n' : '\n\n'));
      response.end(`event: done\ndata: ${'y'.repeat(60)}\n\n`);
    };
    const text = await (await bounded('/many', 100)).text();
    expect(text.length).toBeGreaterThan(50 * 80);
  });

  it('a stream whose lines end with CR alone (as the event-stream format allows): each event is bounded, not the body', async () => {
    handler = (_request, _body, response) => {
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      for (let index = 0; index < 50; index += 1) response.write(event(80, '\r\r'));
      response.end();
    };
    const text = await (await bounded('/cr', 100)).text();
    expect(text.length).toBeGreaterThan(50 * 80);
  });

  it('a streamed event over the bound fails the body with BODY_TOO_LARGE and closes the connection', async () => {
    let closed = false;
    handler = (_request, _body, response) => {
      response.on('close', () => (closed = !response.writableFinished));
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      response.write(event(10));
      // One event of many lines with no blank line between them: it is one event, over the bound.
      for (let index = 0; index < 2000; index += 1) response.write(`data: ${'z'.repeat(100)}\n`);
      setTimeout(() => response.end('\n'), 200);
    };
    const response = await bounded('/one-big-event', 10_000);
    await expect(response.text()).rejects.toMatchObject({ code: BODY_TOO_LARGE });
    await vi.waitFor(() => expect(closed).toBe(true));
  });

  it('a body that is not streamed is bounded whole', async () => {
    handler = (_request, _body, response) => {
      response.writeHead(200, { 'content-type': 'application/json' });
      for (let index = 0; index < 100; index += 1) response.write(`${'a'.repeat(99)}\n`);
      response.end();
    };
    await expect((await bounded('/json', 10_000 - 1)).text()).rejects.toMatchObject({ code: BODY_TOO_LARGE });
    expect(await (await bounded('/json', 10_000)).text()).toHaveLength(10_000);
  });

  it('a redirect’s body is bounded too', async () => {
    handler = (request, _body, response) => {
      if (request.url === '/moved') response.writeHead(307, { location: '/target' }).end();
      else response.end('b'.repeat(5000));
    };
    await expect((await bounded('/moved', 4000)).text()).rejects.toMatchObject({ code: BODY_TOO_LARGE });
  });
});
