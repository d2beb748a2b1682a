// bin/aleph-server (what `pnpm start` runs): the server's own process gets one malloc arena, and
// nothing the server starts inherits that setting; a MALLOC_ARENA_MAX the user set is theirs.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { connectGateway } from '@aleph/gateway/client';
import { afterEach, expect, it } from 'vitest';

const LAUNCHER = resolve(import.meta.dirname, '../bin/aleph-server');

const started: { child: ChildProcess; dir: string }[] = [];
afterEach(async () => {
  for (const { child, dir } of started.splice(0)) {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((done) => child.once('exit', done));
      child.kill('SIGTERM');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  }
});

/** The launched server's own environment, and what a terminal it starts sees. */
async function launch(userEnv: NodeJS.ProcessEnv): Promise<{ server: string[]; terminal: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'aleph-launcher-'));
  const config = join(dir, 'aleph.toml');
  writeFileSync(config, '[gateway]\nport = 0\n\n[sandbox]\nmode = "off"\n\n[power]\ninhibit_sleep = false\n');
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    ...userEnv,
    ALEPH_STATE_DIR: dir,
    ALEPH_LOG_LEVEL: 'warn',
  };
  if (userEnv['MALLOC_ARENA_MAX'] === undefined) delete env['MALLOC_ARENA_MAX'];
  delete env['ALEPH_LAUNCHER_SET'];
  const child = spawn(LAUNCHER, ['--config', config], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  started.push({ child, dir });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  await expect
    .poll(() => (child.exitCode === null ? stdout : `exited: ${stderr}`), { timeout: 30_000 })
    .toMatch(/token: \S+|exited/);
  expect(stdout, stderr).toMatch(/token: \S+/);
  // The environment the process was started with (exec keeps the launcher's pid).
  const server = readFileSync(`/proc/${child.pid}/environ`, 'utf8').split('\0');
  const client = await connectGateway(/listening on (\S+)/.exec(stdout)![1]!, {
    token: /token: (\S+)/.exec(stdout)![1]!,
  });
  try {
    let output = '';
    client.onOutput((chunk) => (output += chunk.data.toString()));
    await client.subscribe(['pty.*']);
    await client.spawn({
      command: '/bin/sh',
      args: ['-c', 'echo "malloc=${MALLOC_ARENA_MAX-unset} set=${ALEPH_LAUNCHER_SET-unset}."; sleep 30'],
      cols: 80,
      rows: 24,
    });
    await expect.poll(() => output, { timeout: 20_000 }).toMatch(/set=\S*\./);
    return { server, terminal: /malloc=\S* set=\S*\./.exec(output)![0] };
  } finally {
    await client.close();
  }
}

it('gives the server one malloc arena and its terminals nothing of it', async () => {
  const { server, terminal } = await launch({});
  expect(server).toContain('MALLOC_ARENA_MAX=1');
  expect(terminal).toBe('malloc=unset set=unset.');
});

it("keeps the user's own MALLOC_ARENA_MAX, for the server and its terminals", async () => {
  const { server, terminal } = await launch({ MALLOC_ARENA_MAX: '4' });
  expect(server).toContain('MALLOC_ARENA_MAX=4');
  expect(terminal).toBe('malloc=4 set=unset.');
});
