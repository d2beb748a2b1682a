// Instruction files with real files on disk: the order (user's, then root → cwd), `@path` imports
// (relative, `~/`, nested, never in code), and every bad input — an unreadable file, a cycle, an
// import from outside the project, too deep, a huge file, a binary one — a warning naming the file,
// never a throw. Then a real server run: the system prompt the provider received holds Aleph's role
// prompt, then the files in order; `aleph run` names them.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AGENT_ROLE_PROMPT } from '@aleph/harness';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlm, type FakeLlm } from '../test/fake-llm.js';
import { CLI, runToExit, startServerProcess } from '../test/server-process.js';
import {
  INSTRUCTION_FILE_CAP,
  INSTRUCTION_TOTAL_CAP,
  MAX_INSTRUCTION_FILES,
  MAX_INSTRUCTION_WARNINGS,
  MAX_INSTRUCTION_WARNING_CHARS,
  importsOf,
  loadInstructionFiles,
} from './instruction-files.js';

let work: string;
beforeAll(() => {
  work = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-instructions-')));
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** A git repository (real `git init`) with `files` written under it; returns its root. */
function repo(name: string, files: Record<string, string>): string {
  const root = join(work, name);
  mkdirSync(root, { recursive: true });
  execFileSync('git', ['init', '-q', root]);
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(join(root, path, '..'), { recursive: true });
    writeFileSync(join(root, path), text);
  }
  return root;
}

const at = (text: string, part: string): number => {
  const index = text.indexOf(part);
  expect(index, `${part} in the prompt`).toBeGreaterThanOrEqual(0);
  return index;
};

describe('loadInstructionFiles', () => {
  it('reads the user file, then each folder from the git root down to the cwd, most specific last', () => {
    const home = join(work, 'home-order');
    mkdirSync(join(home, '.claude'), { recursive: true });
    writeFileSync(join(home, '.claude', 'CLAUDE.md'), 'USER-WIDE\n');
    const root = repo('order', {
      'AGENTS.md': 'ROOT-AGENTS\n',
      'CLAUDE.md': 'ROOT-CLAUDE\n',
      'app/.claude/CLAUDE.md': 'APP-DOT-CLAUDE\n',
      'app/CLAUDE.local.md': 'APP-LOCAL\n',
      'app/web/AGENTS.md': 'WEB-AGENTS\n',
      'app/web/deeper/CLAUDE.md': 'BELOW-CWD\n', // below the cwd: not read at the start (as Claude Code)
      'other/CLAUDE.md': 'SIBLING\n',
    });
    const loaded = loadInstructionFiles({
      cwd: join(root, 'app', 'web'),
      home,
      userDir: join(home, '.claude'),
    });
    expect(loaded.files.map((file) => file.path)).toEqual([
      '~/.claude/CLAUDE.md',
      'AGENTS.md',
      'CLAUDE.md',
      'app/.claude/CLAUDE.md',
      'app/CLAUDE.local.md',
      'app/web/AGENTS.md',
    ]);
    const order = ['USER-WIDE', 'ROOT-AGENTS', 'ROOT-CLAUDE', 'APP-DOT-CLAUDE', 'APP-LOCAL', 'WEB-AGENTS'];
    const positions = order.map((part) => at(loaded.text, part));
    expect(positions).toEqual([...positions].sort((a, b) => a - b));
    expect(loaded.text).not.toContain('BELOW-CWD');
    expect(loaded.text).not.toContain('SIBLING');
    expect(loaded.warnings).toEqual([]);
  });

  it('outside a git repository only the cwd itself is read', () => {
    const plain = join(work, 'plain', 'inner');
    mkdirSync(plain, { recursive: true });
    writeFileSync(join(work, 'plain', 'CLAUDE.md'), 'PARENT\n');
    writeFileSync(join(plain, 'AGENTS.md'), 'INNER\n');
    const loaded = loadInstructionFiles({
      cwd: plain,
      home: join(work, 'nohome'),
      userDir: join(work, 'nohome'),
    });
    expect(loaded.files.map((file) => file.path)).toEqual(['AGENTS.md']);
  });

  it('follows @path imports in CLAUDE files (relative to the importer, ~/, nested), never inside code', () => {
    const home = join(work, 'home-imports');
    mkdirSync(join(home, '.claude'), { recursive: true });
    writeFileSync(join(home, '.claude', 'personal.md'), 'PERSONAL-PREFS\n');
    const root = repo('imports', {
      'CLAUDE.md':
        'See @docs/style.md and @~/.claude/personal.md.\n`@docs/in-span.md`\n```\n@docs/in-fence.md\n```\nPing @someone.\n',
      'docs/style.md': 'STYLE-GUIDE, more in @./deep/one.md\n',
      'docs/deep/one.md': 'DEEP-ONE\n',
      'docs/in-span.md': 'NOT-IMPORTED-SPAN\n',
      'docs/in-fence.md': 'NOT-IMPORTED-FENCE\n',
      'AGENTS.md': 'AGENTS-TEXT @docs/in-span.md\n', // AGENTS.md is read as it is
    });
    const loaded = loadInstructionFiles({ cwd: root, home, userDir: join(home, '.claude') });
    expect(loaded.files).toEqual([
      { path: 'AGENTS.md', bytes: 29 },
      { path: 'CLAUDE.md', bytes: expect.any(Number) },
      { path: 'docs/style.md', bytes: expect.any(Number), importedBy: 'CLAUDE.md' },
      { path: 'docs/deep/one.md', bytes: expect.any(Number), importedBy: 'docs/style.md' },
      { path: '~/.claude/personal.md', bytes: expect.any(Number), importedBy: 'CLAUDE.md' },
    ]);
    expect(at(loaded.text, 'STYLE-GUIDE')).toBeLessThan(at(loaded.text, 'DEEP-ONE'));
    expect(at(loaded.text, 'DEEP-ONE')).toBeLessThan(at(loaded.text, 'PERSONAL-PREFS'));
    expect(loaded.text).not.toContain('NOT-IMPORTED');
    expect(loaded.warnings).toEqual([]);
    expect(importsOf('a @x/y.md, b @z.md. c `@no.md` @mention')).toEqual(['x/y.md', 'z.md']);
    expect(importsOf('see @docs/x.md). or @a/b.md?! and @~/n.md;')).toEqual([
      'docs/x.md',
      'a/b.md',
      '~/n.md',
    ]);
    // A token of 40,000 closing brackets then a letter: no import, read in one pass.
    expect(importsOf(`@a${')'.repeat(40_000)}x @c/d.md`)).toEqual(['c/d.md']);
  });

  it('bad imports: missing, outside the project, a cycle, too deep — each said, the rest loaded', () => {
    const outside = join(work, 'secret.md');
    writeFileSync(outside, 'OUTSIDE-SECRET\n');
    const root = repo('bad-imports', {
      'CLAUDE.md': '@a.md @missing.md @../secret.md @link.md @d1.md\n',
      'a.md': 'A-TEXT @b.md\n',
      'b.md': 'B-TEXT @a.md\n',
      'd1.md': '@d2.md',
      'd2.md': '@d3.md',
      'd3.md': '@d4.md',
      'd4.md': '@d5.md',
      'd5.md': 'FIFTH @d6.md',
      'd6.md': 'SIXTH-TOO-DEEP',
    });
    symlinkSync(outside, join(root, 'link.md')); // a link inside that leads outside
    const home = join(work, 'nohome');
    const loaded = loadInstructionFiles({ cwd: root, home, userDir: home });
    expect(loaded.text).toContain('A-TEXT');
    expect(loaded.text).toContain('B-TEXT');
    expect(loaded.text).toContain('FIFTH');
    expect(loaded.text).not.toContain('OUTSIDE-SECRET');
    expect(loaded.text).not.toContain('SIXTH-TOO-DEEP');
    expect(loaded.warnings).toEqual([
      'b.md: @a.md is an import cycle (CLAUDE.md → a.md → b.md → a.md); not loaded again',
      'CLAUDE.md: @missing.md not found; skipped',
      `CLAUDE.md: @${outside} is outside the project (${root}) and the user's Claude folder; skipped`,
      `CLAUDE.md: @link.md is outside the project (${root}) and the user's Claude folder; skipped`,
      'd5.md: @d6.md not followed: imports are followed at most 5 deep',
    ]);
  });

  it('unreadable, binary and huge files: said and skipped or cut, never a throw', () => {
    const root = repo('bad-files', {
      'AGENTS.md': 'x'.repeat(INSTRUCTION_FILE_CAP + 500),
      'CLAUDE.local.md': 'bin\u0000ary',
    });
    mkdirSync(join(root, 'CLAUDE.md')); // a folder by that name
    symlinkSync(join(root, 'nowhere'), join(root, '.claude')); // a dangling link where .claude/ would be
    const sub = join(root, 'sub');
    mkdirSync(sub);
    symlinkSync(join(root, 'gone.md'), join(sub, 'AGENTS.md'));
    const home = join(work, 'nohome');
    const loaded = loadInstructionFiles({ cwd: sub, home, userDir: home });
    expect(loaded.files).toEqual([{ path: 'AGENTS.md', bytes: INSTRUCTION_FILE_CAP + 500, cut: true }]);
    expect(loaded.text).toContain(
      `[Cut here: only its first ${INSTRUCTION_FILE_CAP} characters of ${INSTRUCTION_FILE_CAP + 500} bytes were sent (cap: ${INSTRUCTION_FILE_CAP} characters per file).]`,
    );
    expect(loaded.warnings).toEqual([
      `AGENTS.md cut: only its first ${INSTRUCTION_FILE_CAP} characters of ${INSTRUCTION_FILE_CAP + 500} bytes were sent (cap: ${INSTRUCTION_FILE_CAP} characters per file)`,
      'CLAUDE.md is not a file; skipped',
      'CLAUDE.local.md is not text (it holds NUL bytes); skipped',
      'sub/AGENTS.md: cannot be read (ENOENT); skipped',
    ]);
  });

  it('a file found by name that links out of the project, to a denied path or to a FIFO is skipped, never read', () => {
    const outside = join(work, 'host-secret.txt');
    writeFileSync(outside, 'HOST-SECRET-4411\n');
    const root = repo('links-out', { 'secret/key': 'DENIED-SECRET-9902\n', 'ok.md': 'IN-PROJECT-OK\n' });
    symlinkSync(outside, join(root, 'CLAUDE.md')); // out of the project
    symlinkSync(join(root, 'secret', 'key'), join(root, 'AGENTS.md')); // a denied file inside it
    execFileSync('mkfifo', [join(root, 'CLAUDE.local.md')]); // would block an open for reading
    const sub = join(root, 'sub');
    mkdirSync(sub);
    symlinkSync(join(root, 'ok.md'), join(sub, 'AGENTS.md')); // a link inside the project: read
    symlinkSync('/etc/passwd', join(sub, 'CLAUDE.md'));
    const home = join(work, 'nohome');
    const loaded = loadInstructionFiles({
      cwd: sub,
      home,
      userDir: home,
      denied: [{ path: join(root, 'secret'), key: '[sandbox] deny_read' }],
    });
    expect(loaded.text).not.toContain('HOST-SECRET-4411');
    expect(loaded.text).not.toContain('DENIED-SECRET-9902');
    expect(loaded.text).not.toContain('root:');
    expect(loaded.text).toContain('IN-PROJECT-OK');
    expect(loaded.files.map((file) => file.path)).toEqual(['sub/AGENTS.md']);
    expect(loaded.warnings).toEqual([
      `AGENTS.md is under ${join(root, 'secret')}, denied by [sandbox] deny_read; skipped`,
      `CLAUDE.md is a link outside the project (${root}) and the user's Claude folder; skipped`,
      'CLAUDE.local.md is not a file; skipped',
      `sub/CLAUDE.md is a link outside the project (${root}) and the user's Claude folder; skipped`,
    ]);
    // The user's own file: inside the user's Claude folder only.
    const userDir = join(work, 'user-claude');
    mkdirSync(userDir, { recursive: true });
    symlinkSync(outside, join(userDir, 'CLAUDE.md'));
    const user = loadInstructionFiles({ cwd: join(root, 'secret'), home, userDir });
    expect(user.text).not.toContain('HOST-SECRET-4411');
    expect(user.warnings[0]).toBe(
      `${join(userDir, 'CLAUDE.md')} is a link outside the project (${root}) and the user's Claude folder; skipped`,
    );
  });

  it('caps the whole: past the total, a file is cut and the next ones are said and left out', () => {
    const big = 'y'.repeat(INSTRUCTION_FILE_CAP);
    const root = repo('total-cap', {
      'AGENTS.md': big,
      'CLAUDE.md': big,
      'a/AGENTS.md': big,
      'a/CLAUDE.md': 'LEFT-OUT',
    });
    const home = join(work, 'nohome');
    const loaded = loadInstructionFiles({ cwd: join(root, 'a'), home, userDir: home });
    expect(loaded.files.map((file) => [file.path, file.cut ?? false])).toEqual([
      ['AGENTS.md', false],
      ['CLAUDE.md', false],
      ['a/AGENTS.md', true],
    ]);
    expect(loaded.text).not.toContain('LEFT-OUT');
    expect(loaded.warnings.at(-1)).toBe(
      `a/CLAUDE.md and any instruction file after it not loaded: the instruction files already fill ${INSTRUCTION_TOTAL_CAP} characters`,
    );
    expect(loaded.text.length).toBeLessThanOrEqual(INSTRUCTION_TOTAL_CAP);
  });

  it("each file's heading counts in the total: 90 imports of 1,150 characters stay within it, the last one cut", () => {
    const imports = Array.from({ length: 90 }, (_, index) => `@docs/part-${index}.md`);
    const parts = Object.fromEntries(imports.map((line) => [line.slice(1), `${'z'.repeat(1_149)}\n`]));
    const root = repo('headings', { 'CLAUDE.md': imports.join('\n'), ...parts });
    const home = join(work, 'nohome');
    const loaded = loadInstructionFiles({ cwd: root, home, userDir: home });
    expect(loaded.text.length).toBeLessThanOrEqual(INSTRUCTION_TOTAL_CAP);
    expect(loaded.files.length).toBeLessThan(91);
    expect(loaded.files.at(-1)).toMatchObject({ cut: true });
    expect(loaded.text).toMatch(
      /\[Cut here: only its first \d+ characters of 1150 bytes were sent \(cap: 100000 characters for all instruction files\)\.\]$/,
    );
  });

  it('20,000 imports of one-character files: at most 100 files loaded, where it stopped said once', () => {
    const imports = Array.from({ length: 20_000 }, (_, index) => `@e${index}.md`);
    const root = repo('many-imports', { 'CLAUDE.md': `hello\n${imports.join('\n')}` });
    for (const line of imports.slice(0, 200)) writeFileSync(join(root, line.slice(1)), 'x');
    const home = join(work, 'nohome');
    const loaded = loadInstructionFiles({ cwd: root, home, userDir: home });
    expect(loaded.files).toHaveLength(MAX_INSTRUCTION_FILES);
    expect(loaded.files.at(-1)).toEqual({ path: 'e98.md', bytes: 1, importedBy: 'CLAUDE.md' });
    expect(loaded.warnings).toEqual([
      'CLAUDE.md cut: only its first 40000 characters of 208895 bytes were sent (cap: 40000 characters per file)',
      `CLAUDE.md: @e99.md and any instruction file after it not loaded: at most ${MAX_INSTRUCTION_FILES} instruction files are loaded`,
    ]);
    expect(loaded.text.length).toBeLessThanOrEqual(INSTRUCTION_TOTAL_CAP);
  });

  it('2,000 missing imports: the first warnings listed, the rest counted', () => {
    const imports = Array.from({ length: 2_000 }, (_, index) => `@gone${index}.md`);
    const root = repo('missing-imports', { 'CLAUDE.md': imports.join('\n') });
    const home = join(work, 'nohome');
    const loaded = loadInstructionFiles({ cwd: root, home, userDir: home });
    expect(loaded.warnings).toHaveLength(MAX_INSTRUCTION_WARNINGS + 1);
    expect(loaded.warnings[0]).toBe('CLAUDE.md: @gone0.md not found; skipped');
    expect(loaded.warnings.at(-1)).toBe(
      `${2_000 - MAX_INSTRUCTION_WARNINGS} more warning(s) about instruction files not listed`,
    );
  });

  it('an import of a 38,000-character path: its warning keeps the beginning and the reason, the middle counted', () => {
    const target = `${'Q/'.repeat(19_000)}x.md`;
    const root = repo('long-import', { 'CLAUDE.md': `@${target}\n` });
    const home = join(work, 'nohome');
    const loaded = loadInstructionFiles({ cwd: root, home, userDir: home });
    expect(loaded.warnings).toHaveLength(1);
    const [warning] = loaded.warnings;
    expect(warning!.length).toBeLessThanOrEqual(MAX_INSTRUCTION_WARNING_CHARS);
    expect(warning).toMatch(/^CLAUDE\.md: @Q\/Q\/Q\//);
    expect(warning).toMatch(/ … \(\d+ characters not shown\) … [Q/]+x\.md not found; skipped$/);
  });
});

it('a real run: the provider gets the role prompt, then AGENTS.md and the subfolder CLAUDE.md; aleph run names them', async () => {
  const root = repo('e2e', {
    'AGENTS.md': 'ROOT-AGENTS-7731: run pnpm test before you stop.\n',
    'service/CLAUDE.md': 'SERVICE-CLAUDE-1187: see @notes.md and @../../outside.md\n',
    'service/notes.md': 'IMPORTED-NOTES-5521\n',
  });
  const cwd = join(root, 'service');
  const llm: FakeLlm = await startFakeLlm(() => ({ text: 'Nothing to do.\nVERDICT: PASS' }));
  const config = `[gateway]\nport = 0\n\n[agent]\nprovider = "openai-compatible"\nmodel = "fake-coder"\nbase_url = "${llm.baseUrl}"\nmax_iterations = 4\n\n[power]\ninhibit_sleep = false\n`;
  const server = await startServerProcess(config, { CLAUDE_CONFIG_DIR: join(work, 'no-claude') });
  try {
    const result = await runToExit([CLI, 'run', 'say hello', '--cwd', cwd], {
      ALEPH_URL: server.url,
      ALEPH_TOKEN: server.token,
    });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/^instructions: AGENTS\.md, service\/CLAUDE\.md, service\/notes\.md$/m);
    expect(result.stdout).toContain(
      `⚠ instructions: service/CLAUDE.md: @${join(work, 'outside.md')} is outside the project (${root}) and the user's Claude folder; skipped`,
    );
    const system = llm.requests[0]!.body.messages[0];
    expect(system.role).toBe('system');
    const prompt = String(system.content);
    expect(prompt.startsWith(AGENT_ROLE_PROMPT)).toBe(true);
    const positions = ['ROOT-AGENTS-7731', 'SERVICE-CLAUDE-1187', 'IMPORTED-NOTES-5521'].map((part) =>
      at(prompt, part),
    );
    expect(positions).toEqual([...positions].sort((a, b) => a - b));
    expect(positions[0]).toBeGreaterThan(AGENT_ROLE_PROMPT.length);
  } finally {
    await server.stop();
    rmSync(server.stateDir, { recursive: true, force: true });
    await llm.close();
  }
});

it('a real run: instruction files linked to the config, a deny_read file or out of the project never reach the model', async () => {
  const root = repo('e2e-links', { 'secret/key': 'DENIED-SECRET-5150\n' });
  const llm: FakeLlm = await startFakeLlm(() => ({ text: 'Nothing to do.\nVERDICT: PASS' }));
  const config = `[gateway]\nport = 0\n\n[agent]\nprovider = "openai-compatible"\nmodel = "fake-coder"\nbase_url = "${llm.baseUrl}"\nmax_iterations = 4\n\n[power]\ninhibit_sleep = false\n\n[sandbox]\ndeny_read = ["${join(root, 'secret')}"]\n# CONFIG-SECRET-7070\n`;
  const server = await startServerProcess(config, { CLAUDE_CONFIG_DIR: join(work, 'no-claude') });
  symlinkSync(join(root, 'secret', 'key'), join(root, 'AGENTS.md'));
  symlinkSync(join(server.stateDir, 'aleph.toml'), join(root, 'CLAUDE.md'));
  try {
    const result = await runToExit([CLI, 'run', 'say hello', '--cwd', root], {
      ALEPH_URL: server.url,
      ALEPH_TOKEN: server.token,
    });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain(
      `⚠ instructions: AGENTS.md is under ${join(root, 'secret')}, denied by [sandbox] deny_read; skipped`,
    );
    expect(result.stdout).toContain(
      `⚠ instructions: CLAUDE.md is a link outside the project (${root}) and the user's Claude folder; skipped`,
    );
    const bodies = JSON.stringify(llm.requests.map((request) => request.body));
    expect(bodies).not.toContain('DENIED-SECRET-5150');
    expect(bodies).not.toContain('CONFIG-SECRET-7070');
  } finally {
    await server.stop();
    rmSync(server.stateDir, { recursive: true, force: true });
    await llm.close();
  }
});
