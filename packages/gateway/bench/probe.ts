import * as nodePty from 'node-pty';
import { openSync, closeSync, constants, writeFileSync } from 'node:fs';
import { PtySession } from '@aleph/pty';
const file = '/tmp/probe/payload.txt';
const line = 'the quick brown fox jumps over the lazy dog 0123456789 ABCDEFGHIJKLMNOPQRSTUVWXYZ\n';
writeFileSync(file, line.repeat(400000));
const variants: Record<string, () => Promise<number>> = {
  raw: () =>
    new Promise((r) => {
      let n = 0;
      const p = nodePty.spawn('/bin/cat', [file], { cols: 200, rows: 50, encoding: null });
      p.onData((d: any) => (n += d.length));
      p.onExit(() => r(n));
    }),
  hold: () =>
    new Promise((r) => {
      let n = 0;
      const p: any = nodePty.spawn('/bin/cat', [file], { cols: 200, rows: 50, encoding: null });
      const fd = openSync(p._pty, constants.O_RDWR | constants.O_NOCTTY);
      p.onData((d: any) => (n += d.length));
      p.onExit(() => {
        closeSync(fd);
        r(n);
      });
    }),
  session: async () => {
    let n = 0;
    const s = PtySession.spawn({ command: '/bin/cat', args: [file], cols: 200, rows: 50 });
    s.onData((d) => (n += d.length));
    await s.exited;
    return n;
  },
};
const results: Record<string, number[]> = { raw: [], hold: [], session: [] };
for (let i = 0; i < 8; i++)
  for (const [name, run] of Object.entries(variants)) {
    const t = performance.now();
    const n = await run();
    results[name]!.push(n / 1048576 / ((performance.now() - t) / 1000));
  }
for (const [name, v] of Object.entries(results)) {
  v.sort((a, b) => a - b);
  console.log(name, 'median', v[4]!.toFixed(1), 'min', v[0]!.toFixed(1), 'max', v[7]!.toFixed(1));
}
