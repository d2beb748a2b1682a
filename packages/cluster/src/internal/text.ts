// JSON text to and from the bytes of a message. Nearly all of it is ASCII (base64 output, ids,
// numbers), and ASCII is its own Latin-1: copied byte for byte, instead of through Node 20's UTF-8
// decoder and encoder (twice the work or more). Invariant: what comes out is exactly what UTF-8
// gives (text with any other character goes through UTF-8 itself).
import { isAscii } from 'node:buffer';

/** The text of UTF-8 bytes (a view of them is read, never copied first). */
export function textOf(bytes: Uint8Array): string {
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return isAscii(buffer) ? buffer.toString('latin1') : buffer.toString('utf8');
}

/** UTF-8 bytes of a text, and how many: what `writeText` writes. */
export function byteLengthOf(text: string): number {
  return Buffer.byteLength(text, 'utf8');
}

/** Writes a text's UTF-8 bytes (`bytes` of them, from `byteLengthOf`) at `offset`; answers the offset after them. */
export function writeText(target: Buffer, text: string, bytes: number, offset: number): number {
  // A text as long in UTF-8 as in characters is ASCII throughout.
  return offset + target.write(text, offset, bytes, bytes === text.length ? 'latin1' : 'utf8');
}
