// Proves that amounts cross the edge exactly: every accepted text or number becomes the intended minor units, every other input is refused with the named reason, and formatting writes minor units back exactly.
import { Result } from "effect"
import { describe, expect, it } from "vitest"
import {
  assetCode,
  checkAsset,
  formatAmount,
  type MoneyError,
  makeAsset,
  moneyErrorTags,
  parseAmount,
  parseAmountNumber,
  parseAssetCode,
  U128_MAX,
} from "../../domain/money/index.ts"

/** What a parse should give: the minor units, or the error's tag (and, optionally, fields). */
type Expected = bigint | { readonly tag: MoneyError["_tag"]; readonly fields?: Record<string, unknown> }

function expectParsed(result: Result.Result<bigint, MoneyError>, expected: Expected): void {
  if (typeof expected === "bigint") {
    expect(result).toEqual(Result.succeed(expected))
    return
  }
  if (!Result.isFailure(result)) throw new Error(`expected ${expected.tag}, got ${String(result.success)}`)
  expect(result.failure._tag).toBe(expected.tag)
  if (expected.fields !== undefined) expect(result.failure).toMatchObject(expected.fields)
}

const u128MaxText = U128_MAX.toString()

describe("parseAmount", () => {
  const cases: ReadonlyArray<readonly [string, string, number, Expected, { allowZero?: boolean }?]> = [
    ["whole units", "100", 2, 10_000n],
    ["fraction shorter than decimals", "1.5", 2, 150n],
    ["fraction as long as decimals", "12.34", 2, 1_234n],
    ["one minor unit", "0.01", 2, 1n],
    ["smallest unit of 18 decimals", "0.000000000000000001", 18, 1n],
    ["0.5 is accepted", "0.5", 6, 500_000n],
    ["zero decimals", "42", 0, 42n],
    ["zero refused by default", "0", 2, { tag: "ZeroAmount" }],
    ["zero with decimals refused by default", "0.00", 2, { tag: "ZeroAmount" }],
    ["zero allowed on request", "0", 2, 0n, { allowZero: true }],
    ["0.00 allowed on request", "0.00", 2, 0n, { allowZero: true }],
    ["u128 max in minor units", u128MaxText, 0, U128_MAX],
    ["u128 max with decimals", `${u128MaxText.slice(0, -6)}.${u128MaxText.slice(-6)}`, 6, U128_MAX],
    [
      "one above u128 max",
      (U128_MAX + 1n).toString(),
      0,
      { tag: "AmountTooLarge", fields: { max: U128_MAX } },
    ],
    ["far above u128 max", "9".repeat(200), 2, { tag: "AmountTooLarge" }],
    ["above max once scaled by decimals", u128MaxText, 1, { tag: "AmountTooLarge" }],
    ["too many decimals", "1.234", 2, { tag: "TooManyDecimals", fields: { decimals: 3, max: 2 } }],
    [
      "trailing zero beyond decimals",
      "1.230",
      2,
      { tag: "TooManyDecimals", fields: { decimals: 3, max: 2 } },
    ],
    ["decimals on a 0-decimal asset", "1.0", 0, { tag: "TooManyDecimals", fields: { decimals: 1, max: 0 } }],
    ["negative", "-5", 2, { tag: "NegativeAmount" }],
    ["negative fraction", "-0.01", 2, { tag: "NegativeAmount" }],
    ["negative zero", "-0", 2, { tag: "NegativeAmount" }],
    ["exponent", "1e3", 2, { tag: "InvalidAmountFormat", fields: { reason: "uses exponent notation" } }],
    [
      "exponent with sign",
      "1.5E-2",
      2,
      { tag: "InvalidAmountFormat", fields: { reason: "uses exponent notation" } },
    ],
    ["leading plus", "+5", 2, { tag: "InvalidAmountFormat", fields: { reason: "has a leading plus sign" } }],
    ["empty", "", 2, { tag: "InvalidAmountFormat", fields: { reason: "is empty" } }],
    ["leading space", " 5", 2, { tag: "InvalidAmountFormat", fields: { reason: "contains whitespace" } }],
    ["trailing newline", "5\n", 2, { tag: "InvalidAmountFormat", fields: { reason: "contains whitespace" } }],
    ["inner space", "1 000", 2, { tag: "InvalidAmountFormat", fields: { reason: "contains whitespace" } }],
    [
      "no-break space",
      "5\u00a0",
      2,
      { tag: "InvalidAmountFormat", fields: { reason: "contains whitespace" } },
    ],
    ["hex", "0x10", 2, { tag: "InvalidAmountFormat" }],
    ["leading zeros", "007", 2, { tag: "InvalidAmountFormat", fields: { reason: "has leading zeros" } }],
    [
      "leading zeros before point",
      "00.5",
      2,
      { tag: "InvalidAmountFormat", fields: { reason: "has leading zeros" } },
    ],
    ["no digit before point", ".5", 2, { tag: "InvalidAmountFormat" }],
    ["no digit after point", "1.", 2, { tag: "InvalidAmountFormat" }],
    ["decimal comma", "1,5", 2, { tag: "InvalidAmountFormat" }],
    ["grouping comma", "1,000.00", 2, { tag: "InvalidAmountFormat" }],
    ["letters", "abc", 2, { tag: "InvalidAmountFormat", fields: { reason: "is not a decimal number" } }],
    ["Infinity as text", "Infinity", 2, { tag: "InvalidAmountFormat" }],
    ["NaN as text", "NaN", 2, { tag: "InvalidAmountFormat" }],
    ["two points", "1.2.3", 2, { tag: "InvalidAmountFormat" }],
    ["full-width digits", "\uff11", 2, { tag: "InvalidAmountFormat" }],
    ["minus sign only", "-", 2, { tag: "InvalidAmountFormat" }],
    ["very long garbage", "x".repeat(10_000), 2, { tag: "InvalidAmountFormat" }],
  ]
  for (const [name, text, decimals, expected, options] of cases) {
    it(`${name}: ${JSON.stringify(text.slice(0, 50))} with ${decimals} decimals`, () => {
      expectParsed(parseAmount(text, decimals, options), expected)
    })
  }

  it("echoes only a bounded preview of hostile input", () => {
    const result = parseAmount("x".repeat(10_000), 2)
    if (!Result.isFailure(result)) throw new Error("expected a failure")
    expect(result.failure._tag === "InvalidAmountFormat" && result.failure.input.length).toBeLessThanOrEqual(
      70,
    )
  })

  it("crashes on decimals no asset can have (a programmer error)", () => {
    expect(() => parseAmount("1", -1)).toThrow()
    expect(() => parseAmount("1", 1.5)).toThrow()
    expect(() => parseAmount("1", 39)).toThrow()
  })
})

describe("parseAmountNumber", () => {
  const cases: ReadonlyArray<readonly [string, number, number, Expected, { allowZero?: boolean }?]> = [
    ["0.1 reads as written, not as its binary fraction", 0.1, 6, 100_000n],
    ["0.1 + 0.2 has 17 significant digits", 0.1 + 0.2, 18, { tag: "ImpreciseAmountNumber" }],
    ["integer", 100, 2, 10_000n],
    ["fraction", 12.34, 2, 1_234n],
    ["too many decimals", 1.234, 2, { tag: "TooManyDecimals", fields: { decimals: 3, max: 2 } }],
    ["1e20 is printed in full", 1e20, 0, 100_000_000_000_000_000_000n],
    ["1e21, written with an exponent, is read digit for digit", 1e21, 0, 10n ** 21n],
    ["1.5e21 likewise", 1.5e21, 2, 15n * 10n ** 22n],
    ["1e-7 is 0.0000001", 1e-7, 18, 100_000_000_000n],
    ["1.25e-10 is 0.000000000125", 1.25e-10, 18, 125_000_000n],
    ["1e-7 has 7 decimals", 1e-7, 6, { tag: "TooManyDecimals", fields: { decimals: 7, max: 6 } }],
    [
      "5e-324, the smallest double, has 324 decimals, named as written",
      5e-324,
      38,
      { tag: "TooManyDecimals", fields: { input: "5e-324", decimals: 324, max: 38 } },
    ],
    ["1e300 is beyond u128", 1e300, 0, { tag: "AmountTooLarge" }],
    ["0.000001 is printed in full", 0.000001, 6, 1n],
    ["above 2^53 the digits are invented", 2 ** 60, 0, { tag: "ImpreciseAmountNumber" }],
    [
      "16 significant digits are not reliable",
      Number("9007199254740993"),
      0,
      { tag: "ImpreciseAmountNumber" },
    ],
    ["15 significant digits are", 123_456_789_012_345, 0, 123_456_789_012_345n],
    ["NaN", Number.NaN, 2, { tag: "InvalidAmountFormat", fields: { reason: "is not a finite number" } }],
    ["Infinity", Number.POSITIVE_INFINITY, 2, { tag: "InvalidAmountFormat" }],
    ["-Infinity", Number.NEGATIVE_INFINITY, 2, { tag: "InvalidAmountFormat" }],
    ["negative", -1, 2, { tag: "NegativeAmount" }],
    ["-0 is zero, refused by default", -0, 2, { tag: "ZeroAmount" }],
    ["-0 is zero, allowed on request", -0, 2, 0n, { allowZero: true }],
    ["0", 0, 2, { tag: "ZeroAmount" }],
  ]
  for (const [name, value, decimals, expected, options] of cases) {
    it(name, () => expectParsed(parseAmountNumber(value, decimals, options), expected))
  }
})

describe("formatAmount", () => {
  const cases: ReadonlyArray<readonly [bigint, number, { minDecimals?: number } | undefined, string]> = [
    [10_000n, 2, undefined, "100.00"],
    [150n, 2, undefined, "1.50"],
    [3n, 3, undefined, "0.003"],
    [1_500_000n, 6, undefined, "1.50"],
    [1_234_567n, 6, undefined, "1.234567"],
    [0n, 2, undefined, "0.00"],
    [0n, 6, { minDecimals: 0 }, "0"],
    [100n, 0, undefined, "100"],
    [5n, 1, undefined, "0.5"],
    [1_500_000n, 6, { minDecimals: 0 }, "1.5"],
    [1_000_000n, 6, { minDecimals: 0 }, "1"],
    [1_000_000n, 6, { minDecimals: 4 }, "1.0000"],
    [1_000_000n, 6, { minDecimals: 10 }, "1.000000"],
    [1n, 18, undefined, "0.000000000000000001"],
    [-150n, 2, undefined, "-1.50"],
    [-3n, 3, undefined, "-0.003"],
    [U128_MAX, 0, undefined, U128_MAX.toString()],
    [U128_MAX, 18, undefined, "340282366920938463463.374607431768211455"],
  ]
  it.each(cases)("%s with %i decimals, %j -> %s", (minor, decimals, options, text) => {
    expect(formatAmount(minor, decimals, options)).toBe(text)
  })

  it("round-trips through parseAmount", () => {
    for (const [minor, decimals] of [
      [1n, 2],
      [150n, 2],
      [U128_MAX, 6],
    ] as const) {
      expect(parseAmount(formatAmount(minor, decimals), decimals)).toEqual(Result.succeed(minor))
    }
  })
})

describe("assets", () => {
  it("builds the code from symbol and chain", () => {
    expect(assetCode("USDC", "ethereum")).toBe("USDC@ethereum")
    expect(makeAsset({ symbol: "USDC", chain: "ethereum", decimals: 6 })).toEqual(
      Result.succeed({ code: "USDC@ethereum", symbol: "USDC", chain: "ethereum", decimals: 6 }),
    )
  })

  const invalid: ReadonlyArray<
    readonly [string, { code: string; symbol: string; chain: string; decimals: number }]
  > = [
    [
      "code disagrees with symbol and chain",
      { code: "USDT@ethereum", symbol: "USDC", chain: "ethereum", decimals: 6 },
    ],
    ["upper-case chain", { code: "USDC@Ethereum", symbol: "USDC", chain: "Ethereum", decimals: 6 }],
    ["empty symbol", { code: "@ethereum", symbol: "", chain: "ethereum", decimals: 6 }],
    ["symbol with @", { code: "U@SDC@ethereum", symbol: "U@SDC", chain: "ethereum", decimals: 6 }],
    ["negative decimals", { code: "USDC@ethereum", symbol: "USDC", chain: "ethereum", decimals: -1 }],
    ["fractional decimals", { code: "USDC@ethereum", symbol: "USDC", chain: "ethereum", decimals: 1.5 }],
    ["too many decimals", { code: "USDC@ethereum", symbol: "USDC", chain: "ethereum", decimals: 39 }],
  ]
  it.each(invalid)("refuses an asset with %s", (_name, asset) => {
    const result = checkAsset(asset)
    expect(Result.isFailure(result) && result.failure._tag).toBe("InvalidAsset")
  })

  it("keeps only the four asset fields", () => {
    const withExtra = { code: "ETH@ethereum", symbol: "ETH", chain: "ethereum", decimals: 18, extra: true }
    expect(checkAsset(withExtra)).toEqual(
      Result.succeed({ code: "ETH@ethereum", symbol: "ETH", chain: "ethereum", decimals: 18 }),
    )
  })

  it.each([
    ["USDC@ethereum", { symbol: "USDC", chain: "ethereum" }],
    ["USDC.e@polygon", { symbol: "USDC.e", chain: "polygon" }],
    ["USDC", "InvalidAsset"],
    ["USDC@", "InvalidAsset"],
    ["@ethereum", "InvalidAsset"],
    ["a@b@c", "InvalidAsset"],
  ] as const)("parses the code %j", (code, expected) => {
    const result = parseAssetCode(code)
    if (typeof expected === "string") expect(Result.isFailure(result) && result.failure._tag).toBe(expected)
    else expect(result).toEqual(Result.succeed(expected))
  })

  it("lists every money error tag once", () => {
    expect(new Set(moneyErrorTags).size).toBe(moneyErrorTags.length)
    expect(moneyErrorTags).toContain("ImpreciseAmountNumber")
  })
})
