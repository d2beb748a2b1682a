// Issue 16: keystrokes as JSON pty.input notifications (GatewayClient.type on a connection without
// binary frames) — no answer per key — reach the program byte for byte as the JSON-RPC requests do,
// and a failure is still heard.
import { afterEach, beforeEach, expect, it } from 'vitest';
import type { GatewayError } from './errors.js';
import { ErrorCodes } from './protocol.js';
import { KEYS, keystrokeDump, startGateway, until, type Harness } from '../test/support.js';

let h: Harness;
beforeEach(async () => {
  h = await startGateway();
});
afterEach(async () => {
  await h.dispose();
});

it('the same keystrokes by type() and by input() reach the program byte for byte alike', async () => {
  const client = await h.connect({ binary: false }); // JSON notifications: binary frames have their own tests
  await client.subscribe(['pty.*']);
  const byRequest = await keystrokeDump(client, KEYS, (sessionId, key) => client.input(sessionId, key));
  const byNotification = await keystrokeDump(client, KEYS, (sessionId, key) => client.type(sessionId, key));
  expect(byRequest).toMatch(/68 c3 a9 6c 6c 6f/); // "hé" as UTF-8: the bytes themselves
  expect(byNotification).toBe(byRequest);
});

it('a keystroke to an unknown session is answered with an error naming the session', async () => {
  const client = await h.connect({ binary: false }); // JSON notifications: binary frames have their own tests
  const errors: GatewayError[] = [];
  client.onInputError((error) => errors.push(error));
  client.type('no-such-session', 'x');
  await until(() => errors.length === 1, 'the error');
  expect(errors[0]!.code).toBe('unknown_session');
  expect(errors[0]!.data).toMatchObject({ code: 'unknown_session', sessionId: 'no-such-session' });
  expect(ErrorCodes.unknown_session).toBe(-32001);
  expect(await client.list()).toEqual([]); // the connection goes on
});
