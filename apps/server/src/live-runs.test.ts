// Live agent runs end to end, through the real server process and a fake provider that streams:
// deltas before the step, token sums in agent.done, a follow-up that continues the session.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectGateway } from '@aleph/gateway/client';
import { afterEach, expect, it } from 'vitest';
import { startFakeLlm, type FakeLlm, type Turn } from '../test/fake-llm.js';
import { CLI, runToExit, startServerProcess, type ServerProcess } from '../test/server-process.js';
import { mergeDeltas } from './server.js';

let server: ServerProcess | undefined;
let llm: FakeLlm | undefined;
let work = '';
afterEach(async () => {
  await server?.stop();
  await llm?.close();
  server = undefined;
  llm = undefined;
  if (work) rmSync(work, { recursive: true, force: true });
});

const config = (baseUrl: string) =>
  `[gateway]\nport = 0\n[power]\ninhibit_sleep = false\n[agent]\nprovider = "openai-compatible"\nmodel = "m"\nbase_url = "${baseUrl}"\n`;

it('a reply streamed in 3 chunks reaches a client as ≥ 3 agent.delta events before the step; tokens sum in agent.done', async () => {
  llm = await startFakeLlm(() => ({ text: 'Streaming works fine.\nVERDICT: PASS' }));
  llm.streamNext({ chunks: 3, delayMs: 10, usage: { input: 40, output: 9, cached: 30 } });
  work = mkdtempSync(join(tmpdir(), 'aleph-live-'));
  server = await startServerProcess(config(llm.baseUrl));
  const client = await connectGateway(server.url, { token: server.token });
  try {
    const seen: { topic: string; data: Record<string, unknown> }[] = [];
    let done!: () => void;
    const finished = new Promise<void>((resolve) => (done = resolve));
    client.onEvent((topic, data) => {
      seen.push({ topic, data: data as Record<string, unknown> });
      if (topic === 'agent.done') done();
    });
    await client.subscribe(['agent.*']);
    const { runId } = await client.request<{ runId: string }>('agent.run', {
      prompt: 'stream it',
      cwd: work,
    });
    await finished;
    const mine = seen.filter((event) => event.data['runId'] === runId);
    const topics = mine.map((event) => event.topic);
    const deltas = mine.filter((event) => event.topic === 'agent.delta');
    expect(deltas.length).toBeGreaterThanOrEqual(3);
    expect(topics.lastIndexOf('agent.delta')).toBeLessThan(topics.indexOf('agent.step'));
    expect(deltas.map((event) => event.data['seq'])).toEqual(deltas.map((_, index) => index));
    expect(deltas.every((event) => event.data['turn'] === 1)).toBe(true);
    const final = mine.find((event) => event.topic === 'agent.done')!.data;
    expect(deltas.map((event) => event.data['text']).join('')).toBe(final['finalText']);
    expect(final['usage']).toEqual({ inputTokens: 40, outputTokens: 9, cachedInputTokens: 30 });
    expect(final['totalTokens']).toBe(49);
    expect((final['turns'] as { firstTokenMs?: number }[])[0]?.firstTokenMs).toBeGreaterThanOrEqual(0);
  } finally {
    await client.close();
  }
});

it('`aleph run --continue` sends the model the previous turns and the new prompt, in one session log', async () => {
  const conversations: (readonly Turn[])[] = [];
  llm = await startFakeLlm((conversation) => {
    conversations.push(conversation);
    const last = conversation.at(-1)?.text ?? '';
    return { text: `You said: ${last}\nVERDICT: PASS` };
  });
  work = mkdtempSync(join(tmpdir(), 'aleph-continue-'));
  server = await startServerProcess(config(llm.baseUrl));
  const env = { ALEPH_URL: server.url, ALEPH_TOKEN: server.token };
  const first = await runToExit([CLI, 'run', 'remember the word apple', '--cwd', work], env);
  expect(first.code).toBe(0);
  expect(first.stdout).toContain('You said: remember the word apple');
  const session = /session ([0-9a-f-]{36})/.exec(first.stdout)?.[1];
  expect(session).toBeDefined();
  const second = await runToExit([CLI, 'run', '--continue', 'which word?', '--cwd', work], env);
  expect(second.code).toBe(0);
  expect(second.stdout).toContain(`session ${session}`);
  const texts = conversations.at(-1)!.map((turn) => `${turn.role}:${turn.text.split('\n')[0]}`);
  expect(texts).toEqual([
    'system:' + conversations.at(-1)![0]!.text.split('\n')[0],
    'user:remember the word apple',
    'assistant:You said: remember the word apple',
    'user:which word?',
  ]);
  // By id, too; an unknown id is a clear error.
  const third = await runToExit([CLI, 'run', '--continue', session!, 'and again?', '--cwd', work], env);
  expect(third.code).toBe(0);
  expect(conversations.at(-1)!.filter((turn) => turn.role === 'user')).toHaveLength(3);
  const unknown = await runToExit([CLI, 'run', '--continue', 'no-such-session', 'x', '--cwd', work], env);
  expect(unknown.code).not.toBe(0);
  expect(unknown.stderr).toBe(
    'aleph run --continue: no agent session no-such-session (`aleph sessions` lists them)\n',
  );
});

it('deltas held for a slow client merge within a turn: text adds on, a replace restates, other turns stay apart', () => {
  const delta = (turn: number, seq: number, kind: 'text' | 'replace', text: string) =>
    ({ runId: 'r', sessionId: 'r', turn, seq, kind, text }) as const;
  expect(mergeDeltas(delta(1, 0, 'text', 'Hel'), delta(1, 1, 'text', 'lo'))).toEqual(
    delta(1, 1, 'text', 'Hello'),
  );
  expect(mergeDeltas(delta(1, 1, 'text', 'Hello'), delta(1, 2, 'replace', 'Hi'))).toEqual(
    delta(1, 2, 'replace', 'Hi'),
  );
  expect(mergeDeltas(delta(1, 2, 'replace', 'Hi'), delta(1, 3, 'text', '!'))).toEqual(
    delta(1, 3, 'replace', 'Hi!'),
  );
  expect(mergeDeltas(delta(1, 3, 'text', 'a'), delta(2, 0, 'text', 'b'))).toBeUndefined();
  expect(
    mergeDeltas({ ...delta(1, 0, 'text', 'a'), runId: 'other' }, delta(1, 1, 'text', 'b')),
  ).toBeUndefined();
});

it('held deltas merge only with their own kind and call, and never past 64 Ki characters', () => {
  const text = (seq: number, value: string) =>
    ({ runId: 'r', sessionId: 'r', turn: 1, seq, kind: 'text', text: value }) as const;
  const args = (seq: number, callId: string, value: string) =>
    ({
      runId: 'r',
      sessionId: 'r',
      turn: 1,
      seq,
      kind: 'tool_args',
      callId,
      name: 'write_file',
      text: value,
    }) as const;
  expect(mergeDeltas(args(0, 'c1', '{"pa'), args(1, 'c1', 'th":'))).toEqual(args(1, 'c1', '{"path":'));
  // A call's argument text is not the reply's text, nor another call's.
  expect(mergeDeltas(text(0, 'Hello'), args(1, 'c1', '{"pa'))).toBeUndefined();
  expect(mergeDeltas(args(0, 'c1', '{"pa'), text(1, 'Hello'))).toBeUndefined();
  expect(mergeDeltas(args(0, 'c1', '{"pa'), args(1, 'c2', '{"pa'))).toBeUndefined();
  // A merged event stays bounded: the piece that would take it past the bound is an event of its own.
  expect(mergeDeltas(text(0, 'a'.repeat(60_000)), text(1, 'b'.repeat(6_000)))).toBeUndefined();
  expect(mergeDeltas(text(0, 'a'.repeat(60_000)), text(1, 'b'.repeat(5_000)))?.text).toHaveLength(65_000);
  // A delta the server cut (its `cut` says how long it was) is not merged into another.
  const excerpt = { ...text(2, 'a'), cut: [{ pointer: '/text', chars: 9_000_000 }] };
  expect(mergeDeltas(excerpt, text(3, 'b'))).toBeUndefined();
  expect(mergeDeltas(text(1, 'b'), excerpt)).toBeUndefined();
});
