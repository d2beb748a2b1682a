// The wire: JSON-RPC 2.0 over WebSocket text frames. These zod schemas are the one source of the
// wire types — the server validates with them at the socket edge and the client infers from them.
import { z } from 'zod';

export {
  ErrorCodes,
  MAX_INPUT_BYTES,
  MAX_REPLAY_BYTES,
  MAX_SNAPSHOT_CELLS,
  PROTOCOL_VERSION,
  TOKEN_SUBPROTOCOL_PREFIX,
  WEBSOCKET_PATH,
  type ErrorCodeName,
} from './internal/wire-constants.js';

const sessionId = z.string().min(1, { error: 'must be a session id' });
/** A topic or a pattern (`pty.*`, `*`): at most 256 characters. */
const topic = z.string().min(1).max(256, { error: 'must be at most 256 characters' });
const DIMENSION = 'must be an integer from 1 to 10000';
const dimension = z.int({ error: DIMENSION }).min(1, { error: DIMENSION }).max(10_000, { error: DIMENSION });
/** Text that reaches the OS as a C string (argv, env, a path): a NUL would cut it short there. */
const cString = z.string().refine((value) => !value.includes('\0'), {
  error: 'must not contain a NUL byte (the OS would cut it there)',
});
const envName = z.string().regex(/^[^=\0]+$/, {
  error: 'must be a non-empty name without "=" or a NUL byte (the OS would split or cut it there)',
});
const base64 = z.base64({ error: 'must be base64' });

export const exitInfoSchema = z.object({
  exitCode: z.int().nullable(),
  signal: z.string().nullable(),
  reason: z.enum(['exited', 'closed', 'evicted', 'expired', 'shutdown', 'node_lost']),
});

export const methods = {
  'pty.spawn': {
    params: z.strictObject({
      command: cString.min(1).optional(),
      args: z.array(cString).optional(),
      cwd: cString.min(1).optional(),
      env: z.record(envName, cString).optional(),
      cols: dimension,
      rows: dimension,
      /**
       * Cluster mode: fork on this node (by its `[cluster] node` name) instead of the one the client
       * is connected to; an unknown or lost node answers `invalid_params`.
       */
      node: z.string().min(1).max(64).optional(),
    }),
    result: z.object({ sessionId: z.string(), pid: z.int() }),
  },
  'pty.input': {
    params: z.strictObject({ sessionId, data: base64 }),
    result: z.object({ bytes: z.int() }),
  },
  /** This connection's pty output, and keystrokes it sends, go as binary frames from now on (PROTOCOL.md). */
  'pty.binary': {
    params: z.strictObject({}).optional(),
    result: z.object({ version: z.int() }),
  },
  'pty.resize': {
    params: z.strictObject({ sessionId, cols: dimension, rows: dimension }),
    result: z.object({}),
  },
  'pty.close': {
    params: z.strictObject({ sessionId }),
    result: exitInfoSchema,
  },
  /** Another name for `pty.close`: ends the program (SIGHUP, then SIGTERM, then SIGKILL) and answers how. */
  'pty.kill': {
    params: z.strictObject({ sessionId }),
    result: exitInfoSchema,
  },
  'pty.list': {
    /**
     * Every field optional; `{}` lists every session, running ones first (oldest first), then ended
     * ones. `state` keeps running (`exit` null) or ended ones. With `limit` or `cursor` the list is
     * in `sessionId` order and holds the sessions after `cursor` (the `sessionId` of the last entry
     * of the previous page; it stays valid after that session is gone), at most `limit` of them: a
     * page shorter than `limit` is the last.
     */
    params: z
      .strictObject({
        state: z.enum(['running', 'exited']).optional(),
        limit: z.int().min(1).optional(),
        cursor: sessionId.optional(),
      })
      .optional(),
    result: z.array(
      z.object({
        sessionId: z.string(),
        pid: z.int(),
        command: z.string(),
        cols: z.int(),
        rows: z.int(),
        createdAt: z.number(),
        lastActivityAt: z.number(),
        /** Offset one past the newest output byte. */
        outputOffset: z.number(),
        /** Set once the session has ended; it stays listed (and replayable) for a grace period. */
        exit: exitInfoSchema.nullable(),
        /**
         * When the idle TTL would end it as `expired` if nothing happens (epoch ms); null while a
         * connection follows its output, without a TTL, or once it ended.
         */
        idleExpiresAt: z.number().nullable(),
      }),
    ),
  },
  'pty.replay': {
    params: z.strictObject({
      sessionId,
      fromOffset: z.int().min(0),
      /** At most this many bytes (and never more than MAX_REPLAY_BYTES). */
      maxBytes: z.int().min(1).optional(),
    }),
    /**
     * `offset` is where `data` starts: `fromOffset`, or the oldest byte still kept. `end` is the
     * offset one past the newest output byte: while `offset` + the data's length is below it,
     * there is more to ask for.
     */
    result: z.object({ offset: z.number(), data: z.string(), end: z.number() }),
  },
  'pty.follow': {
    params: z.strictObject({ sessionId, fromOffset: z.int().min(0) }),
    /**
     * Where this connection's pty.output for the session resumes (`fromOffset`, or the oldest byte
     * kept), how far the output goes now, and the session's end if it has ended (its pty.exit was
     * sent before: a client following an ended session reads its tail up to `end`, then stops).
     */
    result: z.object({ offset: z.number(), end: z.number(), exit: exitInfoSchema.nullable() }),
  },
  'pty.snapshot': {
    params: z.strictObject({ sessionId }),
    /**
     * The screen after the session's first `offset` bytes of output, as escape sequences (xterm.js's
     * SerializeAddon) for a terminal of `cols` × `rows`; follow the output from `offset` after it.
     */
    result: z.object({ offset: z.number(), cols: z.int(), rows: z.int(), data: z.string() }),
  },
  'pty.ack': {
    params: z.strictObject({ sessionId, offset: z.int().min(0) }),
    result: z.object({}),
  },
  'events.subscribe': {
    params: z.strictObject({
      topics: z.array(topic).min(1),
      /** Limit pty.* events to these sessions (replaces any earlier filter); omit for all. */
      sessions: z.array(z.string().min(1)).max(4096).optional(),
    }),
    result: z.object({ topics: z.array(z.string()) }),
  },
  'events.unsubscribe': {
    params: z.strictObject({ topics: z.array(topic).min(1) }),
    result: z.object({ topics: z.array(z.string()) }),
  },
} as const;

export type MethodName = keyof typeof methods;
export type MethodParams<M extends MethodName> = z.input<(typeof methods)[M]['params']>;
export type MethodResult<M extends MethodName> = z.infer<(typeof methods)[M]['result']>;
export type ExitInfoWire = z.infer<typeof exitInfoSchema>;

export const events = {
  'pty.output': z.object({ sessionId: z.string(), offset: z.number(), data: z.string() }),
  'pty.exit': exitInfoSchema.extend({ sessionId: z.string() }),
} as const;
export type PtyOutputEvent = z.infer<(typeof events)['pty.output']>;
export type PtyExitEvent = z.infer<(typeof events)['pty.exit']>;

export const requestSchema = z.object({
  jsonrpc: z.literal('2.0', { error: 'jsonrpc must be "2.0"' }),
  id: z.union([z.string(), z.number(), z.null()]).optional(),
  method: z.string({ error: 'method must be a string' }),
  params: z.unknown().optional(),
});
export type RpcRequest = z.infer<typeof requestSchema>;

export interface RpcErrorObject {
  code: number;
  message: string;
  data?: { code: string; [key: string]: unknown };
}

export type RpcMessage =
  | { jsonrpc: '2.0'; id: string | number | null; result: unknown }
  | { jsonrpc: '2.0'; id: string | number | null; error: RpcErrorObject }
  | { jsonrpc: '2.0'; method: string; params: unknown };

/** `pty.*` matches `pty.output`; `*` matches everything; anything else matches exactly. */
export function topicMatches(pattern: string, topic: string): boolean {
  if (pattern === '*' || pattern === topic) return true;
  return pattern.endsWith('.*') && topic.startsWith(pattern.slice(0, -1));
}

export function formatZodIssue(issue: z.core.$ZodIssue, root = 'params'): string {
  const pathOf = (parts: readonly PropertyKey[]) =>
    parts.reduce<string>(
      (out, part) => (typeof part === 'number' ? `${out}[${part}]` : `${out}.${String(part)}`),
      root,
    );
  const path = pathOf(issue.path);
  if (issue.code === 'unrecognized_keys') return `${path} has unknown key(s) ${issue.keys.join(', ')}`;
  // A record's key: name it (JSON-quoted: it may hold a NUL) and say what is wrong with it.
  if (issue.code === 'invalid_key') {
    const key = JSON.stringify(String(issue.path.at(-1)));
    return `${pathOf(issue.path.slice(0, -1))} key ${key}: ${issue.issues[0]?.message ?? issue.message}`;
  }
  return `${path}: ${issue.message}`;
}
