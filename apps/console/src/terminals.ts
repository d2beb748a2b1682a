// The terminals side of the page: tabs over gateway sessions, the list of every session the server
// has (refreshed live), and reattach after a reload. The page subscribes to pty.* for its open tabs
// only, so it never holds back (by not acking) a session nobody here is looking at. A tab is a
// viewer: closing it detaches (as Ctrl-] in `aleph attach`) and the program runs on; ending a
// session is its own action (End, in the Sessions list, after a confirm). Only a new tab closed
// before its shell started ends that shell: nobody ever saw it.
import { brief, h } from './dom.js';
import { RpcError, type GatewayConnection, type MethodResult, type PtyExitEvent } from './gateway-client.js';
import { describeExit, TerminalTab, type ExitInfo } from './terminal-tab.js';

const OPEN_TABS_KEY = 'aleph.tabs';
const ACTIVE_TAB_KEY = 'aleph.active';
/** What the model asked each agent session to run (the listed command is the sandbox's wrapper). */
const LABELS_KEY = 'aleph.labels';
const LIST_EVERY_MS = 2000;
/** The server's default idle TTL for a user terminal nobody views ([pty] idle_ttl_secs). */
export const DEFAULT_IDLE_TTL_MINUTES = 10;

interface SavedTab {
  sessionId: string;
  label?: string;
  /** The program's own title (OSC 0/2), which a screen snapshot does not carry. */
  programTitle?: string;
  pageKeys?: boolean;
  /** The agent run whose commands the tab follows: its next command and its end close the tab. */
  runId?: string | undefined;
}

/** A user shell by its program (`bash`, not `/bin/bash`); the rest of its command line as given. */
export function programLabel(command: string): string {
  const [program = '', ...rest] = command.split(' ');
  return [program.slice(program.lastIndexOf('/') + 1) || program, ...rest].join(' ');
}

/**
 * The model's command in how the server lists an agent's sandboxed command
 * (`[bubblewrap] /bin/sh -c <command>`), for a page that did not see the run's `agent.shell`.
 */
export function agentCommandOf(command: string): string | undefined {
  return /^\[(?:bubblewrap|sandbox-exec)\] \/bin\/sh -c ([\s\S]*)$/.exec(command)?.[1];
}

/** `4m 10s`, `35s`: a countdown in words short enough for a list row. */
function duration(ms: number): string {
  const seconds = Math.max(0, Math.round(ms / 1000));
  return seconds >= 60 ? `${Math.floor(seconds / 60)}m ${seconds % 60}s` : `${seconds}s`;
}

type ListedSession = MethodResult<'pty.list'>[number];

export class Terminals {
  /**
   * The tab strip: each tab beside its close button, the tabs owned (aria-owns) by a tablist that
   * holds nothing else — a button inside a tablist is not a tab (assistive technology trips on it).
   */
  readonly tabBar = h('div', { class: 'tabs' });
  readonly #tabList = h('div', { role: 'tablist', 'aria-label': 'Terminals', class: 'tablist' });
  readonly area = h('div', { class: 'terminal-area' });
  readonly sessionList = h('ul', { class: 'session-list', 'aria-label': 'Sessions' });
  readonly #connection: GatewayConnection;
  /** In the tab strip's order; a new tab is here before its session exists (see spawn). */
  #tabs: TerminalTab[] = [];
  #active: TerminalTab | undefined;
  #listTimer: ReturnType<typeof setInterval> | undefined;
  #listed: ListedSession[] = [];
  /** Agent sessions: what the model asked to run, and the run each belongs to. */
  readonly #labels = new Map<string, string>(
    Object.entries(JSON.parse(localStorage.getItem(LABELS_KEY) ?? '{}') as Record<string, string>),
  );
  readonly #runOf = new Map<string, string>();
  /** Runs known to have ended: a tab of theirs a reload brings back closes too. */
  readonly #endedRuns = new Set<string>();
  #restoring = false;
  /** Told when the tabs change (count, titles, queued keys): the page's title and banner follow. */
  onChange: () => void = () => {};

  constructor(connection: GatewayConnection) {
    this.#connection = connection;
    connection.onOutput((output) => this.#tabOf(output.sessionId)?.output(output));
    connection.onEvent((topic, params) => {
      if (topic !== 'pty.exit') return;
      const { sessionId, ...exit } = params as PtyExitEvent;
      this.#tabOf(sessionId)?.ended(exit);
      void this.refresh();
    });
    connection.onState((state) => {
      for (const tab of this.#tabs)
        if (state.kind === 'up') tab.flushQueued();
        else tab.disconnected();
      this.#render();
    });
    new ResizeObserver(() => this.activeTab?.fit()).observe(this.area);
    // This page's own screens (scrollback and all) for its next load: see TerminalTab.save.
    window.addEventListener('pagehide', () => {
      for (const tab of this.#tabs) tab.save();
    });
  }

  get activeTab(): TerminalTab | undefined {
    return this.#active;
  }

  get tabs(): readonly TerminalTab[] {
    return [...this.#tabs];
  }

  /** Bytes typed into every tab while the connection was down, not sent yet. */
  get queuedBytes(): number {
    return this.tabs.reduce((sum, tab) => sum + tab.queuedBytes, 0);
  }

  /** Reopens the tabs this browser tab had open before a reload, where the sessions still exist. */
  async restore(): Promise<void> {
    const saved = (JSON.parse(sessionStorage.getItem(OPEN_TABS_KEY) ?? '[]') as (SavedTab | string)[]).map(
      (entry) => (typeof entry === 'string' ? { sessionId: entry } : entry),
    );
    const active = sessionStorage.getItem(ACTIVE_TAB_KEY);
    this.#restoring = true; // the list drawn meanwhile must not save "no tabs" over the saved ones
    await this.refresh();
    const known = new Map(this.#listed.map((session) => [session.sessionId, session]));
    await Promise.all(
      saved.map(async (entry) => {
        const listed = known.get(entry.sessionId);
        if (listed === undefined) return;
        if (entry.runId !== undefined) this.#runOf.set(entry.sessionId, entry.runId);
        const tab = await this.open(entry.sessionId, listed, { focus: false, title: entry.label });
        if (entry.pageKeys === false) tab.pageKeys = false;
        if (entry.programTitle) tab.programTitle = entry.programTitle;
      }),
    );
    this.#restoring = false;
    for (const [sessionId, runId] of this.#runOf)
      if (this.#endedRuns.has(runId)) void this.close(this.#tabOf(sessionId));
    const first = saved.map((entry) => this.#tabOf(entry.sessionId)).find((tab) => tab !== undefined);
    const chosen = (active === null ? undefined : this.#tabOf(active)) ?? first;
    if (chosen !== undefined) this.select(chosen);
    this.#save();
    this.#listTimer = setInterval(() => void this.refresh(), LIST_EVERY_MS);
  }

  /** On a new connection: follow every open tab again from where it was (see TerminalTab.resume). */
  async resume(): Promise<void> {
    await this.#subscribe();
    await Promise.all(
      // A new tab whose session has not been answered yet follows it once it is.
      this.tabs
        .filter((tab) => tab.sessionId !== undefined)
        .map((tab) =>
          tab.resume().catch((error: unknown) => {
            if (error instanceof RpcError && error.code === 'disconnected') throw error;
            tab.failed(error);
          }),
        ),
    );
    await this.refresh();
  }

  /**
   * Spawns the default shell at the size of the terminal area and opens it. The tab is there, shown
   * and focused, before the server answers: what is typed next is this tab's (sent once it follows
   * its session), never the tab shown before's.
   */
  async spawn(command?: { command: string; args: string[] }): Promise<TerminalTab> {
    const size = this.activeTab?.terminal ?? { cols: 80, rows: 24 };
    const tab = this.#add(new TerminalTab(this.#connection, undefined, 'starting…', () => this.#render()));
    this.select(tab);
    if (!this.#connection.open) {
      // Asked for while down: started once the connection is back (nothing was sent: never twice).
      tab.disconnected();
      await new Promise<void>((up) => {
        const stop = this.#connection.onState((state) => {
          if (state.kind !== 'up') return;
          stop();
          up();
        });
      });
      if (!this.#tabs.includes(tab)) return tab; // closed meanwhile: nothing to start
    }
    let sessionId: string;
    try {
      ({ sessionId } = await this.#connection.call('pty.spawn', {
        ...command,
        cols: size.cols,
        rows: size.rows,
      }));
    } catch (error) {
      tab.failed(error, 'Cannot start a terminal');
      return tab;
    }
    if (await this.#endIfClosed(tab, sessionId)) return tab;
    await this.refresh(); // its command line, for its label (`bash`)
    const info = this.#listed.find((session) => session.sessionId === sessionId);
    if (await this.#endIfClosed(tab, sessionId)) return tab;
    tab.start(sessionId, brief(this.labelOf(sessionId, info?.command ?? 'shell'), 40));
    if (this.#active === tab) sessionStorage.setItem(ACTIVE_TAB_KEY, sessionId);
    await this.#follow(tab, info);
    return tab;
  }

  /** A new tab closed before its shell started: nobody saw that shell, so it ends (not runs on). */
  async #endIfClosed(tab: TerminalTab, sessionId: string): Promise<boolean> {
    if (this.#tabs.includes(tab)) return false;
    await this.#connection.call('pty.close', { sessionId }).catch(() => {});
    void this.refresh();
    return true;
  }

  /** Opens a tab on a session (or shows the one already open). */
  async open(
    sessionId: string,
    listed?: ListedSession,
    options: { focus?: boolean; title?: string | undefined } = {},
  ): Promise<TerminalTab> {
    const existing = this.#tabOf(sessionId);
    if (existing !== undefined) {
      if (options.focus !== false) this.select(existing);
      return existing;
    }
    const info = listed ?? this.#listed.find((session) => session.sessionId === sessionId);
    const title = brief(options.title ?? this.labelOf(sessionId, info?.command ?? 'shell'), 40);
    const tab = this.#add(new TerminalTab(this.#connection, sessionId, title, () => this.#render()));
    if (options.focus !== false || this.#active === undefined) this.select(tab);
    await this.#follow(tab, info);
    return tab;
  }

  #add(tab: TerminalTab): TerminalTab {
    this.#tabs.push(tab);
    this.area.append(tab.element);
    return tab;
  }

  #tabOf(sessionId: string): TerminalTab | undefined {
    return this.#tabs.find((tab) => tab.sessionId === sessionId);
  }

  /** A tab on its session: subscribed to its events, then drawn from its screen and following it. */
  async #follow(tab: TerminalTab, info: ListedSession | undefined): Promise<void> {
    await this.#subscribe().catch(() => {}); // down: the resume subscribes
    this.#save();
    try {
      await tab.attach();
    } catch (error) {
      // Gone (past its grace period): ended. Down: the resume attaches. Else said in the tab.
      if (error instanceof RpcError && error.code === 'unknown_session')
        tab.ended({ exitCode: null, signal: null, reason: 'exited' });
      else if (!(error instanceof RpcError && error.code === 'disconnected')) tab.failed(error);
    }
    const ended = endOf(info);
    if (ended !== undefined) tab.ended(ended);
  }

  select(chosen: TerminalTab): void {
    this.#active = chosen;
    if (!this.#restoring && chosen.sessionId !== undefined)
      sessionStorage.setItem(ACTIVE_TAB_KEY, chosen.sessionId);
    for (const tab of this.#tabs) tab.show(tab === chosen);
    this.#render();
  }

  /** Selects the n-th tab (0-based), for Alt+1…9. */
  selectIndex(index: number): void {
    const tab = this.#tabs[index];
    if (tab !== undefined) this.select(tab);
  }

  /** What a session is called: the model's command for an agent's, the program for a user's. */
  labelOf(sessionId: string, command: string): string {
    return this.#labels.get(sessionId) ?? agentCommandOf(command) ?? programLabel(command);
  }

  /** Whether a session runs an agent's command: its run said so, or the server lists it so. */
  #isAgent(session: ListedSession): boolean {
    return this.#labels.has(session.sessionId) || agentCommandOf(session.command) !== undefined;
  }

  /**
   * An agent's `shell` call started: one tab per run follows its commands (the run's previous
   * command's tab gives way, in the background), labelled with what the model asked to run.
   */
  agentShell(runId: string, ptySessionId: string, command: string): void {
    this.#labels.set(ptySessionId, command);
    const labels = [...this.#labels].slice(-200); // bounded: the newest agent commands
    localStorage.setItem(LABELS_KEY, JSON.stringify(Object.fromEntries(labels)));
    const previous = [...this.#runOf]
      .filter(([, run]) => run === runId)
      .map(([sessionId]) => this.#tabOf(sessionId))
      .find((tab) => tab !== undefined);
    this.#runOf.set(ptySessionId, runId);
    const wasActive = previous !== undefined && previous === this.#active;
    if (previous !== undefined) void this.close(previous);
    void this.open(ptySessionId, undefined, { focus: wasActive, title: `agent: ${command}` });
  }

  /** A run ended: its commands' tab closes (the sessions stay listed while the server keeps them). */
  runEnded(runId: string): void {
    this.#endedRuns.add(runId);
    for (const [sessionId, run] of this.#runOf) if (run === runId) void this.close(this.#tabOf(sessionId));
  }

  /**
   * Closes the tab: this page stops following the session, which runs on (listed in Sessions,
   * open it again from there). It never ends a session shown — see `end`; a new tab closed while
   * its shell is starting ends that shell once it exists (see spawn).
   */
  async close(tab: TerminalTab | undefined): Promise<void> {
    if (tab === undefined || !this.#tabs.includes(tab)) return;
    this.#tabs = this.#tabs.filter((open) => open !== tab);
    const focused = tab.element.contains(document.activeElement);
    tab.dispose();
    if (this.#active === tab) this.#active = this.#tabs.at(-1);
    if (this.#active !== undefined) this.select(this.#active);
    // The last tab gone: a keyboard user goes on from "New terminal", not from the page's top.
    else if (focused || document.activeElement === document.body)
      document.getElementById('new-terminal')?.focus();
    this.#save();
    this.#render();
    await this.#subscribe().catch(() => {});
    void this.refresh();
  }

  /** Ends a running session (its program gets SIGHUP), once the user confirms. */
  async end(session: ListedSession): Promise<void> {
    const label = brief(this.labelOf(session.sessionId, session.command), 80);
    const question = this.#isAgent(session)
      ? `End the agent's command “${label}”? The agent gets it as killed.`
      : `End “${label}”? Its program is sent SIGHUP, for every viewer.`;
    if (!window.confirm(question)) return;
    await this.#connection.call('pty.close', { sessionId: session.sessionId }).catch(() => {});
    await this.refresh();
  }

  async refresh(): Promise<void> {
    const askedAt = performance.now();
    try {
      this.#listed = await this.#connection.call('pty.list', {});
    } catch {
      return; // the connection is down; the banner says so
    }
    for (const session of this.#listed)
      this.#tabOf(session.sessionId)?.listed(session.cols, session.rows, askedAt);
    this.#render();
  }

  dispose(): void {
    clearInterval(this.#listTimer);
  }

  #subscribe(): Promise<unknown> {
    return this.#connection.call('events.subscribe', { topics: ['pty.*'], sessions: this.#sessionIds() });
  }

  #sessionIds(): string[] {
    return this.#tabs.flatMap((tab) => (tab.sessionId === undefined ? [] : [tab.sessionId]));
  }

  #save(): void {
    if (this.#restoring) return;
    const saved: SavedTab[] = this.#sessionIds().map((sessionId) => {
      const { label, programTitle, pageKeys } = this.#tabOf(sessionId)!;
      return { sessionId, label, programTitle, pageKeys, runId: this.#runOf.get(sessionId) };
    });
    sessionStorage.setItem(OPEN_TABS_KEY, JSON.stringify(saved));
  }

  #render(): void {
    this.#save();
    this.#tabList.setAttribute('aria-owns', this.#tabs.map((tab) => `tab-${tab.key}`).join(' '));
    this.tabBar.replaceChildren(
      this.#tabList,
      ...this.#tabs.map((tab, index) => {
        const selected = tab === this.#active;
        return h(
          'div',
          { class: `tab${tab.exit ? ' ended' : ''}${selected ? ' selected' : ''}` },
          h(
            'button',
            {
              role: 'tab',
              id: `tab-${tab.key}`,
              'aria-selected': String(selected),
              'aria-controls': `panel-${tab.key}`,
              'aria-keyshortcuts': `Alt+${index + 1}`,
              tabindex: selected ? '0' : '-1',
              title: `${tab.title} (Alt+${index + 1})`,
              onclick: () => this.select(tab),
              onauxclick: (event) => {
                if ((event as MouseEvent).button === 1) void this.close(tab);
              },
              onkeydown: (event) => this.#tabKey(event as KeyboardEvent, index),
            },
            `${index + 1} ${tab.title}${tab.exit ? ' (ended)' : ''}`,
          ),
          h(
            'button',
            {
              class: 'close',
              'aria-label': `Close tab ${tab.title}`,
              title: 'Close the tab (Alt+W): the session runs on; end it from Sessions',
              onclick: () => void this.close(tab),
            },
            '×',
          ),
        );
      }),
    );
    this.sessionList.replaceChildren(...this.#listed.map((session) => this.#sessionRow(session)));
    this.onChange();
  }

  /** Arrow keys move between tabs, Delete closes one (the tab pattern of WAI-ARIA). */
  #tabKey(event: KeyboardEvent, index: number): void {
    const tabs = this.#tabs;
    const to = event.key === 'ArrowRight' ? index + 1 : event.key === 'ArrowLeft' ? index - 1 : undefined;
    if (event.key === 'Delete') void this.close(tabs[index]);
    else if (to !== undefined && tabs.length > 0) {
      const next = tabs[(to + tabs.length) % tabs.length]!;
      this.select(next);
      document.getElementById(`tab-${next.key}`)?.focus();
    } else return;
    event.preventDefault();
  }

  #sessionRow(session: ListedSession): HTMLElement {
    const ended = endOf(session);
    const agent = this.#isAgent(session);
    const open = this.#tabOf(session.sessionId) !== undefined;
    const label = this.labelOf(session.sessionId, session.command);
    return h(
      'li',
      { class: ended ? 'ended' : 'live', 'data-session': session.sessionId },
      h(
        'span',
        { class: 'command', title: agent ? `${label}\n(runs as: ${session.command})` : session.command },
        `${agent ? 'agent: ' : ''}${brief(label, 48)}`,
      ),
      h(
        'span',
        { class: 'meta' },
        `${session.cols}×${session.rows} · ${ended === undefined ? 'running' : describeExit(ended).replace('Session ended — ', 'ended: ')}`,
      ),
      ended === undefined ? h('span', { class: 'meta expiry' }, this.#expiry(session, agent, open)) : null,
      open
        ? h('span', { class: 'meta' }, 'open')
        : h('button', { onclick: () => void this.open(session.sessionId, session) }, 'Open'),
      ended
        ? null
        : h(
            'button',
            {
              class: 'end',
              'aria-label': `End session ${brief(label, 48)}`,
              title: 'End the session: its program is sent SIGHUP',
              onclick: () => void this.end(session),
            },
            'End…',
          ),
    );
  }

  /** What will happen to a session left alone: said, not guessed by the user. */
  #expiry(session: ListedSession, agent: boolean, open: boolean): string {
    if (agent) return 'ends with its command';
    if (open) return 'kept while viewed';
    if (session.idleExpiresAt === null) return 'kept: viewed elsewhere, or no idle limit';
    return `no viewer: ends in ${duration(session.idleExpiresAt - Date.now())} if left idle`;
  }
}

/** The end of a listed session: ended sessions stay listed, with their exit, for a grace period. */
function endOf(session: ListedSession | undefined): ExitInfo | undefined {
  return session?.exit ?? undefined;
}
