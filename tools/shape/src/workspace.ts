// Reads a pnpm workspace the way the shape rules see it: its packages, their manifests and the
// production source files (`src/**/*.ts`, tests and benchmarks excluded).
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

export interface WorkspacePackage {
  /** The short name: `pty` for `@aleph/pty`, `server` for `@aleph/server`. */
  readonly short: string;
  readonly name: string;
  readonly dir: string;
  readonly manifest: {
    dependencies?: Record<string, string>;
    devDependencies?: Record<string, string>;
    peerDependencies?: Record<string, string>;
    exports?: Record<string, unknown>;
  };
}

export const PACKAGE_FOLDERS = ['packages', 'apps'] as const;

export function readWorkspace(root: string): WorkspacePackage[] {
  const found: WorkspacePackage[] = [];
  for (const folder of PACKAGE_FOLDERS) {
    const base = join(root, folder);
    if (!existsSync(base)) continue;
    for (const entry of readdirSync(base).sort()) {
      const manifestPath = join(base, entry, 'package.json');
      if (!existsSync(manifestPath)) continue;
      const manifest = JSON.parse(readFileSync(manifestPath, 'utf8')) as WorkspacePackage['manifest'] & {
        name: string;
      };
      found.push({
        short: manifest.name.replace(/^@aleph\//, ''),
        name: manifest.name,
        dir: join(base, entry),
        manifest,
      });
    }
  }
  return found;
}

export function isProductionSource(file: string): boolean {
  return (
    /\.(ts|tsx|mts|cts)$/.test(file) &&
    !/\.(test|spec|bench)\.[mc]?tsx?$/.test(file) &&
    !file.endsWith('.d.ts')
  );
}

export function productionSources(pkg: WorkspacePackage): string[] {
  const src = join(pkg.dir, 'src');
  if (!existsSync(src)) return [];
  const out: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir).sort()) {
      const full = join(dir, entry);
      if (statSync(full).isDirectory()) walk(full);
      else if (isProductionSource(full)) out.push(full);
    }
  };
  walk(src);
  return out;
}

export function relativeTo(root: string, file: string): string {
  return relative(root, file);
}
