import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig } from './config.js';

describe('aleph.toml durations', () => {
  it.each([
    ['[agent]\nturn_timeout_secs = 2592000\n', '[agent].turn_timeout_secs', 2],
    ['[agent]\nmodel = "m"\ntool_timeout_secs = 3000000\n', '[agent].tool_timeout_secs', 3],
    ['[agent]\nspawn_agent_timeout_secs = 1e9\n', '[agent].spawn_agent_timeout_secs', 2],
    ['[pty]\nidle_ttl_secs = 2147484\n', '[pty].idle_ttl_secs', 2],
    [
      '[[stop_hooks]]\nname = "t"\ncommand = "true"\ntimeout_secs = 2592000\n',
      '[stop_hooks][0].timeout_secs',
      4,
    ],
  ])('a timer Node cannot hold is refused, naming the key and the limit: %s', (text, key, line) => {
    expect(() => parseConfig(text)).toThrow(ConfigError);
    expect(() => parseConfig(text)).toThrow(
      `aleph.toml: ${key} must be at most 2147483 seconds (about 24.8 days, the longest timer Node.js can set) (line ${line})`,
    );
  });

  it('the longest allowed timer is accepted', () => {
    expect(parseConfig('[agent]\nturn_timeout_secs = 2147483\n').agent.turn_timeout_secs).toBe(2147483);
  });
});
