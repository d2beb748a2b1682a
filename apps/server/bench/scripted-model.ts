// The instant model of the tool-call bench, in a process of its own so that its CPU is nobody's: an
// HTTP endpoint speaking OpenAI's chat completions (streamed), as test/fake-llm.ts does. The prompt
// says how many `shell` calls to make ("calls 10"); the model asks for `true 1` … `true N`, one per
// turn, then stops. Prints its base URL, then one line on stderr for each tool result that failed.
import { startFakeLlm, type Turn } from '../test/fake-llm.js';

const succeeded = (turn: Turn): boolean =>
  !turn.isError && (/\[exit code 0\]\s*$/.test(turn.text) || turn.text.trim() === '0');

const model = await startFakeLlm((conversation) => {
  const calls = Number(
    /calls (\d+)/.exec(conversation.find((turn) => turn.role === 'user')?.text ?? '')?.[1],
  );
  const results = conversation.filter((turn) => turn.role === 'tool');
  const last = results.at(-1);
  if (last !== undefined && !succeeded(last)) process.stderr.write(`FAILED ${JSON.stringify(last.text)}\n`);
  if (results.length >= calls) return { text: `ran ${calls} commands\nVERDICT: PASS` };
  return { call: { name: 'shell', args: { command: `true ${results.length + 1}` } } };
});
process.stdout.write(`${model.baseUrl}\n`);
process.once('SIGTERM', () => void model.close().then(() => process.exit(0)));
