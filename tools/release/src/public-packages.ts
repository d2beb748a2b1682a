// The workspace packages that publish: every packages/* manifest that is not private.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

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
