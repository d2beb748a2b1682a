// The line-budget ratchet (the seed's dated `CEILING = 5055, 2026-07-26`): a package's production
// source may not grow past its ceiling of lines or files, may not sit more than a small slack under
// it (a shrink lowers the ceiling in the same commit), and every ceiling is the last entry of the
// package's section in the ledger, each entry dated and with its reason. The code is the authority;
// docs only copy these figures.
import { readFileSync } from 'node:fs';
import { countLines, productionSources, readWorkspace } from './workspace.js';

export interface Ceiling {
  readonly lines: number;
  readonly files: number;
}

export interface BudgetFigure {
  readonly pkg: string;
  readonly lines: number;
  readonly files: number;
  readonly ceiling: Ceiling | undefined;
}

export interface BudgetReport {
  readonly figures: BudgetFigure[];
  readonly failures: string[];
}

export const LEDGER_PATH = 'tools/shape/ledger.md';
export const CEILING_PATH = 'tools/shape/src/line-budget.test.ts';

/**
 * Headroom tolerated under a line ceiling before the test asks for it to be lowered: 1% of the
 * ceiling, at least 5 lines. Small enough that a package cannot bank a function's worth of lines to
 * spend later without a ledger entry; large enough that rewrapping a comment or merging two imports
 * does not need one. Files have no slack: a deleted file lowers the file ceiling.
 */
export function lineSlack(ceiling: number): number {
  return Math.max(5, Math.floor(ceiling / 100));
}

export function measure(root: string): Omit<BudgetFigure, 'ceiling'>[] {
  return readWorkspace(root).map((pkg) => {
    const files = productionSources(pkg);
    const lines = files.reduce((sum, file) => sum + countLines(readFileSync(file, 'utf8')), 0);
    return { pkg: pkg.short, lines, files: files.length };
  });
}

export function checkLineBudget(root: string, ceilings: Readonly<Record<string, Ceiling>>): BudgetReport {
  const failures: string[] = [];
  const figures = measure(root).map((figure) => ({ ...figure, ceiling: ceilings[figure.pkg] }));
  for (const { pkg, lines, files, ceiling } of figures) {
    if (ceiling === undefined) {
      failures.push(
        `@aleph/${pkg} has no CEILING: add one (${lines} lines, ${files} files) to ${CEILING_PATH} and a dated entry to ${LEDGER_PATH}`,
      );
      continue;
    }
    if (lines > ceiling.lines) {
      failures.push(
        `@aleph/${pkg} has ${lines} lines of production source, over its CEILING of ${ceiling.lines}`,
      );
    }
    if (files > ceiling.files) {
      failures.push(
        `@aleph/${pkg} has ${files} production source files, over its CEILING of ${ceiling.files}`,
      );
    }
    const slack = lineSlack(ceiling.lines);
    if (ceiling.lines - lines > slack) {
      failures.push(
        `@aleph/${pkg} has ${lines} lines, ${ceiling.lines - lines} under its CEILING of ${ceiling.lines} (slack ${slack}): lower the CEILING to ${lines} in this commit, with a ledger entry`,
      );
    }
    if (files < ceiling.files) {
      failures.push(
        `@aleph/${pkg} has ${files} production source files, under its CEILING of ${ceiling.files}: lower it to ${files} in this commit, with a ledger entry`,
      );
    }
  }
  return { figures, failures };
}

export interface LedgerEntry {
  readonly pkg: string;
  readonly date: string;
  readonly lines: number;
  readonly files: number;
  readonly reason: string;
  /** 1-based line in the ledger file. */
  readonly line: number;
}

const SECTION = /^## (\S+)\s*$/;
const ENTRY = /^- (\d{4}-\d{2}-\d{2}) lines (\d+) files (\d+): (.*)$/;
const MIN_REASON = 12;

/** Parses the ledger; malformed lines are failures, never skipped. */
export function parseLedger(text: string): { entries: LedgerEntry[]; failures: string[] } {
  const entries: LedgerEntry[] = [];
  const failures: string[] = [];
  let pkg: string | undefined;
  text.split('\n').forEach((raw, index) => {
    const line = index + 1;
    const section = SECTION.exec(raw);
    if (section !== null) {
      pkg = section[1]?.replace(/^@aleph\//, '');
      return;
    }
    if (!raw.startsWith('- ') || pkg === undefined) return;
    const entry = ENTRY.exec(raw.trimEnd());
    if (entry === null) {
      failures.push(`${LEDGER_PATH}:${line}: not an entry; write "- YYYY-MM-DD lines N files N: reason"`);
      return;
    }
    const [, date = '', lines = '', files = '', reason = ''] = entry;
    const parsed = new Date(`${date}T00:00:00Z`);
    if (Number.isNaN(parsed.getTime()) || parsed.toISOString().slice(0, 10) !== date) {
      failures.push(`${LEDGER_PATH}:${line}: ${date} is not a date`);
      return;
    }
    if (reason.trim().length < MIN_REASON) {
      failures.push(
        `${LEDGER_PATH}:${line}: the reason "${reason.trim()}" says nothing; say what grew and why`,
      );
    }
    entries.push({ pkg, date, lines: Number(lines), files: Number(files), reason: reason.trim(), line });
  });
  return { entries, failures };
}

/**
 * Holds every ceiling to the ledger: each package's entries are in date order, none is dated after
 * `today` (a day of grace for time zones), and the last one is the CEILING, lines and files.
 */
export function checkLedger(
  ledgerText: string,
  ceilings: Readonly<Record<string, Ceiling>>,
  today: Date = new Date(),
): string[] {
  const { entries, failures } = parseLedger(ledgerText);
  const latest = new Date(today.getTime() + 24 * 3600 * 1000).toISOString().slice(0, 10);
  const last = new Map<string, LedgerEntry>();
  for (const entry of entries) {
    const previous = last.get(entry.pkg);
    if (previous !== undefined && entry.date < previous.date) {
      failures.push(
        `${LEDGER_PATH}:${entry.line}: ${entry.date} comes after ${previous.date}: append, in date order`,
      );
    }
    if (entry.date > latest) failures.push(`${LEDGER_PATH}:${entry.line}: ${entry.date} is in the future`);
    last.set(entry.pkg, entry);
  }
  for (const [pkg, ceiling] of Object.entries(ceilings)) {
    const entry = last.get(pkg);
    if (entry === undefined) {
      failures.push(
        `@aleph/${pkg} has a CEILING but no entry in ${LEDGER_PATH}: add "## ${pkg}" and a dated entry`,
      );
    } else if (entry.lines !== ceiling.lines || entry.files !== ceiling.files) {
      failures.push(
        `@aleph/${pkg}: CEILING is ${ceiling.lines} lines, ${ceiling.files} files, but the last entry of ${LEDGER_PATH} (line ${entry.line}) says ${entry.lines} lines, ${entry.files} files: every change of a CEILING appends a dated entry with its reason`,
      );
    }
  }
  for (const pkg of last.keys()) {
    if (!(pkg in ceilings)) failures.push(`${LEDGER_PATH} has a section for ${pkg}, which has no CEILING`);
  }
  return failures;
}
