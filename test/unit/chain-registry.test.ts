// Proves the chain registry is complete and consistent: every chain present once with its family,
// chain id, native token and a confirmation policy; every token with its real decimals and a
// well-formed production contract on its own chain; the tokens left out are exactly the documented
// ones; and the wallet token list built on top of it.
import { describe, expect, it } from "vitest"
import {
  chainDefinition,
  chainIdentifiers,
  chains,
  chainToken,
  isChainIdentifier,
  isValidAddress,
  tokenSymbols,
} from "../../domain/chains/registry.ts"
import { chainFamily, evmChains } from "../../domain/custody/derive.ts"
import { chainTokens, isWalletChain, tokenAsset, walletChains } from "../../domain/platform/tokens.ts"

describe("chain registry", () => {
  it("lists the ten chains once each, in order", () => {
    expect(chains.map((chain) => chain.chain)).toEqual([
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
    ])
    expect(new Set(chainIdentifiers).size).toBe(10)
  })

  const expected = [
    ["ethereum", "evm", 1, "ETH", 18],
    ["solana", "solana", null, "SOL", 9],
    ["polygon", "evm", 137, "POL", 18],
    ["bsc", "evm", 56, "BNB", 18],
    ["arbitrum", "evm", 42161, "ETH", 18],
    ["optimism", "evm", 10, "ETH", 18],
    ["base", "evm", 8453, "ETH", 18],
    ["avalanche", "evm", 43114, "AVAX", 18],
    ["tron", "tron", null, "TRX", 6],
    ["ton", "ton", null, "TON", 9],
  ] as const
  for (const [chain, family, chain_id, symbol, decimals] of expected) {
    it(`${chain}: ${family}, chain id ${String(chain_id)}, gas in ${symbol} (${decimals} decimals)`, () => {
      const definition = chainDefinition(chain)
      expect(definition).toMatchObject({ chain, family, chain_id, native_token: { symbol, decimals } })
      expect(chainFamily(chain)).toBe(family)
      expect(definition.name.length).toBeGreaterThan(0)
    })
  }

  it("puts exactly the custody EVM chains in the evm family", () => {
    expect(chains.filter((chain) => chain.family === "evm").map((chain) => chain.chain)).toEqual([
      ...evmChains,
    ])
  })

  it("gives every chain a positive whole confirmation depth with a reason", () => {
    for (const { confirmations } of chains) {
      expect(Number.isInteger(confirmations.count) && confirmations.count >= 1).toBe(true)
      expect(confirmations.reason.length).toBeGreaterThan(20)
    }
  })

  const decimals: Readonly<Record<string, Readonly<Record<string, number | null>>>> = {
    ethereum: { USDC: 6, USDT: 6 },
    solana: { USDC: 6, USDT: 6 },
    polygon: { USDC: 6, USDT: 6 },
    bsc: { USDC: 18, USDT: 18 },
    arbitrum: { USDC: 6, USDT: 6 },
    optimism: { USDC: 6, USDT: 6 },
    base: { USDC: 6, USDT: null },
    avalanche: { USDC: 6, USDT: 6 },
    tron: { USDC: null, USDT: 6 },
    ton: { USDC: null, USDT: 6 },
  }
  for (const chain of chainIdentifiers) {
    for (const symbol of tokenSymbols) {
      const want = decimals[chain]?.[symbol] ?? null
      it(`${symbol} on ${chain}: ${want === null ? "not carried" : `${want} decimals`}`, () => {
        const deployment = chainToken(chain, symbol)
        expect(deployment?.decimals ?? null).toBe(want)
        if (deployment === null) return
        const address = deployment.contracts.production
        expect(address !== null && isValidAddress(chain, address)).toBe(true)
        expect(deployment.contracts.sandbox).toBeNull()
      })
    }
  }

  it("never reuses a production contract address", () => {
    const addresses = chains.flatMap((chain) => chain.tokens.map((token) => token.contracts.production))
    expect(new Set(addresses).size).toBe(addresses.length)
  })

  const identifiers: ReadonlyArray<readonly [string, boolean]> = [
    ["ton", true],
    ["avalanche", true],
    ["TON", false],
    ["bitcoin", false],
    ["solana-devnet", false],
    ["", false],
  ]
  for (const [value, known] of identifiers) {
    it(`isChainIdentifier(${JSON.stringify(value)}) is ${known}`, () => {
      expect(isChainIdentifier(value)).toBe(known)
    })
  }
})

describe("wallet tokens on the registry", () => {
  it("allows wallets on all ten chains", () => {
    expect([...walletChains]).toEqual([...chainIdentifiers])
    for (const chain of chainIdentifiers) expect(isWalletChain(chain)).toBe(true)
    expect(isWalletChain("bitcoin")).toBe(false)
  })

  it("carries only the tokens each chain has", () => {
    expect(chainTokens("ton").map((asset) => asset.code)).toEqual(["USDT@ton"])
    expect(chainTokens("base").map((asset) => asset.code)).toEqual(["USDC@base"])
    expect(chainTokens("ethereum").map((asset) => asset.code)).toEqual(["USDC@ethereum", "USDT@ethereum"])
    expect(tokenAsset("bsc", "USDT")).toEqual({
      code: "USDT@bsc",
      symbol: "USDT",
      chain: "bsc",
      decimals: 18,
    })
  })

  it("treats asking for a token a chain does not carry as a programmer error", () => {
    expect(() => tokenAsset("ton", "USDC")).toThrow(/USDC is not carried on ton/)
  })
})
