// Issue 16: keystrokes as pty.input notifications (GatewayClient.type) — no answer per key — reach the
// program byte for byte as the JSON-RPC requests do, and a failure is still heard.
import { afterEach, beforeEach, expect, it } from 'vitest';
import type { GatewayError } from './errors.js';
import { ErrorCodes } from './protocol.js';
import { outputOf, startGateway, until, type Harness } from '../test/support.js';

let h: Harness;
beforeEach(async () => {
  h = await startGateway();
});
afterEach(async () => {
  await h.dispose();
});

it('the same keystrokes by type() and by input() reach the program byte for byte alike', async () => {
  const client = await h.connect();
  await client.subscribe(['pty.*']);
  // Every byte value but the ones a terminal's line discipline acts on in raw mode: od shows them.
  const keys = [...'héllo ✓ 😀 \t', '\x1b[A', '\x7f', 'x'.repeat(3000), ...'end'];
  const total = Buffer.byteLength(keys.join(''));
  const dumpOf = async (send: (sessionId: string, key: string) => Promise<unknown> | void) => {
    const { sessionId } = await client.spawn({
      command: '/bin/sh',
      args: ['-c', `stty raw -echo; printf READY; head -c ${total} | od -An -tx1 -v; printf DONE`],
      cols: 80,
      rows: 24,
    });
    const output = outputOf(client, sessionId);
    await output.waitFor(/READY/); // raw mode is on
    for (const key of keys) await send(sessionId, key);
    await output.waitFor(/DONE/);
    return output.text().replace(/\s+/g, ' ');
  };
  const byRequest = await dumpOf((sessionId, key) => client.input(sessionId, key));
  const byNotification = await dumpOf((sessionId, key) => client.type(sessionId, key));
  expect(byRequest).toMatch(/68 c3 a9 6c 6c 6f/); // "hé" as UTF-8: the bytes themselves
  expect(byNotification).toBe(byRequest);
});

it('a keystroke to an unknown session is answered with an error naming the session', async () => {
  const client = await h.connect();
  const errors: GatewayError[] = [];
  client.onInputError((error) => errors.push(error));
  client.type('no-such-session', 'x');
  await until(() => errors.length === 1, 'the error');
  expect(errors[0]!.code).toBe('unknown_session');
  expect(errors[0]!.data).toMatchObject({ code: 'unknown_session', sessionId: 'no-such-session' });
  expect(ErrorCodes.unknown_session).toBe(-32001);
  expect(await client.list()).toEqual([]); // the connection goes on
});
