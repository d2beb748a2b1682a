// `ws` hands a frame over as a Buffer, an ArrayBuffer or fragments; this is its text.
import type { RawData } from 'ws';

export function rawText(raw: RawData): string {
  if (Buffer.isBuffer(raw)) return raw.toString('utf8');
  if (Array.isArray(raw)) return Buffer.concat(raw).toString('utf8');
  return Buffer.from(raw).toString('utf8');
}
