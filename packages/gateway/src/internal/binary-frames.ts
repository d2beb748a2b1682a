// The binary fast path for keystrokes and output, which a connection turns on with `pty.binary`
// (PROTOCOL.md, "Binary frames"). A frame is a WebSocket binary message:
//
//   byte 0       kind: 1 = output (server → client), 2 = input (client → server)
//   byte 1       n, the length of the session id in bytes (1–255)
//   bytes 2…     the session id (UTF-8)
//   output only: 8 bytes, the offset of the first data byte (unsigned, big-endian)
//   the rest     the bytes themselves, as the program wrote them or as it is to read them
//
// It carries what `pty.output` and a `pty.input` notification carry, without JSON or base64 on
// either side: per keystroke, measured on this project's 2-core VM, the JSON path's parse,
// validation and base64 cost the server ~15 µs of a ~70 µs round trip.

export const OUTPUT_KIND = 1;
export const INPUT_KIND = 2;
/** The version `pty.binary` answers with: this layout. */
export const BINARY_VERSION = 1;
const TWO_32 = 2 ** 32;

/** The head of one session's output frames (its id encoded once): its length, and a writer of it. */
export function binaryOutputHead(sessionId: string): {
  readonly bytes: number;
  write(frame: Buffer, offset: number): void;
} {
  const id = Buffer.from(sessionId, 'utf8');
  if (id.length === 0 || id.length > 255) throw new RangeError(`session id of ${id.length} bytes`);
  return {
    bytes: 2 + id.length + 8,
    write(frame, offset) {
      frame[0] = OUTPUT_KIND;
      frame[1] = id.length;
      id.copy(frame, 2);
      frame.writeUInt32BE(Math.floor(offset / TWO_32), 2 + id.length);
      frame.writeUInt32BE(offset % TWO_32, 6 + id.length);
    },
  };
}

/** Builds the binary output frames of one session. */
export function binaryOutputFramer(sessionId: string): (offset: number, data: Buffer) => Buffer {
  const head = binaryOutputHead(sessionId);
  return (offset, data) => {
    const frame = Buffer.allocUnsafe(head.bytes + data.length);
    head.write(frame, offset);
    data.copy(frame, head.bytes);
    return frame;
  };
}

/** An input frame (as the client builds it). */
export function binaryInputFrame(sessionId: string, data: Uint8Array): Buffer {
  const id = Buffer.from(sessionId, 'utf8');
  if (id.length === 0 || id.length > 255) throw new RangeError(`session id of ${id.length} bytes`);
  const frame = Buffer.allocUnsafe(2 + id.length + data.byteLength);
  frame[0] = INPUT_KIND;
  frame[1] = id.length;
  id.copy(frame, 2);
  frame.set(data, 2 + id.length);
  return frame;
}

/**
 * Reads a client's input frames, keeping the last session id decoded: keystrokes come in runs for
 * one session, and comparing a few bytes is cheaper than decoding them into a string each time.
 */
export class InputFrameReader {
  #idBytes: Buffer | undefined;
  #id = '';

  /** The frame's session id and keystrokes (a view of the frame), or what is wrong with it. */
  read(frame: Buffer): { readonly sessionId: string; readonly data: Buffer } | string {
    const idLength = frame[1] ?? 0;
    const dataStart = 2 + idLength;
    if (frame[0] !== INPUT_KIND || idLength === 0 || frame.length < dataStart) {
      const read = readBinaryFrame(frame);
      if (typeof read === 'string') return read;
      return 'a client sends input frames (kind 2) only';
    }
    const known = this.#idBytes;
    if (
      known === undefined ||
      known.length !== idLength ||
      frame.compare(known, 0, idLength, 2, dataStart) !== 0
    ) {
      this.#id = frame.toString('utf8', 2, dataStart);
      this.#idBytes = Buffer.from(frame.subarray(2, dataStart));
    }
    return { sessionId: this.#id, data: frame.subarray(dataStart) };
  }
}

export type BinaryFrame =
  | { readonly kind: 'output'; readonly sessionId: string; readonly offset: number; readonly data: Buffer }
  | { readonly kind: 'input'; readonly sessionId: string; readonly data: Buffer };

/** Reads a binary frame; a string says what is wrong with it. */
export function readBinaryFrame(frame: Buffer): BinaryFrame | string {
  if (frame.length < 2) return `a binary frame of ${frame.length} bytes is too short`;
  const kind = frame[0];
  const idLength = frame[1]!;
  if (kind !== OUTPUT_KIND && kind !== INPUT_KIND)
    return `unknown binary frame kind ${kind} (1 is output, 2 is input)`;
  const dataStart = 2 + idLength + (kind === OUTPUT_KIND ? 8 : 0);
  if (idLength === 0 || frame.length < dataStart)
    return `binary frame too short for its ${idLength}-byte session id`;
  const sessionId = frame.toString('utf8', 2, 2 + idLength);
  const data = frame.subarray(dataStart);
  if (kind === INPUT_KIND) return { kind: 'input', sessionId, data };
  const offset = frame.readUInt32BE(2 + idLength) * TWO_32 + frame.readUInt32BE(6 + idLength);
  if (offset > Number.MAX_SAFE_INTEGER) return `offset past 2^53 in a binary output frame`;
  return { kind: 'output', sessionId, offset, data };
}
