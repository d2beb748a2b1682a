import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { httpFetch } from './http-fetch.js';

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
