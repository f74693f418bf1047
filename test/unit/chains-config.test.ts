// Proves the parsing of the chain variables (SANDBOX_EVM_CHAINS, SANDBOX_SOLANA, GAS_USD_RATES,
// CHAIN_RPC_URL_<CHAIN>) and the USD conversion of gas estimates, as tables of cases, ugly ones
// included.
import { describe, expect, it } from "vitest"
import { chainDefinition, chainIdentifiers } from "../../domain/chains/registry.ts"
import { evmChains, isValidAddress } from "../../domain/custody/derive.ts"
import { productionChain } from "../../src/chains/production.ts"
import { ConfigError, readConfig } from "../../src/config.ts"
import { usdOf } from "../../src/http/handlers/chains.ts"

describe("SANDBOX_EVM_CHAINS", () => {
  it.each([
    [undefined, [...evmChains]],
    ["", []],
    [" ", []],
    ["ethereum", ["ethereum"]],
    ["Polygon, base,,polygon", ["polygon", "base"]],
  ])("%j -> %j", (text, chains) => {
    expect(readConfig(text === undefined ? {} : { SANDBOX_EVM_CHAINS: text }).sandboxEvmChains).toEqual(
      chains,
    )
  })

  it.each(["solana", "ethereum,bitcoin"])("refuses %j, naming the variable", (text) => {
    expect(() => readConfig({ SANDBOX_EVM_CHAINS: text })).toThrow(ConfigError)
    expect(() => readConfig({ SANDBOX_EVM_CHAINS: text })).toThrow(/SANDBOX_EVM_CHAINS/)
  })
})

describe("SANDBOX_SOLANA", () => {
  it.each([
    [undefined, true],
    ["", true],
    ["true", true],
    [" TRUE ", true],
    ["false", false],
    ["False", false],
  ])("%j -> %j", (text, on) => {
    expect(readConfig(text === undefined ? {} : { SANDBOX_SOLANA: text }).sandboxSolana).toBe(on)
  })

  it.each(["0", "no", "yes", "solana"])("refuses %j, naming the variable", (text) => {
    expect(() => readConfig({ SANDBOX_SOLANA: text })).toThrow(/SANDBOX_SOLANA/)
  })
})

describe("GAS_USD_RATES and CHAIN_RPC_URL_<CHAIN>", () => {
  it("reads chain=rate pairs, the endpoint of each chain and the API keys", () => {
    const config = readConfig({
      GAS_USD_RATES: "ethereum=3500, Polygon=0.5",
      CHAIN_RPC_URL_ETHEREUM: "https://rpc.example/eth",
      CHAIN_RPC_URL_SOLANA: "https://rpc.example/sol",
      CHAIN_RPC_URL_TON: "https://toncenter.example/api/v2/jsonRPC",
      CHAIN_API_KEY_TON: "ton-key",
      CHAIN_RPC_URL_TRON: "",
      CHAIN_RPC_URL_DOGE: "https://rpc.example/doge",
    })
    expect([...config.gasUsdRates]).toEqual([
      ["ethereum", "3500"],
      ["polygon", "0.5"],
    ])
    expect(new Map(config.chainRpcUrls)).toEqual(
      new Map([
        ["ethereum", "https://rpc.example/eth"],
        ["solana", "https://rpc.example/sol"],
        ["ton", "https://toncenter.example/api/v2/jsonRPC"],
      ]),
    )
    expect([...config.chainApiKeys]).toEqual([["ton", "ton-key"]])
  })

  it.each(["ethereum", "ethereum=", "ethereum=-1", "ethereum=1e3", "ethereum=3,5"])("refuses %j", (text) => {
    expect(() => readConfig({ GAS_USD_RATES: text })).toThrow(/GAS_USD_RATES/)
  })
})

describe("usdOf", () => {
  it.each([
    [21_000n * 10n ** 9n, 18, "3500", "0.0735"],
    [1n, 18, "3500", "0.000001"],
    [0n, 18, "3500", "0.00"],
    [10n ** 18n, 18, "0.5", "0.50"],
    [123_456_789n, 9, "150.25", "18.549383"],
  ])("%s at %s decimals and %s USD -> %s (rounded up)", (fee, decimals, rate, usd) => {
    expect(usdOf(fee, decimals, rate)).toBe(usd)
  })
})

describe("productionChain", () => {
  it.each(chainIdentifiers)(
    "%s: the family's adapter, the registry's depth and contracts, a valid gas probe, no faucet",
    (chain) => {
      const definition = chainDefinition(chain)
      const running = productionChain(chain, "http://127.0.0.1:9/never-called", undefined)
      expect(running.finality_confirmations).toBe(definition.confirmations.count)
      expect(running.fund).toBeNull()
      expect(running.faucet_senders.size).toBe(0)
      expect(isValidAddress(chain, running.gas_probe_address)).toBe(true)
      const expected = definition.tokens.flatMap((token) =>
        token.contracts.production === null ? [] : [[token.symbol, token.contracts.production]],
      )
      expect([...running.contracts]).toEqual(expected)
      for (const contract of running.contracts.values()) expect(isValidAddress(chain, contract)).toBe(true)
      // A deposit scan's widest range: TON counts in logical time (about a million per
      // transaction), Tron's scan costs two requests per block, the rest take the port's default.
      const range = { ton: 1n << 62n, tron: 200n }[definition.family as string]
      expect(running.incoming_block_range_max).toBe(range)
    },
  )
})
