// MCP over a child's stdin/stdout (newline-delimited JSON-RPC), in place of the SDK's
// StdioClientTransport for two reasons: the server runs in a process group of its own, so closing
// it ends what it started too (an `npx` wrapper's node, a shell's children); and a message is read
// in linear time up to a cap (the SDK's buffer re-copies itself per chunk). Invariant: close()
// resolves only after the child exited or its group was sent KILL; a line that is not JSON-RPC is
// reported through onerror and skipped, never fatal. The command's `release` runs exactly once,
// when the child is gone or could not start (or at close() when it was never started).
import { spawn, type ChildProcess } from 'node:child_process';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { JSONRPCMessageSchema, type JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { MAX_MESSAGE_BYTES } from '../tool-result.js';

const STDERR_TAIL = 4096;
const GRACE_MS = 1000;

export interface StdioCommand {
  readonly file: string;
  readonly args: readonly string[];
  readonly cwd?: string | undefined;
  readonly env: Readonly<Record<string, string>>;
  /** What confined the command gives back once it is gone (a sandbox's stand-ins). */
  release?(): void;
}

export class StdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;

  readonly #command: StdioCommand;
  #child: ChildProcess | undefined;
  #pid: number | undefined; // kept after exit: the group may outlive its leader
  #closing = false;
  #chunks: Buffer[] = [];
  #buffered = 0;
  #stderr = '';
  #exited: Promise<void> = Promise.resolve();

  #released = false;

  constructor(command: StdioCommand) {
    this.#command = command;
  }

  #release(): void {
    if (this.#released) return;
    this.#released = true;
    this.#command.release?.();
  }

  /** The last few KiB the server wrote on stderr: what a crash is explained with. */
  get stderrTail(): string {
    return this.#stderr;
  }

  get pid(): number | undefined {
    return this.#child?.pid;
  }

  start(): Promise<void> {
    const { file, args, cwd, env } = this.#command;
    return new Promise((resolve, reject) => {
      const child = spawn(file, [...args], {
        cwd,
        env,
        stdio: ['pipe', 'pipe', 'pipe'],
        detached: process.platform !== 'win32', // a group of its own, killed whole
        windowsHide: true,
      });
      this.#child = child;
      this.#pid = child.pid;
      this.#exited = new Promise((done) => child.once('close', () => done()));
      child.once('error', (error) => {
        if (child.pid === undefined) this.#release(); // never started: no close follows
        reject(error);
        this.onerror?.(error);
      });
      child.once('spawn', () => resolve());
      child.once('close', (code, signal) => {
        this.#release();
        if (this.#child === child) this.#child = undefined;
        if (code !== 0 || signal !== null)
          this.onerror?.(new Error(`exited with ${signal ?? `code ${code}`}${this.#stderrSuffix()}`));
        this.onclose?.();
      });
      child.stdin?.on('error', (error) => this.onerror?.(error));
      child.stdout?.on('data', (chunk: Buffer) => this.#read(chunk));
      child.stderr?.on('data', (chunk: Buffer) => {
        this.#stderr = (this.#stderr + chunk.toString('utf8')).slice(-STDERR_TAIL);
      });
    });
  }

  #stderrSuffix(): string {
    const last = this.#stderr.trim().split('\n').slice(-3).join(' / ');
    return last === '' ? '' : `; stderr: ${last.slice(0, 500)}`;
  }

  #read(chunk: Buffer): void {
    let start = 0;
    for (let newline = chunk.indexOf(10); newline !== -1; newline = chunk.indexOf(10, start)) {
      this.#chunks.push(chunk.subarray(start, newline));
      const line = Buffer.concat(this.#chunks).toString('utf8');
      this.#chunks = [];
      this.#buffered = 0;
      start = newline + 1;
      this.#line(line);
    }
    if (start < chunk.length) {
      this.#chunks.push(chunk.subarray(start));
      this.#buffered += chunk.length - start;
      if (this.#buffered > MAX_MESSAGE_BYTES) {
        this.#chunks = [];
        this.#buffered = 0;
        this.onerror?.(
          new Error(`sent a message over ${MAX_MESSAGE_BYTES / 1024 / 1024} MiB; connection closed`),
        );
        void this.close();
      }
    }
  }

  #line(line: string): void {
    const text = line.endsWith('\r') ? line.slice(0, -1) : line;
    if (text.trim() === '') return;
    let message: JSONRPCMessage;
    try {
      message = JSONRPCMessageSchema.parse(JSON.parse(text));
    } catch {
      this.onerror?.(
        new Error(`wrote a line on stdout that is not JSON-RPC: ${JSON.stringify(text.slice(0, 80))}`),
      );
      return;
    }
    this.onmessage?.(message);
  }

  send(message: JSONRPCMessage): Promise<void> {
    const stdin = this.#child?.stdin;
    if (stdin === undefined || stdin === null || stdin.destroyed)
      return Promise.reject(new Error('not connected'));
    return new Promise((resolve) => {
      if (stdin.write(`${JSON.stringify(message)}\n`)) resolve();
      else stdin.once('drain', () => resolve());
    });
  }

  #signalGroup(signal: NodeJS.Signals): void {
    const pid = this.#pid;
    if (pid === undefined) return;
    try {
      if (process.platform === 'win32') this.#child?.kill(signal);
      else process.kill(-pid, signal);
    } catch {
      // already gone
    }
  }

  async close(): Promise<void> {
    if (this.#pid === undefined) this.#release(); // never started
    if (this.#pid === undefined || this.#closing) return;
    this.#closing = true;
    const within = (ms: number): Promise<boolean> =>
      Promise.race([
        this.#exited.then(() => true),
        new Promise<boolean>((resolve) => setTimeout(() => resolve(false), ms).unref()),
      ]);
    this.#child?.stdin?.end();
    if (!(await within(GRACE_MS))) {
      this.#signalGroup('SIGTERM');
      if (!(await within(GRACE_MS))) {
        this.#signalGroup('SIGKILL');
        await within(GRACE_MS);
      }
    }
    this.#signalGroup('SIGKILL'); // whatever it left running in its group
  }
}
