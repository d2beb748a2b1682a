// @aleph/verification: the turn-level verifier chain, shell stop hooks and the goal gate.
export {
  buildStopHooksFromConfig,
  parseStopHookEntries,
  stopHookEntrySchema,
  stopHooksSchema,
} from './config.js';
export type { StopHookEntry } from './config.js';
export {
  CLAUDE_CODE_EVENTS,
  discoverClaudeCodeHooks,
  matcherMatches,
  parseClaudeCodeHooksFile,
  type ClaudeCodeCommandHook,
  type ClaudeCodeEvent,
  type ClaudeCodeHooks,
  type DiscoverClaudeCodeHooksOptions,
} from './claude-code-settings.js';
export {
  ClaudeCodeSessionHooks,
  type ClaudeCodeSessionHooksOptions,
  type SessionHookContext,
  type SessionHookDecision,
  type SessionHookEvent,
} from './claude-code-session-hooks.js';
export {
  ClaudeCodeToolHooks,
  type ClaudeCodeToolHooksOptions,
  type ToolHookAfter,
  type ToolHookCall,
  type ToolHookDecision,
  type ToolHookResult,
  type ToolHookRunContext,
} from './claude-code-tool-hooks.js';
export { VerificationError, type VerificationErrorCode } from './errors.js';
export {
  claudeCodeStopHooks,
  ExtensionStopHookVerifier,
  HookEvent,
  loadHooksFile,
  type ClaudeCodeHookRunOptions,
  type ExtensionStopHookVerifierOptions,
  type StopHookFunction,
} from './extension-stop-gate.js';
export {
  DEFAULT_MAX_CONSECUTIVE_GATE_ERRORS,
  effectiveGate,
  gateVeto,
  type EffectiveGateOptions,
  type GateState,
  type GateVetoOptions,
} from './goal-gate.js';
export { DEFAULT_MAX_CONSECUTIVE_BLOCKS, type HookRunnerOptions } from './internal/hook-runner.js';
/** Aleph's tools under Claude Code's names and input shapes (`shell` → `Bash`, `path` → `file_path`). */
export { claudeToolName, toClaudeInput } from './internal/tool-names.js';
export {
  firstLines,
  type HookEventName,
  type HookOutcome,
  type HookOutcomeListener,
  type HookRoute,
} from './hook-outcome.js';
export {
  KILL_GRACE_MS,
  OUTPUT_CAP_BYTES,
  OUTPUT_READ_LIMIT_BYTES,
  type CommandToRun,
  type CommandWrapper,
  type WrappedCommandToRun,
} from './internal/run-process.js';
export { MutationEvidenceVerifier } from './mutation-evidence-verifier.js';
export { DEFAULT_MAX_REMINDERS, ScratchpadGoalVerifier } from './scratchpad-goal-verifier.js';
export { StopHookVerifier } from './stop-hook-verifier.js';
export {
  CLAUDE_CODE_HOOK_TIMEOUT_MS,
  DEFAULT_HOOK_TIMEOUT_MS,
  hookInput,
  isShellSafe,
  shellSafetyProblem,
  ShellStopHook,
  type ShellStopHookOptions,
  type StopHookContext,
  type StopHookHandler,
  type StopHookVerdict,
} from './stop-hooks.js';
export {
  DEFAULT_HALT_THRESHOLD,
  DEFAULT_REPEAT_THRESHOLD,
  ToolLoopVerifier,
  type ToolLoopVerifierOptions,
} from './tool-loop-verifier.js';
export {
  CONTINUE,
  hashToolArgs,
  TOOL_HISTORY_WINDOW,
  type RobustnessProfile,
  type ScratchpadRow,
  type ToolCallSummary,
  type TurnVerifier,
  type TurnVerifyContext,
  type VerifierVerdict,
} from './turn-verifier.js';
export { parseVerdict, type SelfVerdict } from './verdict.js';
export { VerifierChain, VerifierChainBuilder, type VerifierErrorListener } from './verifier-chain.js';
