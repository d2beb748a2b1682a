// A hooks file that is a FIFO, or too large, is an invalid_hooks_file error naming it, never a
// blocked thread. The discovery runs in a child with a timeout, so a blocking open fails the test.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';

it('a .claude/settings.json that is a FIFO or over 1 MiB is refused, not read', () => {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-hooks-file-')));
  try {
    const project = join(dir, 'proj');
    mkdirSync(join(project, '.claude'), { recursive: true });
    const file = join(project, '.claude', 'settings.json');
    execFileSync('mkfifo', [file]);
    const discover = () => {
      const script = `import { discoverClaudeCodeHooks } from ${JSON.stringify(join(import.meta.dirname, 'claude-code-settings.ts'))};
        try { discoverClaudeCodeHooks({ projectDir: ${JSON.stringify(project)}, home: ${JSON.stringify(dir)} }); console.log('read'); }
        catch (error) { console.log(error.code + ' ' + error.message); }`;
      return execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
        timeout: 60_000, // a blocking open fails it; tsx starts slowly under load
        encoding: 'utf8',
        cwd: join(import.meta.dirname, '..', '..', '..'),
      }).trim();
    };
    expect(discover()).toBe(`invalid_hooks_file ${file}: is not a regular file`);
    rmSync(file);
    writeFileSync(file, ' '.repeat(1024 * 1024 + 1));
    expect(discover()).toBe(`invalid_hooks_file ${file}: is 1048577 bytes, over the limit of 1048576`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 150_000);
