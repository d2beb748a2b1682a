// PROTOCOL.md and the code agree: every figure the document states is read from it here and
// compared with the constant the code uses. A figure reworded away fails too (each pattern must
// match the document exactly once), so a change of either side shows up here.
import { readFileSync } from 'node:fs';
import { expect, it } from 'vitest';
import {
  DEFAULT_FLOW,
  DEFAULT_MAX_PAYLOAD_BYTES,
  DEFAULT_OUTBOUND_BUDGET_BYTES,
  DEFAULT_PING_INTERVAL_MS,
} from './gateway.js';
import { SLOW_CONSUMER_CLOSE_CODE } from './internal/connection.js';
import { NORMAL_TAIL_BYTES } from './internal/modes.js';
import { HOLD_MARGIN_BYTES } from './internal/output-pump.js';
import { LARGE_REPLY_CHARS, MAX_IN_FLIGHT } from './internal/rpc.js';
import { MAX_BEHIND_BYTES } from './internal/screen.js';
import { MAX_ENTRIES } from './internal/size-log.js';
import { ErrorCodes, MAX_INPUT_BYTES, MAX_REPLAY_BYTES, MAX_SNAPSHOT_CELLS } from './protocol.js';

const KiB = 1024;
const MiB = 1024 * 1024;
const doc = readFileSync(new URL('../PROTOCOL.md', import.meta.url), 'utf8').replace(/\s+/g, ' ');

/** [what, the pattern (its group is the figure), the unit it is written in, the code's value] */
const figures: [string, RegExp, number, number][] = [
  ['hold margin', /scrollback can hold \(1 MiB less a (\d+) KiB margin\)/g, KiB, HOLD_MARGIN_BYTES],
  ['detach grace', /held for \*\*(\d+) s\*\* \(`flow.detachGraceMs`\)/g, 1000, DEFAULT_FLOW.detachGraceMs],
  ['high-water mark', /passes the high-water mark \((\d+) MiB\)/g, MiB, DEFAULT_FLOW.highWaterBytes],
  ['low-water mark', /under the low-water mark \((\d+) KiB\)/g, KiB, DEFAULT_FLOW.lowWaterBytes],
  ['output per frame', /No frame carries more than (\d+) KiB of output/g, KiB, DEFAULT_FLOW.maxBatchBytes],
  ['pty.input cap', /`pty.input` over (\d+) KiB decoded/g, KiB, MAX_INPUT_BYTES],
  ['replay cap', /An answer carries at most (\d+) KiB of output/g, KiB, MAX_REPLAY_BYTES],
  ['snapshot cells', /session of more than \*\*([\d ]+) cells\*\*/g, 1, MAX_SNAPSHOT_CELLS],
  ['slow consumer close', /closed with code \*\*(\d+)\*\*/g, 1, SLOW_CONSUMER_CLOSE_CODE],
  ['requests in flight', /At most (\d+) requests of one connection run at once/g, 1, MAX_IN_FLIGHT],
  ['large answer', /one whose answer is over (\d+) KiB/g, KiB, LARGE_REPLY_CHARS],
  [
    'outbound budget',
    /the connection's budget \((\d+) MiB by default\)/g,
    MiB,
    DEFAULT_OUTBOUND_BUDGET_BYTES,
  ],
  ['maxPayload', /`maxPayload` \((\d+) MiB by default\)/g, MiB, DEFAULT_MAX_PAYLOAD_BYTES],
  ['ping interval', /The server pings every (\d+) s/g, 1000, DEFAULT_PING_INTERVAL_MS],
  ['resizes kept', /at most the last (\d+), and the size in force/g, 1, MAX_ENTRIES],
  ['tail before a switch', /rebuilt from the (\d+) KiB of output before the switch/g, KiB, NORMAL_TAIL_BYTES],
  ['screen behind a flood', /a terminal that falls (\d+) MiB behind/g, MiB, MAX_BEHIND_BYTES],
];

it.each(figures)('PROTOCOL.md states the %s the code uses', (_what, pattern, unit, value) => {
  const found = [...doc.matchAll(pattern)].map((match) => Number(match[1]?.replace(/ /g, '')) * unit);
  expect(found).toEqual([value]);
});

it('every error code PROTOCOL.md lists has the number the code sends', () => {
  const rows = [...doc.matchAll(/\| (-32\d{3}) \| `(\w+)`/g)].map((match) => [match[2], Number(match[1])]);
  expect(rows.length).toBeGreaterThanOrEqual(12);
  for (const [name, code] of rows)
    expect({ name, code }).toEqual({ name, code: ErrorCodes[name as keyof typeof ErrorCodes] });
});
