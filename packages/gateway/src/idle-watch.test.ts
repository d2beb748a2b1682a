// The idle TTL counted only pty input and output, so a session open in a console tab
// (vim idle while the user reads it) was SIGHUPed. A session that a connection is subscribed to
// the output of is watched: never idle; its TTL counts from when the last viewer left.
import { PtyManager, type PtySession } from '@aleph/pty';
import { afterEach, expect, it } from 'vitest';
import { connectGateway, type GatewayClient } from './client.js';
import { createGateway, type Gateway } from './index.js';
import { TOKEN, until } from '../test/support.js';

const TTL_MS = 300;
let manager: PtyManager;
let gateway: Gateway;
const clients: GatewayClient[] = [];
afterEach(async () => {
  await Promise.all(clients.splice(0).map((client) => client.close()));
  await gateway.close(); // ends the manager's sessions too
});

const sleeper = { command: '/bin/sh', args: ['-c', 'sleep 1000'], cols: 80, rows: 24 };

it('a followed session outlives the idle TTL, and expires a TTL after its viewer disconnects', async () => {
  manager = new PtyManager({ idleTtlMs: TTL_MS, sweepIntervalMs: 20, killStepMs: 200 });
  gateway = await createGateway({ token: TOKEN, ptyManager: manager });
  const viewer = await connectGateway(gateway.url, { token: TOKEN });
  clients.push(viewer);
  const { sessionId } = await viewer.spawn(sleeper);
  const watched = manager.require(sessionId);
  // As a console tab does: subscribed to this session's pty.* and following its output.
  await viewer.subscribe(['pty.*'], [sessionId]);
  await viewer.follow(sessionId, 0, () => {});
  const unwatched: PtySession = manager.spawn(sleeper); // the TTL runs: this one expires
  expect(await unwatched.exited).toMatchObject({ reason: 'expired' });
  const expiredAt = Date.now();
  await until(() => Date.now() - expiredAt > 3 * TTL_MS, 'three TTLs more');
  expect(watched.exitInfo).toBeUndefined();

  // Another client subscribed to other sessions only does not watch this one.
  const other = await connectGateway(gateway.url, { token: TOKEN });
  clients.push(other);
  await other.subscribe(['pty.*'], [unwatched.id]);
  const left = Date.now();
  await viewer.close();
  expect(await watched.exited).toMatchObject({ reason: 'expired', signal: 'SIGHUP' });
  expect(Date.now() - left).toBeGreaterThanOrEqual(TTL_MS); // counted from the leave
});

it('unsubscribing from the output lets the TTL run again', async () => {
  manager = new PtyManager({ idleTtlMs: TTL_MS, sweepIntervalMs: 20, killStepMs: 200 });
  gateway = await createGateway({ token: TOKEN, ptyManager: manager });
  const viewer = await connectGateway(gateway.url, { token: TOKEN });
  clients.push(viewer);
  await viewer.subscribe(['pty.*']); // every session's output: a session spawned later is watched too
  const { sessionId } = await viewer.spawn(sleeper);
  const watched = manager.require(sessionId);
  const spawnedAt = Date.now();
  await until(() => Date.now() - spawnedAt > 3 * TTL_MS, 'three TTLs');
  expect(watched.exitInfo).toBeUndefined();
  await viewer.unsubscribe(['pty.*']);
  expect(await watched.exited).toMatchObject({ reason: 'expired' });
});

it('pty.list says when an unfollowed session would expire: null while followed and once ended', async () => {
  manager = new PtyManager({ idleTtlMs: 600_000, killStepMs: 200 });
  gateway = await createGateway({ token: TOKEN, ptyManager: manager });
  const viewer = await connectGateway(gateway.url, { token: TOKEN });
  clients.push(viewer);
  const { sessionId } = await viewer.spawn(sleeper);
  const session = manager.require(sessionId);
  const listed = async () =>
    (await viewer.list()).find((item) => item.sessionId === sessionId)?.idleExpiresAt;
  expect(await listed()).toBe(session.idleSince! + 600_000);
  await viewer.subscribe(['pty.*'], [sessionId]);
  expect(await listed()).toBeNull();
  await viewer.unsubscribe(['pty.*']);
  expect(await listed()).toBe(session.idleSince! + 600_000); // counted from the leave
  await viewer.closeSession(sessionId);
  expect(await listed()).toBeNull(); // ended: listed a while, with its exit
});
