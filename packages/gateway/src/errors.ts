// The one error class of @aleph/gateway: an RPC error with a stable code, thrown by handlers and
// turned into a JSON-RPC error response at the socket edge.
import { ErrorCodes, type ErrorCodeName, type RpcErrorObject } from './protocol.js';

export class GatewayError extends Error {
  override readonly name = 'GatewayError';
  readonly code: ErrorCodeName;
  readonly data: Record<string, unknown> | undefined;

  constructor(
    code: ErrorCodeName,
    message: string,
    options?: { cause?: unknown; data?: Record<string, unknown> | undefined },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.data = options?.data;
  }

  toRpcError(): RpcErrorObject {
    return { code: ErrorCodes[this.code], message: this.message, data: { ...this.data, code: this.code } };
  }
}
