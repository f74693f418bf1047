// The reconciliation rule: a difference between chain and ledger is "in_flight" exactly when money in
// flight explains it, and the drift reported is the part it does not explain.
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { reconcile } from "../../domain/chains/reconciliation.ts"

const amount = fc.bigInt({ min: 0n, max: 10n ** 24n })

describe("reconcile", () => {
  it("matches equal figures, whatever is in flight", () => {
    expect(
      reconcile({ ledger_balance: 5n, on_chain_balance: 5n, pending_outgoing: 3n, pending_incoming: 2n }),
    ).toEqual({ status: "matched", difference: 0n, drift: 0n })
  })

  it("explains a mined outgoing transfer not yet settled, and a deposit seen but not credited", () => {
    expect(
      reconcile({ ledger_balance: 100n, on_chain_balance: 75n, pending_outgoing: 25n, pending_incoming: 0n }),
    ).toEqual({ status: "in_flight", difference: -25n, drift: 0n })
    expect(
      reconcile({
        ledger_balance: 100n,
        on_chain_balance: 110n,
        pending_outgoing: 0n,
        pending_incoming: 10n,
      }),
    ).toEqual({ status: "in_flight", difference: 10n, drift: 0n })
  })

  it("reports the unexplained part: money on chain the ledger does not know, or liabilities unbacked", () => {
    expect(
      reconcile({
        ledger_balance: 100n,
        on_chain_balance: 130n,
        pending_outgoing: 50n,
        pending_incoming: 10n,
      }),
    ).toEqual({ status: "drift", difference: 30n, drift: 20n })
    expect(
      reconcile({
        ledger_balance: 100n,
        on_chain_balance: 60n,
        pending_outgoing: 25n,
        pending_incoming: 90n,
      }),
    ).toEqual({ status: "drift", difference: -40n, drift: -15n })
  })

  it("drift is zero exactly inside the in-flight window, and never larger than the difference", () => {
    fc.assert(
      fc.property(
        fc.bigInt({ min: -(10n ** 24n), max: 10n ** 24n }),
        amount,
        amount,
        amount,
        (ledger, chain, out, incoming) => {
          const outcome = reconcile({
            ledger_balance: ledger,
            on_chain_balance: chain,
            pending_outgoing: out,
            pending_incoming: incoming,
          })
          const difference = chain - ledger
          expect(outcome.difference).toBe(difference)
          const inside = difference >= -out && difference <= incoming
          expect(outcome.drift === 0n).toBe(inside)
          expect(outcome.status).toBe(difference === 0n ? "matched" : inside ? "in_flight" : "drift")
          // The drift has the difference's sign and the window never explains more than is there.
          const magnitude = (value: bigint) => (value < 0n ? -value : value)
          expect(magnitude(outcome.drift) <= magnitude(difference)).toBe(true)
          if (outcome.drift !== 0n) expect(outcome.drift > 0n).toBe(difference > 0n)
          expect(difference - outcome.drift >= -out && difference - outcome.drift <= incoming).toBe(true)
        },
      ),
    )
  })
})
