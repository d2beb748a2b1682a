// What a published package's tarball must hold, read from the tarball itself (`pnpm pack`, as
// `changeset publish` packs): the files the manifest points at, a README and a LICENSE, no build
// bookkeeping (`.tsbuildinfo`), no tests or benches, every source map pointing at a file that ships,
// and product text only (see product-text.ts).
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, posix } from 'node:path';
import { manifestTargets } from './check-package.mjs';
import { productTextProblems } from './product-text.js';

export interface PackedFile {
  /** Path inside the package, without the tarball's `package/` prefix. */
  readonly path: string;
  readonly text: string;
}

export interface Tarball {
  readonly name: string;
  readonly version: string;
  readonly file: string;
  readonly files: readonly PackedFile[];
}

/**
 * Packs the workspace packages named (in the workspace at `root`) into `destination`, which must
 * be empty, with one `pnpm pack --recursive` (each package packed as `pack` packs it), and reads
 * every tarball back, by package name.
 */
export function packAll(root: string, names: readonly string[], destination: string): Map<string, Tarball> {
  if (names.length === 0) return new Map();
  const filters = names.flatMap((name) => ['--filter', name]);
  const packed = spawnSync(
    'pnpm',
    ['pack', '--recursive', ...filters, '--workspace-concurrency', '4', '--pack-destination', destination],
    { cwd: root, encoding: 'utf8' },
  );
  if (packed.status !== 0) throw new Error(`pnpm pack --recursive failed:\n${packed.stdout}${packed.stderr}`);
  const tarballs = new Map(
    readdirSync(destination)
      .filter((file) => file.endsWith('.tgz'))
      .map((file) => readTarball(join(destination, file)))
      .map((tarball) => [tarball.name, tarball] as const),
  );
  const missing = names.filter((name) => !tarballs.has(name));
  if (missing.length > 0) throw new Error(`pnpm pack --recursive made no tarball for ${missing.join(', ')}`);
  return tarballs;
}

/** Every file of a package tarball (`.tgz`), read back. */
export function readTarball(file: string): Tarball {
  const unpacked = mkdtempSync(join(tmpdir(), 'aleph-unpack-'));
  try {
    const untar = spawnSync('tar', ['-xzf', file, '-C', unpacked], { encoding: 'utf8' });
    if (untar.status !== 0) throw new Error(`tar -xzf ${file} failed: ${untar.stderr}`);
    const listed = spawnSync('tar', ['-tzf', file], { encoding: 'utf8' }).stdout.trim().split('\n');
    const files = listed
      .filter((entry) => !entry.endsWith('/'))
      .map((entry) => ({
        path: entry.replace(/^package\//, ''),
        text: readFileSync(join(unpacked, entry), 'latin1'),
      }))
      .sort((a, b) => a.path.localeCompare(b.path));
    const manifest = JSON.parse(files.find((f) => f.path === 'package.json')?.text ?? '{}') as {
      name: string;
      version: string;
    };
    return { name: manifest.name, version: manifest.version, file, files };
  } finally {
    rmSync(unpacked, { recursive: true, force: true });
  }
}

const TEXT_FILE = /\.(md|d\.ts|d\.mts|ts|mts|js|mjs|c|h|sh|json)$/;

/** Every reason the tarball is unfit to publish; none for a good one. */
export function tarballProblems(tarball: Tarball): string[] {
  const problems: string[] = [];
  const paths = new Set(tarball.files.map((file) => file.path));
  const manifest = JSON.parse(
    tarball.files.find((f) => f.path === 'package.json')?.text ?? '{}',
  ) as Parameters<typeof manifestTargets>[0];
  for (const required of ['package.json', 'README.md', 'LICENSE']) {
    if (!paths.has(required)) problems.push(`${required} is not in the tarball`);
  }
  for (const { path, field } of manifestTargets(manifest)) {
    if (!paths.has(posix.normalize(path))) problems.push(`${path} (${field}) is not in the tarball`);
  }
  for (const file of tarball.files) {
    if (file.path.endsWith('.tsbuildinfo')) problems.push(`${file.path}: build bookkeeping in the tarball`);
    if (/\.(test|spec|bench)\.[a-z.]+$/.test(file.path) || /(^|\/)(test|bench|fixtures)\//.test(file.path)) {
      problems.push(`${file.path}: test or bench code in the tarball`);
    }
    if (file.path.endsWith('.map')) {
      const map = JSON.parse(file.text) as { sources?: string[]; sourceRoot?: string };
      for (const source of map.sources ?? []) {
        const target = posix.normalize(posix.join(posix.dirname(file.path), map.sourceRoot ?? '', source));
        if (!paths.has(target))
          problems.push(`${file.path} points at ${target}, which is not in the tarball`);
      }
    }
    if (TEXT_FILE.test(file.path)) {
      for (const problem of productTextProblems(file.text)) problems.push(`${file.path}:${problem}`);
    }
  }
  return problems;
}
