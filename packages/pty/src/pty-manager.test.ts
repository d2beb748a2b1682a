import { afterEach, describe, expect, it } from 'vitest';
import { PtyError, PtyManager, type ExitInfo } from './index.js';
import { alive, until } from '../test/support.js';

const managers: PtyManager[] = [];
const manager = (options: ConstructorParameters<typeof PtyManager>[0] = {}) => {
  const created = new PtyManager({ killStepMs: 200, ...options });
  managers.push(created);
  return created;
};
afterEach(async () => {
  await Promise.all(managers.splice(0).map((m) => m.closeAll()));
});
const sleeper = { command: '/bin/sh', args: ['-c', 'sleep 1000'], cols: 80, rows: 24 };

describe('PtyManager', () => {
  it('evicts the oldest session when a spawn overflows the cap, and says evicted', async () => {
    const m = manager({ maxSessions: 3 });
    const exits: [string, ExitInfo][] = [];
    m.on('exit', (id, info) => exits.push([id, info]));
    const [first, second, third] = [m.spawn(sleeper), m.spawn(sleeper), m.spawn(sleeper)];
    const fourth = m.spawn(sleeper);
    expect(m.list().map((s) => s.id)).toEqual([second.id, third.id, fourth.id]);
    expect(await first.exited).toMatchObject({ reason: 'evicted' });
    await until(() => exits.length === 1, 'the exit event');
    expect(exits[0]).toEqual([first.id, expect.objectContaining({ reason: 'evicted' })]);
    expect(alive(first.pid)).toBe(false);
  });

  it('with eviction "reject", refuses a spawn over the cap with a clear error', () => {
    const m = manager({ maxSessions: 1, eviction: 'reject' });
    m.spawn(sleeper);
    expect(() => m.spawn(sleeper)).toThrow(
      new PtyError('session_limit', 'session limit reached: 1 sessions are open'),
    );
    expect(m.size).toBe(1);
  });

  it('many spawns in a burst never leave more than the cap in the table', async () => {
    const m = manager({ maxSessions: 5 });
    const spawned = await Promise.all(
      Array.from({ length: 20 }, () => Promise.resolve().then(() => m.spawn(sleeper))),
    );
    expect(m.size).toBe(5);
    expect(m.list().map((s) => s.id)).toEqual(spawned.slice(-5).map((s) => s.id));
    await Promise.all(spawned.slice(0, 15).map((s) => s.exited));
    expect(spawned.slice(0, 15).filter((s) => alive(s.pid))).toEqual([]);
  });

  it('expires an idle session', async () => {
    const m = manager({ idleTtlMs: 200, sweepIntervalMs: 20 });
    const session = m.spawn(sleeper);
    expect(await session.exited).toMatchObject({ reason: 'expired' });
    expect(m.get(session.id)).toBeUndefined();
  });

  it('input and output count as activity', async () => {
    const m = manager({ idleTtlMs: 300, sweepIntervalMs: 20 });
    const chatty = m.spawn({
      command: '/bin/sh',
      args: ['-c', 'while :; do echo tick; sleep 0.05; done'],
      cols: 80,
      rows: 24,
    });
    const quiet = m.spawn(sleeper);
    expect(await quiet.exited).toMatchObject({ reason: 'expired' });
    expect(m.get(chatty.id)).toBe(chatty);
  });

  it('close and closeAll say closed and shutdown; unknown ids are a clear error', async () => {
    const m = manager();
    const a = m.spawn(sleeper);
    const b = m.spawn(sleeper);
    expect(await m.close(a.id)).toMatchObject({ reason: 'closed' });
    await expect(m.close('nope')).rejects.toThrow(new PtyError('unknown_session', 'unknown session nope'));
    await m.closeAll();
    expect(await b.exited).toMatchObject({ reason: 'shutdown' });
    expect([a, b].filter((s) => alive(s.pid))).toEqual([]);
    expect(() => m.spawn(sleeper)).toThrow(/shut down/);
  });
});
