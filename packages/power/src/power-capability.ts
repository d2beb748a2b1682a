// The sleep inhibitor: many guards share one OS assertion, held by one helper process, released
// with the last guard. Where the OS has no working backend it degrades to a no-op and says so once.
import { spawn, type ChildProcess } from 'node:child_process';
import { backendFor, type BackendName } from './internal/backends.js';
import { createGuard, type SleepGuard } from './sleep-guard.js';

export interface PowerStatus {
  /** The backend in use, or `noop` when disabled, unsupported or failed. */
  readonly backend: BackendName | 'noop';
  readonly enabled: boolean;
  readonly guardsHeld: number;
  /** True while an OS assertion (a helper process) is held. */
  readonly asserting: boolean;
  /** Why the capability is a no-op, when it is one. */
  readonly degradedReason?: string;
}

export interface PowerCapability {
  inhibitSleep(reason: string): SleepGuard;
  status(): PowerStatus;
}

export interface PowerCapabilityOptions {
  /** `false` (or `ALEPH_INHIBIT_SLEEP=0`) turns the capability into a no-op that spawns nothing. */
  enabled?: boolean;
  platform?: NodeJS.Platform;
  env?: NodeJS.ProcessEnv;
  /** Receives the single warning emitted when the backend is missing or fails. */
  onWarning?: (message: string) => void;
}

export function createPowerCapability(options: PowerCapabilityOptions = {}): PowerCapability {
  return new OsPowerCapability(options);
}

class OsPowerCapability implements PowerCapability {
  readonly #platform: NodeJS.Platform;
  readonly #env: NodeJS.ProcessEnv;
  readonly #enabled: boolean;
  readonly #warn: (message: string) => void;
  #held = 0;
  #helper: ChildProcess | null = null;
  #degradedReason: string | undefined;
  #warned = false;

  constructor(options: PowerCapabilityOptions) {
    this.#platform = options.platform ?? process.platform;
    this.#env = options.env ?? process.env;
    this.#enabled = (options.enabled ?? true) && this.#env['ALEPH_INHIBIT_SLEEP'] !== '0';
    this.#warn =
      options.onWarning ?? ((message) => process.emitWarning(message, { code: 'ALEPH_POWER_NOOP' }));
    if (!this.#enabled) this.#degradedReason = 'disabled by configuration';
    else if (backendFor(this.#platform, '', 0) === null) {
      this.#degrade(`no sleep-inhibit backend for platform ${this.#platform}`);
    }
  }

  inhibitSleep(reason: string): SleepGuard {
    this.#held += 1;
    if (this.#held === 1 && this.#degradedReason === undefined) this.#startHelper(reason);
    return createGuard(reason, () => {
      this.#held -= 1;
      if (this.#held === 0) this.#stopHelper();
    });
  }

  status(): PowerStatus {
    const backend =
      this.#degradedReason === undefined
        ? (backendFor(this.#platform, '', 0)?.name ?? 'noop')
        : ('noop' as const);
    return {
      backend,
      enabled: this.#enabled,
      guardsHeld: this.#held,
      asserting: this.#helper !== null,
      ...(this.#degradedReason === undefined ? {} : { degradedReason: this.#degradedReason }),
    };
  }

  #startHelper(reason: string): void {
    const command = backendFor(this.#platform, reason, process.pid);
    if (command === null) return;
    let helper: ChildProcess;
    try {
      helper = spawn(command.file, command.args, {
        env: this.#env,
        // stdin stays a pipe we never write: the helper (or its `cat`) exits on EOF when we die.
        stdio: ['pipe', 'ignore', 'pipe'],
        windowsHide: true,
      });
    } catch (error) {
      this.#degrade(`${command.name} could not be started: ${String(error)}`);
      return;
    }
    let stderr = '';
    helper.stderr?.setEncoding('utf8');
    helper.stderr?.on('data', (chunk: string) => {
      if (stderr.length < 4096) stderr += chunk;
    });
    helper.on('error', (error: NodeJS.ErrnoException) => {
      if (this.#helper !== helper) return;
      this.#helper = null;
      this.#degrade(
        error.code === 'ENOENT'
          ? `${command.name} not found on PATH`
          : `${command.name} failed: ${error.message}`,
      );
    });
    helper.on('exit', (code, signal) => {
      if (this.#helper !== helper) return; // released on purpose
      this.#helper = null;
      const detail = stderr.trim() || (signal === null ? `exit code ${String(code)}` : `signal ${signal}`);
      this.#degrade(`${command.name} exited unexpectedly: ${detail}`);
    });
    helper.unref();
    this.#helper = helper;
  }

  #stopHelper(): void {
    const helper = this.#helper;
    this.#helper = null;
    if (helper === null) return;
    helper.stdin?.end();
    helper.kill('SIGTERM');
  }

  #degrade(reason: string): void {
    this.#degradedReason = reason;
    if (this.#warned) return;
    this.#warned = true;
    this.#warn(`sleep inhibitor is a no-op: ${reason}`);
  }
}
