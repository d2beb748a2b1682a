// Where a run's time went, as OpenTelemetry spans: run → turn → think / verify / act → tool. Only
// @opentelemetry/api is used, so every call here is a no-op until the application registers an SDK
// (the server does, from its [telemetry] config). A span never changes what the loop does.
import { context, SpanStatusCode, trace, type Attributes, type Context, type Span } from '@opentelemetry/api';

const tracer = trace.getTracer('@aleph/harness');

export interface Traced {
  readonly span: Span;
  /** The context that makes this span the parent of what starts inside it. */
  readonly context: Context;
}

/** A span under `parent` (default: the active one, so a sub-agent's run nests in its tool); none
 *  under a parent that records nothing (no SDK, sampled out): a no-op costs once per run, not per step. */
export function startSpan(name: string, attributes: Attributes, parent: Context = context.active()): Traced {
  const parentSpan = trace.getSpan(parent);
  if (parentSpan !== undefined && !parentSpan.isRecording()) return { span: parentSpan, context: parent };
  const span = tracer.startSpan(name, { attributes }, parent);
  return { span, context: trace.setSpan(parent, span) };
}

/** Ends a span with its closing attributes; an `error` marks it failed, with that message. */
export function endSpan(traced: Traced, attributes: Attributes = {}, error?: string): void {
  if (!traced.span.isRecording()) return; // a no-op span, or a parent lent by startSpan above
  traced.span.setAttributes(attributes);
  if (error !== undefined) traced.span.setStatus({ code: SpanStatusCode.ERROR, message: error });
  traced.span.end();
}

/** Runs `work` with `traced` as the active span, so spans its callee starts become its children. */
export function withSpan<T>(traced: Traced, work: () => T): T {
  return context.with(traced.context, work);
}
