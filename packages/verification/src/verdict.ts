// Reads the model's own `VERDICT: PASS|FAIL|PARTIAL` line, for reporting only: no code decides
// anything from it — completion is the model's judgment, in its prompt.
export type SelfVerdict = 'PASS' | 'FAIL' | 'PARTIAL';

export function parseVerdict(finalText: string): SelfVerdict | null {
  // One class for the spaces and stars between: `\s*\**\s*` tried every split of a run of spaces,
  // time in its square (200,000 spaces after `VERDICT:` held the server 34 s; a 4 MiB reply, hours).
  const matches = [...finalText.matchAll(/VERDICT:[\s*]*(PASS|FAIL|PARTIAL)\b/gi)];
  const last = matches.at(-1)?.[1];
  return last === undefined ? null : (last.toUpperCase() as SelfVerdict);
}
