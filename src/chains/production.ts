/**
 * The production networks as the platform reaches them: one adapter per chain configured with
 * `CHAIN_RPC_URL_<CHAIN>` (and `CHAIN_API_KEY_<CHAIN>` where the provider wants a key), the registry's
 * token contracts and confirmation depth. Nothing here runs in the test suite: no public network is
 * reachable from our machines, so each family's transport is exercised against its local stand-in
 * (anvil, LiteSVM, @ton/sandbox, a Tron node stand-in) and only the wiring is ours to get right.
 *
 * Gas probes (the sender whose native transfer prices `GET /api/v2/chains`'s estimate) are addresses
 * that hold native coins on every network: burn addresses nobody can spend from.
 */
import { makeEvmAdapter } from "../../adapters/chains/evm/adapter.ts"
import { makeSolanaAdapter } from "../../adapters/chains/solana/adapter.ts"
import { makeRpcTransport } from "../../adapters/chains/solana/rpc-transport.ts"
import { makeTonAdapter, ton_incoming_lt_range_max } from "../../adapters/chains/ton/adapter.ts"
import { makeHttpTransport } from "../../adapters/chains/ton/http-transport.ts"
import { makeTronAdapter } from "../../adapters/chains/tron/adapter.ts"
import { makeTronHttpTransport } from "../../adapters/chains/tron/http-transport.ts"
import { type ChainIdentifier, chainDefinition, type TokenSymbol } from "../../domain/chains/registry.ts"
import type { ChainAdapter } from "../ports/chain.ts"
import type { RunningChain } from "../ports/chains.ts"

/** The gas probe of each family (see the module comment). */
const gas_probes = {
  evm: "0x0000000000000000000000000000000000000000",
  solana: "1nc1nerator11111111111111111111111111111111",
  ton: "UQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAJKZ",
  tron: "T9yD14Nj9j7xAB4dbGeiX9h8unkKHxuWwb",
} as const

/** How long a signed Tron transaction may wait for inclusion, and the most energy one may burn. */
const tron_lifetime_ms = 120_000n
const tron_fee_limit_sun = 100_000_000n
/** Tron's deposit scans read this many blocks at most: each block costs the node two requests. */
const tron_incoming_block_range_max = 200n
const request_timeout_ms = 10_000

/**
 * The running chain of `chain` on its production endpoint.
 * @example productionChain("solana", "https://api.mainnet-beta.solana.com", undefined)
 */
export function productionChain(
  chain: ChainIdentifier,
  url: string,
  api_key: string | undefined,
): RunningChain {
  const definition = chainDefinition(chain)
  const finality_confirmations = definition.confirmations.count
  const contracts = new Map<TokenSymbol, string>()
  for (const token of definition.tokens)
    if (token.contracts.production !== null) contracts.set(token.symbol, token.contracts.production)
  const key = api_key === undefined ? {} : { api_key }
  const adapter = ((): ChainAdapter => {
    switch (definition.family) {
      case "evm":
        return makeEvmAdapter({ chain_id: definition.chain_id ?? 0, rpc_url: url, finality_confirmations })
      case "solana":
        return makeSolanaAdapter(makeRpcTransport(url), { finality_confirmations })
      case "ton":
        return makeTonAdapter(makeHttpTransport({ endpoint_url: url, request_timeout_ms, ...key }))
      case "tron":
        return makeTronAdapter(
          { lifetime_ms: tron_lifetime_ms, fee_limit_sun: tron_fee_limit_sun, finality_confirmations },
          makeTronHttpTransport({ full_node_url: url, request_timeout_ms, ...key }),
        )
    }
  })()
  return {
    adapter,
    contracts,
    gas_probe_address: gas_probes[definition.family],
    fund: null,
    finality_confirmations,
    faucet_senders: new Set(),
    ...(definition.family === "tron" ? { incoming_block_range_max: tron_incoming_block_range_max } : {}),
    ...(definition.family === "ton" ? { incoming_block_range_max: ton_incoming_lt_range_max } : {}),
  }
}
