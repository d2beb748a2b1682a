// Reads a pnpm workspace the way the shape rules see it: its packages, their manifests and their
// production source. Production source is every source file under the package folder — TypeScript,
// JavaScript, C, shell, CSS, HTML, Python, executable scripts — except tests, benchmarks, test
// support, fixtures, tool configuration and build output. The rule is by place and name, never by
// a list of known files, so a new `src/extra.js` or `lib/big.ts` is counted the moment it appears.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { extname, join, relative } from 'node:path';

export interface WorkspacePackage {
  /** The short name: `pty` for `@aleph/pty`, `server` for `@aleph/server`. */
  readonly short: string;
  readonly name: string;
  readonly dir: string;
  readonly manifest: Manifest;
}

export interface Manifest {
  readonly name: string;
  readonly private?: boolean;
  readonly dependencies?: Record<string, string>;
  readonly devDependencies?: Record<string, string>;
  readonly peerDependencies?: Record<string, string>;
  readonly optionalDependencies?: Record<string, string>;
  readonly exports?: Record<string, unknown>;
}

export const PACKAGE_FOLDERS = ['packages', 'apps'] as const;

/** Extensions of source files; an extensionless file counts when it starts with `#!`. */
export const SOURCE_EXTENSIONS: ReadonlySet<string> = new Set([
  ...['.ts', '.tsx', '.mts', '.cts', '.js', '.jsx', '.mjs', '.cjs'],
  ...['.c', '.h', '.cc', '.cpp', '.hpp'],
  ...['.sh', '.bash', '.py'],
  ...['.css', '.html'],
]);

/** Extensions whose imports the dependency rule reads. */
export const SCRIPT_EXTENSIONS: ReadonlySet<string> = new Set([
  '.ts',
  '.tsx',
  '.mts',
  '.cts',
  '.js',
  '.jsx',
  '.mjs',
  '.cjs',
]);

/** Folders that hold no production source: build output, dependencies, tests, benches, fixtures. */
export const SKIPPED_FOLDERS: ReadonlySet<string> = new Set([
  'node_modules',
  'dist',
  'build',
  'coverage',
  'test',
  'tests',
  '__tests__',
  'bench',
  'benches',
  'fixtures',
  '__fixtures__',
  'docs',
]);

export function readWorkspace(root: string): WorkspacePackage[] {
  const found: WorkspacePackage[] = [];
  for (const folder of PACKAGE_FOLDERS) {
    const base = join(root, folder);
    if (!existsSync(base)) continue;
    for (const entry of readdirSync(base).sort()) {
      const manifestPath = join(base, entry, 'package.json');
      if (!existsSync(manifestPath)) continue;
      const manifest = JSON.parse(readFileSync(manifestPath, 'utf8')) as Manifest;
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

/** Whether a file name (not its folder) is a test, a benchmark or a tool's configuration. */
export function isTestOrToolFile(fileName: string): boolean {
  return (
    /\.(test|spec|bench)\.[a-z]+$/.test(fileName) ||
    /^[a-z-]+\.config\.[mc]?[jt]s$/.test(fileName) ||
    /^tsconfig.*\.json$/.test(fileName)
  );
}

function isSourceFile(file: string, fileName: string): boolean {
  if (isTestOrToolFile(fileName)) return false;
  const extension = extname(fileName);
  if (SOURCE_EXTENSIONS.has(extension)) return true;
  if (extension !== '') return false;
  return readFileSync(file, 'utf8').startsWith('#!');
}

/**
 * Every production source file of a package, sorted. A sub-folder that is a test project of its
 * own (it has a `vitest.config.*`) is test code, like `test/`.
 */
export function productionSources(pkg: WorkspacePackage): string[] {
  const out: string[] = [];
  const walk = (dir: string, isRoot: boolean): void => {
    const entries = readdirSync(dir).sort();
    if (!isRoot && entries.some((entry) => /^vitest\.config\.[mc]?[jt]s$/.test(entry))) return;
    for (const entry of entries) {
      const full = join(dir, entry);
      if (statSync(full).isDirectory()) {
        if (!entry.startsWith('.') && !SKIPPED_FOLDERS.has(entry)) walk(full, false);
      } else if (isSourceFile(full, entry)) {
        out.push(full);
      }
    }
  };
  walk(pkg.dir, true);
  return out;
}

/** The production source files whose imports are read (TypeScript and JavaScript). */
export function scriptSources(pkg: WorkspacePackage): string[] {
  return productionSources(pkg).filter((file) => SCRIPT_EXTENSIONS.has(extname(file)));
}

/** Lines as `wc -l` counts them, plus a last line without its newline. */
export function countLines(text: string): number {
  if (text.length === 0) return 0;
  let lines = 0;
  for (let index = text.indexOf('\n'); index !== -1; index = text.indexOf('\n', index + 1)) lines += 1;
  return text.endsWith('\n') ? lines : lines + 1;
}

export function relativeTo(root: string, file: string): string {
  return relative(root, file);
}
