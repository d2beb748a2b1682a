// The post-edit evidence nudge: a model stopping right after it changed a file, with no test, build
// or read-back since, is nudged once per mutation — never twice for the same one.
import {
  CONTINUE,
  sessionKey,
  type TurnVerifier,
  type TurnVerifyContext,
  type VerifierVerdict,
} from './turn-verifier.js';

export class MutationEvidenceVerifier implements TurnVerifier {
  readonly name = 'mutation_evidence';
  readonly #nudged = new Map<string, Set<number>>();

  verify(ctx: TurnVerifyContext): Promise<VerifierVerdict> {
    if (ctx.stopReason === undefined) return Promise.resolve(CONTINUE);
    const calls = ctx.recentToolCalls;
    let lastMutation = -1;
    for (let index = calls.length - 1; index >= 0; index -= 1) {
      const kind = calls[index]?.kind;
      if (kind === 'evidence') return Promise.resolve(CONTINUE);
      if (kind === 'mutation' && calls[index]?.ok === true) {
        lastMutation = index;
        break;
      }
    }
    if (lastMutation < 0) return Promise.resolve(CONTINUE);
    // The call's absolute position in the session identifies this mutation across turns.
    const position = ctx.toolCallsMade - calls.length + lastMutation;
    const key = sessionKey(ctx);
    const nudged = this.#nudged.get(key) ?? new Set<number>();
    if (nudged.has(position)) return Promise.resolve(CONTINUE);
    nudged.add(position);
    this.#nudged.set(key, nudged);
    const mutation = calls[lastMutation];
    return Promise.resolve({
      kind: 'veto',
      reason: `no evidence after ${mutation?.name ?? 'a mutation'}`,
      feedback:
        `You changed files (${mutation?.name ?? 'mutation'}) and have not checked the result since. ` +
        `Run the tests or the build, or read the file back, then stop — or stop now if no check applies.`,
    });
  }
}
