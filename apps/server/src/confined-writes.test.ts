// Files the model may have written: a run's window over its cwd, remembered across restarts, and the
// server refusing an aleph.toml a run's command wrote (a real server, real bubblewrap, a fake model
// speaking OpenAI's wire) until the user touches it.
import { spawnSync } from 'node:child_process';
import {
  appendFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectGateway } from '@aleph/gateway/client';
import { createSandbox } from '@aleph/sandbox';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlm, type Brain, type FakeLlm } from '../test/fake-llm.js';
import { MAIN, runToExit, startServerProcess } from '../test/server-process.js';
import { ConfinedWrites, distrustedConfig, entriesUnder, keptFrom } from './confined-writes.js';

const root = mkdtempSync(join(tmpdir(), 'aleph-confined-writes-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function folders(name: string): { state: string; project: string; sub: string; sibling: string } {
  const base = join(root, name);
  const [state, project, sibling] = ['state', 'project', 'sibling'].map((part) => join(base, part));
  const sub = join(project!, 'sub');
  for (const dir of [state!, sub, sibling!]) mkdirSync(dir, { recursive: true });
  return { state: state!, project: project!, sub, sibling: sibling! };
}

describe('ConfinedWrites', () => {
  it('names the run during which a file under its cwd changed, and nothing for a file elsewhere', () => {
    const { state, project, sub, sibling } = folders('window');
    const writes = new ConfinedWrites(state);
    const end = writes.begin('run-1', project);
    writeFileSync(join(sub, 'settings.json'), '{}');
    writeFileSync(join(sibling, 'settings.json'), '{}');
    end();
    expect(writes.changedDuringRun(join(sub, 'settings.json'))).toMatchObject({
      runId: 'run-1',
      cwd: project,
    });
    expect(writes.changedDuringRun(join(sibling, 'settings.json'))).toBeUndefined();
    expect(writes.changedDuringRun(join(sub, 'missing.json'))).toBeUndefined();
  });

  it("shares its entries with other nodes and takes theirs: another node's run is open until any node ends it", () => {
    const { state, project, sub } = folders('nodes');
    const shared: object[] = [];
    // An earlier process of this node left a run open: its end goes to the others once shared.
    writeFileSync(
      join(state, 'confined-writes.jsonl'),
      `${JSON.stringify({ run: 'stale', cwd: project, from: 1 })}\n`,
    );
    const here = new ConfinedWrites(state);
    here.share((entry) => shared.push(entry));
    expect(shared).toEqual([{ run: 'stale', to: expect.any(Number) }]);
    here.begin('local', sub)();
    expect(shared.slice(1)).toEqual([
      {
        run: 'local',
        cwd: sub,
        from: expect.any(Number),
        cwdChanged: expect.any(Number),
        cwdId: expect.any(String),
      },
      { run: 'local', to: expect.any(Number) },
    ]);
    // A run of node n1 started an hour ago and has not ended: what changes now is distrusted.
    const { state: other } = folders('nodes-other');
    const there = new ConfinedWrites(other, () => Date.now() + 3_600_000);
    there.absorb({ run: 'r1', cwd: project, from: Date.now() - 3_600_000 }, 'n1');
    there.absorb('not an entry', 'n1');
    writeFileSync(join(sub, 'settings.json'), '{}');
    expect(there.changedDuringRun(join(sub, 'settings.json'))).toMatchObject({ runId: 'r1', cwd: project });
    // Node n2 took the run over and ended it a moment ago: the window ends there.
    there.absorb({ run: 'r1', to: Date.now() - 60_000 }, 'n2');
    expect(there.changedDuringRun(join(sub, 'settings.json'))).toBeUndefined();
  });

  it("a run's cwd renamed or moved since keeps its window: a file under it is judged by the folder's identity", () => {
    const { state, project, sub } = folders('renamed');
    const writes = new ConfinedWrites(state);
    const end = writes.begin('run-r', project);
    writeFileSync(join(sub, 'settings.json'), '{}');
    end();
    const renamed = `${project}-renamed`;
    renameSync(project, renamed);
    expect(writes.changedDuringRun(join(renamed, 'sub', 'settings.json'))).toMatchObject({
      runId: 'run-r',
      cwd: project,
      path: join(renamed, 'sub', 'settings.json'),
    });
    // And after a restart, from the state dir.
    expect(new ConfinedWrites(state).changedDuringRun(join(renamed, 'sub', 'settings.json'))).toMatchObject({
      runId: 'run-r',
    });
  });

  it('the remedy a user pastes touches the file the model named, and runs nothing the name holds', () => {
    const { state, project } = folders('remedy');
    const folder = join(project, "$(touch ran)`touch ran2`;touch ran3 'x'");
    mkdirSync(folder);
    const writes = new ConfinedWrites(state);
    const end = writes.begin('run-remedy', project);
    writeFileSync(join(folder, 'aleph.toml'), '');
    end();
    utimesSync(join(folder, 'aleph.toml'), new Date(0), new Date(0));
    const reason = distrustedConfig(writes, join(folder, 'aleph.toml'))!;
    const remedy = /if it is yours, `(.+)` and start again\.$/.exec(reason)?.[1];
    expect(remedy, reason).toMatch(/^touch /);
    const shell = spawnSync('sh', ['-c', remedy!], { cwd: project, encoding: 'utf8' });
    expect(shell.status, shell.stderr).toBe(0);
    for (const name of ['ran', 'ran2', 'ran3']) expect(existsSync(join(project, name))).toBe(false);
    // The file itself was touched.
    expect(statSync(join(folder, 'aleph.toml')).mtimeMs).toBeGreaterThan(0);
  });

  it('a file changed before the run is not its (a change time the model cannot set back)', () => {
    const { state, project } = folders('before');
    writeFileSync(join(project, 'aleph.toml'), '');
    utimesSync(join(project, 'aleph.toml'), new Date(), new Date(Date.now() + 60_000)); // mtime, not ctime
    // The run starts a minute later than the file's change, as seen by its clock.
    const writes = new ConfinedWrites(state, () => Date.now() + 60_000);
    writes.begin('run-later', project)();
    expect(writes.changedDuringRun(join(project, 'aleph.toml'))).toBeUndefined();
  });

  it("a link out of a run's cwd to a file changed during it counts as that file", () => {
    const { state, project, sibling } = folders('links');
    const writes = new ConfinedWrites(state);
    const end = writes.begin('run-links', project);
    writeFileSync(join(project, 'target.toml'), '');
    end();
    symlinkSync(join(project, 'target.toml'), join(sibling, 'aleph.toml'));
    expect(writes.changedDuringRun(join(sibling, 'aleph.toml'))?.runId).toBe('run-links');
  });

  it('remembers the windows after a restart, and ends one a killed process left open at the next start', () => {
    const { state, project, sub } = folders('restart');
    const first = new ConfinedWrites(state);
    first.begin('ended', project)();
    first.begin('left-open', join(project, 'sub')); // never ended: the process was killed
    writeFileSync(join(sub, 'late.json'), '{}');
    appendFileSync(join(state, 'confined-writes.jsonl'), '{"run":"torn","cw'); // a torn last line
    const second = new ConfinedWrites(state);
    expect(second.changedDuringRun(join(sub, 'late.json'))?.runId).toMatch(/^(ended|left-open)$/);
    const lines = readFileSync(join(state, 'confined-writes.jsonl'), 'utf8').trim().split('\n');
    expect(
      lines.map((line) => JSON.parse(line) as { run: string }).filter((entry) => entry.run === 'left-open'),
    ).toHaveLength(2);
  });

  it('a window whose start could not be written is written with the next entry, which a restart remembers', () => {
    const { state, project, sub } = folders('lost-line');
    const elsewhere = join(state, '..', 'elsewhere');
    mkdirSync(elsewhere);
    const writes = new ConfinedWrites(state);
    const file = join(state, 'confined-writes.jsonl');
    mkdirSync(file); // the file cannot be written now (EISDIR): the next start line is lost
    const end = writes.begin('unrecorded', project);
    rmSync(file, { recursive: true });
    writeFileSync(join(sub, 'during.json'), '{}');
    writes.begin('other', elsewhere)(); // the file can be written again
    // A restart while the run is still open (the process killed): its window is known.
    expect(new ConfinedWrites(state).changedDuringRun(join(sub, 'during.json'))?.runId).toBe('unrecorded');
    end();
  });

  it('a state dir removed while the server runs is made again for the next window, which a restart remembers', () => {
    const { state, project, sub } = folders('state-removed');
    const writes = new ConfinedWrites(state);
    rmSync(state, { recursive: true });
    const end = writes.begin('after-removal', project);
    writeFileSync(join(sub, 'later.json'), '{}');
    end();
    expect(new ConfinedWrites(state).changedDuringRun(join(sub, 'later.json'))?.runId).toBe('after-removal');
  });
});

// A rename changes the moved folder's change time only, not its contents': a file a run wrote in its
// folder, then moved by a later run above it into another, counts as changed; the user's touch ends
// that, and a run that only adds a file beside the user's own hooks (never written in a run) does not.
describe('a file moved into place', () => {
  it('counts when it changed during a run and a run above moved it; not when unmoved, touched, changed during a run elsewhere, or its folder only gained a file', async () => {
    const sleep = (ms: number) => new Promise((resolveSleep) => setTimeout(resolveSleep, ms));
    const [moved, hidden, still, mono, busy] = ['moved', 'hidden', 'still', 'mono', 'busy'].map((name) => {
      const state = join(root, 'moved-into-place', name, 'state');
      mkdirSync(state, { recursive: true });
      return { state, p: join(root, 'moved-into-place', name, 'p'), writes: new ConfinedWrites(state) };
    }) as [Case, Case, Case, Case, Case];
    type Case = { state: string; p: string; writes: ConfinedWrites };
    const hooks = (p: string, folder = 'c'): [string, string] => [
      join(p, folder, '.claude'),
      join(p, folder, '.claude', 'settings.json'),
    ];
    // The user's own hooks in a monorepo's project, written before any run.
    const [monoClaude, monoHooks] = hooks(mono.p, 'proj');
    mkdirSync(monoClaude, { recursive: true });
    writeFileSync(monoHooks, '{}');
    // A run in p/a writes p/a/b/.claude/settings.json, and one in p moves a/b to c.
    const plant = (each: Case): void => {
      mkdirSync(join(each.p, 'a', 'b', '.claude'), { recursive: true });
      const endWrite = each.writes.begin('writes', join(each.p, 'a'));
      writeFileSync(join(each.p, 'a', 'b', '.claude', 'settings.json'), '{}');
      endWrite();
    };
    const move = (each: Case): void => {
      const endMove = each.writes.begin('moves', each.p);
      renameSync(join(each.p, 'a', 'b'), join(each.p, 'c'));
      endMove();
    };
    plant(moved);
    plant(hidden);
    // The user writes p/c/.claude/settings.json while a run in p/a lasts.
    mkdirSync(join(still.p, 'a'), { recursive: true });
    mkdirSync(hooks(still.p)[0], { recursive: true });
    const endElsewhere = still.writes.begin('elsewhere', join(still.p, 'a'));
    writeFileSync(hooks(still.p)[1], '{}');
    endElsewhere();
    // The user edits p/sub/.claude/settings.json while a run in another folder lasts.
    const [busyClaude, busyHooks] = hooks(busy.p, 'sub');
    mkdirSync(busyClaude, { recursive: true });
    mkdirSync(join(busy.p, '..', 'other'), { recursive: true });
    const endOther = busy.writes.begin('other', join(busy.p, '..', 'other'));
    writeFileSync(busyHooks, '{}');
    endOther();
    await sleep(2300); // past the first windows' slack
    // A run in p moves a/b to c; one in p only changes p itself; one at the monorepo's root adds a file in proj.
    move(moved);
    move(hidden);
    const endAbove = still.writes.begin('above', still.p);
    writeFileSync(join(still.p, 'notes.txt'), '');
    endAbove();
    const endMono = mono.writes.begin('monorepo', mono.p);
    writeFileSync(join(mono.p, 'proj', 'notes.txt'), '');
    endMono();
    // A run in p adds a file in p/sub: nothing moved there, and the run elsewhere could not write p.
    const endBusy = busy.writes.begin('above', busy.p);
    writeFileSync(join(busy.p, 'sub', 'a.ts'), '');
    endBusy();
    expect(moved.writes.changedDuringRun(...hooks(moved.p))).toMatchObject({
      runId: 'writes',
      cwd: join(moved.p, 'a'),
      movedBy: { runId: 'moves', cwd: moved.p, folder: join(moved.p, 'c') },
    });
    expect(still.writes.changedDuringRun(...hooks(still.p))).toBeUndefined();
    expect(mono.writes.changedDuringRun(monoClaude, monoHooks)).toBeUndefined();
    expect(busy.writes.changedDuringRun(busyClaude, busyHooks)).toBeUndefined();
    // The run that moved it could not have (its sandbox kept the folder): not counted.
    expect(
      moved.writes.changedDuringOtherRun(undefined, hooks(moved.p), (window) => window.runId !== 'moves'),
    ).toBeUndefined();
    await sleep(2300); // past the last window's slack
    // A later run in p/c that adds a file there hides the move (a folder's change time is its last
    // one; the sandbox's mount points change the cwd too): its window keeps p/c's from before it.
    const endThere = hidden.writes.begin('there', join(hidden.p, 'c'));
    writeFileSync(join(hidden.p, 'c', 'notes.txt'), '');
    endThere();
    expect(hidden.writes.changedDuringRun(...hooks(hidden.p))?.movedBy?.runId).toBe('moves');
    // The user adds a file in p/c: what was found stays, after a restart too, until the file changes.
    writeFileSync(join(moved.p, 'c', 'user.txt'), '');
    expect(new ConfinedWrites(moved.state).changedDuringRun(...hooks(moved.p))?.movedBy?.runId).toBe('moves');
    for (const path of hooks(moved.p)) utimesSync(path, new Date(), new Date());
    expect(moved.writes.changedDuringRun(...hooks(moved.p))).toBeUndefined();
  }, 20_000);
});

// What a project's hooks run lies in its `.claude`: every entry is judged, within a bound.
describe('entriesUnder', () => {
  it('lists every file and folder, links not followed, and says why past the bound', () => {
    const claude = join(root, 'entries', '.claude');
    mkdirSync(join(claude, 'hooks', 'deep'), { recursive: true });
    writeFileSync(join(claude, 'hooks', 'start.sh'), '');
    symlinkSync(root, join(claude, 'out'));
    expect(entriesUnder(claude)).toEqual({
      paths: expect.arrayContaining([
        join(claude, 'hooks'),
        join(claude, 'hooks', 'deep'),
        join(claude, 'hooks', 'start.sh'),
        join(claude, 'out'),
      ]) as string[],
    });
    expect((entriesUnder(claude) as { paths: string[] }).paths).toHaveLength(4);
    expect(entriesUnder(claude, 3)).toEqual({ cut: `${claude} holds more than 3 entries` });
    expect(entriesUnder(claude, 1000, 1)).toEqual({ cut: `${claude} is more than 1 folders deep` });
    expect(entriesUnder(join(root, 'entries', 'missing'))).toEqual({ paths: [] });
  });
});

// A hooks file the sandbox kept read-only in a run's cwd (the cwd's `.claude`, a `[hooks] files`
// entry) was not that run's to change, whatever else it wrote there; a link out of a kept folder to
// a file the run could write was.
describe('keptFrom', () => {
  it("names a file out of a run's reach, not a link from it into a writable folder, nor a folder made since", () => {
    const home = join(root, 'kept', 'home');
    mkdirSync(join(home, '.claude'), { recursive: true });
    mkdirSync(join(home, 'dotfiles'));
    writeFileSync(join(home, '.claude', 'settings.json'), '{}');
    writeFileSync(join(home, 'dotfiles', 'settings.json'), '{}');
    symlinkSync(join(home, 'dotfiles', 'settings.json'), join(home, '.claude', 'linked.json'));
    writeFileSync(join(home, 'extra.json'), '{}');
    const sandbox = createSandbox(
      { network: 'off', readOnly: [join(home, 'extra.json')] },
      { mode: 'off', home },
    );
    const later = Date.now() + 60_000;
    const inHome = sandbox.protectedPaths(home);
    expect(keptFrom(join(home, '.claude', 'settings.json'), inHome, later)).toBe(true);
    expect(keptFrom(join(home, 'extra.json'), inHome, later)).toBe(true);
    // A run at the home folder: the link's target is kept too (a link inside a kept folder is followed).
    expect(keptFrom(join(home, '.claude', 'linked.json'), inHome, later)).toBe(true);
    // A run in the dotfiles folder could write what the link leads to.
    const inDotfiles = sandbox.protectedPaths(join(home, 'dotfiles'));
    expect(keptFrom(join(home, '.claude', 'linked.json'), inDotfiles, later)).toBe(false);
    // A run that started before the kept folder existed could have made it, and the file in it.
    expect(keptFrom(join(home, '.claude', 'settings.json'), inHome, Date.now() - 60_000)).toBe(false);
  });

  it('a run its caller rules out is not named', () => {
    const { state, project } = folders('ruled-out');
    const writes = new ConfinedWrites(state);
    const end = writes.begin('run-kept', project);
    writeFileSync(join(project, 'settings.json'), '{}');
    end();
    expect(
      writes.changedDuringOtherRun(undefined, [join(project, 'settings.json')], () => false),
    ).toBeUndefined();
    expect(writes.changedDuringOtherRun(undefined, [join(project, 'settings.json')])?.runId).toBe('run-kept');
  });
});

const linux = process.platform === 'linux';

describe.skipIf(!linux)('an aleph.toml written by the model', () => {
  let llm: FakeLlm;
  /** The prompt is a JSON array of shell commands, run one by one. */
  const commands: Brain = (conversation) => {
    const steps = JSON.parse(conversation.find((turn) => turn.role === 'user')?.text ?? '[]') as string[];
    const next = steps[conversation.filter((turn) => turn.role === 'tool').length];
    return next === undefined ? { text: 'done' } : { call: { name: 'shell', args: { command: next } } };
  };
  beforeAll(async () => {
    llm = await startFakeLlm(commands);
  });
  afterAll(async () => {
    await llm.close();
  });

  it(
    "a nested repository the model staged in the project's index, or whose config it changed once staged, is named in a warning at the run's end",
    { timeout: 90_000 },
    async () => {
      const { project } = folders('embedded');
      const git = (cwd: string, ...args: string[]) =>
        spawnSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { cwd, encoding: 'utf8' });
      writeFileSync(join(project, 'README'), 'hi\n');
      for (const args of [
        ['init', '-q'],
        ['add', 'README'],
        ['commit', '-qm', 'first'],
      ])
        expect(git(project, ...args).status).toBe(0);
      const server = await startServerProcess(
        `[gateway]\nport = 0\n[agent]\nprovider = "openai-compatible"\nmodel = "fake"\nbase_url = "${llm.baseUrl}"\napi_key_env = "FAKE_PROVIDER_KEY"\n[power]\ninhibit_sleep = false\n[sandbox]\nmode = "required"\n`,
        { FAKE_PROVIDER_KEY: 'k' },
      );
      const warnings: string[] = [];
      const ended: { nestedRepositories?: unknown }[] = [];
      try {
        const client = await connectGateway(server.url, { token: server.token });
        await client.subscribe(['agent.*']);
        let resolveDone = (): void => undefined;
        client.onEvent((topic, params) => {
          const event = params as { kind?: string; message?: string };
          if (topic === 'agent.hook' && event.kind === 'warning') warnings.push(String(event.message));
          if (topic === 'agent.done') {
            ended.push(params as (typeof ended)[number]);
            resolveDone();
          }
        });
        const run = async (command: string): Promise<void> => {
          const done = new Promise<void>((resolve) => (resolveDone = resolve));
          await client.request('agent.run', { prompt: JSON.stringify([command]), cwd: project });
          await done;
        };
        await run(
          [
            'mkdir vendor && cd vendor && git init -q && git config core.pager "less"',
            'touch f && git add f && git -c user.name=m -c user.email=m@m commit -qm v',
            'cd .. && git add vendor && echo staged',
          ].join(' && '),
        );
        await run('echo nothing changed');
        // Staged already: the repository itself is the model's to change, its config included.
        await run('git -C vendor config core.fsmonitor "touch pwned; false"');
        await client.close();
      } finally {
        await server.stop();
        rmSync(server.stateDir, { recursive: true, force: true });
      }
      expect(git(project, 'ls-files', '-s', 'vendor').stdout).toMatch(/^160000 /);
      expect(warnings).toEqual([
        expect.stringMatching(
          /^the run staged "vendor" as nested repositories \(gitlinks\): your next `git status`.* — "vendor" sets core\.pager;/,
        ),
        expect.stringMatching(
          /^the run changed the git dir or config of the nested repositories "vendor": your next `git status`.* — "vendor" sets core\.pager, core\.fsmonitor;/,
        ),
      ]);
      // The runs' results say it too; the one that changed nothing names none.
      expect(ended.map((done) => done.nestedRepositories)).toEqual([
        [{ path: 'vendor', programs: ['core.pager'] }],
        undefined,
        [{ path: 'vendor', programs: ['core.pager', 'core.fsmonitor'] }],
      ]);
    },
  );

  it(
    'is refused at the next start from that folder, naming the run, until the user touches it',
    { timeout: 90_000 },
    async () => {
      const { project } = folders('server');
      const server = await startServerProcess(
        `[gateway]\nport = 0\n[agent]\nprovider = "openai-compatible"\nmodel = "fake"\nbase_url = "${llm.baseUrl}"\napi_key_env = "FAKE_PROVIDER_KEY"\n[power]\ninhibit_sleep = false\n[sandbox]\nmode = "required"\n`,
        { FAKE_PROVIDER_KEY: 'k' },
      );
      let runId: string;
      try {
        const client = await connectGateway(server.url, { token: server.token });
        await client.subscribe(['agent.done']);
        const done = new Promise<void>((resolve) =>
          client.onEvent((topic) => topic === 'agent.done' && resolve()),
        );
        const wrote = `printf '[sandbox]\\nmode = "off"\\n[gateway]\\nport = "from-the-model"\\n' > aleph.toml`;
        ({ runId } = await client.request<{ runId: string }>('agent.run', {
          prompt: JSON.stringify([wrote]),
          cwd: project,
        }));
        await done;
        await client.close();
      } finally {
        await server.stop();
      }
      expect(readFileSync(join(project, 'aleph.toml'), 'utf8')).toContain('from-the-model');
      const env = {
        ALEPH_STATE_DIR: server.stateDir,
        INIT_CWD: project,
        ALEPH_PORT: '0',
        FAKE_PROVIDER_KEY: 'k',
      };
      const refused = await runToExit([MAIN], env, { cwd: project });
      expect(refused.code).toBe(2);
      expect(refused.stderr).toContain(`${join(project, 'aleph.toml')} changed during agent run ${runId}`);
      expect(refused.stderr).toContain('touch');
      // Touched (read, and taken as the user's): it is read, and here says what is wrong with it.
      await new Promise((resolve) => setTimeout(resolve, 2100));
      utimesSync(join(project, 'aleph.toml'), new Date(), new Date());
      const read = await runToExit([MAIN], env, { cwd: project });
      expect(read.code).toBe(2);
      expect(read.stderr).not.toContain('changed during agent run');
      expect(read.stderr).toMatch(/port/);
      rmSync(server.stateDir, { recursive: true, force: true });
    },
  );
});

// A user's formatter hook (`npx prettier --write`, `./node_modules/.bin/…`) runs a program from the
// project, which the model's commands write: with `[hooks] sandbox = true` it runs confined.
describe.skipIf(!linux)('[hooks] sandbox = true', () => {
  let llm: FakeLlm;
  const commands: Brain = (conversation) => {
    const steps = JSON.parse(conversation.find((turn) => turn.role === 'user')?.text ?? '[]') as string[];
    const next = steps[conversation.filter((turn) => turn.role === 'tool').length];
    return next === undefined ? { text: 'done' } : { call: { name: 'shell', args: { command: next } } };
  };
  beforeAll(async () => {
    llm = await startFakeLlm(commands);
  });
  afterAll(async () => {
    await llm.close();
  });

  it(
    "runs the user's own hooks in the sandbox: a program the model planted for them cannot write outside the project",
    { timeout: 90_000 },
    async () => {
      const { state, project } = folders('hooks-sandbox');
      const outside = join(state, 'pwned');
      const hooksFile = join(state, 'hooks.json');
      writeFileSync(
        hooksFile,
        JSON.stringify({
          hooks: {
            PostToolUse: [
              { matcher: 'Bash', hooks: [{ type: 'command', command: './node_modules/.bin/fmt' }] },
            ],
          },
        }),
      );
      const server = await startServerProcess(
        `[gateway]\nport = 0\n[agent]\nprovider = "openai-compatible"\nmodel = "fake"\nbase_url = "${llm.baseUrl}"\napi_key_env = "FAKE_PROVIDER_KEY"\n[power]\ninhibit_sleep = false\n[sandbox]\nmode = "required"\n[hooks]\nfiles = ["${hooksFile}"]\nsandbox = true\n`,
        { FAKE_PROVIDER_KEY: 'k' },
      );
      try {
        const client = await connectGateway(server.url, { token: server.token });
        await client.subscribe(['agent.done']);
        const done = new Promise<void>((resolve) =>
          client.onEvent((topic) => topic === 'agent.done' && resolve()),
        );
        const plant = `mkdir -p node_modules/.bin && printf '#!/bin/sh\\necho ran > ran-by-hook; id > ${outside}\\n' > node_modules/.bin/fmt && chmod +x node_modules/.bin/fmt`;
        await client.request('agent.run', { prompt: JSON.stringify([plant, 'true']), cwd: project });
        await done;
        await client.close();
      } finally {
        await server.stop();
        rmSync(server.stateDir, { recursive: true, force: true });
      }
      expect(readFileSync(join(project, 'ran-by-hook'), 'utf8')).toBe('ran\n'); // the hook ran
      expect(() => readFileSync(outside)).toThrow(/ENOENT/); // confined: nothing outside the project
    },
  );
});
