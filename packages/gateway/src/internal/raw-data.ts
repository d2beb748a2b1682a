// `ws` hands a frame over as a Buffer, an ArrayBuffer or fragments; this is its text.
import { isAscii } from 'node:buffer';
import type { RawData } from 'ws';

export function rawText(raw: RawData): string {
  const buffer = Buffer.isBuffer(raw) ? raw : Array.isArray(raw) ? Buffer.concat(raw) : Buffer.from(raw);
  // Output frames are pure ASCII (base64 in JSON): latin1 is a straight copy, several times cheaper
  // than a UTF-8 decode of the same bytes. Anything else decodes as UTF-8.
  return isAscii(buffer) ? buffer.toString('latin1') : buffer.toString('utf8');
}
