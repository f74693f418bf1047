/**
 * Amounts cross the edge as decimal text ("12.50") and live inside as bigint minor units (1250n for
 * a 2-decimal asset). Parsing is exact or it fails with a named reason; it never rounds, because a
 * silently rounded payment is a wrong payment.
 */
import { Result } from "effect"
import { assert } from "../assert.ts"
import {
  type AmountError,
  AmountTooLarge,
  ImpreciseAmountNumber,
  InvalidAmountFormat,
  inputPreview,
  NegativeAmount,
  TooManyDecimals,
  ZeroAmount,
} from "./errors.ts"

/** The largest amount and balance, in minor units: TigerBeetle's u128, so ledgers can move there. */
export const U128_MAX: bigint = (1n << 128n) - 1n

/** Digits in U128_MAX (340282366920938463463374607431768211455). */
const u128DigitCount = 39

/** The most digits after the point any asset may have; more leaves no whole unit in a u128. */
export const assetDecimalsMax = 38

/**
 * Longest text looked at: a valid amount needs at most 39 + 1 + 38 characters, and a bound keeps a
 * hostile string from costing more than a glance.
 */
const amountTextLengthMax = 256

/** Significant decimal digits a double is guaranteed to carry through text and back (DBL_DIG). */
const numberSignificantDigitsMax = 15

/**
 * JSON's number grammar without exponent and without a leading `+`, plus an optional `-` that we
 * recognise only to reject it by name. Leading zeros ("007"), ".5" and "1." are not in it: they are
 * legal in some languages and not in others, so they are refused rather than guessed at.
 */
const amountPattern = /^(-?)(0|[1-9][0-9]*)(?:\.([0-9]+))?$/

const formatReasons: ReadonlyArray<readonly [RegExp, string]> = [
  [/^$/, "is empty"],
  [/\s/, "contains whitespace"],
  [/^\+/, "has a leading plus sign"],
  [/^-?0[xXoObB]/, "is not decimal (hexadecimal, octal or binary)"],
  [/^-?[0-9.]+[eE]/, "uses exponent notation"],
  [/^-?\./, "has no digit before the decimal point"],
  [/\.$/, "has no digit after the decimal point"],
  [/^-?0[0-9]/, "has leading zeros"],
  [/,/, "contains a comma (use '.' as the decimal point and no grouping)"],
]

function formatReason(text: string): string {
  if (text.length > amountTextLengthMax) return `is longer than ${amountTextLengthMax} characters`
  for (const [pattern, reason] of formatReasons) if (pattern.test(text)) return reason
  return "is not a decimal number"
}

export interface ParseAmountOptions {
  /** Accept zero (a balance or a limit); payments leave it false. */
  readonly allowZero?: boolean
}

function assertDecimals(decimals: number): void {
  assert(Number.isInteger(decimals) && decimals >= 0 && decimals <= assetDecimalsMax, "decimals in 0..38")
}

/**
 * Parses a decimal string into minor units of an asset with `decimals` decimals. Exact: digits the
 * asset cannot hold are an error, even zeros ("1.230" for 2 decimals), since the client then meant
 * a different precision than the asset's.
 * @example parseAmount("12.5", 2) // Result.succeed(1250n)
 * @example parseAmount("1e3", 2) // Result.fail(InvalidAmountFormat { reason: "uses exponent notation" })
 */
export function parseAmount(
  text: string,
  decimals: number,
  options: ParseAmountOptions = {},
): Result.Result<bigint, AmountError> {
  assertDecimals(decimals)
  const input = inputPreview(text)
  const match = text.length <= amountTextLengthMax ? amountPattern.exec(text) : null
  if (match === null) return Result.fail(new InvalidAmountFormat({ input, reason: formatReason(text) }))
  const [, sign = "", whole = "", fraction = ""] = match
  if (sign === "-") return Result.fail(new NegativeAmount({ input }))
  if (fraction.length > decimals) {
    return Result.fail(new TooManyDecimals({ input, decimals: fraction.length, max: decimals }))
  }
  // Without leading zeros, more digits than U128_MAX has means larger; skip building a huge bigint.
  if (whole !== "0" && whole.length + decimals > u128DigitCount) {
    return Result.fail(new AmountTooLarge({ input, max: U128_MAX }))
  }
  const minor = BigInt(whole + fraction.padEnd(decimals, "0"))
  if (minor > U128_MAX) return Result.fail(new AmountTooLarge({ input, max: U128_MAX }))
  if (minor === 0n && options.allowZero !== true) return Result.fail(new ZeroAmount({ input }))
  return Result.succeed(minor)
}

function significantDigitCount(plain: string): number {
  return withoutTrailingZeros(plain.replace(".", "").replace(/^0+/, "")).length
}

/**
 * `text` without its trailing zeros. A loop, not `/0+$/`: the pattern is tried at every zero of a
 * run that does not end the text, which is quadratic in the run's length (a megabyte of zeros in a
 * request's number took minutes).
 * @example withoutTrailingZeros("120300") // "1203"
 */
export function withoutTrailingZeros(text: string): string {
  let end = text.length
  while (end > 0 && text.charCodeAt(end - 1) === 48) end--
  return text.slice(0, end)
}

/**
 * The plain decimal text of what `String(number)` wrote with an exponent, digit for digit:
 * "1e-7" is "0.0000001", "1.5e+21" is "1500000000000000000000".
 */
function withoutExponent(text: string): string {
  const [mantissa = "", exponentText = "0"] = text.split("e")
  const [whole = "", fraction = ""] = mantissa.split(".")
  const digits = `${whole}${fraction}`
  const point = whole.length + Number(exponentText) // where the point goes among `digits`
  if (point <= 0) return `0.${"0".repeat(-point)}${digits}`
  if (point >= digits.length) return digits + "0".repeat(point - digits.length)
  return `${digits.slice(0, point)}.${digits.slice(point)}`
}

/**
 * Parses a JSON number into minor units through its shortest round-trip text (`String(value)`), so
 * 0.1 reads as "0.1", not as the binary fraction 0.1000000000000000055... (what JavaScript writes
 * with an exponent, below 1e-6 or from 1e21 up, is read digit for digit: 1e-7 is 0.0000001).
 * Rejects NaN and the infinities, and numbers with more than 15 significant digits, whose text may
 * not be what the client wrote. -0 is zero.
 * @example parseAmountNumber(0.1, 6) // Result.succeed(100000n)
 * @example parseAmountNumber(1e-7, 18) // Result.succeed(100000000000n)
 */
export function parseAmountNumber(
  value: number,
  decimals: number,
  options: ParseAmountOptions = {},
): Result.Result<bigint, AmountError> {
  assertDecimals(decimals)
  const text = String(value)
  if (!Number.isFinite(value)) {
    return Result.fail(new InvalidAmountFormat({ input: text, reason: "is not a finite number" }))
  }
  if (value < 0) return Result.fail(new NegativeAmount({ input: text }))
  // Past u128 at any precision; its digits need not be written out to know.
  if (value >= 1e39) return Result.fail(new AmountTooLarge({ input: text, max: U128_MAX }))
  const plain = text.includes("e") ? withoutExponent(text) : text
  const digits = significantDigitCount(plain)
  if (digits > numberSignificantDigitsMax) {
    return Result.fail(
      new ImpreciseAmountNumber({ input: text, significant_digits: digits, max: numberSignificantDigitsMax }),
    )
  }
  // Tiny numbers (5e-324 is 324 decimals) are refused for their decimals, named as the client wrote them.
  const fraction_digits = plain.length - (plain.indexOf(".") + 1)
  if (plain.includes(".") && fraction_digits > decimals) {
    return Result.fail(new TooManyDecimals({ input: text, decimals: fraction_digits, max: decimals }))
  }
  return parseAmount(plain, decimals, options)
}

export interface FormatAmountOptions {
  /** Fewest digits after the point (default 2, capped at the asset's decimals). */
  readonly minDecimals?: number
}

/**
 * Writes minor units as an exact decimal string: at least `minDecimals` digits after the point and
 * no trailing zeros beyond them, so money reads as money ("1.50") without hiding precision ("0.003").
 * Negative values (a view of an overdrawn balance) get a leading "-".
 * @example formatAmount(150n, 2) // "1.50"
 * @example formatAmount(3n, 3) // "0.003"
 * @example formatAmount(1_500_000n, 6) // "1.50"
 */
export function formatAmount(minor: bigint, decimals: number, options: FormatAmountOptions = {}): string {
  assertDecimals(decimals)
  const minDecimals = options.minDecimals ?? 2
  assert(Number.isInteger(minDecimals) && minDecimals >= 0, "minDecimals is a non-negative integer")
  const shown = Math.min(minDecimals, decimals)
  const negative = minor < 0n
  const digits = (negative ? -minor : minor).toString().padStart(decimals + 1, "0")
  const whole = digits.slice(0, digits.length - decimals)
  let fraction = digits.slice(digits.length - decimals)
  let end = fraction.length
  while (end > shown && fraction[end - 1] === "0") end -= 1
  fraction = fraction.slice(0, end)
  return `${negative ? "-" : ""}${whole}${fraction === "" ? "" : "."}${fraction}`
}
