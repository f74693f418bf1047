/**
 * The chain registry as the API shows it: every chain with the tokens carried in the caller's
 * environment (in the sandbox, the contracts the local chains deployed) and a live gas estimate from
 * the chain's adapter where one runs. A chain without an adapter, or whose node does not answer in
 * time, says "unavailable" instead of inventing a number.
 */
import { Effect, Exit } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { type ChainDefinition, chains } from "../../../domain/chains/registry.ts"
import { formatAmount } from "../../../domain/money/amount.ts"
import type { Environment } from "../../../domain/platform/scopes.ts"
import { Chains, type RunningChain } from "../../ports/chains.ts"
import { CurrentCaller, PlatformApi } from "../api.ts"

/** A node slower than this leaves its chain's gas "unavailable" rather than holding the list. */
const gas_estimate_timeout_ms = 2_000
const usd_decimals = 6

export interface GasEstimate {
  readonly native: string
  readonly usd: string | null
}

/**
 * `fee` (in the native unit's smallest unit) in USD at `rate` per whole token, rounded up to 6
 * decimals: an estimate of a cost should not understate it.
 * @example usdOf(21_000n * 10n ** 9n, 18, "3500") // "0.0735"
 */
export const usdOf = (fee: bigint, native_decimals: number, rate: string): string => {
  const [whole = "0", fraction = ""] = rate.split(".")
  const rate_scaled = BigInt(`${whole}${fraction}`)
  const numerator = fee * rate_scaled * 10n ** BigInt(usd_decimals)
  const denominator = 10n ** BigInt(native_decimals + fraction.length)
  const rounded_up = (numerator + denominator - 1n) / denominator
  return formatAmount(rounded_up, usd_decimals)
}

/** The live gas estimate of a running chain, or null when its node does not answer in time. */
const liveGas = (
  definition: ChainDefinition,
  running: RunningChain,
  rate: string | undefined,
): Effect.Effect<GasEstimate | null> =>
  running.adapter
    .estimateTransferFee(running.gas_probe_address, {
      asset: { kind: "native" },
      to: running.gas_probe_address,
      amount: 1n,
    })
    .pipe(
      Effect.timeout(gas_estimate_timeout_ms),
      Effect.exit,
      Effect.map((exit) =>
        Exit.isSuccess(exit)
          ? {
              native: formatAmount(exit.value, definition.native_token.decimals),
              usd: rate === undefined ? null : usdOf(exit.value, definition.native_token.decimals, rate),
            }
          : null,
      ),
    )

/**
 * The depth transfers and deposits wait for where the caller's transfers run: the registry's
 * policy, unless the chain running there is final sooner (the sandbox's local chains: no
 * reorganisations, so 1 block, or 2 slots on Solana).
 */
const confirmationsIn = (
  chain: ChainDefinition,
  environment: Environment,
  running: RunningChain | undefined,
) => {
  const policy = chain.confirmations
  if (running === undefined || running.finality_confirmations === policy.count) return policy
  return {
    count: running.finality_confirmations,
    unit: policy.unit,
    reason: `The ${environment}'s local chain reorganises nothing, so it is final at ${running.finality_confirmations}; on mainnet the platform waits ${policy.count}: ${policy.reason}`,
  }
}

/** One chain's entry for callers in `environment`. */
export const chainView = (
  chain: ChainDefinition,
  environment: Environment,
  running: RunningChain | undefined,
  gas: GasEstimate | null,
) => ({
  chain: chain.chain,
  name: chain.name,
  family: chain.family,
  chain_id: chain.chain_id,
  native_token: chain.native_token,
  confirmations: confirmationsIn(chain, environment, running),
  tokens: chain.tokens.map((deployment) => ({
    token: deployment.symbol,
    decimals: deployment.decimals,
    contract_address: running?.contracts.get(deployment.symbol) ?? deployment.contracts[environment],
  })),
  gas,
  gas_status: gas === null ? ("unavailable" as const) : ("live" as const),
})

export const ChainsHandlers = HttpApiBuilder.group(PlatformApi, "chains", (handlers) =>
  Effect.succeed(
    handlers.handle("list", () =>
      Effect.gen(function* () {
        const caller = yield* CurrentCaller
        const running_chains = yield* Chains
        const data = yield* Effect.forEach(
          chains,
          (definition) => {
            const running = running_chains.get(caller.environment, definition.chain)
            const gas =
              running === undefined
                ? Effect.succeed(null)
                : liveGas(definition, running, running_chains.gasUsdRate(definition.chain))
            return Effect.map(gas, (estimate) => chainView(definition, caller.environment, running, estimate))
          },
          { concurrency: "unbounded" },
        )
        return { data }
      }),
    ),
  ),
)
