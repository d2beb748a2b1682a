// The console's figures in real Chromium against the real server: keystroke-to-render latency into
// `cat` (300 keys, from the page's keydown to xterm.js's render of the echo) and the time for 16 MiB
// of output to be drawn, with the longest requestAnimationFrame gap meanwhile. Each figure is set
// beside a baseline from the same run: the same keys and bytes written straight into xterm.js in
// the page, with no server, socket or pty between.
import type { Page } from 'playwright-core';
import { chromiumAvailable, consoleConfig, launchChromium, startConsoleServer } from '../test/support.js';

const KEYS = 300;
const FLOOD_BYTES = 16 * 1024 * 1024;

const percentile = (values: number[], p: number): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
};
const ms = (value: number): string => `${value.toFixed(1)} ms`;

/** Installs the page-side probes: key→render latencies and the rAF gap watcher. */
async function installProbes(page: Page, local: boolean): Promise<void> {
  // tsx names the functions it compiles with a `__name` helper that the page does not have.
  await page.evaluate('globalThis.__name = (target) => target');
  await page.evaluate((echoLocally) => {
    const term = (window as any).alephConsole.terminal();
    const probe = {
      latencies: [] as number[],
      keyAt: undefined as number | undefined,
      parsed: false,
      maxGap: 0,
    };
    (window as any).probe = probe;
    window.addEventListener(
      'keydown',
      (event) => {
        probe.keyAt = performance.now();
        probe.parsed = false;
        if (echoLocally) {
          event.preventDefault();
          event.stopImmediatePropagation();
          term.write(event.key);
        }
      },
      { capture: true },
    );
    term.onWriteParsed(() => (probe.parsed = probe.keyAt !== undefined));
    term.onRender(() => {
      if (!probe.parsed || probe.keyAt === undefined) return;
      probe.latencies.push(performance.now() - probe.keyAt);
      probe.keyAt = undefined;
      probe.parsed = false;
    });
  }, local);
}

async function typeKeys(page: Page): Promise<number[]> {
  for (let index = 0; index < KEYS; index += 1) {
    await page.keyboard.press(String.fromCharCode(97 + (index % 26)));
    await page.waitForFunction((count) => (window as any).probe.latencies.length >= count, index + 1, {
      polling: 'raf',
    });
  }
  return page.evaluate(() => (window as any).probe.latencies as number[]);
}

/** Watches rAF gaps until `marker` is a line of the screen; returns the time taken and the longest gap. */
async function timeUntil(
  page: Page,
  start: () => Promise<unknown>,
  marker: string,
): Promise<{ ms: number; maxGap: number }> {
  await page.evaluate(() => {
    const probe = (window as any).probe;
    probe.maxGap = 0;
    probe.watching = true;
    let last = performance.now();
    const frame = (now: number): void => {
      probe.maxGap = Math.max(probe.maxGap, now - last);
      last = now;
      if (probe.watching) requestAnimationFrame(frame);
    };
    requestAnimationFrame(frame);
  });
  const began = Date.now();
  await start();
  const progress = setInterval(() => {
    void page
      .evaluate(() => (window as any).alephConsole.lines('screen').slice(-3).join(' | '))
      .then(
        (tail) =>
          process.env['BENCH_DEBUG'] && console.log(`${Date.now() - began} ms: ${tail.slice(0, 160)}`),
        () => {},
      );
  }, 2000);
  await page.waitForFunction((line) => (window as any).alephConsole.lines('screen').includes(line), marker, {
    timeout: 600_000,
    polling: 100,
  });
  const elapsed = Date.now() - began;
  clearInterval(progress);
  const maxGap = await page.evaluate(() => {
    const probe = (window as any).probe;
    probe.watching = false;
    return probe.maxGap as number;
  });
  return { ms: elapsed, maxGap };
}

async function main(): Promise<void> {
  if (!chromiumAvailable()) return;
  const [server, browser] = await Promise.all([startConsoleServer(consoleConfig()), launchChromium()]);
  try {
    const page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
    await page.goto(server.consoleUrl);
    await page.getByRole('button', { name: 'New terminal' }).first().click();
    await page.locator('.term-tab:not([hidden])[data-session] .xterm').waitFor(); // its session is there
    await page.keyboard.type('stty -icanon -echo; cat\n'); // cat echoes each key itself, one write per key
    await page.waitForTimeout(300);
    await installProbes(page, false);
    const viaServer = await typeKeys(page);
    await page.keyboard.press('Control+C');

    // Baseline: the same keys drawn by xterm.js straight from keydown (a fresh page, same build).
    const local = await browser.newPage({ viewport: { width: 1200, height: 800 } });
    await local.goto(server.consoleUrl);
    await local.getByRole('button', { name: 'New terminal' }).first().click();
    await local.locator('.term-tab:not([hidden])[data-session] .xterm').waitFor();
    await installProbes(local, true);
    const inPage = await typeKeys(local);

    const p50 = percentile(viaServer, 50);
    console.log(`console bench (Chromium ${browser.version()}, ${KEYS} keys, 16 MiB flood)`);
    console.log(
      `keystroke → render into cat: p50 ${ms(p50)}, p99 ${ms(percentile(viaServer, 99))} ` +
        `(target p50 ≤ 16 ms: ${p50 <= 16 ? 'met' : 'MISSED'}); ` +
        `xterm.js alone p50 ${ms(percentile(inPage, 50))}, p99 ${ms(percentile(inPage, 99))}; ` +
        `ratio p50 ${(p50 / percentile(inPage, 50)).toFixed(2)}×`,
    );

    await page.bringToFront();
    await page.keyboard.type('stty sane; clear\n');
    const flood = await timeUntil(
      page,
      () =>
        page.keyboard.type(
          `head -c ${FLOOD_BYTES} /dev/zero | tr '\\0' 'x' | fold -w 99; echo; echo flood-""done\n`,
        ),
      'flood-done',
    );
    // Baseline: the same 16 MiB written into xterm.js in the page (in 64 KiB writes, as it arrives).
    const alone = await timeUntil(
      local,
      () =>
        local.evaluate((bytes) => {
          const term = (window as any).alephConsole.terminal();
          const line = new TextEncoder().encode(`${'x'.repeat(99)}\r\n`);
          const chunk = new Uint8Array(line.length * 640);
          for (let at = 0; at < chunk.length; at += line.length) chunk.set(line, at);
          for (let written = 0; written < bytes; written += chunk.length) term.write(chunk);
          term.write('flood-done\r\n');
        }, FLOOD_BYTES),
      'flood-done',
    );
    const rate = (FLOOD_BYTES / 1024 / 1024 / (flood.ms / 1000)).toFixed(1);
    console.log(
      `16 MiB of output drawn: ${(flood.ms / 1000).toFixed(2)} s (${rate} MiB/s), longest rAF gap ${ms(flood.maxGap)} ` +
        `(target ≤ 100 ms: ${flood.maxGap <= 100 ? 'met' : 'MISSED'}); xterm.js alone ${(alone.ms / 1000).toFixed(2)} s, ` +
        `longest rAF gap ${ms(alone.maxGap)}; ratio ${(flood.ms / alone.ms).toFixed(2)}×`,
    );
  } finally {
    await browser.close();
    await server.stop();
  }
}

await main();
