// Dispatch: every flow — a user's task or a sub-agent — goes through `dispatch` → a harness run.
// A sub-agent is a child flow with its own session; the parent's step reports it as `splitChild`.
import { z } from 'zod';
import { AgentHarness, type HarnessDeps, type RunOptions } from './agent-harness.js';
import type { RunResult, Tool } from './types.js';

export interface FlowRequest {
  readonly prompt: string;
  /** Resume this session; a new one when absent. */
  readonly sessionId?: string;
  /** The session that dispatched this flow (a sub-agent's parent). */
  readonly parentSessionId?: string;
  /** The flow's project root; a sub-agent works in its parent's. */
  readonly cwd?: string;
  /** Take over `sessionId`'s run from its log (see `RunInput.resume`). */
  readonly resume?: boolean;
}

export interface OrchestratorOptions {
  /** The harness dependencies for a flow; called once per dispatch. */
  readonly depsFor: (flow: FlowRequest) => HarnessDeps;
  /** Deepest sub-agent nesting allowed (default 2). */
  readonly maxDepth?: number;
}

export class Orchestrator {
  readonly #options: OrchestratorOptions;
  /** The running flows: how deep each is nested, and where it works. */
  readonly #flows = new Map<string, { depth: number; cwd: string | undefined }>();

  constructor(options: OrchestratorOptions) {
    this.#options = options;
  }

  async dispatch(flow: FlowRequest, options: RunOptions = {}): Promise<RunResult> {
    const parent = flow.parentSessionId === undefined ? undefined : this.#flows.get(flow.parentSessionId);
    const depth = flow.parentSessionId === undefined ? 0 : (parent?.depth ?? 0) + 1;
    const cwd = flow.cwd ?? parent?.cwd;
    const deps = this.#options.depsFor(flow);
    const harness = new AgentHarness(deps);
    let sessionId = flow.sessionId;
    if (sessionId === undefined) {
      sessionId = await deps.sessions.create(
        flow.parentSessionId === undefined ? {} : { parentId: flow.parentSessionId },
      );
    }
    this.#flows.set(sessionId, { depth, cwd });
    try {
      return await harness.run(
        {
          prompt: flow.prompt,
          sessionId,
          ...(cwd === undefined ? {} : { cwd }),
          ...(flow.resume === true ? { resume: true } : {}),
        },
        options,
      );
    } finally {
      this.#flows.delete(sessionId);
    }
  }

  /** The `spawn_agent` tool: runs `prompt` as a child flow and returns its final text. */
  spawnAgentTool(): Tool<{ prompt: string }> {
    return {
      name: 'spawn_agent',
      description:
        'Delegate a self-contained subtask to a sub-agent with its own session. Returns its final report.',
      input: z.object({ prompt: z.string().min(1).describe('The complete instructions for the sub-agent') }),
      kind: 'other',
      claim: () => ({ kind: 'none' }),
      execute: async ({ prompt }, ctx) => {
        const depth = this.#flows.get(ctx.sessionId)?.depth ?? 0;
        if (depth + 1 > (this.#options.maxDepth ?? 2)) {
          return { output: `sub-agents may nest at most ${this.#options.maxDepth ?? 2} deep`, isError: true };
        }
        const result = await this.dispatch(
          { prompt, parentSessionId: ctx.sessionId },
          { signal: ctx.signal },
        );
        const ok = result.terminateReason.kind === 'model_stop';
        return {
          output: `sub-agent ${result.sessionId} ended (${result.terminateReason.kind}) after ${result.iterations} turn(s):\n${result.finalText}`,
          isError: !ok,
          splitChild: result.sessionId,
        };
      },
    };
  }
}
