// The append-only event log of a session. The file store writes JSON lines, fsyncs at each turn
// boundary, and on reload skips (and reports) a last line torn by a crash mid-write.
import { randomUUID } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { open, readdir, readFile, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { HarnessError } from './errors.js';
import type { SessionEvent, SessionEventBody, SessionLoad, SessionStore } from './types.js';

const SESSION_ID = /^[A-Za-z0-9_-]{1,128}$/;

function checkId(sessionId: string): void {
  if (!SESSION_ID.test(sessionId))
    throw new HarnessError('session', `invalid session id ${JSON.stringify(sessionId)}`);
}

export class InMemorySessionStore implements SessionStore {
  readonly #sessions = new Map<string, SessionEvent[]>();

  create(): Promise<string> {
    const id = randomUUID();
    this.#sessions.set(id, []);
    return Promise.resolve(id);
  }

  append(sessionId: string, event: SessionEventBody): Promise<SessionEvent> {
    checkId(sessionId);
    const events = this.#sessions.get(sessionId) ?? [];
    this.#sessions.set(sessionId, events);
    const stored = { ...event, seq: events.length, at: Date.now() } as SessionEvent;
    events.push(stored);
    return Promise.resolve(stored);
  }

  flush(): Promise<void> {
    return Promise.resolve();
  }

  load(sessionId: string): Promise<SessionLoad> {
    return Promise.resolve({ events: [...(this.#sessions.get(sessionId) ?? [])], tornTail: false });
  }

  list(): Promise<string[]> {
    return Promise.resolve([...this.#sessions.keys()]);
  }
}

interface OpenLog {
  handle: FileHandle;
  seq: number;
  /** Writes are chained so lines land in append order. */
  tail: Promise<unknown>;
}

class FileSessionStore implements SessionStore {
  readonly #dir: string;
  readonly #logs = new Map<string, Promise<OpenLog>>();

  constructor(dir: string) {
    this.#dir = dir;
    mkdirSync(dir, { recursive: true });
  }

  #path(sessionId: string): string {
    checkId(sessionId);
    return join(this.#dir, `${sessionId}.jsonl`);
  }

  #log(sessionId: string): Promise<OpenLog> {
    let log = this.#logs.get(sessionId);
    if (log === undefined) {
      log = (async () => {
        const { events, tornTail } = await this.load(sessionId);
        if (tornTail) {
          // Cut the torn line off so the next append starts on a fresh line.
          const text = await readFile(this.#path(sessionId), 'utf8');
          const repair = await open(this.#path(sessionId), 'r+');
          await repair.truncate(Buffer.byteLength(text.slice(0, text.lastIndexOf('\n') + 1)));
          await repair.close();
        }
        const handle = await open(this.#path(sessionId), 'a');
        return { handle, seq: (events.at(-1)?.seq ?? -1) + 1, tail: Promise.resolve() };
      })();
      this.#logs.set(sessionId, log);
    }
    return log;
  }

  async create(): Promise<string> {
    const id = randomUUID();
    await this.#log(id);
    return id;
  }

  async append(sessionId: string, event: SessionEventBody): Promise<SessionEvent> {
    const log = await this.#log(sessionId);
    const stored = { ...event, seq: log.seq, at: Date.now() } as SessionEvent;
    log.seq += 1;
    const write = log.tail.then(() => log.handle.write(`${JSON.stringify(stored)}\n`));
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

  async load(sessionId: string): Promise<SessionLoad> {
    let text: string;
    try {
      text = await readFile(this.#path(sessionId), 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return { events: [], tornTail: false };
      throw new HarnessError('session', `could not read session ${sessionId}: ${(error as Error).message}`, {
        cause: error,
      });
    }
    const lines = text.split('\n');
    const events: SessionEvent[] = [];
    let tornTail = false;
    for (const [index, line] of lines.entries()) {
      if (line === '') continue;
      try {
        events.push(JSON.parse(line) as SessionEvent);
      } catch (error) {
        // Only the last line may be torn (a crash mid-write); anything earlier is corruption.
        if (index >= lines.length - 2 && !text.endsWith(`${line}\n`)) {
          tornTail = true;
          continue;
        }
        throw new HarnessError(
          'session',
          `session ${sessionId} is corrupt at line ${index + 1}: ${(error as Error).message}`,
        );
      }
    }
    return { events, tornTail };
  }

  async list(): Promise<string[]> {
    const entries = await readdir(this.#dir);
    return entries
      .filter((entry) => entry.endsWith('.jsonl'))
      .map((entry) => entry.slice(0, -'.jsonl'.length));
  }

  async close(): Promise<void> {
    const logs = [...this.#logs.values()];
    this.#logs.clear();
    for (const pending of logs) {
      const log = await pending;
      await log.tail;
      await log.handle.close();
    }
  }
}

export function createFileSessionStore(dir: string): SessionStore {
  return new FileSessionStore(dir);
}
