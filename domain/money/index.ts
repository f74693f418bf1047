/** Money at the edges: assets, and exact conversion between decimal text and bigint minor units. */
export {
  assetDecimalsMax,
  type FormatAmountOptions,
  formatAmount,
  type ParseAmountOptions,
  parseAmount,
  parseAmountNumber,
  U128_MAX,
} from "./amount.ts"
export { type Asset, assetCode, checkAsset, makeAsset, parseAssetCode } from "./asset.ts"
export {
  type AmountError,
  AmountTooLarge,
  ImpreciseAmountNumber,
  InvalidAmountFormat,
  InvalidAsset,
  type MoneyError,
  moneyErrorTags,
  NegativeAmount,
  TooManyDecimals,
  ZeroAmount,
} from "./errors.ts"
