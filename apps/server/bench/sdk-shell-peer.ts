// The tool-call bench's peer: the AI SDK's own loop (streamText with stopWhen) over the same
// scripted model, its `shell` tool running each command through child_process (no sandbox, no
// terminal). Run as `sdk-shell-peer.ts BASE_URL CALLS LEVEL…`: for each level (concurrent runs),
// prints one JSON line with this process's CPU, the wall time, the runs that ended with the model's
// stop and the event loop's delay p99 meanwhile.
import { execFile } from 'node:child_process';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { stepCountIs, streamText, tool } from 'ai';
import { z } from 'zod';
import { allCpuOf, runPool } from './pool.js';

const [baseUrl = '', callsText = '10', ...levels] = process.argv.slice(2);
const calls = Number(callsText);
const model = createOpenAICompatible({ name: 'scripted', baseURL: baseUrl, apiKey: 'none' })('scripted');

const shell = tool({
  description: 'Run a shell command in the working directory. Returns its output and exit code.',
  inputSchema: z.object({ command: z.string().min(1) }),
  execute: ({ command }) =>
    new Promise<string>((resolve) =>
      execFile('/bin/sh', ['-c', command], (error, stdout, stderr) => {
        const code = error ? ((error as { code?: unknown }).code ?? 1) : 0;
        resolve(`${stdout}${stderr}\n[exit code ${String(code)}]`);
      }),
    ),
});

async function oneRun(): Promise<boolean> {
  const result = streamText({
    model,
    prompt: `calls ${calls}`,
    tools: { shell },
    stopWhen: stepCountIs(calls + 2),
  });
  await result.consumeStream();
  return (await result.finishReason) === 'stop';
}

await oneRun(); // warm: not measured
// With WARM=1 (the tool-call bench's default), every level once more, not measured, as the server gets.
if (process.env['WARM'] === '1') for (const level of levels.map(Number)) await runPool(level, oneRun);
for (const level of levels.map(Number)) {
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  // This process with the commands it reaped, the scripted model's (MODEL_PID) and the bench's (its parent).
  const everything = (): number => allCpuOf(['self', Number(process.env['MODEL_PID']), process.ppid]);
  const [cpu, all] = [process.cpuUsage(), everything()];
  const started = performance.now();
  const stops = await runPool(level, oneRun);
  const wallMs = performance.now() - started;
  const used = process.cpuUsage(cpu);
  delay.disable();
  process.stdout.write(
    `${JSON.stringify({
      level,
      runs: stops.length,
      stops: stops.filter(Boolean).length,
      calls: stops.length * calls,
      cpuMs: (used.user + used.system) / 1000,
      allCpuMs: everything() - all,
      wallMs,
      lagP99Ms: delay.percentile(99) / 1e6,
    })}\n`,
  );
}
