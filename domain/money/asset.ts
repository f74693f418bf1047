/**
 * An asset is a symbol on a chain with a fixed number of decimals. The same symbol on two chains is
 * two assets (USDC on Ethereum is not USDC on Solana until a bridge says so), hence the code
 * `SYMBOL@chain`. The shape matches `AssetRecord` in the ledger's events.
 */
import { Result } from "effect"
import { assetDecimalsMax } from "./amount.ts"
import { InvalidAsset, inputPreview } from "./errors.ts"

export interface Asset {
  /** `<SYMBOL>@<chain>`, e.g. `USDC@ethereum`. */
  readonly code: string
  readonly symbol: string
  readonly chain: string
  readonly decimals: number
}

/** Letters and digits, then also `.`, `_`, `-` (`USDC.e`, `e-CNY`); up to 32 characters. */
const symbolPattern = /^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$/
/** Lower case so that one chain has one spelling: `ethereum`, `solana`, `ton-testnet`. */
const chainPattern = /^[a-z0-9][a-z0-9-]{0,31}$/

/**
 * The code of `symbol` on `chain`; does not validate (see `makeAsset`).
 * @example assetCode("USDC", "ethereum") // "USDC@ethereum"
 */
export function assetCode(symbol: string, chain: string): string {
  return `${symbol}@${chain}`
}

/**
 * Builds a valid asset, deriving its code.
 * @example makeAsset({ symbol: "USDC", chain: "ethereum", decimals: 6 })
 */
export function makeAsset(spec: {
  readonly symbol: string
  readonly chain: string
  readonly decimals: number
}): Result.Result<Asset, InvalidAsset> {
  return checkAsset({ code: assetCode(spec.symbol, spec.chain), ...spec })
}

/**
 * Checks an asset that arrived whole (a command, a decoded event): symbol, chain and decimals follow
 * the rules and the code is the one they imply. Returns a copy holding only the four fields.
 */
export function checkAsset(asset: Asset): Result.Result<Asset, InvalidAsset> {
  const code = inputPreview(asset.code)
  if (!symbolPattern.test(asset.symbol)) {
    return Result.fail(
      new InvalidAsset({ code, reason: "symbol must be 1-32 letters, digits, '.', '_' or '-'" }),
    )
  }
  if (!chainPattern.test(asset.chain)) {
    return Result.fail(
      new InvalidAsset({ code, reason: "chain must be 1-32 lower-case letters, digits or '-'" }),
    )
  }
  if (!Number.isInteger(asset.decimals) || asset.decimals < 0 || asset.decimals > assetDecimalsMax) {
    return Result.fail(
      new InvalidAsset({ code, reason: `decimals must be an integer in 0..${assetDecimalsMax}` }),
    )
  }
  if (asset.code !== assetCode(asset.symbol, asset.chain)) {
    return Result.fail(new InvalidAsset({ code, reason: "code must be <symbol>@<chain>" }))
  }
  return Result.succeed({
    code: asset.code,
    symbol: asset.symbol,
    chain: asset.chain,
    decimals: asset.decimals,
  })
}

/**
 * Splits a code into symbol and chain, checking both (decimals are not in the code).
 * @example parseAssetCode("USDC@ethereum") // Result.succeed({ symbol: "USDC", chain: "ethereum" })
 */
export function parseAssetCode(
  code: string,
): Result.Result<{ readonly symbol: string; readonly chain: string }, InvalidAsset> {
  const at = code.indexOf("@")
  const symbol = at < 0 ? "" : code.slice(0, at)
  const chain = at < 0 ? "" : code.slice(at + 1)
  if (!symbolPattern.test(symbol) || !chainPattern.test(chain)) {
    return Result.fail(
      new InvalidAsset({ code: inputPreview(code), reason: "code must be <symbol>@<chain>" }),
    )
  }
  return Result.succeed({ symbol, chain })
}
