// Proves the payment fee is exactly 0.3 % rounded half to even, and that a payment's transfers charge the payer amount + fee in one linked group.
import { describe, expect, it } from "vitest"
import {
  divideRoundHalfEven,
  paymentCharge,
  paymentFee,
  paymentTransfers,
} from "../../domain/ledger/index.ts"
import { U128_MAX } from "../../domain/money/index.ts"

describe("divideRoundHalfEven", () => {
  it.each([
    [10n, 5n, 2n],
    [14n, 10n, 1n],
    [15n, 10n, 2n], // 1.5: tie, 2 is even
    [16n, 10n, 2n],
    [25n, 10n, 2n], // 2.5: tie, 2 is even
    [35n, 10n, 4n], // 3.5: tie, 4 is even
    [5n, 10n, 0n], // 0.5: tie, 0 is even
    [0n, 7n, 0n],
    [-15n, 10n, -2n],
    [-25n, 10n, -2n],
    [-26n, 10n, -3n],
    [25n, -10n, -2n],
    [-25n, -10n, 2n],
    [1n, 3n, 0n],
    [2n, 3n, 1n],
  ])("%i / %i = %i", (numerator, denominator, quotient) => {
    expect(divideRoundHalfEven(numerator, denominator)).toBe(quotient)
  })

  it("crashes on division by zero (a programmer error)", () => {
    expect(() => divideRoundHalfEven(1n, 0n)).toThrow()
  })
})

describe("paymentFee", () => {
  it.each([
    [0n, 0n],
    [1n, 0n], // 0.003
    [166n, 0n], // 0.498
    [167n, 1n], // 0.501
    [500n, 2n], // 1.5: exact tie, rounds up to even 2
    [1_500n, 4n], // 4.5: exact tie, rounds down to even 4
    [2_500n, 8n], // 7.5: exact tie, rounds up to even 8
    [3_500n, 10n], // 10.5: exact tie, rounds down to even 10
    [499n, 1n], // 1.497
    [501n, 2n], // 1.503
    [1_000n, 3n],
    [10_000n, 30n],
    [1_000_000n, 3_000n], // 1 USDC (6 decimals) -> 0.003 USDC
    [U128_MAX, 1_020_847_100_762_815_390_390_123_822_295_304_634n], // 1020847100762815390390123822295304634.365
  ])("fee on %i is %i", (amount, fee) => {
    expect(paymentFee(amount)).toBe(fee)
  })

  it("charges amount + fee", () => {
    expect(paymentCharge(10_000n)).toBe(10_030n)
    expect(paymentCharge(500n)).toBe(502n)
  })

  it("crashes on a negative amount (a programmer error)", () => {
    expect(() => paymentFee(-1n)).toThrow()
  })
})

describe("paymentTransfers", () => {
  const base = {
    group_id: "g1",
    payment_transfer_id: "t-pay",
    fee_transfer_id: "t-fee",
    payer_account_id: "payer",
    payee_account_id: "payee",
    fee_account_id: "fees",
    code: 7,
    user_data: "invoice 42",
    now_ms: 1_000,
  }

  it("builds the payment and its fee as one linked group", () => {
    expect(paymentTransfers({ ...base, amount: 10_000n })).toEqual({
      type: "CreateTransfers",
      group_id: "g1",
      now_ms: 1_000,
      transfers: [
        {
          transfer_id: "t-pay",
          debit_account_id: "payer",
          credit_account_id: "payee",
          amount: 10_000n,
          code: 7,
          user_data: "invoice 42",
        },
        {
          transfer_id: "t-fee",
          debit_account_id: "payer",
          credit_account_id: "fees",
          amount: 30n,
          code: 7,
          user_data: "invoice 42",
        },
      ],
    })
  })

  it("leaves out a fee that rounds to zero", () => {
    const command = paymentTransfers({ ...base, amount: 166n })
    expect(command.transfers.map((t) => t.transfer_id)).toEqual(["t-pay"])
  })

  it("reserves both transfers with the same timeout when pending, with a fee code when given", () => {
    const command = paymentTransfers({
      ...base,
      amount: 10_000n,
      fee_code: 8,
      pending: { timeout_ms: 60_000 },
    })
    expect(command.transfers.map((t) => [t.code, t.pending])).toEqual([
      [7, { timeout_ms: 60_000 }],
      [8, { timeout_ms: 60_000 }],
    ])
  })
})
