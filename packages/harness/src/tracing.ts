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

/** Starts a span under `parent` (the active context by default: a sub-agent's run nests in its tool). */
export function startSpan(name: string, attributes: Attributes, parent: Context = context.active()): Traced {
  const span = tracer.startSpan(name, { attributes }, parent);
  return { span, context: trace.setSpan(parent, span) };
}

/** Ends a span with its closing attributes; an `error` marks it failed, with that message. */
export function endSpan(traced: Traced, attributes: Attributes = {}, error?: string): void {
  traced.span.setAttributes(attributes);
  if (error !== undefined) traced.span.setStatus({ code: SpanStatusCode.ERROR, message: error });
  traced.span.end();
}

/** Runs `work` with `traced` as the active span, so spans its callee starts become its children. */
export function withSpan<T>(traced: Traced, work: () => T): T {
  return context.with(traced.context, work);
}
