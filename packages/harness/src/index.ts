// @aleph/harness: the Think → Act loop with a verifier chain, parallel act groups, a session log
// and watchdogs.
export {
  act,
  conflicts,
  MAX_TIMER_MS,
  partition,
  timerDelay,
  type ActOptions,
  type ActOutcome,
  type EvidenceCache,
} from './act.js';
export {
  AGENT_ROLE_PROMPT,
  AgentHarness,
  DEFAULT_MAX_CONSECUTIVE_FAILURES,
  DEFAULT_MAX_ITERATIONS,
  DEFAULT_TOOL_TIMEOUT_MS,
  DEFAULT_MAX_TOOL_CALLS_PER_TURN,
  DEFAULT_MAX_TOOL_RESULT_CHARS_PER_TURN,
  DEFAULT_TURN_TIMEOUT_MS,
  type HarnessDeps,
  type RunInput,
  type RunOptions,
  type TurnOutcome,
} from './agent-harness.js';
export {
  compactToFit,
  estimateTokens,
  fitToBudget,
  truncateToFit,
  type FitResult,
} from './context-budget.js';
export { FatalProviderError, HarnessError, type HarnessErrorCode, type HarnessErrorInfo } from './errors.js';
export { Orchestrator, type FlowRequest, type OrchestratorOptions } from './orchestrator.js';
export {
  createFileSessionStore,
  InMemorySessionStore,
  parseLog,
  summarize,
  Transcript,
} from './session-store.js';
export {
  ReplyAssembler,
  ReplyError,
  readReply,
  replyStream,
  StallError,
  type ReadReply,
  type ReadReplyOptions,
} from './think.js';
export { ToolService, type ParsedCall } from './tool-service.js';
export type * from './types.js';
