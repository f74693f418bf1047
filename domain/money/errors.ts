/**
 * Why an amount or an asset was rejected at the edge. Each outcome is its own class so that the
 * HTTP layer maps it to a precise error code and a client can tell "too many decimals" from "not a
 * number". Inputs are echoed back shortened, so a hostile megabyte string never reaches a log whole.
 */
import { Data } from "effect"

/** Not a plain decimal number: empty, whitespace, exponent, sign `+`, hex, `.5`, `1.`, `007`... */
export class InvalidAmountFormat extends Data.TaggedError("InvalidAmountFormat")<{
  readonly input: string
  readonly reason: string
}> {}

/** More digits after the decimal point than the asset has. */
export class TooManyDecimals extends Data.TaggedError("TooManyDecimals")<{
  readonly input: string
  /** Digits written after the point. */
  readonly decimals: number
  /** The asset's decimals. */
  readonly max: number
}> {}

/** Amounts are magnitudes; direction is given by debit and credit, never by a sign. */
export class NegativeAmount extends Data.TaggedError("NegativeAmount")<{
  readonly input: string
}> {}

/** Zero, where the caller did not allow it (a payment of nothing is a mistake). */
export class ZeroAmount extends Data.TaggedError("ZeroAmount")<{
  readonly input: string
}> {}

/** Above `U128_MAX` minor units, the largest balance the ledger can hold. */
export class AmountTooLarge extends Data.TaggedError("AmountTooLarge")<{
  readonly input: string
  readonly max: bigint
}> {}

/**
 * A JSON number whose shortest form has more significant digits than a double carries reliably
 * (15): the value the client wrote may not be the value we received. Send a decimal string instead.
 */
export class ImpreciseAmountNumber extends Data.TaggedError("ImpreciseAmountNumber")<{
  readonly input: string
  readonly significant_digits: number
  readonly max: number
}> {}

/** An asset whose symbol, chain, decimals or code break the rules in asset.ts. */
export class InvalidAsset extends Data.TaggedError("InvalidAsset")<{
  readonly code: string
  readonly reason: string
}> {}

export type AmountError =
  | InvalidAmountFormat
  | TooManyDecimals
  | NegativeAmount
  | ZeroAmount
  | AmountTooLarge
  | ImpreciseAmountNumber

export type MoneyError = AmountError | InvalidAsset

const moneyErrorTagSet: Record<MoneyError["_tag"], true> = {
  InvalidAmountFormat: true,
  TooManyDecimals: true,
  NegativeAmount: true,
  ZeroAmount: true,
  AmountTooLarge: true,
  ImpreciseAmountNumber: true,
  InvalidAsset: true,
}

/** Every money error tag, for the HTTP error table to prove it maps each one. */
export const moneyErrorTags = Object.keys(moneyErrorTagSet) as ReadonlyArray<MoneyError["_tag"]>

const inputPreviewLengthMax = 64

/** Shortens echoed input to a bounded preview. */
export function inputPreview(input: string): string {
  return input.length <= inputPreviewLengthMax ? input : `${input.slice(0, inputPreviewLengthMax)}...`
}
