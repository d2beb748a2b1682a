// The bwrap command line for one confined command. Order matters: bwrap applies mounts in
// sequence, so the read-only root comes first, then the private /tmp, then the writable cwd
// (which may lie under /tmp), then the denied paths over all of them.
import { isWithin, type ResolvedPolicy } from '../policy.js';

/** Everything but the cwd and the denied paths: the same for every command. */
export function baseArgs(network: 'off' | 'on'): string[] {
  return [
    // Ending bwrap ends the sandbox; its pid 1 ending kills every process left in it.
    '--die-with-parent',
    // No controlling terminal inside: a confined process cannot push input to ours (TIOCSTI).
    '--new-session',
    '--unshare-all',
    ...(network === 'on' ? ['--share-net'] : []),
    // bwrap started by root keeps every capability unless told not to (remount would then work).
    '--cap-drop',
    'ALL',
    '--ro-bind',
    '/',
    '/',
    '--dev',
    '/dev',
    '--proc',
    '/proc',
    '--tmpfs',
    '/tmp',
  ];
}

export function bubblewrapArgs(
  policy: ResolvedPolicy,
  cwd: string,
  command: { file: string; args: readonly string[] },
  unset: readonly string[],
): string[] {
  const args = baseArgs(policy.network);
  for (const name of unset) args.push('--unsetenv', name);
  args.push('--bind', cwd, cwd);
  for (const { path, kind } of policy.deny) {
    // Under the private /tmp and outside the cwd, a path is hidden already.
    if (isWithin(path, '/tmp') && !isWithin(path, cwd)) continue;
    if (kind === 'dir') args.push('--tmpfs', path, '--remount-ro', path);
    else args.push('--ro-bind', '/dev/null', path);
  }
  args.push('--chdir', cwd, '--', command.file, ...command.args);
  return args;
}
