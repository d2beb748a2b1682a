// agent.* on the gateway's socket: start a run, cancel it, list runs, read a session's history;
// events agent.step, agent.tool, agent.verdict and agent.done tell subscribers what happens.
import { randomUUID } from 'node:crypto';
import { existsSync, realpathSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { GatewayError, type Gateway } from '@aleph/gateway';
import {
  AGENT_ROLE_PROMPT,
  Orchestrator,
  type AiProvider,
  type HarnessDeps,
  type RunResult,
  type SessionEvent,
  type SessionStore,
  type TerminateReason,
  type TokenUsage,
  type Tool,
} from '@aleph/harness';
import type { PowerCapability } from '@aleph/power';
import {
  embeddedRepositories,
  MAX_EXAMINED_GITLINKS,
  type EmbeddedRepositories,
  type EmbeddedRepository,
  isWithin,
  unsafeCwd,
  type ConfiguredSandbox,
  type ProtectedPath,
  type Sandbox,
} from '@aleph/sandbox';
import {
  buildStopHooksFromConfig,
  ClaudeCodeSessionHooks,
  ClaudeCodeToolHooks,
  type ClaudeCodeHooks,
  type CommandWrapper,
  discoverClaudeCodeHooks,
  ExtensionStopHookVerifier,
  type HookOutcome,
  MutationEvidenceVerifier,
  parseVerdict,
  ScratchpadGoalVerifier,
  ToolLoopVerifier,
  VerifierChain,
} from '@aleph/verification';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { ClusterRunQueue } from './cluster-mode.js';
import type { Config } from './config.js';
import { TerminalShare, type ServerPtys } from './agent-ptys.js';
import { reviewStart, unseenChanges } from './unseen-changes.js';
import {
  gitOperations,
  gitOperationsWarning,
  hiddenChangesWarning,
  historyWarning,
} from './git-operations.js';
import type { HookWarning } from './cli-format.js';
import { GoalGateVerifier } from './goal-gate-verifier.js';
import {
  describeChange,
  entriesUnder,
  keptFrom,
  quote,
  real,
  type ConfinedWrites,
  type WriteWindow,
} from './confined-writes.js';
import { loadInstructionFiles } from './instruction-files.js';
import { RunEventGate, type LeaseView } from './run-event-gate.js';
import { RunSessionHooks, type SessionOpening } from './session-hooks.js';
import { startRunMcp, type RunMcp } from './mcp-tools.js';
import { boundedJson, type Cut, jsonBytes, prefixWithin } from './bounded-json.js';
import { builtinTools, projectProtection, serverProtection, type Goal } from './tools.js';
import { deniedBy, type DeniedEntry, type ProtectedSet } from './workdir-files.js';

export interface AgentServiceOptions {
  readonly config: Config;
  readonly gateway: Gateway;
  readonly ptys: ServerPtys;
  readonly sessions: SessionStore;
  readonly power: PowerCapability;
  /** Wraps the model's commands (the shell tool; the goal gate); its protected set guards the file tools too. */
  readonly sandbox: Sandbox & Partial<Pick<ConfiguredSandbox, 'protectedPaths' | 'keep'>>;
  /** The sandbox's denied paths: no run's cwd lies under one, and the file tools refuse them. */
  readonly denied?: readonly DeniedEntry[];
  /** Files the sandbox keeps read-only ([hooks] files): the file tools refuse to write them. */
  readonly readOnly?: readonly DeniedEntry[];
  readonly logger: Logger;
  /** Builds the provider for a run (a model override may be given); undefined when none is configured. */
  readonly providerFor: (model: string | undefined) => AiProvider | undefined;
  /**
   * Cluster mode: agent.run submits here and any node with room takes the run (this one through
   * `serve`); absent, a run starts at once in this process.
   */
  readonly queue?: ClusterRunQueue;
  /** The config file read ([[mcp_servers]] problems name it). */
  readonly configPath?: string | undefined;
  /** Where each run's window is kept: files changed in it may be the model's (`ConfinedWrites`). */
  readonly confinedWrites?: ConfinedWrites | undefined;
}

/** What a queued run carries to the node that takes it (never a secret). */
interface RunRequest {
  readonly prompt: string;
  readonly cwd: string;
  readonly model?: string;
}

interface RunRecord {
  readonly runId: string;
  readonly sessionId: string;
  readonly prompt: string;
  readonly cwd: string;
  readonly startedAt: number;
  readonly controller: AbortController;
  result?: RunResult;
  done: Promise<RunResult>;
  /** The reply being written (this turn's text so far), for a client that attaches mid-turn. */
  reply?: { turn: number; seq: number; text: string };
}

const MAX_FINISHED_RUNS = 200;
/** An agent.history page: at most this many events, and about this many bytes of them. */
const HISTORY_PAGE_EVENTS = 1000;
const HISTORY_PAGE_BYTES = 1024 * 1024;
/** An agent.* event is at most about this many bytes: past it, its values are cut (`cut` lists them). */
const EVENT_BYTES = 256 * 1024;
/** agent.list's `reply`: the last this many characters of the reply being written. */
const LISTED_REPLY_CHARS = 64 * 1024;

/**
 * The first page of `events` (one event at least), and the cursor of the next page when there is
 * one. An event over the page's bytes comes cut to them (`cut` says where; agent.historyEvent reads it whole).
 */
function historyPage<Event extends { seq: number }>(
  events: readonly Event[],
  limit: number,
): { events: (Event | (Event & { cut: Cut[] }))[]; next?: number } {
  const page: (Event | (Event & { cut: Cut[] }))[] = [];
  let bytes = 0;
  for (const event of events) {
    const whole = jsonBytes(event);
    const shown = whole <= HISTORY_PAGE_BYTES ? event : boundedJson(event, HISTORY_PAGE_BYTES);
    const size = shown === event ? whole : jsonBytes(shown);
    if (page.length > 0 && (page.length >= limit || bytes + size > HISTORY_PAGE_BYTES)) break;
    page.push(shown);
    bytes += size;
  }
  const rest = events[page.length];
  return { events: page, ...(rest === undefined ? {} : { next: rest.seq }) };
}

/** One slice of an event's JSON text, of about a page's bytes at most, from character `from`. */
function eventSlice(
  event: { seq: number; json: string },
  from: number,
): { seq: number; json: string; from: number; chars: number; next?: number } {
  const whole = event.json;
  const json = prefixWithin(whole.slice(from, from + HISTORY_PAGE_BYTES), HISTORY_PAGE_BYTES);
  const end = from + json.length;
  return { seq: event.seq, json, from, chars: whole.length, ...(end < whole.length ? { next: end } : {}) };
}

/** The home folder (real path) when `real` is it or holds it: the model could make its absent dot files. */
export function homeHeldBy(real: string): string | undefined {
  const home = realpathSync(homedir());
  return isWithin(home, real) ? home : undefined;
}

/** A run's sub-agents: how many were started in all, and how many each session has running. */
interface SpawnCounts {
  started: number;
  readonly running: Map<string, number>;
  /** The run's share of the agents' terminals, its sub-agents' included. */
  readonly terminals: TerminalShare;
}

/**
 * spawn_agent bounded in breadth (sub-agents one session has running at once) and in total per run.
 * A refused call is a tool error the model reads; nothing is started for it.
 */
function boundedSpawnAgent(
  tool: Tool<{ prompt: string }>,
  counts: SpawnCounts,
  limits: { parallel: number; perRun: number; timeoutMs: number },
): Tool<{ prompt: string }> {
  return {
    ...tool,
    timeoutMs: limits.timeoutMs,
    execute: async (args, ctx) => {
      const running = counts.running.get(ctx.sessionId) ?? 0;
      if (running >= limits.parallel)
        return {
          output: `refused: at most ${limits.parallel} sub-agents may run at once for one agent ([agent] spawn_agent_max_parallel); wait for one to end, or do this part yourself`,
          isError: true,
        };
      if (counts.started >= limits.perRun)
        return {
          output: `refused: this run has started its ${limits.perRun} sub-agents ([agent] spawn_agent_max_per_run); do the rest yourself`,
          isError: true,
        };
      counts.started += 1;
      counts.running.set(ctx.sessionId, running + 1);
      try {
        return await tool.execute(args, ctx);
      } finally {
        counts.running.set(ctx.sessionId, (counts.running.get(ctx.sessionId) ?? 1) - 1);
      }
    },
  };
}

/** A shell result's last line says how the command ended (`exit code 3`, `killed by SIGTERM`, …). */
function toolEnd(name: string, output: string): { end?: string } {
  if (name !== 'shell') return {};
  const end = /\n\[([^\]\n]+)\]$/.exec(output)?.[1];
  return end === undefined ? {} : { end };
}

interface EarlierRun {
  readonly runId: string;
  readonly sessionId: string;
  readonly prompt: string;
  readonly cwd: string;
  readonly startedAt: number;
  readonly state: 'done';
  readonly terminateReason: TerminateReason;
}

/** A run as agent.list shows it in cluster mode: it may be running on another node. */
type ListedRun = Omit<EarlierRun, 'state' | 'terminateReason'> & {
  readonly state: 'running' | 'done';
  readonly terminateReason?: TerminateReason;
};

/**
 * What a run left in its cwd's git index that the user's next `git status` there enters with its
 * own config (a `core.fsmonitor` runs unconfined): a nested repository staged as a gitlink that was
 * not there when the run started, or one that was whose git dir or program keys changed (a
 * `core.fsmonitor` added), with the keys of its config that name a program. The sandbox cannot keep
 * it read-only (made and staged in one command); this says so once the run ended.
 */
function embeddedWarning(
  cwd: string,
  before: EmbeddedRepositories,
  after: EmbeddedRepositories | undefined,
): { message: string; added: { path: string; programs: readonly string[] }[] } | undefined {
  if (after === undefined)
    return {
      message: `${join(cwd, '.git', 'index')} is no longer an index git can read: check \`git ls-files -s | grep ^160000\` before running git there`,
      added: [],
    };
  const earlier = new Map(before.repositories.map((repository) => [repository.path, repository.fingerprint]));
  const changed = after.repositories.filter(
    (repository) => earlier.get(repository.path) !== repository.fingerprint,
  );
  // Past the gitlinks examined, nothing is known: said whenever there are some.
  if (changed.length === 0 && after.unexamined === 0) return undefined;
  const staged = changed.filter(({ path }) => !earlier.has(path));
  const altered = changed.filter(({ path }) => earlier.has(path));
  const list = (repositories: readonly EmbeddedRepository[]): string =>
    `${repositories
      .slice(0, 10)
      .map(({ path }) => JSON.stringify(path))
      .join(', ')}${repositories.length > 10 ? ` and ${repositories.length - 10} more` : ''}`;
  const what = [
    ...(staged.length > 0 ? [`staged ${list(staged)} as nested repositories (gitlinks)`] : []),
    ...(altered.length > 0
      ? [`changed the git dir or config of the nested repositories ${list(altered)}`]
      : []),
    ...(after.unexamined > 0
      ? [
          `left ${after.unexamined} gitlinks past the first ${MAX_EXAMINED_GITLINKS} unexamined (what they hold is not known)`,
        ]
      : []),
  ].join(' and ');
  const programs = changed
    .filter((repository) => repository.programs.length > 0)
    .slice(0, 10)
    .map((repository) => `${JSON.stringify(repository.path)} sets ${repository.programs.join(', ')}`);
  return {
    message: `the run ${what}: your next \`git status\` in ${cwd} runs their config (core.fsmonitor, hooks) as you${programs.length > 0 ? ` — ${programs.join('; ')}` : ''}; check their .git/config (\`git ls-files -s | grep ^160000\`), or \`git rm --cached\` them`,
    added: changed.map(({ path, programs: keys }) => ({ path, programs: keys })),
  };
}

/** `read()`, or undefined when it throws (a folder gone, not ours to read). */
function safely<T>(read: () => T): T | undefined {
  try {
    return read();
  } catch {
    return undefined;
  }
}

/** What confined a run's commands, as agent.run and agent.done say it: `off` when nothing did. */
export type SandboxLabel = 'bubblewrap' | 'sandbox-exec' | 'off';
const sandboxLabel = (sandbox: Sandbox): SandboxLabel =>
  sandbox.backend === 'none' ? 'off' : sandbox.backend;

const NO_PROVIDER =
  'no LLM provider is configured: add to aleph.toml\n[agent]\nprovider = "openai-compatible"\nmodel = "qwen2.5-coder:7b"\nbase_url = "http://127.0.0.1:11434/v1"\n(or set ALEPH_PROVIDER, ALEPH_MODEL and ALEPH_BASE_URL) and restart';

export class AgentService {
  readonly #options: AgentServiceOptions;
  readonly #runs = new Map<string, RunRecord>();
  /** Set as the node shuts down: a run the closing queue stops is handed back, not ended (see handBack). */
  #handingBack = false;
  /** Cluster runs' event gates (by run id): a run's events leave this node only while it holds the run. */
  readonly #gates = new Map<string, RunEventGate>();
  readonly #goals = new Map<string, Goal>();
  /**
   * The sandbox for hooks and gates, which never throws: a command it refuses (a denied cwd) runs as
   * one that fails with the reason, so a gate stays fail-closed and a stop hook fail-open.
   */
  readonly #wrap: CommandWrapper = (command) => {
    try {
      return this.#options.sandbox.wrap(command);
    } catch (error) {
      const reason = `sandbox: ${(error as Error).message}`;
      return { file: '/bin/sh', args: ['-c', 'echo "$1" >&2; exit 126', 'sh', reason], cwd: '/', env: {} };
    }
  };
  /** The sandbox's denied paths: what reads a model-writable file in-process never reads. */
  readonly #deniedPaths = (): string[] | undefined => this.#options.denied?.map((entry) => entry.path);

  /**
   * A run's Claude Code hooks. Only the cwd's own `.claude` is read-only to its commands: a
   * subfolder's is writable to a run above it, and the user's settings file may be a link into a
   * project. A hooks file that changed (itself, its folder, a link on the way) during a run in its
   * folder or above whose commands could write it (the sandbox did not keep it read-only there)
   * runs its hooks in the sandbox, said in a warning; the rest run as the user. So does one that
   * changed during a run and was then moved into place, and the cwd's own settings files when
   * anything in their `.claude` (the scripts their hooks run) changed so. The run's own window is
   * left out: a file the user wrote just before starting it is not the model's.
   */
  #claudeHooks(cwd: string, config: Config, runId: string): ClaudeCodeHooks {
    const found = this.#discoverClaudeHooks(cwd, config, runId);
    // `[hooks] sandbox = true`: every hook confined, the user's own too.
    if (!config.hooks.sandbox) return found;
    return { ...found, hooks: found.hooks.map((hook) => ({ ...hook, sandbox: true })) };
  }

  #discoverClaudeHooks(cwd: string, config: Config, runId: string): ClaudeCodeHooks {
    const writes = this.#options.confinedWrites;
    const keptByCwd = new Map<string, readonly ProtectedPath[]>();
    // A run whose sandbox kept a path read-only (the cwd's `.claude`, a home dot entry, a `[hooks]
    // files` entry) did not change it, whatever else it wrote in the folder.
    const writable = (window: WriteWindow, path: string): boolean => {
      const { sandbox } = this.#options;
      if (sandbox.backend === 'none' || sandbox.protectedPaths === undefined) return true;
      let kept = keptByCwd.get(window.cwd);
      if (kept === undefined) {
        try {
          kept = sandbox.protectedPaths(window.cwd);
        } catch {
          kept = []; // not known: the run could have written it
        }
        keptByCwd.set(window.cwd, kept);
      }
      return !keptFrom(path, kept, window.from);
    };
    const userClaude = real(process.env['CLAUDE_CONFIG_DIR'] || join(homedir(), '.claude'));
    return discoverClaudeCodeHooks({
      projectDir: cwd,
      files: config.hooks.files,
      deniedPaths: this.#deniedPaths(),
      sandboxFile: (file) => {
        const folder = dirname(file);
        const sandboxed = 'its hooks run in the sandbox';
        const run = writes?.changedDuringOtherRun(runId, [folder, file], (window, path) =>
          writable(window, path === folder ? file : path),
        );
        if (run !== undefined)
          return `${describeChange(run)}, whose commands could write there: ${sandboxed} (if it is yours: \`${quote(['touch', folder, file])}\`)`;
        // The project's `.claude` holds what its hooks run (`"$CLAUDE_PROJECT_DIR"/.claude/hooks/…`):
        // each file and folder in it is judged the same way (the user's own `~/.claude` is kept).
        if (writes === undefined || folder !== join(resolve(cwd), '.claude') || real(folder) === userClaude)
          return undefined;
        const under = entriesUnder(folder);
        if ('cut' in under) return `${under.cut}: not all of it was checked, so ${sandboxed}`;
        for (const path of under.paths) {
          const change = writes.changedDuringOtherRun(runId, [path], writable);
          if (change !== undefined)
            return `${change.path} ${describeChange(change)}, whose commands could write there: ${sandboxed} (if it is yours: \`${quote(['touch', '-h', change.path])}\`)`;
        }
        return undefined;
      },
    });
  }
  /** The event agent.historyEvent read last, as JSON: a client reads it slice after slice. */
  #lastRead: { key: string; seq: number; json: string } | undefined;
  #lastReadTimer: NodeJS.Timeout | undefined;
  /** Runs of earlier server processes, read from the store at start (their run id is their session id). */
  #earlier: readonly EarlierRun[] = [];
  /** Settled when restore() has read the store (agent.list waits for it). */
  readonly #restored: Promise<void>;
  #markRestored: () => void = () => {};
  /** The identities of the denied and read-only paths as they were at start: a rename keeps them protected. */
  readonly #protection: ProtectedSet;

  constructor(options: AgentServiceOptions) {
    this.#options = options;
    this.#protection = serverProtection(options.denied, options.readOnly);
    this.#restored = new Promise((resolve) => (this.#markRestored = resolve));
    const { gateway } = options;
    gateway.register(
      'agent.run',
      z.strictObject({
        prompt: z.string().refine((text) => text.trim() !== '', { error: 'must not be empty or blank' }),
        cwd: z.string().min(1).optional(),
        model: z.string().min(1).optional(),
        /** Continue this session (a follow-up): its history is the model's context. */
        sessionId: z.string().min(1).optional(),
      }),
      (params) => this.start(params),
    );
    gateway.register('agent.cancel', z.strictObject({ runId: z.string().min(1) }), async ({ runId }) => {
      const run = this.#runs.get(runId);
      if (run === undefined && options.queue !== undefined && (await options.queue.holder(runId))) {
        options.queue.cancel(runId); // held by another node: it aborts the run there
        return { cancelled: true };
      }
      if (run === undefined) throw new GatewayError('unknown_run', `unknown run ${runId}`);
      run.controller.abort(new Error('cancelled by agent.cancel'));
      return { cancelled: run.result === undefined };
    });
    // Not before the store is read: a client asking during a restart gets the runs, never [].
    gateway.register('agent.list', z.strictObject({}).optional(), async () => {
      await this.#restored;
      return [
        ...(options.queue === undefined ? this.#earlier : await this.#clusterRuns()),
        ...[...this.#runs.values()].map((run) => ({
          runId: run.runId,
          sessionId: run.sessionId,
          prompt: run.prompt,
          cwd: run.cwd,
          startedAt: run.startedAt,
          state: run.result === undefined ? 'running' : 'done',
          ...(run.result ? { terminateReason: run.result.terminateReason } : {}),
          ...(run.result === undefined && run.reply ? { reply: listedReply(run.reply) } : {}),
        })),
      ];
    });
    gateway.register(
      'agent.history',
      z.strictObject({
        sessionId: z.string().min(1),
        /** The cursor: the sequence of the first event wanted (a page's `next`). */
        from: z.int().nonnegative().optional(),
        limit: z.int().min(1).max(HISTORY_PAGE_EVENTS).optional(),
      }),
      async ({ sessionId, from, limit }) => {
        const sessions = await options.sessions.list();
        if (!sessions.includes(sessionId))
          throw new GatewayError('unknown_session', `unknown agent session ${sessionId}`);
        const load = await options.sessions.load(sessionId);
        const events = from === undefined ? load.events : load.events.filter((event) => event.seq >= from);
        return {
          ...load,
          ...historyPage(events, limit ?? HISTORY_PAGE_EVENTS),
          usage: sessionUsage(load.events),
        };
      },
    );
    // One event of the log whole, as its JSON text in slices: for an event a page showed cut.
    gateway.register(
      'agent.historyEvent',
      z.strictObject({
        sessionId: z.string().min(1),
        seq: z.int().nonnegative(),
        /** The first character wanted of the event's JSON text (a slice's `next`). */
        from: z.int().nonnegative().optional(),
      }),
      async ({ sessionId, seq, from }) => {
        const key = `${sessionId}\n${seq}`;
        if (this.#lastRead?.key !== key) {
          const sessions = await options.sessions.list();
          if (!sessions.includes(sessionId))
            throw new GatewayError('unknown_session', `unknown agent session ${sessionId}`);
          const { events } = await options.sessions.load(sessionId, { from: seq });
          const event = events.find((candidate) => candidate.seq === seq);
          if (event === undefined)
            throw new GatewayError('invalid_params', `params.seq: session ${sessionId} has no event ${seq}`);
          this.#lastRead = { key, seq, json: JSON.stringify(event) };
        }
        // A logged event never changes: its JSON is kept for the next slice, a minute at most.
        clearTimeout(this.#lastReadTimer);
        this.#lastReadTimer = setTimeout(() => (this.#lastRead = undefined), 60_000).unref();
        return eventSlice(this.#lastRead, from ?? 0);
      },
    );
  }

  /**
   * Publishes an agent.* event, cut to about EVENT_BYTES whatever the model wrote into it; a
   * cluster run's through its gate (sent while this node holds the run).
   */
  #publish(topic: string, data: object): void {
    const go = (): void => this.#options.gateway.publish(topic, boundedJson(data, EVENT_BYTES));
    const { runId } = data as { runId?: unknown };
    const gate = typeof runId === 'string' ? this.#gates.get(runId) : undefined;
    if (gate === undefined) go();
    else gate.send(go);
  }

  /**
   * Reads the runs earlier server processes left in the store, so agent.list shows them: a run
   * whose log never ended (the server was killed) is `interrupted`. Corrupt log lines are skipped
   * by the store and reported here.
   */
  async restore(): Promise<void> {
    try {
      await this.#restore();
    } finally {
      this.#markRestored();
    }
  }

  async #restore(): Promise<void> {
    const summaries = (await this.#options.sessions.summaries?.()) ?? [];
    const earlier = summaries
      .filter((summary) => summary.state === 'ended' && summary.prompt !== undefined)
      .sort((a, b) => (a.startedAt ?? 0) - (b.startedAt ?? 0))
      .slice(-MAX_FINISHED_RUNS);
    for (const summary of summaries) {
      if (summary.unreadable !== undefined)
        this.#options.logger.warn(
          { sessionId: summary.sessionId },
          `session log could not be read, not listed: ${summary.unreadable}`,
        );
      const corrupt = summary.corruptLines ?? [];
      if (corrupt.length > 0)
        this.#options.logger.warn(
          { sessionId: summary.sessionId, lines: corrupt.slice(0, 20) },
          `session log has ${corrupt.length} corrupt line(s), skipped`,
        );
    }
    this.#earlier = earlier.map((summary) => ({
      runId: summary.sessionId,
      sessionId: summary.sessionId,
      prompt: summary.prompt ?? '',
      cwd: summary.cwd ?? '',
      startedAt: summary.startedAt ?? 0,
      state: 'done',
      terminateReason: summary.terminateReason ?? { kind: 'interrupted' },
    }));
    const interrupted = this.#earlier.filter((run) => run.terminateReason.kind === 'interrupted');
    if (interrupted.length > 0)
      this.#options.logger.warn(
        { sessionIds: interrupted.map((run) => run.sessionId) },
        `${interrupted.length} run(s) of an earlier server never ended: listed as interrupted`,
      );
  }

  get runs(): readonly RunRecord[] {
    return [...this.#runs.values()];
  }

  /** A session a follow-up may continue: known to the store; returns the cwd it last ran in. */
  async #continuable(sessionId: string): Promise<string | undefined> {
    if (!(await this.#options.sessions.list()).includes(sessionId))
      throw new GatewayError('unknown_session', `unknown agent session ${sessionId}: see agent.list`);
    this.#checkIdle(sessionId);
    const { events } = await this.#options.sessions.load(sessionId);
    const last = events.findLast((event) => event.type === 'user' && event.cwd !== undefined);
    return last?.type === 'user' ? last.cwd : undefined;
  }

  /** One run per session at a time. */
  #checkIdle(sessionId: string): void {
    const running = [...this.#runs.values()].find(
      (run) => run.sessionId === sessionId && run.result === undefined,
    );
    if (running !== undefined)
      throw new GatewayError(
        'busy',
        `session ${sessionId} has a run in progress (run ${running.runId}): wait for it to end, or cancel it`,
      );
  }

  async start(params: {
    prompt: string;
    cwd?: string | undefined;
    model?: string | undefined;
    sessionId?: string | undefined;
  }): Promise<{ runId: string; sessionId: string; sandbox: SandboxLabel }> {
    const { config, logger } = this.#options;
    if (this.#options.providerFor(params.model) === undefined)
      throw new GatewayError('no_provider', NO_PROVIDER);
    // A follow-up works where its session did, unless told otherwise.
    const earlierCwd = params.sessionId === undefined ? undefined : await this.#continuable(params.sessionId);
    // The run's directory is the client's to say (or the config's): never the server's own folder.
    const given = params.cwd ?? earlierCwd ?? config.agent.workdir;
    if (given === undefined)
      throw new GatewayError(
        'invalid_params',
        'params.cwd is required: send the directory the agent should work in (the aleph CLI sends yours), or set [agent] workdir in aleph.toml',
      );
    if (!isAbsolute(given))
      throw new GatewayError('invalid_params', `params.cwd: ${given} is not an absolute path`);
    const cwd = resolve(given);
    if (!existsSync(cwd) || !statSync(cwd).isDirectory())
      throw new GatewayError('invalid_params', `params.cwd: ${cwd} is not a directory`);
    const unsafe = unsafeCwd(realpathSync(cwd));
    if (unsafe !== undefined)
      throw new GatewayError(
        'invalid_params',
        unsafe.kind === 'shared_temp'
          ? `params.cwd: ${cwd} is a temporary folder all programs share: a run makes its cwd writable, other programs' files and sockets included; choose a project directory (a folder inside it will do)`
          : `params.cwd: ${cwd} is ${unsafe.kind === 'root' ? 'the root folder' : `a system folder (${unsafe.folder})`}: a run makes its cwd writable; choose a project directory`,
      );
    const home = config.agent.allow_home_cwd ? undefined : homeHeldBy(realpathSync(cwd));
    if (home !== undefined)
      throw new GatewayError(
        'invalid_params',
        `params.cwd: ${cwd} ${home === realpathSync(cwd) ? 'is your home folder' : `holds your home folder (${home})`}: a run makes its cwd writable, and a dot file the model made there (~/.profile, ~/.ssh/authorized_keys, ~/.gitconfig) would run as you later; choose a project directory, or set [agent] allow_home_cwd = true`,
      );
    const under = deniedBy(realpathSync(cwd), this.#options.denied ?? []);
    if (under !== undefined)
      throw new GatewayError(
        'invalid_params',
        `params.cwd: ${cwd} is under ${under.path}, denied by ${under.key}: choose a directory outside it`,
      );

    const request: RunRequest = {
      prompt: params.prompt,
      cwd,
      ...(params.model === undefined ? {} : { model: params.model }),
    };
    const queue = this.#options.queue;
    const sessionId = params.sessionId ?? (await this.#options.sessions.create());
    this.#checkIdle(sessionId); // after the last await: no second run can slip in before this one is listed
    if (queue === undefined) return this.#launch(request, randomUUID(), sessionId);
    // Cluster: the run's id is its session's; whichever node takes it runs it.
    await queue.submit({ runId: sessionId, sessionId, request });
    logger.info({ runId: sessionId, cwd }, 'run queued');
    return { runId: sessionId, sessionId, sandbox: sandboxLabel(this.#options.sandbox) };
  }

  /** Cluster mode: takes queued runs while this node has room, and resumes those whose node was lost. */
  serveQueue(): void {
    const { queue, logger } = this.#options;
    queue?.serve(async (ticket, lease) => {
      const request = ticket.request as RunRequest;
      const load = await this.#options.sessions.load(ticket.sessionId);
      const last = load.events.at(-1);
      if (last?.type === 'terminate') return; // it ended before its node could say so
      const resume = load.events.some((event) => event.type === 'user');
      if (resume || lease.redelivered) {
        // Claimed before the run reads its log to plan from: the node that lost it (stopped, then
        // continued) may still append a step until then, and a plan made without it repeats it. A
        // run taken again before anything was logged is claimed too: the node that took it first
        // and stopped before its first append then appends nothing, instead of fencing this one.
        if ((await queue.claim(ticket.sessionId)) === 'ended') return;
        if (resume) logger.warn({ runId: ticket.runId, node: lease.node }, 'run taken over from a lost node');
      }
      const started = this.#launch(request, ticket.runId, ticket.sessionId, {
        resume,
        lease: lease.signal,
        node: lease.node,
        view: lease,
      });
      await this.#runs.get(started.runId)?.done;
    });
  }

  /** Every run of the cluster, read from the shared store (the ones running here as this node sees them). */
  async #clusterRuns(): Promise<ListedRun[]> {
    const summaries = (await this.#options.sessions.summaries?.()) ?? [];
    return summaries
      .filter((summary) => summary.prompt !== undefined && !this.#runs.has(summary.sessionId))
      .sort((a, b) => (a.startedAt ?? 0) - (b.startedAt ?? 0))
      .slice(-MAX_FINISHED_RUNS)
      .map((summary): ListedRun => ({
        runId: summary.sessionId,
        sessionId: summary.sessionId,
        prompt: summary.prompt ?? '',
        cwd: summary.cwd ?? '',
        startedAt: summary.startedAt ?? 0,
        state: summary.state === 'running' ? 'running' : 'done',
        ...(summary.state === 'running'
          ? {}
          : { terminateReason: summary.terminateReason ?? { kind: 'interrupted' } }),
      }));
  }

  #launch(
    request: RunRequest,
    runId: string,
    sessionId: string,
    cluster: { resume: boolean; lease: AbortSignal; node: string; view: LeaseView } | undefined = undefined,
  ): { runId: string; sessionId: string; sandbox: SandboxLabel } {
    const { config, logger } = this.#options;
    const { cwd } = request;
    const params = request;
    const provider = this.#options.providerFor(request.model);
    if (provider === undefined) throw new GatewayError('no_provider', NO_PROVIDER);
    const controller = new AbortController();
    // A lost lease (another node holds the run now) or a cancel from another node ends it here at
    // once; what the run says after a lost lease waits in its gate, dropped unless the log took it.
    cluster?.lease.addEventListener(
      'abort',
      () => {
        // Fenced, or handed back as this node shuts down (the queue aborts its runs as it closes):
        // the run's end is not this node's to log; another node continues it from its log.
        const code = (cluster.lease.reason as { code?: string } | undefined)?.code;
        if (code === 'fenced' || (code === 'closed' && this.#handingBack))
          this.#options.queue?.relinquish(sessionId); // before the run's end tries to log itself
        controller.abort(cluster.lease.reason);
      },
      { once: true },
    );
    // The project's protected paths as they are when the run starts, for it and its sub-agents.
    const realCwd = realpathSync(cwd);
    // From now until the run has ended (its MCP servers too), what changes under its cwd may be the model's.
    const endWindow = this.#options.confinedWrites?.begin(runId, realCwd);
    const embeddedBefore =
      this.#options.sandbox.backend === 'none'
        ? undefined
        : embeddedRepositories(realCwd).catch(() => undefined);
    const operationsBefore =
      this.#options.sandbox.backend === 'none' ? undefined : safely(() => gitOperations(realCwd));
    // The index as the run found it, copied before its first command (setup runs hooks).
    const reviewBefore =
      this.#options.sandbox.backend === 'none' ? undefined : reviewStart(realCwd).catch(() => undefined);
    const known = new Set((this.#options.readOnly ?? []).map(({ path }) => path));
    const bySandbox = (this.#options.sandbox.protectedPaths?.(realCwd) ?? []).filter(
      ({ path }) => !known.has(path),
    );
    const protection = this.#protection.with(projectProtection(realCwd, bySandbox));
    const { agent_max_sessions: pool, agent_max_sessions_per_run: perRun } = this.#options.config.pty;
    const limits: SpawnCounts = {
      started: 0,
      running: new Map(),
      terminals: new TerminalShare(Math.min(pool, perRun ?? Math.ceil(pool / 2))),
    }; // the run's sub-agents, every depth
    // A cluster run's events go through its gate: while the lease is uncertain (this node was
    // stopped or cut off past its TTL) they wait for a renewal, or for the run's end to say
    // whether the log took them.
    const gate = cluster === undefined ? undefined : new RunEventGate(cluster.view);
    if (gate === undefined) this.#gates.delete(runId);
    else this.#gates.set(runId, gate);
    const publish = (topic: string, data: object): void =>
      this.#publish(topic, { runId, sessionId, ...data });
    /** Another node wrote the run's log (it took the run over): this node's end is not the run's. */
    const lostHere = (): boolean => cluster !== undefined && this.#options.queue?.fenced(sessionId) === true;
    const model = params.model ?? config.agent.model;
    const sandbox = sandboxLabel(this.#options.sandbox);
    const record: RunRecord = {
      runId,
      sessionId,
      prompt: params.prompt,
      cwd,
      startedAt: Date.now(),
      controller,
      // Before the first turn: the run's MCP servers, told to clients as agent.setup (`aleph run` prints it).
      done: Promise.resolve(reviewBefore)
        .then(() =>
          this.#setup(
            { cwd, runId, sessionId, model, prompt: params.prompt, resumed: cluster?.resume },
            publish,
          ),
        )
        .then(async ({ mcp, systemPrompt, session, opening }) => {
          if (opening.kind === 'refused') {
            // A SessionStart or UserPromptSubmit hook ended the run before its first turn.
            await mcp.hub.close();
            await session.close(opening.result);
            return opening.result;
          }
          const system = opening.context === '' ? systemPrompt : `${systemPrompt}\n\n${opening.context}`;
          const orchestrator: Orchestrator = new Orchestrator({
            depsFor: (flow) => ({
              ...this.#deps(
                provider,
                cwd,
                orchestrator,
                runId,
                flow.parentSessionId,
                protection,
                limits,
                mcp,
              ),
              systemPrompt: system,
              beforeCompaction: (info) => session.beforeCompaction(info),
            }),
          });
          // The sandbox's stand-ins in the cwd stay from one command of the run to the next.
          const kept = this.#options.sandbox.keep?.(cwd);
          return orchestrator
            .dispatch(
              { prompt: params.prompt, sessionId, cwd, ...(cluster?.resume ? { resume: true } : {}) },
              {
                signal: controller.signal,
                onDelta: (delta) => {
                  // The text so far of this turn's reply, kept for a client that attaches mid-turn.
                  const reply =
                    record.reply?.turn === delta.iteration
                      ? record.reply
                      : (record.reply = { turn: delta.iteration, seq: -1, text: '' });
                  reply.seq = delta.seq;
                  if (delta.kind === 'text') reply.text += delta.text;
                  else if (delta.kind === 'replace') reply.text = delta.text;
                  const { iteration, ...fields } = delta;
                  publish('agent.delta', { turn: iteration, ...fields });
                },
                onStep: (step) => {
                  if (step.error !== undefined)
                    logger.warn(
                      { runId, sessionId, turn: step.iteration, error: logExcerpt(step.error) },
                      'turn failed (provider call, or a reply that was not a stop)',
                    );
                  publish('agent.step', { step });
                },
                onEvent: (event) => {
                  if (event.type === 'assistant' && event.toolCalls.length > 0) {
                    // The calls about to run, so a client can say which tool is running.
                    publish('agent.act', {
                      calls: event.toolCalls.map((call) => ({ callId: call.id, name: call.name })),
                    });
                  } else if (event.type === 'tool_result') {
                    publish('agent.tool', {
                      callId: event.callId,
                      name: event.name,
                      ok: !event.isError,
                      output: event.output.slice(0, 2000),
                      ...toolEnd(event.name, event.output),
                    });
                  } else if (event.type === 'verdict') {
                    publish('agent.verdict', { verdict: event.verdict });
                  }
                },
              },
            )
            .finally(() => {
              kept?.();
              return mcp.hub.close();
            })
            .then(async (result) => {
              await session.close(result);
              return result;
            });
        })
        .then(async (result) => {
          record.result = result;
          // The log is the judge: its end stored, this node held the run to it (whatever the lease
          // says since, NATS having been away); refused, another node holds it and says its end.
          gate?.settle(!lostHere());
          if (cluster !== undefined && lostHere()) {
            logger.warn({ runId, sessionId, node: cluster.node }, 'run lost to another node');
            this.#runs.delete(runId); // agent.list reads it from the cluster's log now
            return result;
          }
          const before = await embeddedBefore;
          const start = await reviewBefore;
          const [index, unseen] =
            this.#options.sandbox.backend === 'none'
              ? [undefined, undefined]
              : await Promise.all([
                  embeddedRepositories(realCwd).catch(() => undefined),
                  start && unseenChanges(realCwd, start).catch(() => undefined),
                ]);
          await start?.release(); // before agent.done: a server stopped after it would leave the copy
          const nested = before === undefined ? undefined : embeddedWarning(realCwd, before, index);
          if (nested !== undefined) {
            logger.warn({ runId, cwd: realCwd }, nested.message);
            publish('agent.hook', { kind: 'warning', route: 'git', message: nested.message });
          }
          const operationsAfter =
            this.#options.sandbox.backend === 'none' ? undefined : safely(() => gitOperations(realCwd));
          for (const warning of [
            operationsAfter && gitOperationsWarning(realCwd, operationsBefore, operationsAfter),
            // A start whose look failed (an index git could not read) counts as nothing hidden then.
            this.#options.sandbox.backend === 'none'
              ? undefined
              : hiddenChangesWarning(
                  realCwd,
                  { index: before, operations: operationsBefore },
                  { index, operations: operationsAfter, unseen },
                ),
            await historyWarning(realCwd, operationsBefore, operationsAfter),
          ]) {
            if (warning === undefined) continue;
            logger.warn({ runId, cwd: realCwd }, warning);
            publish('agent.hook', { kind: 'warning', route: 'git', message: warning });
          }
          publish('agent.done', {
            terminateReason: result.terminateReason,
            iterations: result.iterations,
            totalTokens: result.totalTokens,
            ...(result.usage ? { usage: result.usage, ...costOf(config.prices, model, result.usage) } : {}),
            ...(result.turns ? { turns: result.turns } : {}),
            elapsedMs: Date.now() - record.startedAt,
            finalText: result.finalText,
            selfVerdict: parseVerdict(result.finalText),
            sandbox,
            // Staged by the run, entered by the user's next `git status` (see the warning).
            ...(nested === undefined || nested.added.length === 0
              ? {}
              : { nestedRepositories: nested.added }),
          });
          const ended = result.terminateReason.kind === 'model_stop' ? 'info' : 'warn';
          logger[ended](
            { runId, sessionId, terminateReason: boundedJson(result.terminateReason, LOG_VALUE_BYTES) },
            'run ended',
          );
          return result;
        })
        .catch((error: unknown): RunResult => {
          // The harness turns every expected end into a value; this is a bug, reported, not a crash.
          logger.error({ runId, sessionId, err: error }, 'run failed');
          const result: RunResult = {
            sessionId,
            terminateReason: {
              kind: 'error',
              error: { kind: 'session', message: (error as Error).message ?? String(error) },
            },
            iterations: 0,
            totalTokens: 0,
            toolTimeline: [],
            finalText: '',
          };
          record.result = result;
          gate?.settle(!lostHere());
          publish('agent.done', {
            terminateReason: result.terminateReason,
            iterations: 0,
            finalText: '',
            selfVerdict: null,
            sandbox,
          });
          return result;
        }),
    };
    if (endWindow !== undefined) void record.done.then(endWindow, endWindow);
    const release = (): Promise<void> | undefined => reviewBefore?.then((start) => start?.release());
    void record.done.then(release, release);
    this.#runs.set(runId, record);
    this.#pruneFinished();
    logger.info({ runId, sessionId, cwd, sandbox }, 'run started');
    return { runId, sessionId, sandbox };
  }

  #deps(
    provider: AiProvider,
    cwd: string,
    orchestrator: Orchestrator,
    runId: string,
    parentId: string | undefined, // a spawn_agent run: SubagentStop hooks, told the parent's session
    protection: ProtectedSet,
    limits: SpawnCounts,
    mcp: RunMcp,
  ): HarnessDeps {
    const { config, logger, sessions } = this.#options;
    const onHookError = (error: { hookName: string; message: string }): void =>
      logger.warn(
        { runId, hook: error.hookName, message: logExcerpt(error.message) },
        'stop hook failed (fail-open)',
      );
    // Every hook run (Stop, SubagentStop, Pre/PostToolUse, the gate) is an agent.hook event.
    // Claude Code's settings are discovered in the run's project root, the user's, and [hooks] files.
    const hookOptions = {
      stripEnv: this.#stripEnv(),
      onHookOutcome: (outcome: HookOutcome) => this.#publish('agent.hook', { runId, ...outcome }),
    };
    const claudeHooks = this.#claudeHooks(cwd, config, runId);
    for (const warning of claudeHooks.warnings) {
      logger.warn({ runId }, warning);
      // A hook the user wrote that will not run as written (an event Aleph does not run, a typo'd
      // event, `onFailure`, a Stop hook's `if`, disableAllHooks): `aleph run` prints it as a ⚠ line.
      // Once a run: a sub-agent reads the same files.
      if (parentId === undefined) {
        const notice: HookWarning = { kind: 'warning', route: 'claude_code', message: warning };
        this.#publish('agent.hook', { runId, ...notice });
      }
    }
    const parent = parentId
      ? { sessionId: parentId, transcriptPath: sessions.transcriptPath?.(parentId) }
      : undefined;
    // `[[stop_hooks]]` speak the same contract: a sub-agent's stop is SubagentStop, told the parent's session.
    const stopHooks = buildStopHooksFromConfig(
      { stop_hooks: config.stop_hooks },
      { cwd, onHookError, wrap: this.#wrap, parent, promptId: runId, ...hookOptions },
    );
    // The project's own hooks files are the model's to write: their hooks run confined.
    const toolHooks = new ClaudeCodeToolHooks(claudeHooks, {
      projectDir: cwd,
      promptId: runId,
      wrap: this.#wrap,
      ...hookOptions,
    });
    // The seed's order (orchestrator_init): StopHook → ExtensionStopHook → ToolLoop → ScratchpadGoal → MutationEvidence; then the goal gate.
    const verifier = VerifierChain.builder()
      .with(stopHooks)
      .with(
        new ExtensionStopHookVerifier({
          hooks: claudeHooks,
          parent,
          wrap: this.#wrap,
          onHookError,
          promptId: runId,
          ...hookOptions,
        }),
      )
      .with(new ToolLoopVerifier())
      .with(new ScratchpadGoalVerifier())
      .with(new MutationEvidenceVerifier())
      .with(
        new GoalGateVerifier({
          globalGate: config.agent.gate_command,
          goals: this.#goals,
          cwd,
          timeoutMs: config.agent.tool_timeout_secs * 1000,
          wrap: this.#wrap,
          ...hookOptions,
        }),
      )
      .onError((name, error) =>
        logger.error({ runId, verifier: name, err: error }, 'verifier threw; treated as continue'),
      )
      .build();
    const tools = [
      ...builtinTools({
        denied: this.#options.denied,
        readOnly: this.#options.readOnly,
        protection,
        cwd,
        ptyManager: this.#options.ptys.agents,
        terminalShare: limits.terminals,
        goals: this.#goals,
        defaultShellTimeoutMs: config.agent.tool_timeout_secs * 1000,
        maxFileBytes:
          config.sandbox.limits.file_size_mib === undefined
            ? undefined
            : config.sandbox.limits.file_size_mib * 1024 * 1024,
        onShell: (info) => this.#publish('agent.shell', { runId, ...info }),
      }),
      boundedSpawnAgent(orchestrator.spawnAgentTool(), limits, {
        parallel: config.agent.spawn_agent_max_parallel,
        perRun: config.agent.spawn_agent_max_per_run,
        timeoutMs: config.agent.spawn_agent_timeout_secs * 1000,
      }),
      ...mcp.tools,
    ];
    return {
      provider,
      tools,
      sessions: this.#options.sessions,
      verifier,
      power: this.#options.power,
      ...(toolHooks.active ? { toolHooks } : {}),
      sandbox: this.#options.sandbox,
      maxIterations: config.agent.max_iterations,
      turnTimeoutMs: config.agent.turn_timeout_secs * 1000,
      firstTokenTimeoutMs: config.agent.first_token_timeout_secs * 1000,
      idleTimeoutMs: config.agent.stream_idle_timeout_secs * 1000,
      defaultToolTimeoutMs: config.agent.tool_timeout_secs * 1000,
      maxToolCallsPerTurn: config.agent.max_tool_calls_per_turn,
      maxToolResultCharsPerTurn: config.agent.max_tool_results_kib_per_turn * 1024,
      contextBudget: { maxTokens: config.agent.max_context_tokens },
    };
  }

  /**
   * A run's MCP servers (`[[mcp_servers]]` and its cwd's `.mcp.json`), started before its first turn,
   * and its instruction files (AGENTS.md, CLAUDE.md) after the role prompt; both published as
   * agent.setup. What went wrong with one is a warning (agent.mcp, a setup line), never an end.
   */
  async #setup(
    run: {
      cwd: string;
      runId: string;
      sessionId: string;
      model: string | undefined;
      prompt: string;
      resumed: boolean | undefined; // taken over from a lost node: its session hooks ran there
    },
    publish: (topic: string, data: object) => void,
  ): Promise<{ mcp: RunMcp; systemPrompt: string; session: RunSessionHooks; opening: SessionOpening }> {
    const { config, logger, sessions } = this.#options;
    const { cwd, runId, sessionId } = run;
    const claudeHooks = this.#claudeHooks(cwd, config, runId);
    const onHookOutcome = (outcome: HookOutcome): void => this.#publish('agent.hook', { runId, ...outcome });
    // A `.mcp.json` stdio server runs a command the model may have written: the user's Bash guard judges it.
    const guard = new ClaudeCodeToolHooks(claudeHooks, {
      projectDir: cwd,
      promptId: runId,
      stripEnv: this.#stripEnv(),
      wrap: this.#wrap,
      onHookOutcome,
    });
    const mcp = await startRunMcp({
      cwd,
      entries: config.mcp_servers,
      configPath: this.#options.configPath,
      env: process.env,
      stripEnv: this.#stripEnv(),
      wrap: this.#wrap,
      deniedPaths: this.#deniedPaths(),
      // Unconfined commands reach the network anyway.
      network: this.#options.sandbox.backend === 'none' ? 'on' : config.sandbox.network,
      projectRemoteRefused: this.#projectRemoteRefused(cwd, runId),
      judgeProjectCommand: guard.active
        ? async (commandLine) => {
            const verdict = await guard.judgeCommand(
              commandLine,
              "the server's command, judged as a shell call",
              { id: `mcp-${runId}`, sessionId, projectDir: cwd },
            );
            return verdict.kind === 'deny' ? verdict.reason : undefined;
          }
        : undefined,
      onNotice: (notice) => {
        logger.warn(
          { runId, server: logExcerpt(notice.server) },
          logExcerpt(`MCP server ${notice.server}: ${notice.message}`),
        );
        publish('agent.mcp', notice);
      },
    });
    for (const problem of mcp.problems) logger.warn({ runId }, problem);
    const instructions = loadInstructionFiles({ cwd, denied: this.#options.denied });
    for (const warning of instructions.warnings) logger.warn({ runId }, warning);
    publish('agent.setup', {
      mcp: { servers: mcp.servers, problems: mcp.problems },
      instructions: instructions.files,
      instructionWarnings: instructions.warnings,
    });
    const systemPrompt =
      instructions.text === '' ? AGENT_ROLE_PROMPT : `${AGENT_ROLE_PROMPT}\n\n${instructions.text}`;
    // Claude Code's session hooks (SessionStart, UserPromptSubmit, …), from the same settings files.
    const hooks = new ClaudeCodeSessionHooks(claudeHooks, {
      projectDir: cwd,
      promptId: runId,
      stripEnv: this.#stripEnv(),
      wrap: this.#wrap,
      onHookOutcome,
    });
    const session = new RunSessionHooks(hooks, {
      sessionId,
      transcriptPath: sessions.transcriptPath?.(sessionId),
      model: run.model,
    });
    const followUp = async (): Promise<boolean> =>
      (await sessions.load(sessionId)).events.some((event) => event.type === 'user');
    const source =
      run.resumed === true || !hooks.has('SessionStart')
        ? undefined
        : (await followUp())
          ? 'resume'
          : 'startup';
    const opening = await session.open(run.prompt, source);
    return { mcp, systemPrompt, session, opening };
  }

  /**
   * Why the http and sse servers of the cwd's `.mcp.json` (a file the model can write) are not
   * started for this run, whatever the network setting: the server's own process reaches them, and
   * one written during an agent run could send there whatever the model read.
   */
  #projectRemoteRefused(cwd: string, runId: string): string | undefined {
    const file = join(cwd, '.mcp.json');
    const run = this.#options.confinedWrites?.changedDuringOtherRun(runId, [file]);
    return run === undefined
      ? undefined
      : `${file} ${describeChange(run)}, whose commands could write there (if it is yours: \`${quote(['touch', file])}\`)`;
  }

  /** The two secrets no child's environment gets: the gateway token and the provider's key. */
  #stripEnv(): string[] {
    const { api_key_env: keyEnv } = this.#options.config.agent;
    return ['ALEPH_TOKEN', ...(keyEnv ? [keyEnv] : [])];
  }

  /** Keeps agent.list bounded: the oldest finished runs go first (their logs stay on disk). */
  #pruneFinished(): void {
    const finished = [...this.#runs.values()].filter((run) => run.result !== undefined);
    for (const run of finished.slice(0, Math.max(0, finished.length - MAX_FINISHED_RUNS))) {
      this.#runs.delete(run.runId);
      this.#gates.delete(run.runId);
    }
  }

  /** Cancels every run and waits for them to end. */
  /**
   * Cluster mode, as this node shuts down: the runs it took from the queue go back to it, each
   * stopped here without logging an end, for another node to continue from its log (as after a
   * crash, without waiting for the lease to lapse). Then `shutdown` cancels the rest.
   */
  async handBack(): Promise<void> {
    this.#handingBack = true;
    await this.#options.queue?.close();
  }

  async shutdown(): Promise<void> {
    for (const run of this.#runs.values()) run.controller.abort(new Error('server shutting down'));
    await Promise.allSettled([...this.#runs.values()].map((run) => run.done));
  }
}

/** A value a log line carries (a provider's error, a run's end): at most this many bytes of JSON. */
const LOG_VALUE_BYTES = 4096;
const logExcerpt = (text: string): string =>
  text.length * 3 <= LOG_VALUE_BYTES
    ? text
    : `${prefixWithin(text, LOG_VALUE_BYTES)}… (${text.length} characters)`;

/** agent.list's `reply`: its last LISTED_REPLY_CHARS characters, and then `chars`, how many it has in all. */
function listedReply(reply: { turn: number; seq: number; text: string }): {
  turn: number;
  seq: number;
  text: string;
  chars?: number;
} {
  if (reply.text.length <= LISTED_REPLY_CHARS) return reply;
  let start = reply.text.length - LISTED_REPLY_CHARS;
  if (/[\udc00-\udfff]/.test(reply.text[start] ?? '')) start += 1; // not half a surrogate pair
  return { ...reply, text: reply.text.slice(start), chars: reply.text.length };
}

/** A session's tokens, summed over its replies (as `agent.history` reports them). */
function sessionUsage(events: readonly SessionEvent[]): TokenUsage {
  let inputTokens = 0;
  let outputTokens = 0;
  let cachedInputTokens = 0;
  for (const event of events) {
    if (event.type !== 'assistant' || event.usage === undefined) continue;
    inputTokens += event.usage.inputTokens;
    outputTokens += event.usage.outputTokens;
    cachedInputTokens += event.usage.cachedInputTokens ?? 0;
  }
  return { inputTokens, outputTokens, cachedInputTokens };
}

/** The run's cost in USD from `[prices.<model>]` (per million tokens), when the model has a price. */
function costOf(
  prices: Config['prices'],
  model: string | undefined,
  usage: TokenUsage,
): { costUsd?: number } {
  const price = model === undefined ? undefined : prices[model];
  if (price === undefined) return {};
  const cached = usage.cachedInputTokens ?? 0;
  const cost =
    (usage.inputTokens - cached) * price.input +
    cached * (price.cached_input ?? price.input) +
    usage.outputTokens * price.output;
  return { costUsd: cost / 1_000_000 };
}
