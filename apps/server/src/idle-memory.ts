// What an idle server holds after start-up, and how it gives back what only start-up needed.
// Start-up (loading modules, building schemas) grows V8's young generation to its largest (two
// 16 MiB semi-spaces on 64-bit) and leaves garbage in the old one; resolving a few hundred module
// URLs makes V8's optimizing compiler (TurboFan) compile the loader's path and URL functions, which
// pages in its code (~3.5 MiB of the node binary) for work done once; reading and compiling the
// modules leaves the C heap with free pages spread through it, which free() never returns.
import { createRequire } from 'node:module';
import v8 from 'node:v8';

class NoObject {}

/** Node options that choose V8's tiers themselves: with any of these, the tiers are left alone. */
const TIERING_OPTIONS = /(^|\s)--(no-)?(opt|turbofan|maglev|sparkplug|jitless|max-opt)\b/;

let optimizationDeferred = false;

/**
 * Until {@link releaseStartupMemory}, V8 optimizes nothing with TurboFan (its baseline tiers run
 * as usual): call before the modules of start-up load. Nothing happens when node was given an
 * option that chooses V8's tiers (on its command line or in NODE_OPTIONS).
 */
export function deferOptimization(): void {
  const given = `${process.execArgv.join(' ')} ${process.env['NODE_OPTIONS'] ?? ''}`;
  if (optimizationDeferred || TIERING_OPTIONS.test(given)) return;
  v8.setFlagsFromString('--no-opt');
  optimizationDeferred = true;
}

/** Whether TurboFan is held back by {@link deferOptimization} (until the server is idle). */
export function optimizationIsDeferred(): boolean {
  return optimizationDeferred;
}

/** glibc's malloc_trim(0) through dist/native/release-memory.node (src/native), when it was built. */
function trimCHeap(): boolean {
  let trim: () => boolean;
  try {
    trim = createRequire(import.meta.url)('./native/release-memory.node') as () => boolean;
  } catch {
    return false; // not built (no C compiler) or not loadable here: the pages stay
  }
  return trim();
}

/**
 * Once the server listens and nothing else is queued: TurboFan is back (see
 * {@link deferOptimization}); one collection of all available garbage (the one V8 runs before it
 * counts a heap's objects) returns the start-up's garbage and shrinks the young generation to its
 * smallest (it grows again as work comes; before Node 20.13, which lacks `v8.queryObjects`, this
 * step is skipped); then the C heap's free pages go back to the system.
 */
export function releaseStartupMemory(): Promise<void> {
  return new Promise<void>((resolve) => {
    setImmediate(() => {
      if (optimizationDeferred) {
        v8.setFlagsFromString('--opt');
        optimizationDeferred = false;
      }
      collectAllGarbage();
      trimCHeap();
      resolve();
    }).unref();
  });
}

/** How {@link releaseAfterWork} tells work from idleness. */
export interface AfterWorkOptions {
  /** How often the event loop's utilization is sampled (default 10 s). */
  readonly everyMs?: number;
  /** Quiet samples in a row after work before the release (default 3: 30 s). */
  readonly quietSamples?: number;
  /** A sample at or above this utilization (0–1) is work (default 0.02). */
  readonly busy?: number;
  /** Called after each release. */
  readonly onRelease?: () => void;
}

/**
 * Work (runs, terminals, requests) grows the young generation and fragments the C heap again; an
 * idle server after work would keep that. The event loop's utilization is sampled; once a sample
 * was work and then enough quiet samples followed, the start-up's release runs again (all
 * available garbage, then the C heap's free pages), once per stretch of work. A server that stays
 * idle does nothing. Returns the function that stops the sampling.
 */
export function releaseAfterWork(options: AfterWorkOptions = {}): () => void {
  const { everyMs = 10_000, quietSamples = 3, busy = 0.02, onRelease } = options;
  let last = performance.eventLoopUtilization();
  let worked = false;
  let quiet = 0;
  let released = false;
  const timer = setInterval(() => {
    const now = performance.eventLoopUtilization();
    const { utilization } = performance.eventLoopUtilization(now, last);
    last = now;
    if (released) {
      released = false; // the sample after a release holds the collection's own aftermath: not work
    } else if (utilization >= busy) {
      worked = true;
      quiet = 0;
    } else if (worked && ++quiet >= quietSamples) {
      worked = false;
      quiet = 0;
      collectAllGarbage();
      trimCHeap();
      released = true;
      onRelease?.();
    }
  }, everyMs);
  timer.unref();
  return () => clearInterval(timer);
}

function collectAllGarbage(): void {
  const query = (v8 as { queryObjects?: (ctor: unknown, options: { format: 'count' }) => number })
    .queryObjects;
  if (typeof query !== 'function') return;
  // The API is marked experimental and says so once on stderr: not the user's concern here.
  const { emitWarning } = Object.getOwnPropertyDescriptors(process);
  process.emitWarning = () => undefined;
  try {
    query(NoObject, { format: 'count' });
  } finally {
    Object.defineProperty(process, 'emitWarning', emitWarning);
  }
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
