// The terminals side of the page: tabs over gateway sessions, the list of every session the server
// has (refreshed live), and reattach after a reload. The page subscribes to pty.* for its open tabs
// only, so it never holds back (by not acking) a session nobody here is looking at. A tab is a
// viewer: closing it detaches (as Ctrl-] in `aleph attach`) and the program runs on; ending a
// session is its own action (End, in the Sessions list, after a confirm).
import { brief, h } from './dom.js';
import { RpcError, type GatewayConnection, type MethodResult, type PtyExitEvent } from './gateway-client.js';
import { describeExit, TerminalTab, type ExitInfo } from './terminal-tab.js';

const OPEN_TABS_KEY = 'aleph.tabs';
const LIST_EVERY_MS = 2000;

type ListedSession = MethodResult<'pty.list'>[number];

export class Terminals {
  readonly tabBar = h('div', { class: 'tabs', role: 'tablist', 'aria-label': 'Terminals' });
  readonly area = h('div', { class: 'terminal-area' });
  readonly sessionList = h('ul', { class: 'session-list', 'aria-label': 'Sessions' });
  readonly #connection: GatewayConnection;
  readonly #tabs = new Map<string, TerminalTab>();
  #active: string | undefined;
  #listTimer: ReturnType<typeof setInterval> | undefined;
  #listed: ListedSession[] = [];
  /** Sessions an agent's `shell` call runs in: ending one is the agent's command failing. */
  readonly #agentSessions = new Set<string>();

  constructor(connection: GatewayConnection) {
    this.#connection = connection;
    connection.onOutput((output) => this.#tabs.get(output.sessionId)?.output(output));
    connection.onEvent((topic, params) => {
      if (topic !== 'pty.exit') return;
      const { sessionId, ...exit } = params as PtyExitEvent;
      this.#tabs.get(sessionId)?.ended(exit);
      void this.refresh();
    });
    new ResizeObserver(() => this.activeTab?.fit()).observe(this.area);
  }

  get activeTab(): TerminalTab | undefined {
    return this.#active === undefined ? undefined : this.#tabs.get(this.#active);
  }

  get tabs(): readonly TerminalTab[] {
    return [...this.#tabs.values()];
  }

  /** Reopens the tabs this browser tab had open before a reload, where the sessions still exist. */
  async restore(): Promise<void> {
    await this.refresh();
    const saved = JSON.parse(sessionStorage.getItem(OPEN_TABS_KEY) ?? '[]') as string[];
    const known = new Map(this.#listed.map((session) => [session.sessionId, session]));
    for (const sessionId of saved) {
      const listed = known.get(sessionId);
      if (listed !== undefined) await this.open(sessionId, listed);
    }
    this.#save();
    this.#listTimer = setInterval(() => void this.refresh(), LIST_EVERY_MS);
  }

  /** Spawns the default shell at the size of the terminal area and opens it. */
  async spawn(command?: { command: string; args: string[] }): Promise<TerminalTab> {
    const size = this.activeTab?.terminal ?? { cols: 80, rows: 24 };
    const { sessionId } = await this.#connection.call('pty.spawn', {
      ...command,
      cols: size.cols,
      rows: size.rows,
    });
    const tab = await this.open(sessionId);
    void this.refresh();
    return tab;
  }

  /** Opens a tab on a session (or shows the one already open). */
  async open(
    sessionId: string,
    listed?: ListedSession,
    options: { focus?: boolean; title?: string } = {},
  ): Promise<TerminalTab> {
    const existing = this.#tabs.get(sessionId);
    if (existing !== undefined) {
      if (options.focus !== false) this.select(sessionId);
      return existing;
    }
    const info = listed ?? this.#listed.find((session) => session.sessionId === sessionId);
    const title = brief(options.title ?? info?.command ?? 'shell', 32);
    const tab = new TerminalTab(this.#connection, sessionId, title, () => this.#render());
    this.#tabs.set(sessionId, tab);
    this.area.append(tab.element);
    await this.#subscribe();
    if (options.focus !== false || this.#active === undefined) this.select(sessionId);
    this.#save();
    try {
      await tab.attach();
    } catch (error) {
      // Gone (past its grace period): ended. Anything else is said in the tab, not thrown.
      if (error instanceof RpcError && error.code === 'unknown_session')
        tab.ended({ exitCode: null, signal: null, reason: 'exited' });
      else tab.failed(error);
    }
    const ended = endOf(info);
    if (ended !== undefined) tab.ended(ended);
    return tab;
  }

  select(sessionId: string): void {
    this.#active = sessionId;
    for (const tab of this.#tabs.values()) tab.show(tab.sessionId === sessionId);
    this.#render();
  }

  /** Selects the n-th tab (0-based), for Alt+1…9. */
  selectIndex(index: number): void {
    const tab = this.tabs[index];
    if (tab !== undefined) this.select(tab.sessionId);
  }

  /** Marks a session as an agent's command (its End asks with that said). */
  markAgentSession(sessionId: string): void {
    this.#agentSessions.add(sessionId);
  }

  /**
   * Closes the tab: this page stops following the session, which runs on (listed in Sessions,
   * open it again from there). It never ends the session — see `end`.
   */
  async close(sessionId: string | undefined = this.#active): Promise<void> {
    const tab = sessionId === undefined ? undefined : this.#tabs.get(sessionId);
    if (tab === undefined) return;
    this.#tabs.delete(tab.sessionId);
    tab.dispose();
    if (this.#active === tab.sessionId) this.#active = this.tabs.at(-1)?.sessionId;
    if (this.#active !== undefined) this.select(this.#active);
    this.#save();
    this.#render();
    await this.#subscribe();
    void this.refresh();
  }

  /** Ends a running session (its program gets SIGHUP), once the user confirms. */
  async end(session: ListedSession): Promise<void> {
    const agent = this.#agentSessions.has(session.sessionId);
    const question = agent
      ? `End the agent's command “${brief(session.command, 80)}”? The agent gets it as killed.`
      : `End “${brief(session.command, 80)}”? Its program is sent SIGHUP, for every viewer.`;
    if (!window.confirm(question)) return;
    await this.#connection.call('pty.close', { sessionId: session.sessionId }).catch(() => {});
    await this.refresh();
  }

  async refresh(): Promise<void> {
    const askedAt = performance.now();
    try {
      this.#listed = await this.#connection.call('pty.list', {});
    } catch {
      return; // the connection is going; main.ts says so
    }
    for (const session of this.#listed)
      this.#tabs.get(session.sessionId)?.listed(session.cols, session.rows, askedAt);
    this.#render();
  }

  dispose(): void {
    clearInterval(this.#listTimer);
  }

  #subscribe(): Promise<unknown> {
    return this.#connection.call('events.subscribe', { topics: ['pty.*'], sessions: [...this.#tabs.keys()] });
  }

  #save(): void {
    sessionStorage.setItem(OPEN_TABS_KEY, JSON.stringify([...this.#tabs.keys()]));
  }

  #render(): void {
    this.tabBar.replaceChildren(
      ...this.tabs.map((tab, index) => {
        const selected = tab.sessionId === this.#active;
        return h(
          'div',
          { class: `tab${tab.exit ? ' ended' : ''}`, role: 'presentation' },
          h(
            'button',
            {
              role: 'tab',
              'aria-selected': String(selected),
              title: `${tab.title} (Alt+${index + 1})`,
              onclick: () => this.select(tab.sessionId),
            },
            `${index + 1} ${tab.title}${tab.exit ? ' (ended)' : ''}`,
          ),
          h(
            'button',
            {
              class: 'close',
              'aria-label': `Close tab ${tab.title}`,
              title: 'Close the tab (Alt+W): the session runs on; end it from Sessions',
              onclick: () => void this.close(tab.sessionId),
            },
            '×',
          ),
        );
      }),
    );
    this.sessionList.replaceChildren(
      ...this.#listed.map((session) => {
        const ended = endOf(session);
        const status =
          ended === undefined ? 'running' : describeExit(ended).replace('Session ended — ', 'ended: ');
        return h(
          'li',
          { class: ended ? 'ended' : 'live', 'data-session': session.sessionId },
          h('span', { class: 'command', title: session.command }, brief(session.command, 48)),
          h('span', { class: 'meta' }, `${session.cols}×${session.rows} · ${status}`),
          this.#tabs.has(session.sessionId)
            ? h('span', { class: 'meta' }, 'open')
            : h('button', { onclick: () => void this.open(session.sessionId, session) }, 'Open'),
          ended
            ? null
            : h(
                'button',
                {
                  class: 'end',
                  'aria-label': `End session ${brief(session.command, 48)}`,
                  title: 'End the session: its program is sent SIGHUP',
                  onclick: () => void this.end(session),
                },
                'End…',
              ),
        );
      }),
    );
  }
}

/** The end of a listed session: ended sessions stay listed, with their exit, for a grace period. */
function endOf(session: ListedSession | undefined): ExitInfo | undefined {
  return session?.exit ?? undefined;
}
