// The checks `pnpm release` runs between the build and `changeset publish`: every public package is
// built and current, packs into a tarball fit to publish, and the pending changesets (the next
// CHANGELOG) speak of the product, and each package's API report is current and covered by a
// changeset. `tsx tools/release/src/release-check.ts [root]`; exits 1 with
// every problem listed, so nothing is published from a half-good state.
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { apiReportProblems } from './api-report.js';
import { checkPackage } from './check-package.mjs';
import { productTextProblems } from './product-text.js';
import { publicPackages } from './public-packages.js';
import { packAll, tarballProblems } from './tarball.js';

/** Problems in the pending changesets' text, by file. */
export function changesetProblems(root: string): string[] {
  const dir = join(root, '.changeset');
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((file) => file.endsWith('.md') && file !== 'README.md')
    .sort()
    .flatMap((file) =>
      productTextProblems(readFileSync(join(dir, file), 'utf8')).map(
        (problem) => `.changeset/${file}:${problem}`,
      ),
    );
}

export function releaseProblems(root: string): string[] {
  const problems = changesetProblems(root);
  const destination = mkdtempSync(join(tmpdir(), 'aleph-release-check-'));
  try {
    const built: string[] = [];
    for (const pkg of publicPackages(root)) {
      const unbuilt = checkPackage(pkg.dir);
      if (unbuilt.length > 0) problems.push(...unbuilt.map((problem) => `${pkg.name}: ${problem}`));
      else built.push(pkg.name);
    }
    for (const [name, tarball] of packAll(root, built, destination)) {
      problems.push(...tarballProblems(tarball).map((problem) => `${name}: ${problem}`));
    }
  } finally {
    rmSync(destination, { recursive: true, force: true });
  }
  if (problems.length === 0) problems.push(...apiReportProblems(root));
  return problems;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const root = resolve(process.argv[2] ?? '.');
  const problems = releaseProblems(root);
  if (problems.length > 0) {
    process.stderr.write(`Not releasable:\n${problems.map((problem) => `  - ${problem}`).join('\n')}\n`);
    process.exit(1);
  }
  process.stdout.write(`release checks: ${publicPackages(root).length} packages fit to publish\n`);
}
