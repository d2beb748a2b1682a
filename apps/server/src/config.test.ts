import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, parseConfig } from './config.js';

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

describe('paths in aleph.toml', () => {
  it('are resolved from the config file’s folder; the file from the directory the user ran in', () => {
    const root = mkdtempSync(join(tmpdir(), 'aleph-config-paths-'));
    mkdirSync(join(root, 'project'));
    writeFileSync(
      join(root, 'project', 'aleph.toml'),
      '[hooks]\nfiles = [".claude/hooks.json"]\n[store]\ndir = "state/sessions"\n[agent]\nworkdir = "."\n',
    );
    try {
      const { config, path } = loadConfig({ path: 'project/aleph.toml', cwd: root, env: {} });
      expect(path).toBe(join(root, 'project', 'aleph.toml'));
      expect(config.hooks.files).toEqual([join(root, 'project', '.claude', 'hooks.json')]);
      expect(config.store.dir).toBe(join(root, 'project', 'state', 'sessions'));
      expect(config.agent.workdir).toBe(join(root, 'project'));
      // Found without --config in the directory given as cwd (the server passes INIT_CWD).
      expect(loadConfig({ cwd: join(root, 'project'), env: {} }).path).toBe(
        join(root, 'project', 'aleph.toml'),
      );
      expect(() => loadConfig({ path: 'project', cwd: root, env: {} })).toThrow(
        `config file ${join(root, 'project')} is a directory, not a file`,
      );
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
