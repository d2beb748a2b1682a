// The profile sandbox-exec gets on macOS (not runnable here: the text is the contract).
import { expect, it } from 'vitest';
import { seatbeltProfile } from './seatbelt.js';

const base = { cwd: '/Users/ada/project', deny: [], network: 'off' as const, gitIsDir: true };
const lines = (profile: string): string[] => profile.trimEnd().split('\n');

it('denies by default, then allows running programs, reading, a terminal and a few system services', () => {
  const profile = lines(seatbeltProfile({ ...base, tempDir: '/private/var/folders/xy/abc/T' }));
  expect(profile.slice(0, 2)).toEqual(['(version 1)', '(deny default)']);
  expect(profile).toContain('(allow process-exec process-fork)');
  expect(profile).toContain('(allow signal (target same-sandbox))');
  expect(profile).toContain('(allow file-read*)');
  expect(profile).toContain('(allow pseudo-tty)');
  expect(profile).toContain(
    '(allow file-write* (subpath "/Users/ada/project") (subpath "/private/tmp") (subpath "/private/var/folders/xy/abc/T") (literal "/dev/null") (literal "/dev/tty") (literal "/dev/ptmx") (regex #"^/dev/ttys[0-9]+$"))',
  );
  // Not reachable: open (Launch Services), osascript (Apple Events), the keychain, the pasteboard.
  const text = profile.join('\n');
  for (const service of [
    'launchservicesd',
    'appleevents',
    'SecurityServer',
    'securityd',
    'pasteboard',
    'windowserver',
  ]) {
    expect(text).not.toMatch(new RegExp(service, 'i'));
  }
  expect(text).not.toMatch(/allow default|network/);
});

it('keeps the protected paths read-only, and their ancestors in the cwd unrenamable', () => {
  const profile = lines(
    seatbeltProfile({
      ...base,
      readOnly: ['/Users/ada/project/hooks/extra.json'],
      deny: [{ path: '/Users/ada/project/conf/aleph.toml', kind: 'file', source: 'deny_read' }],
    }),
  );
  const writes = profile.find((line) => line.startsWith('(deny file-write* '));
  expect(writes).toBe(
    '(deny file-write* (subpath "/Users/ada/project/.claude") (subpath "/Users/ada/project/HEAD") (subpath "/Users/ada/project/.git/hooks") (subpath "/Users/ada/project/.git/worktrees") (subpath "/Users/ada/project/.git/modules") ' +
      '(literal "/Users/ada/project/.git/config") (literal "/Users/ada/project/.git/commondir") (literal "/Users/ada/project/.git/config.worktree") (literal "/Users/ada/project/hooks/extra.json") ' +
      '(literal "/Users/ada/project/.git") (literal "/Users/ada/project/conf") (literal "/Users/ada/project/hooks"))',
  );
  // Later rules win: the denials come after the write allowance.
  expect(profile.indexOf(writes ?? '')).toBeGreaterThan(
    profile.findIndex((line) => line.startsWith('(allow file-write*')),
  );
});

it('without a .git dir, .git is neither created nor written', () => {
  const profile = seatbeltProfile({ ...base, gitIsDir: false });
  expect(profile).toContain('(subpath "/Users/ada/project/.git")');
  expect(profile).not.toContain('.git/config');
});

it('network on: network and the DNS and certificate services, nothing more', () => {
  const profile = lines(seatbeltProfile({ ...base, network: 'on' }));
  expect(profile).toContain('(allow network*)');
  expect(profile.at(-1)).toMatch(
    /^\(allow mach-lookup .*"com\.apple\.SystemConfiguration\.DNSConfiguration".*"com\.apple\.trustd\.agent"/,
  );
});

it('denied paths: a dir by subpath, a file by literal, for reads and writes', () => {
  const profile = seatbeltProfile({
    ...base,
    deny: [
      { path: '/Users/ada/.ssh', kind: 'dir', source: 'protected' },
      { path: '/Users/ada/.netrc', kind: 'file', source: 'protected' },
    ],
  });
  expect(lines(profile).at(-1)).toBe(
    '(deny file-read* file-write* (subpath "/Users/ada/.ssh") (literal "/Users/ada/.netrc"))',
  );
});

it('quotes and backslashes in a path stay inside the string literal', () => {
  const profile = seatbeltProfile({ ...base, cwd: '/Users/ada/we"ird\\dir' });
  expect(profile).toContain('(subpath "/Users/ada/we\\"ird\\\\dir")');
});

it('readable files: allowed for reads after the denials (later rules win), by literal', () => {
  const profile = seatbeltProfile({
    ...base,
    deny: [{ path: '/Users/ada/.local/state/aleph', kind: 'dir', source: 'deny_read' }],
    readable: ['/Users/ada/.local/state/aleph/sessions/s1.transcript.jsonl'],
  });
  expect(lines(profile).slice(-2)).toEqual([
    '(deny file-read* file-write* (subpath "/Users/ada/.local/state/aleph"))',
    '(allow file-read* (literal "/Users/ada/.local/state/aleph/sessions/s1.transcript.jsonl"))',
  ]);
});
