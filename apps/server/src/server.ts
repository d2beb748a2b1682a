// The composition root, like the seed's orchestrator_init: config → power, pty manager, session
// store, verifier chain, providers, tools, gateway, and agent.* beside pty.* on one socket.
import { join } from 'node:path';
import { createGateway, type Gateway } from '@aleph/gateway';
import { createFileSessionStore } from '@aleph/harness';
import { createPowerCapability } from '@aleph/power';
import { loadHooksFile } from '@aleph/verification';
import pino, { type Logger } from 'pino';
import { ServerPtys } from './agent-ptys.js';
import { AgentService } from './agent-service.js';
import type { Config } from './config.js';
import { createProvider } from './providers.js';
import { resolveToken, writeServerInfo } from './state.js';

export interface StartOptions {
  readonly config: Config;
  readonly stateDir: string;
  readonly env?: NodeJS.ProcessEnv;
  readonly logger?: Logger;
}

export interface RunningServer {
  readonly url: string;
  readonly token: string;
  readonly tokenGenerated: boolean;
  readonly providerId: string | undefined;
  readonly gateway: Gateway;
  readonly agents: AgentService;
  close(): Promise<void>;
}

export async function startServer(options: StartOptions): Promise<RunningServer> {
  const { config, stateDir } = options;
  const env = options.env ?? process.env;
  const logger = options.logger ?? pino({ level: config.log.level }, pino.destination(2));
  // Fail at start, not at the first run: bad hook files and provider settings are config errors.
  for (const file of config.hooks.files) loadHooksFile(file);
  const defaultProvider = createProvider(config.agent, env);

  const power = createPowerCapability({
    enabled: config.power.inhibit_sleep,
    env,
    onWarning: (message) => logger.warn({ component: 'power' }, message),
  });
  const ptyManager = new ServerPtys(
    {
      maxSessions: config.pty.max_sessions,
      idleTtlMs: config.pty.idle_ttl_secs * 1000,
      eviction: config.pty.eviction,
    },
    { maxSessions: config.pty.agent_max_sessions },
  );
  const sessions = createFileSessionStore(config.store.dir ?? join(stateDir, 'sessions'));
  const { token, generated } = resolveToken(stateDir, config.gateway.token);
  const gateway = await createGateway({
    host: config.gateway.host,
    port: config.gateway.port,
    token,
    ...(config.gateway.allowed_origins ? { allowedOrigins: config.gateway.allowed_origins } : {}),
    ptyManager,
    logger: logger.child({ component: 'gateway' }),
  });
  const agents = new AgentService({
    config,
    gateway,
    ptys: ptyManager,
    sessions,
    power,
    logger: logger.child({ component: 'agent' }),
    providerFor: (model) =>
      model === undefined ? defaultProvider : createProvider(config.agent, env, model),
  });
  writeServerInfo(stateDir, { url: gateway.url, token, pid: process.pid });

  let closing: Promise<void> | undefined;
  return {
    url: gateway.url,
    token,
    tokenGenerated: generated,
    providerId: defaultProvider?.id,
    gateway,
    agents,
    close() {
      closing ??= (async () => {
        await agents.shutdown(); // runs cancelled first: their tools' ptys go with the gateway next
        await gateway.close(); // every pty's process group ended (reason: shutdown)
        await sessions.close?.();
        logger.flush();
      })();
      return closing;
    },
  };
}
