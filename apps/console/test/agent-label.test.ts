// How the console names an agent's command it did not see start (no browser needed): the model's
// command out of the server's listing of the sandboxed command.
import { expect, it } from 'vitest';
import { agentCommandOf } from '../src/terminals.js';

it("takes the model's command out of a sandboxed agent command's listing; a user's terminal has none", () => {
  expect(agentCommandOf('[bubblewrap] /bin/sh -c echo start; sleep 8; echo end')).toBe(
    'echo start; sleep 8; echo end',
  );
  expect(agentCommandOf('[sandbox-exec] /bin/sh -c make\ntest')).toBe('make\ntest');
  expect(agentCommandOf('/bin/bash')).toBeUndefined();
  expect(agentCommandOf('/bin/sh -c echo hi')).toBeUndefined();
});
