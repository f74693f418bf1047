// Proves that money conversions are exact for all inputs: format then parse gives back the same minor units, numbers parse as their shortest text does, and the fee is the nearest integer to 0.3 % with ties to even.

import { Result } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { divideRoundHalfEven, paymentFee } from "../../domain/ledger/index.ts"
import { formatAmount, parseAmount, parseAmountNumber, U128_MAX } from "../../domain/money/index.ts"

const decimals = fc.integer({ min: 0, max: 38 })
const minor = fc.bigInt({ min: 1n, max: U128_MAX })

describe("money", () => {
  it("parseAmount(formatAmount(x)) = x for every amount, asset precision and minDecimals", () => {
    fc.assert(
      fc.property(minor, decimals, fc.integer({ min: 0, max: 40 }), (x, d, minDecimals) => {
        expect(parseAmount(formatAmount(x, d, { minDecimals }), d)).toEqual(Result.succeed(x))
      }),
    )
  })

  it("formatAmount never ends in a zero beyond minDecimals", () => {
    fc.assert(
      fc.property(minor, decimals, (x, d) => {
        const text = formatAmount(x, d, { minDecimals: 0 })
        if (text.includes(".")) expect(text.endsWith("0")).toBe(false)
      }),
    )
  })

  it("a JSON number parses exactly as its shortest round-trip text", () => {
    // Decimal-looking numbers (cents, satoshis) and arbitrary doubles, which are mostly refused.
    const decimalLike = fc
      .tuple(fc.integer({ min: 0, max: 10 ** 12 }), fc.integer({ min: 0, max: 8 }))
      .map(([units, shift]) => units / 10 ** shift)
    const value = fc.oneof(decimalLike, fc.double({ min: 0, max: 1e25, noNaN: true }))
    fc.assert(
      fc.property(value, fc.integer({ min: 0, max: 18 }), (number, d) => {
        const fromNumber = parseAmountNumber(number, d, { allowZero: true })
        if (Result.isSuccess(fromNumber)) {
          // Decimal strings have no exponent; what JavaScript writes with one is compared by value.
          if (!String(number).includes("e"))
            expect(parseAmount(String(number), d, { allowZero: true })).toEqual(fromNumber)
          expect(Number(formatAmount(fromNumber.success, d))).toBe(number)
        }
      }),
    )
  })
})

describe("half-even division", () => {
  it("is within half a unit of the exact quotient, and exact halves land on even", () => {
    fc.assert(
      fc.property(
        fc.bigInt({ min: -(10n ** 40n), max: 10n ** 40n }),
        fc.bigInt({ min: 1n, max: 10n ** 6n }),
        (n, d) => {
          const q = divideRoundHalfEven(n, d)
          const error = n * 2n - q * 2n * d // 2 * (n/d - q) * d
          expect(error <= d && error >= -d).toBe(true)
          if (error === d || error === -d) expect(q % 2n).toBe(0n)
        },
      ),
    )
  })

  it("the payment fee rounds 0.3 % to the nearest unit", () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: U128_MAX }), (amount) => {
        const fee = paymentFee(amount)
        const distance = amount * 3n - fee * 1_000n // 1000 * (exact - fee)
        expect(distance <= 500n && distance >= -500n).toBe(true)
      }),
    )
  })
})
