#!/usr/bin/env node
// The `aleph` command: `aleph run "<prompt>"` streams a run's steps, tool calls and verdicts with a
// live status line; `aleph sessions` lists runs and terminals; `aleph attach <id>` puts your
// terminal in raw mode on a gateway pty, replaying its scrollback (detach with Ctrl-]).
import { existsSync, statSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { connectGateway, GatewayError, TERMINAL_ANSWERS, type GatewayClient } from '@aleph/gateway/client';
import type { TerminateReason, TokenUsage, TurnFigures, TurnStep } from '@aleph/harness';
import type { HookOutcome, VerifierVerdict } from '@aleph/verification';
import {
  endLine,
  firstLine,
  hookLines,
  neutralize,
  neutralizeLine,
  replyWriter,
  stepLine,
  toolLine,
} from './cli-format.js';
import { headerLines, type RunHeader } from './run-header.js';
import { invocationDir, packageVersion, readServerInfo, stateDir } from './state.js';
import { AlternateScreenWatch, restoreSequence } from './terminal-restore.js';

/** The fields of the agent.* events this client reads. */
interface AgentEvent {
  readonly runId: string;
  readonly callId?: string;
  readonly calls?: readonly { callId: string; name: string }[];
  readonly end?: string;
  readonly elapsedMs?: number;
  readonly totalTokens?: number;
  readonly step?: TurnStep;
  readonly ok?: boolean;
  readonly name?: string;
  readonly output?: string;
  readonly command?: string;
  readonly ptySessionId?: string;
  readonly verdict?: VerifierVerdict;
  readonly terminateReason?: TerminateReason;
  readonly finalText?: string;
  readonly iterations?: number;
  readonly selfVerdict?: string | null;
  readonly server?: string;
  readonly message?: string;
  /** agent.delta */
  readonly kind?: 'text' | 'tool_args' | 'replace';
  readonly turn?: number;
  readonly text?: string;
  /** agent.done */
  readonly usage?: TokenUsage;
  readonly turns?: readonly TurnFigures[];
  readonly costUsd?: number;
  /** Values the server cut to keep the event bounded (agent.done: a long `finalText`). */
  readonly cut?: readonly { pointer: string; chars?: number }[];
}

const DETACH = 0x1d; // Ctrl-]
/**
 * How long after the user last typed into `aleph attach` the answers of their terminal to the
 * program's queries go on to it. Every viewer's terminal answers (cursor position, device
 * attributes, colours); the program must get one answer, not one per viewer (vim read the second
 * as keys): only the viewer used last answers, as the console does (apps/console terminal-tab.ts).
 */
const ANSWER_FOR_MS = 60_000;
/** Signals that end `aleph attach` (its terminal restored first): SIGINT/SIGQUIT only by `kill`, raw mode sends keys. */
const LEAVING_SIGNALS = ['SIGTERM', 'SIGHUP', 'SIGINT', 'SIGQUIT'] as const;
/** The exit code when the connection to the server drops: how the run or terminal ended is unknown. */
const LOST = 3;
const USAGE = `usage:
  aleph run "<prompt>" [--cwd DIR] [--model MODEL]   run an agent in DIR (default: here) and stream it
  aleph run --continue [ID] "<prompt>"                a follow-up in session ID (default: the latest run here)
  aleph sessions [--running]                          list agent runs and terminals (--running: only running ones)
  aleph attach <terminal id>                          attach to a terminal (detach: Ctrl-])
  aleph --version                                     print this version
connection: --url/--token, else ALEPH_URL/ALEPH_TOKEN, else the running server's state file`;

/** An answer of one line, with its exit code: what a user can fix, never a stack trace. */
class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode = 2,
  ) {
    super(message);
  }
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function connect(values: {
  url?: string | undefined;
  token?: string | undefined;
}): Promise<GatewayClient> {
  const info = readServerInfo(stateDir());
  const fromStateFile = values.url === undefined && process.env['ALEPH_URL'] === undefined;
  const url = values.url ?? process.env['ALEPH_URL'] ?? info?.url;
  const token = values.token ?? process.env['ALEPH_TOKEN'] ?? info?.token;
  if (url === undefined || token === undefined) {
    throw new CliError(
      `no server to connect to: none has written ${join(stateDir(), 'server.json')} (a server started with another ALEPH_STATE_DIR writes it there); start one with \`pnpm start\`, or pass --url and --token`,
      1,
    );
  }
  try {
    return await connectGateway(url, { token });
  } catch (error) {
    const refused = (error as NodeJS.ErrnoException).code === 'ECONNREFUSED';
    if (refused && fromStateFile && info !== undefined && !processAlive(info.pid))
      throw new CliError(
        `no server running (the last one, pid ${info.pid}, has exited): start one with \`pnpm start\``,
        1,
      );
    if ((error as { code?: string }).code === 'unauthorized')
      throw new CliError(
        `the server at ${url} refused the token: pass the one it printed (--token, ALEPH_TOKEN), or leave both out to use the running server's`,
        1,
      );
    throw new CliError(`cannot reach the server at ${url}: ${(error as Error).message}`, 1);
  }
}

/** The run's directory, from where the user ran the command: must exist and be a directory. */
function runDirectory(given: string | undefined): string {
  const cwd = resolve(invocationDir(), given ?? '.');
  if (!existsSync(cwd)) throw new CliError(`aleph run: --cwd ${cwd} does not exist`);
  if (!statSync(cwd).isDirectory()) throw new CliError(`aleph run: --cwd ${cwd} is not a directory`);
  return cwd;
}

async function run(
  client: GatewayClient,
  prompt: string,
  options: { cwd?: string | undefined; model?: string | undefined; sessionId?: string | undefined },
): Promise<number> {
  const tty = process.stdout.isTTY === true;
  const started = Date.now();
  let turn = 1;
  let tools = 0;
  const calls = { ok: 0, failed: 0 }; // this turn's results
  const running = new Map<string, string>(); // callId → tool name, while the call runs
  let status = 'starting';
  const activity = (): string =>
    running.size === 0 ? status : `running ${[...new Set(running.values())].join(', ')}`;
  const statusLine = (): void => {
    if (!tty || live !== undefined) return;
    process.stdout.write(
      `\r\x1b[K● turn ${turn} · ${neutralizeLine(activity())} · ${tools} tool call(s) · ${((Date.now() - started) / 1000).toFixed(1)}s`,
    );
  };
  // The reply as it is written: printed as it comes (neutralised), the status line held back meanwhile.
  let live: { turn: number; text: string } | undefined;
  let streamedText: string | undefined; // the last turn's reply as it was shown
  const endLive = (): void => {
    if (live === undefined) return;
    if (!live.text.endsWith('\n')) process.stdout.write('\n');
    streamedText = live.text;
    live = undefined;
  };
  const print = (line: string): void => {
    endLive();
    if (tty) process.stdout.write('\r\x1b[K');
    process.stdout.write(`${neutralize(line)}\n`);
    statusLine();
  };
  let replyText = replyWriter();
  const write = (turnOf: number, text: string): void => {
    if (live === undefined) {
      if (tty) process.stdout.write('\r\x1b[K');
      live = { turn: turnOf, text: '' };
      replyText = replyWriter();
    }
    live.text += text;
    process.stdout.write(replyText(text));
  };
  const ticker = tty ? setInterval(statusLine, 250) : undefined;
  let finish: (code: number) => void = () => {};
  const done = new Promise<number>((resolve) => (finish = resolve));
  const handle = (topic: string, event: AgentEvent): void => {
    switch (topic) {
      case 'agent.delta':
        if (event.kind === 'text') write(event.turn ?? turn, event.text ?? '');
        else if (event.kind === 'replace') {
          print('  ✎ the reply was rewritten before it was kept:');
          write(event.turn ?? turn, event.text ?? '');
        }
        break;
      case 'agent.act':
        for (const call of event.calls ?? []) running.set(call.callId, call.name);
        statusLine();
        break;
      case 'agent.step': {
        const step = event.step!;
        endLive();
        if (step.error !== undefined) streamedText = undefined; // what was shown was not kept
        turn = step.iteration + 1;
        running.clear();
        status = step.vetoed ? 'vetoed, thinking again' : 'thinking';
        print(stepLine(step, calls));
        calls.ok = calls.failed = 0;
        break;
      }
      case 'agent.tool':
        tools += 1;
        if (event.ok === true) calls.ok += 1;
        else calls.failed += 1;
        if (event.callId !== undefined) running.delete(event.callId);
        print(
          toolLine({
            name: event.name ?? '?',
            ok: event.ok === true,
            output: event.output ?? '',
            end: event.end,
          }),
        );
        break;
      case 'agent.shell':
        print(`  $ ${neutralizeLine(event.command ?? '')}   (watch: aleph attach ${event.ptySessionId})`);
        break;
      case 'agent.setup':
        for (const line of headerLines(event as unknown as RunHeader)) print(line);
        break;
      case 'agent.mcp':
        print(`  ⚠ mcp ${event.server ?? '?'}: ${firstLine(event.message ?? '', 300)}`);
        break;
      case 'agent.hook':
        for (const line of hookLines(event as unknown as HookOutcome)) print(line);
        break;
      case 'agent.verdict': {
        const verdict = event.verdict!;
        const reason = verdict.kind === 'continue' ? '' : verdict.reason;
        print(
          `  ⚑ ${verdict.kind} by ${(verdict.kind !== 'continue' && verdict.source) || 'verifier'}: ${firstLine(reason)}`,
        );
        break;
      }
      case 'agent.done': {
        const reason = event.terminateReason!;
        endLive();
        // The final text once: not again when it was shown as it was written (a long one comes cut to
        // its beginning: shown when what was written begins with it).
        const cutTo = event.cut?.find((cut) => cut.pointer === '/finalText')?.chars;
        const shown =
          event.finalText !== undefined &&
          (event.finalText === streamedText ||
            (cutTo !== undefined &&
              streamedText?.length === cutTo &&
              streamedText.startsWith(event.finalText)));
        if (event.finalText && !shown) {
          const more = cutTo === undefined ? '' : `… (${cutTo - event.finalText.length} more characters)`;
          print(`\n${replyWriter()(event.finalText + more).replace(/\n?$/, '\n')}`);
        }
        print(
          `${shown ? '\n' : ''}${endLine({ ...event, terminateReason: reason, iterations: event.iterations ?? 0 })}`,
        );
        finish(reason.kind === 'model_stop' ? 0 : 1);
        break;
      }
      default:
        break;
    }
  };
  // Events can arrive before agent.run's answer (a run that ends in milliseconds): they wait here
  // until the run id is known, then go through in order. Nothing is dropped.
  let runId: string | undefined = undefined; // known once agent.run answers
  const early: [string, AgentEvent][] = [];
  client.onEvent((topic, raw) => {
    const event = raw as AgentEvent;
    if (runId === undefined) early.push([topic, event]);
    else if (event.runId === runId) handle(topic, event);
  });
  await client.subscribe(['agent.*']);
  const reply = await client
    .request<{ runId: string; sessionId: string; sandbox?: string }>('agent.run', {
      prompt,
      ...(options.cwd ? { cwd: options.cwd } : {}),
      ...(options.model ? { model: options.model } : {}),
      ...(options.sessionId ? { sessionId: options.sessionId } : {}),
    })
    .catch((error: unknown) => {
      if (!(error instanceof GatewayError && error.code === 'unknown_session')) throw error;
      throw new CliError(
        `aleph run --continue: no agent session ${options.sessionId} (\`aleph sessions\` lists them)`,
      );
    });
  runId = reply.runId;
  status = 'thinking';
  print(`run ${runId} (session ${reply.sessionId}; sandbox: ${reply.sandbox ?? 'unknown'})`);
  for (const [topic, event] of early.splice(0)) if (event.runId === runId) handle(topic, event);
  const onInterrupt = (): void => {
    status = 'cancelling';
    void client.request('agent.cancel', { runId }).catch(() => {});
  };
  process.once('SIGINT', onInterrupt);
  // A dropped connection is not an end: the run may go on (or not) on a server we cannot see.
  const code = await Promise.race([done, client.closed.then(() => undefined)]);
  process.off('SIGINT', onInterrupt);
  if (ticker) clearInterval(ticker);
  if (tty) process.stdout.write('\r\x1b[K');
  if (code !== undefined) return code;
  console.error(
    `aleph: connection to the server lost; run ${runId} state unknown — \`aleph sessions\` after a restart shows it`,
  );
  return LOST;
}

/**
 * A terminal's command, short: an agent's `shell` call runs `/bin/sh -c <command>`, sandboxed listed
 * as `[bubblewrap] /bin/sh -c <command>` (by an older server, as the tail of bwrap's whole argv,
 * `… -- /bin/sh -c <command>`): show `$ <command>`.
 */
function shortCommand(command: string): string {
  const backend = /^\[[\w-]+\] (?=\/bin\/sh -c )/.exec(command)?.[0].length;
  const tail = command.indexOf(' -- /bin/sh -c ');
  const wrapped = backend !== undefined || tail >= 0;
  const at = backend ?? (tail >= 0 ? tail + 4 : command.startsWith('/bin/sh -c ') ? 0 : -1);
  const shown = at < 0 ? command : `$ ${command.slice(at + '/bin/sh -c '.length)}`;
  return neutralize(firstLine(shown, 120)) + (wrapped ? '  (sandboxed)' : '');
}

function terminalState(
  exit: { exitCode: number | null; signal: string | null; reason: string } | null,
): string {
  if (exit === null) return 'running';
  const how = exit.signal !== null ? `killed by ${exit.signal}` : `exit code ${exit.exitCode ?? '?'}`;
  return `ended (${exit.reason === 'exited' ? how : `${exit.reason}, ${how}`})`;
}

async function sessions(client: GatewayClient, onlyRunning: boolean): Promise<number> {
  const runs = await client.request<
    {
      runId: string;
      sessionId: string;
      state: string;
      prompt: string;
      cwd: string;
      terminateReason?: { kind: string };
    }[]
  >('agent.list', {});
  const terminals = await client.list(onlyRunning ? { state: 'running' } : {});
  const shown = onlyRunning ? runs.filter((r) => r.state === 'running') : runs;
  console.log(`agent runs (${shown.length}${onlyRunning ? ' running' : ''})`);
  for (const r of shown)
    console.log(
      neutralizeLine(
        `  ${r.runId}  ${r.state}${r.terminateReason ? ` (${r.terminateReason.kind})` : ''}  session ${r.sessionId}  ${r.cwd}  ${firstLine(r.prompt, 60)}`,
      ),
    );
  console.log(`terminals (${terminals.length}${onlyRunning ? ' running' : ''})`);
  for (const t of terminals)
    console.log(
      neutralizeLine(
        `  ${t.sessionId}  pid ${t.pid}  ${t.cols}x${t.rows}  ${terminalState(t.exit)}  ${shortCommand(t.command)}`,
      ),
    );
  return 0;
}

async function attach(client: GatewayClient, sessionId: string): Promise<number> {
  if (!(await client.list()).some((session) => session.sessionId === sessionId)) {
    console.error(`aleph: no terminal ${sessionId} (see \`aleph sessions\`)`);
    return 1;
  }
  await client.subscribe(['pty.*'], [sessionId]);
  /** How attach ended: its exit code and the line that says why (written after the restore). */
  type Leave = { code: number; line: string };
  type End = { exitCode: number | null; reason: string };
  const endLeave = (end: End): Leave => ({
    code: end.exitCode ?? 1,
    line: `terminal ended: ${end.reason}${end.exitCode !== null ? `, exit code ${end.exitCode}` : ''}`,
  });
  // The end comes as a `pty.exit` event, or, for a session that ended before this subscription
  // (already ended, or between list() and subscribe), in pty.follow's answer: then after its tail.
  let ended!: (leave: Leave) => void;
  const exit = new Promise<Leave>((resolve) => (ended = resolve));
  client.onExit((event) => {
    if (event.sessionId === sessionId) ended(endLeave(event));
  });
  const onSignal = new Map<NodeJS.Signals, () => void>(); // from here a signal ends attach as a detach
  const signalled = new Promise<Leave>((resolve) => {
    for (const signal of LEAVING_SIGNALS) {
      onSignal.set(signal, () => resolve({ code: 128 + osConstants.signals[signal], line: signal }));
      process.once(signal, onSignal.get(signal)!);
    }
  });
  // Every byte written to the user's terminal goes through `screen`: at the end, it says whether
  // the program left the terminal in its alternate screen.
  // Once a leave is decided nothing more is drawn: the restore and the line are the last bytes.
  const screen = new AlternateScreenWatch();
  let leaving = false;
  const show = (data: Uint8Array | string): void => {
    if (leaving) return;
    screen.feed(data);
    process.stdout.write(data);
  };
  // Said before the screen is drawn, which then repaints it: never written into the program's screen.
  process.stderr.write(`[aleph: attached to ${sessionId}; detach with Ctrl-]]\r\n`);
  // The screen as it is now (pty.snapshot), then the output after it — not the raw scrollback, whose
  // first MiB may be a full-screen program's leftovers. A server without snapshots: the scrollback.
  let from = 0;
  try {
    const snapshot = await client.call('pty.snapshot', { sessionId });
    show(`\x1bc${snapshot.data}`); // a reset, then the screen
    from = snapshot.offset;
  } catch {
    // method_not_found (an older server), or no screen to give: follow from the oldest byte kept
  }
  // However attach ends (even by a crash), the user's terminal is given back in its own modes.
  let restored = false;
  const restore = (): void => {
    if (restored) return;
    restored = true;
    if (process.stdin.isTTY) process.stdin.setRawMode(false);
    if (process.stdout.isTTY) process.stdout.write(restoreSequence(screen.mode));
  };
  process.once('exit', restore);
  // A terminal that hung up (SIGHUP) cannot be written to: nothing to restore, nothing to say.
  const ignore = (): void => {};
  process.stdout.on('error', ignore);
  process.stderr.on('error', ignore);
  let shownTo = from;
  let endAt: { offset: number; leave: Leave } | undefined;
  const followed = await client.follow(sessionId, from, (data, offset) => {
    show(data);
    shownTo = offset + data.length;
    if (endAt !== undefined && shownTo >= endAt.offset) ended(endAt.leave);
  });
  if (followed.exit !== null) {
    endAt = { offset: followed.end, leave: endLeave(followed.exit) };
    if (Math.max(shownTo, followed.offset) >= followed.end) ended(endAt.leave);
  }
  const resize = (): void => {
    if (process.stdout.columns && process.stdout.rows)
      void client.resize(sessionId, process.stdout.columns, process.stdout.rows).catch(() => {});
  };
  resize();
  process.stdout.on('resize', resize);
  let typedAt = Date.now(); // attaching sized it
  let usedAt = -Infinity; // when the user last typed here (not their terminal answering a query)
  // Keys go without an answer each (binary frames); a refusal comes to onInputError. A key typed
  // as the connection drops is lost with it: `lost` below ends the attach.
  client.onInputError((error) => process.stderr.write(`\r\n[aleph: ${neutralizeLine(error.message)}]\r\n`));
  const send = (keys: Buffer): void => {
    if (client.socket.readyState === client.socket.OPEN) client.type(sessionId, keys);
  };
  const detached = new Promise<Leave>((resolve) => {
    if (process.stdin.isTTY) process.stdin.setRawMode(true);
    process.stdin.on('data', (data: Buffer) => {
      const at = data.indexOf(DETACH);
      if (at >= 0) {
        if (at > 0) send(data.subarray(0, at));
        resolve({ code: 0, line: 'detached' });
        return;
      }
      if (data.toString('latin1').replace(TERMINAL_ANSWERS, '') === '') {
        // Only the terminal's answers: sent while this is the viewer used last, never as typing.
        if (Date.now() - usedAt < ANSWER_FOR_MS) send(data);
        return;
      }
      usedAt = Date.now();
      // Typing after a pause makes this the latest viewer: the pty takes its size back (as the
      // console does; tmux's window-size latest). Sent first, so the program reads the keys at it.
      if (Date.now() - typedAt > 1000) resize();
      typedAt = Date.now();
      send(data);
    });
  });
  const lost = client.closed.then(() => ({ code: LOST, line: 'connection to the server lost' }));
  const leave = await Promise.race([exit, detached, lost, signalled]);
  leaving = true;
  followed.stop();
  for (const [signal, listener] of onSignal) process.off(signal, listener);
  process.stdout.off('resize', resize);
  restore();
  process.stderr.write(`\r\n[aleph: ${neutralizeLine(leave.line)}]\r\n`);
  process.stdin.pause();
  return leave.code;
}

/** The session of the latest run in `cwd`, for `aleph run --continue` without an id. */
async function latestSession(client: GatewayClient, cwd: string): Promise<string> {
  const runs = await client.request<{ sessionId: string; cwd: string; startedAt: number }[]>(
    'agent.list',
    {},
  );
  const latest = runs
    .filter((run) => run.cwd === cwd)
    .sort((a, b) => a.startedAt - b.startedAt)
    .at(-1);
  if (latest === undefined)
    throw new CliError(
      `aleph run --continue: no earlier run in ${cwd} (\`aleph sessions\` lists them; pass an id)`,
    );
  return latest.sessionId;
}

async function main(): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      allowPositionals: true,
      options: {
        url: { type: 'string' },
        token: { type: 'string' },
        cwd: { type: 'string' },
        model: { type: 'string' },
        continue: { type: 'boolean' },
        running: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
        version: { type: 'boolean', short: 'v' },
      },
    });
  } catch (error) {
    throw new CliError(`${(error as Error).message}\n${USAGE}`);
  }
  const { values, positionals } = parsed;
  if (values.version) {
    console.log(packageVersion());
    return 0;
  }
  // `aleph run --continue [ID] "<prompt>"`: with two arguments the first is the session.
  const continued = values.continue === true && positionals[0] === 'run';
  const named = continued && positionals.length >= 3 ? positionals.splice(1, 1)[0] : undefined;
  const [command, argument] = positionals;
  if (values.help || command === undefined) {
    console.log(USAGE);
    return command === undefined && !values.help ? 2 : 0;
  }
  if ((command === 'run' || command === 'attach') && argument === undefined) {
    console.error(
      `aleph ${command}: missing ${command === 'run' ? 'the prompt' : 'the terminal id'}\n${USAGE}`,
    );
    return 2;
  }
  if (!['run', 'sessions', 'attach'].includes(command)) {
    console.error(`aleph: unknown command "${command}"\n${USAGE}`);
    return 2;
  }
  if (command === 'run' && argument!.trim() === '') throw new CliError('aleph run: the prompt is empty');
  const cwd = command === 'run' ? runDirectory(values.cwd) : undefined;
  const client = await connect(values);
  try {
    if (command === 'run' && continued) {
      const sessionId = named ?? (await latestSession(client, cwd!));
      // A follow-up works where its session did unless --cwd says otherwise.
      const where = values.cwd === undefined ? undefined : cwd;
      return await run(client, argument!, { cwd: where, model: values.model, sessionId });
    }
    if (command === 'run') return await run(client, argument!, { cwd, model: values.model });
    if (command === 'sessions') return await sessions(client, values.running === true);
    return await attach(client, argument!);
  } finally {
    await client.close();
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    const message = (error as Error).message ?? String(error);
    console.error(neutralize(message.startsWith('aleph') ? message : `aleph: ${message}`));
    process.exit(error instanceof CliError ? error.exitCode : 1);
  },
);
