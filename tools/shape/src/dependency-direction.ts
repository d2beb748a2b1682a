// The package graph of DESIGN.md, checked against every manifest and every import in production
// source. A violation names the file (or manifest) and the offending import.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { productionSources, readWorkspace, relativeTo, type WorkspacePackage } from './workspace.js';

/** Which `@aleph/*` packages each package may depend on. Anything absent may depend on nothing. */
export const ALLOWED_DEPENDENCIES: Readonly<Record<string, readonly string[]>> = {
  power: [],
  pty: [],
  verification: [],
  harness: ['verification', 'power'],
  gateway: ['pty'],
  sandbox: [],
  console: ['gateway'],
  server: ['power', 'pty', 'verification', 'harness', 'gateway', 'sandbox'],
};

export interface Violation {
  readonly file: string;
  readonly importPath: string;
  readonly message: string;
}

export function importsOf(sourceText: string): string[] {
  return ts.preProcessFile(sourceText, true, true).importedFiles.map((ref) => ref.fileName);
}

function exportedSubpaths(pkg: WorkspacePackage | undefined): Set<string> {
  return new Set(Object.keys(pkg?.manifest.exports ?? { '.': null }));
}

export function checkDependencyDirection(
  root: string,
  allowed: Readonly<Record<string, readonly string[]>> = ALLOWED_DEPENDENCIES,
): Violation[] {
  const packages = readWorkspace(root);
  const byShort = new Map(packages.map((pkg) => [pkg.short, pkg]));
  const violations: Violation[] = [];
  const edge = (from: WorkspacePackage, target: string, file: string, importPath: string): void => {
    if (target === from.short) return;
    if (target === 'server') {
      violations.push({
        file,
        importPath,
        message: `@aleph/${from.short} imports @aleph/server: nothing may`,
      });
    } else if (!(allowed[from.short] ?? []).includes(target)) {
      violations.push({
        file,
        importPath,
        message: `@aleph/${from.short} may not depend on @aleph/${target} (allowed: ${
          (allowed[from.short] ?? []).join(', ') || 'none'
        })`,
      });
    }
  };

  for (const pkg of packages) {
    const manifestFile = relativeTo(root, join(pkg.dir, 'package.json'));
    for (const field of ['dependencies', 'devDependencies', 'peerDependencies'] as const) {
      for (const dep of Object.keys(pkg.manifest[field] ?? {})) {
        if (dep.startsWith('@aleph/')) edge(pkg, dep.slice('@aleph/'.length), manifestFile, dep);
      }
    }
    for (const file of productionSources(pkg)) {
      const rel = relativeTo(root, file);
      for (const specifier of importsOf(readFileSync(file, 'utf8'))) {
        const match = /^@aleph\/([^/]+)(\/.*)?$/.exec(specifier);
        if (match === null) continue;
        const [, target = '', rest] = match;
        if (rest !== undefined && !exportedSubpaths(byShort.get(target)).has(`.${rest}`)) {
          violations.push({
            file: rel,
            importPath: specifier,
            message: `deep import ${specifier}: packages reach each other only through their exports`,
          });
          continue;
        }
        edge(pkg, target, rel, specifier);
      }
    }
  }
  return violations;
}
