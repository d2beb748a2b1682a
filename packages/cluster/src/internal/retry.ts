// A write to JetStream outlives a NATS outage: an error that is not the stream's own answer (a
// timeout, no responders, a dropped connection) waits for the connection and tries again, until a
// deadline. Callers make the write idempotent (a message id), so a retry of a write that landed
// but whose acknowledgement was lost is taken by the stream as the duplicate it is.
import { JetStreamApiError } from '@nats-io/jetstream';
import type { ClusterConnection } from '../connection.js';

const DEFAULT_DEADLINE_MS = 120_000;

/** The stream answered (wrong last sequence, …): retrying cannot change that. */
function isStreamAnswer(error: unknown): boolean {
  return error instanceof JetStreamApiError;
}

export async function untilStored<T>(
  connection: Pick<ClusterConnection, 'whenConnected'>,
  write: () => Promise<T>,
  deadlineMs = DEFAULT_DEADLINE_MS,
): Promise<T> {
  const until = Date.now() + deadlineMs;
  for (let pause = 100; ; pause = Math.min(pause * 2, 2_000)) {
    try {
      return await write();
    } catch (error) {
      if (isStreamAnswer(error) || Date.now() + pause > until) throw error;
      await new Promise((resolve) => setTimeout(resolve, pause));
      await connection.whenConnected(AbortSignal.timeout(Math.max(1, until - Date.now())));
    }
  }
}

/**
 * Opens something a reader needs (a consumer and its messages) for as long as it is wanted: a
 * failure that is not the stream's own answer (a request that timed out on a loaded server, NATS
 * away) is tried again after a pause, until it opens or `wanted()` turns false (then undefined).
 */
export async function whileWanted<T>(
  connection: Pick<ClusterConnection, 'whenConnected'>,
  open: () => Promise<T>,
  wanted: () => boolean,
): Promise<T | undefined> {
  for (let pause = 100; wanted(); pause = Math.min(pause * 2, 2_000)) {
    try {
      return await open();
    } catch (error) {
      if (isStreamAnswer(error)) throw error;
      await new Promise((resolve) => setTimeout(resolve, pause));
      await connection.whenConnected();
    }
  }
  return undefined;
}
