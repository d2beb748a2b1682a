// The gateway under hostile input, against a real server process: generated bad frames, oversize
// frames, unknown sessions, a consumer that stops reading, reconnect storms with checked replay,
// and spawn storms past the cap. Every case ends with the server answering `pty.list` within 1 s
// and no process of the case left running.
import { createHash } from 'node:crypto';
import { rmSync } from 'node:fs';
import { connectGateway, type GatewayClient } from '@aleph/gateway/client';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  assertAnswering,
  killAll,
  processesWith,
  rawSocket,
  rssOf,
  socketUrl,
  startServerProcess,
  summary,
  survivorsAfter,
  tally,
  type ServerProcess,
} from './support.js';

const STABLE_CODES = new Set([
  'parse_error',
  'invalid_request',
  'method_not_found',
  'invalid_params',
  'unknown_session',
  'frame_too_large',
  'busy',
  'session_limit',
  'spawn_failed',
  'session_closed',
]);

let server: ServerProcess;
beforeAll(async () => {
  server = await startServerProcess(
    '[gateway]\nport = 0\n[pty]\nmax_sessions = 8\n[power]\ninhibit_sleep = false\n',
  );
});
afterAll(async () => {
  await server.stop();
  rmSync(server.stateDir, { recursive: true, force: true });
  console.log(summary('gateway-faults'));
});

async function client(): Promise<GatewayClient> {
  return connectGateway(socketUrl(server), { token: server.token });
}

async function endCase(marker?: string): Promise<void> {
  tally.cases += 1;
  await assertAnswering(server);
  if (marker) {
    const left = await survivorsAfter(marker, 2000);
    tally.processesLeft += left.length;
    killAll(left);
    expect(left).toEqual([]);
  }
}

describe('bad frames', () => {
  it('generated JSON-RPC frames each get a stable error or a result, and the socket stays open', async () => {
    const socket = await rawSocket(server);
    const methods = [
      'pty.input',
      'pty.resize',
      'pty.close',
      'pty.list',
      'pty.replay',
      'pty.ack',
      'events.subscribe',
      'events.unsubscribe',
      'nope',
      '',
    ];
    const frame = fc.oneof(
      fc.record({
        jsonrpc: fc.constantFrom('2.0', '1.0', 2),
        id: fc.integer({ min: 1, max: 1e9 }),
        method: fc.constantFrom(...methods),
        params: fc.oneof(
          fc.jsonValue(),
          fc.record({
            sessionId: fc.string(),
            data: fc.string(),
            offset: fc.integer(),
            cols: fc.integer(),
            rows: fc.integer(),
          }),
        ),
      }),
      fc.jsonValue(),
      fc.string(),
    );
    const frames = fc.sample(frame, { numRuns: 400, seed: 42 });
    let expected = 0;
    for (const [index, value] of frames.entries()) {
      if (typeof value === 'object' && value !== null && !Array.isArray(value) && 'id' in value) {
        const withId: Record<string, unknown> = { ...value, id: 100000 + index };
        if (withId['jsonrpc'] === '2.0') expected += 1;
        socket.send(withId);
      } else {
        socket.send(typeof value === 'string' ? value : JSON.stringify(value));
      }
      tally.faults += 1;
    }
    // Every request with a 2.0 id is answered: a result or an error with a stable code.
    for (const [index, value] of frames.entries()) {
      if (typeof value !== 'object' || value === null || Array.isArray(value) || !('id' in value)) continue;
      if ((value as { jsonrpc: unknown }).jsonrpc !== '2.0') continue;
      const reply = await socket.response(100000 + index);
      if ('error' in reply) expect(STABLE_CODES).toContain(reply['error'].data?.code);
      else expect(reply).toHaveProperty('result');
      expected -= 1;
    }
    expect(expected).toBe(0);
    for (const reply of socket.frames) {
      const error = (reply as { error?: { data?: { code?: string } } }).error;
      if (error) expect(STABLE_CODES).toContain(error.data?.code);
    }
    socket.send({ jsonrpc: '2.0', id: 'still-open', method: 'pty.list', params: {} });
    expect(await socket.response('still-open', 1000)).toHaveProperty('result');
    await socket.close();
    await endCase();
  });

  it('an input frame over 64 KiB is refused with frame_too_large; an unknown session with unknown_session', async () => {
    const gateway = await client();
    const marker = 'sleep 7301';
    const { sessionId } = await gateway.spawn({
      command: '/bin/sh',
      args: ['-c', `exec ${marker}`],
      cols: 80,
      rows: 24,
    });
    await expect(gateway.input(sessionId, new Uint8Array(64 * 1024 + 1))).rejects.toMatchObject({
      data: { code: 'frame_too_large' },
    });
    await expect(gateway.input('no-such-session', 'x')).rejects.toMatchObject({
      data: { code: 'unknown_session' },
    });
    tally.faults += 2;
    await gateway.closeSession(sessionId);
    await gateway.close();
    await endCase(marker);
  });

  it('a frame over maxPayload closes only that connection, with 1009', async () => {
    const socket = await rawSocket(server);
    const closed = new Promise<number>((resolve) => socket.socket.once('close', (code) => resolve(code)));
    socket.send('x'.repeat(2 * 1024 * 1024));
    tally.faults += 1;
    expect(await closed).toBe(1009);
    await endCase();
  });
});

describe('slow consumers', () => {
  it('a client that stops reading and asks for 200 replays of 1 MiB keeps the server bounded', async () => {
    const gateway = await client();
    await gateway.subscribe(['pty.*']);
    const exited = new Promise<void>((resolve) => gateway.onExit(() => resolve()));
    const { sessionId } = await gateway.spawn({
      command: '/bin/sh',
      args: ['-c', 'head -c 1100000 /dev/urandom | base64 -w 100; sleep 7302'],
      cols: 80,
      rows: 24,
    });
    // Wait for the scrollback to fill.
    for (let i = 0; i < 200; i++) {
      const list = await gateway.list();
      if ((list.find((s) => s.sessionId === sessionId)?.outputOffset ?? 0) > 1_400_000) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const before = rssOf(server.child.pid!);
    const socket = await rawSocket(server);
    socket.socket.pause();
    for (let i = 0; i < 200; i++)
      socket.send({ jsonrpc: '2.0', id: i, method: 'pty.replay', params: { sessionId, fromOffset: 0 } });
    tally.faults += 200;
    await new Promise((resolve) => setTimeout(resolve, 1500));
    await assertAnswering(server);
    const growth = rssOf(server.child.pid!) - before;
    // 200 MiB of replies were asked for; the connection's budget must hold them back.
    expect(growth).toBeLessThan(96 * 1024 * 1024);
    await socket.close();
    await gateway.closeSession(sessionId);
    await exited;
    await gateway.close();
    await endCase('sleep 7302');
  });
});

describe('reconnect storms', () => {
  it('clients that come and go while a program prints 1.9 MB together see every byte, in order', async () => {
    const count = 260_000;
    const expected = createHash('sha256');
    let expectedBytes = 0;
    for (let i = 1; i <= count; i++) {
      const line = `${i}\r\n`;
      expected.update(line);
      expectedBytes += line.length;
    }
    const first = await client();
    await first.subscribe(['pty.*']);
    const { sessionId } = await first.spawn({
      command: 'seq',
      args: ['1', String(count)],
      cols: 80,
      rows: 24,
    });
    await first.close();
    const got = createHash('sha256');
    let offset = 0;
    let exit: unknown = null;
    for (let round = 0; round < 600; round++) {
      // A gap with nobody attached, then a short follow from where the last client stopped.
      await new Promise((resolve) => setTimeout(resolve, 20 + (round % 5) * 40));
      const viewer = await client();
      await viewer.subscribe(['pty.*'], [sessionId]);
      const from = offset;
      const answer = await viewer.follow(sessionId, from, (data, at) => {
        expect(at).toBe(offset); // every byte once, in order
        got.update(data);
        offset += data.length;
      });
      // Nothing was dropped while nobody watched: the output resumes where the last client stopped
      // (live output may already have arrived with the answer, in the same read of the socket).
      expect(answer.offset).toBe(from);
      await new Promise((resolve) => setTimeout(resolve, 60));
      answer.stop();
      await viewer.close();
      tally.faults += 1;
      if (answer.exit && offset >= (answer.end ?? Infinity)) {
        exit = answer.exit;
        break;
      }
    }
    expect(exit).toMatchObject({ exitCode: 0, reason: 'exited' });
    expect(offset).toBe(expectedBytes);
    expect(got.digest('hex')).toBe(expected.digest('hex'));
    tally.bytesChecked += offset;
    await endCase();
  });
});

describe('spawn storms', () => {
  it('30 spawns from three clients past a cap of 8 evict the oldest, each told why, and leave nothing running', async () => {
    const marker = 'sleep 7303';
    const clients = await Promise.all([client(), client(), client()]);
    const evicted = new Set<string>();
    for (const gateway of clients) {
      await gateway.subscribe(['pty.*']);
      gateway.onExit((event) => {
        if (event.reason === 'evicted') evicted.add(event.sessionId);
      });
    }
    const spawned = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        clients[i % 3]!.spawn({ command: '/bin/sh', args: ['-c', `exec ${marker}`], cols: 80, rows: 24 }),
      ),
    );
    tally.faults += 30;
    expect(new Set(spawned.map((s) => s.sessionId)).size).toBe(30);
    for (let i = 0; i < 100 && evicted.size < 22; i++)
      await new Promise((resolve) => setTimeout(resolve, 50));
    expect(evicted.size).toBe(22);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(processesWith(marker).length).toBeLessThanOrEqual(8);
    for (const session of await clients[0].list())
      await clients[0].closeSession(session.sessionId).catch(() => undefined);
    await Promise.all(clients.map((gateway) => gateway.close()));
    await endCase(marker);
  });
});
