import { afterEach, describe, expect, it } from 'vitest';
import { PtyError, PtyManager, type ExitInfo } from './index.js';
import { alive, collect, until } from '../test/support.js';

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
    expect(m.list()).toEqual([]);
    expect(m.listEnded()).toEqual([session]);
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

  it('a watched session is never idle; its TTL counts from when the last watcher left', async () => {
    const m = manager({ idleTtlMs: 300, sweepIntervalMs: 20 });
    const watched = m.spawn(sleeper);
    const watches = [watched.watch(), watched.watch()];
    const quiet = m.spawn(sleeper); // spawned with it: the TTL is running
    expect(await quiet.exited).toMatchObject({ reason: 'expired' });
    const quietEnd = Date.now();
    await until(() => Date.now() - quietEnd > 600, 'two TTLs more');
    expect(watched.exitInfo).toBeUndefined();
    watches[0]!.dispose();
    watches[0]!.dispose(); // idempotent: the other watcher still holds it
    await until(() => Date.now() - quietEnd > 1200, 'two TTLs more');
    expect(watched.exitInfo).toBeUndefined();
    const left = Date.now();
    watches[1]!.dispose();
    expect(await watched.exited).toMatchObject({ reason: 'expired' });
    expect(Date.now() - left).toBeGreaterThanOrEqual(300); // from the leave, not from the spawn
  });

  it('idleExpiresAt: when the TTL would end a session left alone; null while watched, without a TTL, once ended', async () => {
    const m = manager({ idleTtlMs: 60_000 });
    const session = m.spawn(sleeper);
    expect(m.idleExpiresAt(session.id)).toBe(session.idleSince! + 60_000);
    const watch = session.watch();
    expect(m.idleExpiresAt(session.id)).toBeNull();
    watch.dispose();
    expect(m.idleExpiresAt(session.id)).toBe(session.idleSince! + 60_000); // from the leave
    expect(m.idleExpiresAt('nope')).toBeNull();
    await m.close(session.id);
    expect(m.idleExpiresAt(session.id)).toBeNull();
    const forever = manager({ idleTtlMs: Number.POSITIVE_INFINITY });
    expect(forever.idleExpiresAt(forever.spawn(sleeper).id)).toBeNull();
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

  it('keeps an ended session, its exit and its tail, for the grace period, then forgets it', async () => {
    const m = manager({ endedRetentionMs: 400 });
    const forgotten: string[] = [];
    m.on('forget', (id) => forgotten.push(id));
    const session = m.spawn({
      command: '/bin/sh',
      args: ['-c', 'echo the-tail; exit 3'],
      cols: 80,
      rows: 24,
    });
    await session.exited;
    // Not live (the cap no longer counts it), but found, listed as ended, and replayable.
    expect(m.list()).toEqual([]);
    expect(m.require(session.id)).toBe(session);
    expect(m.listEnded()).toEqual([session]);
    expect(session.exitInfo).toEqual({ exitCode: 3, signal: null, reason: 'exited' });
    expect(session.replay(0).data.toString()).toContain('the-tail');
    expect(() => session.write('x')).toThrow(/has ended/);
    await until(() => m.get(session.id) === undefined, 'the grace period to pass');
    expect(m.listEnded()).toEqual([]);
    expect(forgotten).toEqual([session.id]);
    expect(() => m.require(session.id)).toThrow(
      new PtyError('unknown_session', `unknown session ${session.id}`),
    );
  });

  it('keeps ended sessions 60 s by default, at most as many as the cap, oldest forgotten first', async () => {
    expect(new PtyManager({ maxSessions: 7 })).toMatchObject({
      endedRetentionMs: 60_000,
      maxEndedSessions: 7,
    });
    const m = manager({ maxEndedSessions: 2 });
    const ended: string[] = [];
    for (const word of ['one', 'two', 'three']) {
      const session = m.spawn({ command: '/bin/echo', args: [word], cols: 80, rows: 24 });
      await session.exited;
      ended.push(session.id);
    }
    expect(m.listEnded().map((session) => session.id)).toEqual(ended.slice(1));
    expect(m.get(ended[0]!)).toBeUndefined();
    expect(m.forget(ended[1]!)).toBe(true);
    expect(m.listEnded().map((session) => session.id)).toEqual([ended[2]]);
  });

  it('a session being closed is still found, then kept as ended with its reason', async () => {
    const m = manager();
    const session = m.spawn(sleeper);
    const closing = m.close(session.id);
    expect(m.get(session.id)).toBe(session);
    expect(m.size).toBe(0);
    expect(await closing).toMatchObject({ reason: 'closed' });
    expect(m.listEnded()).toEqual([session]);
  });

  it('a hold keeps output unread whatever pause/resume does; the end still drains', async () => {
    const m = manager();
    const flood = m.spawn({
      command: '/bin/sh',
      args: ['-c', 'read go; head -c 300000 /dev/zero | tr "\\0" x; echo; echo done'],
      cols: 80,
      rows: 24,
    });
    const output = collect(flood);
    const hold = flood.hold();
    flood.pause();
    flood.resume(); // the flow-control owner lets go; the hold still holds
    expect(flood.paused).toBe(true);
    flood.write('go\r');
    // Far more than a terminal buffers: it cannot all arrive while held, however long we wait.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(flood.scrollback.end).toBeLessThan(300_000);
    hold.dispose();
    hold.dispose(); // idempotent
    expect(flood.paused).toBe(false);
    await output.waitFor(/done/);

    const short = m.spawn({ command: '/bin/sh', args: ['-c', 'printf last-words'], cols: 80, rows: 24 });
    short.hold();
    await short.exited;
    expect(short.replay(0).data.toString()).toBe('last-words');
  });
});
