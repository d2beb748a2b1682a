#!/usr/bin/env node
// `pnpm --filter server start`: load the config, start the server, print where it listens and the
// token, and on SIGINT/SIGTERM end every run and every terminal, then exit 0.
import { closeSync, readdirSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { parseArgs } from 'node:util';
import {
  deferOptimization,
  forgetLauncherSettings,
  releaseAfterWork,
  releaseStartupMemory,
} from './idle-memory.js';
import { invocationDir, packageVersion, stateDir } from './state.js';
import { restoreUserEnvironment } from './user-environment.js';

const USAGE =
  'usage: aleph-server [--config aleph.toml] [--version]\nThe config is --config, else ./aleph.toml (from the directory you ran the command in), else built-in defaults.';

/** Errors of the host or the address to listen on: a config problem, said in one line. */
/** How often a server started by a package runner checks that the runner is still there. */
const PARENT_CHECK_MS = 1000;
const LISTEN_ERRORS = new Set(['ENOTFOUND', 'EAI_AGAIN', 'EADDRNOTAVAIL', 'EACCES', 'EAI_NONAME']);

/**
 * Descriptors this process inherited without close-on-exec (a launcher's pipe, a file left open)
 * would reach every child, bwrap and the sandboxed command included: closed at start.
 * Node's own are all close-on-exec; stdio and an IPC channel are kept. Linux only (/proc).
 */
function closeInheritedDescriptors(): void {
  let fds: string[];
  try {
    fds = readdirSync('/proc/self/fd');
  } catch {
    return;
  }
  const keep = new Set([0, 1, 2, Number(process.env['NODE_CHANNEL_FD'] ?? -1)]);
  for (const fd of fds.map(Number).filter((fd) => !keep.has(fd))) {
    try {
      const flags = /^flags:\s+([0-7]+)/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8'))?.[1];
      if (flags !== undefined && (parseInt(flags, 8) & 0o2000000) === 0) closeSync(fd);
    } catch {
      // gone already (the listing's own descriptor)
    }
  }
}

async function main(): Promise<number> {
  deferOptimization();
  forgetLauncherSettings();
  closeInheritedDescriptors();
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        config: { type: 'string', short: 'c' },
        help: { type: 'boolean', short: 'h' },
        version: { type: 'boolean', short: 'v' },
      },
    }));
  } catch (error) {
    console.error(`aleph-server: ${(error as Error).message}\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  if (values.version) {
    console.log(packageVersion());
    return 0;
  }
  // The server's modules load only now, with V8's optimizing compiler held back until it is idle.
  const [
    { ConfinedWrites, distrustedConfig },
    { VerificationError },
    { ConfigError, loadConfig },
    { mcpStartLines },
    { ProviderConfigError },
    { startServer },
  ] = await Promise.all([
    import('./confined-writes.js'),
    import('@aleph/verification'),
    import('./config.js'),
    import('./mcp-tools.js'),
    import('./providers.js'),
    import('./server.js'),
  ]);
  // A config file the model's commands could have written (changed during an agent run in its
  // folder or above, or during a run and then moved into place) is not read as configuration: it
  // could turn the sandbox off or add hooks.
  const confinedWrites = new ConfinedWrites(stateDir());
  const distrust = (path: string): string | undefined => distrustedConfig(confinedWrites, path);
  let loaded;
  try {
    const cwd = invocationDir();
    loaded = loadConfig({ ...(values.config === undefined ? {} : { path: values.config }), cwd, distrust });
  } catch (error) {
    if (error instanceof ConfigError) {
      console.error(`aleph: bad configuration\n${error.message}`);
      return 2;
    }
    throw error;
  }
  // Children get the user's environment, not the script runner's (`pnpm start`), and new terminals
  // start where the user works: [agent] workdir, else $HOME (never apps/server).
  // The runner's pid, when one started the server: a server it leaves behind ends (see below).
  const runner = restoreUserEnvironment().length > 0 ? process.ppid : undefined;
  const home = loaded.config.agent.workdir ?? homedir();
  try {
    process.chdir(home);
  } catch (error) {
    console.error(
      `aleph: new terminals cannot start in ${home}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`,
    );
  }
  let server;
  try {
    server = await startServer({
      config: loaded.config,
      stateDir: stateDir(),
      configPath: loaded.path,
      confinedWrites,
    });
  } catch (error) {
    if (
      error instanceof ProviderConfigError ||
      error instanceof ConfigError ||
      error instanceof VerificationError
    ) {
      console.error(`aleph: bad configuration\n${(error as Error).message}`);
      return 2;
    }
    if ((error as NodeJS.ErrnoException).code === 'EADDRINUSE') {
      console.error(`aleph: port ${loaded.config.gateway.port} is in use: set [gateway].port or ALEPH_PORT`);
      return 1;
    }
    const { code, syscall } = error as NodeJS.ErrnoException;
    if (
      code !== undefined &&
      LISTEN_ERRORS.has(code) &&
      (syscall === 'getaddrinfo' || syscall === 'listen')
    ) {
      const { host, port } = loaded.config.gateway;
      console.error(`aleph: cannot listen on ${host}:${port} ([gateway].host / .port): ${code}`);
      return 2;
    }
    throw error;
  }
  console.log(`Aleph listening on ${server.url}`);
  console.log(
    `token: ${server.token}${server.tokenGenerated ? ' (generated and stored in the state directory)' : ''}`,
  );
  if (server.consoleUrl) console.log(`console: ${server.consoleUrl}`);
  console.log(`config: ${loaded.path ?? 'built-in defaults'}`);
  const { sandbox } = server;
  console.log(
    sandbox.backend === 'none'
      ? `sandbox: off (${sandbox.unconfinedReason ?? 'no backend'}): the model's commands run unconfined`
      : `sandbox: ${sandbox.backend} (network ${loaded.config.sandbox.network})`,
  );
  for (const line of mcpStartLines(loaded.config, loaded.path, sandbox.backend !== 'none')) console.log(line);
  if (server.cluster !== undefined && loaded.config.cluster !== undefined) {
    const { clusterStartLine } = await import('./cluster-mode.js');
    console.log(clusterStartLine(loaded.config.cluster, server.cluster));
  }
  if (server.providerId === undefined) {
    console.log(
      'no LLM provider configured: terminals work; agent.run answers no_provider until [agent] provider and model are set.',
    );
  } else {
    console.log(`provider: ${server.providerId}`);
  }
  void releaseStartupMemory();
  const stopReleasing = releaseAfterWork();
  await new Promise<void>((resolve) => {
    let stopping = false;
    const stop = (why: string): void => {
      if (stopping) return;
      stopping = true;
      console.log(`${why}: shutting down`);
      stopReleasing();
      server.close().then(resolve, resolve);
    };
    // SIGHUP too: a closed terminal or a dropped ssh session is how a `pnpm start` most often ends.
    for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.once(signal, () => stop(signal));
    // A package runner passes SIGINT and SIGTERM on to the server, not SIGHUP: when the runner that
    // started the server is gone, the server goes too rather than keep serving on its own.
    if (runner !== undefined) {
      const watch = setInterval(() => {
        if (process.ppid === runner) return;
        clearInterval(watch);
        stop(`the package runner that started the server (pid ${runner}) ended`);
      }, PARENT_CHECK_MS);
      watch.unref();
    }
  });
  return 0;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    // One line for the user; the stack only when asked for (ALEPH_LOG_LEVEL=debug).
    const verbose = ['debug', 'trace'].includes(process.env['ALEPH_LOG_LEVEL'] ?? '');
    console.error(verbose ? error : `aleph: ${(error as Error).message ?? String(error)}`);
    process.exit(1);
  },
);
