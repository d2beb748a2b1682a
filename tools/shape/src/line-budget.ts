// The line-budget ratchet (the seed's CEILING rule): each package's production source may not grow
// past its ceiling of lines or of files. The code is the authority; docs only copy these figures.
import { readFileSync } from 'node:fs';
import { productionSources, readWorkspace } from './workspace.js';

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
  /** Packages 10% or more below a ceiling: lower it to lock the gain in. */
  readonly reminders: string[];
}

export function measure(root: string): Omit<BudgetFigure, 'ceiling'>[] {
  return readWorkspace(root).map((pkg) => {
    const files = productionSources(pkg);
    const lines = files.reduce((sum, file) => sum + readFileSync(file, 'utf8').split('\n').length, 0);
    return { pkg: pkg.short, lines, files: files.length };
  });
}

export function checkLineBudget(root: string, ceilings: Readonly<Record<string, Ceiling>>): BudgetReport {
  const failures: string[] = [];
  const reminders: string[] = [];
  const figures = measure(root).map((figure) => ({ ...figure, ceiling: ceilings[figure.pkg] }));
  for (const { pkg, lines, files, ceiling } of figures) {
    if (ceiling === undefined) {
      failures.push(`@aleph/${pkg} has no CEILING: add one to tools/shape/src/line-budget.test.ts`);
      continue;
    }
    if (lines > ceiling.lines) {
      failures.push(
        `@aleph/${pkg} has ${lines} lines of production source, over its CEILING of ${ceiling.lines}`,
      );
    }
    if (files > ceiling.files) {
      failures.push(
        `@aleph/${pkg} has ${files} production source files, over its ceiling of ${ceiling.files}`,
      );
    }
    if (lines <= ceiling.lines * 0.9 && ceiling.lines > 0) {
      reminders.push(
        `@aleph/${pkg} sits at ${lines} lines, 10%+ under its CEILING of ${ceiling.lines}: lower it`,
      );
    }
  }
  return { figures, failures, reminders };
}
