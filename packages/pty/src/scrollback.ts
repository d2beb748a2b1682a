// A fixed-size ring of the most recent output bytes, addressed by absolute byte offset, so a client
// that reconnects or fell behind can replay from where it was instead of losing output.

export interface ReplayChunk {
  /** Absolute offset of `data[0]`: the requested offset, or the oldest byte still kept. */
  readonly offset: number;
  readonly data: Buffer;
}

/** The ring's first size: it grows (doubling) to `capacity` only as output comes. */
const FIRST_SIZE = 4096;

export class Scrollback {
  readonly capacity: number;
  /**
   * Shorter than `capacity` until that much output came (then nothing has wrapped yet: byte `n` is
   * at `n`), so a quiet terminal holds a few KiB, not the whole capacity.
   */
  #ring: Buffer;
  /** Total bytes ever appended: the offset one past the newest byte. */
  #end = 0;

  constructor(capacity = 1024 * 1024) {
    if (!Number.isInteger(capacity) || capacity <= 0)
      throw new RangeError('scrollback capacity must be a positive integer');
    this.capacity = capacity;
    this.#ring = Buffer.allocUnsafe(Math.min(capacity, FIRST_SIZE));
  }

  get end(): number {
    return this.#end;
  }

  /** The oldest offset still held. */
  get start(): number {
    return Math.max(0, this.#end - this.capacity);
  }

  append(chunk: Uint8Array): void {
    if (this.#ring.length < this.capacity && this.#end + chunk.length > this.#ring.length) {
      const size = Math.min(this.capacity, Math.max(2 * this.#ring.length, this.#end + chunk.length));
      const ring = Buffer.allocUnsafe(size);
      this.#ring.copy(ring, 0, 0, this.#end);
      this.#ring = ring;
    }
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
