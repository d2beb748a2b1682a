// The peer for the echo benchmark: a bare relay doing the same work as the gateway with nothing else
// — a `ws` server on loopback, one `cat` per connection from the same @aleph/pty, each message
// written to it and each output chunk sent back as a binary frame. No protocol, no auth, no flow
// control, no scrollback consumers. Prints its port; stops when its stdin closes.
import { PtyManager } from '@aleph/pty';
import { WebSocketServer } from 'ws';

const manager = new PtyManager({ killStepMs: 100 });
const server = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false });
server.on('listening', () => process.stdout.write(`${(server.address() as { port: number }).port}\n`));
server.on('connection', (socket) => {
  const session = manager.spawn({ command: '/bin/cat', cols: 80, rows: 24 });
  session.onData((chunk) => socket.send(chunk, { binary: true }));
  socket.on('message', (data: Buffer) => session.write(data));
  socket.on('close', () => void manager.close(session.id).catch(() => {}));
});
process.stdin.on('end', () => void manager.closeAll().finally(() => process.exit(0))).resume();
