import { execFileSync, spawn } from 'node:child_process';
import {
  appendFileSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { VerifierChain, type TurnVerifier, type TurnVerifyContext } from '@aleph/verification';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  AgentHarness,
  createFileSessionStore,
  estimateTokens,
  truncateToFit,
  Orchestrator,
  type Message,
  type Tool,
} from './index.js';
import { callTool, ScriptedProvider, stop } from './testing.js';

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

  it('keeps its folder and logs private (0700, 0600) whatever the umask: they hold prompts and tool output', async () => {
    const previous = process.umask(0o022);
    try {
      const folder = join(dir, 'state', 'sessions');
      const store = createFileSessionStore(folder);
      const id = await store.create();
      await store.append(id, { type: 'user', content: 'secret prompt' });
      await store.flush(id);
      expect(statSync(folder).mode & 0o777).toBe(0o700);
      const files = readdirSync(folder);
      expect(files.sort()).toEqual([`${id}.jsonl`, `${id}.transcript.jsonl`].sort());
      for (const file of files) expect(statSync(join(folder, file)).mode & 0o777).toBe(0o600);
      await store.close?.();
    } finally {
      process.umask(previous);
    }
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

  it('a corrupt or non-object line in the middle is skipped and reported by line number, never fatal', async () => {
    const store = createFileSessionStore(dir);
    const id = await store.create();
    await store.append(id, { type: 'user', content: 'first' });
    await store.end?.(id);
    appendFileSync(
      join(dir, `${id}.jsonl`),
      'garbage\nnull\n5\n"text"\n[1]\n{"no":"type"}\n{"type":"user","content":"x","seq":1,"at":0}\n',
    );
    const loaded = await createFileSessionStore(dir).load(id);
    expect(loaded.events.map((event) => (event as { content: string }).content)).toEqual(['first', 'x']);
    expect(loaded.events).not.toContain(null);
    expect(loaded).toMatchObject({ tornTail: false, corruptLines: [2, 3, 4, 5, 6, 7] });
  });

  // One run's replies and tool results, escaped as JSON, reach a GB of log: past the longest string
  // V8 makes, such a log cannot be read as one. The other sessions are still listed.
  it('lists the other runs when one log cannot be read (past the longest string), naming it unreadable', async () => {
    const store = createFileSessionStore(dir);
    const ended = await store.create();
    await store.append(ended, { type: 'user', content: 'finished task', cwd: '/work/p' });
    await store.append(ended, { type: 'terminate', reason: { kind: 'model_stop' } });
    await store.end?.(ended);
    const huge = join(dir, 'huge-session.jsonl');
    writeFileSync(huge, '');
    truncateSync(huge, 0x20000000 + 1024); // sparse: no disk used
    const byId = new Map((await createFileSessionStore(dir).summaries!()).map((s) => [s.sessionId, s]));
    expect(byId.get(ended)).toMatchObject({ state: 'ended', prompt: 'finished task' });
    expect(byId.get('huge-session')).toEqual({
      sessionId: 'huge-session',
      state: 'ended',
      terminateReason: { kind: 'interrupted' },
      unreadable: expect.stringMatching(/could not read session huge-session/),
    });
  });

  it('lists runs from disk after a crash: a log with no terminate is interrupted; corrupt lines are reported', async () => {
    const store = createFileSessionStore(dir);
    const ended = await store.create();
    await store.append(ended, { type: 'user', content: 'finished task', cwd: '/work/p' });
    await store.append(ended, { type: 'terminate', reason: { kind: 'model_stop' } });
    const crashed = await store.create();
    await store.append(crashed, { type: 'user', content: 'crashed task' });
    await store.append(crashed, { type: 'assistant', content: '', toolCalls: [] });
    // A resumed session whose second run crashed is interrupted too, despite the first run's end.
    const resumed = await store.create();
    await store.append(resumed, { type: 'user', content: 'one' });
    await store.append(resumed, { type: 'terminate', reason: { kind: 'model_stop' } });
    await store.append(resumed, { type: 'user', content: 'two' });
    await store.flush(crashed);
    expect((await store.summaries!()).find((s) => s.sessionId === crashed)?.state).toBe('running');
    // The server was SIGKILLed: nothing was closed. A new server reads the same folder.
    appendFileSync(
      join(dir, `${crashed}.jsonl`),
      '{oops\n{"type":"feedback","content":"late","seq":9,"at":1}\n',
    );
    const restarted = createFileSessionStore(dir);
    const byId = new Map((await restarted.summaries!()).map((summary) => [summary.sessionId, summary]));
    const empty = await store.create(); // created, then the server died before the prompt was logged
    expect(byId.size).toBe(3);
    expect((await createFileSessionStore(dir).summaries!()).find((s) => s.sessionId === empty)).toMatchObject(
      {
        state: 'ended',
        terminateReason: { kind: 'interrupted' },
      },
    );
    expect(byId.get(ended)).toMatchObject({
      state: 'ended',
      terminateReason: { kind: 'model_stop' },
      prompt: 'finished task',
      cwd: '/work/p',
    });
    expect(byId.get(crashed)).toMatchObject({
      state: 'ended',
      terminateReason: { kind: 'interrupted' },
      prompt: 'crashed task',
      corruptLines: [3],
    });
    expect(byId.get(resumed)).toMatchObject({ terminateReason: { kind: 'interrupted' }, prompt: 'one' });
    await store.close?.();
  });

  it(
    'lists thousands of sessions under a low open-file limit (reads a few logs at a time)',
    { timeout: 120_000 },
    () => {
      for (let index = 0; index < 2000; index += 1) {
        const id = `s${index}`;
        writeFileSync(join(dir, `${id}.jsonl`), `{"type":"user","content":"task ${index}","seq":0,"at":0}\n`);
      }
      const entry = resolve(import.meta.dirname, '../dist/index.js');
      const script = `const { createFileSessionStore } = await import(${JSON.stringify(entry)});
      const summaries = await createFileSessionStore(${JSON.stringify(dir)}).summaries();
      console.log(summaries.filter((s) => s.terminateReason?.kind === 'interrupted').length);`;
      const output = execFileSync(
        'sh',
        ['-c', 'ulimit -n 256 && exec "$0" --input-type=module -e "$1"', process.execPath, script],
        {
          cwd: resolve(import.meta.dirname, '..'),
          encoding: 'utf8',
        },
      );
      expect(output.trim()).toBe('2000');
    },
  );

  it('holds no file handle once a run has ended: 50 runs, no leak', async () => {
    const fds = () => readdirSync('/proc/self/fd').length;
    const store = createFileSessionStore(dir);
    const run = () =>
      new AgentHarness({ provider: new ScriptedProvider([stop()]), tools: [], sessions: store }).run({
        prompt: 'x',
      });
    await run(); // warm up whatever the runtime opens once
    const before = fds();
    for (let index = 0; index < 50; index += 1) await run();
    expect(fds() - before).toBeLessThan(5);
    expect(await store.list()).toHaveLength(51);
    await store.close?.();
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

describe('Claude Code transcript', () => {
  const jq = (filter: string, file: string, slurp = false) =>
    execFileSync('jq', [...(slurp ? ['-s'] : []), '-r', filter, file], { encoding: 'utf8' });

  it("names Aleph's tools as Claude Code does, so a hook's jq finds `Bash` commands and `Write` paths", async () => {
    const store = createFileSessionStore(dir);
    const tool = (name: string): Tool<Record<string, unknown>> => ({
      name,
      description: name,
      input: z.record(z.string(), z.unknown()),
      execute: () => Promise.resolve({ output: 'ok' }),
    });
    const provider = new ScriptedProvider([
      callTool('shell', { command: 'python3 -m pytest -q' }),
      callTool('write_file', { path: 'src/a.py', content: 'x = 1\n' }),
      stop('Done.'),
    ]);
    const harness = new AgentHarness({
      provider,
      tools: [tool('shell'), tool('write_file')],
      sessions: store,
    });
    const result = await harness.run({ prompt: 'test it', cwd: '/work/project' });
    const file = store.transcriptPath!(result.sessionId)!;
    const uses = 'select(.type=="assistant") | .message.content[] | select(.type=="tool_use")';
    expect(jq(`${uses} | select(.name=="Bash") | .input.command`, file)).toBe('python3 -m pytest -q\n');
    expect(jq(`${uses} | select(.name=="Write") | .input.file_path`, file)).toBe('/work/project/src/a.py\n');
    await store.close?.();
  });

  it('is written beside the log as the run goes, in the shapes hooks read with jq', async () => {
    const store = createFileSessionStore(dir);
    const echo: Tool<{ text: string }> = {
      name: 'echo',
      description: 'echo',
      input: z.object({ text: z.string() }),
      execute: ({ text }) => Promise.resolve({ output: text }),
    };
    const sizes: number[] = [];
    let path = '';
    const provider = new ScriptedProvider([
      callTool('echo', { text: 'hi' }, 'Let me echo.'),
      stop('All good.\nVERDICT: PASS'),
    ]);
    const harness = new AgentHarness({ provider, tools: [echo], sessions: store });
    const result = await harness.run(
      { prompt: 'say hi', cwd: '/work/project' },
      {
        onEvent: () => {
          path ||= [...readdirSync(dir)].find((name) => name.endsWith('.transcript.jsonl')) ?? '';
          sizes.push(readFileSync(join(dir, path), 'utf8').split('\n').length - 1);
        },
      },
    );
    const file = store.transcriptPath!(result.sessionId)!;
    expect(file).toBe(join(dir, `${result.sessionId}.transcript.jsonl`));
    // Appended event by event: the line is there when the event is reported.
    expect(sizes.slice(0, 5)).toEqual([1, 2, 3, 3, 4]); // a turn_step has no line
    const lines = readFileSync(file, 'utf8')
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(lines.map((line) => [line.type, line.message.role])).toEqual([
      ['user', 'user'],
      ['assistant', 'assistant'],
      ['user', 'user'],
      ['assistant', 'assistant'],
    ]);
    expect(lines[1].message.content).toEqual([
      { type: 'text', text: 'Let me echo.' },
      { type: 'tool_use', id: expect.any(String), name: 'echo', input: { text: 'hi' } },
    ]);
    expect(lines[2].message.content).toEqual([
      { type: 'tool_result', tool_use_id: lines[1].message.content[1].id, content: 'hi', is_error: false },
    ]);
    lines.forEach((line, index) => {
      expect(line).toMatchObject({ sessionId: result.sessionId, cwd: '/work/project' });
      expect(line.uuid).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-a[0-9a-f]{3}-[0-9a-f]{12}$/);
      expect(line.parentUuid).toBe(index === 0 ? null : lines[index - 1].uuid);
      expect(new Date(line.timestamp).toISOString()).toBe(line.timestamp);
    });
    expect(jq('.message.content[] | select(.type=="text") | .text', file)).toBe(
      'say hi\nLet me echo.\nAll good.\nVERDICT: PASS\n',
    );
    expect(
      jq(
        '[.[] | select(.type=="assistant")] | last | .message.content[] | select(.type=="text") | .text',
        file,
        true,
      ),
    ).toBe('All good.\nVERDICT: PASS\n');
    expect(
      execFileSync('sh', ['-c', `tail -n 1 "$1" | jq -r '.message.content[0].text'`, 'sh', file], {
        encoding: 'utf8',
      }),
    ).toBe('All good.\nVERDICT: PASS\n');

    // Resumed by another store (a restarted server) after a crash tore the transcript's last line:
    // the torn part is cut, the rest is appended to, not rewritten, and the chain goes on.
    await store.close?.();
    const before = readFileSync(file, 'utf8');
    appendFileSync(file, '{"type":"assistant","mess');
    const reopened = createFileSessionStore(dir);
    await new AgentHarness({
      provider: new ScriptedProvider([stop('again')]),
      tools: [],
      sessions: reopened,
    }).run({
      prompt: 'once more',
      sessionId: result.sessionId,
    });
    const after = readFileSync(file, 'utf8');
    expect(after.startsWith(before)).toBe(true);
    const next = JSON.parse(after.slice(before.length).split('\n')[0]!);
    expect(next).toMatchObject({ type: 'user', parentUuid: lines.at(-1).uuid, cwd: '/work/project' });
    expect(jq('.type', file).trim().split('\n')).toHaveLength(lines.length + 2); // every line parses
    await reopened.close?.();
  });
});

describe('what verifiers are told', () => {
  it('projectDir, transcriptPath and permissionMode; the transcript already holds the reply being judged', async () => {
    const store = createFileSessionStore(dir);
    const seen: { ctx: TurnVerifyContext; lastAssistant: string }[] = [];
    const recorder: TurnVerifier = {
      name: 'recorder',
      verify: (ctx) => {
        const last = execFileSync(
          'jq',
          [
            '-rs',
            '[.[] | select(.type=="assistant")] | last | .message.content[0].text',
            ctx.transcriptPath!,
          ],
          { encoding: 'utf8' },
        );
        seen.push({ ctx, lastAssistant: last.trim() });
        return Promise.resolve({ kind: 'continue' });
      },
    };
    const parentProvider = new ScriptedProvider([
      callTool('spawn_agent', { prompt: 'sub task' }),
      stop('parent done'),
    ]);
    const childProvider = new ScriptedProvider([stop('child done')]);
    const orchestrator: Orchestrator = new Orchestrator({
      depsFor: (flow) => ({
        provider: flow.parentSessionId ? childProvider : parentProvider,
        tools: [orchestrator.spawnAgentTool()],
        sessions: store,
        verifier: VerifierChain.builder().with(recorder).build(),
      }),
    });
    const result = await orchestrator.dispatch({ prompt: 'delegate', cwd: '/work/project' });
    expect(result.terminateReason).toEqual({ kind: 'model_stop' });
    expect(seen.map(({ ctx }) => ctx.projectDir)).toEqual([
      '/work/project',
      '/work/project',
      '/work/project',
    ]);
    expect(seen.map(({ ctx }) => ctx.permissionMode)).toEqual(Array(3).fill('bypassPermissions'));
    const last = seen.at(-1)!;
    expect(last.ctx.transcriptPath).toBe(join(dir, `${result.sessionId}.transcript.jsonl`));
    expect(last.lastAssistant).toBe('parent done');
    expect(seen[1]!.lastAssistant).toBe('child done'); // the sub-agent has a transcript of its own
    expect(seen[1]!.ctx.transcriptPath).not.toBe(last.ctx.transcriptPath);
    await store.close?.();
  });
});
