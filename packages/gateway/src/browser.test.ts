// A real browser (Debian's chromium via playwright-core) connects the way a web terminal would:
// the token in the subprotocol (browsers cannot set headers), from an allowed origin.
import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PROTOCOL_VERSION, tokenSubprotocol } from './index.js';
import { startGateway, TOKEN, type Harness } from '../test/support.js';

const CHROMIUM = '/usr/bin/chromium';
const available = existsSync(CHROMIUM);
if (!available && process.env['CI'])
  throw new Error(`${CHROMIUM} is missing: .ci/run installs Debian's chromium`);

const PAGE = `<!doctype html><meta charset="utf-8"><title>aleph</title><script>
window.connect = (url, protocols) => new Promise((resolve) => {
  const ws = new WebSocket(url, protocols);
  const out = { opened: false, protocol: '', output: '', closeCode: null };
  ws.onopen = () => {
    out.opened = true; out.protocol = ws.protocol;
    ws.send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'events.subscribe', params: { topics: ['pty.*'] } }));
    ws.send(JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'pty.spawn', params: { command: '/bin/sh', args: ['-c', 'printf "h\\\\303\\\\251llo from the pty"'], cols: 80, rows: 24 } }));
  };
  ws.onmessage = (event) => {
    const message = JSON.parse(event.data);
    if (message.method === 'pty.output') out.output += new TextDecoder().decode(Uint8Array.from(atob(message.params.data), (c) => c.charCodeAt(0)));
    if (message.method === 'pty.exit') { ws.close(); }
  };
  ws.onclose = (event) => { out.closeCode = event.code; resolve(out); };
});
</script>`;

describe.skipIf(!available)('from a real browser', () => {
  let browser: Browser;
  let site: Server;
  let origin: string;
  let allowed: Harness;
  let sameOriginOnly: Harness;

  beforeAll(async () => {
    site = createServer((_request, response) =>
      response.writeHead(200, { 'content-type': 'text/html' }).end(PAGE),
    );
    await new Promise<void>((resolve) => site.listen(0, '127.0.0.1', resolve));
    origin = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;
    allowed = await startGateway({ allowedOrigins: [origin] });
    sameOriginOnly = await startGateway();
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
  });

  afterAll(async () => {
    await browser?.close();
    await allowed?.dispose();
    await sameOriginOnly?.dispose();
    await new Promise((resolve) => site?.close(resolve));
  });

  const connectFrom = async (url: string, protocols: string[]) => {
    const page = await browser.newPage();
    await page.goto(origin);
    // Runs in the page, where the script above defined connect() on the global object.
    const result = await page.evaluate(
      ([u, p]) =>
        (globalThis as unknown as { connect(u: string, p: string[]): Promise<unknown> }).connect(u, p),
      [url, protocols] as const,
    );
    await page.close();
    return result as { opened: boolean; protocol: string; output: string; closeCode: number };
  };

  it('authenticates with the token subprotocol from an allowed origin and streams a pty', async () => {
    const result = await connectFrom(allowed.gateway.url, [PROTOCOL_VERSION, tokenSubprotocol(TOKEN)]);
    expect(result).toMatchObject({ opened: true, protocol: PROTOCOL_VERSION });
    expect(result.output).toContain('héllo from the pty');
  });

  it('is refused with a wrong token, and from an origin that is not allowed; nothing is spawned', async () => {
    const wrong = await connectFrom(allowed.gateway.url, [PROTOCOL_VERSION, tokenSubprotocol('wrong-token')]);
    expect(wrong).toMatchObject({ opened: false, closeCode: 1006 });
    const foreign = await connectFrom(sameOriginOnly.gateway.url, [
      PROTOCOL_VERSION,
      tokenSubprotocol(TOKEN),
    ]);
    expect(foreign).toMatchObject({ opened: false, closeCode: 1006 });
    expect(sameOriginOnly.manager.size).toBe(0);
  });
});
