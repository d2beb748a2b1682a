// The agent side of the page: a prompt that starts `agent.run`, the list of runs, and one run's
// timeline. The timeline is drawn from the run's session log (`agent.history`), refetched when an
// agent.* event says it grew: one rendering path for a live run and for a run seen after a reload.
// The wire shapes below are the server's (apps/server agent-service.ts), declared here because the
// console may import only the gateway.
import { brief, h } from './dom.js';
import { RpcError, type GatewayConnection } from './gateway-client.js';

type Verdict =
  | { kind: 'continue' }
  | { kind: 'veto'; reason: string; feedback: string; source?: string }
  | { kind: 'halt'; reason: string; source?: string };
type TerminateReason =
  | { kind: 'model_stop' | 'max_iterations' | 'cancelled' | 'interrupted' }
  | { kind: 'halted'; by: string; reason: string }
  | { kind: 'consecutive_failures'; count: number; lastError?: string }
  | { kind: 'error'; error: { kind: string; message?: string; elapsedMs?: number } };
type LogEvent = { seq: number } & (
  | { type: 'user' | 'feedback'; content: string }
  | { type: 'assistant'; content: string; toolCalls: { id: string; name: string; args: unknown }[] }
  | { type: 'tool_result'; callId: string; name: string; output: string; isError: boolean }
  | { type: 'verdict'; verdict: Verdict }
  | { type: 'compaction'; mode: string; fromTokens: number; toTokens: number }
  | {
      type: 'turn_step';
      step: {
        iteration: number;
        state: string;
        executed: number;
        vetoed: boolean;
        error?: string;
        splitChild?: string;
      };
    }
  | { type: 'terminate'; reason: TerminateReason }
);
interface Run {
  runId: string;
  sessionId: string;
  prompt: string;
  cwd?: string;
  state: 'running' | 'done';
  terminateReason?: TerminateReason;
  finalText?: string;
  selfVerdict?: string | null;
}

export function describeEnd(reason: TerminateReason): string {
  switch (reason.kind) {
    case 'model_stop':
      return 'finished: the model stopped';
    case 'max_iterations':
      return 'stopped: iteration limit reached';
    case 'cancelled':
      return 'cancelled';
    case 'interrupted':
      return 'interrupted: the server stopped during the run';
    case 'halted':
      return `halted by ${reason.by}: ${reason.reason}`;
    case 'consecutive_failures':
      return `stopped: ${plural(reason.count, 'turn')} in a row failed${reason.lastError ? `; last: ${brief(reason.lastError.split('\n')[0], 200)}` : ''}`;
    case 'error':
      return `error (${reason.error.kind})${reason.error.message ? `: ${reason.error.message}` : ''}`;
  }
}

const DIRECTORY_KEY = 'aleph.directory';
const plural = (count: number, word: string): string => `${count} ${word}${count === 1 ? '' : 's'}`;

/**
 * A turn in the words `aleph run` prints (apps/server cli-format.ts `stepLine`): `Turn 2: 3 tool
 * calls (1 failed), vetoed`, or why the provider failed. `calls` are the turn's results: the
 * step's own `executed` counts only the calls that succeeded.
 */
export function describeStep(
  step: Extract<LogEvent, { type: 'turn_step' }>['step'],
  calls: { ok: number; failed: number },
): string {
  if (step.error !== undefined)
    return `Turn ${step.iteration}: the provider failed: ${brief(step.error, 200)}`;
  const parts = [
    `${plural(calls.ok + calls.failed, 'tool call')}${calls.failed > 0 ? ` (${calls.failed} failed)` : ''}`,
  ];
  if (step.vetoed) parts.push('vetoed');
  if (step.splitChild !== undefined) parts.push(`sub-agent ${step.splitChild}`);
  return `Turn ${step.iteration}: ${parts.join(', ')}`;
}

export class AgentPanel {
  readonly element: HTMLElement;
  readonly prompt = h('textarea', {
    id: 'prompt',
    rows: '3',
    placeholder: 'Ask the agent… (Ctrl+Enter to run)',
    'aria-label': 'Prompt',
  });
  /** The run's directory; empty sends none (the server's `[agent] workdir`, if it has one). */
  readonly directory = h('input', {
    id: 'cwd',
    type: 'text',
    spellcheck: 'false',
    autocomplete: 'off',
    placeholder: "/path/to/project (empty: the server's [agent] workdir)",
  });
  readonly #connection: GatewayConnection;
  readonly #runs = new Map<string, Run>();
  readonly #message = h('div', { class: 'message', role: 'alert', hidden: true });
  readonly #runList = h('ul', { class: 'run-list', 'aria-label': 'Runs' });
  readonly #timeline = h('ol', { class: 'timeline', 'aria-live': 'polite' });
  readonly #header = h('div', { class: 'run-header' });
  #selected: string | undefined;
  #refetch: ReturnType<typeof setTimeout> | undefined;

  constructor(
    connection: GatewayConnection,
    readonly openShell: (ptySessionId: string, command: string) => void,
  ) {
    this.#connection = connection;
    const form = h(
      'form',
      { class: 'prompt-form', onsubmit: (event) => (event.preventDefault(), void this.run()) },
      h('label', { class: 'directory' }, 'Directory', this.directory),
      h('div', { class: 'prompt-row' }, this.prompt, h('button', { type: 'submit' }, 'Run')),
    );
    this.prompt.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) form.requestSubmit();
    });
    this.element = h(
      'section',
      { class: 'agent', 'aria-label': 'Agent runs' },
      form,
      this.#message,
      this.#runList,
      this.#header,
      this.#timeline,
    );
    connection.onEvent((topic, params) => this.#onEvent(topic, params as Run & Record<string, unknown>));
  }

  async load(): Promise<void> {
    const runs = await this.#connection.request<Run[]>('agent.list', {});
    for (const run of runs) this.#runs.set(run.runId, run);
    // The directory used last here, else the last run's (the CLI's runs say where their user was).
    this.directory.value ||=
      localStorage.getItem(DIRECTORY_KEY) ?? runs.findLast((run) => run.cwd)?.cwd ?? '';
    const latest = runs.at(-1);
    if (latest !== undefined) this.select(latest.runId);
    else this.#renderRuns();
  }

  async run(): Promise<void> {
    const prompt = this.prompt.value.trim();
    if (prompt === '') return;
    this.#message.hidden = true;
    this.directory.removeAttribute('aria-invalid');
    const cwd = this.directory.value.trim();
    try {
      const { runId, sessionId } = await this.#connection.request<{ runId: string; sessionId: string }>(
        'agent.run',
        { prompt, ...(cwd === '' ? {} : { cwd }) },
      );
      this.#runs.set(runId, this.#runs.get(runId) ?? { runId, sessionId, prompt, state: 'running' });
      this.prompt.value = '';
      if (cwd !== '') localStorage.setItem(DIRECTORY_KEY, cwd);
      this.select(runId);
    } catch (error) {
      const code = error instanceof RpcError ? error.code : undefined;
      const message = error instanceof Error ? error.message : String(error);
      if (code === 'invalid_params' && message.startsWith('params.cwd')) {
        // The server's words name its wire field; the page's name the field on the page.
        this.#message.textContent = message.startsWith('params.cwd is required')
          ? 'Directory: enter the absolute path of the directory the agent should work in (this server has no [agent] workdir in aleph.toml).'
          : message.replace(/^params\.cwd/, 'Directory');
        this.directory.setAttribute('aria-invalid', 'true');
        this.directory.required = true;
        this.directory.placeholder = 'required: /path/to/project';
        this.directory.focus();
      } else this.#message.textContent = message; // no_provider's says how to configure one
      this.#message.classList.toggle('no-provider', code === 'no_provider');
      this.#message.hidden = false;
    }
  }

  select(runId: string): void {
    this.#selected = runId;
    this.#renderRuns();
    this.#scheduleHistory(0);
  }

  #onEvent(topic: string, event: Run & Record<string, unknown>): void {
    if (!topic.startsWith('agent.')) return;
    const run = this.#runs.get(event.runId) ?? {
      runId: event.runId,
      sessionId: event.sessionId,
      prompt: '',
      state: 'running',
    };
    this.#runs.set(run.runId, run);
    if (topic === 'agent.shell') this.openShell(event['ptySessionId'] as string, event['command'] as string);
    if (topic === 'agent.done') {
      Object.assign(run, {
        state: 'done',
        terminateReason: event.terminateReason,
        finalText: event.finalText,
        selfVerdict: event.selfVerdict,
      });
      this.#renderRuns();
    }
    if (this.#selected === undefined) this.select(run.runId);
    else if (run.runId === this.#selected) this.#scheduleHistory(50);
  }

  #scheduleHistory(delayMs: number): void {
    if (this.#refetch !== undefined) return;
    this.#refetch = setTimeout(() => {
      this.#refetch = undefined;
      void this.#loadHistory();
    }, delayMs);
  }

  async #loadHistory(): Promise<void> {
    const run = this.#selected === undefined ? undefined : this.#runs.get(this.#selected);
    if (run === undefined) return;
    let events: LogEvent[] = [];
    try {
      events = (
        await this.#connection.request<{ events: LogEvent[] }>('agent.history', { sessionId: run.sessionId })
      ).events;
    } catch {
      // a run that has not written its log yet: the next event refetches
    }
    if (run.runId === this.#selected) this.#renderTimeline(run, events);
  }

  #renderRuns(): void {
    this.#runList.replaceChildren(
      ...[...this.#runs.values()]
        .reverse()
        .map((run) =>
          h(
            'li',
            { class: run.state },
            h(
              'button',
              { 'aria-current': String(run.runId === this.#selected), onclick: () => this.select(run.runId) },
              `${run.state === 'running' ? '● ' : ''}${brief(run.prompt || run.runId, 60)}`,
            ),
          ),
        ),
    );
    const run = this.#selected === undefined ? undefined : this.#runs.get(this.#selected);
    this.#header.replaceChildren(
      ...(run === undefined
        ? []
        : [
            h(
              'span',
              { class: `state ${run.state}` },
              run.state === 'running'
                ? 'Running'
                : run.terminateReason
                  ? describeEnd(run.terminateReason)
                  : 'Done',
            ),
            run.selfVerdict
              ? h('span', { class: 'self-verdict' }, `model's verdict: ${run.selfVerdict}`)
              : null,
            run.state === 'running'
              ? h(
                  'button',
                  {
                    class: 'cancel',
                    onclick: () =>
                      void this.#connection.request('agent.cancel', { runId: run.runId }).catch(() => {}),
                  },
                  'Cancel',
                )
              : null,
          ].filter((node) => node !== null)),
    );
  }

  #renderTimeline(run: Run, events: LogEvent[]): void {
    const results = new Map(
      events.flatMap((event) => (event.type === 'tool_result' ? [[event.callId, event] as const] : [])),
    );
    const items: HTMLElement[] = [];
    const calls = { ok: 0, failed: 0 }; // the results since the last step: this turn's
    for (const event of events) {
      switch (event.type) {
        case 'user':
          items.push(h('li', { class: 'user' }, h('b', {}, 'Prompt '), event.content));
          break;
        case 'feedback':
          items.push(h('li', { class: 'feedback' }, h('b', {}, 'Feedback to the model '), event.content));
          break;
        case 'assistant':
          if (event.content.trim() !== '') items.push(h('li', { class: 'assistant' }, event.content));
          for (const call of event.toolCalls) {
            const result = results.get(call.id);
            items.push(
              h(
                'li',
                { class: `tool ${result === undefined ? 'pending' : result.isError ? 'failed' : 'ok'}` },
                h(
                  'details',
                  {},
                  h(
                    'summary',
                    {},
                    `${result === undefined ? '…' : result.isError ? '✗' : '✓'} ${call.name} ${brief(call.args)}`,
                  ),
                  h('pre', { class: 'args' }, JSON.stringify(call.args, null, 2)),
                  result === undefined ? null : h('pre', { class: 'result' }, result.output),
                ),
              ),
            );
          }
          break;
        case 'verdict':
          if (event.verdict.kind === 'veto')
            items.push(
              h(
                'li',
                { class: 'verdict veto' },
                h('b', {}, `Veto${event.verdict.source ? ` (${event.verdict.source})` : ''}: `),
                event.verdict.reason,
                h('pre', {}, event.verdict.feedback),
              ),
            );
          else if (event.verdict.kind === 'halt')
            items.push(
              h(
                'li',
                { class: 'verdict halt' },
                h('b', {}, `Halt${event.verdict.source ? ` (${event.verdict.source})` : ''}: `),
                event.verdict.reason,
              ),
            );
          break;
        case 'turn_step':
          items.push(h('li', { class: 'step' }, describeStep(event.step, calls)));
          calls.ok = calls.failed = 0;
          break;
        case 'compaction':
          items.push(
            h(
              'li',
              { class: 'step' },
              `Context ${event.mode}: ${event.fromTokens} → ${event.toTokens} tokens`,
            ),
          );
          break;
        case 'tool_result':
          if (event.isError) calls.failed += 1;
          else calls.ok += 1;
          break; // drawn with its call
        case 'terminate':
          items.push(
            h(
              'li',
              { class: `end ${event.reason.kind}` },
              h('b', {}, 'Final state: '),
              describeEnd(event.reason),
            ),
          );
          break;
      }
    }
    this.#timeline.replaceChildren(...items);
  }
}
