// The faucet's mint tally: running totals per tenant and token that only grow, a mint finished once
// however often its completion is called, and keys kept apart.
import { describe, expect, it } from "vitest"
import { makeMintTally, mintTallyKey } from "../../src/chains/mint-tally.ts"

describe("the faucet's mint tally", () => {
  it("counts a mint started at once and finished once, however often it is finished, per key", () => {
    const tally = makeMintTally()
    const key = mintTallyKey("ten_a", "USDC")
    const other = mintTallyKey("ten_a", "USDT")
    const first = tally.begin(key, 5n)
    const second = tally.begin(key, 7n)
    expect([tally.started(key), tally.finished(key)]).toEqual([12n, 0n])
    first()
    first()
    expect([tally.started(key), tally.finished(key)]).toEqual([12n, 5n])
    second()
    expect([tally.started(key), tally.finished(key)]).toEqual([12n, 12n])
    expect([tally.started(other), tally.finished(other)]).toEqual([0n, 0n])
    expect(mintTallyKey("ten_a", "USDC")).not.toBe(mintTallyKey("ten_b", "USDC"))
  })
})
