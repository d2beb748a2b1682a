// The environment the user started Aleph with, minus what a package manager's script runner added
// (`pnpm start`, `npm start`): the `node_modules/.bin` and `node-gyp-bin` entries it put at the
// front of PATH, `npm_*`, `pnpm_*`, `INIT_CWD`, `PNPM_SCRIPT_SRC_DIR`, its `NODE` and `_`. Every
// child — terminals, hooks, gates, the sandbox before its allow-list — inherits this, so `tsc` in
// a terminal or a hook is the project's (or none), never Aleph's own copy.
// Without a runner's marks the environment is left exactly as it is.
import { delimiter, sep } from 'node:path';

/** Variables only a script runner sets: their presence says the process was started by one. */
const RUNNER_MARKS = ['npm_lifecycle_event', 'npm_execpath', 'PNPM_SCRIPT_SRC_DIR'];
const RUNNER_NAMES = new Set(['INIT_CWD', 'PNPM_SCRIPT_SRC_DIR', '_']);
const RUNNER_PATH_ENTRY = /[\\/](?:node_modules[\\/]\.bin|node-gyp-bin)[\\/]?$/;

/** PATH without the runner's entries: those it prepended, a run of them at the front. */
function userPath(path: string): string {
  const entries = path.split(delimiter);
  let first = 0;
  while (first < entries.length && RUNNER_PATH_ENTRY.test(entries[first]!)) first += 1;
  return entries.slice(first).join(delimiter);
}

/** The variables of `env` a runner added, and `env` without them (PATH cleaned). */
export function userEnvironment(env: NodeJS.ProcessEnv): { env: NodeJS.ProcessEnv; removed: string[] } {
  if (!RUNNER_MARKS.some((name) => env[name] !== undefined)) return { env: { ...env }, removed: [] };
  const kept: NodeJS.ProcessEnv = {};
  const removed: string[] = [];
  const runnerNode = env['npm_node_execpath'];
  for (const [name, value] of Object.entries(env)) {
    const added =
      name.startsWith('npm_') ||
      name.startsWith('pnpm_') ||
      RUNNER_NAMES.has(name) ||
      (name === 'NODE' && (value === runnerNode || value === process.execPath));
    if (added) removed.push(name);
    else kept[name] = value;
  }
  for (const name of ['PATH', 'Path']) {
    const path = kept[name];
    if (path !== undefined && userPath(path) !== path) {
      kept[name] = userPath(path);
      removed.push(`${name} entries ending in ${sep}node_modules${sep}.bin or node-gyp-bin`);
    }
  }
  return { env: kept, removed };
}

/** Makes `process.env` the user's environment (see above), in place; returns what was removed. */
export function restoreUserEnvironment(): string[] {
  const { env, removed } = userEnvironment(process.env);
  for (const name of Object.keys(process.env)) if (!(name in env)) delete process.env[name];
  Object.assign(process.env, env);
  return removed;
}
