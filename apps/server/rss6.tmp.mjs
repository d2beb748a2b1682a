import v8 from 'node:v8'; import vm from 'node:vm';
v8.setFlagsFromString('--expose-gc'); const gc = vm.runInNewContext('gc');
for (const m of process.argv.slice(2)) await import(m);
gc({ type: 'major', execution: 'sync', flavor: 'last-resort' });
await new Promise(r => setTimeout(r, 300));
const mu = process.memoryUsage();
console.log(process.argv.slice(2).join(',').replace(/\.\/dist\//g,'').slice(0,90).padEnd(90), 'rss', (mu.rss/2**20).toFixed(1), 'heapUsed', (mu.heapUsed/2**20).toFixed(1));
