// [sandbox] end to end: a real server process, the fake provider, and the agent's shell tool under
// real bubblewrap — then the same commands with mode = "off". The probes live in /var/tmp, which
// the sandbox's private /tmp does not hide, so a denied path is denied by the policy itself.
import {
  mkdirSync,
  readlinkSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { connectGateway, type GatewayClient } from '@aleph/gateway/client';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlm, type Brain, type FakeLlm } from '../test/fake-llm.js';
import { CLI, MAIN, runToExit, startServerProcess, type ServerProcess } from '../test/server-process.js';

/** The prompt is a JSON array of shell commands: one `shell` call each, then a stop. */
const runCommands: Brain = (conversation) => {
  const commands = JSON.parse(conversation.find((turn) => turn.role === 'user')?.text ?? '[]') as string[];
  const done = conversation.filter((turn) => turn.role === 'tool').length;
  const next = commands[done];
  if (next === undefined) return { text: 'ran them all\nVERDICT: PASS' };
  if (next.startsWith('read:')) return { call: { name: 'read_file', args: { path: next.slice(5) } } };
  if (next.startsWith('write:'))
    return { call: { name: 'write_file', args: { path: next.slice(6), content: 'model-written' } } };
  if (next.startsWith('goal:'))
    return { call: { name: 'goal', args: { objective: 'probe', gate_command: next.slice(5) } } };
  return { call: { name: 'shell', args: { command: next } } };
};

const SECRETS = {
  ALEPH_TOKEN: 'e2e-gateway-token-0123456789',
  FAKE_PROVIDER_KEY: 'fake-provider-key-secret',
};

let llm: FakeLlm;
let root: string;
let work: string;
let denied: string;
let listener: Server;
let port = 0;
const servers: ServerProcess[] = [];
const clients: GatewayClient[] = [];

beforeAll(async () => {
  llm = await startFakeLlm(runCommands);
  root = realpathSync(mkdtempSync('/var/tmp/aleph-sandbox-e2e-'));
  work = join(root, 'work');
  denied = join(root, 'secrets');
  mkdirSync(work);
  mkdirSync(denied);
  writeFileSync(join(denied, 'token'), 'denied-token-value\n');
  listener = createServer((socket) => socket.end('hello\n'));
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
  port = (listener.address() as { port: number }).port;
});
afterAll(async () => {
  await new Promise((resolve) => listener.close(resolve));
  await llm.close();
  rmSync(root, { recursive: true, force: true });
});
afterEach(async () => {
  await Promise.all(clients.splice(0).map((client) => client.close()));
  for (const server of servers.splice(0)) {
    await server.stop();
    rmSync(server.stateDir, { recursive: true, force: true });
  }
});

const config = (mode: string, extra = '', iterations = 12) => `
[gateway]
port = 0

[agent]
provider = "openai-compatible"
model = "fake-coder"
base_url = "${llm.baseUrl}"
api_key_env = "FAKE_PROVIDER_KEY"
max_iterations = ${iterations}

[power]
inhibit_sleep = false

[sandbox]
mode = "${mode}"
deny_read = ["${denied}"]
${extra}`;

async function start(text: string): Promise<{ server: ServerProcess; client: GatewayClient }> {
  const server = await startServerProcess(text, SECRETS);
  servers.push(server);
  const client = await connectGateway(server.url, { token: server.token });
  clients.push(client);
  return { server, client };
}

const marker = (): string => String(800_000 + Math.floor(Math.random() * 99_999));

/** One agent run of `commands`; the shell outputs in order, and the agent.run / agent.done events. */
async function agentRun(client: GatewayClient, commands: string[], cwd = work) {
  await client.subscribe(['agent.*']);
  const outputs: string[] = [];
  let resolveDone: (event: Record<string, any>) => void = () => {};
  const done = new Promise<Record<string, any>>((resolve) => (resolveDone = resolve));
  client.onEvent((topic, params) => {
    const event = params as Record<string, any>;
    if (topic === 'agent.tool') outputs.push(String(event['output']));
    if (topic === 'agent.done') resolveDone(event);
  });
  const started = await client.request<{ runId: string; sandbox: string }>('agent.run', {
    prompt: JSON.stringify(commands),
    cwd,
  });
  return { started, done: await done, outputs };
}

function probes(sleepMarker: string): string[] {
  return [
    `echo escaped > ${root}/escaped.txt; echo write-exit=$?`,
    `cat ${denied}/token; echo read-exit=$?`,
    `env | grep -E 'ALEPH_|e2e-gateway-token|fake-provider-key' ; echo env-done`,
    `${process.execPath} -e "require('net').connect(${port}, '127.0.0.1').on('data', (d) => console.log('tcp ' + d)).on('error', (e) => console.log('tcp ' + e.code))"`,
    `setsid sleep ${sleepMarker} >/dev/null 2>&1 & until grep -qa ^sleep /proc/$!/cmdline; do :; done; echo escapee-started`,
  ];
}

/** Live `sleep <marker>` processes, from /proc. */
function sleepers(sleepMarker: string): number[] {
  return readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .filter((entry) => {
      try {
        return (
          readFileSync(`/proc/${entry}/cmdline`, 'utf8') === `sleep\0${sleepMarker}\0` &&
          !/\) Z /.test(readFileSync(`/proc/${entry}/stat`, 'utf8'))
        );
      } catch {
        return false;
      }
    })
    .map(Number);
}

describe.skipIf(process.platform !== 'linux')('[sandbox] through a real agent run', () => {
  it('mode = "required": the shell tool is confined and says so', async () => {
    const { server, client } = await start(config('required'));
    expect(server.stdout()).toContain('sandbox: bubblewrap (network off)');
    const sleepMarker = marker();
    try {
      const serverJson = `cat ${server.stateDir}/server.json; echo state-exit=$?`;
      const { started, done, outputs } = await agentRun(client, [...probes(sleepMarker), serverJson]);
      expect(started.sandbox).toBe('bubblewrap');
      expect(done['sandbox']).toBe('bubblewrap');
      expect(done['terminateReason']).toEqual({ kind: 'model_stop' });
      const [write, read, env, tcp, escapee, state] = outputs;
      expect(state).toMatch(/state-exit=1/);
      expect(state).not.toContain(SECRETS.ALEPH_TOKEN);
      expect(write).toMatch(/Read-only file system/);
      expect(readdirSync(root)).not.toContain('escaped.txt');
      expect(read).not.toContain('denied-token-value');
      expect(read).toMatch(/read-exit=1/);
      expect(env).toMatch(/^env-done/m);
      expect(env).not.toMatch(/ALEPH_|e2e-gateway-token|fake-provider-key/);
      expect(tcp).toMatch(/tcp ECONNREFUSED|tcp ENETUNREACH/);
      expect(escapee).toContain('escapee-started');
      await expect.poll(() => sleepers(sleepMarker).length, { timeout: 10_000 }).toBe(0);
    } finally {
      for (const pid of sleepers(sleepMarker)) process.kill(pid, 'SIGKILL');
    }
  });

  it('mode = "off": the same commands run unconfined, but the secrets are still gone from every child', async () => {
    const { server, client } = await start(config('off'));
    expect(server.stdout()).toContain('sandbox: off (sandbox mode is off)');
    const sleepMarker = marker();
    try {
      const serverJson = `cat ${server.stateDir}/server.json; echo state-exit=$?`;
      const { started, done, outputs } = await agentRun(client, [...probes(sleepMarker), serverJson]);
      expect(started.sandbox).toBe('off');
      expect(done['sandbox']).toBe('off');
      const [write, read, env, tcp, , state] = outputs;
      expect(state).toContain(SECRETS.ALEPH_TOKEN); // the server's own token file, unconfined
      expect(write).toMatch(/write-exit=0/);
      expect(readFileSync(join(root, 'escaped.txt'), 'utf8')).toBe('escaped\n');
      expect(read).toContain('denied-token-value');
      expect(env).not.toMatch(/ALEPH_TOKEN|e2e-gateway-token|fake-provider-key/);
      expect(tcp).toContain('tcp hello');
      // Unconfined, the escapee outlives its command: what the PID namespace is for.
      await expect.poll(() => sleepers(sleepMarker).length, { timeout: 10_000 }).toBe(1);
    } finally {
      for (const pid of sleepers(sleepMarker)) process.kill(pid, 'SIGKILL');
      rmSync(join(root, 'escaped.txt'), { force: true });
    }
  });

  it('the model-set gate_command and a `sandbox = true` stop hook run confined; other hooks do not', async () => {
    const hooks = ['confined', 'free']
      .map(
        (name) =>
          `[[stop_hooks]]\nname = "${name}"\ncommand = "touch ${root}/hook-${name}"\n${name === 'confined' ? 'sandbox = true\n' : ''}`,
      )
      .join('\n');
    const { client } = await start(config('required', `\n${hooks}`, 3));
    const verdicts: any[] = [];
    client.onEvent((topic, params) => topic === 'agent.verdict' && verdicts.push((params as any).verdict));
    try {
      await agentRun(client, [`goal:touch ${root}/gate-wrote`]);
      expect(readdirSync(root)).toContain('hook-free');
      expect(readdirSync(root)).not.toContain('hook-confined');
      expect(readdirSync(root)).not.toContain('gate-wrote');
      expect(verdicts).toContainEqual(expect.objectContaining({ kind: 'veto', source: 'goal_gate' }));
    } finally {
      for (const name of ['hook-free', 'hook-confined', 'gate-wrote'])
        rmSync(join(root, name), { force: true });
    }
  });

  it('a `sandbox = true` stop hook keeps the Claude Code contract: CLAUDE_PROJECT_DIR, a readable transcript, no secrets', async () => {
    const hook = join(root, 'sbhook.sh');
    writeFileSync(
      hook,
      [
        'set -euo pipefail',
        'transcript=$(jq -r .transcript_path)',
        '{',
        '  echo "project=$CLAUDE_PROJECT_DIR"',
        `  echo "assistant=$(jq -s '[.[] | select(.type == "assistant")] | length' "$transcript")"`,
        '  echo "beside=$(ls "$(dirname "$transcript")" | wc -l)"',
        "  env | grep -E 'ALEPH_|e2e-gateway-token|fake-provider-key' || echo no-secrets",
        '} > "$CLAUDE_PROJECT_DIR/sbhook.out"',
      ].join('\n'),
    );
    // The store outside /tmp: the sandbox's private /tmp would hide it whatever the policy said.
    const store = join(root, 'store');
    const hooks = `\n[store]\ndir = "${store}"\n\n[[stop_hooks]]\nname = "reader"\ncommand = "bash ${hook}"\nsandbox = true\n`;
    const { client } = await start(config('required', hooks, 3));
    try {
      await agentRun(client, ['echo hi']);
      const lines = readFileSync(join(work, 'sbhook.out'), 'utf8').trim().split('\n');
      expect(lines[0]).toBe(`project=${work}`);
      expect(Number(lines[1]?.replace('assistant=', ''))).toBeGreaterThan(0);
      expect(lines.slice(2)).toEqual(['beside=1', 'no-secrets']); // the rest of the store stays hidden
      expect(readdirSync(store).length).toBeGreaterThan(1);
    } finally {
      rmSync(join(work, 'sbhook.out'), { force: true });
      rmSync(store, { recursive: true, force: true });
    }
  });

  it('the file tools refuse a denied path inside the cwd, and agent.run a cwd under one, whatever the mode', async () => {
    const { client } = await start(config('off'));
    const { outputs } = await agentRun(client, ['read:secrets/token', 'read:work/../secrets/token'], root);
    for (const output of outputs) {
      expect(output).toBe(
        `refused: ${JSON.stringify(output.includes('work/') ? 'work/../secrets/token' : 'secrets/token')} is under ${denied}, denied by [sandbox] deny_read`,
      );
    }
    expect(outputs).toHaveLength(2);
    await expect(client.request('agent.run', { prompt: '[]', cwd: join(denied, '.') })).rejects.toThrow(
      `params.cwd: ${denied} is under ${denied}, denied by [sandbox] deny_read: choose a directory outside it`,
    );
  });

  // The config may hold [gateway] token; a hooks file runs unconfined at the next run.
  it('a project-local aleph.toml is unreadable and its [hooks] files read-only, to the shell and the file tools', async () => {
    const project = join(root, 'local-config');
    mkdirSync(project);
    writeFileSync(join(project, 'hooks.json'), '{"hooks": {}}\n');
    const server = await startServerProcess(
      config('required', '[hooks]\nfiles = ["hooks.json"]\n'),
      SECRETS,
      project,
    );
    servers.push(server);
    const client = await connectGateway(server.url, { token: server.token });
    clients.push(client);
    const { outputs } = await agentRun(
      client,
      [
        'cat aleph.toml; echo cat=$?',
        'echo "{}" > hooks.json; echo w=$?',
        'read:aleph.toml',
        'write:aleph.toml',
        'write:hooks.json',
      ],
      project,
    );
    expect(outputs[0]).not.toMatch(/fake-coder/);
    expect(outputs[1]).toMatch(/Read-only file system/);
    expect(outputs[2]).toBe(
      `refused: "aleph.toml" is under ${project}/aleph.toml, denied by the server's config file`,
    );
    expect(outputs[3]).toMatch(/^refused: "aleph.toml" is under .*, denied by the server's config file$/);
    expect(outputs[4]).toBe('refused: "hooks.json": kept read-only: a [hooks] files entry');
    expect(readFileSync(join(project, 'hooks.json'), 'utf8')).toBe('{"hooks": {}}\n');
    expect(readFileSync(join(project, 'aleph.toml'), 'utf8')).toMatch(/fake-coder/);
  });

  it('a session store under /dev/shm: the server starts (the sandbox has its own /dev), and a command sees nothing of it', async () => {
    const store = mkdtempSync('/dev/shm/aleph-store-');
    try {
      const { client } = await start(config('required', `[store]\ndir = "${store}"\n`));
      const { done, outputs } = await agentRun(client, [`ls ${store} 2>&1; echo listed`]);
      expect(done['sandbox']).toBe('bubblewrap');
      expect(outputs[0]).toMatch(/No such file or directory[\s\S]*listed/);
      expect(readdirSync(store).length).toBeGreaterThan(0); // the run's log is there
    } finally {
      rmSync(store, { recursive: true, force: true });
    }
  });

  // A launcher's leaked descriptor reached the sandboxed command: a write outside the cwd.
  it('a descriptor the server inherited reaches neither the server past its start nor the sandboxed command', async () => {
    const target = join(root, 'fd-target.log');
    writeFileSync(target, '');
    const server = await startServerProcess(config('required'), SECRETS, undefined, target);
    servers.push(server);
    const held = readdirSync(`/proc/${server.child.pid}/fd`).filter((entry) => {
      try {
        return readlinkSync(`/proc/${server.child.pid}/fd/${entry}`) === target;
      } catch {
        return false;
      }
    });
    expect(held).toEqual([]);
    const client = await connectGateway(server.url, { token: server.token });
    clients.push(client);
    const { outputs } = await agentRun(client, [
      '(echo via-fd >&300) 2>/dev/null; echo via-proc >> /proc/self/fd/300; ls -l /proc/self/fd | grep -c fd-target',
    ]);
    expect(outputs[0]).toMatch(/^0$/m);
    expect(readFileSync(target, 'utf8')).toBe('');
  });

  // bwrap is the sandbox's pid 1: its own environ was the server's whole env.
  it("no process in the sandbox has a variable outside the allow-list, bwrap's own /proc/1/environ included", async () => {
    const server = await startServerProcess(config('required'), {
      ...SECRETS,
      OTHER_TOKEN: 'other-token-secret',
    });
    servers.push(server);
    const client = await connectGateway(server.url, { token: server.token });
    clients.push(client);
    const { outputs } = await agentRun(client, [
      "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done | grep -c other-token-secret; echo scanned",
    ]);
    expect(outputs[0]).toMatch(/^0\n(.|\n)*scanned/);
  });

  it("credential stores the server's environment moves out of the home (CLAUDE_CONFIG_DIR, KUBECONFIG, XDG_CONFIG_HOME…) are unreadable", async () => {
    const moved = join(root, 'moved-stores');
    mkdirSync(join(moved, 'claude'), { recursive: true });
    mkdirSync(join(moved, 'xdg', 'gh'), { recursive: true });
    writeFileSync(join(moved, 'claude', '.credentials.json'), 'claude-oauth-secret\n');
    writeFileSync(join(moved, 'kubeconfig'), 'kube-secret\n');
    writeFileSync(join(moved, 'xdg', 'gh', 'hosts.yml'), 'gh-secret\n');
    writeFileSync(join(moved, 'gcp.json'), 'gcp-secret\n');
    const server = await startServerProcess(config('required'), {
      ...SECRETS,
      CLAUDE_CONFIG_DIR: join(moved, 'claude'),
      KUBECONFIG: join(moved, 'kubeconfig'),
      XDG_CONFIG_HOME: join(moved, 'xdg'),
      GOOGLE_APPLICATION_CREDENTIALS: join(moved, 'gcp.json'),
    });
    servers.push(server);
    const client = await connectGateway(server.url, { token: server.token });
    clients.push(client);
    const { outputs } = await agentRun(client, [`grep -rs . ${moved}; echo scanned`]);
    expect(outputs[0]).toMatch(/scanned/);
    expect(outputs[0]).not.toMatch(/secret/);
  });

  it("pty.list shows an agent's sandboxed command as the command, not the sandbox's command line; no stand-in is left", async () => {
    const { client } = await start(config('required'));
    const command = `echo listed-${marker()}`;
    await agentRun(client, [command, command]);
    const listed = (await client.list()).filter((session) => session.command.includes(command));
    expect(listed.map((session) => session.command)).toEqual([
      `[bubblewrap] /bin/sh -c ${command}`,
      `[bubblewrap] /bin/sh -c ${command}`,
    ]);
    // The run kept the stand-ins of the absent .claude and .git from one command to the next; gone at its end.
    expect(readdirSync(work)).not.toContain('.claude');
    expect(readdirSync(work)).not.toContain('.git');
    expect(readdirSync(work)).not.toContain('.yarnrc.yml');
  });

  it('`aleph run` says which sandbox is in force in its header', async () => {
    const { server } = await start(config('required'));
    const result = await runToExit([CLI, 'run', '[]', '--cwd', work], {
      ALEPH_URL: server.url,
      ALEPH_TOKEN: server.token,
    });
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/^run \S+ \(session \S+; sandbox: bubblewrap\)$/m);
  });

  it("a user's terminal never sees ALEPH_TOKEN or the provider key either", async () => {
    const { client } = await start(config('auto'));
    await client.subscribe(['pty.*']);
    let output = '';
    client.onOutput((chunk) => (output += chunk.data.toString()));
    await client.spawn({ command: '/bin/sh', args: ['-c', 'env; echo env-listed'], cols: 200, rows: 50 });
    await expect.poll(() => output, { timeout: 10_000 }).toContain('env-listed');
    expect(output).toMatch(/PATH=/);
    expect(output).not.toMatch(/e2e-gateway-token|fake-provider-key/);
  });
});

describe.skipIf(process.platform !== 'linux')('[sandbox] mode = "auto" without a backend', () => {
  it('starts with one warning, and agent.run and agent.done say sandbox: "off"', async () => {
    const server = await startServerProcess(config('auto'), { ...SECRETS, PATH: '/nonexistent' });
    servers.push(server);
    const client = await connectGateway(server.url, { token: server.token });
    clients.push(client);
    expect(server.stdout()).toContain('sandbox: off (bwrap not found on PATH: install bubblewrap');
    const { started, done } = await agentRun(client, []);
    expect(started.sandbox).toBe('off');
    expect(done['sandbox']).toBe('off');
    expect(server.stderr().match(/no sandbox: bwrap not found/g)).toHaveLength(1);
  });
});

describe('[sandbox] bad configuration stops the server with the key', () => {
  const cases: [string, string, RegExp][] = [
    ['a typo', '[sandbox]\nmdoe = "off"\n', /unknown key \[sandbox\]\.mdoe \(line 4\)/],
    ['a bad mode', '[sandbox]\nmode = "strict"\n', /\[sandbox\]\.mode must be "auto", "required" or "off"/],
    [
      'a missing deny_read path',
      '[sandbox]\ndeny_read = ["/nonexistent/aleph"]\n',
      /\[sandbox\] deny_read: \/nonexistent\/aleph does not exist/,
    ],
    [
      'a relative deny_read path',
      '[sandbox]\ndeny_read = ["secrets"]\n',
      /\[sandbox\] deny_read: "secrets" is not a path on the filesystem/,
    ],
    [
      'required without bwrap',
      '[sandbox]\nmode = "required"\n',
      /\[sandbox\] mode = "required": bwrap not found on PATH: install bubblewrap/,
    ],
  ];
  for (const [name, text, expected] of cases) {
    it(name, async () => {
      const dir = mkdtempSync(join(root, 'config-'));
      writeFileSync(join(dir, 'aleph.toml'), `[gateway]\nport = 0\n${text}`);
      const env = { ALEPH_STATE_DIR: dir, ...(name.includes('bwrap') ? { PATH: '/nonexistent' } : {}) };
      const result = await runToExit([MAIN, '--config', join(dir, 'aleph.toml')], env);
      expect(result.code).toBe(2);
      expect(result.stderr).toMatch(expected);
    });
  }
});
