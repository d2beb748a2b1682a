// Where a run's time went, as OpenTelemetry spans: run → turn → think / verify / act → tool. Only
// @opentelemetry/api is used, so every call here is a no-op until the application registers an SDK
// (the server does, from its [telemetry] config). A span never changes what the loop does.
// The API itself is loaded only once something registered with it (its global is there): a process
// that traces nothing does not carry it.
import type * as OtelApi from '@opentelemetry/api';
import type { Attributes, Context, Span } from '@opentelemetry/api';
import { createRequire } from 'node:module';

type Api = typeof OtelApi;
/** Where every copy of the API (ESM, CommonJS, any 1.x) keeps what was registered with it. */
const REGISTERED = Symbol.for('opentelemetry.js.api.1');
let api: Api | undefined;

/** The API, once an SDK, a context manager or a logger was registered with it; else undefined. */
function registered(): Api | undefined {
  if (api === undefined && REGISTERED in globalThis)
    api = createRequire(import.meta.url)('@opentelemetry/api') as Api;
  return api;
}

export interface Traced {
  readonly span: Span;
  /** The context that makes this span the parent of what starts inside it. */
  readonly context: Context;
}

/** What startSpan hands out while nothing is registered: a span that records nothing, in a context of nothing. */
const nothing: Context = {
  getValue: () => undefined,
  setValue: () => nothing,
  deleteValue: () => nothing,
};
const noSpan: Span = {
  spanContext: () => ({ traceId: '0'.repeat(32), spanId: '0'.repeat(16), traceFlags: 0 }),
  setAttribute: () => noSpan,
  setAttributes: () => noSpan,
  addEvent: () => noSpan,
  addLink: () => noSpan,
  addLinks: () => noSpan,
  setStatus: () => noSpan,
  updateName: () => noSpan,
  end: () => {},
  isRecording: () => false,
  recordException: () => {},
};
const untraced: Traced = { span: noSpan, context: nothing };

/** A span under `parent` (default: the active one, so a sub-agent's run nests in its tool); none
 *  under a parent that records nothing (no SDK, sampled out): a no-op costs once per run, not per step. */
export function startSpan(name: string, attributes: Attributes, parent?: Context): Traced {
  const otel = registered();
  if (otel === undefined) return untraced;
  const under = parent ?? otel.context.active();
  const parentSpan = otel.trace.getSpan(under);
  if (parentSpan !== undefined && !parentSpan.isRecording()) return { span: parentSpan, context: under };
  // The tracer is taken now, not at load: a provider registered since (by any copy of the API) is used.
  const span = otel.trace.getTracer('@aleph/harness').startSpan(name, { attributes }, under);
  return { span, context: otel.trace.setSpan(under, span) };
}

/** Ends a span with its closing attributes; an `error` marks it failed, with that message. */
export function endSpan(traced: Traced, attributes: Attributes = {}, error?: string): void {
  if (!traced.span.isRecording()) return; // a no-op span, or a parent lent by startSpan above
  traced.span.setAttributes(attributes);
  // SpanStatusCode.ERROR (the API's enum, 2): a recording span means the API is loaded.
  if (error !== undefined)
    traced.span.setStatus({ code: registered()!.SpanStatusCode.ERROR, message: error });
  traced.span.end();
}

/** Runs `work` with `traced` as the active span, so spans its callee starts become its children. */
export function withSpan<T>(traced: Traced, work: () => T): T {
  if (traced === untraced) return work();
  return registered()!.context.with(traced.context, work);
}
