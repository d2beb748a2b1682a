// The to-do gate: a model that wants to stop while its execution list still has open rows is
// reminded of them. Cancelled and blocked rows count as resolved. After a few reminders for the
// same rows the stop goes through: the model has the final say, the gate only gives receipts.
import {
  CONTINUE,
  sessionKey,
  type TurnVerifier,
  type TurnVerifyContext,
  type VerifierVerdict,
} from './turn-verifier.js';

export const DEFAULT_MAX_REMINDERS = 3;

export class ScratchpadGoalVerifier implements TurnVerifier {
  readonly name = 'scratchpad_goal';
  readonly #maxReminders: number;
  readonly #reminded = new Map<string, { rows: string; count: number }>();

  constructor(options: { readonly maxReminders?: number } = {}) {
    this.#maxReminders = options.maxReminders ?? DEFAULT_MAX_REMINDERS;
  }

  verify(ctx: TurnVerifyContext): Promise<VerifierVerdict> {
    if (ctx.stopReason === undefined) return Promise.resolve(CONTINUE);
    const open = (ctx.scratchpad ?? []).filter((row) => row.status === 'open').map((row) => row.text);
    const key = sessionKey(ctx);
    if (open.length === 0) {
      this.#reminded.delete(key);
      return Promise.resolve(CONTINUE);
    }
    const rows = JSON.stringify(open);
    const previous = this.#reminded.get(key);
    const count = previous?.rows === rows ? previous.count : 0;
    if (count >= this.#maxReminders) return Promise.resolve(CONTINUE);
    this.#reminded.set(key, { rows, count: count + 1 });
    return Promise.resolve({
      kind: 'veto',
      reason: `execution list has ${open.length} open row(s)`,
      feedback:
        `Your execution list still has open items:\n${open.map((text) => `- [ ] ${text}`).join('\n')}\n` +
        `Finish them, or mark each one done, cancelled or blocked (with why) before you stop.`,
    });
  }
}
