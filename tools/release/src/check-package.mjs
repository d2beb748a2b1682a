// The `prepack` check of every published package: refuse to pack (or publish) a package whose build
// is missing, incomplete or stale, instead of shipping a tarball with no code in it. Plain
// JavaScript, so that it runs before anything is built; `node check-package.mjs [dir]`.
// Rule kept: every file the manifest points at exists, every production source file has its
// compiled `.js` and `.d.ts`, and nothing compiled lacks a source (a renamed file leaves no stale
// output behind). Timestamps prove nothing here (git and tsc's incremental build both leave
// sources newer than current outputs); `pnpm release` builds from clean for that.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import process from 'node:process';
import { join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';

/** @typedef {{ name: string, exports?: unknown, main?: string, types?: string, bin?: string | Record<string, string> }} Manifest */

/** @type {(text: string) => Manifest} */
const parseManifest = JSON.parse;

/**
 * Every path a manifest points at (`exports` conditions, `main`, `types`, `bin`), with where.
 * @param {Manifest} manifest
 * @returns {Array<{ path: string, field: string }>}
 */
export function manifestTargets(manifest) {
  /** @type {Array<{ path: string, field: string }>} */
  const targets = [];
  /** @param {unknown} value @param {string} field */
  const walk = (value, field) => {
    if (typeof value === 'string') targets.push({ path: value, field });
    else if (value !== null && typeof value === 'object') {
      for (const [key, inner] of Object.entries(value)) walk(inner, `${field}[${JSON.stringify(key)}]`);
    }
  };
  walk(manifest.exports, 'exports');
  if (manifest.main !== undefined) walk(manifest.main, 'main');
  if (manifest.types !== undefined) walk(manifest.types, 'types');
  if (manifest.bin !== undefined) walk(manifest.bin, 'bin');
  return targets.filter((target) => !target.path.includes('*'));
}

/**
 * @param {string} dir
 * @param {(name: string) => boolean} keep
 * @returns {string[]} paths relative to `dir`
 */
function filesUnder(dir, keep) {
  /** @type {string[]} */
  const out = [];
  /** @param {string} current */
  const walk = (current) => {
    if (!existsSync(current)) return;
    for (const entry of readdirSync(current).sort()) {
      const full = join(current, entry);
      if (statSync(full).isDirectory()) walk(full);
      else if (keep(entry)) out.push(relative(dir, full));
    }
  };
  walk(dir);
  return out;
}

const isProductionTs = (/** @type {string} */ name) =>
  /\.[mc]?tsx?$/.test(name) && !/\.(test|spec|bench)\.[mc]?tsx?$/.test(name) && !name.endsWith('.d.ts');

/**
 * The problems that make a package unfit to pack; none when it is built and current.
 * @param {string} dir the package folder
 * @returns {string[]}
 */
export function checkPackage(dir) {
  const manifest = parseManifest(readFileSync(join(dir, 'package.json'), 'utf8'));
  const problems = [];
  for (const { path, field } of manifestTargets(manifest)) {
    if (!existsSync(join(dir, path))) problems.push(`${path} (${field}) is missing`);
  }
  const sources = filesUnder(join(dir, 'src'), isProductionTs);
  for (const source of sources) {
    const stem = source.replace(/\.([mc]?)tsx?$/, '');
    const extension = source.match(/\.([mc]?)tsx?$/)?.[1] ?? '';
    for (const output of [`${stem}.${extension}js`, `${stem}.d.${extension}ts`]) {
      const built = join(dir, 'dist', output);
      if (!existsSync(built)) problems.push(`dist/${output} (from src/${source}) is missing`);
    }
  }
  const expected = new Set(sources.map((source) => source.replace(/\.([mc]?)tsx?$/, '.$1js')));
  for (const output of filesUnder(join(dir, 'dist'), (name) => /\.[mc]?js$/.test(name))) {
    if (!expected.has(output)) problems.push(`dist/${output} has no source in src/ (a stale build output)`);
  }
  return problems;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const dir = process.argv[2] ?? process.cwd();
  const manifest = parseManifest(readFileSync(join(dir, 'package.json'), 'utf8'));
  const name = manifest.name;
  const problems = checkPackage(dir);
  if (problems.length > 0) {
    process.stderr.write(
      `${name} is not built, or its build is stale; refusing to pack it:\n${problems
        .map((problem) => `  - ${problem}`)
        .join(
          '\n',
        )}\nRun \`pnpm build\` at the repository root (or \`pnpm release\`, which builds from clean).\n`,
    );
    process.exit(1);
  }
}
