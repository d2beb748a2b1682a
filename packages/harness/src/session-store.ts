// The append-only event log of a session, and beside it a transcript in Claude Code's JSONL format
// (derived from the log, appended as the log grows) for hooks that read one. The file store writes
// JSON lines, fsyncs at each turn boundary, holds a file handle only while a run is on the session,
// and on reload skips (and reports) a torn last line or a corrupt line — never fatal to the rest.
import { claudeToolName, toClaudeInput } from '@aleph/verification';
import { createHash, randomUUID } from 'node:crypto';
import { mkdirSync, writeSync } from 'node:fs';
import { appendFile, open, readdir, readFile, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { HarnessError } from './errors.js';
import type {
  AppendOptions,
  LoadOptions,
  SessionEvent,
  SessionEventBody,
  SessionLoad,
  SessionStore,
  SessionSummary,
  TerminateReason,
} from './types.js';

const SESSION_ID = /^[A-Za-z0-9_-]{1,128}$/;
const EVENT_TYPES: ReadonlySet<string> = new Set<SessionEventBody['type']>([
  'user',
  'assistant',
  'tool_result',
  'verdict',
  'feedback',
  'compaction',
  'turn_step',
  'terminate',
  'resumed',
]);

function checkId(sessionId: string): void {
  if (!SESSION_ID.test(sessionId))
    throw new HarnessError('session', `invalid session id ${JSON.stringify(sessionId)}`);
}

/** A fenced append whose writer saw another last sequence than the log's is refused. */
function checkFence(sessionId: string, last: number, options: AppendOptions | undefined): void {
  if (options?.after === undefined || options.after === last) return;
  throw new HarnessError(
    'conflict',
    `session ${sessionId} moved on: its last event is ${last}, the writer saw ${options.after} (another run is writing it)`,
  );
}

/** The events from `options.from` on (all of them without it). */
function from(load: SessionLoad, options: LoadOptions | undefined): SessionLoad {
  const first = options?.from ?? 0;
  return first <= 0 ? load : { ...load, events: load.events.filter((event) => event.seq >= first) };
}

/** Parses a log's text: a torn last line and corrupt or non-event lines are skipped and reported. */
export function parseLog(text: string): SessionLoad {
  const lines = text.split('\n');
  const events: SessionEvent[] = [];
  const corruptLines: number[] = [];
  let tornTail = false;
  for (const [index, line] of lines.entries()) {
    if (line === '') continue;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      // Only an unterminated last line is a torn write (a crash mid-append); anything else is corrupt.
      if (index === lines.length - 1) tornTail = true;
      else corruptLines.push(index + 1);
      continue;
    }
    const event = value as Partial<SessionEvent> | null;
    if (typeof event === 'object' && event !== null && EVENT_TYPES.has(event.type as string))
      events.push(event as SessionEvent);
    else corruptLines.push(index + 1);
  }
  return { events, tornTail, corruptLines };
}

/** What a list of runs shows: the state read from the log, `interrupted` when it never ended. */
export function summarize(sessionId: string, load: SessionLoad, live: boolean): SessionSummary {
  const { events } = load;
  const lastPrompt = events.findLastIndex((event) => event.type === 'user');
  const end = events.findLast((event, index) => event.type === 'terminate' && index > lastPrompt);
  const prompt = events.find((event) => event.type === 'user');
  const cwd = events.findLast((event) => event.type === 'user' && event.cwd !== undefined);
  let terminateReason: TerminateReason | undefined;
  if (end?.type === 'terminate') terminateReason = end.reason;
  else if (!live) terminateReason = { kind: 'interrupted' };
  return {
    sessionId,
    state: terminateReason === undefined ? 'running' : 'ended',
    ...(terminateReason ? { terminateReason } : {}),
    ...(prompt?.type === 'user' ? { prompt: prompt.content, startedAt: prompt.at } : {}),
    ...(end ? { endedAt: end.at } : {}),
    ...(cwd?.type === 'user' && cwd.cwd !== undefined ? { cwd: cwd.cwd } : {}),
    ...(load.corruptLines?.length ? { corruptLines: load.corruptLines } : {}),
  };
}

/** A stable UUID-shaped id for the transcript line made from one log event. */
function lineUuid(sessionId: string, seq: number): string {
  const hex = createHash('sha256').update(`${sessionId}:${seq}`).digest('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-a${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

/**
 * Claude Code's transcript, one log event at a time: prompts and feedback become `user` lines with
 * text blocks, replies `assistant` lines with text and `tool_use` blocks, results `user` lines with
 * a `tool_result` block. Other events (verdicts, steps) have no line. Lines chain by `parentUuid`.
 */
export class Transcript {
  readonly #sessionId: string;
  #parent: string | null = null;
  #cwd = process.cwd();

  constructor(sessionId: string, earlier: readonly SessionEvent[] = []) {
    this.#sessionId = sessionId;
    for (const event of earlier) this.line(event);
  }

  /** The JSON line (with its newline) for this event, or '' when it has none. */
  line(event: SessionEvent): string {
    if (event.type === 'user' && event.cwd !== undefined) this.#cwd = event.cwd;
    const message = this.#message(event);
    if (message === undefined) return '';
    const uuid = lineUuid(this.#sessionId, event.seq);
    const line = {
      parentUuid: this.#parent,
      isSidechain: false,
      userType: 'external',
      cwd: this.#cwd,
      sessionId: this.#sessionId,
      version: 'aleph',
      type: message.role,
      message,
      uuid,
      timestamp: new Date(event.at).toISOString(),
    };
    this.#parent = uuid;
    return `${JSON.stringify(line)}\n`;
  }

  #message(event: SessionEvent): { role: 'user' | 'assistant'; [key: string]: unknown } | undefined {
    switch (event.type) {
      case 'user':
      case 'feedback':
        return { role: 'user', content: [{ type: 'text', text: event.content }] };
      case 'assistant': {
        // Claude Code's names and input shapes, as hooks read them (`.name == "Bash"`, `.input.file_path`).
        const calls = event.toolCalls.map((call) => ({
          type: 'tool_use',
          id: call.id,
          name: claudeToolName(call.name),
          input: toClaudeInput(call.name, call.args ?? {}, this.#cwd),
        }));
        return {
          id: `msg_${event.seq}`,
          type: 'message',
          role: 'assistant',
          content: [
            ...(event.content || !calls.length ? [{ type: 'text', text: event.content }] : []),
            ...calls,
          ],
          stop_reason: calls.length ? 'tool_use' : 'end_turn',
          usage: {
            input_tokens: event.usage?.inputTokens ?? 0,
            output_tokens: event.usage?.outputTokens ?? 0,
          },
        };
      }
      case 'tool_result':
        return {
          role: 'user',
          content: [
            {
              type: 'tool_result',
              tool_use_id: event.callId,
              content: event.output,
              is_error: event.isError,
            },
          ],
        };
      default:
        return undefined;
    }
  }
}

/** Keeps events in memory (tests, embedding); writes transcripts only when given a `transcriptDir`. */
export class InMemorySessionStore implements SessionStore {
  readonly #sessions = new Map<
    string,
    { events: SessionEvent[]; transcript: Transcript; live: boolean; tail: Promise<unknown> }
  >();
  readonly #transcriptDir: string | undefined;

  constructor(options: { transcriptDir?: string } = {}) {
    this.#transcriptDir = options.transcriptDir;
  }

  #session(sessionId: string) {
    checkId(sessionId);
    let session = this.#sessions.get(sessionId);
    if (session === undefined) {
      session = { events: [], transcript: new Transcript(sessionId), live: true, tail: Promise.resolve() };
      this.#sessions.set(sessionId, session);
    }
    return session;
  }

  create(): Promise<string> {
    const id = randomUUID();
    this.#session(id);
    return Promise.resolve(id);
  }

  async append(sessionId: string, event: SessionEventBody, options?: AppendOptions): Promise<SessionEvent> {
    const session = this.#session(sessionId);
    checkFence(sessionId, session.events.length - 1, options);
    const stored = { ...event, seq: session.events.length, at: Date.now() } as SessionEvent;
    session.events.push(stored);
    session.live = true;
    const path = this.transcriptPath(sessionId);
    const line = path === undefined ? '' : session.transcript.line(stored);
    if (path !== undefined && line) {
      const write = session.tail.then(() => appendFile(path, line, { mode: 0o600 }));
      session.tail = write.catch(() => undefined);
      await write;
    }
    return stored;
  }

  flush(): Promise<void> {
    return Promise.resolve();
  }

  end(sessionId: string): Promise<void> {
    this.#session(sessionId).live = false;
    return Promise.resolve();
  }

  load(sessionId: string, options?: LoadOptions): Promise<SessionLoad> {
    const events = this.#sessions.get(sessionId)?.events ?? [];
    return Promise.resolve(from({ events: [...events], tornTail: false, corruptLines: [] }, options));
  }

  list(): Promise<string[]> {
    return Promise.resolve([...this.#sessions.keys()]);
  }

  summaries(): Promise<SessionSummary[]> {
    return Promise.resolve(
      [...this.#sessions].map(([id, session]) =>
        summarize(id, { events: session.events, tornTail: false }, session.live),
      ),
    );
  }

  transcriptPath(sessionId: string): string | undefined {
    checkId(sessionId);
    return this.#transcriptDir === undefined ? undefined : join(this.#transcriptDir, `${sessionId}.jsonl`);
  }
}

interface OpenLog {
  handle: FileHandle;
  transcriptHandle: FileHandle;
  transcript: Transcript;
  seq: number;
  /** Writes are chained so lines land in append order. */
  tail: Promise<unknown>;
}

const TRANSCRIPT = '.transcript.jsonl';

class FileSessionStore implements SessionStore {
  readonly #dir: string;
  /** Sessions with a run on them: their handles stay open until `end` (or `close`). */
  readonly #logs = new Map<string, Promise<OpenLog>>();

  constructor(dir: string) {
    this.#dir = dir;
    mkdirSync(dir, { recursive: true, mode: 0o700 }); // logs hold prompts and tool output: private
  }

  #path(sessionId: string): string {
    checkId(sessionId);
    return join(this.#dir, `${sessionId}.jsonl`);
  }

  transcriptPath(sessionId: string): string {
    checkId(sessionId);
    return join(this.#dir, `${sessionId}${TRANSCRIPT}`);
  }

  #log(sessionId: string): Promise<OpenLog> {
    let log = this.#logs.get(sessionId);
    if (log === undefined) {
      log = (async () => {
        const path = this.#path(sessionId);
        const { events, tornTail } = await this.load(sessionId);
        if (tornTail) await cutTornLine(path);
        await cutTornLine(this.transcriptPath(sessionId)); // a hook's jq must never meet half a line
        const transcript = new Transcript(sessionId, events);
        const handle = await open(path, 'a', 0o600);
        const transcriptHandle = await open(this.transcriptPath(sessionId), 'a', 0o600).catch(
          async (error: unknown) => {
            await handle.close();
            throw error;
          },
        );
        return {
          handle,
          transcriptHandle,
          transcript,
          seq: (events.at(-1)?.seq ?? -1) + 1,
          tail: Promise.resolve(),
        };
      })();
      this.#logs.set(sessionId, log);
      log.catch(() => this.#logs.delete(sessionId));
    }
    return log;
  }

  async create(): Promise<string> {
    const id = randomUUID();
    await this.#log(id);
    return id;
  }

  async append(sessionId: string, event: SessionEventBody, options?: AppendOptions): Promise<SessionEvent> {
    const log = await this.#log(sessionId);
    checkFence(sessionId, log.seq - 1, options);
    const stored = { ...event, seq: log.seq, at: Date.now() } as SessionEvent;
    log.seq += 1;
    const line = log.transcript.line(stored);
    // Two files, each line one write(2) to the page cache (no fsync: flush and end do that), after
    // whatever is ahead in the chain. Synchronous: a few µs, where a FileHandle write cost ~50 µs of
    // CPU (a promise, a thread-pool hop) for each file, on every event of every run.
    const write = log.tail.then(() => {
      writeSync(log.handle.fd, `${JSON.stringify(stored)}\n`);
      if (line) writeSync(log.transcriptHandle.fd, line);
    });
    log.tail = write.catch(() => undefined);
    try {
      await write;
    } catch (error) {
      throw new HarnessError(
        'session',
        `could not append to session ${sessionId}: ${(error as Error).message}`,
        { cause: error },
      );
    }
    return stored;
  }

  async flush(sessionId: string): Promise<void> {
    const log = await this.#log(sessionId);
    await log.tail;
    await log.handle.sync();
  }

  /** The run on this session ended: make the log durable and let go of its file handles. */
  async end(sessionId: string): Promise<void> {
    const pending = this.#logs.get(sessionId);
    if (pending === undefined) return;
    this.#logs.delete(sessionId);
    await closeLog(await pending);
  }

  async load(sessionId: string, options?: LoadOptions): Promise<SessionLoad> {
    try {
      return from(parseLog(await readFile(this.#path(sessionId), 'utf8')), options);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT')
        return { events: [], tornTail: false, corruptLines: [] };
      throw new HarnessError('session', `could not read session ${sessionId}: ${(error as Error).message}`, {
        cause: error,
      });
    }
  }

  async list(): Promise<string[]> {
    const entries = await readdir(this.#dir);
    return entries
      .filter((entry) => entry.endsWith('.jsonl') && !entry.endsWith(TRANSCRIPT))
      .map((entry) => entry.slice(0, -'.jsonl'.length))
      .filter((id) => SESSION_ID.test(id));
  }

  /** Every session on disk with its state; one whose log never ended and is not open here is `interrupted`. */
  async summaries(): Promise<SessionSummary[]> {
    const ids = await this.list();
    const summaries: SessionSummary[] = [];
    // A few logs at a time: thousands of sessions must not mean thousands of open files.
    for (let start = 0; start < ids.length; start += 16) {
      const batch = ids.slice(start, start + 16);
      // A log that cannot be read (past the longest string there is: one run's replies reach a GB)
      // is listed as unreadable, not thrown: every other session is still listed, the server starts.
      const loads = await Promise.all(batch.map((id) => this.load(id).catch((error: Error) => error)));
      batch.forEach((id, index) => {
        const load = loads[index] as SessionLoad | Error;
        summaries.push(
          load instanceof Error
            ? {
                sessionId: id,
                state: 'ended',
                terminateReason: { kind: 'interrupted' },
                unreadable: load.message,
              }
            : summarize(id, load, this.#logs.has(id)),
        );
      });
    }
    return summaries;
  }

  async close(): Promise<void> {
    const logs = [...this.#logs.values()];
    this.#logs.clear();
    for (const pending of logs) await closeLog(await pending);
  }
}

/** Cuts an unterminated last line (a crash mid-write) off, so the next append starts on a fresh line. */
async function cutTornLine(path: string): Promise<void> {
  const text = await readFile(path).catch(() => Buffer.alloc(0));
  if (text.length === 0 || text.at(-1) === 0x0a) return;
  const repair = await open(path, 'r+');
  await repair.truncate(text.lastIndexOf(0x0a) + 1).finally(() => repair.close());
}

async function closeLog(log: OpenLog): Promise<void> {
  await log.tail;
  try {
    await log.handle.sync();
  } finally {
    await log.handle.close();
    await log.transcriptHandle.close();
  }
}

export function createFileSessionStore(dir: string): SessionStore {
  return new FileSessionStore(dir);
}
