import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
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

describe('aleph.toml [[mcp_servers]]', () => {
  const server = (fields: string) =>
    `[agent]\nmodel = "m"\n\n[[mcp_servers]]\nname = "ok"\ncommand = "x"\n\n[[mcp_servers]]\n${fields}\n`;
  it.each([
    [
      'name = "slow"\ncommand = "x"\ntool_timeout_secs = 3000000',
      'tool_timeout_secs: must be at most 2147483 seconds (about 24.8 days, the longest timer Node.js can set)',
    ],
    [
      'name = "slow"\ncommand = "x"\nstartup_timeout_secs = 2147484',
      'startup_timeout_secs: must be at most 2147483 seconds (about 24.8 days, the longest timer Node.js can set)',
    ],
    [
      'name = "files"\nurl = "ftp://example.test/mcp"',
      'url: "ftp://example.test/mcp" is not an http:// or https:// URL',
    ],
    [
      'name = "files"\nurl = "ftp://${MCP_HOST}/mcp"',
      'url: "ftp://${MCP_HOST}/mcp" is not an http:// or https:// URL',
    ],
    [
      'name = "git__hub"\ncommand = "x"',
      `name: "git__hub" may not contain "__" or end in "_": its tools' names mcp__git__hub__<tool> would read as another server's`,
    ],
  ])('refuses %j, naming the file, the entry and the key', (fields, message) => {
    expect(() => parseConfig(server(fields))).toThrow(`aleph.toml: [mcp_servers][1] ${message} (line 8)`);
  });

  it('a URL from a variable is checked when a run expands it, not when the file is read', () => {
    expect(parseConfig(server('name = "remote"\nurl = "${MCP_URL}"')).mcp_servers).toHaveLength(2);
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

describe('aleph.toml errors say what a key must be', () => {
  it.each([
    [
      '[stop_hooks]\nname = "a"\ncommand = "true"\n',
      '[stop_hooks] must be an array of tables: write [[stop_hooks]] for each (line 1)',
    ],
    [
      '[log]\nlevel = "verbose"\n',
      '[log].level must be one of "trace", "debug", "info", "warn", "error", "fatal", "silent" (line 2)',
    ],
    ['[gateway]\nhost = 7\n', '[gateway].host must be a string (line 2)'],
    // A nested table is named as its header names it, found at its line.
    [
      '[sandbox]\nmode = "off"\n\n[sandbox.limits]\ntmp_mib = "x"\n',
      '[sandbox.limits].tmp_mib must be a positive integer (line 5)',
    ],
    ['[sandbox.limits]\nbogus = 1\n', 'unknown key [sandbox.limits].bogus (line 2)'],
    // A key that is not written is found by its entry's header.
    [
      '[agent]\nmodel = "m"\n\n[[stop_hooks]]\nname = "x"\n',
      '[stop_hooks][0].command must be a string (line 4)',
    ],
  ])('%j', (text, message) => {
    expect(() => parseConfig(text)).toThrow(`aleph.toml: ${message}`);
  });

  it('an environment variable that overrides a key is named with its value', () => {
    const cwd = mkdtempSync(join(tmpdir(), 'aleph-config-env-'));
    onTestFinished(() => rmSync(cwd, { recursive: true }));
    expect(() => loadConfig({ cwd, env: { ALEPH_PORT: 'abc' } })).toThrow(
      'ALEPH_PORT="abc": [gateway].port must be an integer from 0 to 65535',
    );
    expect(() => loadConfig({ cwd, env: { ALEPH_LOG_LEVEL: 'loud' } })).toThrow(
      'ALEPH_LOG_LEVEL="loud": [log].level must be one of "trace", "debug"',
    );
  });
});
