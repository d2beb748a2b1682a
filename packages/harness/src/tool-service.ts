// The tools a run may call: their specs for the provider (JSON Schema from zod), and argument
// validation that turns a bad call into an error result naming the field, never a crash.
import { z } from 'zod';
import { HarnessError } from './errors.js';
import type { AnyTool, ResourceClaim, Tool, ToolSpec } from './types.js';

export type ParsedCall =
  | { readonly ok: true; readonly tool: Tool<unknown>; readonly args: unknown }
  | { readonly ok: false; readonly error: string };

const EVERYTHING: ResourceClaim = { kind: 'exclusive', keys: ['*'] };

export class ToolService {
  readonly #tools = new Map<string, Tool<unknown>>();
  #specs: ToolSpec[] | undefined;

  constructor(tools: readonly AnyTool[] = []) {
    for (const tool of tools) this.register(tool);
  }

  register<A>(tool: Tool<A>): this {
    if (this.#tools.has(tool.name))
      throw new HarnessError('invalid_tool', `tool ${tool.name} is registered twice`);
    if (!/^[a-zA-Z0-9_-]{1,64}$/.test(tool.name))
      throw new HarnessError('invalid_tool', `invalid tool name ${JSON.stringify(tool.name)}`);
    this.#tools.set(tool.name, tool);
    this.#specs = undefined;
    return this;
  }

  get(name: string): Tool<unknown> | undefined {
    return this.#tools.get(name);
  }

  get names(): string[] {
    return [...this.#tools.keys()];
  }

  specs(): ToolSpec[] {
    this.#specs ??= [...this.#tools.values()].map((tool) => {
      if (tool.inputSchema !== undefined)
        return { name: tool.name, description: tool.description, inputSchema: tool.inputSchema };
      const { $schema: _schema, ...inputSchema } = z.toJSONSchema(tool.input, {
        io: 'input',
        unrepresentable: 'any',
      });
      return { name: tool.name, description: tool.description, inputSchema };
    });
    return this.#specs;
  }

  parse(name: string, args: unknown): ParsedCall {
    const tool = this.#tools.get(name);
    if (tool === undefined) {
      return { ok: false, error: `unknown tool "${name}"; available: ${this.names.join(', ') || 'none'}` };
    }
    const parsed = tool.input.safeParse(args ?? {});
    if (parsed.success) return { ok: true, tool, args: parsed.data };
    const issues = parsed.error.issues.map(
      (issue) => `${issue.path.length ? issue.path.join('.') : '(arguments)'}: ${issue.message}`,
    );
    return { ok: false, error: `invalid arguments for ${name}: ${issues.join('; ')}` };
  }

  claimOf(tool: Tool<unknown>, args: unknown): ResourceClaim {
    return tool.claim?.(args) ?? EVERYTHING;
  }
}
