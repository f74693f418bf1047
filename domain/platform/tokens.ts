/**
 * The chains wallets live on and the tokens each one carries, read from the chain registry
 * (domain/chains/registry.ts) with their real on-chain decimals (USDC and USDT use 6 on most chains;
 * their Binance-Peg versions on BNB Smart Chain use 18). A token is an asset of the ledger:
 * `<SYMBOL>@<chain>`. Not every chain carries both: USDC is absent on TRON and TON, USDT on Base.
 */

import { assert } from "../assert.ts"
import {
  type ChainIdentifier,
  chainIdentifiers,
  chainToken,
  type TokenSymbol,
  tokenSymbols,
} from "../chains/registry.ts"
import { type Asset, assetCode } from "../money/asset.ts"

export { type TokenSymbol, tokenSymbols }

/** Chains a wallet can be created on: every registered chain. */
export const walletChains = chainIdentifiers
export type WalletChain = ChainIdentifier

/**
 * True when `chain` is one wallets can be created on.
 * @example isWalletChain("ton") // true
 */
export function isWalletChain(chain: string): chain is WalletChain {
  return (walletChains as ReadonlyArray<string>).includes(chain)
}

/**
 * True when `symbol` names a supported token (case-sensitive: symbols are upper case).
 * @example isTokenSymbol("USDC") // true
 */
export function isTokenSymbol(symbol: string): symbol is TokenSymbol {
  return (tokenSymbols as ReadonlyArray<string>).includes(symbol)
}

/**
 * The ledger asset of `symbol` on `chain`, or null when the chain does not carry that token.
 * @example chainTokenAsset("ton", "USDC") // null
 */
export function chainTokenAsset(chain: WalletChain, symbol: TokenSymbol): Asset | null {
  const deployment = chainToken(chain, symbol)
  if (deployment === null) return null
  return { code: assetCode(symbol, chain), symbol, chain, decimals: deployment.decimals }
}

/**
 * The ledger asset of `symbol` on `chain`, which must carry it (check with `chainTokenAsset` first).
 * @example tokenAsset("bsc", "USDT") // { code: "USDT@bsc", symbol: "USDT", chain: "bsc", decimals: 18 }
 */
export function tokenAsset(chain: WalletChain, symbol: TokenSymbol): Asset {
  const asset = chainTokenAsset(chain, symbol)
  assert(asset !== null, `${symbol} is not carried on ${chain}`)
  return asset
}

/** Every token on `chain`, in `tokenSymbols` order. */
export function chainTokens(chain: WalletChain): ReadonlyArray<Asset> {
  return tokenSymbols.flatMap((symbol) => chainTokenAsset(chain, symbol) ?? [])
}
