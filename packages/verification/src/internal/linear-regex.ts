// Regular expressions matched in time linear in the text, by RE2 (re2js): a settings file's hook
// `matcher` and `if` rule may be the project's (the model's), and V8's backtracking engine takes
// exponential time on `(a+)+$` or `(a|a)*$`, and n^k on `.*a.*a.*a.*b`, holding the server's event
// loop for hours. What RE2 refuses (a backreference, a lookaround, other syntax it lacks) is refused
// with the reason, never handed to V8.
import { RE2JS } from 're2js';

export interface LinearRegex {
  /** Whether the pattern matches somewhere in `text`. */
  test(text: string): boolean;
}

/** Compiled patterns, by flags and source (the same few are tried on every tool call). */
const compiled = new Map<string, LinearRegex | { readonly problem: string }>();

function refusal(source: string, error: unknown): string {
  if (/\\[1-9]|\\k</.test(source))
    return 'uses a backreference, which Aleph does not match (it can take exponential time)';
  if (/\(\?<?[=!]/.test(source))
    return 'uses a lookaround, which Aleph does not match (it can take exponential time)';
  return `is not supported by Aleph's linear-time matcher (${(error as Error).message})`;
}

/**
 * Compiles `source` (JavaScript's syntax, translated for RE2; `dotAll`: `.` matches line ends too)
 * for a linear-time test, or says why it is refused.
 */
export function compileLinear(
  source: string,
  options: { readonly dotAll?: boolean } = {},
): LinearRegex | { readonly problem: string } {
  const key = `${options.dotAll === true ? 's' : '-'}${source}`;
  let found = compiled.get(key);
  if (found === undefined) {
    try {
      const flags = options.dotAll === true ? RE2JS.DOTALL : 0;
      found = RE2JS.compile(RE2JS.translateRegExp(source), flags);
    } catch (error) {
      found = { problem: refusal(source, error) };
    }
    if (compiled.size >= 256) compiled.clear();
    compiled.set(key, found);
  }
  return found;
}
