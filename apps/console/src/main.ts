// The console's entry: sign in (the `#token=` fragment the server prints, kept in sessionStorage and
// wiped from the address bar; or a prompt), connect, lay out terminals beside agent runs, and bind
// the keyboard. A refused token or a lost server is said in words, never left as a blank page.
import '@xterm/xterm/css/xterm.css';
import './style.css';
import type { Terminal } from '@xterm/xterm';
import { AgentPanel } from './agent-panel.js';
import { h } from './dom.js';
import { ConnectError, GatewayConnection } from './gateway-client.js';
import { LinkBanner } from './link-banner.js';
import { isPageKey } from './terminal-tab.js';
import { DEFAULT_IDLE_TTL_MINUTES, Terminals } from './terminals.js';

const TOKEN_KEY = 'aleph.token';
const root = document.getElementById('app')!;

function takeToken(): string | null {
  const fromFragment = new URLSearchParams(location.hash.slice(1)).get('token');
  if (fromFragment !== null && fromFragment !== '') {
    sessionStorage.setItem(TOKEN_KEY, fromFragment);
    history.replaceState(null, '', location.pathname + location.search);
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

function signIn(message: string, isError: boolean): void {
  const input = h('input', {
    type: 'password',
    id: 'token',
    autocomplete: 'off',
    'aria-label': 'Token',
    required: true,
  });
  root.replaceChildren(
    h(
      'main',
      {},
      h(
        'form',
        {
          class: 'sign-in',
          onsubmit: (event) => {
            event.preventDefault();
            sessionStorage.setItem(TOKEN_KEY, input.value.trim());
            void start();
          },
        },
        h('h1', {}, 'Aleph console'),
        h('p', { class: isError ? 'error' : '', role: isError ? 'alert' : 'status' }, message),
        h('label', { for: 'token' }, 'Token'),
        input,
        h('button', { type: 'submit' }, 'Sign in'),
      ),
    ),
  );
  input.focus();
}

async function start(): Promise<void> {
  const token = takeToken();
  if (token === null || token === '') {
    signIn('Paste the token the server printed, or open the URL it printed (it signs you in).', false);
    return;
  }
  root.replaceChildren(h('main', {}, h('p', { class: 'connecting' }, 'Connecting…')));
  let connection: GatewayConnection;
  try {
    connection = await GatewayConnection.connect(token);
  } catch (error) {
    if (error instanceof ConnectError && error.kind === 'refused') {
      sessionStorage.removeItem(TOKEN_KEY);
      signIn(
        'Wrong token: the server refused it. Paste the token the server printed at start (also in its state directory).',
        true,
      );
    } else {
      root.replaceChildren(
        h(
          'main',
          {},
          h(
            'p',
            { class: 'error', role: 'alert' },
            `Cannot reach the Aleph server at ${location.host}. Is it running? Reload to retry.`,
          ),
        ),
      );
    }
    return;
  }
  await connection.call('events.subscribe', { topics: ['agent.*'] });
  const terminals = new Terminals(connection);
  const agent = new AgentPanel(connection, {
    shell: (runId, ptySessionId, command) => terminals.agentShell(runId, ptySessionId, command),
    done: (runId) => terminals.runEnded(runId),
  });
  // A new socket: agent events again, every tab followed on from its offset, the runs reloaded.
  connection.onReopen(() => connection.call('events.subscribe', { topics: ['agent.*'] }));
  connection.onReopen(() => terminals.resume());
  connection.onReopen(() => agent.resume());
  const banner = new LinkBanner(connection, () => terminals.queuedBytes);
  const empty = h(
    'p',
    { class: 'empty' },
    'No terminal open. ',
    h('button', { onclick: () => void terminals.spawn() }, 'New terminal'),
    ' (Alt+N)',
  );
  const pageKeys = h('input', { type: 'checkbox', id: 'page-keys', checked: true });
  pageKeys.addEventListener('change', () => {
    const tab = terminals.activeTab;
    if (tab !== undefined) tab.pageKeys = pageKeys.checked;
    tab?.terminal.focus();
  });
  const side = h(
    'aside',
    { class: 'side', id: 'side', 'aria-label': 'Agent and sessions' },
    agent.element,
    h('details', { class: 'sessions', open: true }, h('summary', {}, 'Sessions'), terminals.sessionList),
    h(
      'p',
      { class: 'ttl-note' },
      `A closed tab detaches: the program runs on. A user terminal nobody views ends after ${DEFAULT_IDLE_TTL_MINUTES} minutes idle by default (the server's [pty] idle_ttl_secs); one open in a tab is never ended for idling.`,
    ),
  );
  const drawer = h(
    'button',
    {
      class: 'drawer-toggle',
      'aria-controls': 'side',
      'aria-expanded': 'false',
      onclick: () => toggleDrawer(),
    },
    'Agent',
  );
  const toggleDrawer = (open = !document.body.classList.contains('drawer-open')): void => {
    document.body.classList.toggle('drawer-open', open);
    drawer.setAttribute('aria-expanded', String(open));
    if (open) agent.prompt.focus();
    else terminals.activeTab?.terminal.focus();
  };
  // A session opened from the drawer is what the user wants to see: the drawer gives way.
  terminals.sessionList.addEventListener('click', (event) => {
    const button = (event.target as Element).closest('button');
    if (button?.textContent === 'Open' && document.body.classList.contains('drawer-open'))
      toggleDrawer(false);
  });
  // Escape closes the drawer, unless a terminal has the key (vim's Escape is vim's).
  document.addEventListener('keydown', (event) => {
    const inTerminal = terminals.area.contains(document.activeElement);
    if (event.key === 'Escape' && !inTerminal && document.body.classList.contains('drawer-open'))
      toggleDrawer(false);
  });
  root.replaceChildren(
    banner.element,
    h(
      'header',
      {},
      h('h1', {}, 'Aleph'),
      h(
        'button',
        { id: 'new-terminal', onclick: () => void terminals.spawn(), title: 'Alt+N' },
        'New terminal',
      ),
      h(
        'label',
        { class: 'page-keys', title: 'Off: Alt+N, Alt+W, Alt+A and Alt+1…9 go to the program in this tab' },
        pageKeys,
        'Alt keys',
        h('span', { class: 'wide-only' }, ' for the page'),
      ),
      banner.status,
      drawer,
    ),
    h(
      'main',
      { class: 'split' },
      h('div', { class: 'terminals' }, terminals.tabBar, empty, terminals.area),
      side,
    ),
  );
  terminals.onChange = () => {
    empty.hidden = terminals.tabs.length > 0;
    const tab = terminals.activeTab;
    pageKeys.checked = tab?.pageKeys ?? true;
    pageKeys.disabled = tab === undefined;
    document.title = tab === undefined ? 'Aleph console' : `${tab.title} — Aleph`;
    banner.render();
  };
  window.addEventListener(
    'keydown',
    (event) => {
      if (!isPageKey(event)) return;
      // A tab that gives Alt keys to its program: its terminal took them (see TerminalTab).
      const tab = terminals.activeTab;
      if (tab !== undefined && !tab.pageKeys && tab.element.contains(document.activeElement)) return;
      const digit = /^Digit([1-9])$/.exec(event.code)?.[1];
      if (event.code === 'KeyN') void terminals.spawn();
      else if (event.code === 'KeyW') void terminals.close(terminals.activeTab);
      else if (event.code === 'KeyA') {
        if (getComputedStyle(drawer).display !== 'none') toggleDrawer(true);
        agent.prompt.focus();
      } else if (digit !== undefined) terminals.selectIndex(Number(digit) - 1);
      event.preventDefault();
    },
    { capture: true },
  );
  // Leaving the page detaches its terminals (they run on), but a stray Ctrl+W should not: ask.
  window.addEventListener('beforeunload', (event) => {
    if (terminals.tabs.some((tab) => tab.exit === undefined)) event.preventDefault();
  });
  connection.onState((state) => {
    // Sign in again reloads: the token is tried once more, and the sign-in form says if it is wrong.
    if (state.kind === 'refused') terminals.dispose();
  });
  // For tests and the bench: the text xterm holds, read from its buffer (not from pixels).
  const linesOf = (terminal: Terminal | undefined, which: 'screen' | 'all'): string[] => {
    const buffer = terminal?.buffer.active;
    if (terminal === undefined || buffer === undefined) return [];
    const first = which === 'screen' ? buffer.viewportY : 0;
    const last = which === 'screen' ? buffer.viewportY + terminal.rows : buffer.length;
    const out: string[] = [];
    for (let row = first; row < last; row += 1) out.push(buffer.getLine(row)?.translateToString(true) ?? '');
    return out;
  };
  Object.defineProperty(window, 'alephConsole', {
    value: {
      lines: (which: 'screen' | 'all' = 'screen') => linesOf(terminals.activeTab?.terminal, which),
      /** Every line of the tab on that session, shown or not (undefined: no such tab). */
      linesOf: (sessionId: string) => {
        const tab = terminals.tabs.find((open) => open.sessionId === sessionId);
        return tab === undefined ? undefined : linesOf(tab.terminal, 'all');
      },
      bufferType: () => terminals.activeTab?.terminal.buffer.active.type,
      cursor: () => {
        const buffer = terminals.activeTab?.terminal.buffer.active;
        return buffer === undefined ? undefined : { x: buffer.cursorX, y: buffer.cursorY };
      },
      size: () => ({ cols: terminals.activeTab?.terminal.cols, rows: terminals.activeTab?.terminal.rows }),
      request: (method: string, params: unknown) => connection.request(method, params),
      terminal: () => terminals.activeTab?.terminal,
    },
  });
  await Promise.all([terminals.restore(), agent.load()]);
}

void start();
