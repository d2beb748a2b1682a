// @aleph/sandbox: confine a command the model chose (bubblewrap / sandbox-exec), scrub secrets.
export {
  createSandbox,
  INSTALL_HINT,
  probeSandbox,
  type ConfiguredSandbox,
  type CreateSandboxOptions,
  type LimitsReport,
  type ProtectedPath,
  type ProbeOptions,
  type Sandbox,
  type SandboxBackend,
  type SandboxCommand,
  type SandboxMode,
  type SandboxProbe,
  type WrappedCommand,
} from './sandbox.js';
export {
  ENV_ALLOW_LIST,
  inSandboxOwnFilesystem,
  isWithin,
  PROTECTED_HOME_PATHS,
  PROTECTED_PROJECT_PATHS,
  PROTECTED_ROOT_PATHS,
  protectedPathOf,
  sandboxEnv,
  scrubEnv,
  type DeniedPath,
  type SandboxPolicy,
} from './policy.js';
export {
  MODEL_FILE_MAX_BYTES,
  readModelWritableFile,
  type ModelFile,
  type ModelFileOptions,
  type ModelFileRefusal,
} from './model-file.js';
export {
  embeddedRepositories,
  gitDirOf,
  gitEnvironment,
  hiddenTag,
  MAX_EXAMINED_GITLINKS,
  MAX_HIDDEN_NAMED,
  nulRecords,
  type EmbeddedRepositories,
  type EmbeddedRepository,
} from './embedded-repositories.js';
export { DEFAULT_LIMITS, type SandboxLimits } from './internal/limits.js';
export { commonDirOf } from './internal/project-mounts.js';
export { SandboxError, type SandboxErrorCode } from './errors.js';
export { unsafeCwd, type UnsafeCwd } from './cwd.js';
