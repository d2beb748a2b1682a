// Edges of the wire that were loose: text the
// OS would cut at a NUL or split at "=", a size error that named the wrong rule, a Host that is not
// this server, an upgrade that offered no aleph.v1. Real gateway on loopback, real WebSocket.
import { WebSocket } from 'ws';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { tokenSubprotocol } from './internal/auth.js';
import { PROTOCOL_VERSION } from './protocol.js';
import { startGateway, TOKEN, until, type Harness } from '../test/support.js';

let h: Harness;
beforeEach(async () => {
  h = await startGateway();
});
afterEach(async () => {
  await h.dispose();
});

const refusal = (promise: Promise<unknown>) =>
  promise.then(
    () => undefined,
    (error: unknown) => error as { code?: string; message: string },
  );

describe('pty.spawn refuses text the OS would cut or split, naming the field', () => {
  it.each([
    ['a NUL in an argument', { args: ['a\0b'] }, /^params\.args\[0\]: must not contain a NUL byte/],
    ['a NUL in an env value', { env: { A: 'x\0y' } }, /^params\.env\.A: must not contain a NUL byte/],
    [
      '"=" in an env name',
      { env: { 'A=B': 'x' } },
      /^params\.env key "A=B": must be a non-empty name without "="/,
    ],
    [
      'a NUL in an env name',
      { env: { 'C\0': 'x' } },
      /^params\.env key "C\\u0000": must be a non-empty name/,
    ],
    ['an empty env name', { env: { '': 'x' } }, /^params\.env key "": must be a non-empty name/],
    ['a NUL in the command', { command: '/bin/sh\0-x' }, /^params\.command: must not contain a NUL byte/],
    ['a NUL in cwd', { cwd: '/tmp\0/x' }, /^params\.cwd: must not contain a NUL byte/],
  ])('%s', async (_label, params, message) => {
    const client = await h.connect();
    const error = await refusal(client.call('pty.spawn', { ...params, cols: 80, rows: 24 }));
    expect(error?.code).toBe('invalid_params');
    expect(error?.message).toMatch(message);
    expect(h.manager.size).toBe(0);
    // The same client goes on.
    const { sessionId } = await client.spawn({ command: '/bin/true', env: { A: 'x=y' }, cols: 80, rows: 24 });
    expect(sessionId).toBeTruthy();
  });

  it('a size out of range says the range', async () => {
    const client = await h.connect();
    for (const cols of [0, 1e9, -3, 1.5]) {
      const error = await refusal(client.call('pty.spawn', { cols, rows: 24 }));
      expect(error).toMatchObject({
        code: 'invalid_params',
        message: 'params.cols: must be an integer from 1 to 10000',
      });
    }
  });
});

describe('the upgrade', () => {
  const attempt = (
    headers: Record<string, string>,
    protocols: string[] = [PROTOCOL_VERSION],
    url = h.gateway.url,
  ) =>
    new Promise<{ status: number; protocol?: string }>((resolve) => {
      const ws = new WebSocket(url, protocols, { headers });
      ws.on('unexpected-response', (_request, response) => resolve({ status: response.statusCode ?? 0 }));
      ws.on('open', () => {
        resolve({ status: 101, protocol: ws.protocol });
        ws.close();
      });
      ws.on('error', () => {});
    });
  const bearer = { authorization: `Bearer ${TOKEN}` };

  it('a Host must name this server: the bound address, loopback, localhost or allowedHosts (PROTOCOL.md)', async () => {
    const port = h.gateway.port;
    expect((await attempt({ ...bearer, host: `10.0.0.1:${port}` })).status).toBe(421);
    expect((await attempt({ ...bearer, host: `192.168.1.20:${port}` })).status).toBe(421);
    expect((await attempt({ ...bearer, host: `[fe80::1]:${port}` })).status).toBe(421);
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`, `127.0.0.2:${port}`])
      expect((await attempt({ ...bearer, host })).status).toBe(101);
    const other = await startGateway({ allowedHosts: ['10.0.0.1', 'box.lan'] });
    for (const host of ['10.0.0.1', 'box.lan', 'BOX.lan'])
      expect(
        (await attempt({ ...bearer, host: `${host}:${other.gateway.port}` }, undefined, other.gateway.url))
          .status,
      ).toBe(101);
    await other.dispose();
  });

  it('refuses an upgrade that does not offer aleph.v1 with 400; the typed client and a browser-style offer get it', async () => {
    expect((await attempt(bearer, [])).status).toBe(400);
    expect((await attempt(bearer, ['something.else'])).status).toBe(400);
    expect((await attempt({}, [tokenSubprotocol(TOKEN)])).status).toBe(400);
    expect(await attempt({}, [PROTOCOL_VERSION, tokenSubprotocol(TOKEN)])).toEqual({
      status: 101,
      protocol: PROTOCOL_VERSION,
    });
    expect(await attempt(bearer)).toEqual({ status: 101, protocol: PROTOCOL_VERSION });
    // Without the token the answer is still 401: nothing about the protocol before authentication.
    expect((await attempt({}, [])).status).toBe(401);
    const client = await h.connect();
    expect(await client.call('pty.list', {})).toEqual([]);
    expect(h.manager.size).toBe(0);
  });
});

describe('pty.list command', () => {
  it("is commandOf's answer where it gives one, else the program and its arguments", async () => {
    await h.dispose();
    const shown = new Set<string>();
    h = await startGateway({
      commandOf: (session) => (shown.has(session.id) ? `short ${session.args.length}` : undefined),
    });
    const client = await h.connect();
    const sleeper = { command: '/bin/sh', args: ['-c', 'sleep 1000', 'long argument'], cols: 80, rows: 24 };
    const plain = await client.spawn(sleeper);
    const wrapped = await client.spawn(sleeper);
    shown.add(wrapped.sessionId);
    const listed = await client.list();
    const commandOf = (id: string) => listed.find((session) => session.sessionId === id)?.command;
    expect(commandOf(plain.sessionId)).toBe('/bin/sh -c sleep 1000 long argument');
    expect(commandOf(wrapped.sessionId)).toBe('short 3');
  });
});

describe('pty.list filters and pages', () => {
  const sleeper = { command: '/bin/sh', args: ['-c', 'sleep 1000'], cols: 80, rows: 24 };
  const ids = (listed: { sessionId: string }[]) => listed.map((session) => session.sessionId);

  it('by state, and in pages that follow a cursor, every session once', async () => {
    const client = await h.connect();
    const running = await Promise.all([1, 2, 3, 4, 5].map(() => client.spawn(sleeper)));
    const ended = await Promise.all(
      [1, 2].map(() => client.spawn({ command: '/bin/true', cols: 80, rows: 24 })),
    );
    const endedIds = ids(ended);
    await until(() => h.manager.listEnded().length === 2, 'both short programs ended', 30_000);
    const all = await client.list();
    expect(ids(all).sort()).toEqual([...ids(running), ...endedIds].sort());
    const runningNow = await client.list({ state: 'running' });
    expect(ids(runningNow).sort()).toEqual(ids(running).sort());
    expect(runningNow.every((session) => session.exit === null)).toBe(true);
    const endedNow = await client.list({ state: 'exited' });
    expect(ids(endedNow).sort()).toEqual([...endedIds].sort());
    expect(endedNow.every((session) => session.exit?.exitCode === 0)).toBe(true);

    const seen: string[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 10; page++) {
      const listed = await client.list({ limit: 2, ...(cursor === undefined ? {} : { cursor }) });
      expect(listed.length).toBeLessThanOrEqual(2);
      seen.push(...ids(listed));
      if (listed.length < 2) break;
      cursor = listed.at(-1)?.sessionId;
    }
    expect(seen).toEqual(ids(all).sort()); // in id order, each once
    const runningPage = await client.list({ state: 'running', limit: 3 });
    expect(ids(runningPage)).toEqual(ids(running).sort().slice(0, 3));
  });

  it('a cursor stays valid once its session is gone', async () => {
    const client = await h.connect();
    await Promise.all([1, 2, 3, 4].map(() => client.spawn(sleeper)));
    const [, second] = await client.list({ limit: 2 });
    const gone = second?.sessionId ?? '';
    await client.closeSession(gone);
    expect(h.manager.forget(gone)).toBe(true);
    const rest = await client.list({ cursor: gone });
    expect(ids(rest)).toEqual(
      ids(await client.list())
        .filter((id) => id > gone)
        .sort(),
    );
    expect(rest).toHaveLength(2);
  });

  it.each([
    ['a limit under 1', { limit: 0 }, /^params\.limit: /],
    ['a limit that is not an integer', { limit: 1.5 }, /^params\.limit: /],
    ['an unknown state', { state: 'zombie' }, /^params\.state: /],
    ['an empty cursor', { cursor: '' }, /^params\.cursor: must be a session id/],
    ['an unknown key', { offset: 3 }, /offset/],
  ])('refuses %s, naming the field', async (_label, params, message) => {
    const client = await h.connect();
    const error = await refusal(client.call('pty.list', params as never));
    expect(error?.code).toBe('invalid_params');
    expect(error?.message).toMatch(message);
  });
});

describe('pty.spawn on a named node, and pty.kill', () => {
  it('a server that is no node of a cluster refuses `node`, naming it, and forks nothing', async () => {
    const client = await h.connect();
    const error = await refusal(
      client.call('pty.spawn', { command: '/bin/true', cols: 80, rows: 24, node: 'b' }),
    );
    expect(error?.code).toBe('invalid_params');
    expect(error?.message).toBe(
      'params.node: this server is not a node of a cluster (no node "b"); spawn without "node"',
    );
    expect(h.manager.size).toBe(0);
  });

  it('pty.kill ends the program as pty.close does, and answers how', async () => {
    const client = await h.connect();
    const { sessionId } = await client.spawn({ command: '/bin/cat', cols: 80, rows: 24 });
    const exit = await client.call('pty.kill', { sessionId });
    expect(exit).toMatchObject({ reason: 'closed' });
    const unknown = await refusal(client.call('pty.kill', { sessionId: 'no-such-session' }));
    expect(unknown?.code).toBe('unknown_session');
  });
});

describe('events.subscribe bounds what a connection holds', () => {
  it('at most 256 distinct topics (asking again for one it has is free), at most 4096 sessions in a filter', async () => {
    const client = await h.connect();
    const topics = Array.from({ length: 256 }, (_, index) => `pty.topic-${index}`);
    expect((await client.call('events.subscribe', { topics })).topics).toHaveLength(256);
    expect((await client.call('events.subscribe', { topics: ['pty.topic-7'] })).topics).toHaveLength(256);
    const over = await refusal(client.call('events.subscribe', { topics: ['pty.one-more'] }));
    expect(over?.code).toBe('invalid_params');
    expect(over?.message).toMatch(/at most 256 topics \(it has 256; 1 more asked\)/);
    await client.call('events.unsubscribe', { topics: ['pty.topic-0'] });
    expect((await client.call('events.subscribe', { topics: ['pty.one-more'] })).topics).toHaveLength(256);
    const sessions = Array.from({ length: 4097 }, (_, index) => `s${index}`);
    const filter = await refusal(client.call('events.subscribe', { topics: ['pty.*'], sessions }));
    expect(filter?.code).toBe('invalid_params');
    expect(filter?.message).toMatch(/sessions/);
  });

  it('a topic of at most 256 characters, to subscribe as to unsubscribe', async () => {
    const client = await h.connect();
    const long = `pty.${'x'.repeat(253)}`;
    for (const method of ['events.subscribe', 'events.unsubscribe'] as const) {
      const refused = await refusal(client.call(method, { topics: [long] }));
      expect(refused?.code).toBe('invalid_params');
      expect(refused?.message).toMatch(/params\.topics\[0\]: must be at most 256 characters/);
    }
    expect((await client.call('events.subscribe', { topics: [long.slice(0, 256)] })).topics).toEqual([
      long.slice(0, 256),
    ]);
  });
});
