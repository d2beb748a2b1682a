// Cluster mode end to end: three real server processes on loopback sharing a real nats-server,
// a fake OpenAI-compatible model, and a client on one node. A run submitted anywhere runs on some
// node and every event reaches the client; a node SIGKILLed mid-run loses it to another node,
// which resumes from the log without repeating a completed step.
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectCluster, JetStreamRunQueue } from '@aleph/cluster';
import { natsServerBinary, startNatsServer, type NatsServer } from '@aleph/cluster/testing';
import { connectGateway, type GatewayClient } from '@aleph/gateway/client';
import { afterAll, afterEach, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { startFakeLlm, type Brain, type FakeLlm } from '../test/fake-llm.js';
import {
  clusterNodeConfig,
  MAIN,
  runToExit,
  startServerProcess,
  type ServerProcess,
} from '../test/server-process.js';

const binary = natsServerBinary();
if (binary === undefined && process.env.CI)
  throw new Error('nats-server is missing (Debian package nats-server)');

const TOKEN = 'cluster-shared-token-0123456789';
/** A provider key the nodes read from their environment (`api_key_env`): it must reach no stream. */
const PROVIDER_KEY = 'sk-cluster-e2e-provider-key-9f8e7d6c5b4a';
const providerKey = { ALEPH_E2E_PROVIDER_KEY: PROVIDER_KEY };
const STEPS = 10;
/** A NATS user's nkey (its seed is the secret a node reads from `[cluster] nkey_file`). */
const NKEY_SEED = 'SUAF2D6FHOJCVO5VF5MA3NRJM2NTJWWSXVUCJUXKN4664GM6LOV4GREIAA';
const NKEY_PUBLIC = 'UCG5VNBF5RU2K6URCC6CUGFGNBZATQNKUWRXRIX6IEINFAIH7A7ZZ6DS';

/** Ten shell steps (each takes a moment), then a stop. */
const tenSteps: Brain = (conversation) => {
  // Steps that completed (a step cut short by a lost node has no output and is run again).
  const done = conversation.filter((turn) => turn.role === 'tool' && /step-\d+/.test(turn.text)).length;
  if (done >= STEPS) return { text: `ran ${done} steps\nVERDICT: PASS` };
  return { call: { name: 'shell', args: { command: `sleep 0.2; echo step-${done + 1}` } } };
};

/** Three steps, the first a command of 8 s, then a stop (any tool result counts as a step). */
const slowSteps: Brain = (conversation) => {
  const done = conversation.filter((turn) => turn.role === 'tool').length;
  if (done >= 3) return { text: `ran ${done} steps\nVERDICT: PASS` };
  return {
    call: { name: 'shell', args: { command: `${done === 0 ? 'sleep 8; ' : ''}echo slow-${done + 1}` } },
  };
};
const SLOW = 'three slow steps';
/** A run whose prompt is `RUN: <command>`: that one command, then a stop. */
const RUN = 'RUN: ';
const oneCommand: Brain = (conversation) => {
  const command = conversation.find((turn) => turn.role === 'user')?.text.slice(RUN.length) ?? '';
  return conversation.some((turn) => turn.role === 'tool')
    ? { text: 'ran it\nVERDICT: PASS' }
    : { call: { name: 'shell', args: { command } } };
};
/** `slowSteps` for the run of that prompt, `oneCommand` for a `RUN:`, `tenSteps` for the others. */
const brain: Brain = (conversation, request) =>
  conversation.some((turn) => turn.role === 'user' && turn.text.includes(SLOW))
    ? slowSteps(conversation, request)
    : conversation.some((turn) => turn.role === 'user' && turn.text.startsWith(RUN))
      ? oneCommand(conversation, request)
      : tenSteps(conversation, request);

/** Processes whose working folder is in `folder` (a run's commands), as `pid command`. */
function processesIn(folder: string): string[] {
  const found: string[] = [];
  for (const pid of readdirSync('/proc').filter((entry) => /^\d+$/.test(entry))) {
    try {
      const cwd = readlinkSync(`/proc/${pid}/cwd`);
      if (cwd === folder || cwd.startsWith(`${folder}/`))
        found.push(`${pid} ${readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ').trim()}`);
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return found;
}

/** The steps whose results reached the log, in order (a step cut short by a lost node has none). */
const stepsInLog = (events: readonly { type: string; output?: string }[]): (string | undefined)[] =>
  events
    .map((event) => (event.type === 'tool_result' ? /step-\d+/.exec(event.output ?? '')?.[0] : undefined))
    .filter((step) => step !== undefined);

describe.skipIf(binary === undefined)(
  'cluster mode across three server processes',
  { timeout: 180_000 },
  () => {
    let nats: NatsServer;
    let llm: FakeLlm;
    let work: string;
    const servers: ServerProcess[] = [];
    const clients: GatewayClient[] = [];
    const clusters = new Set<string>();

    const config = (node: string, name: string, leaseTtlSecs = 2): string => {
      clusters.add(name); // its streams are checked and removed after the test
      return `${clusterNodeConfig({
        token: TOKEN,
        natsUrl: nats.url,
        name,
        node,
        leaseTtlSecs,
        agent: `[agent]\nprovider = "openai-compatible"\nmodel = "fake-coder"\nbase_url = "${llm.baseUrl}"\napi_key_env = "ALEPH_E2E_PROVIDER_KEY"\nmax_iterations = 30\n`,
      })}max_runs = 2\n`;
    };

    /** The cluster part of a node's /healthz. */
    const healthOf = async (node: ServerProcess): Promise<{ name: string; node: string; health: string }> =>
      (
        (await (await fetch(`${node.url.replace(/^ws/, 'http').replace(/\/ws$/, '')}/healthz`)).json()) as {
          cluster: { name: string; node: string; health: string };
        }
      ).cluster;

    const startNodes = async (
      name: string,
      more = '',
      count = 3,
      leaseTtlSecs = 2,
    ): Promise<ServerProcess[]> => {
      const started = await Promise.all(
        ['a', 'b', 'c']
          .slice(0, count)
          .map((node) => startServerProcess(config(node, name, leaseTtlSecs) + more, providerKey)),
      );
      servers.push(...started);
      return started;
    };
    const client = async (server: ServerProcess): Promise<GatewayClient> => {
      const connected = await connectGateway(server.url, { token: server.token });
      clients.push(connected);
      return connected;
    };

    beforeAll(async () => {
      nats = await startNatsServer();
      llm = await startFakeLlm(brain);
      work = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-cluster-e2e-')));
    });
    afterEach(async () => {
      await Promise.all(clients.splice(0).map((connected) => connected.close()));
      for (const server of servers.splice(0)) {
        await server.stop();
        rmSync(server.stateDir, { recursive: true, force: true });
      }
      // No command of a run left on any node (they run in the work folder), whatever ended its node.
      await expect.poll(() => processesIn(work), { timeout: 30_000 }).toEqual([]);
      // No consumer left on the cluster's streams once its nodes are gone (a killed or stopped node's
      // lapse within seconds); then its streams and buckets go, and none is left.
      const probe = await connectCluster({
        servers: [nats.url],
        name: 'probe',
        node: `probe-${process.pid}`,
      });
      try {
        for (const name of clusters) {
          const streams = async (): Promise<string[]> => {
            const names: string[] = [];
            for await (const info of probe.jsm.streams.list())
              if (info.config.name.startsWith(`${name}_`) || info.config.name.startsWith(`KV_${name}_`))
                names.push(info.config.name);
            return names;
          };
          const consumers = async (): Promise<string[]> => {
            const left: string[] = [];
            for (const stream of await streams())
              for await (const consumer of probe.jsm.consumers.list(stream))
                if (consumer.config.durable_name === undefined) left.push(`${stream}/${consumer.name}`);
            return left;
          };
          await expect.poll(consumers, { timeout: 30_000, interval: 500 }).toEqual([]);
          for (const stream of await streams()) await probe.jsm.streams.delete(stream);
          expect(await streams()).toEqual([]);
        }
        clusters.clear();
      } finally {
        await probe.close();
      }
    }, 120_000);
    afterAll(async () => {
      await llm?.close();
      await nats?.dispose();
      rmSync(work, { recursive: true, force: true });
    });

    it('refuses to start a node without a gateway token: the calls nodes forward each other are authenticated with it', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'aleph-cluster-no-token-'));
      onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
      const text = config('a', 'e2e0').replace(/^token = .*$/m, '');
      expect(text).not.toMatch(/token/);
      writeFileSync(join(dir, 'aleph.toml'), text);
      const result = await runToExit([MAIN, '--config', join(dir, 'aleph.toml')], {
        ALEPH_STATE_DIR: dir,
        ALEPH_TOKEN: '',
      });
      expect(result.code).not.toBe(0);
      expect(result.stderr).toContain(
        '[cluster] needs [gateway] token (or ALEPH_TOKEN), the same on every node: the calls nodes forward each other are authenticated with it',
      );
      clusters.delete('e2e0'); // it never reached NATS
    });

    it("keeps the cluster's NATS credentials from the model: [cluster] nkey_file is denied to its sandboxed commands and its file tools", async () => {
      // Out of /tmp (a sandboxed command has a private one): what it cannot read, the policy denies.
      const dir = realpathSync(mkdtempSync('/var/tmp/aleph-cluster-nkey-'));
      onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
      const seedFile = join(dir, 'node.nk');
      writeFileSync(seedFile, `${NKEY_SEED}\n`, { mode: 0o600 });
      writeFileSync(join(dir, 'beside.txt'), 'readable-beside\n');
      const natsConfig = join(dir, 'nats.conf');
      writeFileSync(natsConfig, `authorization { users = [ { nkey: "${NKEY_PUBLIC}" } ] }\n`);
      // A NATS that admits only that nkey: the node joins with it.
      const guarded = await startNatsServer({ extraArgs: ['-c', natsConfig] });
      onTestFinished(() => guarded.dispose());
      const commands = [
        { name: 'shell', args: { command: `cat ${seedFile}; echo cat-exit=$?; cat ${dir}/beside.txt` } },
        { name: 'read_file', args: { path: 'node.nk' } },
      ];
      const model = await startFakeLlm((conversation) => {
        const done = conversation.filter((turn) => turn.role === 'tool').length;
        const next = commands[done];
        return next === undefined ? { text: 'done\nVERDICT: PASS' } : { call: next };
      });
      onTestFinished(() => model.close());
      const text = `${clusterNodeConfig({
        token: TOKEN,
        natsUrl: guarded.url,
        name: 'e2e6',
        node: 'a',
        leaseTtlSecs: 2,
        agent: `[agent]\nprovider = "openai-compatible"\nmodel = "fake-coder"\nbase_url = "${model.baseUrl}"\napi_key_env = "ALEPH_E2E_PROVIDER_KEY"\n`,
      })}nkey_file = "${seedFile}"\n`.replace('mode = "off"', 'mode = "required"');
      const node = await startServerProcess(text, providerKey);
      servers.push(node);
      expect(await healthOf(node)).toEqual({ name: 'e2e6', node: 'a', health: 'ok' });
      const viewer = await client(node);
      await viewer.subscribe(['agent.*']);
      const outputs: string[] = [];
      let finished = false;
      viewer.onEvent((topic, params) => {
        if (topic === 'agent.tool') outputs.push(String((params as { output?: unknown }).output));
        if (topic === 'agent.done') finished = true;
      });
      const started = await viewer.request<{ sandbox: string }>('agent.run', {
        prompt: 'read it',
        cwd: dir,
      });
      expect(started.sandbox).not.toBe('off');
      await expect.poll(() => finished, { timeout: 60_000 }).toBe(true);
      expect(outputs).toHaveLength(2);
      expect(outputs[0]).not.toContain(NKEY_SEED);
      expect(outputs[0]).toMatch(/cat-exit=1/);
      expect(outputs[0]).toContain('readable-beside'); // the folder is readable: the file is denied
      expect(outputs[1]).toBe(
        `refused: "node.nk" is under ${seedFile}, denied by [cluster] nkey_file (the cluster's NATS credentials)`,
      );
      await node.stop();
    });

    it("distrusts, on a node that joins later, a project's hooks file a run changed on another node: its hooks run in the sandbox", async () => {
      const project = join(work, 'shared-project');
      const sub = join(project, 'sub');
      mkdirSync(project, { recursive: true });
      const pwned = join(work, 'cluster-hooks-ran-outside');
      const hooks = `{"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"echo ran >> hook-ran; touch ${pwned}"}]}]}}`;
      const sandboxed = async (node: string): Promise<ServerProcess> => {
        const started = await startServerProcess(
          config(node, 'writes').replace('[sandbox]\nmode = "off"', '[sandbox]\nmode = "required"'),
          providerKey,
        );
        servers.push(started);
        return started;
      };
      const runOn = async (node: ServerProcess, cwd: string, prompt: string): Promise<string[]> => {
        const viewer = await client(node);
        await viewer.subscribe(['agent.*']);
        const warnings: string[] = [];
        let runId = '';
        const done = new Promise<void>((resolve) =>
          viewer.onEvent((topic, params) => {
            const event = params as { runId?: string; kind?: string; message?: string };
            if (event.runId !== runId) return;
            if (topic === 'agent.hook' && event.kind === 'warning') warnings.push(String(event.message));
            if (topic === 'agent.done') resolve();
          }),
        );
        ({ runId } = await viewer.request<{ runId: string }>('agent.run', { prompt, cwd }));
        await done;
        return warnings;
      };
      const [a] = await Promise.all([sandboxed('a'), sandboxed('b')]);
      await runOn(
        a,
        project,
        `${RUN}mkdir -p sub/.claude && printf '%s' '${hooks}' > sub/.claude/settings.json && echo planted`,
      );
      expect(existsSync(join(sub, '.claude', 'settings.json'))).toBe(true);
      for (const node of servers.splice(0)) {
        await node.stop();
        rmSync(node.stateDir, { recursive: true, force: true });
      }
      // A node with a state dir of its own that knew nothing of that run: it reads the cluster's.
      const warnings = await runOn(await sandboxed('c'), sub, `${RUN}echo second`);
      expect(warnings).toEqual([
        expect.stringMatching(
          /^\.claude\/settings\.json: changed during agent run \S+ in .*, whose commands could write there: its hooks run in the sandbox/,
        ),
      ]);
      expect(readFileSync(join(sub, 'hook-ran'), 'utf8')).toBe('ran\n'); // it ran, confined
      expect(existsSync(pwned)).toBe(false);
    });

    it('runs a run submitted on one node somewhere, and its client sees every event and the model’s stop; its spans name the node', async () => {
      const bodies: {
        resourceSpans: {
          resource: { attributes: { key: string; value: { stringValue?: string } }[] };
          scopeSpans: { spans: { name: string }[] }[];
        }[];
      }[] = [];
      const collector = createServer((request, response) => {
        let raw = '';
        request.on('data', (chunk) => (raw += chunk));
        request.on('end', () => {
          if (request.url === '/v1/traces') bodies.push(JSON.parse(raw));
          response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
        });
      });
      await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve));
      onTestFinished(() => new Promise<void>((resolve) => collector.close(() => resolve())));
      const { port } = collector.address() as AddressInfo;
      const nodes = await startNodes(
        'e2e1',
        `\n[telemetry]\nendpoint = "http://127.0.0.1:${port}/v1/traces"\n`,
      );
      // Each node's start lines say it is one node of the cluster, and which.
      for (const [index, node] of nodes.entries())
        await expect
          .poll(() => node.stdout())
          .toContain(`cluster: e2e1, node ${'abc'[index]}, NATS ${nats.url}\n`);
      const a = nodes[0];
      const viewer = await client(a as ServerProcess);
      await viewer.subscribe(['agent.*']);
      const events: { topic: string; params: Record<string, unknown> }[] = [];
      viewer.onEvent((topic, params) => events.push({ topic, params: params as Record<string, unknown> }));
      const { runId } = await viewer.request<{ runId: string }>('agent.run', {
        prompt: 'ten steps',
        cwd: work,
      });
      await expect
        .poll(() => events.find((event) => event.topic === 'agent.done' && event.params['runId'] === runId), {
          timeout: 60_000,
        })
        .toBeDefined();
      const done = events.find((event) => event.topic === 'agent.done')?.params;
      expect((done?.['terminateReason'] as { kind: string }).kind).toBe('model_stop');
      const tools = events.filter((event) => event.topic === 'agent.tool' && event.params['runId'] === runId);
      expect(tools.map((event) => /step-\d+/.exec(String(event.params['output']))?.[0])).toEqual(
        Array.from({ length: STEPS }, (_, index) => `step-${index + 1}`),
      );
      // Every node lists it and serves its history.
      for (const server of servers) {
        const other = await client(server);
        const listed = await other.request<{ runId: string; state: string }[]>('agent.list', {});
        expect(listed.find((run) => run.runId === runId)?.state).toBe('done');
      }
      // No secret in any stream of the cluster (its events, logs, runs, terminals and buckets): the
      // provider key went to the model (so it was in use) and nowhere else; the gateway token neither.
      expect(
        llm.requests.some((request) => String(request.headers['authorization']).includes(PROVIDER_KEY)),
      ).toBe(true);
      const probe = await connectCluster({
        servers: [nats.url],
        name: 'probe',
        node: `probe-${process.pid}`,
      });
      try {
        const streams: string[] = [];
        for await (const info of probe.jsm.streams.list())
          if (/^(KV_)?e2e1_/.test(info.config.name)) streams.push(info.config.name);
        expect(streams).toEqual(expect.arrayContaining(['e2e1_events', 'e2e1_sessions', 'e2e1_runs']));
        let scanned = 0;
        for (const stream of streams) {
          const { state } = await probe.jsm.streams.info(stream);
          for (let seq = state.first_seq; seq <= state.last_seq && state.messages > 0; seq++) {
            const message = await probe.jsm.streams.getMessage(stream, { seq }).catch(() => undefined);
            if (message === undefined || message === null) continue; // deleted (a work-queue run taken, an old entry)
            const text = `${message.subject} ${message.header === undefined ? '' : [...message.header].join(' ')} ${Buffer.from(message.data).toString('latin1')}`;
            for (const secret of [
              PROVIDER_KEY,
              TOKEN,
              Buffer.from(PROVIDER_KEY).toString('base64').slice(0, 24),
            ])
              expect(text.includes(secret), `${secret.slice(0, 8)}… in ${stream} #${seq}`).toBe(false);
            scanned += 1;
          }
        }
        expect(scanned).toBeGreaterThan(STEPS);
      } finally {
        await probe.close();
      }
      // Shutdown sends the buffered spans: the run's span names the node that ran it, and the cluster.
      for (const node of nodes) await node.stop('SIGTERM');
      const runSpans = bodies.flatMap((body) =>
        body.resourceSpans.flatMap((resource) => {
          const attribute = (key: string) =>
            resource.resource.attributes.find((a) => a.key === key)?.value.stringValue;
          return resource.scopeSpans.flatMap((scope) =>
            scope.spans
              .filter((span) => span.name === 'aleph.run')
              .map(() => ({
                node: attribute('service.instance.id'),
                cluster: attribute('aleph.cluster.name'),
              })),
          );
        }),
      );
      // One span per node that held the run: one, unless a lease lapsed under load and another
      // node resumed it (the run itself was checked above: every step once, the model's stop).
      expect(runSpans.length).toBeGreaterThanOrEqual(1);
      for (const span of runSpans) {
        expect(span.cluster).toBe('e2e1');
        expect(['a', 'b', 'c']).toContain(span.node);
      }
    });

    it.each([
      ['is SIGKILLed', 'SIGKILL', 'e2e2'],
      ['shuts down (SIGTERM: it hands the run back)', 'SIGTERM', 'e2e2t'],
    ] as const)(
      'moves a run whose node %s mid-run to another node, which finishes it without repeating a step',
      async (_how, signal, name) => {
        const nodes = await startNodes(name);
        const probe = await connectCluster({
          servers: [nats.url],
          name,
          node: 'probe',
          leaseTtlSecs: 2,
        });
        const queue = await JetStreamRunQueue.open(probe, { secret: TOKEN });
        try {
          const front = nodes[0] as ServerProcess;
          const viewer = await client(front);
          await viewer.subscribe(['agent.*']);
          const events: { topic: string; params: Record<string, unknown> }[] = [];
          viewer.onEvent((topic, params) =>
            events.push({ topic, params: params as Record<string, unknown> }),
          );
          const { runId } = await viewer.request<{ runId: string }>('agent.run', {
            prompt: 'ten steps',
            cwd: work,
          });
          const toolsSeen = () =>
            events.filter((event) => event.topic === 'agent.tool' && event.params['runId'] === runId);
          await expect.poll(() => toolsSeen().length, { timeout: 60_000 }).toBeGreaterThanOrEqual(5);
          const holder = (await queue.holder(runId))?.node;
          expect(holder).toBeDefined();
          const victim = nodes[['a', 'b', 'c'].indexOf(holder as string)] as ServerProcess;
          let viewerNode = front;
          if (victim === front) {
            // The client's own node dies: it reconnects to another and follows the run there.
            viewerNode = nodes.find((node) => node !== victim) as ServerProcess;
          }
          const killedAt = Date.now();
          await victim.stop(signal);
          const follower = viewerNode === front ? viewer : await client(viewerNode);
          if (follower !== viewer) {
            await follower.subscribe(['agent.*']);
            follower.onEvent((topic, params) =>
              events.push({ topic, params: params as Record<string, unknown> }),
            );
          }
          await expect
            .poll(
              () => events.find((event) => event.topic === 'agent.done' && event.params['runId'] === runId),
              {
                timeout: 60_000,
              },
            )
            .toBeDefined();
          const newHolderStepAt = events.findIndex(
            (event) => event.topic === 'agent.step' && event.params['runId'] === runId,
          );
          expect(newHolderStepAt).toBeGreaterThanOrEqual(0);
          const done = events.find(
            (event) => event.topic === 'agent.done' && event.params['runId'] === runId,
          )?.params;
          expect((done?.['terminateReason'] as { kind: string }).kind).toBe('model_stop');
          expect(Date.now() - killedAt).toBeLessThan(60_000);
          // The log holds each completed step once: tool results of step-1..step-10, no step twice.
          const history = await follower.request<{ events: { type: string; output?: string }[] }>(
            'agent.history',
            {
              sessionId: runId,
            },
          );
          const outputs = stepsInLog(history.events);
          expect(outputs).toEqual(Array.from({ length: STEPS }, (_, index) => `step-${index + 1}`));
          expect(history.events.filter((event) => event.type === 'user')).toHaveLength(1);
        } finally {
          await queue.close();
          await probe.close();
        }
      },
    );

    it('runs from the start, once, a run whose node died after taking it and before logging anything', async () => {
      const nodes = await startNodes('e2e5');
      const probe = await connectCluster({
        servers: [nats.url],
        name: 'e2e5',
        node: 'probe',
        leaseTtlSecs: 2,
      });
      const queue = await JetStreamRunQueue.open(probe, { secret: TOKEN });
      // The first node to start the run waits in its SessionStart hook (before the run's first
      // append) until it is killed; whoever runs the session's start again goes straight on.
      const cwd = join(work, 'first-append');
      mkdirSync(join(cwd, '.claude'), { recursive: true });
      const hook =
        'echo start >> "$CLAUDE_PROJECT_DIR/.starts"; ' +
        'if mkdir "$CLAUDE_PROJECT_DIR/.held" 2>/dev/null; then echo $$ > "$CLAUDE_PROJECT_DIR/.held/pid"; exec sleep 60; fi';
      writeFileSync(
        join(cwd, '.claude', 'settings.json'),
        JSON.stringify({ hooks: { SessionStart: [{ hooks: [{ type: 'command', command: hook }] }] } }),
      );
      try {
        const watcher = await client(nodes[0] as ServerProcess);
        await watcher.subscribe(['agent.*']);
        const events: { topic: string; params: Record<string, unknown> }[] = [];
        watcher.onEvent((topic, params) => events.push({ topic, params: params as Record<string, unknown> }));
        const requestsBefore = llm.requests.length;
        const { runId } = await watcher.request<{ runId: string }>('agent.run', { prompt: 'ten steps', cwd });
        const heldPid = join(cwd, '.held', 'pid');
        await expect
          .poll(() => existsSync(heldPid) && readFileSync(heldPid, 'utf8').endsWith('\n'), {
            timeout: 60_000,
          })
          .toBe(true);
        const holder = (await queue.holder(runId))?.node ?? '';
        expect(['a', 'b', 'c']).toContain(holder);
        const victim = nodes[['a', 'b', 'c'].indexOf(holder)] as ServerProcess;
        // Nothing of the run is in its log yet, and the model was not asked.
        expect(
          (
            await watcher.request<{ events: unknown[] }>('agent.history', { sessionId: runId }).catch(() => ({
              events: [],
            }))
          ).events,
        ).toEqual([]);
        expect(llm.requests.length).toBe(requestsBefore);
        await victim.stop('SIGKILL');
        process.kill(Number(readFileSync(heldPid, 'utf8')), 'SIGKILL'); // its hook, orphaned
        const follower =
          victim === nodes[0]
            ? await client(nodes.find((node) => node !== victim) as ServerProcess)
            : watcher;
        if (follower !== watcher) {
          await follower.subscribe(['agent.*']);
          follower.onEvent((topic, params) =>
            events.push({ topic, params: params as Record<string, unknown> }),
          );
        }
        await expect
          .poll(
            () => events.find((event) => event.topic === 'agent.done' && event.params['runId'] === runId),
            {
              timeout: 90_000,
            },
          )
          .toBeDefined();
        const done = events.find((event) => event.topic === 'agent.done' && event.params['runId'] === runId);
        expect((done?.params['terminateReason'] as { kind: string }).kind).toBe('model_stop');
        await new Promise((resolve) => setTimeout(resolve, 3_000)); // anything late had time to land
        const history = await follower.request<{
          events: { type: string; content?: string; output?: string }[];
        }>('agent.history', { sessionId: runId });
        // One start: the prompt once, then each step once, and one end.
        expect(history.events.filter((event) => event.type === 'user')).toEqual([
          expect.objectContaining({ content: 'ten steps' }),
        ]);
        expect(stepsInLog(history.events)).toEqual(
          Array.from({ length: STEPS }, (_, index) => `step-${index + 1}`),
        );
        expect(history.events.filter((event) => event.type === 'terminate')).toHaveLength(1);
        expect(
          events.filter((event) => event.topic === 'agent.done' && event.params['runId'] === runId),
        ).toHaveLength(1);
        // The session started twice (the dead node's start, then the one that ran it), and the
        // model was asked once per step and once for the stop.
        expect(readFileSync(join(cwd, '.starts'), 'utf8').trim().split('\n')).toHaveLength(2);
        expect(llm.requests.length - requestsBefore).toBe(STEPS + 1);
      } finally {
        await queue.close();
        await probe.close();
      }
    });

    it('fences a node stopped past its lease: the run finishes elsewhere and the old node never appends again', async () => {
      const nodes = await startNodes('e2e3');
      const probe = await connectCluster({
        servers: [nats.url],
        name: 'e2e3',
        node: 'probe',
        leaseTtlSecs: 2,
      });
      const queue = await JetStreamRunQueue.open(probe, { secret: TOKEN });
      try {
        const events: { topic: string; params: Record<string, unknown> }[] = [];
        const { runId } = await (
          await client(nodes[0] as ServerProcess)
        ).request<{ runId: string }>('agent.run', {
          prompt: 'ten steps',
          cwd: work,
        });
        await expect.poll(async () => (await queue.holder(runId))?.node, { timeout: 60_000 }).toBeDefined();
        const holder = (await queue.holder(runId))?.node ?? '';
        const stopped = nodes[['a', 'b', 'c'].indexOf(holder)] as ServerProcess;
        const watcher = await client(nodes.find((node) => node !== stopped) as ServerProcess);
        await watcher.subscribe(['agent.*']);
        watcher.onEvent((topic, params) => events.push({ topic, params: params as Record<string, unknown> }));
        await expect
          .poll(() => events.filter((event) => event.topic === 'agent.tool').length, { timeout: 60_000 })
          .toBeGreaterThanOrEqual(2);
        stopped.child.kill('SIGSTOP');
        await expect
          .poll(async () => (await queue.holder(runId))?.node, { timeout: 30_000 })
          .not.toBe(holder);
        stopped.child.kill('SIGCONT');
        await expect
          .poll(
            () => events.find((event) => event.topic === 'agent.done' && event.params['runId'] === runId),
            {
              timeout: 60_000,
            },
          )
          .toBeDefined();
        await new Promise((resolve) => setTimeout(resolve, 3_000)); // the old node had time to try
        const history = await watcher.request<{ events: { type: string; output?: string }[] }>(
          'agent.history',
          {
            sessionId: runId,
          },
        );
        const outputs = stepsInLog(history.events);
        expect(outputs).toEqual(Array.from({ length: STEPS }, (_, index) => `step-${index + 1}`));
        expect(history.events.filter((event) => event.type === 'terminate')).toHaveLength(1);
        expect(
          events.filter((event) => event.topic === 'agent.done' && event.params['runId'] === runId),
        ).toHaveLength(1);
      } finally {
        await queue.close();
        await probe.close();
      }
    });

    /** A client of each node, subscribed to agent.*, with the events each received in order. */
    const watchEach = async (
      nodes: readonly ServerProcess[],
    ): Promise<{ topic: string; params: Record<string, unknown> }[][]> =>
      await Promise.all(
        nodes.map(async (node) => {
          const watcher = await client(node);
          await watcher.subscribe(['agent.*']);
          const seen: { topic: string; params: Record<string, unknown> }[] = [];
          watcher.onEvent((topic, params) => seen.push({ topic, params: params as Record<string, unknown> }));
          return seen;
        }),
      );
    const ofRun = (
      seen: readonly { topic: string; params: Record<string, unknown> }[],
      runId: string,
      topic: string,
    ): Record<string, unknown>[] =>
      seen
        .filter((event) => event.topic === topic && event.params['runId'] === runId)
        .map((event) => event.params);

    it('a node stopped past its lease during a command publishes nothing of that run once it continues: one agent.done, no stale agent.tool', async () => {
      const nodes = await startNodes('e2e6', '', 2);
      const probe = await connectCluster({
        servers: [nats.url],
        name: 'e2e6',
        node: 'probe',
        leaseTtlSecs: 2,
      });
      const queue = await JetStreamRunQueue.open(probe, { secret: TOKEN });
      let stopped: ServerProcess | undefined;
      try {
        const seen = await watchEach(nodes);
        const { runId } = await (
          await client(nodes[0] as ServerProcess)
        ).request<{ runId: string }>('agent.run', { prompt: SLOW, cwd: work });
        // Its first command is under way on the node holding the run: that node stops, and stays
        // stopped until another node has finished the run (and its command has ended meanwhile).
        await expect
          .poll(() => (seen[0] ?? []).some((event) => event.topic === 'agent.act'), { timeout: 60_000 })
          .toBe(true);
        const holder = (await queue.holder(runId))?.node ?? '';
        const victim = nodes[['a', 'b'].indexOf(holder)] as ServerProcess;
        const other = seen[['a', 'b'].indexOf(holder) === 0 ? 1 : 0] ?? [];
        await new Promise((resolve) => setTimeout(resolve, 500));
        stopped = victim;
        victim.child.kill('SIGSTOP');
        await expect.poll(() => ofRun(other, runId, 'agent.done'), { timeout: 90_000 }).toHaveLength(1);
        // Its command ended meanwhile: the stopped node finds its result when it continues.
        await expect.poll(() => processesIn(work), { timeout: 30_000 }).toEqual([]);
        victim.child.kill('SIGCONT');
        stopped = undefined;
        await new Promise((resolve) => setTimeout(resolve, 5_000)); // the old node had time to say something
        const history = await (
          await client(nodes[0] as ServerProcess)
        ).request<{ events: { type: string }[] }>('agent.history', { sessionId: runId });
        expect(history.events.filter((event) => event.type === 'terminate')).toHaveLength(1);
        for (const events of seen) {
          // One end, the model's stop, and nothing of the run after it.
          const done = ofRun(events, runId, 'agent.done');
          expect(done.map((params) => (params['terminateReason'] as { kind: string }).kind)).toEqual([
            'model_stop',
          ]);
          const last = events.findLastIndex((event) => event.params['runId'] === runId);
          expect(events[last]?.topic).toBe('agent.done');
        }
      } finally {
        stopped?.child.kill('SIGCONT');
        await queue.close();
        await probe.close();
      }
    });

    it('tells every client the end of a run whose nats-server was killed during a command and came back past the lease, once', async () => {
      const nodes = await startNodes('e2e7', '', 2, 6); // lease_ttl_secs = 6
      const seen = await watchEach(nodes);
      const { runId } = await (
        await client(nodes[0] as ServerProcess)
      ).request<{ runId: string }>('agent.run', { prompt: SLOW, cwd: work });
      await expect
        .poll(() => (seen[0] ?? []).some((event) => event.topic === 'agent.act'), { timeout: 60_000 })
        .toBe(true);
      await new Promise((resolve) => setTimeout(resolve, 500));
      // A crash during the command, down past the lease TTL: the run goes on where it was, or
      // another node takes it over; either way its end reaches every client, once.
      await nats.restart(8_000, 'SIGKILL');
      for (const events of seen)
        await expect.poll(() => ofRun(events, runId, 'agent.done'), { timeout: 90_000 }).toHaveLength(1);
      await new Promise((resolve) => setTimeout(resolve, 3_000)); // anything late had time to land
      const history = await (
        await client(nodes[0] as ServerProcess)
      ).request<{ events: { type: string; output?: string }[] }>('agent.history', { sessionId: runId });
      expect(history.events.filter((event) => event.type === 'terminate')).toHaveLength(1);
      for (const events of seen) {
        const done = ofRun(events, runId, 'agent.done');
        expect(done.map((params) => (params['terminateReason'] as { kind: string }).kind)).toEqual([
          'model_stop',
        ]);
        const last = events.findLastIndex((event) => event.params['runId'] === runId);
        expect(events[last]?.topic).toBe('agent.done');
      }
    });

    it('finishes, once, a run whose node stopped past its lease after taking it and before logging anything, then continued', async () => {
      const nodes = await startNodes('e2e8', '', 2);
      const probe = await connectCluster({
        servers: [nats.url],
        name: 'e2e8',
        node: 'probe',
        leaseTtlSecs: 2,
      });
      const queue = await JetStreamRunQueue.open(probe, { secret: TOKEN });
      // The first node to start the run waits a moment in its SessionStart hook (before the run's
      // first append); it is stopped there. The node that takes the run over waits in its own
      // hook until the stopped node has continued and tried its first append.
      const cwd = join(work, 'stopped-before-append');
      mkdirSync(join(cwd, '.claude'), { recursive: true });
      const hook =
        'echo start >> "$CLAUDE_PROJECT_DIR/.starts"; ' +
        'if mkdir "$CLAUDE_PROJECT_DIR/.first" 2>/dev/null; then sleep 3; ' +
        'else while [ ! -e "$CLAUDE_PROJECT_DIR/.release" ]; do sleep 0.1; done; fi';
      writeFileSync(
        join(cwd, '.claude', 'settings.json'),
        JSON.stringify({ hooks: { SessionStart: [{ hooks: [{ type: 'command', command: hook }] }] } }),
      );
      let stopped: ServerProcess | undefined;
      try {
        const seen = await watchEach(nodes);
        const { runId } = await (
          await client(nodes[0] as ServerProcess)
        ).request<{ runId: string }>('agent.run', { prompt: 'ten steps', cwd });
        await expect.poll(() => existsSync(join(cwd, '.first')), { timeout: 60_000 }).toBe(true);
        const holder = (await queue.holder(runId))?.node ?? '';
        const victim = nodes[['a', 'b'].indexOf(holder)] as ServerProcess;
        stopped = victim;
        victim.child.kill('SIGSTOP');
        await expect
          .poll(async () => (await queue.holder(runId))?.node, { timeout: 30_000 })
          .toBe(holder === 'a' ? 'b' : 'a');
        await expect
          .poll(() => readFileSync(join(cwd, '.starts'), 'utf8').trim().split('\n').length, {
            timeout: 30_000,
          })
          .toBe(2);
        victim.child.kill('SIGCONT');
        stopped = undefined;
        await new Promise((resolve) => setTimeout(resolve, 3_000)); // its first append was tried
        writeFileSync(join(cwd, '.release'), '');
        for (const events of seen)
          await expect.poll(() => ofRun(events, runId, 'agent.done'), { timeout: 60_000 }).toHaveLength(1);
        await new Promise((resolve) => setTimeout(resolve, 3_000)); // anything late had time to land
        for (const events of seen)
          expect(
            ofRun(events, runId, 'agent.done').map(
              (params) => (params['terminateReason'] as { kind: string }).kind,
            ),
          ).toEqual(['model_stop']);
        const history = await (
          await client(nodes[0] as ServerProcess)
        ).request<{ events: { type: string; content?: string; output?: string }[] }>('agent.history', {
          sessionId: runId,
        });
        expect(history.events.filter((event) => event.type === 'user')).toEqual([
          expect.objectContaining({ content: 'ten steps' }),
        ]);
        expect(stepsInLog(history.events)).toEqual(
          Array.from({ length: STEPS }, (_, index) => `step-${index + 1}`),
        );
        expect(history.events.filter((event) => event.type === 'terminate')).toHaveLength(1);
      } finally {
        stopped?.child.kill('SIGCONT');
        writeFileSync(join(cwd, '.release'), '');
        await queue.close();
        await probe.close();
      }
    });

    it('loses no persisted event when nats-server restarts mid-run, and the run completes', async () => {
      const nodes = await startNodes('e2e4');
      const viewer = await client(nodes[0] as ServerProcess);
      await viewer.subscribe(['agent.*']);
      const events: { topic: string; params: Record<string, unknown> }[] = [];
      viewer.onEvent((topic, params) => events.push({ topic, params: params as Record<string, unknown> }));
      const { runId } = await viewer.request<{ runId: string }>('agent.run', {
        prompt: 'ten steps',
        cwd: work,
      });
      await expect
        .poll(() => events.filter((event) => event.topic === 'agent.tool').length, { timeout: 60_000 })
        .toBeGreaterThanOrEqual(3);
      expect(await healthOf(nodes[1] as ServerProcess)).toEqual({ name: 'e2e4', node: 'b', health: 'ok' });
      const down = nats.restart(3_000); // down past the lease TTL (2 s)
      await expect.poll(async () => (await healthOf(nodes[1] as ServerProcess)).health).toBe('degraded');
      await down;
      await expect.poll(async () => (await healthOf(nodes[1] as ServerProcess)).health).toBe('ok');
      let done: { runId: string; state: string; terminateReason?: { kind: string } } | undefined;
      await expect
        .poll(
          async () => {
            const listed = await viewer.request<
              { runId: string; state: string; terminateReason?: { kind: string } }[]
            >('agent.list', {});
            // A lease that lapsed in the outage lists the run as interrupted until its node takes
            // the lease again (a beat after NATS is back): the end wanted is the one in its log.
            done = listed.find(
              (run) =>
                run.runId === runId && run.state === 'done' && run.terminateReason?.kind !== 'interrupted',
            );
            return done;
          },
          { timeout: 90_000, interval: 1_000 },
        )
        .toBeDefined();
      expect((done?.['terminateReason'] as { kind: string }).kind).toBe('model_stop');
      const history = await viewer.request<{ events: { type: string; output?: string }[] }>('agent.history', {
        sessionId: runId,
      });
      const outputs = stepsInLog(history.events);
      expect(outputs).toEqual(Array.from({ length: STEPS }, (_, index) => `step-${index + 1}`));
    });

    it('with required = false, starts degraded while NATS is down, serves its terminals, and joins once NATS is up', async () => {
      await nats.stop(); // the same port comes back below
      const front = await startServerProcess(`${config('a', 'e2e5')}required = false\n`, providerKey);
      servers.push(front);
      const healthz = async () => (await healthOf(front)).health;
      expect(await healthz()).toBe('degraded');
      expect(front.stderr() + front.stdout()).toMatch(/starting degraded \(required = false\)/);
      await expect
        .poll(() => front.stdout())
        .toContain(`cluster: e2e5, node a, NATS ${nats.url} (degraded: not joined yet;`);
      const viewer = await client(front);
      await viewer.subscribe(['*']);
      // Its own terminals work, and their events reach its own clients.
      let output = '';
      let exited = false;
      viewer.onOutput((chunk) => (output += chunk.data.toString()));
      viewer.onExit(() => (exited = true));
      await viewer.spawn({ command: '/bin/sh', args: ['-c', 'echo local-$((40+2))'], cols: 80, rows: 24 });
      await expect.poll(() => output).toMatch(/local-42/);
      await expect.poll(() => exited).toBe(true);
      // A run needs the cluster: a clear answer, not a hang.
      await expect(viewer.request('agent.run', { prompt: 'ten steps', cwd: work })).rejects.toMatchObject({
        code: 'busy',
        message: expect.stringMatching(
          /not joined its cluster yet \(NATS unreachable at nats:\/\/127\.0\.0\.1:\d+\)/,
        ),
      });
      expect(await viewer.request('agent.list', {})).toEqual([]);
      await nats.restart();
      await expect.poll(healthz, { timeout: 30_000 }).toBe('ok');
      const events: { topic: string; params: Record<string, unknown> }[] = [];
      viewer.onEvent((topic, params) => events.push({ topic, params: params as Record<string, unknown> }));
      const { runId } = await viewer.request<{ runId: string }>('agent.run', {
        prompt: 'ten steps',
        cwd: work,
      });
      await expect
        .poll(() => events.find((event) => event.topic === 'agent.done' && event.params['runId'] === runId), {
          timeout: 90_000,
        })
        .toBeDefined();
      const done = events.find((event) => event.topic === 'agent.done' && event.params['runId'] === runId);
      expect((done?.params['terminateReason'] as { kind: string }).kind).toBe('model_stop');
    });
  },
);
