// One test per profile shape sandbox-exec gets on macOS (untestable here: the text is the contract).
import { expect, it } from 'vitest';
import { seatbeltProfile } from './seatbelt.js';

it('network off, nothing denied: writes only in the cwd (not its .claude, .git/hooks, .git/config) and temp dirs, no network, no unix sockets', () => {
  expect(seatbeltProfile({ cwd: '/Users/ada/project', deny: [], network: 'off' })).toBe(
    [
      '(version 1)',
      '(allow default)',
      '(deny file-write*)',
      '(allow file-write* (subpath "/Users/ada/project") (subpath "/private/tmp") (subpath "/private/var/folders") (literal "/dev/null") (literal "/dev/tty"))',
      '(deny file-write* (subpath "/Users/ada/project/.claude") (subpath "/Users/ada/project/.git/hooks") (literal "/Users/ada/project/.git/config"))',
      '(deny network*)',
      '',
    ].join('\n'),
  );
});

it('network on: no network rule at all', () => {
  const profile = seatbeltProfile({ cwd: '/Users/ada/project', deny: [], network: 'on' });
  expect(profile).not.toMatch(/network/);
});

it('denied paths: a dir by subpath, a file by literal, for reads and writes, after the write allowance', () => {
  const profile = seatbeltProfile({
    cwd: '/Users/ada/project',
    deny: [
      { path: '/Users/ada/.ssh', kind: 'dir', source: 'protected' },
      { path: '/Users/ada/.netrc', kind: 'file', source: 'protected' },
    ],
    network: 'on',
  });
  const lines = profile.trimEnd().split('\n');
  expect(lines.at(-1)).toBe(
    '(deny file-read* file-write* (subpath "/Users/ada/.ssh") (literal "/Users/ada/.netrc"))',
  );
  expect(lines.findIndex((line) => line.startsWith('(allow file-write*'))).toBeLessThan(lines.length - 1);
});

it('quotes and backslashes in a path stay inside the string literal', () => {
  const profile = seatbeltProfile({ cwd: '/Users/ada/we"ird\\dir', deny: [], network: 'on' });
  expect(profile).toContain('(subpath "/Users/ada/we\\"ird\\\\dir")');
});

it('readable files: allowed for reads after the denials (later rules win), by literal', () => {
  const profile = seatbeltProfile({
    cwd: '/Users/ada/project',
    deny: [{ path: '/Users/ada/.local/state/aleph', kind: 'dir', source: 'deny_read' }],
    network: 'on',
    readable: ['/Users/ada/.local/state/aleph/sessions/s1.transcript.jsonl'],
  });
  expect(profile.trimEnd().split('\n').slice(-2)).toEqual([
    '(deny file-read* file-write* (subpath "/Users/ada/.local/state/aleph"))',
    '(allow file-read* (literal "/Users/ada/.local/state/aleph/sessions/s1.transcript.jsonl"))',
  ]);
});
