// The state dir holds the token and every session's log: the server keeps it private (0700).
import { chmodSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { makeStateDir, resolveToken, writeServerInfo } from './state.js';

let root: string;
let umask: number;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'aleph-state-'));
  umask = process.umask(0o022);
});
afterEach(() => {
  process.umask(umask);
  rmSync(root, { recursive: true, force: true });
});

const modeOf = (path: string): number => statSync(path).mode & 0o777;

it('a state dir made by the server is 0700, its token and server.json 0600, whatever the umask', () => {
  const dir = join(root, 'state', 'aleph');
  resolveToken(dir, undefined);
  writeServerInfo(dir, { url: 'ws://127.0.0.1:1', token: 't', pid: 1 });
  expect(modeOf(dir)).toBe(0o700);
  expect(modeOf(join(dir, 'token'))).toBe(0o600);
  expect(modeOf(join(dir, 'server.json'))).toBe(0o600);
});

it('a state dir left readable by an earlier version is made private at start', () => {
  const dir = join(root, 'aleph');
  makeStateDir(dir);
  chmodSync(dir, 0o755);
  makeStateDir(dir);
  expect(modeOf(dir)).toBe(0o700);
});
