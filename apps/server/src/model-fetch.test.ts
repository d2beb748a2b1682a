// The model's fetch against a real HTTP server on loopback: what the AI SDK's providers read of a
// Response (status, headers, a streamed body read as it comes, an error body), and that it fails as
// the global fetch fails (before an answer, on abort, when the connection breaks mid-body).
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, expect, it } from 'vitest';
import { modelFetch } from './model-fetch.js';

let server: Server | undefined;
afterEach(async () => {
  server?.closeAllConnections();
  await new Promise((done) => server?.close(done));
  server = undefined;
});

async function serve(handler: (request: IncomingMessage, response: ServerResponse) => void): Promise<string> {
  server = createServer(handler);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const text = async (stream: ReadableStream<Uint8Array> | null): Promise<string> => {
  let out = '';
  const decoder = new TextDecoder();
  for await (const chunk of stream ?? []) out += decoder.decode(chunk, { stream: true });
  return out;
};

it('posts the body with its headers and streams the answer as it comes, over one kept-alive connection', async () => {
  const ports = new Set<number>();
  let release = (): void => {};
  const url = await serve((request, response) => {
    ports.add(request.socket.remotePort ?? 0);
    let body = '';
    request.on('data', (chunk: Buffer) => (body += chunk.toString()));
    request.on('end', () => {
      response.writeHead(200, {
        'content-type': 'text/event-stream',
        'x-seen': `${request.headers['authorization']} ${body}`,
      });
      response.write('data: first\n\n');
      release = () => response.end('data: last\n\n');
    });
  });
  for (const round of [1, 2]) {
    const answer = await modelFetch(`${url}/v1/chat`, {
      method: 'POST',
      headers: { authorization: 'Bearer k', 'content-type': 'application/json' },
      body: JSON.stringify({ round }),
    });
    expect(answer.status).toBe(200);
    expect(answer.ok).toBe(true);
    expect(answer.headers.get('x-seen')).toBe(`Bearer k {"round":${round}}`);
    const reader = answer.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toBe('data: first\n\n'); // before the end
    release();
    reader.releaseLock();
    expect(await text(answer.body)).toBe('data: last\n\n');
  }
  expect(ports.size).toBe(1);
});

it('gives an error answer with its status and body, and a no-content answer without a body', async () => {
  const url = await serve((request, response) => {
    if (request.url === '/empty') response.writeHead(204).end();
    else
      response
        .writeHead(429, { 'content-type': 'application/json' })
        .end('{"error":{"message":"slow down"}}');
  });
  const refused = await modelFetch(`${url}/v1/chat`, { method: 'POST', body: '{}' });
  expect(refused.status).toBe(429);
  expect(refused.ok).toBe(false);
  expect(await refused.json()).toEqual({ error: { message: 'slow down' } });
  const empty = await modelFetch(new URL(`${url}/empty`));
  expect(empty.status).toBe(204);
  expect(empty.body).toBeNull();
});

it('fails as fetch does: no server, an abort before and during the body, a connection broken mid-body', async () => {
  const closed = await serve(() => {});
  server?.close();
  server = undefined;
  await expect(modelFetch(`${closed}/v1`, { method: 'POST', body: '{}' })).rejects.toMatchObject({
    name: 'TypeError',
    message: 'fetch failed',
    cause: { code: 'ECONNREFUSED' },
  });

  let broken: ServerResponse | undefined;
  const url = await serve((request, response) => {
    response.writeHead(200, { 'content-type': 'text/event-stream' });
    response.write('data: one\n\n');
    if (request.url === '/break') broken = response;
  });
  const early = new AbortController();
  early.abort();
  await expect(modelFetch(`${url}/x`, { signal: early.signal })).rejects.toMatchObject({
    name: 'AbortError',
  });

  const during = new AbortController();
  const aborted = await modelFetch(`${url}/x`, { signal: during.signal });
  const reader = aborted.body!.getReader();
  await reader.read();
  during.abort();
  await expect(reader.read()).rejects.toMatchObject({ name: 'AbortError' });

  const cut = await modelFetch(`${url}/break`);
  const cutReader = cut.body!.getReader();
  await cutReader.read();
  broken?.socket?.destroy();
  await expect(cutReader.read()).rejects.toMatchObject({ name: 'TypeError', message: 'terminated' });
});

it('leaves no abort listener on a signal used for many requests', async () => {
  const url = await serve((_request, response) => response.writeHead(200).end('ok'));
  const run = new AbortController();
  const warnings: Error[] = [];
  const onWarning = (warning: Error): number => warnings.push(warning);
  process.on('warning', onWarning);
  for (let i = 0; i < 30; i++)
    expect(await (await modelFetch(url, { signal: run.signal })).text()).toBe('ok');
  await new Promise((done) => setTimeout(done, 50));
  process.off('warning', onWarning);
  expect(warnings.map((warning) => warning.name)).not.toContain('MaxListenersExceededWarning');
});

it('leaves what node:http does not do to the global fetch: a redirect is followed', async () => {
  const url = await serve((request, response) => {
    if (request.url === '/old') response.writeHead(307, { location: '/new' }).end();
    else response.writeHead(200).end(`at ${request.url} ${request.method}`);
  });
  const answer = await modelFetch(`${url}/old`, { method: 'POST', body: '{}' });
  expect(answer.status).toBe(200);
  expect(await answer.text()).toBe('at /new POST');
});
