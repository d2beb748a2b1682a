// End to end: a provider whose replies are never the model's explicit stop (a
// `tool_calls` finish with no calls, no finish reason, an empty `stop`) used to end `aleph run` as
// "done: the model stopped", exit 0, so `aleph run … && deploy` went on. Now each such reply is told
// to the model, and a streak of them ends the run by the failure watchdog: exit 1, the cause named.
import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlm, type FakeLlm, type Reply } from '../test/fake-llm.js';
import { CLI, runToExit, startServerProcess, type ServerProcess } from '../test/server-process.js';

let llm: FakeLlm;
let server: ServerProcess;
let project: string;
const replies: Reply[] = [];

beforeAll(async () => {
  llm = await startFakeLlm(() => replies.shift() ?? { text: '', raw: 'stop' });
  project = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-not-a-stop-')));
  server = await startServerProcess(
    `[gateway]\nport = 0\n\n[agent]\nprovider = "openai-compatible"\nmodel = "fake-coder"\nbase_url = "${llm.baseUrl}"\nmax_iterations = 8\n\n[power]\ninhibit_sleep = false\n`,
    { CLAUDE_CONFIG_DIR: project },
  );
});
afterAll(async () => {
  await server?.stop();
  if (server) rmSync(server.stateDir, { recursive: true, force: true });
  await llm.close();
  rmSync(project, { recursive: true, force: true });
});

const run = (...script: Reply[]) => {
  replies.splice(0, replies.length, ...script); // then empty stops, for as long as it is asked
  return runToExit([CLI, 'run', 'do the task', '--cwd', project], {
    ALEPH_URL: server.url,
    ALEPH_TOKEN: server.token,
  });
};

describe('aleph run: only the model explicit stop is "done"', () => {
  it('replies that are not a stop end the run with exit 1 and the cause, never "the model stopped"', async () => {
    const result = await run({ text: '', raw: 'tool_calls' }, { text: 'thinking…', raw: null });
    if (process.env['ALEPH_PRINT_TRANSCRIPT']) console.log(result.stdout);
    expect(result.code).toBe(1);
    expect(result.stdout).toContain(
      'turn 1: the reply ended for tool calls (finish reason "tool_calls") but had none; not a stop, the model was told to go on',
    );
    expect(result.stdout).toMatch(
      /ended: 3 turns in a row failed; last: the reply was empty: no text and no tool calls \(3 turns, /,
    );
    expect(result.stdout).not.toContain('the model stopped');
  });

  it('an explicit stop after an empty one is done, exit 0', async () => {
    const result = await run({ text: '', raw: 'stop' }, { text: 'All done.\nVERDICT: PASS', raw: 'stop' });
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/done: the model stopped \(2 turns, /);
  });
});
