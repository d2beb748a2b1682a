// A fixed-size ring of the most recent output bytes, addressed by absolute byte offset, so a client
// that reconnects or fell behind can replay from where it was instead of losing output.

export interface ReplayChunk {
  /** Absolute offset of `data[0]`: the requested offset, or the oldest byte still kept. */
  readonly offset: number;
  readonly data: Buffer;
}

export class Scrollback {
  readonly capacity: number;
  readonly #ring: Buffer;
  /** Total bytes ever appended: the offset one past the newest byte. */
  #end = 0;

  constructor(capacity = 1024 * 1024) {
    if (!Number.isInteger(capacity) || capacity <= 0)
      throw new RangeError('scrollback capacity must be a positive integer');
    this.capacity = capacity;
    this.#ring = Buffer.allocUnsafe(capacity);
  }

  get end(): number {
    return this.#end;
  }

  /** The oldest offset still held. */
  get start(): number {
    return Math.max(0, this.#end - this.capacity);
  }

  append(chunk: Uint8Array): void {
    let data = chunk;
    if (data.length > this.capacity) data = data.subarray(data.length - this.capacity);
    const at = (this.#end + (chunk.length - data.length)) % this.capacity;
    const first = Math.min(data.length, this.capacity - at);
    this.#ring.set(data.subarray(0, first), at);
    if (first < data.length) this.#ring.set(data.subarray(first), 0);
    this.#end += chunk.length;
  }

  /** Bytes from `fromOffset` (clamped to what is kept) to the end. */
  read(fromOffset = 0): ReplayChunk {
    const offset = Math.min(Math.max(fromOffset, this.start), this.#end);
    const length = this.#end - offset;
    const at = offset % this.capacity;
    const first = Math.min(length, this.capacity - at);
    const data = Buffer.allocUnsafe(length);
    this.#ring.copy(data, 0, at, at + first);
    if (first < length) this.#ring.copy(data, first, 0, length - first);
    return { offset, data };
  }
}
