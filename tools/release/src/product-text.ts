// Published text speaks of the product: what it does for whoever installs it. Words about how the
// project is built — test rounds, testers' findings, issue numbers, internal contracts, the line
// budget — are noise to a consumer and are refused in tarballs (READMEs, CHANGELOGs, sources and
// declarations) and in pending changesets, which become the CHANGELOG.

/** Each pattern with what to write instead. */
export const NOT_PRODUCT_TEXT: ReadonlyArray<{ pattern: RegExp; instead: string }> = [
  { pattern: /\btesters?\s?\d*\b/i, instead: 'say what the user saw, not who found it' },
  { pattern: /\bissue[\s-]?#?\d+/i, instead: 'say what changed, not which issue asked for it' },
  { pattern: /\bTEAM\b/, instead: "name the API (e.g. `Sandbox.wrap`), not the team's contract" },
  { pattern: /\bcontract \d+\b/i, instead: "name the API, not the team's contract" },
  { pattern: /\bCEILING\b/, instead: 'the line budget belongs in the commit message' },
  {
    pattern: /\b(hooks|runs|tester|round)\d+\b/i,
    instead: 'say what the user saw, not which test round found it',
  },
  { pattern: /\bthe seed('s)?\b/i, instead: 'describe the behaviour itself' },
];

/** `line: "excerpt" (what to write instead)` for every offending line. */
export function productTextProblems(text: string): string[] {
  const problems: string[] = [];
  text.split('\n').forEach((line, index) => {
    for (const { pattern, instead } of NOT_PRODUCT_TEXT) {
      const match = pattern.exec(line);
      if (match !== null) problems.push(`${index + 1}: "${match[0]}" — ${instead}`);
    }
  });
  return problems;
}
