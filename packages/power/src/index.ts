// @aleph/power: a ref-counted sleep inhibitor held while an agent turn thinks.
export {
  createPowerCapability,
  type PowerCapability,
  type PowerCapabilityOptions,
  type PowerStatus,
} from './power-capability.js';
export type { SleepGuard } from './sleep-guard.js';
export type { BackendName } from './internal/backends.js';
