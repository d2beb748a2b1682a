// Start-up (loading modules, building schemas) grows V8's young generation to its largest (two
// 16 MiB semi-spaces on 64-bit) and leaves garbage in the old one; an idle server would keep both.
import v8 from 'node:v8';

class NoObject {}

/**
 * Once the server listens and nothing else is queued, one collection of all available garbage
 * (the one V8 runs before it counts a heap's objects) returns the start-up's garbage and shrinks the
 * young generation to its smallest; it grows again as work comes. Where Node lacks
 * `v8.queryObjects` (before 20.13), nothing happens.
 */
export function releaseStartupMemory(): void {
  const query = (v8 as { queryObjects?: (ctor: unknown, options: { format: 'count' }) => number })
    .queryObjects;
  if (typeof query !== 'function') return;
  setImmediate(() => {
    // The API is marked experimental and says so once on stderr: not the user's concern here.
    const { emitWarning } = Object.getOwnPropertyDescriptors(process);
    process.emitWarning = () => undefined;
    try {
      query(NoObject, { format: 'count' });
    } finally {
      Object.defineProperty(process, 'emitWarning', emitWarning);
    }
  }).unref();
}

/** Settings bin/aleph-server may make for the server's own process, never for what it starts. */
const LAUNCHER_SETTINGS = new Set(['MALLOC_ARENA_MAX']);

/**
 * bin/aleph-server names in ALEPH_LAUNCHER_SET what it set for this process (one malloc arena):
 * those leave process.env at start, before anything is spawned, so no child inherits them. A value
 * the user set themselves is not named there and stays.
 */
export function forgetLauncherSettings(): void {
  for (const name of (process.env['ALEPH_LAUNCHER_SET'] ?? '').split(','))
    if (LAUNCHER_SETTINGS.has(name)) delete process.env[name];
  delete process.env['ALEPH_LAUNCHER_SET'];
}
