// Terminals across cluster nodes, end to end: three real server processes on loopback sharing a real
// nats-server. A terminal stays on the node that forked it and is driven from any node: a client of
// another node types into it, reads its output, and resumes on a third node after its own node died,
// losing nothing; when the terminal's node dies, its clients everywhere see `pty.exit` `node_lost`.
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectCluster, sessionToken } from '@aleph/cluster';
import { natsServerBinary, startNatsServer, type NatsServer } from '@aleph/cluster/testing';
import { connectGateway, GatewayError, type GatewayClient } from '@aleph/gateway/client';
import { processAlive } from '@aleph/pty/testing';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { clusterNodeConfig, startServerProcess, type ServerProcess } from '../test/server-process.js';

const binary = natsServerBinary();
if (binary === undefined && process.env.CI)
  throw new Error('nats-server is missing (Debian package nats-server)');

const TOKEN = 'cluster-terminals-token-0123456789';
const TTL_SECS = 2;
const MB = 1_000_000;

describe.skipIf(binary === undefined)('terminals across cluster nodes', { timeout: 240_000 }, () => {
  let nats: NatsServer;
  let work: string;
  const servers: ServerProcess[] = [];
  const clients: GatewayClient[] = [];
  const clusters: string[] = [];
  const pids: number[] = [];

  const config = (node: string, name: string) =>
    clusterNodeConfig({ token: TOKEN, natsUrl: nats.url, name, node, leaseTtlSecs: TTL_SECS });

  const startNodes = async (name: string): Promise<ServerProcess[]> => {
    clusters.push(name);
    const started = await Promise.all(['a', 'b', 'c'].map((node) => startServerProcess(config(node, name))));
    servers.push(...started);
    return started;
  };
  const client = async (server: ServerProcess, autoAck = true): Promise<GatewayClient> => {
    const connected = await connectGateway(server.url, { token: server.token, autoAck });
    clients.push(connected);
    return connected;
  };
  const errorOf = async (promise: Promise<unknown>): Promise<GatewayError> => {
    const error = await promise.then(
      () => undefined,
      (caught: unknown) => caught,
    );
    expect(error).toBeInstanceOf(GatewayError);
    return error as GatewayError;
  };

  beforeAll(async () => {
    nats = await startNatsServer();
    work = mkdtempSync(join(tmpdir(), 'aleph-cluster-terminals-'));
  });
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((connected) => connected.close()));
    for (const server of servers.splice(0)) {
      await server.stop();
      rmSync(server.stateDir, { recursive: true, force: true });
    }
    // No program left behind on any node.
    await expect.poll(() => pids.filter((pid) => processAlive(pid)), { timeout: 30_000 }).toEqual([]);
    pids.length = 0;
    // No consumer left on the cluster's streams once its nodes are gone (a killed node's lapse);
    // then the streams and buckets go, and none is left.
    const probe = await connectCluster({ servers: [nats.url], name: 'probe', node: `probe-${process.pid}` });
    try {
      for (const name of clusters.splice(0)) {
        const streams = async (): Promise<string[]> => {
          const names: string[] = [];
          for await (const info of probe.jsm.streams.list())
            if (info.config.name.startsWith(`${name}_`) || info.config.name.startsWith(`KV_${name}_`))
              names.push(info.config.name);
          return names;
        };
        const consumers = async (): Promise<string[]> => {
          const left: string[] = [];
          for (const stream of await streams())
            for await (const consumer of probe.jsm.consumers.list(stream))
              if (consumer.config.durable_name === undefined) left.push(`${stream}/${consumer.name}`);
          return left;
        };
        await expect.poll(consumers, { timeout: 90_000, interval: 1_000 }).toEqual([]);
        for (const stream of await streams()) await probe.jsm.streams.delete(stream);
        expect(await streams()).toEqual([]);
      }
    } finally {
      await probe.close();
    }
  }, 180_000);
  afterAll(async () => {
    await nats?.dispose();
    rmSync(work, { recursive: true, force: true });
  });

  it('a client on one node types into a terminal of another, reads it, and resumes on a third after its node died, losing nothing', async () => {
    const [a, b, c] = (await startNodes('pty1')) as [ServerProcess, ServerProcess, ServerProcess];
    const written = randomBytes(5 * MB);
    const dataFile = join(work, 'five-mb.bin');
    writeFileSync(dataFile, written);
    const expected = createHash('sha256').update(written).digest('hex');

    // The terminal is forked on b: raw mode (bytes pass unchanged), a mark, then 5 MB once told to.
    const onB = await client(b);
    const { sessionId, pid } = await onB.spawn({
      command: '/bin/sh',
      args: ['-c', 'stty raw -echo; printf R; read -r line; cat "$0"', dataFile],
      cols: 80,
      rows: 24,
    });
    pids.push(pid);

    // A client on a follows it (acknowledging by hand: it stops at 1 MB, so its node holds back).
    const onA = await client(a, false);
    await onA.subscribe(['pty.*'], [sessionId]);
    const received: Buffer[] = [];
    let next = 0;
    const take = (data: Buffer, offset: number): void => {
      expect(offset).toBe(next); // in order, no gap, nothing twice
      received.push(Buffer.from(data));
      next = offset + data.length;
    };
    const followedOnA = await onA.follow(sessionId, 0, take);
    expect(followedOnA.offset).toBe(0);
    await expect.poll(() => next, { timeout: 60_000 }).toBeGreaterThanOrEqual(1);
    expect(Buffer.concat(received).subarray(0, 1).toString()).toBe('R');

    // Listed on every node; resized, snapshotted and replayed through a.
    const listed = await onA.list();
    expect(listed.find((item) => item.sessionId === sessionId)?.pid).toBe(pid);
    await onA.resize(sessionId, 100, 30);
    const snapshot = await onA.request<{ cols: number; rows: number }>('pty.snapshot', { sessionId });
    expect([snapshot.cols, snapshot.rows]).toEqual([100, 30]);
    const replay = await onA.replay(sessionId, 0);
    expect(replay.data.subarray(0, 1).toString()).toBe('R');

    await onA.input(sessionId, 'go\n');
    await expect.poll(() => next, { timeout: 60_000 }).toBeGreaterThan(MB);
    await onA.ack(sessionId, MB);
    await expect.poll(() => next, { timeout: 60_000 }).toBeGreaterThan(1.5 * MB);
    expect(next).toBeLessThan(1 + 5 * MB); // a held it back: the rest is still to come

    // a dies; the client comes back through c and resumes where it was.
    await a.stop('SIGKILL');
    const onC = await client(c);
    const exits: { reason: string }[] = [];
    onC.onExit((exit) => exits.push(exit));
    await onC.subscribe(['pty.*'], [sessionId]);
    const followedOnC = await onC.follow(sessionId, next, take);
    expect(followedOnC.offset).toBe(next);
    await expect.poll(() => next, { timeout: 120_000, interval: 200 }).toBe(1 + 5 * MB);
    const assembled = Buffer.concat(received);
    expect(assembled.length).toBe(1 + 5 * MB);
    expect(createHash('sha256').update(assembled.subarray(1)).digest('hex')).toBe(expected);
    // The program ended after its output: its exit reaches the client on c after the last byte.
    await expect.poll(() => exits.map((exit) => exit.reason), { timeout: 60_000 }).toEqual(['exited']);
  });

  it('forks on a named node, kills from another, and ends a terminal for every client with node_lost when its node is SIGKILLed; calls on it, on unknown ids and on unknown nodes get stable errors', async () => {
    const [a, b, c] = (await startNodes('pty2')) as [ServerProcess, ServerProcess, ServerProcess];
    // A client of c that wants every terminal's output, subscribed before the terminal exists.
    const everything = await client(c);
    await everything.subscribe(['pty.*']);
    let seenOnC = '';
    everything.onOutput((output) => (seenOnC += Buffer.from(output.data).toString()));
    const onB = await client(b);
    const { sessionId, pid } = await onB.spawn({ command: '/bin/cat', cols: 80, rows: 24 });
    pids.push(pid);
    const onA = await client(a);
    const onC = await client(c);
    const exits = new Map<GatewayClient, { sessionId: string; reason: string }[]>();
    for (const viewer of [onA, onC]) {
      exits.set(viewer, []);
      viewer.onExit((exit) => exits.get(viewer)?.push(exit));
      await viewer.subscribe(['pty.*'], [sessionId]);
    }
    // Typed on a, echoed by cat on b, read on a.
    let echoed = '';
    await onA.follow(sessionId, 0, (data) => (echoed += data.toString()));
    await onA.input(sessionId, 'hello from a\n');
    await expect.poll(() => echoed, { timeout: 30_000 }).toContain('hello from a');
    // c follows the new terminal live from when it learnt of it: what is typed from then on shows.
    await expect
      .poll(
        async () => (seenOnC.includes('ping') ? seenOnC : (await onA.input(sessionId, 'ping\n'), seenOnC)),
        {
          timeout: 30_000,
          interval: 1_000,
        },
      )
      .toContain('ping');

    // An id no node has: the error a single node gives, whichever node is asked.
    for (const viewer of [onA, onC]) {
      const unknown = await errorOf(viewer.input('no-such-session', 'x'));
      expect(unknown.code).toBe('unknown_session');
      expect(unknown.message).toBe('unknown session no-such-session');
      expect((await errorOf(viewer.resize('no-such-session', 10, 10))).code).toBe('unknown_session');
    }

    // Placement: a client of a forks on b by name, and drives it from a; a client of c kills one on b.
    const placer = await client(a);
    const placed = await placer.spawn({ command: '/bin/cat', cols: 80, rows: 24, node: 'b' });
    pids.push(placed.pid);
    let placedOutput = '';
    await placer.subscribe(['pty.*'], [placed.sessionId]);
    await placer.follow(placed.sessionId, 0, (data) => (placedOutput += data.toString()));
    await placer.input(placed.sessionId, 'placed on b\n');
    await expect.poll(() => placedOutput, { timeout: 30_000 }).toContain('placed on b');
    const doomed = await onC.spawn({ command: '/bin/cat', cols: 80, rows: 24, node: 'b' });
    pids.push(doomed.pid);
    expect(await onC.request('pty.kill', { sessionId: doomed.sessionId })).toMatchObject({
      reason: 'closed',
    });
    await expect.poll(() => processAlive(doomed.pid), { timeout: 30_000 }).toBe(false);
    const onItsOwn = await placer.spawn({ command: '/bin/cat', cols: 80, rows: 24, node: 'a' });
    pids.push(onItsOwn.pid);
    expect((await placer.list()).find((item) => item.sessionId === onItsOwn.sessionId)?.exit).toBeNull();
    const nowhere = await errorOf(placer.spawn({ command: '/bin/cat', cols: 80, rows: 24, node: 'zz' }));
    expect(nowhere.code).toBe('invalid_params');
    expect(nowhere.message).toBe(`params.node: unknown node "zz"; the cluster's live nodes are a, b, c`);
    expect(nowhere.data?.['reason']).toBe('unknown_node');

    await b.stop('SIGKILL');
    // The terminal placed on b was b's: it is lost with b. And b takes no new one.
    await expect
      .poll(async () => (await errorOf(placer.input(placed.sessionId, 'x'))).data?.['reason'], {
        timeout: 30_000,
      })
      .toBe('node_lost');
    await expect
      .poll(
        async () =>
          (await errorOf(onC.spawn({ command: '/bin/cat', cols: 80, rows: 24, node: 'b' }))).message,
        { timeout: 30_000 },
      )
      .toBe(`params.node: node b is gone (lost or left the cluster); the cluster's live nodes are a, c`);
    for (const viewer of [onA, onC])
      await expect
        .poll(() => exits.get(viewer), { timeout: 30_000 })
        .toEqual([{ sessionId, exitCode: null, signal: null, reason: 'node_lost' }]);
    // A call on it now: session_closed, saying its node was lost.
    for (const viewer of [onA, onC]) {
      const lost = await errorOf(viewer.input(sessionId, 'x'));
      expect(lost.code).toBe('session_closed');
      expect(lost.data?.['reason']).toBe('node_lost');
      expect(lost.message).toContain('node b was lost');
    }
    const listed = await onA.list();
    expect(listed.find((item) => item.sessionId === sessionId)?.exit?.reason).toBe('node_lost');
  });

  it('a terminal costs the cluster nothing until another node wants it; a client there that comes late reads it from its scrollback, then live', async () => {
    const [a, b] = (await startNodes('pty4')) as [ServerProcess, ServerProcess, ServerProcess];
    const onB = await client(b);
    const { sessionId, pid } = await onB.spawn({
      command: '/bin/sh',
      args: ['-c', 'printf early-output; read -r line; printf "[%s]" "$line"; read -r line'],
      cols: 80,
      rows: 24,
    });
    pids.push(pid);
    let onBText = '';
    await onB.subscribe(['pty.*'], [sessionId]);
    await onB.follow(sessionId, 0, (data) => (onBText += data.toString()));
    await expect.poll(() => onBText, { timeout: 60_000 }).toContain('early-output');

    // Nobody elsewhere wants it: it is in no bucket and none of its output is in the stream.
    const probe = await connectCluster({
      servers: [nats.url],
      name: 'pty4',
      node: `probe-${process.pid}`,
      leaseTtlSecs: TTL_SECS,
    });
    try {
      const terminals = await probe.kv('pty4_terminals');
      const registered = async (): Promise<string | undefined> =>
        (await terminals.get(sessionToken(sessionId)))?.json<{ node: string }>().node;
      const stored = async (): Promise<number> =>
        Object.values(
          (
            await probe.jsm.streams.info('pty4_pty', {
              subjects_filter: `pty4.pty.${sessionToken(sessionId)}`,
            })
          ).state.subjects ?? {},
        ).reduce((sum, count) => sum + count, 0);
      expect(await registered()).toBeUndefined();
      expect(await stored()).toBe(0);

      // Listed on another node all the same (its node is asked), and still not published.
      const onA = await client(a);
      await expect
        .poll(async () => (await onA.list()).find((item) => item.sessionId === sessionId)?.pid, {
          timeout: 60_000,
          interval: 1_000,
        })
        .toBe(pid); // a node too loaded to answer in time is asked again
      expect(await registered()).toBeUndefined();

      // A client of a follows it from the start: what it wrote before anyone there looked, then live.
      await onA.subscribe(['pty.*'], [sessionId]);
      let next = 0;
      let onAText = '';
      const followed = await onA.follow(sessionId, 0, (data, offset) => {
        expect(offset).toBe(next); // in order, no gap, nothing twice
        next = offset + data.length;
        onAText += data.toString();
      });
      expect(followed.offset).toBe(0);
      await expect.poll(() => onAText, { timeout: 60_000 }).toContain('early-output');
      expect(await registered()).toBe('b');
      expect(await stored()).toBeGreaterThan(0);
      await onA.input(sessionId, 'go\n');
      await expect.poll(() => onAText, { timeout: 60_000 }).toContain('[go]');
      // The same bytes as the terminal's own node sent its client.
      await expect.poll(() => onBText, { timeout: 60_000 }).toContain('[go]');
      expect(onAText).toBe(onBText);
    } finally {
      await probe.close();
    }
  });

  it('a node stopped past its lease and continued closes the terminals the cluster declared lost, says nothing twice, and keeps the others', async () => {
    const [a, b] = (await startNodes('pty5')) as [ServerProcess, ServerProcess, ServerProcess];
    const onB = await client(b);
    const watched = await onB.spawn({ command: '/bin/sleep', args: ['600'], cols: 80, rows: 24 });
    const alone = await onB.spawn({ command: '/bin/sleep', args: ['601'], cols: 80, rows: 24 });
    pids.push(watched.pid, alone.pid);
    // A client of a follows one of them: the cluster knows that one; nobody elsewhere knows the other.
    const onA = await client(a);
    const exits: { sessionId: string; reason: string }[] = [];
    onA.onExit((exit) => exits.push(exit));
    await onA.subscribe(['pty.*'], [watched.sessionId]);
    await onA.follow(watched.sessionId, 0, () => undefined);

    b.child.kill('SIGSTOP');
    try {
      await expect
        .poll(() => exits, { timeout: 60_000 })
        .toEqual([{ sessionId: watched.sessionId, exitCode: null, signal: null, reason: 'node_lost' }]);
    } finally {
      b.child.kill('SIGCONT');
    }
    // Back, b closes what the cluster said had ended; the terminal nobody elsewhere knew goes on.
    await expect.poll(() => processAlive(watched.pid), { timeout: 60_000, interval: 200 }).toBe(false);
    expect(processAlive(alone.pid)).toBe(true);
    const lost = await errorOf(onA.input(watched.sessionId, 'x'));
    expect(lost.code).toBe('session_closed');
    expect(lost.data?.['reason']).toBe('node_lost');
    // Its end was said once, as node_lost (the close on b says nothing more).
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    expect(exits.map((exit) => exit.reason)).toEqual(['node_lost']);
    await onB.closeSession(alone.sessionId);
  });

  it('a client of another node that does not acknowledge holds the terminal on its node, bounded, until it does', async () => {
    const [a, b] = (await startNodes('pty3')) as [ServerProcess, ServerProcess, ServerProcess];
    const onB = await client(b);
    const { sessionId, pid } = await onB.spawn({ command: '/usr/bin/yes', cols: 80, rows: 24 });
    pids.push(pid);
    const offsetOnB = async (): Promise<number> =>
      (await onB.list()).find((item) => item.sessionId === sessionId)?.outputOffset ?? -1;
    // yes writes more than its scrollback (1 MiB) before anyone follows, so the follow from 0 starts
    // at the oldest byte b still keeps: acks name offsets, not a count of the bytes received (that
    // would acknowledge less than the client has, and it would stay behind for good).
    await expect.poll(offsetOnB, { timeout: 60_000 }).toBeGreaterThan(2 * 1024 * 1024);
    const onA = await client(a, false);
    await onA.subscribe(['pty.*'], [sessionId]);
    let next = 0;
    await onA.follow(sessionId, 0, (data, offset) => {
      expect(offset).toBeGreaterThanOrEqual(next); // in order, nothing twice
      next = offset + data.length;
    });
    // It never acknowledges: the terminal's node stops reading the pty (yes blocks on its write).
    await expect
      .poll(
        async () => {
          const before = await offsetOnB();
          await new Promise((resolve) => setTimeout(resolve, 1_500));
          return (await offsetOnB()) - before;
        },
        { timeout: 90_000, interval: 100 },
      )
      .toBe(0);
    const held = await offsetOnB();
    expect(held).toBeGreaterThan(0);
    expect(held).toBeLessThan(32 * 1024 * 1024);
    // It reads and acknowledges what arrived as it arrives (each ack lets the terminal run a window
    // further): it gets everything that was held, and the terminal runs again.
    await expect
      .poll(async () => (await onA.ack(sessionId, next), next), { timeout: 120_000, interval: 200 })
      .toBeGreaterThan(held);
    await expect
      .poll(async () => (await onA.ack(sessionId, next), offsetOnB()), {
        timeout: 120_000,
        interval: 200,
      })
      .toBeGreaterThan(held + 1024 * 1024);
    await onB.closeSession(sessionId);
  });
});
