// agent.history in bounded pages with a cursor (a 20 MiB log never goes out as one frame), and
// agent.list never answering [] while a restarted server is still reading its store.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectGateway, type GatewayClient } from '@aleph/gateway/client';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { MAIN } from '../test/server-process.js';

let root: string;
let store: string;
const clients: GatewayClient[] = [];
const SESSIONS = 150; // under agent.list's cap of 200 earlier runs
const BIG = 'big-session';
const BIG_EVENTS = 2_000;

function log(events: object[]): string {
  return (
    events.map((event, seq) => JSON.stringify({ ...event, seq, at: 1_700_000_000_000 + seq })).join('\n') +
    '\n'
  );
}

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'aleph-history-'));
  store = join(root, 'sessions');
  mkdirSync(store);
  const ended = (prompt: string, middle: object[] = []) =>
    log([
      { type: 'user', content: prompt, cwd: root },
      ...middle,
      { type: 'terminate', reason: { kind: 'model_stop' } },
    ]);
  for (let index = 0; index < SESSIONS; index += 1)
    writeFileSync(join(store, `s${index}.jsonl`), ended(`task ${index}`));
  // About 10 MiB: 2,000 tool results of 5 KiB each, far over one frame's budget.
  const output = 'x'.repeat(5 * 1024);
  const middle = Array.from({ length: BIG_EVENTS - 2 }, (_, index) => ({
    type: 'tool_result',
    callId: `c${index}`,
    name: 'shell',
    output,
    isError: false,
  }));
  writeFileSync(join(store, `${BIG}.jsonl`), ended('big', middle));
});
afterAll(async () => {
  await Promise.all(clients.map((client) => client.close()));
  rmSync(root, { recursive: true, force: true });
});

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((listening) => server.listen(0, '127.0.0.1', listening));
  const { port } = server.address() as { port: number };
  await new Promise((closed) => server.close(closed));
  return port;
}

it(
  'agent.list during the store reload waits for it; agent.history pages a 10 MiB log by cursor',
  { timeout: 120_000 },
  async () => {
    const port = await freePort();
    const token = 'history-test-token-0123456789';
    const state = join(root, 'state');
    writeFileSync(
      join(root, 'aleph.toml'),
      `[gateway]\nport = ${port}\ntoken = "${token}"\n[store]\ndir = "${store}"\n[power]\ninhibit_sleep = false\n`,
    );
    const server = spawn(process.execPath, [MAIN, '--config', join(root, 'aleph.toml')], {
      env: { ...process.env, ALEPH_STATE_DIR: state, ALEPH_LOG_LEVEL: 'warn' },
      stdio: 'ignore',
    });
    const exited = new Promise((done) => server.once('exit', done));
    try {
      // Connect the moment the port answers: the store may still be loading.
      let client: GatewayClient | undefined;
      while (client === undefined) {
        client = await connectGateway(`ws://127.0.0.1:${port}/ws`, { token }).catch(() => undefined);
        if (client === undefined) await new Promise((wait) => setTimeout(wait, 5));
      }
      clients.push(client);
      const runs = await client.request<{ sessionId: string; state: string }[]>('agent.list', {});
      expect(runs).toHaveLength(SESSIONS + 1);

      // Pages: bounded (1000 events, about 1 MiB), in order, the cursor leads to the end.
      const seen: number[] = [];
      let from: number | undefined = 0;
      let pages = 0;
      while (from !== undefined) {
        const page: { events: { seq: number }[]; next?: number } = await client.request('agent.history', {
          sessionId: BIG,
          from,
        });
        expect(JSON.stringify(page).length).toBeLessThan(1.1 * 1024 * 1024);
        seen.push(...page.events.map((event) => event.seq));
        from = page.next;
        pages += 1;
      }
      expect(seen).toEqual(Array.from({ length: BIG_EVENTS }, (_, seq) => seq));
      expect(pages).toBeGreaterThan(8);
      // A small log is one page, as before (no cursor); `limit` bounds a page by count.
      const small = await client.request<{ events: unknown[]; next?: number }>('agent.history', {
        sessionId: 's1',
      });
      expect(small.events).toHaveLength(2);
      expect(small.next).toBeUndefined();
      const limited = await client.request<{ events: { seq: number }[]; next?: number }>('agent.history', {
        sessionId: 's1',
        limit: 1,
      });
      expect([limited.events.map((event) => event.seq), limited.next]).toEqual([[0], 1]);
      // Bad input: a stable error naming the field.
      for (const params of [
        { sessionId: BIG, from: -1 },
        { sessionId: BIG, from: 1.5 },
        { sessionId: BIG, limit: 0 },
        { sessionId: BIG, limit: 100_000 },
        { sessionId: BIG, cursor: 'x' },
      ]) {
        await expect(client.request('agent.history', params)).rejects.toMatchObject({
          code: 'invalid_params',
        });
      }
      // The connection is still there after all of it.
      expect(await client.request<unknown[]>('agent.list', {})).toHaveLength(SESSIONS + 1);
    } finally {
      server.kill('SIGTERM');
      await exited;
    }
  },
);
