/**
 * The chains the running platform can reach, per environment: each one's adapter, its token
 * contracts and, in the sandbox, a way to fund test wallets on chain. Built in the composition root
 * (src/main.ts) from the local sandbox chains and the production RPC endpoints.
 */
import { Context } from "effect"
import type { TokenSymbol } from "../../domain/chains/registry.ts"
import type { Environment } from "../../domain/platform/scopes.ts"
import type { ChainAdapter } from "./chain.ts"

export interface RunningChain {
  readonly adapter: ChainAdapter
  /** The token contracts on this chain: the sandbox's own deployments, or the registry's. */
  readonly contracts: ReadonlyMap<TokenSymbol, string>
  /**
   * The sender of the native transfer whose fee is the chain's gas estimate. Estimating needs a
   * sender that can pay; the value moved (1 unit) and the recipient (itself) do not change the fee.
   */
  readonly gas_probe_address: string
  /**
   * Sandbox only: mints `amount` of the token on chain to `address` and tops up its gas; null where
   * the chain does not run locally. Once `signal` aborts, a mint not yet sent is not sent.
   */
  readonly fund:
    | ((address: string, token: TokenSymbol, amount: bigint, signal?: AbortSignal) => Promise<void>)
    | null
  /**
   * Sandbox only: the faucet's mints between chain and ledger (src/chains/mint-tally.ts), which
   * reconciliation counts as incoming; absent where `fund` is null.
   */
  readonly faucet_mints?: MintTally
  /** Blocks (the including one counted) after which a transfer or deposit on it is final. */
  readonly finality_confirmations: number
  /**
   * Senders whose incoming token transfers are not deposits: in the sandbox, where the faucet's own
   * mints come from (the faucet credits the ledger itself); empty in production.
   */
  readonly faucet_senders: ReadonlySet<string>
  /** The widest block range its adapter's `incomingTransfers` reads at once, when not the port's default. */
  readonly incoming_block_range_max?: bigint
}

/** Running totals of the faucet's mints per key (tenant and token), started and finished. */
export interface MintTally {
  /**
   * Counts a mint of `amount` as started; the function it returns counts it as finished, once the
   * ledger holds its credit or it is known that none will come (calls after the first do nothing).
   */
  readonly begin: (key: string, amount: bigint) => () => void
  readonly started: (key: string) => bigint
  readonly finished: (key: string) => bigint
}

export interface ChainsService {
  /** The chain as reachable in `environment`, or undefined when no adapter serves it there. */
  readonly get: (environment: Environment, chain: string) => RunningChain | undefined
  /** USD per whole native token of `chain` (a decimal string), when configured. */
  readonly gasUsdRate: (chain: string) => string | undefined
}

export class Chains extends Context.Service<Chains, ChainsService>()("platform/Chains") {}
