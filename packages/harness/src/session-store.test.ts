import { spawn } from 'node:child_process';
import { appendFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  createFileSessionStore,
  estimateTokens,
  HarnessError,
  truncateToFit,
  type Message,
} from './index.js';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'aleph-store-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('file session store', () => {
  it('appends JSON lines in order and reloads them', async () => {
    const store = createFileSessionStore(dir);
    const id = await store.create();
    await Promise.all([
      store.append(id, { type: 'user', content: 'one' }),
      store.append(id, { type: 'feedback', content: 'two' }),
      store.append(id, { type: 'user', content: 'three' }),
    ]);
    await store.flush(id);
    const lines = readFileSync(join(dir, `${id}.jsonl`), 'utf8')
      .trim()
      .split('\n');
    expect(lines.map((line) => JSON.parse(line).seq)).toEqual([0, 1, 2]);
    const reopened = createFileSessionStore(dir);
    const { events, tornTail } = await reopened.load(id);
    expect(tornTail).toBe(false);
    expect(events.map((event) => (event as { content: string }).content)).toEqual(['one', 'two', 'three']);
    expect(await reopened.list()).toEqual([id]);
    await store.close?.();
    await reopened.close?.();
  });

  it('tolerates and reports a torn last line, and appends cleanly after it', async () => {
    const store = createFileSessionStore(dir);
    const id = await store.create();
    await store.append(id, { type: 'user', content: 'kept' });
    await store.close?.();
    appendFileSync(join(dir, `${id}.jsonl`), '{"type":"user","content":"cut sh');
    const reopened = createFileSessionStore(dir);
    expect(await reopened.load(id)).toMatchObject({ tornTail: true, events: [{ content: 'kept' }] });
    await reopened.append(id, { type: 'user', content: 'after' });
    await reopened.flush(id);
    expect(await reopened.load(id)).toMatchObject({
      tornTail: false,
      events: [
        { content: 'kept', seq: 0 },
        { content: 'after', seq: 1 },
      ],
    });
    await reopened.close?.();
  });

  it('a corrupt line in the middle is an error, not silently skipped', async () => {
    const store = createFileSessionStore(dir);
    const id = await store.create();
    await store.close?.();
    appendFileSync(join(dir, `${id}.jsonl`), 'garbage\n{"type":"user","content":"x","seq":1,"at":0}\n');
    await expect(createFileSessionStore(dir).load(id)).rejects.toThrow(HarnessError);
  });

  it('rejects a session id that could escape the directory', async () => {
    await expect(createFileSessionStore(dir).load('../../etc/passwd')).rejects.toThrow(/invalid session id/);
  });

  it('a process SIGKILLed mid-run loses nothing it acknowledged', async () => {
    const entry = resolve(import.meta.dirname, '../dist/index.js');
    const testing = resolve(import.meta.dirname, '../dist/testing.js');
    // A run that works forever and prints "ack <seq>" once each turn boundary is flushed.
    const script = `
      const { AgentHarness, createFileSessionStore } = await import(${JSON.stringify(entry)});
      const { ScriptedProvider, callTool } = await import(${JSON.stringify(testing)});
      const { z } = await import('zod');
      const tool = { name: 'work', description: 'w', input: z.object({ n: z.number() }), claim: () => ({ kind: 'none' }),
        execute: async ({ n }) => ({ output: 'done ' + n + ' ' + 'x'.repeat(2000) }) };
      let n = 0;
      let lastStep;
      const provider = new ScriptedProvider([() => callTool('work', { n: n++ })], { repeatLast: true });
      const harness = new AgentHarness({ provider, tools: [tool], sessions: createFileSessionStore(${JSON.stringify(dir)}), maxIterations: 1e9 });
      await harness.run({ prompt: 'work forever' }, {
        onEvent: (event) => { if (event.type === 'turn_step') lastStep = event; },
        onStep: () => process.stdout.write('ack ' + JSON.stringify({ seq: lastStep.seq }) + '\\n'),
      });
    `;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
      cwd: resolve(import.meta.dirname, '..'),
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let acked = -1;
    let buffer = '';
    await new Promise<void>((done) => {
      child.stdout.on('data', (chunk: Buffer) => {
        buffer += chunk.toString();
        for (const match of buffer.matchAll(/ack (\{.*\})\n/g))
          acked = Math.max(acked, JSON.parse(match[1]!).seq);
        if (acked >= 40) {
          child.kill('SIGKILL');
          done();
        }
      });
    });
    await new Promise((r) => child.once('exit', r));
    const store = createFileSessionStore(dir);
    const [id] = await store.list();
    const { events } = await store.load(id!);
    const seqs = events.map((event) => event.seq);
    expect(seqs.slice(0, acked + 1)).toEqual(Array.from({ length: acked + 1 }, (_, i) => i));
    expect(events.filter((event) => event.type === 'turn_step').length).toBeGreaterThanOrEqual(1);
  });
});

describe('truncateToFit', () => {
  const message = fc.oneof(
    fc.record({ role: fc.constant('user' as const), content: fc.string({ maxLength: 3000 }) }),
    fc.record({ role: fc.constant('assistant' as const), content: fc.string({ maxLength: 3000 }) }),
  );
  it('property: whatever the history, the result fits and keeps the task first', () => {
    fc.assert(
      fc.property(
        fc.string({ minLength: 1, maxLength: 5000 }),
        fc.array(message, { maxLength: 40 }),
        fc.integer({ min: 100, max: 5000 }),
        (task, rest, maxTokens) => {
          const messages: Message[] = [{ role: 'user', content: task }, ...rest];
          const fitted = truncateToFit(messages, maxTokens);
          expect(estimateTokens(fitted)).toBeLessThanOrEqual(maxTokens);
          expect(fitted[0]?.content.slice(0, 8)).toBe(task.slice(0, 8));
          // Deterministic: the same input gives the same output.
          expect(truncateToFit(messages, maxTokens)).toEqual(fitted);
        },
      ),
    );
  });
});
