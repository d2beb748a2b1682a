// An MCP tool result as the model reads it: text as is, an image or audio as a placeholder naming
// its type and size, a resource link as its name and URI, an embedded resource as its text; the
// whole capped (its head and its end, with the count cut said). `isError` stays an error.

/** Characters of one result the model gets; past it, the first quarter and the end are kept. */
export const RESULT_CAP = 100_000;

/** A single message larger than this ends the connection (a 50 MB result fits; a runaway does not). */
export const MAX_MESSAGE_BYTES = 64 * 1024 * 1024;

export interface McpToolOutput {
  readonly output: string;
  readonly isError: boolean;
}

type Block = Record<string, unknown>;

const str = (value: unknown): string | undefined => (typeof value === 'string' ? value : undefined);

/** base64 of n bytes is about 4n/3 characters. */
const decodedBytes = (data: unknown): number =>
  typeof data === 'string' ? Math.floor((data.replace(/=+$/, '').length * 3) / 4) : 0;

function blockText(block: Block): string {
  switch (block['type']) {
    case 'text':
      return str(block['text']) ?? '';
    case 'image':
    case 'audio':
      return `[${String(block['type'])}: ${str(block['mimeType']) ?? 'unknown type'}, ${decodedBytes(block['data'])} bytes, not shown]`;
    case 'resource_link': {
      const mime = str(block['mimeType']);
      const description = str(block['description']);
      return `[resource link: ${str(block['name']) ?? ''} ${str(block['uri']) ?? ''}${mime ? ` (${mime})` : ''}]${description ? ` ${description}` : ''}`;
    }
    case 'resource': {
      const resource = (block['resource'] ?? {}) as Block;
      const text = str(resource['text']);
      const head = `[resource: ${str(resource['uri']) ?? ''}${str(resource['mimeType']) ? ` (${str(resource['mimeType'])})` : ''}]`;
      return text !== undefined
        ? `${head}\n${text}`
        : `${head} ${decodedBytes(resource['blob'])} bytes of binary, not shown`;
    }
    default:
      return `[${JSON.stringify(block['type'] ?? 'unknown')} content, not shown]`;
  }
}

export function capText(text: string, cap = RESULT_CAP): string {
  if (text.length <= cap) return text;
  const head = Math.floor(cap / 4);
  const tail = cap - head;
  return `${text.slice(0, head)}\n…[${text.length - cap} of ${text.length} characters cut]…\n${text.slice(-tail)}`;
}

/** A `tools/call` result (or a legacy `toolResult`) in words for the model. */
export function toolOutput(result: Record<string, unknown>): McpToolOutput {
  const content = Array.isArray(result['content']) ? (result['content'] as Block[]) : [];
  let text = content.map(blockText).join('\n');
  if (content.length === 0) {
    const structured = result['structuredContent'] ?? result['toolResult'];
    text = structured === undefined ? '' : JSON.stringify(structured);
  }
  return { output: capText(text), isError: result['isError'] === true };
}
