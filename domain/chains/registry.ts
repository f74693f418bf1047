/**
 * The chain registry: the ten chains the platform serves, with what every part of the platform needs
 * to know about each one and nothing that changes at run time (fees, heights and rates come from the
 * chain adapters). Pure data and lookups.
 *
 * Token contracts (production) are the issuers' canonical deployments, each confirmed by at least
 * two independent published lists: USDC by Circle's "USDC Contract Addresses" page and integrators'
 * tables (Gelato, Coinflow, ZeroDev); USDT by TON's documentation (the jetton master), Optimism's
 * token list (Ethereum, OP Mainnet) and integrators' tables (Arbitrum, Avalanche, BNB Smart Chain,
 * Polygon, Solana); TRON's USDT contract is the one custody's tests already use. Before production
 * traffic, check each once more against the chain's explorer. Left out on purpose:
 * - USDC on TRON: Circle stopped minting it in February 2024 and ended support in February 2025.
 * - USDC on TON: Circle has never issued USDC on TON.
 * - USDT on Base: Tether does not issue on Base; the USDT there is a bridged token of a third party.
 * On BNB Smart Chain both tokens are the Binance-Peg versions (issued by Binance against reserves of
 * the originals, 18 decimals), which is what that chain's users hold; neither Circle nor Tether issues
 * there directly.
 *
 * Sandbox contracts are null until the local chains deploy their own token contracts.
 */
import {
  type ChainFamily,
  type CustodyChain,
  chainFamily,
  isValidAddress as isValidCustodyAddress,
} from "../custody/derive.ts"
import type { Environment } from "../platform/scopes.ts"

/** Every chain, in the order the API lists them. */
export const chainIdentifiers = [
  "ethereum",
  "solana",
  "polygon",
  "bsc",
  "arbitrum",
  "optimism",
  "base",
  "avalanche",
  "tron",
  "ton",
] as const satisfies ReadonlyArray<CustodyChain>
export type ChainIdentifier = (typeof chainIdentifiers)[number]

// Custody derives addresses for exactly these chains: a chain missing here fails to compile.
const everyCustodyChainIsRegistered: CustodyChain extends ChainIdentifier ? true : never = true
void everyCustodyChainIsRegistered

export const tokenSymbols = ["USDC", "USDT"] as const
export type TokenSymbol = (typeof tokenSymbols)[number]

/** What "final" means on a chain: how deep a transaction must be before the ledger posts it. */
export interface ConfirmationPolicy {
  /** Blocks (or slots) built on top of the including one, the including one counted. */
  readonly count: number
  readonly unit: "blocks" | "slots" | "masterchain_blocks"
  /** Why this depth, in a sentence. */
  readonly reason: string
}

export interface TokenDeployment {
  readonly symbol: TokenSymbol
  /** The token's own on-chain decimals, read from its contract. */
  readonly decimals: number
  /** The contract (EVM, TRC-20), mint (Solana) or jetton master (TON); null where none is deployed. */
  readonly contracts: { readonly [E in Environment]: string | null }
}

export interface ChainDefinition {
  readonly chain: ChainIdentifier
  readonly name: string
  readonly family: ChainFamily
  /** The EIP-155 chain id of mainnet; null for chains without one (Solana, TRON, TON). */
  readonly chain_id: number | null
  /** The coin that pays for gas, with its decimals (wei, lamports, sun, nanotons). */
  readonly native_token: { readonly symbol: string; readonly decimals: number }
  readonly confirmations: ConfirmationPolicy
  /** The stablecoins the platform carries on this chain, in `tokenSymbols` order. */
  readonly tokens: ReadonlyArray<TokenDeployment>
}

const production = (address: string) => ({ production: address, sandbox: null })
const token = (symbol: TokenSymbol, decimals: number, address: string): TokenDeployment => ({
  symbol,
  decimals,
  contracts: production(address),
})

const ether = { symbol: "ETH", decimals: 18 } as const
/** Rollups inherit Ethereum's finality only once their batch is final on L1 (about 15-20 minutes). */
const rollup_reason =
  "the sequencer's order is final unless the sequencer itself misbehaves; this depth (about a minute) " +
  "guards against its rare reorgs, while full L1 finality of the batch takes 15-20 minutes more"

const definitions: { readonly [C in ChainIdentifier]: Omit<ChainDefinition, "chain" | "family"> } = {
  ethereum: {
    name: "Ethereum",
    chain_id: 1,
    native_token: ether,
    confirmations: {
      count: 64,
      unit: "blocks",
      reason:
        "two epochs of 32 slots: Casper FFG finalizes a checkpoint after two epochs, and reverting it " +
        "would cost a third of all stake",
    },
    tokens: [
      token("USDC", 6, "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"),
      token("USDT", 6, "0xdAC17F958D2ee523a2206206994597C13D831ec7"),
    ],
  },
  solana: {
    name: "Solana",
    chain_id: null,
    native_token: { symbol: "SOL", decimals: 9 },
    confirmations: {
      count: 32,
      unit: "slots",
      reason:
        "a block is finalized (rooted) once 31 confirmed blocks are built on it, the maximum vote " +
        "lockout; about 13 seconds",
    },
    tokens: [
      token("USDC", 6, "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"),
      token("USDT", 6, "Es9vMFrzaCERmJfrF4H2FYD4KCoNkY11McCe8BenwNYB"),
    ],
  },
  polygon: {
    name: "Polygon PoS",
    chain_id: 137,
    native_token: { symbol: "POL", decimals: 18 },
    confirmations: {
      count: 128,
      unit: "blocks",
      reason:
        "Polygon PoS has reorganised dozens of blocks deep in the past; 128 blocks (about 4 minutes) " +
        "is the depth exchanges commonly wait for",
    },
    tokens: [
      token("USDC", 6, "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359"),
      token("USDT", 6, "0xc2132D05D31c914a87C6611C10748AEb04B58e8F"),
    ],
  },
  bsc: {
    name: "BNB Smart Chain",
    chain_id: 56,
    native_token: { symbol: "BNB", decimals: 18 },
    confirmations: {
      count: 15,
      unit: "blocks",
      reason:
        "fast finality (BEP-126) finalizes a block once two thirds of validators vote, normally within " +
        "two or three blocks; 15 covers votes arriving late",
    },
    tokens: [
      token("USDC", 18, "0x8AC76a51cc950d9822D68b83fE1Ad97B32Cd580d"),
      token("USDT", 18, "0x55d398326f99059fF775485246999027B3197955"),
    ],
  },
  arbitrum: {
    name: "Arbitrum One",
    chain_id: 42161,
    native_token: ether,
    confirmations: { count: 240, unit: "blocks", reason: `blocks come every 0.25 s; ${rollup_reason}` },
    tokens: [
      token("USDC", 6, "0xaf88d065e77c8cC2239327C5EDb3A432268e5831"),
      token("USDT", 6, "0xFd086bC7CD5C481DCC9C85ebE478A1C0b69FCbb9"),
    ],
  },
  optimism: {
    name: "OP Mainnet",
    chain_id: 10,
    native_token: ether,
    confirmations: { count: 30, unit: "blocks", reason: `blocks come every 2 s; ${rollup_reason}` },
    tokens: [
      token("USDC", 6, "0x0b2C639c533813f4Aa9D7837CAf62653d097Ff85"),
      token("USDT", 6, "0x94b008aA00579c1307B0EF2c499aD98a8ce58e58"),
    ],
  },
  base: {
    name: "Base",
    chain_id: 8453,
    native_token: ether,
    confirmations: { count: 30, unit: "blocks", reason: `blocks come every 2 s; ${rollup_reason}` },
    // No USDT: Tether does not issue on Base (see the file comment).
    tokens: [token("USDC", 6, "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913")],
  },
  avalanche: {
    name: "Avalanche C-Chain",
    chain_id: 43114,
    native_token: { symbol: "AVAX", decimals: 18 },
    confirmations: {
      count: 1,
      unit: "blocks",
      reason: "Snowman consensus is final on acceptance: an accepted block is never reverted",
    },
    tokens: [
      token("USDC", 6, "0xB97EF9Ef8734C71904D8002F8b6Bc66Dd9c48a6E"),
      token("USDT", 6, "0x9702230A8Ea53601f5cD2dc00fDBc13d4dF4A8c7"),
    ],
  },
  tron: {
    name: "TRON",
    chain_id: null,
    native_token: { symbol: "TRX", decimals: 6 },
    confirmations: {
      count: 19,
      unit: "blocks",
      reason:
        "a block is solidified (irreversible) once 19 of the 27 super representatives, two thirds plus " +
        "one, have built on it; about a minute",
    },
    // No USDC: Circle ended USDC on TRON (see the file comment).
    tokens: [token("USDT", 6, "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t")],
  },
  ton: {
    name: "TON",
    chain_id: null,
    native_token: { symbol: "TON", decimals: 9 },
    confirmations: {
      count: 1,
      unit: "masterchain_blocks",
      reason:
        "a shardchain block is final once a masterchain block, signed by two thirds of validators, " +
        "commits it; a few seconds",
    },
    // No USDC: Circle does not issue USDC on TON.
    tokens: [token("USDT", 6, "EQCxE6mUtQJKFnGfaROTKOt1lZbDiiX1kCixRv7Nw2Id_sDs")],
  },
}

/** Every chain's definition, in `chainIdentifiers` order. */
export const chains: ReadonlyArray<ChainDefinition> = chainIdentifiers.map(chainDefinition)

/**
 * True when `value` names a registered chain (lower case).
 * @example isChainIdentifier("ton") // true
 */
export function isChainIdentifier(value: string): value is ChainIdentifier {
  return (chainIdentifiers as ReadonlyArray<string>).includes(value)
}

/**
 * The definition of `chain`.
 * @example chainDefinition("polygon").native_token // { symbol: "POL", decimals: 18 }
 */
export function chainDefinition(chain: ChainIdentifier): ChainDefinition {
  return { chain, family: chainFamily(chain), ...definitions[chain] }
}

/**
 * The deployment of `symbol` on `chain`, or null when the platform does not carry it there.
 * @example chainToken("ton", "USDC") // null
 */
export function chainToken(chain: ChainIdentifier, symbol: TokenSymbol): TokenDeployment | null {
  return definitions[chain].tokens.find((deployment) => deployment.symbol === symbol) ?? null
}

/**
 * Whether `address` is well formed for `chain` (spelling and checksum, not existence).
 * @example isValidAddress("ton", "UQCKhieGGl3ZbJ2zzggHsSLaXtRzk0znVopbSxw2HLsorhqg") // true
 */
export function isValidAddress(chain: ChainIdentifier, address: string): boolean {
  return isValidCustodyAddress(chain, address)
}
