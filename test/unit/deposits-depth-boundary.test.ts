// Mutation-review test: a deposit is credited at the finality depth and not one block before it,
// even when the adapter already calls its transaction final.
import { describe, expect, it } from "vitest"
import { judgeSeenDeposit } from "../../src/deposits/model.ts"
import type { TransactionStatus } from "../../src/ports/chain.ts"

const final = (confirmations: number): TransactionStatus => ({
  status: "finalized",
  proof: { tx_hash: "0xaaaa", block_number: 10n, block_hash: "0xb1", log_index: 0, confirmations },
})

describe("judgeSeenDeposit at the depth's boundary", () => {
  it("waits at one confirmation short of the depth, credits at the depth", () => {
    expect(judgeSeenDeposit({ block_hash: "0xb1" }, final(11), 12, 30n).kind).toBe("wait")
    expect(judgeSeenDeposit({ block_hash: "0xb1" }, final(12), 12, 30n).kind).toBe("credit")
  })
})
