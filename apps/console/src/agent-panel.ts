// The agent side of the page: a prompt that starts `agent.run`, the list of runs, and one run's
// timeline. The timeline is drawn from the run's session log (`agent.history`), refetched when an
// agent.* event says it grew, and drawn incrementally (RunView): one rendering path for a live run,
// a run seen after a reload, and a run resumed after a dropped connection. A run that is over can
// be followed up (agent.run on its session) from the box under its timeline.
// The wire shapes below are the server's (apps/server agent-service.ts), declared here because the
// console may import only the gateway.
import { brief, h } from './dom.js';
import { RpcError, type GatewayConnection } from './gateway-client.js';
import {
  describeEnd,
  describeTotals,
  RunView,
  type LogEvent,
  type ReplyDelta,
  type ReplySoFar,
  type RunTotals,
  type TerminateReason,
} from './run-view.js';

export { describeEnd, describeStep } from './run-view.js';

interface Run {
  runId: string;
  sessionId: string;
  prompt: string;
  cwd?: string;
  state: 'running' | 'done';
  terminateReason?: TerminateReason;
  finalText?: string;
  selfVerdict?: string | null;
  totals?: RunTotals;
  /** A running run's reply so far (agent.list). */
  reply?: ReplySoFar;
}

const DIRECTORY_KEY = 'aleph.directory';
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
  readonly #timeline = h('div', { class: 'timeline-host' });
  readonly #header = h('div', { class: 'run-header' });
  /** Each run's drawn timeline, kept while the page lives: folds stay as left, across selections. */
  readonly #views = new Map<string, RunView>();
  readonly #followUp = h('textarea', {
    rows: '2',
    placeholder: 'Follow up on this run… (Ctrl+Enter)',
    'aria-label': 'Follow-up',
  });
  readonly #followUpForm: HTMLFormElement;
  #selected: string | undefined;
  #refetch: ReturnType<typeof setTimeout> | undefined;

  constructor(
    connection: GatewayConnection,
    readonly on: {
      /** A run's `shell` call started a terminal. */
      shell(runId: string, ptySessionId: string, command: string): void;
      /** A run ended. */
      done(runId: string): void;
    },
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
    this.#followUpForm = h(
      'form',
      {
        class: 'prompt-form follow-up',
        hidden: true,
        onsubmit: (event) => (event.preventDefault(), void this.followUp()),
      },
      h('div', { class: 'prompt-row' }, this.#followUp, h('button', { type: 'submit' }, 'Send')),
    );
    this.#followUp.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) this.#followUpForm.requestSubmit();
    });
    this.element = h(
      'section',
      { class: 'agent', 'aria-label': 'Agent runs' },
      form,
      this.#message,
      this.#runList,
      this.#header,
      this.#timeline,
      this.#followUpForm,
    );
    connection.onEvent((topic, params) => this.#onEvent(topic, params as Run & Record<string, unknown>));
  }

  async load(): Promise<void> {
    const runs = await this.#connection.request<Run[]>('agent.list', {});
    for (const run of runs) this.#runs.set(run.runId, run);
    this.#seedReplies(runs);
    // Ended while this page was away: the tab a reload brought back of its commands closes.
    for (const run of runs) if (run.state === 'done') this.on.done(run.runId);
    // The directory used last here, else the last run's (the CLI's runs say where their user was).
    this.directory.value ||=
      localStorage.getItem(DIRECTORY_KEY) ?? runs.findLast((run) => run.cwd)?.cwd ?? '';
    const latest = runs.at(-1);
    if (latest !== undefined) this.select(latest.runId);
    else this.#renderRuns();
  }

  /** On a new connection: the runs' states again (events were missed), and the selected timeline. */
  async resume(): Promise<void> {
    const runs = await this.#connection.request<Run[]>('agent.list', {});
    for (const run of runs) {
      const known = this.#runs.get(run.runId);
      if (known?.state === 'running' && run.state === 'done') this.on.done(run.runId);
      this.#runs.set(run.runId, { ...known, ...run });
    }
    this.#seedReplies(runs);
    this.#renderRuns();
    this.#scheduleHistory(0);
  }

  /** What the running runs' replies say so far: a page that opens mid-reply shows it from its start. */
  #seedReplies(runs: readonly Run[]): void {
    for (const run of runs)
      if (run.state === 'running' && run.reply !== undefined) this.#viewOf(run).seed(run.runId, run.reply);
  }

  /** Sends the follow-up box to the selected run's session: the conversation goes on there. */
  async followUp(): Promise<void> {
    const run = this.#selected === undefined ? undefined : this.#runs.get(this.#selected);
    const prompt = this.#followUp.value.trim();
    if (run === undefined || prompt === '') return;
    if (await this.run({ prompt, sessionId: run.sessionId, ...(run.cwd ? { cwd: run.cwd } : {}) }))
      this.#followUp.value = '';
  }

  async run(followUp?: { prompt: string; sessionId: string; cwd?: string }): Promise<boolean> {
    const prompt = followUp?.prompt ?? this.prompt.value.trim();
    if (prompt === '') return false;
    this.#message.hidden = true;
    this.directory.removeAttribute('aria-invalid');
    const cwd = followUp === undefined ? this.directory.value.trim() : (followUp.cwd ?? '');
    try {
      const { runId, sessionId } = await this.#connection.request<{ runId: string; sessionId: string }>(
        'agent.run',
        { prompt, ...(cwd === '' ? {} : { cwd }), ...(followUp ? { sessionId: followUp.sessionId } : {}) },
      );
      this.#runs.set(runId, this.#runs.get(runId) ?? { runId, sessionId, prompt, state: 'running', cwd });
      if (followUp === undefined) this.prompt.value = '';
      if (cwd !== '' && followUp === undefined) localStorage.setItem(DIRECTORY_KEY, cwd);
      this.select(runId);
      return true;
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
      return false;
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
    if (topic === 'agent.shell')
      this.on.shell(run.runId, event['ptySessionId'] as string, event['command'] as string);
    if (topic === 'agent.delta') {
      const { turn, seq, kind, text } = event as unknown as Partial<ReplyDelta>;
      if (typeof text === 'string' && typeof turn === 'number' && typeof seq === 'number')
        this.#viewOf(run).delta(run.runId, { turn, seq, kind: kind ?? 'text', text });
      return;
    }
    if (topic === 'agent.done') {
      const number = (key: string): number | undefined =>
        typeof event[key] === 'number' ? event[key] : undefined;
      Object.assign(run, {
        state: 'done',
        terminateReason: event.terminateReason,
        finalText: event.finalText,
        selfVerdict: event.selfVerdict,
        totals: {
          iterations: number('iterations'),
          totalTokens: number('totalTokens'),
          elapsedMs: number('elapsedMs'),
          costUsd: number('costUsd'),
        },
      });
      this.#viewOf(run).totals(run.totals ?? {});
      this.on.done(run.runId);
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
    const view = this.#viewOf(run);
    // What is not drawn yet, page after page (a page holds at most 1000 events or about 1 MiB).
    for (let from = view.seen + 1; ;) {
      let page: { events: LogEvent[]; next?: number };
      try {
        page = await this.#connection.request('agent.history', { sessionId: run.sessionId, from });
      } catch {
        break; // a run that has not written its log yet: the next event refetches
      }
      view.update(page.events);
      if (page.next === undefined || page.next <= from) break;
      from = page.next;
    }
    if (run.totals !== undefined) view.totals(run.totals);
    if (run.runId === this.#selected) this.#timeline.replaceChildren(view.element);
  }

  /** One event of a session's log whole (one the history sent cut): its JSON slice after slice. */
  async #readEvent(sessionId: string, seq: number): Promise<LogEvent> {
    let json = '';
    for (let from: number | undefined = 0; from !== undefined;) {
      const slice: { json: string; next?: number } = await this.#connection.request('agent.historyEvent', {
        sessionId,
        seq,
        from,
      });
      json += slice.json;
      from = slice.next !== undefined && slice.next > from ? slice.next : undefined;
    }
    return JSON.parse(json) as LogEvent;
  }

  /** The run's timeline view (a follow-up shares its session's). */
  #viewOf(run: Run): RunView {
    let view = this.#views.get(run.sessionId);
    if (view === undefined) {
      view = new RunView((seq) => this.#readEvent(run.sessionId, seq));
      this.#views.set(run.sessionId, view);
    }
    return view;
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
            run.state === 'done' && run.totals
              ? h('span', { class: 'totals' }, describeTotals(run.totals))
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
    this.#followUpForm.hidden = run === undefined || run.state === 'running';
  }
}
