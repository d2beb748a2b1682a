// OpenTelemetry for the server: the harness's spans (run → turn → think / verify / act → tool) go
// to an OTLP/HTTP endpoint when `[telemetry] endpoint` is set, through the official SDK. Without
// it nothing is registered, and every span the harness starts is a no-op.
// The SDK, its exporter (~15 MiB resident) and the API itself are loaded only then.
import type { Config } from './config.js';

export interface Telemetry {
  /** Sends what is still buffered, then stops. */
  shutdown(): Promise<void>;
}

export async function startTelemetry(
  telemetry: Config['telemetry'],
  warn: (message: string) => void,
  /** In cluster mode: every span names the node (service.instance.id) and the cluster. */
  cluster?: { readonly name: string; readonly node: string },
): Promise<Telemetry | undefined> {
  if (telemetry.endpoint === undefined) return undefined;
  const { context, diag, DiagLogLevel, trace } = await import('@opentelemetry/api');
  const [{ AsyncLocalStorageContextManager }, { OTLPTraceExporter }, { resourceFromAttributes }, sdk] =
    await Promise.all([
      import('@opentelemetry/context-async-hooks'),
      import('@opentelemetry/exporter-trace-otlp-http'),
      import('@opentelemetry/resources'),
      import('@opentelemetry/sdk-trace-node'),
    ]);
  const { BatchSpanProcessor, NodeTracerProvider } = sdk;
  // The SDK reports export failures (an endpoint that is down) through `diag`: into the log.
  const report = (message: string, ...args: unknown[]): void =>
    warn([message, ...args.map((arg) => (arg instanceof Error ? arg.message : String(arg)))].join(' '));
  const quiet = (): void => {};
  diag.setLogger(
    { error: report, warn: report, info: quiet, debug: quiet, verbose: quiet },
    DiagLogLevel.WARN,
  );
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({
      'service.name': telemetry.service_name,
      ...(cluster === undefined
        ? {}
        : {
            'service.instance.id': cluster.node,
            'aleph.cluster.node': cluster.node,
            'aleph.cluster.name': cluster.name,
          }),
    }),
    spanProcessors: [
      new BatchSpanProcessor(
        new OTLPTraceExporter({ url: telemetry.endpoint, headers: telemetry.headers ?? {} }),
      ),
    ],
  });
  // Registered through the API's global, which every copy of it reads (the harness takes its
  // tracer at each span, so the copy it loads — once this registered — finds this provider).
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  trace.setGlobalTracerProvider(provider);
  return { shutdown: () => provider.shutdown() };
}
