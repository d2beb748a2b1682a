// No import circle inside a package: two files that reach each other (directly or around a loop)
// are one concept split in two, or share a type that belongs lower down. Type-only imports count,
// as a reader follows them too. A circle is reported as its files in import order.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { importsOf } from './imports.js';
import { readWorkspace, relativeTo, scriptSources } from './workspace.js';

/** `./x.js` from `dir/a.ts` → `dir/x.ts` when that source exists. */
function resolveRelative(from: string, specifier: string, sources: ReadonlySet<string>): string | undefined {
  const base = resolve(dirname(from), specifier);
  const candidates = [
    base,
    base.replace(/\.([mc]?)js$/, '.$1ts'),
    base.replace(/\.jsx$/, '.tsx'),
    `${base}.ts`,
    `${base}/index.ts`,
  ];
  return candidates.find((candidate) => sources.has(candidate) && existsSync(candidate));
}

/** Every elementary circle found by a depth-first walk, each once, rotated to start at its least file. */
export function importCircles(root: string): string[][] {
  const circles = new Map<string, string[]>();
  for (const pkg of readWorkspace(root)) {
    const sources = new Set(scriptSources(pkg));
    const edges = new Map<string, string[]>();
    for (const file of sources) {
      const targets = importsOf(readFileSync(file, 'utf8'), file)
        .filter(({ specifier, kind }) => kind !== 'computed' && specifier.startsWith('.'))
        .map(({ specifier }) => resolveRelative(file, specifier, sources))
        .filter((target): target is string => target !== undefined && target !== file);
      edges.set(file, [...new Set(targets)]);
    }
    const state = new Map<string, 'open' | 'done'>();
    const stack: string[] = [];
    const walk = (file: string): void => {
      state.set(file, 'open');
      stack.push(file);
      for (const next of edges.get(file) ?? []) {
        if (state.get(next) === 'open') {
          const circle = stack.slice(stack.indexOf(next)).map((path) => relativeTo(root, path));
          const start = circle.indexOf([...circle].sort()[0] ?? '');
          const rotated = [...circle.slice(start), ...circle.slice(0, start)];
          circles.set(rotated.join(' > '), rotated);
        } else if (state.get(next) === undefined) {
          walk(next);
        }
      }
      stack.pop();
      state.set(file, 'done');
    };
    for (const file of [...sources].sort()) if (state.get(file) === undefined) walk(file);
  }
  return [...circles.values()];
}
