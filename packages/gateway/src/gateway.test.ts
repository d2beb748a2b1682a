import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { z } from 'zod';
import { connectGateway, GatewayError, type GatewayClient } from './client.js';
import { createGateway, DEFAULT_FLOW, ErrorCodes, PROTOCOL_VERSION, tokenSubprotocol } from './index.js';
import { alive, outputOf, startGateway, TOKEN, until, type Harness } from '../test/support.js';

let h: Harness;
let dir: string;
beforeEach(async () => {
  h = await startGateway();
  dir = mkdtempSync(join(tmpdir(), 'aleph-gw-'));
});
afterEach(async () => {
  const pids = h.manager.list().map((session) => session.pid);
  await h.dispose();
  expect(pids.filter(alive)).toEqual([]);
  rmSync(dir, { recursive: true, force: true });
});

const bash = { command: '/bin/bash', args: ['--norc', '--noprofile'], cols: 80, rows: 24 };

describe('terminals over the socket', () => {
  it('spawns a shell, streams its output and takes input', async () => {
    const client = await h.connect();
    await client.subscribe(['pty.*']);
    const { sessionId, pid } = await client.spawn(bash);
    expect(pid).toBeGreaterThan(0);
    const output = outputOf(client, sessionId);
    await client.input(sessionId, 'echo hi\r');
    await output.waitFor(/[\r\n]hi\r\n/);
    // Offsets increase without gaps.
    let expected = output.chunks[0]!.offset;
    for (const chunk of output.chunks) {
      expect(chunk.offset).toBe(expected);
      expected += chunk.data.length;
    }
  });

  it('carries UTF-8 intact across frames: 5000 × é and emoji', async () => {
    // Over 64 KiB (the most one frame carries), so it takes several frames; 'x' misaligns them.
    const text = 'x' + 'é'.repeat(5000) + '😀🚀'.repeat(20000) + 'end';
    writeFileSync(join(dir, 'utf8.txt'), text);
    const client = await h.connect();
    await client.subscribe(['pty.*']);
    const exited = new Promise((resolve) => client.onExit(resolve));
    const { sessionId } = await client.spawn({
      command: '/bin/cat',
      args: [join(dir, 'utf8.txt')],
      cols: 80,
      rows: 24,
    });
    const output = outputOf(client, sessionId);
    await exited;
    const decoder = new TextDecoder('utf-8', { fatal: true });
    const decoded =
      output.chunks.map((chunk) => decoder.decode(chunk.data, { stream: true })).join('') + decoder.decode();
    expect(decoded).toBe(text);
    expect(output.chunks.length).toBeGreaterThan(1);
  });

  it('resizes: stty size sees it', async () => {
    const client = await h.connect();
    await client.subscribe(['pty.*']);
    const { sessionId } = await client.spawn(bash);
    const output = outputOf(client, sessionId);
    await client.resize(sessionId, 101, 37);
    await client.input(sessionId, 'stty size\r');
    await output.waitFor(/[\r\n]37 101\r\n/);
  });

  it('pty.close ends the process group, a background job included', async () => {
    const client = await h.connect();
    await client.subscribe(['pty.*']);
    const { sessionId, pid } = await client.spawn(bash);
    const output = outputOf(client, sessionId);
    await client.input(sessionId, 'sleep 1000 & echo "bg=$!"\r');
    await output.waitFor(/bg=(\d+)/);
    const background = Number(/bg=(\d+)/.exec(output.text())![1]);
    const exit = new Promise((resolve) => client.onExit(resolve));
    expect(await client.closeSession(sessionId)).toMatchObject({ reason: 'closed' });
    expect(await exit).toMatchObject({ sessionId, reason: 'closed' });
    await until(() => !alive(background) && !alive(pid), 'the process group to end');
  });

  it('lists sessions', async () => {
    const client = await h.connect();
    const { sessionId, pid } = await client.spawn({ ...bash, cols: 90, rows: 30 });
    expect(await client.list()).toEqual([
      expect.objectContaining({
        sessionId,
        pid,
        command: '/bin/bash --norc --noprofile',
        cols: 90,
        rows: 30,
      }),
    ]);
  });

  it('vim -u NONE opens and quits with :q', async () => {
    const client = await h.connect();
    await client.subscribe(['pty.*']);
    const exit = new Promise((resolve) => client.onExit(resolve));
    const { sessionId } = await client.spawn({
      command: 'vim',
      args: ['-u', 'NONE', '-N'],
      cols: 80,
      rows: 24,
    });
    const output = outputOf(client, sessionId);
    await output.waitFor(/\x1b\[\?1049h|~/); // alternate screen or the empty-line tildes
    await client.input(sessionId, '\x1b:q\r');
    expect(await exit).toMatchObject({ sessionId, exitCode: 0, reason: 'exited' });
  });
});

describe('caps', () => {
  it('65 spawns → the first is evicted and its subscribers get pty.exit with evicted', async () => {
    const client = await h.connect();
    await client.subscribe(['pty.*']);
    const exits: unknown[] = [];
    client.onExit((exit) => exits.push(exit));
    const sleeper = { command: '/bin/sleep', args: ['1000'], cols: 80, rows: 24 };
    const first = await client.spawn(sleeper);
    for (let i = 0; i < 64; i += 1) await client.spawn(sleeper);
    await until(() => exits.length === 1, 'the eviction exit');
    expect(exits[0]).toMatchObject({ sessionId: first.sessionId, reason: 'evicted' });
    const listed = await client.list();
    expect(listed.filter((entry) => entry.exit === null).length).toBe(64);
    // The evicted one stays listed a while, with why it ended.
    expect(listed.find((entry) => entry.sessionId === first.sessionId)?.exit?.reason).toBe('evicted');
    await until(() => !alive(first.pid), 'the evicted process to end');
  });

  it('100 concurrent spawns from 4 connections never exceed the cap', async () => {
    const clients = await Promise.all([h.connect(), h.connect(), h.connect(), h.connect()]);
    let peak = 0;
    h.manager.on('spawn', () => (peak = Math.max(peak, h.manager.size)));
    const sleeper = { command: '/bin/sleep', args: ['1000'], cols: 80, rows: 24 };
    const results = await Promise.all(Array.from({ length: 100 }, (_, i) => clients[i % 4]!.spawn(sleeper)));
    expect(results).toHaveLength(100);
    expect(peak).toBeLessThanOrEqual(64);
    expect((await clients[0].list()).filter((entry) => entry.exit === null).length).toBe(64);
  });
});

/** A bare socket that reads every answer as JSON, in order. */
const raw = async (): Promise<{ ws: WebSocket; next: () => Promise<any> }> => {
  const ws = new WebSocket(h.gateway.url, [PROTOCOL_VERSION], {
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  const queue: any[] = [];
  const waiters: ((value: any) => void)[] = [];
  ws.on('message', (data) => {
    const parsed = JSON.parse(data.toString());
    const waiter = waiters.shift();
    if (waiter) waiter(parsed);
    else queue.push(parsed);
  });
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  return {
    ws,
    next: () =>
      queue.length ? Promise.resolve(queue.shift()) : new Promise((resolve) => waiters.push(resolve)),
  };
};

describe('bad input gets a stable error and the connection stays usable', () => {
  it.each([
    ['not JSON', '{"jsonrpc": "2.0", "id": 1, ', ErrorCodes.parse_error, 'parse_error', /^not JSON/],
    [
      'not JSON-RPC',
      JSON.stringify({ id: 2, method: 'pty.list' }),
      ErrorCodes.invalid_request,
      'invalid_request',
      /jsonrpc must be "2.0"/,
    ],
    [
      'a batch',
      JSON.stringify([{ jsonrpc: '2.0', id: 1, method: 'pty.list' }]),
      ErrorCodes.invalid_request,
      'invalid_request',
      /batch/,
    ],
    [
      'unknown method',
      JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'pty.explode' }),
      ErrorCodes.method_not_found,
      'method_not_found',
      /unknown method "pty.explode"/,
    ],
    [
      'missing params',
      JSON.stringify({ jsonrpc: '2.0', id: 4, method: 'pty.resize', params: { sessionId: 'x', rows: 5 } }),
      ErrorCodes.invalid_params,
      'invalid_params',
      /^params\.cols: /,
    ],
    [
      'mistyped params',
      JSON.stringify({ jsonrpc: '2.0', id: 5, method: 'pty.spawn', params: { cols: '80', rows: 24 } }),
      ErrorCodes.invalid_params,
      'invalid_params',
      /^params\.cols: must be an integer/,
    ],
    [
      'an unknown param',
      JSON.stringify({
        jsonrpc: '2.0',
        id: 6,
        method: 'pty.spawn',
        params: { cols: 80, rows: 24, shell: 'zsh' },
      }),
      ErrorCodes.invalid_params,
      'invalid_params',
      /unknown key\(s\) shell/,
    ],
    [
      'unknown session',
      JSON.stringify({
        jsonrpc: '2.0',
        id: 7,
        method: 'pty.input',
        params: { sessionId: 'nope', data: 'aGk=' },
      }),
      ErrorCodes.unknown_session,
      'unknown_session',
      /unknown session nope/,
    ],
    [
      'bad base64',
      JSON.stringify({
        jsonrpc: '2.0',
        id: 8,
        method: 'pty.input',
        params: { sessionId: 'nope', data: '%%%' },
      }),
      ErrorCodes.invalid_params,
      'invalid_params',
      /^params\.data: must be base64/,
    ],
    [
      'a program that does not exist',
      JSON.stringify({
        jsonrpc: '2.0',
        id: 9,
        method: 'pty.spawn',
        params: { command: '/no/such/program', cols: 80, rows: 24 },
      }),
      ErrorCodes.spawn_failed,
      'spawn_failed',
      /^\/no\/such\/program: no such executable/,
    ],
  ])('%s', async (_label, frame, code, name, message) => {
    const { ws, next } = await raw();
    ws.send(frame);
    const response = await next();
    expect(response.error).toMatchObject({ code, data: { code: name } });
    expect(response.error.message).toMatch(message);
    ws.send(JSON.stringify({ jsonrpc: '2.0', id: 99, method: 'pty.list' }));
    expect(await next()).toEqual({ jsonrpc: '2.0', id: 99, result: [] });
    ws.close();
  });
});

describe('bad input gets a stable error and the connection stays usable: frames and payloads', () => {
  it('a binary frame', async () => {
    const { ws, next } = await raw();
    ws.send(Buffer.from([1, 2, 3]), { binary: true });
    expect((await next()).error).toMatchObject({
      code: ErrorCodes.invalid_request,
      message: expect.stringMatching(/binary frames/),
    });
    ws.send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'pty.list' }));
    expect((await next()).result).toEqual([]);
    ws.close();
  });

  it('a text frame that is not UTF-8 gets parse_error, and the connection stays open', async () => {
    const { ws, next } = await raw();
    const closed = new Promise<number>((resolve) => ws.on('close', (code) => resolve(code)));
    // A valid JSON-RPC request but for one byte that no UTF-8 text has (0xff), in a text frame.
    const frame = Buffer.from('{"jsonrpc":"2.0","id":1,"method":"pty.list","params":{"x":"\xff"}}', 'latin1');
    ws.send(frame, { binary: false });
    const answer = await Promise.race([next(), closed.then((code) => ({ closedWith: code }))]);
    expect(answer).toMatchObject({
      id: null,
      error: { code: ErrorCodes.parse_error, message: expect.stringMatching(/not UTF-8/) },
    });
    ws.send(JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'pty.list' }));
    expect((await next()).result).toEqual([]);
    ws.close();
  });

  it('a frame over maxPayload closes only that connection, with 1009', async () => {
    const other = await h.connect();
    const { ws } = await raw();
    const closed = new Promise<number>((resolve) => ws.on('close', (code) => resolve(code)));
    ws.send('x'.repeat(2 * 1024 * 1024));
    expect(await closed).toBe(1009);
    expect(await other.list()).toEqual([]);
  });

  it('pty.input over 64 KiB → frame_too_large, and nothing is written', async () => {
    const client = await h.connect();
    const { sessionId } = await client.spawn({ command: '/bin/sleep', args: ['1000'], cols: 80, rows: 24 });
    const error = await client.input(sessionId, Buffer.alloc(64 * 1024 + 1)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(GatewayError);
    expect(error).toMatchObject({ code: 'frame_too_large' });
    expect(h.manager.get(sessionId)!.pendingInputBytes).toBe(0);
    expect(await client.input(sessionId, Buffer.alloc(64 * 1024, 0x61))).toEqual({ bytes: 65536 });
  });

  it('a full input queue refuses the newest frame at once with busy; accepted input is all kept', async () => {
    const client = await h.connect();
    // A program that never reads its input. Raw mode: in canonical mode the kernel discards the
    // overflow of an over-long line instead of pushing back, so nothing would ever queue.
    const { sessionId } = await client.spawn({
      command: '/bin/sh',
      args: ['-c', 'stty raw -echo; echo ready; sleep 1000'],
      cols: 80,
      rows: 24,
    });
    await until(
      () => h.manager.get(sessionId)!.replay(0).data.includes('ready'),
      'the program to be in raw mode',
    );
    let accepted = 0;
    let busy: unknown;
    for (let i = 0; i < 40 && busy === undefined; i += 1) {
      try {
        accepted += (await client.input(sessionId, Buffer.alloc(32 * 1024, 0x62))).bytes;
      } catch (error) {
        busy = error;
      }
    }
    expect(busy).toMatchObject({ code: 'busy', message: expect.stringContaining('not reading its input') });
    const session = h.manager.get(sessionId)!;
    expect(session.pendingInputBytes).toBeLessThanOrEqual(accepted);
    expect(session.pendingInputBytes).toBeGreaterThan(0);
  });
});

describe('auth and origin', () => {
  const attempt = (headers: Record<string, string>, protocols: string[] = [PROTOCOL_VERSION]) =>
    new Promise<number>((resolve) => {
      const ws = new WebSocket(h.gateway.url, protocols, { headers });
      ws.on('unexpected-response', (_request, response) => resolve(response.statusCode ?? 0));
      ws.on('open', () => {
        ws.close();
        resolve(101);
      });
      ws.on('error', () => {});
    });

  it('no token → 401, wrong token → 401, foreign Origin → 403; nothing is spawned', async () => {
    expect(await attempt({})).toBe(401);
    expect(await attempt({ authorization: 'Bearer wrong' })).toBe(401);
    expect(await attempt({ authorization: `Bearer ${TOKEN}`, origin: 'https://evil.example' })).toBe(403);
    await expect(connectGateway(h.gateway.url, { token: 'nope' })).rejects.toMatchObject({
      code: 'unauthorized',
      message: 'the gateway refused the token (401 Unauthorized)',
      data: { status: 401 },
    });
    await expect(
      connectGateway(h.gateway.url.replace(/\/ws$/, '/elsewhere'), { token: TOKEN }),
    ).rejects.toMatchObject({ code: 'upgrade_refused', data: { status: expect.any(Number) } });
    expect(h.manager.size).toBe(0);
  });

  it('a browser authenticates with the token subprotocol from the same origin', async () => {
    const origin = `http://127.0.0.1:${h.gateway.port}`;
    expect(await attempt({ origin }, [PROTOCOL_VERSION, tokenSubprotocol(TOKEN)])).toBe(101);
    expect(await attempt({ origin }, [PROTOCOL_VERSION, tokenSubprotocol('wrong')])).toBe(401);
  });

  it('allowedOrigins replaces same-origin', async () => {
    const other = await startGateway({ allowedOrigins: ['https://app.example'] });
    const status = (origin: string) =>
      new Promise<number>((resolve) => {
        const ws = new WebSocket(other.gateway.url, [PROTOCOL_VERSION], {
          headers: { authorization: `Bearer ${TOKEN}`, origin },
        });
        ws.on('unexpected-response', (_q, response) => resolve(response.statusCode ?? 0));
        ws.on('open', () => (ws.close(), resolve(101)));
        ws.on('error', () => {});
      });
    expect(await status('https://app.example')).toBe(101);
    expect(await status(`http://127.0.0.1:${other.gateway.port}`)).toBe(403);
    await other.dispose();
  });

  it('answers /healthz with what the server adds (say, a cluster node degraded), and ok', async () => {
    let cluster = 'ok';
    const withHealth = await startGateway({
      health: () => ({ ok: false, cluster: { node: 'a', health: cluster } }),
    });
    try {
      const read = async () =>
        (await fetch(`${withHealth.gateway.url.replace(/^ws/, 'http').replace(/\/ws$/, '')}/healthz`)).json();
      expect(await read()).toEqual({ ok: true, cluster: { node: 'a', health: 'ok' } });
      cluster = 'degraded';
      expect(await read()).toEqual({ ok: true, cluster: { node: 'a', health: 'degraded' } });
    } finally {
      await withHealth.dispose();
    }
  });

  it('refuses a Host that does not name this server (DNS rebinding), even with the token', async () => {
    const evil = 'evil.example:1234';
    // Same-origin by its own lights: Host and Origin agree. Before, this opened.
    expect(await attempt({ authorization: `Bearer ${TOKEN}`, host: evil, origin: `http://${evil}` })).toBe(
      421,
    );
    expect(await attempt({ authorization: `Bearer ${TOKEN}`, host: evil })).toBe(421);
    const { request } = await import('node:http');
    const status = await new Promise<number>((resolve, reject) =>
      request(
        { host: '127.0.0.1', port: h.gateway.port, path: '/healthz', headers: { host: evil } },
        (response) => {
          response.resume();
          resolve(response.statusCode ?? 0);
        },
      )
        .on('error', reject)
        .end(),
    );
    expect(status).toBe(421);
    // The bound address, loopback names and names on allowedHosts are this server.
    const port = h.gateway.port;
    expect(await attempt({ authorization: `Bearer ${TOKEN}`, host: `localhost:${port}` })).toBe(101);
    expect(
      await attempt({
        authorization: `Bearer ${TOKEN}`,
        host: `localhost:${port}`,
        origin: `http://localhost:${port}`,
      }),
    ).toBe(101);
    expect(await attempt({ authorization: `Bearer ${TOKEN}`, host: `[::1]:${port}` })).toBe(101);
    const named = await startGateway({ allowedHosts: ['aleph.internal'] });
    try {
      const url = named.gateway.url;
      const opened = await new Promise<number>((resolve) => {
        const ws = new WebSocket(url, [PROTOCOL_VERSION], {
          headers: { authorization: `Bearer ${TOKEN}`, host: `aleph.internal:${named.gateway.port}` },
        });
        ws.on('unexpected-response', (_q, response) => resolve(response.statusCode ?? 0));
        ws.on('open', () => (ws.close(), resolve(101)));
        ws.on('error', () => {});
      });
      expect(opened).toBe(101);
    } finally {
      await named.dispose();
    }
    expect(h.manager.size).toBe(0);
  });

  it('refuses to start without a token, naming a non-loopback address', async () => {
    await expect(createGateway({ token: '', host: '0.0.0.0' })).rejects.toThrow(
      'refusing to listen on non-loopback address 0.0.0.0 without a token',
    );
    await expect(createGateway({ token: '' })).rejects.toThrow('a token is required');
  });
});

describe('flow control, replay and keepalive', () => {
  it(
    'a client that stops reading pauses the pty (bounded), then it resumes and nothing is lost',
    {
      timeout: 90_000, // 24 MiB through one client on a loaded 2-core machine
    },
    async () => {
      const slow = await startGateway({ flow: { highWaterBytes: 256 * 1024, lowWaterBytes: 64 * 1024 } });
      try {
        const client = await slow.connect();
        await client.subscribe(['pty.*']);
        const exit = new Promise((resolve) => client.onExit(resolve));
        const total = 24 * 1024 * 1024;
        const { sessionId } = await client.spawn({
          command: '/bin/sh',
          args: ['-c', `head -c ${total} /dev/zero | tr '\\0' z`],
          cols: 80,
          rows: 24,
        });
        const output = outputOf(client, sessionId);
        await until(() => output.bytes().length > 0, 'first output');
        // Stop reading from the socket: the kernel buffers fill, then the server's socket buffer.
        (client.socket as unknown as { _socket: { pause(): void; resume(): void } })._socket.pause();
        const session = slow.manager.get(sessionId)!;
        await until(() => session.paused, 'the pty to be paused', 20_000);
        const produced = session.scrollback.end;
        await new Promise((resolve) => setTimeout(resolve, 300));
        expect(session.paused).toBe(true);
        expect(session.scrollback.end - produced).toBeLessThan(1024 * 1024);
        expect(session.scrollback.end).toBeLessThan(total);
        (client.socket as unknown as { _socket: { resume(): void } })._socket.resume();
        await exit;
        expect(output.bytes().length).toBe(total);
        // Bulk output is batched across reads, and no frame carries more than maxBatchBytes.
        const largest = Math.max(...output.chunks.map((chunk) => chunk.data.length));
        expect(largest).toBeGreaterThan(4096);
        expect(largest).toBeLessThanOrEqual(DEFAULT_FLOW.maxBatchBytes);
      } finally {
        await slow.dispose();
      }
    },
  );

  it('a client that acks slowly holds the pty at the high-water mark', async () => {
    const slow = await startGateway({ flow: { highWaterBytes: 64 * 1024, lowWaterBytes: 16 * 1024 } });
    try {
      const client = await slow.connect({ autoAck: false });
      await client.subscribe(['pty.*']);
      const { sessionId } = await client.spawn({
        command: '/bin/sh',
        args: ['-c', 'head -c 10000000 /dev/zero | tr "\\0" q'],
        cols: 80,
        rows: 24,
      });
      const output = outputOf(client, sessionId);
      await client.ack(sessionId, 0); // this client acks: its unacked bytes count
      const session = slow.manager.get(sessionId)!;
      await until(() => session.paused, 'the pty to pause on unacked bytes');
      await new Promise((resolve) => setTimeout(resolve, 200));
      const held = output.bytes().length;
      expect(held).toBeLessThan(1024 * 1024);
      await client.ack(sessionId, held);
      await until(() => output.bytes().length > held, 'output to resume after the ack');
    } finally {
      await slow.dispose();
    }
  });
  it('a viewer that is behind when the program ends gets all of its output before its pty.exit', async () => {
    const tight = await startGateway({ flow: { highWaterBytes: 64 * 1024, lowWaterBytes: 16 * 1024 } });
    try {
      const live = await tight.connect();
      const behind = await tight.connect({ autoAck: false });
      await live.subscribe(['pty.*']);
      await behind.subscribe(['pty.*']);
      const total = 1024 * 1024;
      let atExit: number | undefined;
      const { sessionId } = await live.spawn({
        command: '/bin/sh',
        args: ['-c', `sleep 0.3; head -c ${total} /dev/zero | tr '\\0' b`],
        cols: 80,
        rows: 24,
      });
      const output = outputOf(behind, sessionId);
      behind.onExit((exit) => {
        if (exit.sessionId === sessionId) atExit = output.bytes().length;
      });
      await behind.ack(sessionId, 0); // it acks nothing more: past the high-water mark it is behind
      await until(() => atExit !== undefined, 'the exit to reach the viewer that is behind');
      expect(atExit).toBe(total);
    } finally {
      await tight.dispose();
    }
  });
});

describe('events to a client that reads slowly', () => {
  it('are held in order while it is behind, and those of a coalescing topic merge: fewer, larger, nothing lost', async () => {
    const slow = await startGateway({
      outboundBudgetBytes: 16 * 1024 * 1024,
      coalesce: {
        'test.piece': (held, next) => {
          const [a, b] = [held as { run: string; text: string }, next as { run: string; text: string }];
          return a.run === b.run ? { run: a.run, text: a.text + b.text } : undefined;
        },
      },
    });
    try {
      const client = await slow.connect();
      await client.subscribe(['test.*']);
      const got: { topic: string; params: { run?: string; text?: string } }[] = [];
      client.onEvent((topic, params) =>
        got.push({ topic, params: params as { run?: string; text?: string } }),
      );
      client.socket.pause(); // it reads nothing for now
      // 24 MiB it does not read: more than the kernel's socket buffers take, past a quarter budget.
      for (let index = 0; index < 24; index++)
        slow.gateway.publish('test.fill', { bytes: 'f'.repeat(1024 * 1024) });
      let expected = '';
      for (let index = 0; index < 2000; index++) {
        const text = `${index},`;
        expected += text;
        slow.gateway.publish('test.piece', { run: 'r1', text });
        if (index === 999) slow.gateway.publish('test.mark', { at: 1000 });
      }
      slow.gateway.publish('test.piece', { run: 'r2', text: 'other' });
      client.socket.resume();
      await until(() => got.some((event) => event.params.run === 'r2'), 'the last event');
      // Held in order; the 1000 pieces before the mark are one event, the 1000 after it another.
      expect(got.filter((event) => event.topic !== 'test.fill').map((event) => event.topic)).toEqual([
        'test.piece',
        'test.mark',
        'test.piece',
        'test.piece',
      ]);
      expect(got.filter((event) => event.topic === 'test.fill')).toHaveLength(24);
      const pieces = got.filter((event) => event.params.run === 'r1').map((event) => event.params.text);
      expect(pieces.join('')).toBe(expected); // in order, nothing lost, nothing twice
      expect(got.at(-1)?.params).toEqual({ run: 'r2', text: 'other' });
    } finally {
      await slow.dispose();
    }
  });
});

describe('flow control: acks, replay and keepalive', () => {
  it('the typed client acks every 128 KiB, and keeps a session flowing under tighter marks', async () => {
    // Each ack with how far it moved, and how long after the first output it covers it was sent.
    type Ack = { offset: number; step: number; waitedMs: number };
    const acksOf = (client: GatewayClient): Ack[] => {
      const acks: Ack[] = [];
      let firstUnackedAt: number | undefined;
      client.onOutput(() => (firstUnackedAt ??= performance.now()));
      const send = client.socket.send.bind(client.socket);
      client.socket.send = ((data: string, ...rest: never[]) => {
        const message = JSON.parse(data) as { method?: string; params?: { offset: number } };
        if (message.method === 'pty.ack') {
          const offset = message.params!.offset;
          const step = offset - (acks.at(-1)?.offset ?? 0);
          acks.push({ offset, step, waitedMs: performance.now() - (firstUnackedAt ?? 0) });
          firstUnackedAt = undefined;
        }
        return send(data, ...rest);
      }) as typeof client.socket.send;
      return acks;
    };
    const produce = async (client: GatewayClient, total: number) => {
      await client.subscribe(['pty.*']);
      const exit = new Promise((resolve) => client.onExit(resolve));
      const { sessionId } = await client.spawn({
        command: '/bin/sh',
        args: ['-c', `head -c ${total} /dev/zero | tr '\\0' a`],
        cols: 80,
        rows: 24,
      });
      await exit;
      const bytes = outputOf(client, sessionId).bytes();
      expect(bytes.length).toBe(total);
      expect(bytes.every((byte) => byte === 0x61)).toBe(true);
    };
    // Default marks: an ack moves at least 128 KiB, or else comes 20 ms after the first output it
    // covers (the rest of a stream, or a slow one). Acking per frame or per tick fails this at once.
    const client = await h.connect();
    const acks = acksOf(client);
    const total = 4 * 1024 * 1024;
    await produce(client, total);
    expect(acks.length).toBeGreaterThan(0);
    for (const ack of acks) {
      expect(ack.step).toBeGreaterThan(0);
      if (ack.step < 128 * 1024) expect(ack.waitedMs).toBeGreaterThanOrEqual(15);
    }
    // Marks below the ack step: the pty pauses at each 64 KiB, and the client's timed ack (20 ms
    // after the first output it covers) is what resumes it. Nothing stalls, and nothing is lost.
    const tight = await startGateway({ flow: { highWaterBytes: 64 * 1024, lowWaterBytes: 16 * 1024 } });
    try {
      const tightClient = await tight.connect();
      const tightAcks = acksOf(tightClient);
      await produce(tightClient, 1024 * 1024);
      expect(tightAcks.length).toBeGreaterThan(0);
    } finally {
      await tight.dispose();
    }
  });

  it('reconnect and replay from an offset returns exactly the missed bytes', async () => {
    const first = await h.connect();
    await first.subscribe(['pty.*']);
    const { sessionId } = await first.spawn({
      command: '/bin/sh',
      args: ['-c', 'printf "part-one;"; read x; printf "part-two;"; read y; printf "part-three"; sleep 1000'],
      cols: 80,
      rows: 24,
    });
    const seen = outputOf(first, sessionId);
    await seen.waitFor(/part-one;/);
    const lastOffset = seen.chunks.at(-1)!.offset + seen.chunks.at(-1)!.data.length;
    await first.close();

    // While nobody watches, the program writes more.
    const driver = await h.connect();
    await driver.input(sessionId, 'go\r');
    await until(() => h.manager.get(sessionId)!.scrollback.read(0).data.includes('part-two;'), 'part two');

    const second = await h.connect();
    await second.subscribe(['pty.*']);
    const received: Buffer[] = [];
    await second.follow(sessionId, lastOffset, (data) => received.push(data));
    await until(() => Buffer.concat(received).includes('part-two;'), 'the missed output');
    await driver.input(sessionId, 'go\r');
    await until(() => Buffer.concat(received).includes('part-three'), 'live output after the replay');
    const transcript = h.manager.get(sessionId)!.scrollback.read(0).data;
    expect(Buffer.concat([seen.bytes(), ...received]).equals(transcript)).toBe(true);
  });

  it('pings clients and drops a dead connection', async () => {
    const pinging = await startGateway({ pingIntervalMs: 50 });
    try {
      const client = await pinging.connect();
      expect(pinging.gateway.connectionCount).toBe(1);
      const transport = (client.socket as unknown as { _socket: { pause(): void; resume(): void } })._socket;
      transport.pause(); // reads nothing, so answers no pings
      await until(() => pinging.gateway.connectionCount === 0, 'the dead connection to be dropped');
      transport.resume();
      expect((await client.closed).code).toBe(1006);
    } finally {
      await pinging.dispose();
    }
  });
});

describe('subscriptions', () => {
  it('a session filter limits pty.* events to those sessions', async () => {
    const watcher = await h.connect();
    const first = await watcher.spawn({
      command: '/bin/sh',
      args: ['-c', 'printf one; sleep 1000'],
      cols: 80,
      rows: 24,
    });
    const second = await watcher.spawn({
      command: '/bin/sh',
      args: ['-c', 'sleep 0.3; printf two; sleep 1000'],
      cols: 80,
      rows: 24,
    });
    await watcher.subscribe(['pty.*'], [second.sessionId]);
    const seen = new Set<string>();
    watcher.onOutput((output) => seen.add(output.sessionId));
    await until(() => seen.has(second.sessionId), 'output of the watched session');
    await watcher.input(first.sessionId, 'more');
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect([...seen]).toEqual([second.sessionId]);
  });
});

describe('server extension points', () => {
  it('register adds a method beside pty.*; publish reaches only matching subscribers', async () => {
    h.gateway.register('agent.echo', z.strictObject({ text: z.string() }), ({ text }) => ({ echoed: text }));
    const a = await h.connect();
    const b = await h.connect();
    await a.subscribe(['agent.*']);
    await b.subscribe(['pty.*']);
    const seenA: string[] = [];
    const seenB: string[] = [];
    a.onEvent((topic) => seenA.push(topic));
    b.onEvent((topic) => seenB.push(topic));
    expect(await a.request('agent.echo', { text: 'hi' })).toEqual({ echoed: 'hi' });
    await expect(a.request('agent.echo', { text: 1 })).rejects.toMatchObject({ code: 'invalid_params' });
    const payloads: unknown[] = [];
    a.onEvent((_topic, params) => payloads.push(params));
    h.gateway.publish('agent.step', { n: 1, text: 'héllo ✓ 😀' });
    await until(() => seenA.length === 1, 'the event');
    expect(payloads).toEqual([{ n: 1, text: 'héllo ✓ 😀' }]); // non-ASCII frames decode as UTF-8
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(seenA).toEqual(['agent.step']);
    expect(seenB).toEqual([]);
  });
});

describe('shutdown', () => {
  it('close() ends every session with reason shutdown and leaves no child process', async () => {
    const gw = await startGateway();
    const client: GatewayClient = await gw.connect();
    await client.subscribe(['pty.*']);
    const exits: unknown[] = [];
    client.onExit((exit) => exits.push(exit));
    const pids = [];
    for (let i = 0; i < 3; i += 1) pids.push((await client.spawn(bash)).pid);
    await gw.gateway.close();
    expect(pids.filter(alive)).toEqual([]);
    expect(readFileSync('/proc/self/stat', 'utf8')).toBeTruthy();
    await gw.dispose();
  });
});
