// Who may open the socket: a bearer token (or, from a browser, the token subprotocol), compared in
// constant time, and an Origin on the allow-list (same-origin by default).
import { createHash, timingSafeEqual } from 'node:crypto';
import { isIP } from 'node:net';
import type { IncomingMessage } from 'node:http';
import { PROTOCOL_VERSION, TOKEN_SUBPROTOCOL_PREFIX } from '../protocol.js';

export function tokensEqual(given: string, expected: string): boolean {
  // Hash both so the comparison takes the same time whatever the lengths.
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(expected).digest();
  return timingSafeEqual(a, b);
}

export function offeredProtocols(request: IncomingMessage): string[] {
  const header = request.headers['sec-websocket-protocol'];
  return typeof header === 'string' ? header.split(',').map((protocol) => protocol.trim()) : [];
}

export function presentedToken(request: IncomingMessage): string | undefined {
  const authorization = request.headers.authorization;
  if (typeof authorization === 'string') {
    const match = /^Bearer\s+(.+)$/i.exec(authorization.trim());
    if (match?.[1] !== undefined) return match[1];
  }
  const fromProtocol = offeredProtocols(request).find((protocol) =>
    protocol.startsWith(TOKEN_SUBPROTOCOL_PREFIX),
  );
  if (fromProtocol === undefined) return undefined;
  try {
    return Buffer.from(fromProtocol.slice(TOKEN_SUBPROTOCOL_PREFIX.length), 'base64url').toString('utf8');
  } catch {
    return undefined;
  }
}

/** The subprotocol value a browser offers to carry its token. */
export function tokenSubprotocol(token: string): string {
  return TOKEN_SUBPROTOCOL_PREFIX + Buffer.from(token, 'utf8').toString('base64url');
}

export function originAllowed(
  request: IncomingMessage,
  allowedOrigins: readonly string[] | undefined,
): boolean {
  const origin = request.headers.origin;
  if (origin === undefined) return true; // not a browser: the token alone decides
  if (allowedOrigins !== undefined) return allowedOrigins.includes(origin) || allowedOrigins.includes('*');
  // Same-origin: the page was served by this host:port.
  const host = request.headers.host;
  try {
    return host !== undefined && new URL(origin).host === host;
  } catch {
    return false;
  }
}

/**
 * DNS rebinding: a page on evil.example, once the name resolves to 127.0.0.1, is same-origin with
 * itself (Host and Origin both say evil.example). So the Host must name this server: `localhost`, a
 * loopback IP, the bound address (any IP literal when bound to a wildcard: the server answers on all
 * of its addresses), or a name or IP on `allowedHosts` (the bound host is one).
 */
export function hostAllowed(
  request: IncomingMessage,
  allowedHosts: readonly string[] = [],
  boundHost = '127.0.0.1',
): boolean {
  const host = request.headers.host;
  if (host === undefined) return false;
  let hostname: string;
  try {
    hostname = new URL(`http://${host}`).hostname.toLowerCase();
  } catch {
    return false;
  }
  const bare = hostname.startsWith('[') ? hostname.slice(1, -1) : hostname;
  if (bare === 'localhost' || bare.endsWith('.localhost') || (isIP(bare) !== 0 && isLoopback(bare)))
    return true;
  if (isIP(bare) !== 0 && WILDCARDS.has(boundHost)) return true;
  return allowedHosts.some((allowed) => {
    const name = allowed.toLowerCase();
    return (name.startsWith('[') ? name.slice(1, -1) : name) === bare;
  });
}

const WILDCARDS = new Set(['0.0.0.0', '::', '']);

export function selectProtocol(protocols: Set<string>): string | false {
  return protocols.has(PROTOCOL_VERSION) ? PROTOCOL_VERSION : false;
}

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost', '::ffff:127.0.0.1', '0:0:0:0:0:0:0:1']);
export function isLoopback(host: string): boolean {
  return LOOPBACK.has(host) || host.startsWith('127.') || host.startsWith('::ffff:127.');
}
