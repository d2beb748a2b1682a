// What `aleph run` prints under its first line: the run's MCP servers (ready with their tools, or
// failed and why; configuration problems as ⚠ lines) and the instruction files sent to the model
// (in the order sent; what was skipped or cut as ⚠ lines).
// Pure functions of agent.run's answer, so each line is tested without a server.

export interface RunHeader {
  readonly mcp?: {
    readonly servers: readonly {
      readonly name: string;
      readonly transport: string;
      readonly state: 'ready' | 'failed';
      readonly tools: readonly string[];
      readonly error?: string;
    }[];
    readonly problems: readonly string[];
  };
  readonly instructions?: readonly {
    readonly path: string;
    readonly cut?: boolean;
    readonly importedBy?: string;
  }[];
  /** Instruction files not loaded, or cut, and why. */
  readonly instructionWarnings?: readonly string[];
}

export function headerLines(header: RunHeader): string[] {
  const lines: string[] = [];
  const servers = header.mcp?.servers ?? [];
  const ready = servers.filter((server) => server.state === 'ready');
  if (ready.length > 0) {
    const list = ready.map(
      (server) =>
        `${server.name} (${server.transport}, ${server.tools.length} tool${server.tools.length === 1 ? '' : 's'})`,
    );
    lines.push(`mcp: ${list.join(', ')}`);
  }
  for (const server of servers.filter((candidate) => candidate.state === 'failed'))
    lines.push(`  ⚠ mcp ${server.name} (${server.transport}) left out: ${server.error ?? 'failed'}`);
  for (const problem of header.mcp?.problems ?? []) lines.push(`  ⚠ mcp: ${problem}`);
  const files = header.instructions ?? [];
  if (files.length > 0)
    lines.push(`instructions: ${files.map((file) => `${file.path}${file.cut ? ' (cut)' : ''}`).join(', ')}`);
  for (const warning of header.instructionWarnings ?? []) lines.push(`  ⚠ instructions: ${warning}`);
  return lines;
}
