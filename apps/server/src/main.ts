#!/usr/bin/env node
// `pnpm --filter server start`: load the config, start the server, print where it listens and the
// token, and on SIGINT/SIGTERM end every run and every terminal, then exit 0.
import { parseArgs } from 'node:util';
import { VerificationError } from '@aleph/verification';
import { ConfigError, loadConfig } from './config.js';
import { ProviderConfigError } from './providers.js';
import { startServer } from './server.js';
import { stateDir } from './state.js';

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: { config: { type: 'string', short: 'c' }, help: { type: 'boolean', short: 'h' } },
  });
  if (values.help) {
    console.log(
      'usage: aleph-server [--config aleph.toml]\nThe config is --config, else ./aleph.toml, else built-in defaults.',
    );
    return 0;
  }
  let loaded;
  try {
    loaded = loadConfig(values.config === undefined ? {} : { path: values.config });
  } catch (error) {
    if (error instanceof ConfigError) {
      console.error(`aleph: bad configuration\n${error.message}`);
      return 2;
    }
    throw error;
  }
  let server;
  try {
    server = await startServer({ config: loaded.config, stateDir: stateDir() });
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
    throw error;
  }
  console.log(`Aleph listening on ${server.url}`);
  console.log(
    `token: ${server.token}${server.tokenGenerated ? ' (generated and stored in the state directory)' : ''}`,
  );
  console.log(`config: ${loaded.path ?? 'built-in defaults'}`);
  const { sandbox } = server;
  console.log(
    sandbox.backend === 'none'
      ? `sandbox: off (${sandbox.unconfinedReason ?? 'no backend'}): the model's commands run unconfined`
      : `sandbox: ${sandbox.backend} (network ${loaded.config.sandbox.network})`,
  );
  if (server.providerId === undefined) {
    console.log(
      'no LLM provider configured: terminals work; agent.run answers no_provider until [agent] provider and model are set.',
    );
  } else {
    console.log(`provider: ${server.providerId}`);
  }
  await new Promise<void>((resolve) => {
    const stop = (signal: NodeJS.Signals): void => {
      console.log(`${signal}: shutting down`);
      server.close().then(resolve, resolve);
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  return 0;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
