// A run in the home folder, or in a folder that holds it, is refused unless the config allows it:
// the cwd is writable inside the sandbox, and the home's absent dot files (`~/.profile`,
// `~/.ssh/authorized_keys`, `~/.gitconfig`) made there would run as the user later. Real server
// process, HOME set to a folder of the test's.
import { mkdirSync, mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { connectGateway, type GatewayClient } from '@aleph/gateway/client';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { startFakeLlm, type FakeLlm } from '../test/fake-llm.js';
import { startServerProcess, type ServerProcess } from '../test/server-process.js';

let root = '';
let home = '';
const servers: ServerProcess[] = [];
const clients: GatewayClient[] = [];
let model: FakeLlm;

beforeAll(async () => {
  root = realpathSync(mkdtempSync('/var/tmp/aleph-home-cwd-'));
  home = join(root, 'home');
  mkdirSync(join(home, 'project'), { recursive: true });
  model = await startFakeLlm(() => ({ text: 'done' }));
});
afterEach(async () => {
  await Promise.all(clients.splice(0).map((client) => client.close()));
  for (const server of servers.splice(0)) {
    await server.stop();
    rmSync(server.stateDir, { recursive: true, force: true });
  }
});
afterAll(async () => {
  await model.close();
  rmSync(root, { recursive: true, force: true });
});

async function start(agentExtra = ''): Promise<GatewayClient> {
  const server = await startServerProcess(
    `
[gateway]
port = 0

[agent]
provider = "openai-compatible"
model = "fake-coder"
base_url = "${model.baseUrl}"
max_iterations = 2
${agentExtra}

[power]
inhibit_sleep = false
`,
    { HOME: home },
  );
  servers.push(server);
  const client = await connectGateway(server.url, { token: server.token });
  clients.push(client);
  return client;
}

const WHY =
  'a run makes its cwd writable, and a dot file the model made there (~/.profile, ~/.ssh/authorized_keys, ~/.gitconfig) would run as you later; choose a project directory, or set [agent] allow_home_cwd = true';

it('refuses the home folder and a folder holding it, naming it; a folder inside the home runs', async () => {
  const client = await start();
  await expect(client.request('agent.run', { prompt: 'x', cwd: home })).rejects.toMatchObject({
    code: 'invalid_params',
    message: `params.cwd: ${home} is your home folder: ${WHY}`,
  });
  await expect(client.request('agent.run', { prompt: 'x', cwd: root })).rejects.toMatchObject({
    code: 'invalid_params',
    message: `params.cwd: ${root} holds your home folder (${home}): ${WHY}`,
  });
  await expect(
    client.request('agent.run', { prompt: 'x', cwd: join(home, 'project') }),
  ).resolves.toMatchObject({ runId: expect.any(String) });
}, 120_000);

it('runs in the home folder when [agent] allow_home_cwd = true', async () => {
  const client = await start('allow_home_cwd = true');
  await expect(client.request('agent.run', { prompt: 'x', cwd: home })).resolves.toMatchObject({
    runId: expect.any(String),
  });
}, 120_000);
