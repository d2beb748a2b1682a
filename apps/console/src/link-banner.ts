// What the page says about its connection to the server: a word in the header while all is well,
// and a banner across the page while it is not — since when, the next try (counting down, with a
// button to try now), and what happens to keys typed meanwhile. A refused token says how to sign in.
import { h } from './dom.js';
import type { GatewayConnection } from './gateway-client.js';

export class LinkBanner {
  readonly element = h('div', { class: 'link-banner', role: 'alert', hidden: true });
  readonly status = h('span', { class: 'status', role: 'status' }, 'connected');
  readonly #connection: GatewayConnection;
  readonly #queuedBytes: () => number;
  #downSince = 0;
  #ticker: ReturnType<typeof setInterval> | undefined;

  constructor(connection: GatewayConnection, queuedBytes: () => number) {
    this.#connection = connection;
    this.#queuedBytes = queuedBytes;
    connection.onState((state) => {
      if (state.kind === 'down' && this.#ticker === undefined) {
        this.#downSince = Date.now();
        this.#ticker = setInterval(() => this.render(), 1000);
      }
      if (state.kind !== 'down') {
        clearInterval(this.#ticker);
        this.#ticker = undefined;
      }
      this.render();
    });
  }

  render(): void {
    const state = this.#connection.state;
    document.body.classList.toggle('link-down', state.kind !== 'up');
    this.element.hidden = state.kind === 'up';
    this.status.classList.toggle('error', state.kind !== 'up');
    switch (state.kind) {
      case 'up':
        this.status.textContent = 'connected';
        this.element.replaceChildren();
        return;
      case 'down': {
        const retryIn = Math.max(0, Math.ceil((state.retryAt - Date.now()) / 1000));
        const since = Math.round((Date.now() - this.#downSince) / 1000);
        const queued = this.#queuedBytes();
        // 1001: the server said it is shutting down; its terminals ended with it (each tab says so).
        const shutDown = state.code === 1001;
        this.status.textContent = 'disconnected';
        this.element.replaceChildren(
          h('b', {}, shutDown ? 'The server shut down' : 'Disconnected from the server'),
          ` ${since} s ago (code ${state.code}). `,
          retryIn > 0 ? `Reconnecting in ${retryIn} s (try ${state.attempt}). ` : 'Reconnecting… ',
          h('button', { onclick: () => this.#connection.retryNow() }, 'Reconnect now'),
          h(
            'span',
            { class: 'queued' },
            shutDown
              ? ' Its terminals ended with it, so what you type now is not kept.'
              : queued > 0
                ? ` ${queued} bytes typed are queued and will be sent when the connection is back.`
                : ' Your terminals keep running on the server; what you type is queued (up to 4 KiB a tab) and sent when the connection is back.',
          ),
        );
        return;
      }
      case 'refused':
        this.status.textContent = 'signed out';
        this.element.replaceChildren(
          h('b', {}, 'The server refused this page’s token'),
          ' (it restarted with a new one?). Your sessions on it run on. ',
          h('button', { onclick: () => location.reload() }, 'Sign in again'),
        );
        return;
    }
  }
}
