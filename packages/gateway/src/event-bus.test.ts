// The EventBus seam: the in-process bus against the contract every bus keeps (@aleph/gateway/testing),
// its own bounds, and a gateway over a bus that others publish on too.
import { describe, expect, it } from 'vitest';
import { InMemoryEventBus, type BusEvent } from './event-bus.js';
import { eventBusContract } from './testing.js';
import { startGateway, until } from '../test/support.js';

describe('InMemoryEventBus keeps the EventBus contract', () => {
  for (const { name, run } of eventBusContract)
    it(name, () => run(() => new InMemoryEventBus({ onListenerError: () => {} })));
});

describe('InMemoryEventBus', () => {
  it('delivers inside publish to a listener with nothing pending', () => {
    const bus = new InMemoryEventBus();
    const seen: string[] = [];
    bus.subscribe({ topics: ['pty.*'] }, (event) => void seen.push(event.topic));
    expect(bus.publishNow('pty.exit', 's', {}).seq).toBe(1);
    expect(seen).toEqual(['pty.exit']);
  });

  it('keeps retainPerSession events a session: older ones are skipped, the jump in seq shows it', () => {
    const bus = new InMemoryEventBus({ retainPerSession: 3 });
    for (let n = 0; n < 10; n += 1) bus.publishNow('agent.step', 's', { n });
    const seen: number[] = [];
    bus.subscribe({ topics: ['*'], sessionId: 's', afterSeq: 0 }, (event) => void seen.push(event.seq));
    expect(seen).toEqual([8, 9, 10]);
  });

  it('drops the history of the session published to longest ago, never its sequence', () => {
    const bus = new InMemoryEventBus({ retainSessions: 2 });
    bus.publishNow('agent.step', 'a', {});
    bus.publishNow('agent.step', 'b', {});
    bus.publishNow('agent.step', 'c', {}); // a's history goes
    const replayed = (sessionId: string): number[] => {
      const seen: number[] = [];
      bus
        .subscribe({ topics: ['*'], sessionId, afterSeq: 0 }, (event) => void seen.push(event.seq))
        .unsubscribe();
      return seen;
    };
    expect([replayed('a'), replayed('b'), replayed('c')]).toEqual([[], [1], [1]]);
    expect(bus.publishNow('agent.step', 'a', {}).seq).toBe(2);
  });

  it('reports a throwing listener and delivers on', () => {
    const failures: unknown[] = [];
    const bus = new InMemoryEventBus({ onListenerError: (error) => failures.push(error) });
    const seen: number[] = [];
    bus.subscribe({ topics: ['*'] }, (event) => {
      seen.push(event.seq);
      throw new Error(`listener ${event.seq}`);
    });
    bus.publishNow('x', 's', {});
    bus.publishNow('x', 's', {});
    expect(seen).toEqual([1, 2]);
    expect(failures.map(String)).toEqual(['Error: listener 1', 'Error: listener 2']);
  });
});

describe('a gateway over a bus', () => {
  it('delivers what anyone publishes on its bus, and publishes its own events there with a sequence', async () => {
    const bus = new InMemoryEventBus();
    const onBus: BusEvent[] = [];
    bus.subscribe({ topics: ['*'] }, (event) => void onBus.push(event));
    const h = await startGateway({ bus });
    try {
      expect(h.gateway.bus).toBe(bus);
      const client = await h.connect();
      await client.subscribe(['agent.*', 'pty.*']);
      const events: [string, unknown][] = [];
      client.onEvent((topic, params) => events.push([topic, params]));
      // Another part (another node's gateway, in a cluster) publishes on the same bus.
      await bus.publish('agent.step', 'run-session', { sessionId: 'run-session', n: 1 });
      h.gateway.publish('agent.step', { sessionId: 'run-session', n: 2 });
      const { sessionId } = await client.spawn({
        command: '/bin/sh',
        args: ['-c', 'exit 3'],
        cols: 80,
        rows: 24,
      });
      await until(() => events.some(([topic]) => topic === 'pty.exit'), 'the exit');
      expect(events.filter(([topic]) => topic === 'agent.step').map(([, params]) => params)).toEqual([
        { sessionId: 'run-session', n: 1 },
        { sessionId: 'run-session', n: 2 },
      ]);
      expect(onBus.map((event) => [event.topic, event.sessionId, event.seq])).toEqual([
        ['agent.step', 'run-session', 1],
        ['agent.step', 'run-session', 2],
        ['pty.exit', sessionId, 1],
      ]);
      expect(onBus.at(-1)?.data).toMatchObject({ sessionId, exitCode: 3, reason: 'exited' });
    } finally {
      await h.dispose();
    }
  });
});
