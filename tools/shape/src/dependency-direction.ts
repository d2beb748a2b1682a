// The package graph of DESIGN.md, checked against every manifest and every import in production
// source: which `@aleph/*` packages a package may reach (and whether only for types), which
// third-party packages belong to it, and no computed `import()` that would hide an edge. A
// violation names the file (or manifest), the line and the offending import.
import { readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { join } from 'node:path';
import { importsOf } from './imports.js';
import {
  readWorkspace,
  relativeTo,
  scriptSources,
  type Manifest,
  type WorkspacePackage,
} from './workspace.js';

/** Which `@aleph/*` packages each package may depend on. Anything absent may depend on nothing. */
export const ALLOWED_DEPENDENCIES: Readonly<Record<string, readonly string[]>> = {
  power: [],
  pty: [],
  verification: ['sandbox'],
  harness: ['verification', 'power'],
  gateway: ['pty'],
  sandbox: [],
  cluster: ['gateway', 'harness'],
  mcp: ['sandbox'],
  console: ['gateway'],
  server: ['power', 'pty', 'verification', 'harness', 'gateway', 'sandbox', 'cluster', 'mcp'],
};

/**
 * Edges that may carry types only (`import type`, `export type`, `typeof import()`): the cluster
 * implements the gateway's and the harness's seams without running their code.
 */
export const TYPE_ONLY_DEPENDENCIES: Readonly<Record<string, readonly string[]>> = {
  cluster: ['gateway', 'harness'],
};

/**
 * Third-party packages each package may depend on, in any manifest field. `runtime` may also be
 * imported by production source (and must then be in `dependencies`, `peerDependencies` or
 * `optionalDependencies`); `dev` serves its tests and benches only. A name ending in `/*` allows
 * the scope. `@types/x` is allowed wherever `x` is. A package absent here may depend on nothing
 * beyond TOOLING.
 */
export const THIRD_PARTY: Readonly<Record<string, { runtime: readonly string[]; dev?: readonly string[] }>> =
  {
    power: { runtime: [] },
    pty: { runtime: ['node-pty'] },
    verification: { runtime: ['re2js', 'smol-toml', 'zod'] },
    harness: {
      runtime: ['@opentelemetry/api', 'zod'],
      dev: ['@opentelemetry/context-async-hooks', '@opentelemetry/sdk-trace-base', 'ai'],
    },
    gateway: {
      runtime: ['@xterm/addon-serialize', '@xterm/addon-unicode11', '@xterm/headless', 'ws', 'zod'],
      // The bench's baseline reads a pty with node-pty directly, to measure the gateway against it.
      dev: ['node-pty'],
    },
    // shell-quote: the words of a git config value a shell runs, as the shell splits them.
    sandbox: { runtime: ['shell-quote'] },
    // The real MCP servers the tests start come from npm, as users run them.
    mcp: {
      runtime: ['@modelcontextprotocol/sdk', 'zod'],
      dev: ['@modelcontextprotocol/server-everything', '@modelcontextprotocol/server-filesystem'],
    },
    cluster: { runtime: ['@nats-io/*'] },
    console: {
      runtime: [
        '@xterm/addon-fit',
        '@xterm/addon-serialize', // its own screen kept over a reload
        '@xterm/addon-unicode11',
        '@xterm/addon-web-links',
        '@xterm/xterm',
        'diff', // edits shown as diffs
        'dompurify', // the model's markdown, sanitised
        'marked',
      ],
      dev: ['vite', 'axe-core'], // axe-core: the browser suite's accessibility audit
    },
    server: {
      // eventsource-parser: where a streamed reply's events end, for the bound on each (the AI SDK's own parser).
      runtime: [
        '@ai-sdk/*',
        'ai',
        'eventsource-parser',
        '@opentelemetry/*',
        'pino',
        'shell-quote', // a path in a command the server suggests, quoted for the shell
        'smol-toml',
        'ws',
        'zod',
      ],
      dev: [
        '@xterm/headless',
        '@modelcontextprotocol/server-everything',
        '@modelcontextprotocol/server-filesystem',
      ],
    },
  };

/** Build and test tools any package may hold in `devDependencies`: they ship no code. */
export const TOOLING: readonly string[] = [
  'typescript',
  'vitest',
  'tsx',
  '@types/node',
  'fast-check',
  'playwright-core',
];

export interface Violation {
  readonly file: string;
  readonly importPath: string;
  readonly message: string;
}

export interface Rules {
  readonly allowed: Readonly<Record<string, readonly string[]>>;
  readonly typeOnly: Readonly<Record<string, readonly string[]>>;
  readonly thirdParty: typeof THIRD_PARTY;
}

export const RULES: Rules = {
  allowed: ALLOWED_DEPENDENCIES,
  typeOnly: TYPE_ONLY_DEPENDENCIES,
  thirdParty: THIRD_PARTY,
};

const BUILTINS = new Set(builtinModules);
const RUNTIME_FIELDS = ['dependencies', 'peerDependencies', 'optionalDependencies'] as const;

/** `@scope/name/sub` → `@scope/name`; `name/sub` → `name`. */
export function packageOf(specifier: string): string {
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : (parts[0] ?? specifier);
}

function matches(list: readonly string[], name: string): boolean {
  const typed = /^@types\/(.+)$/.exec(name)?.[1];
  const candidates =
    typed === undefined ? [name] : [name, typed.includes('__') ? `@${typed.replace('__', '/')}` : typed];
  return candidates.some((candidate) =>
    list.some((entry) =>
      entry.endsWith('/*') ? candidate.startsWith(entry.slice(0, -1)) : entry === candidate,
    ),
  );
}

function exportedSubpaths(pkg: WorkspacePackage | undefined): Set<string> {
  return new Set(Object.keys(pkg?.manifest.exports ?? { '.': null }));
}

function runtimeDependencies(manifest: Manifest): Set<string> {
  return new Set(RUNTIME_FIELDS.flatMap((field) => Object.keys(manifest[field] ?? {})));
}

export function checkDependencyDirection(root: string, rules: Rules = RULES): Violation[] {
  const packages = readWorkspace(root);
  const byShort = new Map(packages.map((pkg) => [pkg.short, pkg]));
  const violations: Violation[] = [];
  const allowedFor = (short: string): readonly string[] => rules.allowed[short] ?? [];
  const edge = (from: WorkspacePackage, target: string, file: string, importPath: string): boolean => {
    if (target === from.short) return true;
    if (target === 'server') {
      violations.push({
        file,
        importPath,
        message: `@aleph/${from.short} imports @aleph/server: nothing may`,
      });
      return false;
    }
    if (!allowedFor(from.short).includes(target)) {
      const allowed = allowedFor(from.short).join(', ') || 'none';
      violations.push({
        file,
        importPath,
        message: `@aleph/${from.short} may not depend on @aleph/${target} (allowed: ${allowed})`,
      });
      return false;
    }
    return true;
  };

  for (const pkg of packages) {
    const manifestFile = relativeTo(root, join(pkg.dir, 'package.json'));
    const own = rules.thirdParty[pkg.short] ?? { runtime: [] };
    for (const field of [
      'dependencies',
      'devDependencies',
      'peerDependencies',
      'optionalDependencies',
    ] as const) {
      for (const dep of Object.keys(pkg.manifest[field] ?? {})) {
        if (dep.startsWith('@aleph/')) {
          edge(pkg, dep.slice('@aleph/'.length), manifestFile, dep);
          continue;
        }
        const devOnly = field === 'devDependencies';
        const allowed = devOnly ? [...own.runtime, ...(own.dev ?? []), ...TOOLING] : own.runtime;
        if (!matches(allowed, dep)) {
          violations.push({
            file: manifestFile,
            importPath: dep,
            message: `@aleph/${pkg.short} may not depend on ${dep} in ${field}: a package's third-party dependencies belong to it alone (allowed: ${allowed.join(', ') || 'none'}; the list is THIRD_PARTY in tools/shape/src/dependency-direction.ts)`,
          });
        }
      }
    }

    const declared = runtimeDependencies(pkg.manifest);
    for (const file of scriptSources(pkg)) {
      const rel = relativeTo(root, file);
      for (const { specifier, kind, line } of importsOf(readFileSync(file, 'utf8'), file)) {
        const at = `${rel}:${line}`;
        if (kind === 'computed') {
          violations.push({
            file: at,
            importPath: specifier,
            message: `computed dynamic import of ${specifier}: the dependency rules cannot see where it leads; import a literal specifier`,
          });
          continue;
        }
        if (specifier.startsWith('.') || specifier.startsWith('/') || specifier.startsWith('#')) continue;
        if (specifier.startsWith('node:') || BUILTINS.has(specifier)) continue;
        const match = /^@aleph\/([^/]+)(\/.*)?$/.exec(specifier);
        if (match === null) {
          const name = packageOf(specifier);
          if (!matches(own.runtime, name)) {
            violations.push({
              file: at,
              importPath: specifier,
              message: `@aleph/${pkg.short} production source may not import ${name} (allowed: ${own.runtime.join(', ') || 'none'})`,
            });
          } else if (!declared.has(name) && !declared.has(`@types/${name}`)) {
            violations.push({
              file: at,
              importPath: specifier,
              message: `${name} is imported by production source but is not in @aleph/${pkg.short}'s dependencies`,
            });
          }
          continue;
        }
        const [, target = '', rest] = match;
        if (rest !== undefined && !exportedSubpaths(byShort.get(target)).has(`.${rest}`)) {
          violations.push({
            file: at,
            importPath: specifier,
            message: `deep import ${specifier}: packages reach each other only through their exports`,
          });
          continue;
        }
        if (!edge(pkg, target, at, specifier)) continue;
        if (kind === 'value' && (rules.typeOnly[pkg.short] ?? []).includes(target)) {
          violations.push({
            file: at,
            importPath: specifier,
            message: `@aleph/${pkg.short} may import only types from @aleph/${target}: write \`import type\``,
          });
        }
      }
    }
  }
  return violations;
}
