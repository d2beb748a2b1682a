// @aleph/server: composition only. Exported for the server's own tests and tools.
export { ConfigError, configSchema, loadConfig, parseConfig, type Config } from './config.js';
export { aiSdkProvider, createProvider, ProviderConfigError } from './providers.js';
export { startServer, type RunningServer, type StartOptions } from './server.js';
export { builtinTools } from './tools.js';
export { confine } from './workdir-files.js';
