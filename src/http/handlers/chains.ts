/**
 * The chain registry as the API shows it: every chain with the tokens carried in the caller's
 * environment. Gas estimates are left null until the chain adapters can read live fees; the
 * response says so instead of inventing numbers.
 */
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { type ChainDefinition, chains } from "../../../domain/chains/registry.ts"
import type { Environment } from "../../../domain/platform/scopes.ts"
import { CurrentCaller, PlatformApi } from "../api.ts"

/** One chain's entry for callers in `environment`. */
export const chainView = (chain: ChainDefinition, environment: Environment) => ({
  chain: chain.chain,
  name: chain.name,
  family: chain.family,
  chain_id: chain.chain_id,
  native_token: chain.native_token,
  confirmations: chain.confirmations,
  tokens: chain.tokens.map((deployment) => ({
    token: deployment.symbol,
    decimals: deployment.decimals,
    contract_address: deployment.contracts[environment],
  })),
  gas: null,
  gas_status: "unavailable" as const,
})

export const ChainsHandlers = HttpApiBuilder.group(PlatformApi, "chains", (handlers) =>
  Effect.succeed(
    handlers.handle("list", () =>
      Effect.gen(function* () {
        const caller = yield* CurrentCaller
        return { data: chains.map((chain) => chainView(chain, caller.environment)) }
      }),
    ),
  ),
)
