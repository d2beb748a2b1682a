// The macOS sandbox-exec (Seatbelt) profile for one command. Kept small on purpose: everything is
// allowed but writes outside the cwd and temp dirs, any access to the denied paths, and (network
// off) any network, the host's Unix sockets included. Later rules win over earlier ones in SBPL.
import type { DeniedPath } from '../policy.js';

export interface SeatbeltOptions {
  readonly cwd: string;
  readonly deny: readonly DeniedPath[];
  readonly network: 'off' | 'on';
  /** Files readable although under a denied path (real paths). */
  readonly readable?: readonly string[];
}

/** An SBPL string literal. */
const literal = (text: string): string => `"${text.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;

const filter = ({ path, kind }: DeniedPath): string =>
  `(${kind === 'dir' ? 'subpath' : 'literal'} ${literal(path)})`;

export function seatbeltProfile(options: SeatbeltOptions): string {
  const lines = [
    '(version 1)',
    '(allow default)',
    '(deny file-write*)',
    `(allow file-write* (subpath ${literal(options.cwd)}) (subpath "/private/tmp") (subpath "/private/var/folders") (literal "/dev/null") (literal "/dev/tty"))`,
  ];
  // What runs unconfined later (Claude Code's settings, git's hooks and config) stays read-only.
  const cwd = options.cwd.replace(/\/+$/, '');
  lines.push(
    `(deny file-write* (subpath ${literal(`${cwd}/.claude`)}) (subpath ${literal(`${cwd}/.git/hooks`)}) (literal ${literal(`${cwd}/.git/config`)}))`,
  );
  if (options.deny.length > 0) {
    lines.push(`(deny file-read* file-write* ${options.deny.map(filter).join(' ')})`);
  }
  if ((options.readable ?? []).length > 0) {
    lines.push(
      `(allow file-read* ${(options.readable ?? []).map((path) => `(literal ${literal(path)})`).join(' ')})`,
    );
  }
  if (options.network === 'off') {
    lines.push('(deny network*)');
  }
  return `${lines.join('\n')}\n`;
}
