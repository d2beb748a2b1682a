// @aleph/pty: programs in pseudo-terminals, with caps, idle expiry, process-tree cleanup and replay.
export { PtyError, type PtyErrorCode } from './errors.js';
export {
  DEFAULT_ENDED_RETENTION_MS,
  DEFAULT_IDLE_TTL_MS,
  DEFAULT_MAX_SESSIONS,
  getPtyManager,
  PtyManager,
  type EvictionPolicy,
  type PtyManagerEvents,
  type PtyManagerOptions,
} from './pty-manager.js';
export {
  defaultShell,
  PtySession,
  type DataListener,
  type ExitInfo,
  type ExitListener,
  type ExitReason,
  type PtySpawnOptions,
} from './pty-session.js';
export { Scrollback, type ReplayChunk } from './scrollback.js';
