/**
 * Reconciliation: does the chain hold what the ledger owes? For one tenant, environment, chain and
 * token, the ledger's liabilities (posted balances of the wallet, fee revenue and escrow accounts of
 * that asset) are compared with the token balances of the tenant's custody addresses on that chain.
 *
 * The two are read at slightly different moments, and money in flight sits on one side only:
 * - an outgoing transfer still pending in the ledger may already be mined, so the chain can hold up
 *   to `pending_outgoing` less than the ledger;
 * - a deposit the watcher has seen but not yet credited (it waits for finality) is on the chain and
 *   not yet in the ledger, so the chain can hold up to `pending_incoming` more.
 * A difference inside that window is `in_flight`; outside it, the part the window does not explain is
 * drift: money on chain the ledger does not know (positive) or liabilities the chain does not back
 * (negative), both of which an operator must look at.
 */
import { assert } from "../assert.ts"

export type ReconciliationStatus = "matched" | "in_flight" | "drift"

export interface ReconciliationFigures {
  /** What the ledger owes: posted balances of the liability accounts, smallest unit. */
  readonly ledger_balance: bigint
  /** What the custody addresses hold on chain, smallest unit. */
  readonly on_chain_balance: bigint
  /** Outgoing transfers reserved in the ledger and not yet settled (perhaps already mined). */
  readonly pending_outgoing: bigint
  /** Deposits seen on chain and not yet credited. */
  readonly pending_incoming: bigint
}

export interface ReconciliationOutcome {
  readonly status: ReconciliationStatus
  /** on_chain_balance - ledger_balance. */
  readonly difference: bigint
  /** The part of the difference that money in flight does not explain; 0 unless `drift`. */
  readonly drift: bigint
}

/**
 * @example reconcile({ ledger_balance: 100n, on_chain_balance: 100n, pending_outgoing: 0n, pending_incoming: 0n })
 * // { status: "matched", difference: 0n, drift: 0n }
 * @example reconcile({ ledger_balance: 100n, on_chain_balance: 70n, pending_outgoing: 30n, pending_incoming: 0n })
 * // { status: "in_flight", difference: -30n, drift: 0n }
 * @example reconcile({ ledger_balance: 100n, on_chain_balance: 130n, pending_outgoing: 0n, pending_incoming: 10n })
 * // { status: "drift", difference: 30n, drift: 20n }
 */
export const reconcile = (figures: ReconciliationFigures): ReconciliationOutcome => {
  assert(
    figures.on_chain_balance >= 0n && figures.pending_outgoing >= 0n && figures.pending_incoming >= 0n,
    "balances and amounts in flight are never negative",
  )
  const difference = figures.on_chain_balance - figures.ledger_balance
  if (difference === 0n) return { status: "matched", difference, drift: 0n }
  if (difference > figures.pending_incoming)
    return { status: "drift", difference, drift: difference - figures.pending_incoming }
  if (difference < -figures.pending_outgoing)
    return { status: "drift", difference, drift: difference + figures.pending_outgoing }
  return { status: "in_flight", difference, drift: 0n }
}
