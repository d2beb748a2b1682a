// @aleph/gateway/testing: the EventBus contract as cases any test runner can run, so every bus (the
// in-process default, a cluster's) is held to the same rules:
//   for (const { name, run } of eventBusContract) it(name, () => run(makeBus));
// Each case makes its own bus with `make`, uses session ids of its own, and throws (node:assert)
// when the bus breaks the contract written at the top of event-bus.ts.
import { deepStrictEqual } from 'node:assert/strict';
import type { BusEvent, EventBus } from './event-bus.js';

export interface EventBusCase {
  readonly name: string;
  readonly run: (make: () => EventBus | Promise<EventBus>) => Promise<void>;
}

const unique = (label: string): string => `${label}-${Math.random().toString(36).slice(2)}`;

/** Waits until `check` holds (events of a bus elsewhere arrive after a round trip). */
async function eventually(check: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

const brief = (events: readonly BusEvent[]): string[] =>
  events.map((event) => `${event.sessionId}:${event.seq}:${event.topic}:${JSON.stringify(event.data)}`);

export const eventBusContract: readonly EventBusCase[] = [
  {
    name: 'sequences count per session from 1, and publish resolves with each',
    async run(make) {
      const bus = await make();
      const [a, b] = [unique('a'), unique('b')];
      const seqs = [
        await bus.publish('agent.step', a, { n: 1 }),
        await bus.publish('agent.step', b, { n: 1 }),
        await bus.publish('pty.exit', a, { n: 2 }),
      ];
      deepStrictEqual(seqs, [1, 1, 2]);
    },
  },
  {
    name: 'a subscription gets what matches its patterns, in order, with its session and data',
    async run(make) {
      const bus = await make();
      const session = unique('s');
      const seen: BusEvent[] = [];
      const subscription = bus.subscribe({ topics: ['agent.*', 'pty.exit'] }, (event) => {
        if (event.sessionId === session) seen.push(event);
      });
      await subscription.ready;
      await bus.publish('agent.step', session, { n: 1 });
      await bus.publish('pty.output', session, { skipped: true });
      await bus.publish('pty.exit', session, { exitCode: 0 });
      await bus.publish('agentx', session, { skipped: true });
      await bus.publish('agent.done', session, { n: 2 });
      await eventually(() => seen.length >= 3, 'three events');
      deepStrictEqual(brief(seen), [
        `${session}:1:agent.step:{"n":1}`,
        `${session}:3:pty.exit:{"exitCode":0}`,
        `${session}:5:agent.done:{"n":2}`,
      ]);
      subscription.unsubscribe();
    },
  },
  {
    name: 'sessionId limits a subscription to one session; * matches every topic',
    async run(make) {
      const bus = await make();
      const [mine, other] = [unique('mine'), unique('other')];
      const seen: BusEvent[] = [];
      const subscription = bus.subscribe(
        { topics: ['*'], sessionId: mine },
        (event) => void seen.push(event),
      );
      await subscription.ready;
      await bus.publish('agent.step', other, {});
      await bus.publish('x', mine, {});
      await bus.publish('agent.step', mine, {});
      await eventually(() => seen.length >= 2, 'two events');
      deepStrictEqual(brief(seen), [`${mine}:1:x:{}`, `${mine}:2:agent.step:{}`]);
      subscription.unsubscribe();
    },
  },
  {
    name: 'afterSeq replays the retained events after it, then goes on live, each once',
    async run(make) {
      const bus = await make();
      const session = unique('s');
      for (let n = 1; n <= 4; n += 1) await bus.publish('agent.step', session, { n });
      const seen: number[] = [];
      const subscription = bus.subscribe(
        { topics: ['agent.*'], sessionId: session, afterSeq: 2 },
        (event) => {
          seen.push(event.seq);
        },
      );
      await subscription.ready;
      await bus.publish('agent.step', session, { n: 5 });
      await eventually(() => seen.length >= 3, 'the replay and the live event');
      await new Promise((resolve) => setTimeout(resolve, 50));
      deepStrictEqual(seen, [3, 4, 5]);
      subscription.unsubscribe();
    },
  },
  {
    name: "a listener's promise holds its subscription's next event; a failing listener does not stop delivery",
    async run(make) {
      const bus = await make();
      const session = unique('s');
      const log: string[] = [];
      const subscription = bus.subscribe({ topics: ['*'], sessionId: session }, async (event) => {
        log.push(`start ${event.seq}`);
        await new Promise((resolve) => setTimeout(resolve, 20));
        log.push(`end ${event.seq}`);
        if (event.seq === 1) throw new Error('listener failure (expected by the contract test)');
      });
      await subscription.ready;
      await bus.publish('agent.step', session, {});
      await bus.publish('agent.step', session, {});
      await eventually(() => log.length >= 4, 'both events handled');
      deepStrictEqual(log, ['start 1', 'end 1', 'start 2', 'end 2']);
      subscription.unsubscribe();
    },
  },
  {
    name: 'unsubscribe stops delivery, and is idempotent',
    async run(make) {
      const bus = await make();
      const session = unique('s');
      const seen: number[] = [];
      const subscription = bus.subscribe({ topics: ['*'], sessionId: session }, (event) => {
        seen.push(event.seq);
      });
      await subscription.ready;
      await bus.publish('agent.step', session, {});
      await eventually(() => seen.length === 1, 'the first event');
      subscription.unsubscribe();
      subscription[Symbol.dispose]();
      await bus.publish('agent.step', session, {});
      await new Promise((resolve) => setTimeout(resolve, 50));
      deepStrictEqual(seen, [1]);
    },
  },
];
