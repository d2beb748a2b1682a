// A hook handler's `"if"` (Claude Code 2.1.85+): one permission rule (`Bash(git push *)`,
// `Edit(src/**)`, `Read(./.env)`, `mcp__github__*`) the tool call must match for the hook to run.
// Claude Code's permission syntax: a Bash rule is tried on each subcommand of a compound command,
// leading `VAR=value` stripped; file rules are gitignore-style paths (`//abs`, `~/home`, `/project`,
// `./cwd`). What Aleph cannot read is `unknown`: the caller runs the hook and says so, never guesses.
import { homedir } from 'node:os';
import { resolve } from 'node:path';
import picomatch from 'picomatch';

export type RuleMatch = 'match' | 'no_match' | { readonly unknown: string };

/** Claude Code's file tools: Edit rules cover every tool that edits a file, Read rules every reader. */
const EDITORS = ['Edit', 'Write', 'MultiEdit', 'NotebookEdit'];
const READERS = ['Read', 'LS', 'Grep', 'Glob'];

const escape = (text: string) => text.replace(/[.+?^${}()|[\]\\]/g, '\\$&');

/** `Bash(npm run test:*)` is a prefix; a lone trailing ` *` is optional (`git *` matches `git`). */
function commandPattern(specifier: string): RegExp {
  if (specifier.endsWith(':*')) return new RegExp(`^${escape(specifier.slice(0, -2))}(?:\\s.*)?$`, 's');
  const stars = specifier.split('*').length - 1;
  if (stars === 1 && specifier.endsWith(' *'))
    return new RegExp(`^${escape(specifier.slice(0, -2))}(?:\\s.*)?$`, 's');
  return new RegExp(`^${specifier.split('*').map(escape).join('.*')}$`, 's');
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
  const toolMatches = ruleTool.includes('*')
    ? names.some((name) => new RegExp(`^${ruleTool.split('*').map(escape).join('.*')}$`).test(name))
    : names.includes(ruleTool) ||
      (ruleTool === 'Edit' && EDITORS.includes(tool)) ||
      (ruleTool === 'Read' && READERS.includes(tool));
  if (!toolMatches) return 'no_match';
  if (specifier === undefined || specifier === '' || specifier === '*') return 'match';
  const fields = input !== null && typeof input === 'object' ? (input as Record<string, unknown>) : {};
  if (tool === 'Bash' && typeof fields['command'] === 'string') {
    const commands = subcommands(fields['command']);
    if (commands === undefined)
      return { unknown: `the command is too complex for Aleph to split into subcommands for "${rule}"` };
    const pattern = commandPattern(specifier);
    return commands.some((command) => pattern.test(command)) ? 'match' : 'no_match';
  }
  const path = fields['file_path'] ?? fields['path'];
  if ([...EDITORS, ...READERS].includes(tool) && typeof path === 'string')
    return picomatch(pathPattern(specifier, projectDir), { dot: true })(path) ? 'match' : 'no_match';
  return { unknown: `Aleph cannot read the specifier of "${rule}" for a ${tool} call` };
}
