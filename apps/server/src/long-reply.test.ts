// A long model reply through the real server and real WebSockets: its viewers stay connected, every
// agent.* event and agent.history page stays bounded, and the whole text can still be read.
import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectGateway, type GatewayClient } from '@aleph/gateway/client';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startFakeLlm, type FakeLlm } from '../test/fake-llm.js';
import { CLI, runToExit, startServerProcess, type ServerProcess } from '../test/server-process.js';

// 20 MB of text with multi-byte characters and characters JSON escapes: bytes on the wire exceed characters.
const LINE = 'a line of the reply: héllo "quoted" \\ ✓ ';
const TEXT = LINE.repeat(Math.ceil(20_000_000 / LINE.length)).slice(0, 20_000_000);
// Over agent.done's bound, under one streamed piece's: `aleph run` shows it as it streams.
const MEDIUM = `START-OF-REPLY ${LINE.repeat(10_000)}`;

let work: string;
let model: FakeLlm;
let server: ServerProcess;
const clients: GatewayClient[] = [];

beforeAll(async () => {
  work = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-long-reply-')));
  // The first reply is the long text, then a short one should a verifier ask for more.
  model = await startFakeLlm((conversation) => ({
    text: conversation.some((turn) => turn.role === 'assistant')
      ? 'done'
      : conversation.some((turn) => turn.role === 'user' && turn.text === 'medium')
        ? MEDIUM
        : TEXT,
  }));
  model.streamNext({ chunks: 320 }); // about 62 KB an event, as a model streams
  server = await startServerProcess(`
[gateway]
port = 0

[agent]
provider = "openai-compatible"
model = "fake-coder"
base_url = "${model.baseUrl}"
max_iterations = 3
max_reply_kib = 40000

[power]
inhibit_sleep = false
`);
});
afterAll(async () => {
  await Promise.all(clients.map((client) => client.close()));
  await server?.stop();
  rmSync(server?.stateDir ?? '', { recursive: true, force: true });
  await model?.close();
  rmSync(work, { recursive: true, force: true });
});

/** A client that records the largest frame it read and whether the server closed it. */
async function connect(): Promise<
  GatewayClient & { largest: () => number; closedWith: () => number | undefined }
> {
  const client = await connectGateway(server.url, { token: server.token });
  clients.push(client);
  let largest = 0;
  let closedWith: number | undefined;
  client.socket.on('message', (data: Buffer) => (largest = Math.max(largest, data.length)));
  client.socket.on('close', (code: number) => (closedWith = code));
  return Object.assign(client, { largest: () => largest, closedWith: () => closedWith });
}

it('a 20 MB reply: subscribers get a bounded agent.done that says its text was cut, and stay connected', async () => {
  const viewer = await connect();
  await viewer.subscribe(['agent.*']);
  const done = new Promise<Record<string, unknown>>((resolve) =>
    viewer.onEvent((topic, params) => topic === 'agent.done' && resolve(params as Record<string, unknown>)),
  );
  await viewer.request('agent.run', { prompt: 'write a lot', cwd: work });
  const event = await done;
  expect(event['terminateReason']).toEqual({ kind: 'model_stop' });
  const finalText = event['finalText'] as string;
  expect(TEXT.startsWith(finalText)).toBe(true);
  expect(finalText.length).toBeGreaterThan(50_000);
  expect(event['cut']).toEqual([{ pointer: '/finalText', chars: TEXT.length }]);
  expect(viewer.largest()).toBeLessThanOrEqual(256 * 1024 + 1024);
  // Still connected, and answered.
  expect((await viewer.request<unknown[]>('agent.list', {})).length).toBe(1);
  expect(viewer.closedWith()).toBeUndefined();
});

it('agent.history pages stay about 1 MiB, the long event cut; agent.historyEvent reads it whole; the reader stays connected', async () => {
  const reader = await connect();
  const [run] = await reader.request<{ sessionId: string }[]>('agent.list', {});
  type Page = { events: { seq: number; type: string; content?: string; cut?: unknown }[]; next?: number };
  const events: Page['events'] = [];
  for (let from: number | undefined = 0; from !== undefined;) {
    const page: Page = await reader.request<Page>('agent.history', { sessionId: run!.sessionId, from });
    events.push(...page.events);
    from = page.next;
  }
  expect(reader.largest()).toBeLessThanOrEqual(1024 * 1024 + 4096);
  const long = events.find((event) => event.type === 'assistant' && event.cut !== undefined);
  expect(long?.cut).toEqual([{ pointer: '/content', chars: TEXT.length }]);
  expect(TEXT.startsWith(long!.content!)).toBe(true);

  // The whole event, slice by slice.
  type Slice = { seq: number; json: string; from: number; chars: number; next?: number };
  let json = '';
  for (let from: number | undefined = 0; from !== undefined;) {
    const slice: Slice = await reader.request<Slice>('agent.historyEvent', {
      sessionId: run!.sessionId,
      seq: long!.seq,
      from,
    });
    expect(slice.from).toBe(json.length);
    json += slice.json;
    from = slice.next;
  }
  expect((JSON.parse(json) as { content: string }).content).toBe(TEXT);
  expect(reader.largest()).toBeLessThanOrEqual(1024 * 1024 + 4096);
  expect(reader.closedWith()).toBeUndefined();
  await expect(
    reader.request('agent.historyEvent', { sessionId: run!.sessionId, seq: 10_000 }),
  ).rejects.toThrow(`session ${run!.sessionId} has no event 10000`);
});

it('`aleph run` shows a final text that agent.done carries cut once: as it streamed, not again', async () => {
  const result = await runToExit([CLI, 'run', 'medium', '--cwd', work], {
    ALEPH_URL: server.url,
    ALEPH_TOKEN: server.token,
  });
  expect(result.code).toBe(0);
  expect(result.stdout.split('START-OF-REPLY')).toHaveLength(2);
  expect(result.stdout).not.toContain('more characters)');
});
