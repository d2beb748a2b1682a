// A client in its own process that watches every session's output (for the isolation benchmark)
// and prints how many bytes it has received, every 100 ms.
import { connectGateway } from '../src/client.js';

const client = await connectGateway(process.argv[2]!, { token: 'bench' });
await client.subscribe(['pty.*']);
let bytes = 0;
client.onOutput((output) => (bytes += output.data.length));
setInterval(() => process.stdout.write(`${bytes}\n`), 100);
const stop = (): void => void client.close().then(() => process.exit(0));
process.on('SIGTERM', stop);
process.stdin.on('end', stop).resume(); // the benchmark went away
