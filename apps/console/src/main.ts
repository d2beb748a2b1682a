// The console's entry: sign in (the `#token=` fragment the server prints, kept in sessionStorage and
// wiped from the address bar; or a prompt), connect, lay out terminals beside agent runs, and bind
// the keyboard. A refused token or a lost server is said in words, never left as a blank page.
import '@xterm/xterm/css/xterm.css';
import './style.css';
import { AgentPanel } from './agent-panel.js';
import { h } from './dom.js';
import { ConnectError, GatewayConnection } from './gateway-client.js';
import { Terminals } from './terminals.js';

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
  );
  input.focus();
}

async function start(): Promise<void> {
  const token = takeToken();
  if (token === null || token === '') {
    signIn('Paste the token the server printed, or open the URL it printed (it signs you in).', false);
    return;
  }
  root.replaceChildren(h('p', { class: 'connecting' }, 'Connecting…'));
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
          'p',
          { class: 'error', role: 'alert' },
          `Cannot reach the Aleph server at ${location.host}. Is it running? Reload to retry.`,
        ),
      );
    }
    return;
  }
  await connection.call('events.subscribe', { topics: ['agent.*'] });
  const terminals = new Terminals(connection);
  const agent = new AgentPanel(connection, (ptySessionId, command) => {
    terminals.markAgentSession(ptySessionId);
    void terminals.open(ptySessionId, undefined, { focus: false, title: `agent: ${command}` });
  });
  const status = h('span', { class: 'status', role: 'status' }, 'connected');
  const empty = h(
    'p',
    { class: 'empty' },
    'No terminal open. ',
    h('button', { onclick: () => void terminals.spawn() }, 'New terminal'),
    ' (Alt+N)',
  );
  root.replaceChildren(
    h(
      'header',
      {},
      h('h1', {}, 'Aleph'),
      h(
        'button',
        { id: 'new-terminal', onclick: () => void terminals.spawn(), title: 'Alt+N' },
        'New terminal',
      ),
      status,
    ),
    h(
      'main',
      { class: 'split' },
      h('div', { class: 'terminals' }, terminals.tabBar, empty, terminals.area),
      h(
        'aside',
        { class: 'side' },
        agent.element,
        h('details', { class: 'sessions', open: true }, h('summary', {}, 'Sessions'), terminals.sessionList),
      ),
    ),
  );
  new MutationObserver(() => (empty.hidden = terminals.tabs.length > 0)).observe(terminals.tabBar, {
    childList: true,
  });
  window.addEventListener(
    'keydown',
    (event) => {
      if (!event.altKey || event.ctrlKey || event.metaKey) return;
      const digit = /^Digit([1-9])$/.exec(event.code)?.[1];
      if (event.code === 'KeyN') void terminals.spawn();
      else if (event.code === 'KeyW') void terminals.close();
      else if (event.code === 'KeyA') agent.prompt.focus();
      else if (digit !== undefined) terminals.selectIndex(Number(digit) - 1);
      else return;
      event.preventDefault();
    },
    { capture: true },
  );
  void connection.closed.then((event) => {
    terminals.dispose();
    status.textContent = `disconnected (${event.code}): reload to reconnect`;
    status.classList.add('error');
  });
  // For tests and the bench: the text xterm holds, read from its buffer (not from pixels).
  Object.defineProperty(window, 'alephConsole', {
    value: {
      lines(which: 'screen' | 'all' = 'screen'): string[] {
        const buffer = terminals.activeTab?.terminal.buffer.active;
        if (buffer === undefined) return [];
        const first = which === 'screen' ? buffer.viewportY : 0;
        const last =
          which === 'screen' ? buffer.viewportY + (terminals.activeTab?.terminal.rows ?? 0) : buffer.length;
        const out: string[] = [];
        for (let row = first; row < last; row += 1)
          out.push(buffer.getLine(row)?.translateToString(true) ?? '');
        return out;
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
