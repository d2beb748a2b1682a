// A hook handler's `"if"` (Claude Code 2.1.85+): one permission rule (`Bash(git push *)`,
// `Edit(src/**)`, `Read(./.env)`, `mcp__github__*`) the tool call must match for the hook to run.
// Claude Code's permission syntax: a Bash rule is tried on each subcommand of a compound command,
// leading `VAR=value` stripped; file rules are gitignore-style paths (`//abs`, `~/home`, `/project`,
// `./cwd`). What Aleph cannot read is `unknown`: the caller runs the hook and says so, never guesses.
// Every pattern is matched in time linear in the command or path (the rule may be the model's, the
// command and the path are): `Bash(*a*a*a*a*b)` on a long command held V8's regex engine for hours.
import { homedir } from 'node:os';
import { resolve } from 'node:path';
import { compileLinear } from './linear-regex.js';

export type RuleMatch = 'match' | 'no_match' | { readonly unknown: string };

/** Claude Code's file tools: Edit rules cover every tool that edits a file, Read rules every reader. */
const EDITORS = ['Edit', 'Write', 'MultiEdit', 'NotebookEdit'];
const READERS = ['Read', 'LS', 'Grep', 'Glob'];

const escape = (text: string) => text.replace(/[.+?^${}()|[\]\\]/g, '\\$&');

/** `Bash(npm run test:*)` is a prefix; a lone trailing ` *` is optional (`git *` matches `git`). */
function commandPattern(specifier: string): string {
  if (specifier.endsWith(':*')) return `^${escape(specifier.slice(0, -2))}(?:\\s.*)?$`;
  const stars = specifier.split('*').length - 1;
  if (stars === 1 && specifier.endsWith(' *')) return `^${escape(specifier.slice(0, -2))}(?:\\s.*)?$`;
  return `^${specifier.split('*').map(escape).join('.*')}$`;
}

/** Whether the pattern matches any of `texts`, in linear time; `unknown` (why) when RE2 refuses it. */
function matchesAny(pattern: string, texts: readonly string[], rule: string): RuleMatch {
  const linear = compileLinear(pattern, { dotAll: true });
  if ('problem' in linear) return { unknown: `"${rule}" ${linear.problem}` };
  return texts.some((text) => linear.test(text)) ? 'match' : 'no_match';
}

/**
 * A gitignore-style glob as an RE2 pattern (picomatch's regexes use lookaheads, which RE2 refuses): `**` any folders (none too), `*` and `?` within one name,
 * `[...]` a class (`[!...]` negated), `{a,b}` either; the rest literal.
 */
export function globPattern(glob: string): string {
  const translate = (from: number, stop: string): [string, number] => {
    let out = '';
    let at = from;
    while (at < glob.length && !stop.includes(glob[at]!)) {
      const char = glob[at]!;
      if (glob.startsWith('**', at)) {
        const whole = (at === 0 || glob[at - 1] === '/') && (at + 2 === glob.length || glob[at + 2] === '/');
        if (whole && at + 2 < glob.length) {
          out += '(?:.*/)?'; // `**/`: any folders, or none
          at += 3;
        } else if (whole && out.endsWith('/')) {
          out = `${out.slice(0, -1)}(?:/.*)?`; // a trailing `/**`: the folder itself too
          at += 2;
        } else {
          out += whole ? '.*' : '[^/]*';
          at += 2;
        }
      } else if (char === '*' || char === '?') {
        out += char === '*' ? '[^/]*' : '[^/]';
        at += 1;
      } else if (char === '\\' && at + 1 < glob.length) {
        out += escape(glob[at + 1]!);
        at += 2;
      } else if (char === '[' && glob.indexOf(']', at + 2) > 0) {
        const close = glob.indexOf(']', at + 2);
        const body = glob
          .slice(at + 1, close)
          .replace(/^!/, '^')
          .replace(/[\\\]]/g, '\\$&');
        out += `[${body}]`;
        at = close + 1;
      } else if (char === '{') {
        const options: string[] = [];
        let next = at + 1;
        let closed = false;
        for (;;) {
          const [option, end] = translate(next, ',}');
          options.push(option);
          if (glob[end] === ',') next = end + 1;
          else {
            closed = glob[end] === '}';
            next = end + 1;
            break;
          }
        }
        const either = closed && options.length > 1;
        out += either ? `(?:${options.join('|')})` : '\\{';
        at = either ? next : at + 1;
      } else {
        out += escape(char);
        at += 1;
      }
    }
    return [out, at];
  };
  return `^${translate(0, '')[0]}$`;
}

/** The simple commands of a command line, env prefixes stripped; undefined when too complex to split. */
export function subcommands(command: string): string[] | undefined {
  const parts: string[] = [];
  let current = '';
  let quote: "'" | '"' | undefined;
  for (let index = 0; index < command.length; index += 1) {
    const char = command[index]!;
    if (quote !== undefined) {
      if (quote === '"' && (char === '`' || (char === '$' && command[index + 1] === '('))) return undefined;
      if (quote === '"' && char === '\\') {
        current += char + (command[index + 1] ?? '');
        index += 1;
        continue;
      }
      if (char === quote) quote = undefined;
      current += char;
      continue;
    }
    if (char === "'" || char === '"') quote = char;
    else if (char === '\\') {
      current += char + (command[index + 1] ?? '');
      index += 1;
      continue;
    } else if (char === '`' || char === '(' || char === ')' || char === '{' || char === '}') return undefined;
    // `2>&1`, `&>` are redirections, not separators.
    else if (
      (char === '&' && command[index - 1] !== '>' && command[index + 1] !== '>') ||
      ';|\n'.includes(char)
    ) {
      parts.push(current);
      current = '';
      continue;
    }
    current += char;
  }
  if (quote !== undefined) return undefined;
  parts.push(current);
  return parts
    .map((part) => part.trim().replace(/^(?:\w+=(?:'[^']*'|"[^"]*"|\S*)\s+)+/, ''))
    .map((part) => part.replace(/\s+/g, ' ').trim())
    .filter((part) => part !== '');
}

/** A gitignore-style path pattern, absolute; one without a `/` matches at any depth. */
function pathPattern(specifier: string, projectDir: string): string {
  if (specifier.startsWith('//')) return specifier.slice(1);
  if (specifier.startsWith('~/')) return resolve(homedir(), specifier.slice(2));
  if (specifier.startsWith('/')) return resolve(projectDir, specifier.slice(1));
  if (!specifier.includes('/')) return `${resolve(projectDir)}/**/${specifier}`;
  return resolve(projectDir, specifier);
}

/**
 * Does a call of `tool` (Claude Code's name; `alephName` beside it) with Claude Code's `input`
 * match `rule`? `projectDir` anchors relative paths.
 */
export function matchPermissionRule(
  rule: string,
  tool: string,
  alephName: string,
  input: unknown,
  projectDir: string,
): RuleMatch {
  const parsed = /^([\w.*-]+)(?:\((.*)\))?$/s.exec(rule.trim());
  if (parsed === null) return { unknown: `"${rule}" is not a permission rule (Tool or Tool(specifier))` };
  const [, ruleTool = '', specifier] = parsed;
  const names = [tool, alephName];
  if (ruleTool.includes('*')) {
    const byName = matchesAny(`^${ruleTool.split('*').map(escape).join('.*')}$`, names, rule);
    if (byName !== 'match') return byName;
  } else if (
    !names.includes(ruleTool) &&
    !(ruleTool === 'Edit' && EDITORS.includes(tool)) &&
    !(ruleTool === 'Read' && READERS.includes(tool))
  )
    return 'no_match';
  if (specifier === undefined || specifier === '' || specifier === '*') return 'match';
  const fields = input !== null && typeof input === 'object' ? (input as Record<string, unknown>) : {};
  if (tool === 'Bash' && typeof fields['command'] === 'string') {
    const commands = subcommands(fields['command']);
    if (commands === undefined)
      return { unknown: `the command is too complex for Aleph to split into subcommands for "${rule}"` };
    return matchesAny(commandPattern(specifier), commands, rule);
  }
  const path = fields['file_path'] ?? fields['path'];
  if ([...EDITORS, ...READERS].includes(tool) && typeof path === 'string')
    return matchesAny(globPattern(pathPattern(specifier, projectDir)), [path], rule);
  return { unknown: `Aleph cannot read the specifier of "${rule}" for a ${tool} call` };
}
