import { expect, it } from 'vitest';
import { boundedJson, jsonBytes } from './bounded-json.js';

const BUDGET = 64 * 1024;

it('an event within the bound is the same object; a long string is cut to its beginning, and said so', () => {
  const small = { type: 'assistant', content: 'short' };
  expect(boundedJson(small, BUDGET)).toBe(small);
  const text = 'é"\\✓😀'.repeat(100_000);
  const cut = boundedJson({ type: 'assistant', seq: 3, content: text }, BUDGET);
  expect(jsonBytes(cut)).toBeLessThanOrEqual(BUDGET);
  expect(cut.type).toBe('assistant');
  expect(cut.seq).toBe(3);
  expect(text.startsWith(cut.content)).toBe(true);
  expect(cut.content.length).toBeGreaterThan(BUDGET / 8);
  expect(cut.content.at(-1)).not.toMatch(/[\ud800-\udbff]/); // not half an emoji
  expect(cut).toHaveProperty('cut', [{ pointer: '/content', chars: text.length }]);
});

it('what no string cut can bound stays within it too: 100 000 tool calls, a member with a 1 MB name', () => {
  const calls = Array.from({ length: 100_000 }, (_, index) => ({
    id: `c${index}`,
    name: 'note',
    args: { n: index },
  }));
  const many = boundedJson({ type: 'assistant', content: 'x', toolCalls: calls }, BUDGET);
  expect(jsonBytes(many)).toBeLessThanOrEqual(BUDGET);
  expect(many.toolCalls.length).toBeGreaterThan(100);
  expect(many.toolCalls[0]).toEqual(calls[0]);
  expect(many).toHaveProperty('cut', [{ pointer: '/toolCalls', items: 100_000 }]);
  const named = boundedJson({ type: 'tool', args: { ['k'.repeat(1_000_000)]: 1, path: 'a/b' } }, BUDGET);
  expect(jsonBytes(named)).toBeLessThanOrEqual(BUDGET);
  expect(named.args).toEqual({ path: 'a/b' });
  expect(named).toHaveProperty('cut', [{ pointer: '/args', items: 2 }]);
});
