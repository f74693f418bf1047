/**
 * The sandbox faucet's mints in flight, per tenant and token of one chain: between the mint on chain
 * and the ledger's credit, a custody address holds tokens no ledger entry backs yet. Reconciliation
 * counts them as incoming instead of reporting drift (src/reconciliation/reconciler.ts).
 *
 * It keeps two running totals per key, never decreasing: what was started and what was finished
 * (credited, or known never to be credited). A reader that takes `finished` before it reads the
 * ledger and `started` after it reads the chain bounds every mint that may be on chain but not in
 * the ledger it read, however the two interleave with the mints.
 */
import type { MintTally } from "../ports/chains.ts"

/** @example const done = tally.begin("ten_1:USDC", 5_000_000n); ...mint, credit...; done() */
export const makeMintTally = (): MintTally => {
  const started = new Map<string, bigint>()
  const finished = new Map<string, bigint>()
  const add = (totals: Map<string, bigint>, key: string, amount: bigint) =>
    totals.set(key, (totals.get(key) ?? 0n) + amount)
  return {
    begin: (key, amount) => {
      add(started, key, amount)
      let done = false
      return () => {
        if (done) return
        done = true
        add(finished, key, amount)
      }
    },
    started: (key) => started.get(key) ?? 0n,
    finished: (key) => finished.get(key) ?? 0n,
  }
}

/** The tally's key of a tenant's token. */
export const mintTallyKey = (tenant_id: string, token: string): string => `${tenant_id}:${token}`
