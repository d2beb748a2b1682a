// Authenticates what nodes send each other on core NATS subjects (a forwarded terminal call and its
// answer, a follower's report, an interest announcement): anything that can publish on the
// cluster's subjects could otherwise type into any terminal, or answer a call first with its own
// reply. An answer is signed for the call's reply subject (unique per call), so it answers that call only. Each message carries, in headers, its time, a random nonce
// and an HMAC-SHA256 of subject, time, nonce and body under a key derived from the cluster's shared
// secret (never the secret itself: nothing sent carries it). Invariant: a message is accepted only
// with a valid MAC, a time within MAX_SKEW_MS of the receiver's clock, and a nonce not accepted
// before within that window (a replay); the verdict says which check refused it.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { headers as natsHeaders, type MsgHdrs } from '@nats-io/transport-node';

const TIME_HEADER = 'Aleph-Time';
const NONCE_HEADER = 'Aleph-Nonce';
const MAC_HEADER = 'Aleph-Mac';
/** Clocks of the cluster's nodes may differ this much; older or newer messages are refused. */
export const MAX_SKEW_MS = 30_000;

export type Refusal = 'unauthenticated' | 'bad_mac' | 'stale' | 'replayed';
export type Verdict = { readonly kind: 'accepted' } | { readonly kind: 'refused'; readonly reason: Refusal };

const REFUSALS: Record<Refusal, string> = {
  unauthenticated: 'it carries no authentication',
  bad_mac: 'its MAC is wrong (not signed with the cluster’s secret)',
  stale: `its time is more than ${MAX_SKEW_MS / 1000} s from this node's clock (or node clocks differ that much)`,
  replayed: 'it was received before (a replay)',
};

/** Why a message was refused, in words. */
export function describeRefusal(reason: Refusal): string {
  return REFUSALS[reason];
}

export class ForwardAuth {
  readonly #key: Buffer;
  /** Nonces accepted, until their message's time leaves the window. */
  readonly #seen = new Map<string, number>();
  readonly #now: () => number;

  /** `secret` is the cluster's shared secret; `name` the cluster's (each cluster gets its own key). */
  constructor(secret: string, name: string, now: () => number = Date.now) {
    this.#key = createHmac('sha256', secret).update(`aleph-cluster-forward-v1\0${name}`).digest();
    this.#now = now;
  }

  #mac(subject: string, time: string, nonce: string, body: Uint8Array): Buffer {
    return createHmac('sha256', this.#key).update(`${subject}\n${time}\n${nonce}\n`).update(body).digest();
  }

  /** The headers that authenticate `body` sent on `subject`. */
  sign(subject: string, body: Uint8Array): MsgHdrs {
    const time = String(this.#now());
    const nonce = randomBytes(12).toString('base64url');
    const headers = natsHeaders();
    headers.set(TIME_HEADER, time);
    headers.set(NONCE_HEADER, nonce);
    headers.set(MAC_HEADER, this.#mac(subject, time, nonce, body).toString('base64url'));
    return headers;
  }

  /**
   * Only whether a node of the cluster signed it (for what waits in a stream for long: a queued
   * run, whose id already makes a second copy harmless).
   */
  signed(subject: string, body: Uint8Array, headers: MsgHdrs | undefined): Verdict {
    const time = headers?.get(TIME_HEADER) ?? '';
    const nonce = headers?.get(NONCE_HEADER) ?? '';
    const mac = headers?.get(MAC_HEADER) ?? '';
    if (time === '' || nonce === '' || mac === '') return { kind: 'refused', reason: 'unauthenticated' };
    const given = Buffer.from(mac, 'base64url');
    const wanted = this.#mac(subject, time, nonce, body);
    if (given.length !== wanted.length || !timingSafeEqual(given, wanted))
      return { kind: 'refused', reason: 'bad_mac' };
    return { kind: 'accepted' };
  }

  verify(subject: string, body: Uint8Array, headers: MsgHdrs | undefined): Verdict {
    const signed = this.signed(subject, body, headers);
    if (signed.kind === 'refused') return signed;
    const time = headers?.get(TIME_HEADER) ?? '';
    const nonce = headers?.get(NONCE_HEADER) ?? '';
    const sent = Number(time);
    const now = this.#now();
    if (!Number.isSafeInteger(sent) || Math.abs(now - sent) > MAX_SKEW_MS)
      return { kind: 'refused', reason: 'stale' };
    for (const [seen, until] of this.#seen) {
      if (until >= now) break; // in insertion order, near enough: the rest go next time
      this.#seen.delete(seen);
    }
    if (this.#seen.has(nonce)) return { kind: 'refused', reason: 'replayed' };
    this.#seen.set(nonce, sent + MAX_SKEW_MS);
    return { kind: 'accepted' };
  }
}
