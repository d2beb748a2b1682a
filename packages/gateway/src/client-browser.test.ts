// The browser entry of @aleph/gateway/client: what a bundler resolves under the "browser" condition
// carries no ws, zod or Node API — a static walk of everything it imports at run time — and gives
// the same values as the Node client.
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { expect, it } from 'vitest';
import * as browser from './client-browser.js';
import * as node from './client.js';

const SRC = import.meta.dirname;

/** Every module `entry` loads at run time (type-only imports are erased), by path, with its text. */
function runtimeGraph(entry: string): Map<string, string> {
  const seen = new Map<string, string>();
  const visit = (file: string): void => {
    if (seen.has(file)) return;
    const text = readFileSync(file, 'utf8');
    seen.set(file, text);
    for (const match of text.matchAll(/^\s*(?:import|export)\s+(?!type\b)(?:[^;]*?\sfrom\s+)?'([^']+)'/gm)) {
      const specifier = match[1]!;
      if (!specifier.startsWith('.')) {
        seen.set(`bare:${specifier}`, '');
        continue;
      }
      visit(resolve(dirname(file), specifier.replace(/\.js$/, '.ts')));
    }
  };
  visit(entry);
  return seen;
}

it('the browser entry loads nothing but its own zod-free, Node-free modules', () => {
  const graph = runtimeGraph(join(SRC, 'client-browser.ts'));
  const bare = [...graph.keys()].filter((key) => key.startsWith('bare:'));
  expect(bare).toEqual([]);
  expect(graph.size).toBeGreaterThanOrEqual(2); // the entry and the constants it re-exports
  for (const [file, text] of graph) {
    const code = text.replace(/\/\/.*$|\/\*[\s\S]*?\*\//gm, '');
    expect({ file, node: /\b(?:Buffer|process|require)\b/.test(code) }).toEqual({ file, node: false });
  }
  // The walk does see a runtime import: the Node client's graph has ws and zod.
  const nodeGraph = [...runtimeGraph(join(SRC, 'client.ts')).keys()];
  expect(nodeGraph).toEqual(expect.arrayContaining(['bare:ws', 'bare:zod']));
});

it('package.json sends a browser to that entry and Node to the client', () => {
  const manifest = JSON.parse(readFileSync(join(SRC, '..', 'package.json'), 'utf8')) as {
    exports: Record<string, Record<string, unknown>>;
  };
  const client = manifest.exports['./client']!;
  expect(Object.keys(client)[0]).toBe('browser'); // conditions are tried in order
  expect(client['browser']).toEqual({
    types: './dist/client-browser.d.ts',
    default: './dist/client-browser.js',
  });
  expect(client['default']).toBe('./dist/client.js');
});

it('the browser entry gives the same values as the Node client', () => {
  expect(Object.keys(browser).length).toBeGreaterThanOrEqual(10);
  for (const [name, value] of Object.entries(browser))
    expect({ name, value }).toEqual({ name, value: (node as Record<string, unknown>)[name] });
});
