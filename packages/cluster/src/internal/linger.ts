// Writes that wait a moment for more to come with them (an event bus batch waiting for its
// session's next events) go out at the latest after their delay, or earlier with the node's next
// write to NATS: `beforeWrite` starts them in the same turn of the event loop, so the client sends
// them with that write in one socket write (one read for nats-server, one for its answers) instead
// of one each. Per connection; nothing waits longer than its own delay.

interface Waiting {
  readonly go: () => void;
  readonly timer: NodeJS.Timeout;
}

const waiting = new WeakMap<object, Set<Waiting>>();

/** Runs `go` after `delayMs`, or at the connection's next `beforeWrite` if that comes first; once. */
export function linger(connection: object, go: () => void, delayMs: number): void {
  let set = waiting.get(connection);
  if (set === undefined) waiting.set(connection, (set = new Set()));
  const entry: Waiting = {
    go,
    timer: setTimeout(() => {
      if (set.delete(entry)) go();
    }, delayMs),
  };
  set.add(entry);
}

/** A write to NATS is about to be made: what lingers goes now, with it. */
export function beforeWrite(connection: object): void {
  const set = waiting.get(connection);
  if (set === undefined || set.size === 0) return;
  const entries = [...set];
  set.clear();
  for (const entry of entries) {
    clearTimeout(entry.timer);
    entry.go();
  }
}
