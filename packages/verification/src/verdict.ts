// Reads the model's own `VERDICT: PASS|FAIL|PARTIAL` line, for reporting only: no code decides
// anything from it — completion is the model's judgment, in its prompt.
export type SelfVerdict = 'PASS' | 'FAIL' | 'PARTIAL';

export function parseVerdict(finalText: string): SelfVerdict | null {
  const matches = [...finalText.matchAll(/VERDICT:\s*\**\s*(PASS|FAIL|PARTIAL)\b/gi)];
  const last = matches.at(-1)?.[1];
  return last === undefined ? null : (last.toUpperCase() as SelfVerdict);
}
