// One run's timeline, drawn incrementally from its session log: each event is drawn once, by its
// sequence number, and a tool call's item is updated in place when its result comes — so a fold
// the user opened or closed stays as they left it while the run goes on. Text from the model is
// markdown, rendered by `marked` and sanitised by DOMPurify (no script, no handler, no remote
// image: the page's CSP stays as strict); long text is folded behind "Show more"; edits are diffs.
// An event the server sent cut (`cut`: too long to send whole) says so where it was cut, and
// "Show all" reads it whole (agent.historyEvent) and draws it again in place.
import { diffLines } from 'diff';
import DOMPurify from 'dompurify';
import { marked } from 'marked';
import { brief, h } from './dom.js';

export type Verdict =
  | { kind: 'continue' }
  | { kind: 'veto'; reason: string; feedback: string; source?: string }
  | { kind: 'halt'; reason: string; source?: string };
export type TerminateReason =
  | { kind: 'model_stop' | 'max_iterations' | 'cancelled' | 'interrupted' }
  | { kind: 'halted'; by: string; reason: string }
  | { kind: 'consecutive_failures'; count: number; lastError?: string }
  | { kind: 'error'; error: { kind: string; message?: string; elapsedMs?: number } };
/** Where the server cut a value of an event (its JSON pointer) and its whole length. */
export type Cut = { pointer: string; chars: number } | { pointer: string; items: number };
export type LogEvent = { seq: number; at?: number; cut?: Cut[] } & (
  | { type: 'user'; content: string }
  | { type: 'feedback'; content: string }
  | {
      type: 'assistant';
      content: string;
      toolCalls: { id: string; name: string; args: unknown }[];
      usage?: { inputTokens: number; outputTokens: number };
    }
  | { type: 'tool_result'; callId: string; name: string; output: string; isError: boolean }
  | { type: 'verdict'; verdict: Verdict }
  | { type: 'compaction'; mode: string; fromTokens: number; toTokens: number }
  | {
      type: 'turn_step';
      step: {
        iteration: number;
        state: string;
        executed: number;
        vetoed: boolean;
        error?: string;
        splitChild?: string;
      };
    }
  | { type: 'terminate'; reason: TerminateReason }
);
/** What agent.done adds to the log's end (cost only where a provider reports it). */
export interface RunTotals {
  iterations?: number | undefined;
  totalTokens?: number | undefined;
  elapsedMs?: number | undefined;
  costUsd?: number | undefined;
}

/** A piece of a reply being written (`agent.delta`); `seq` counts from 0 in each turn of a run. */
export interface ReplyDelta {
  turn: number;
  seq: number;
  kind: string;
  text: string;
}
/** What agent.list keeps of a running run's reply: its text up to `seq` (the tail, if `chars` is more). */
export interface ReplySoFar {
  turn: number;
  seq: number;
  text: string;
  chars?: number;
}

/**
 * The reply `stream` is (its text up to its `seq`) with `piece` after it. The first piece after a
 * seed that skips seqs may be pieces merged for a slow reader (with the last one's seq only), some
 * of them in the seed already: what it begins with that the seed ends with is not added twice.
 */
function followedBy(stream: { text: string; seq: number; seeded: boolean }, piece: ReplyDelta): string {
  if (piece.kind === 'replace') return piece.text;
  if (!stream.seeded || piece.seq === stream.seq + 1) return stream.text + piece.text;
  return stream.text + piece.text.slice(overlap(stream.text, piece.text));
}

/** The length of the longest end of `text` that `next` begins with (a prefix function: linear). */
function overlap(text: string, next: string): number {
  const joined = `${next}\u0000${text.slice(-next.length)}`;
  const longest = new Int32Array(joined.length);
  for (let index = 1; index < joined.length; index += 1) {
    let length = longest[index - 1]!;
    while (length > 0 && joined[index] !== joined[length]) length = longest[length - 1]!;
    longest[index] = joined[index] === joined[length] ? length + 1 : length;
  }
  return Math.min(longest[joined.length - 1]!, next.length);
}

/** Text longer than this (characters or lines) is folded behind "Show more". */
const FOLD_CHARS = 1200;
const FOLD_LINES = 16;
const HARNESS_PROVIDER_FAILED = '[harness] the provider call failed: ';

export const plural = (count: number, word: string): string => `${count} ${word}${count === 1 ? '' : 's'}`;

export function describeEnd(reason: TerminateReason): string {
  switch (reason.kind) {
    case 'model_stop':
      return 'finished: the model stopped';
    case 'max_iterations':
      return 'stopped: iteration limit reached';
    case 'cancelled':
      return 'cancelled';
    case 'interrupted':
      return 'interrupted: the server stopped during the run';
    case 'halted':
      return `halted by ${reason.by}: ${reason.reason}`;
    case 'consecutive_failures':
      return `stopped: ${plural(reason.count, 'turn')} in a row failed${reason.lastError ? `; last: ${brief(reason.lastError.split('\n')[0], 200)}` : ''}`;
    case 'error':
      return `error (${reason.error.kind})${reason.error.message ? `: ${reason.error.message}` : ''}`;
  }
}

/**
 * A turn in the words `aleph run` prints (apps/server cli-format.ts `stepLine`): `Turn 2: 3 tool
 * calls (1 failed), vetoed`, or why the provider failed. `calls` are the turn's results: the
 * step's own `executed` counts only the calls that succeeded.
 */
export function describeStep(
  step: Extract<LogEvent, { type: 'turn_step' }>['step'],
  calls: { ok: number; failed: number },
): string {
  if (step.error !== undefined)
    return `Turn ${step.iteration}: the provider failed: ${brief(step.error, 200)}`;
  const parts = [
    `${plural(calls.ok + calls.failed, 'tool call')}${calls.failed > 0 ? ` (${calls.failed} failed)` : ''}`,
  ];
  if (step.vetoed) parts.push('vetoed');
  if (step.splitChild !== undefined) parts.push(`sub-agent ${step.splitChild}`);
  return `Turn ${step.iteration}: ${parts.join(', ')}`;
}

/** `3 turns · 12.4 s · 1,234 tokens · $0.0123`: what the run cost, as far as it is known. */
export function describeTotals(totals: RunTotals): string {
  const parts: string[] = [];
  if (totals.iterations !== undefined) parts.push(plural(totals.iterations, 'turn'));
  if (totals.elapsedMs !== undefined)
    parts.push(
      totals.elapsedMs >= 60_000
        ? `${Math.floor(totals.elapsedMs / 60_000)} min ${Math.round((totals.elapsedMs % 60_000) / 1000)} s`
        : `${(totals.elapsedMs / 1000).toFixed(1)} s`,
    );
  if (totals.totalTokens !== undefined) parts.push(`${totals.totalTokens.toLocaleString('en')} tokens`);
  if (totals.costUsd !== undefined) parts.push(`$${totals.costUsd.toFixed(4)}`);
  return parts.join(' · ');
}

/**
 * The model's text with its control characters shown, not hidden: C0 and DEL as their Unicode
 * pictures (ESC as ␛), C1 as �; tab and line ends kept. What a reply hides cannot then be copied
 * from the page unseen.
 */
export function shownText(text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]/g, (c) => {
    const code = c.charCodeAt(0);
    return code < 0x20 ? String.fromCharCode(0x2400 + code) : code === 0x7f ? '\u2421' : '\ufffd';
  });
}

/**
 * Markdown is rendered in pieces of about this many characters, each cut at a line's end outside a
 * fenced code block (at a blank line where there is one): marked's inline parsing takes time in the
 * square of a paragraph's length (60 KB of `_a` held the page 3 s; 1 MB, minutes).
 */
const MARKDOWN_PIECE_CHARS = 8_000;
/** A reply longer than this is shown as text, not markdown. */
export const MARKDOWN_MAX_CHARS = 250_000;
const FENCE = /^ {0,3}(```|~~~)/;

/** `text` in pieces (see MARKDOWN_PIECE_CHARS); `plain`: a line past a piece outside a fence. */
function markdownPieces(text: string): { text: string; plain: boolean }[] {
  const pieces: { text: string; plain: boolean }[] = [];
  let lines: string[] = [];
  let size = 0;
  let fenced = false;
  let blank = -1; // where the last blank line outside a fence ends, in `lines`
  let plain = false;
  const cut = (at: number): void => {
    pieces.push({ text: lines.slice(0, at).join('\n'), plain });
    lines = lines.slice(at);
    size = lines.reduce((sum, line) => sum + line.length + 1, 0);
    plain = lines.some((line) => line.length > MARKDOWN_PIECE_CHARS);
    blank = -1;
  };
  for (const line of text.split('\n')) {
    if (FENCE.test(line)) fenced = !fenced;
    else if (!fenced && line.length > MARKDOWN_PIECE_CHARS) plain = true;
    lines.push(line);
    size += line.length + 1;
    if (!fenced && line.trim() === '') blank = lines.length;
    if (size >= MARKDOWN_PIECE_CHARS && !fenced) cut(blank > 0 ? blank : lines.length);
  }
  if (lines.length > 0) pieces.push({ text: lines.join('\n'), plain });
  return pieces;
}

/**
 * Markdown as sanitised DOM: no script, handler, style, form or image; links open elsewhere. A piece
 * marked cannot render (past its nesting: 2,000 `>` overflow its stack) or holding a line too long
 * to parse, and a reply too long, are shown as text.
 */
export function renderMarkdown(text: string): DocumentFragment {
  const fragment = document.createDocumentFragment();
  const asText = (piece: string): HTMLElement => h('p', { class: 'as-text' }, shownText(piece));
  if (text.length > MARKDOWN_MAX_CHARS) {
    fragment.append(asText(text));
    return fragment;
  }
  for (const piece of markdownPieces(text)) {
    if (piece.plain) {
      fragment.append(asText(piece.text));
      continue;
    }
    let html: string;
    try {
      html = marked.parse(shownText(piece.text), { async: false, gfm: true, breaks: true });
    } catch {
      fragment.append(asText(piece.text));
      continue;
    }
    fragment.append(
      DOMPurify.sanitize(html, {
        RETURN_DOM_FRAGMENT: true,
        FORBID_TAGS: ['img', 'style', 'form', 'input', 'button', 'textarea', 'select', 'svg', 'math'],
        FORBID_ATTR: ['style'],
      }),
    );
  }
  for (const link of fragment.querySelectorAll('a')) {
    if (!/^https?:/i.test(link.getAttribute('href') ?? '')) link.removeAttribute('href');
    link.setAttribute('target', '_blank');
    link.setAttribute('rel', 'noopener noreferrer');
  }
  return fragment;
}

/** A block that folds past FOLD_CHARS / FOLD_LINES, with a "Show more" / "Show less" button. */
export function foldable(content: HTMLElement, text: string): HTMLElement {
  const lines = text.split('\n').length;
  if (text.length <= FOLD_CHARS && lines <= FOLD_LINES) return content;
  content.classList.add('folded');
  const more = `Show more (${plural(lines, 'line')}, ${Math.round(text.length / 1024) || 1} KB)`;
  const button = h('button', { class: 'show-more', 'aria-expanded': 'false' }, more);
  button.addEventListener('click', () => {
    const open = content.classList.toggle('folded') === false;
    button.setAttribute('aria-expanded', String(open));
    button.textContent = open ? 'Show less' : more;
  });
  return h('div', { class: 'fold' }, content, button);
}

/** The value at a JSON pointer (RFC 6901) in `root`; undefined where there is none. */
function valueAt(root: unknown, pointer: string): unknown {
  let value = root;
  for (const part of pointer.split('/').slice(1)) {
    const key = part.replaceAll('~1', '/').replaceAll('~0', '~');
    value = typeof value === 'object' && value !== null ? (value as Record<string, unknown>)[key] : undefined;
  }
  return value;
}

/** `… 1,234,567 more characters not shown`: what the server's cuts left out of `event`. */
export function describeCuts(event: LogEvent, cuts: readonly Cut[]): string {
  const parts = cuts.map((cut) => {
    const value = valueAt(event, cut.pointer);
    if ('chars' in cut)
      return `${(cut.chars - (typeof value === 'string' ? value.length : 0)).toLocaleString('en')} more characters`;
    const have = typeof value === 'object' && value !== null ? Object.keys(value).length : 0;
    return `${(cut.items - have).toLocaleString('en')} more items`;
  });
  return `… ${parts.join(', ')} not shown`;
}

/** The most changed lines an edit's diff looks for (see describeArgs). */
const MAX_EDIT_LINES = 1000;

/** A tool call's arguments, as people read them: the command, the path, an edit as a diff. */
function describeArgs(name: string, args: unknown): { summary: string; body: HTMLElement } {
  const record = (typeof args === 'object' && args !== null ? args : {}) as Record<string, unknown>;
  const text = (key: string): string | undefined =>
    typeof record[key] === 'string' ? record[key] : undefined;
  const json = JSON.stringify(args, null, 2) ?? String(args);
  if (name === 'edit_file' && text('old_string') !== undefined && text('new_string') !== undefined) {
    const diff = h('pre', { class: 'diff', 'aria-label': `Edit of ${text('path') ?? 'a file'}` });
    const [before, after] = [text('old_string')!, text('new_string')!];
    // Past MAX_EDIT_LINES changed lines the edit is shown whole, removed then added: the diff takes
    // time in the product of its length and its changes (60,000 changed lines: minutes).
    const parts = diffLines(before, after, { maxEditLength: MAX_EDIT_LINES }) ?? [
      { removed: true, added: false, value: before },
      { removed: false, added: true, value: after },
    ];
    for (const part of parts) {
      const sign = part.added ? '+' : part.removed ? '-' : ' ';
      const lines = part.value.replace(/\n$/, '').split('\n');
      diff.append(
        h(
          'span',
          { class: part.added ? 'added' : part.removed ? 'removed' : 'same' },
          lines.map((line) => `${sign} ${line}\n`).join(''),
        ),
      );
    }
    return {
      summary: text('path') ?? '',
      body: foldable(diff, `${text('old_string')}\n${text('new_string')}`),
    };
  }
  if (name === 'write_file' && text('content') !== undefined) {
    const content = text('content')!;
    const body = h('pre', { class: 'diff' }, h('span', { class: 'added' }, content));
    return {
      summary: `${text('path') ?? ''} (${plural(content.split('\n').length, 'line')})`,
      body: foldable(body, content),
    };
  }
  const summary = text('command') ?? text('path') ?? brief(args);
  return { summary, body: foldable(h('pre', { class: 'args' }, json), json) };
}

/** The text of a user, feedback or assistant event ('' for another). */
const textOf = (event: LogEvent): string => ('content' in event ? event.content : '');

interface CallItem {
  readonly item: HTMLElement;
  readonly mark: HTMLElement;
  readonly details: HTMLElement;
  readonly what: HTMLElement;
  body: HTMLElement;
  settled: boolean;
}

/** A cut event's calls' cuts: those under `/toolCalls/N`. */
const CALL_CUT = /^\/toolCalls\/(\d+)(?:\/|$)/;

export class RunView {
  readonly element = h('ol', { class: 'timeline', 'aria-label': 'Run timeline' });
  /** Reads a logged event whole (agent.historyEvent), for "Show all" on one the server sent cut. */
  readonly #readWhole: (seq: number) => Promise<LogEvent>;
  /** Each cut event's parts drawn, by seq: each draws itself again from the whole event. */
  readonly #cutParts = new Map<number, ((whole: LogEvent) => void)[]>();
  /** The whole events being read, by seq: one read however many of their parts ask. */
  readonly #reading = new Map<number, Promise<void>>();
  /** The newest log sequence drawn: a refetch draws only what comes after. */
  #seen = -1;
  readonly #calls = new Map<string, CallItem>();
  readonly #turn = { ok: 0, failed: 0 };
  #lastFeedback: string | undefined;
  #tokens = 0;
  #turns = 0;
  #end: HTMLElement | undefined;
  #streaming: HTMLElement | undefined;
  /**
   * The reply being written: its run and turn, the text up to `seq`, whether its start is cut, and
   * whether that text is a seed's (agent.list), no piece after it yet.
   */
  #stream = { runId: '', turn: -1, seq: -1, text: '', cut: false, seeded: false };
  /** The stream's pieces as they came: a page that began to listen mid-reply puts them after a seed. */
  #pieces: ReplyDelta[] = [];

  constructor(readWhole: (seq: number) => Promise<LogEvent> = () => Promise.reject(new Error('no log'))) {
    this.#readWhole = readWhole;
  }

  /** The newest log sequence drawn (-1 before any). */
  get seen(): number {
    return this.#seen;
  }

  /** Draws the events not drawn yet, in order. */
  update(events: readonly LogEvent[]): void {
    for (const event of events) {
      if (event.seq <= this.#seen) continue;
      this.#seen = event.seq;
      this.#draw(event);
    }
  }

  /**
   * Streamed text of the reply being written (`agent.delta`), until its log event replaces it.
   * Tool-call arguments are not the reply's text (the call is drawn with them once kept).
   */
  delta(runId: string, delta: ReplyDelta): void {
    if (delta.kind !== 'text' && delta.kind !== 'replace') return;
    this.#streamOf(runId, delta.turn);
    this.#pieces.push(delta);
    if (delta.seq <= this.#stream.seq) return; // in the text so far already
    this.#stream.text = followedBy(this.#stream, delta);
    this.#stream.seq = delta.seq;
    this.#stream.seeded = false;
    this.#showStream();
  }

  /**
   * A running run's reply so far (agent.list), for a page that opens, reloads or reconnects
   * mid-reply: the text up to its `seq`, then the pieces after it that came meanwhile, each once.
   */
  seed(runId: string, reply: ReplySoFar): void {
    this.#streamOf(runId, reply.turn);
    const cut = (reply.chars ?? 0) > reply.text.length;
    const stream = { ...this.#stream, seq: reply.seq, text: reply.text, cut, seeded: true };
    for (const piece of this.#pieces)
      if (piece.seq > stream.seq) {
        stream.text = followedBy(stream, piece);
        stream.seq = piece.seq;
        stream.seeded = false;
      }
    this.#stream = stream;
    this.#showStream();
  }

  /** The stream of that run's turn: a new one starts empty. */
  #streamOf(runId: string, turn: number): void {
    if (this.#stream.runId === runId && this.#stream.turn === turn) return;
    this.#stream = { runId, turn, seq: -1, text: '', cut: false, seeded: false };
    this.#pieces = [];
  }

  #showStream(): void {
    if (this.#streaming === undefined) {
      this.#streaming = h('li', { class: 'assistant streaming', 'aria-busy': 'true' });
      this.element.append(this.#streaming);
    }
    this.#streaming.textContent = (this.#stream.cut ? '…' : '') + shownText(this.#stream.text);
  }

  /** The run's totals from agent.done: the end line says them. */
  totals(totals: RunTotals): void {
    const line = describeTotals({
      ...totals,
      iterations: totals.iterations ?? this.#turns,
      totalTokens: totals.totalTokens ?? (this.#tokens || undefined),
    });
    this.#end?.querySelector('.totals')?.replaceChildren(line ? ` — ${line}` : '');
  }

  #append(item: HTMLElement): void {
    if (this.#streaming !== undefined) this.#streaming.before(item);
    else this.element.append(item);
  }

  #draw(event: LogEvent): void {
    switch (event.type) {
      case 'user':
        this.#drawItem(event, (whole) =>
          h(
            'li',
            { class: 'user' },
            h('b', {}, 'Prompt '),
            foldable(h('div', { class: 'text' }, textOf(whole)), textOf(whole)),
          ),
        );
        return;
      case 'feedback': {
        if (event.content === this.#lastFeedback) return; // the veto above said it already
        if (event.content.startsWith(HARNESS_PROVIDER_FAILED)) return; // the turn's line says the provider failed, and why
        const harness = event.content.startsWith('[harness] ');
        this.#drawItem(event, (whole) =>
          h(
            'li',
            { class: harness ? 'feedback harness' : 'feedback' },
            h('b', {}, harness ? 'Note to the model ' : 'Feedback to the model '),
            foldable(h('pre', {}, textOf(whole).replace(/^\[harness\] /, '')), textOf(whole)),
          ),
        );
        return;
      }
      case 'assistant': {
        // The reply kept: its stream gives way (not a later turn's, when the log is read behind it);
        // a reply the server cut is the stream's beginning.
        const cut = event.cut ?? [];
        const contentCut = cut.some((each) => each.pointer === '/content');
        if (
          event.content.includes(this.#stream.text) ||
          (contentCut && this.#stream.text.startsWith(event.content))
        ) {
          this.#streaming?.remove();
          this.#streaming = undefined;
          this.#stream.text = '';
        }
        if (event.usage !== undefined) this.#tokens += event.usage.inputTokens + event.usage.outputTokens;
        const textCuts = cut.filter((each) => !CALL_CUT.test(each.pointer));
        if (event.content.trim() !== '' || textCuts.length > 0) {
          const reply = (whole: LogEvent): HTMLElement => {
            const content = textOf(whole);
            const text = h('div', { class: 'markdown' });
            text.append(renderMarkdown(content));
            return h('li', { class: 'assistant' }, foldable(text, content));
          };
          this.#drawItem(event, reply, textCuts);
        }
        event.toolCalls.forEach((call, index) => {
          const callCuts = cut.filter((each) => CALL_CUT.exec(each.pointer)?.[1] === String(index));
          this.#drawCall(call);
          if (callCuts.length === 0) return;
          const item = this.#calls.get(call.id)!;
          const note = this.#cutNote(event, callCuts);
          item.body.after(note);
          this.#onWhole(event.seq, (whole) => {
            const args = whole.type === 'assistant' ? whole.toolCalls[index]?.args : undefined;
            const { summary, body } = describeArgs(call.name, args);
            item.what.textContent = brief(summary, 120);
            item.body.replaceWith(body);
            item.body = body;
            note.remove();
          });
        });
        return;
      }
      case 'tool_result':
        this.#settle(event);
        return;
      case 'verdict':
        if (event.verdict.kind === 'veto') {
          const { reason, feedback, source } = event.verdict;
          this.#lastFeedback = feedback;
          this.#append(
            h(
              'li',
              { class: 'verdict veto' },
              h('b', {}, `Veto${source ? ` (${source})` : ''}: `),
              reason,
              feedback.trim() !== reason.trim()
                ? foldable(h('pre', { class: 'feedback-text' }, feedback), feedback)
                : null,
            ),
          );
        } else if (event.verdict.kind === 'halt')
          this.#append(
            h(
              'li',
              { class: 'verdict halt' },
              h('b', {}, `Halt${event.verdict.source ? ` (${event.verdict.source})` : ''}: `),
              event.verdict.reason,
            ),
          );
        return;
      case 'turn_step':
        this.#turns += 1;
        this.#append(
          h(
            'li',
            { class: `step${event.step.error ? ' failed' : ''}` },
            describeStep(event.step, this.#turn),
          ),
        );
        this.#turn.ok = this.#turn.failed = 0;
        return;
      case 'compaction':
        this.#append(
          h('li', { class: 'step' }, `Context ${event.mode}: ${event.fromTokens} → ${event.toTokens} tokens`),
        );
        return;
      case 'terminate':
        this.#streaming?.remove();
        this.#streaming = undefined;
        // A call the run never finished (cancelled mid-command) is not left pending.
        for (const call of this.#calls.values())
          if (!call.settled) {
            call.settled = true;
            call.item.className = 'tool unfinished';
            call.mark.textContent = '⊘';
            call.details.append(
              h('p', { class: 'result' }, `Not finished: the run ended (${describeEnd(event.reason)}).`),
            );
          }
        this.#end = h(
          'li',
          { class: `end ${event.reason.kind}` },
          h('b', {}, 'Final state: '),
          describeEnd(event.reason),
          h('span', { class: 'totals' }),
        );
        this.#append(this.#end);
        this.totals({});
        return;
    }
  }

  /**
   * An item drawn from its event by `draw`; one the server cut says so, and draws itself again
   * from the whole event when it is read (its `cuts`: those said in this item).
   */
  #drawItem(event: LogEvent, draw: (whole: LogEvent) => HTMLElement, cuts = event.cut ?? []): void {
    let item = draw(event);
    this.#append(item);
    if (cuts.length === 0) return;
    item.append(this.#cutNote(event, cuts));
    this.#onWhole(event.seq, (whole) => {
      const again = draw(whole);
      item.replaceWith(again);
      item = again;
    });
  }

  #onWhole(seq: number, redraw: (whole: LogEvent) => void): void {
    this.#cutParts.set(seq, [...(this.#cutParts.get(seq) ?? []), redraw]);
  }

  /** `… 1,234 more characters not shown [Show all]`, where the server cut the event. */
  #cutNote(event: LogEvent, cuts: readonly Cut[]): HTMLElement {
    const said = h('span', {}, describeCuts(event, cuts));
    const button = h('button', { type: 'button', class: 'show-all' }, 'Show all');
    button.addEventListener('click', () => {
      button.disabled = true;
      button.textContent = 'Loading…';
      void this.#showAll(event.seq).catch((error: unknown) => {
        said.textContent = `${describeCuts(event, cuts)}; could not read it whole: ${error instanceof Error ? error.message : String(error)}`;
        button.disabled = false;
        button.textContent = 'Show all';
      });
    });
    return h('p', { class: 'cut' }, said, ' ', button);
  }

  /** Reads the event whole and draws each of its parts again from it, in place. */
  #showAll(seq: number): Promise<void> {
    let reading = this.#reading.get(seq);
    if (reading === undefined) {
      reading = this.#readWhole(seq).then(
        (whole) => {
          for (const redraw of this.#cutParts.get(seq) ?? []) redraw(whole);
          this.#cutParts.delete(seq);
          this.#reading.delete(seq);
        },
        (error: unknown) => {
          this.#reading.delete(seq);
          throw error;
        },
      );
      this.#reading.set(seq, reading);
    }
    return reading;
  }

  #drawCall(call: { id: string; name: string; args: unknown }): void {
    const { summary, body } = describeArgs(call.name, call.args);
    const mark = h('span', { class: 'mark', 'aria-label': 'running' }, '…');
    const what = h('span', { class: 'what' }, brief(summary, 120));
    const details = h(
      'details',
      {},
      h('summary', {}, mark, ' ', h('span', { class: 'name' }, call.name), ' ', what),
      body,
    );
    const item = h('li', { class: 'tool pending', 'data-call': call.id }, details);
    this.#calls.set(call.id, { item, mark, details, what, body, settled: false });
    this.#append(item);
  }

  #settle(result: Extract<LogEvent, { type: 'tool_result' }>): void {
    if (result.isError) this.#turn.failed += 1;
    else this.#turn.ok += 1;
    const call = this.#calls.get(result.callId);
    if (call === undefined || call.settled) return;
    call.settled = true;
    call.item.className = `tool ${result.isError ? 'failed' : 'ok'}`;
    call.mark.textContent = result.isError ? '✗' : '✓';
    call.mark.setAttribute('aria-label', result.isError ? 'failed' : 'done');
    let shown = foldable(h('pre', { class: 'result' }, result.output), result.output);
    call.details.append(shown);
    if (result.cut === undefined || result.cut.length === 0) return;
    const note = this.#cutNote(result, result.cut);
    call.details.append(note);
    this.#onWhole(result.seq, (whole) => {
      const output = whole.type === 'tool_result' ? whole.output : '';
      const again = foldable(h('pre', { class: 'result' }, output), output);
      shown.replaceWith(again);
      shown = again;
      note.remove();
    });
  }
}
