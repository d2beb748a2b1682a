// What the server sends about a run is bounded whatever the model wrote: an agent.* event, an
// agent.history page and a log line. A value over its bound is cut to about that many bytes of
// JSON — a string to its beginning, a list to its first items, an object's members sharing what
// is left once its small members are whole — and `cut` says where and how long each cut value was,
// so a client knows it holds an excerpt and can read the whole (agent.historyEvent).

/**
 * Where a value was cut: its JSON pointer, and its whole length in characters (a string) or items
 * (a list's items, an object's members: one with a name over 256 characters is left out).
 */
export type Cut =
  { readonly pointer: string; readonly chars: number } | { readonly pointer: string; readonly items: number };

/** At most this many cuts are listed (the first ones, in the order they were made). */
const MAX_CUTS_LISTED = 16;
/** The room a value's `cut` list takes, kept free of the bound. */
const CUT_ROOM_BYTES = MAX_CUTS_LISTED * 96;
/** A list stops at an item that would have less than this: an empty excerpt says nothing. */
const MIN_ITEM_BYTES = 16;
/** A list's item is cut only with at least this much room; one that needs cutting with less ends the list. */
const MIN_CUT_ITEM_BYTES = 1024;
/** An object's member with a longer name is left out when the object is cut; a pointer is cut to this too. */
const MAX_NAME_CHARS = 256;

/** Bytes of `value` as UTF-8 JSON. */
export function jsonBytes(value: unknown): number {
  return Buffer.byteLength(JSON.stringify(value) ?? '');
}

/** The longest beginning of `text` whose JSON string is at most `budget` bytes; a pair of surrogates stays whole. */
export function prefixWithin(text: string, budget: number): string {
  let chars = Math.min(text.length, Math.max(0, budget - 2));
  for (;;) {
    if (chars > 0 && /[\ud800-\udbff]/.test(text[chars - 1] ?? '')) chars -= 1;
    const bytes = jsonBytes(text.slice(0, chars));
    if (bytes <= budget || chars === 0) return text.slice(0, chars);
    // Down in proportion to the excess (escapes and multi-byte characters), at least one.
    chars = Math.max(0, Math.min(chars - 1, Math.floor((chars * budget) / bytes)));
  }
}

const pointerOf = (parent: string, key: string | number): string =>
  `${parent}/${String(key).replaceAll('~', '~0').replaceAll('/', '~1')}`.slice(0, MAX_NAME_CHARS);

function fit(value: unknown, budget: number, pointer: string, cuts: Cut[]): unknown {
  if (jsonBytes(value) <= budget) return value;
  if (typeof value === 'string') {
    cuts.push({ pointer, chars: value.length });
    return prefixWithin(value, budget);
  }
  if (Array.isArray(value)) {
    const kept: unknown[] = [];
    let left = budget - 2;
    for (const [index, item] of value.entries()) {
      // An item that does not fit whole is cut only while there is room for a useful excerpt of it.
      if (left < MIN_ITEM_BYTES || (left < MIN_CUT_ITEM_BYTES && jsonBytes(item) > left - 1)) break;
      const fitted = fit(item, left - 1, pointerOf(pointer, index), cuts);
      kept.push(fitted);
      left -= jsonBytes(fitted) + 1;
    }
    if (kept.length < value.length) cuts.push({ pointer, items: value.length });
    return kept;
  }
  if (typeof value !== 'object' || value === null) return value;
  // Small members whole first; each larger one gets an even share of what is left.
  const entries = Object.entries(value as Record<string, unknown>);
  const members = entries
    .filter(([key]) => key.length <= MAX_NAME_CHARS)
    .map(([key, member]) => ({ key, member, bytes: jsonBytes(member) }));
  if (members.length < entries.length) cuts.push({ pointer, items: entries.length });
  let left = budget - 2 - members.reduce((sum, { key }) => sum + jsonBytes(key) + 2, 0);
  const fitted = new Map<string, unknown>();
  const bySize = [...members].sort((a, b) => a.bytes - b.bytes);
  for (const [index, { key, member, bytes }] of bySize.entries()) {
    const share = Math.max(0, Math.floor(left / (bySize.length - index)));
    const kept = bytes <= share ? member : fit(member, share, pointerOf(pointer, key), cuts);
    fitted.set(key, kept);
    left -= bytes <= share ? bytes : jsonBytes(kept);
  }
  return Object.fromEntries(members.map(({ key }) => [key, fitted.get(key)]));
}

/**
 * `value` (an object) as it is when its JSON is at most `budget` bytes; else cut to about that,
 * with `cut` listing the values cut (the first 16).
 */
export function boundedJson<T extends object>(value: T, budget: number): T | (T & { cut: Cut[] }) {
  // Most events are far smaller: their length in characters (3 bytes at most each) says so.
  const text = JSON.stringify(value);
  if (text.length * 3 <= budget || Buffer.byteLength(text) <= budget) return value;
  const cuts: Cut[] = [];
  const fitted = fit(value, budget - CUT_ROOM_BYTES, '', cuts) as T;
  return { ...fitted, cut: cuts.slice(0, MAX_CUTS_LISTED) };
}
