// The wrapper that starts bwrap runs outside the sandbox (as root, it makes the command's cgroup),
// in the command's cwd, with the command's environment. A PATH there that a model could shape (a
// relative entry, a folder of the cwd, an MCP server's `env` from a project file) must not choose
// the program it runs: it finds its own in this process's PATH, absolute entries only.
import { chmodSync, existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { createSandbox } from './index.js';

const linux = process.platform === 'linux';
const root = realpathSync(mkdtempSync('/var/tmp/aleph-wrapper-path-test-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const cgroupLimits =
  linux &&
  process.getuid?.() === 0 &&
  createSandbox({ network: 'off' }, { mode: 'required' }).limits.processesBy === 'cgroup';

it.skipIf(!cgroupLimits)(
  "a command's PATH (a folder of its own, a relative entry into the cwd) never picks the wrapper's mkdir",
  async () => {
    const marker = join(root, 'planted-ran');
    const planted = join(root, 'planted');
    const cwd = join(root, 'project');
    mkdirSync(planted);
    mkdirSync(join(cwd, 'bin'), { recursive: true });
    for (const dir of [planted, join(cwd, 'bin')]) {
      writeFileSync(join(dir, 'mkdir'), `#!/bin/sh\necho "$0" >> ${marker}\nexec /bin/mkdir "$@"\n`);
      chmodSync(join(dir, 'mkdir'), 0o755);
    }
    const box = createSandbox({ network: 'off', limits: { processes: 64 } }, { mode: 'required' });
    const env = { ...process.env, PATH: `bin:${planted}:${process.env['PATH'] ?? ''}` } as Record<
      string,
      string
    >;
    const wrapped = box.wrap({ file: '/bin/sh', args: ['-c', 'echo inside'], cwd, env });
    try {
      // The first command of this process: its cgroup is not there yet, so the wrapper makes it.
      const cgroup = wrapped.args.find((arg) => /\/aleph-sandbox-\d+-\d+-\d+$/.test(arg));
      expect(cgroup).toBeDefined();
      expect(existsSync(cgroup!)).toBe(false);
      const ran = await new Promise<{ status: number | null; stdout: string }>((done) => {
        const child = spawn(wrapped.file, wrapped.args, {
          cwd,
          env: wrapped.env,
          stdio: ['ignore', 'pipe', 'inherit'],
        });
        let stdout = '';
        child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
        child.on('close', (status) => done({ status, stdout }));
      });
      expect(ran).toEqual({ status: 0, stdout: 'inside\n' });
      expect(existsSync(cgroup!)).toBe(true); // made, by the system's mkdir
      expect(existsSync(marker)).toBe(false);
    } finally {
      wrapped.release();
    }
  },
);
