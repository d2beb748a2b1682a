// The checks `pnpm release` runs between the build and `changeset publish`: every public package is
// built and current, packs into a tarball fit to publish, and the pending changesets (the next
// CHANGELOG) speak of the product. `tsx tools/release/src/release-check.ts [root]`; exits 1 with
// every problem listed, so nothing is published from a half-good state.
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { checkPackage } from './check-package.mjs';
import { productTextProblems } from './product-text.js';
import { pack, tarballProblems } from './tarball.js';

export interface PublicPackage {
  readonly name: string;
  readonly version: string;
  readonly dir: string;
  readonly dependencies: Readonly<Record<string, string>>;
}

/** The workspace packages that publish (packages/*, not private). */
export function publicPackages(root: string): PublicPackage[] {
  const base = join(root, 'packages');
  return readdirSync(base)
    .sort()
    .filter((entry) => existsSync(join(base, entry, 'package.json')))
    .map((entry) => {
      const manifest = JSON.parse(readFileSync(join(base, entry, 'package.json'), 'utf8')) as {
        name: string;
        version: string;
        private?: boolean;
        dependencies?: Record<string, string>;
      };
      return { manifest, dir: join(base, entry) };
    })
    .filter(({ manifest }) => manifest.private !== true)
    .map(({ manifest, dir }) => ({
      name: manifest.name,
      version: manifest.version,
      dir,
      dependencies: manifest.dependencies ?? {},
    }));
}

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
    for (const pkg of publicPackages(root)) {
      const unbuilt = checkPackage(pkg.dir);
      if (unbuilt.length > 0) {
        problems.push(...unbuilt.map((problem) => `${pkg.name}: ${problem}`));
        continue;
      }
      problems.push(
        ...tarballProblems(pack(pkg.dir, destination)).map((problem) => `${pkg.name}: ${problem}`),
      );
    }
  } finally {
    rmSync(destination, { recursive: true, force: true });
  }
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
