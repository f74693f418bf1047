/**
 * The chains wallets live on and the tokens each one carries, with their real on-chain decimals
 * (USDC and USDT use 6 on most chains; their Binance-Peg versions on BNB Smart Chain use 18). A
 * token is an asset of the ledger: `<SYMBOL>@<chain>`.
 */
import { type Asset, assetCode } from "../money/asset.ts"

/** Chains a wallet can be created on today; the other six arrive with the chains work. */
export const walletChains = ["ethereum", "solana", "polygon", "bsc"] as const
export type WalletChain = (typeof walletChains)[number]

export const tokenSymbols = ["USDC", "USDT"] as const
export type TokenSymbol = (typeof tokenSymbols)[number]

const decimalsByChain: Readonly<Record<WalletChain, Readonly<Record<TokenSymbol, number>>>> = {
  ethereum: { USDC: 6, USDT: 6 },
  solana: { USDC: 6, USDT: 6 },
  polygon: { USDC: 6, USDT: 6 },
  bsc: { USDC: 18, USDT: 18 },
}

/**
 * True when `chain` is one wallets can be created on.
 * @example isWalletChain("solana") // true
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
 * The ledger asset of `symbol` on `chain`.
 * @example tokenAsset("bsc", "USDT") // { code: "USDT@bsc", symbol: "USDT", chain: "bsc", decimals: 18 }
 */
export function tokenAsset(chain: WalletChain, symbol: TokenSymbol): Asset {
  return { code: assetCode(symbol, chain), symbol, chain, decimals: decimalsByChain[chain][symbol] }
}

/** Every token on `chain`, in a stable order. */
export function chainTokens(chain: WalletChain): ReadonlyArray<Asset> {
  return tokenSymbols.map((symbol) => tokenAsset(chain, symbol))
}
