// Frames as bytes. Text as `ws` hands it over; and the `pty.output` notification, the one frame that
// carries bulk: built by the server as bytes and read back by the client without JSON.parse. Both
// sides use this one layout; any other text is JSON-RPC read the ordinary way (the client falls
// back to JSON.parse when the layout differs).
// Per 64 KiB of output (87 KiB of base64), measured on this project's 2-core VM (Node 20): a UTF-8
// encode of the frame string costs ~20–38 µs against ~5 for latin1 (the frame is ASCII), and
// JSON.parse ~21–30 µs, plus a second 87 KiB string for the data field.
import { isAscii, isUtf8 } from 'node:buffer';
import type { RawData } from 'ws';

/** The bytes of a frame as `ws` hands it over (a Buffer, an ArrayBuffer or fragments). */
export function rawBuffer(raw: RawData): Buffer {
  return Buffer.isBuffer(raw) ? raw : Array.isArray(raw) ? Buffer.concat(raw) : Buffer.from(raw);
}

/** The text of a frame as `ws` hands it over; undefined if not UTF-8. */
export function rawText(raw: RawData): string | undefined {
  const buffer = rawBuffer(raw);
  // JSON-RPC from the server is mostly ASCII: latin1 is a straight copy, cheaper than a UTF-8
  // decode of the same bytes (13 against 17 µs for 87 KiB here). Anything else decodes as UTF-8.
  if (isAscii(buffer)) return buffer.toString('latin1');
  return isUtf8(buffer) ? buffer.toString('utf8') : undefined;
}

const PREFIX = '{"jsonrpc":"2.0","method":"pty.output","params":{"sessionId":';
const PREFIX_BYTES = Buffer.from(PREFIX, 'latin1');
const OFFSET_KEY = Buffer.from(',"offset":', 'latin1');
const DATA_KEY = Buffer.from(',"data":"', 'latin1');
const SUFFIX = '"}}';
const SUFFIX_BYTES = Buffer.from(SUFFIX, 'latin1');
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/** Builds the output frames of one session: its id quoted, and the frame's encoding, worked out once. */
export function outputFramer(sessionId: string): (offset: number, data: Buffer) => Buffer {
  const head = `${PREFIX}${JSON.stringify(sessionId)},"offset":`;
  // Session ids are UUIDs, so the frame is ASCII, whose UTF-8 bytes are its latin1 bytes.
  const encoding = Buffer.byteLength(head) === head.length ? 'latin1' : 'utf8';
  return (offset, data) =>
    Buffer.from(`${head}${offset},"data":"${data.toString('base64')}${SUFFIX}`, encoding);
}

export interface OutputFields {
  readonly sessionId: string;
  readonly offset: number;
  /** The output, in base64 (as in the frame)... */
  readonly data: string;
  /** ...and decoded. */
  readonly bytes: Buffer;
}

/**
 * The fields of a frame laid out as outputFramer() builds it, or undefined for any other text (and
 * for anything JSON.parse would read otherwise: escapes, control characters, non-base64 data).
 */
export function readOutputFrame(frame: Buffer): OutputFields | undefined {
  const at = (key: Buffer, index: number): boolean =>
    index >= 0 &&
    index + key.length <= frame.length &&
    frame.compare(key, 0, key.length, index, index + key.length) === 0;
  const idStart = PREFIX_BYTES.length + 1;
  if (!at(PREFIX_BYTES, 0) || frame[idStart - 1] !== QUOTE) return undefined;
  const idEnd = frame.indexOf(QUOTE, idStart);
  if (idEnd < 0 || !at(OFFSET_KEY, idEnd + 1)) return undefined;
  const id = frame.subarray(idStart, idEnd);
  if (id.includes(BACKSLASH) || id.some((byte) => byte < 0x20) || !isUtf8(id)) return undefined;
  const digitsStart = idEnd + 1 + OFFSET_KEY.length;
  let index = digitsStart;
  let offset = 0;
  for (; frame[index] !== undefined && frame[index]! >= 0x30 && frame[index]! <= 0x39; index += 1)
    offset = offset * 10 + (frame[index]! - 0x30);
  const digits = index - digitsStart;
  if (
    digits === 0 ||
    digits > 16 ||
    offset > Number.MAX_SAFE_INTEGER ||
    (digits > 1 && frame[digitsStart] === 0x30)
  )
    return undefined;
  if (!at(DATA_KEY, index)) return undefined;
  const dataStart = index + DATA_KEY.length;
  const dataEnd = frame.length - SUFFIX.length;
  // Base64 has no quote: the data ends at the first quote, which must start the suffix.
  if (frame.indexOf(QUOTE, dataStart) !== dataEnd || !at(SUFFIX_BYTES, dataEnd)) return undefined;
  const data = frame.toString('latin1', dataStart, dataEnd);
  const bytes = Buffer.from(data, 'base64');
  // The decoder skips what is not base64 (a backslash, a control or non-ASCII byte), and then
  // decodes fewer bytes than the text's length promises: such text is left to JSON.parse.
  if (data.length % 4 !== 0 || bytes.length !== Buffer.byteLength(data, 'base64')) return undefined;
  return { sessionId: id.toString('utf8'), offset, data, bytes };
}
