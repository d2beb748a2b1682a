import v8 from 'node:v8';
for (const m of process.argv.slice(2)) await import(m);
globalThis.gc(); globalThis.gc();
const mu = process.memoryUsage();
const ns = v8.getHeapSpaceStatistics().find(s => s.space_name === 'new_space');
console.log(process.argv.slice(2).join(',').slice(0,60).padEnd(60), 'rss', (mu.rss/2**20).toFixed(1), 'heapUsed', (mu.heapUsed/2**20).toFixed(1), 'new_space', (ns.space_size/2**20).toFixed(1));
