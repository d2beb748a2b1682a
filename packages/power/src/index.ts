// @aleph/power: a ref-counted sleep inhibitor held while an agent turn thinks.
export {
  createPowerCapability,
  type PowerCapability,
  type PowerCapabilityOptions,
  type PowerStatus,
  type SleepGuard,
} from './power-capability.js';
export type { BackendName } from './internal/backends.js';
