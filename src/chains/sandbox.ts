/**
 * One local EVM chain of the sandbox: an anvil node with the chain's real chain id and a 1 s block
 * time (the settlement budget is measured against it), the platform stablecoin deployed once per
 * token symbol the registry carries on that chain (with that token's decimals), and an issuer key
 * that lives only in this process's memory, like the chain itself: both vanish on shutdown.
 */
import { randomBytes } from "node:crypto"
import type { Address } from "viem"
import { assert } from "../../domain/assert.ts"
import { chainDefinition, type TokenSymbol } from "../../domain/chains/registry.ts"
import { deriveAddress, deriveSigningKey, type EvmChain } from "../../domain/custody/derive.ts"
import { type AnvilNode, startAnvil } from "./anvil.ts"
import { oneAtATime } from "./one-at-a-time.ts"
import { confirmStablecoinMint, deployStablecoin, sendStablecoinMint } from "./stablecoin.ts"

/** Seconds between blocks of a local chain. */
export const sandbox_block_time_seconds = 1
/**
 * Confirmations after which the sandbox posts a transfer: anvil never reorganises, so the including
 * block is enough; production uses the registry's policy per chain.
 */
export const sandbox_finality_confirmations = 1
const ether = 10n ** 18n
/** A funded wallet below this native balance gets topped up to `gas_top_up_wei`. */
const gas_floor_wei = ether
const gas_top_up_wei = 10n * ether
const issuer_balance_wei = 1_000_000n * ether

export interface SandboxChain {
  readonly chain: EvmChain
  readonly chain_id: number
  readonly rpc_url: string
  readonly issuer_address: Address
  readonly contracts: ReadonlyMap<TokenSymbol, Address>
  /**
   * Mints the token to `address` and tops up its gas. Sends are serialised (one issuer nonce); a
   * call whose `signal` aborts before its send sends nothing.
   */
  readonly fund: (address: string, token: TokenSymbol, amount: bigint, signal?: AbortSignal) => Promise<void>
  readonly stop: () => Promise<void>
}

/**
 * Starts the chain and deploys its tokens; stops the node again if a deployment fails.
 * @example const local = await startSandboxChain("ethereum"); local.contracts.get("USDC") // "0x..."
 */
export async function startSandboxChain(chain: EvmChain): Promise<SandboxChain> {
  const definition = chainDefinition(chain)
  assert(definition.chain_id !== null, "an EVM chain has a chain id")
  const node = await startAnvil({
    chain_id: definition.chain_id,
    block_time_seconds: sandbox_block_time_seconds,
    account_count: 1,
  })
  try {
    const seed = randomBytes(64)
    const ref = { chain, tenant_index: 0, wallet_index: 0 }
    const issuer = deriveSigningKey(seed, ref)
    const issuer_address = deriveAddress(seed, ref) as Address
    seed.fill(0)
    await node.setBalance(issuer_address, issuer_balance_wei)
    const contracts = new Map<TokenSymbol, Address>()
    // One after the other: both deployments come from the issuer and take consecutive nonces.
    for (const token of definition.tokens) {
      const address = await deployStablecoin({
        rpc_url: node.rpc_url,
        issuer,
        name: `Sandbox ${token.symbol}`,
        symbol: token.symbol,
        decimals: token.decimals,
      })
      contracts.set(token.symbol, address)
    }
    // Sends take the issuer's nonces one after the other; their receipts are awaited together, so
    // a burst of mints lands in a block or two (awaiting each receipt in turn took a block each: 30
    // faucet calls at once queued for 30 s).
    const sends = oneAtATime()
    const fund = async (
      address: string,
      token: TokenSymbol,
      amount: bigint,
      signal?: AbortSignal,
    ): Promise<void> => {
      const contract = contracts.get(token)
      assert(contract !== undefined, `${token} is deployed on ${chain}`)
      const sent = sends(async () => {
        // A caller that gave up while its mint waited its turn gets none: nothing lands later.
        signal?.throwIfAborted()
        return sendStablecoinMint({ rpc_url: node.rpc_url, issuer, contract, to: address as Address, amount })
      })
      // A caller past its deadline stops waiting (the mint lands all the same: surplus on chain).
      await confirmStablecoinMint(node.rpc_url, await sent, signal)
      signal?.throwIfAborted()
      await topUpGas(node, address)
    }
    return {
      chain,
      chain_id: definition.chain_id,
      rpc_url: node.rpc_url,
      issuer_address,
      contracts,
      fund,
      stop: node.stop,
    }
  } catch (error) {
    await node.stop()
    throw error
  }
}

async function topUpGas(node: AnvilNode, address: string): Promise<void> {
  const balance = BigInt(String(await node.rpc("eth_getBalance", [address, "latest"])))
  if (balance < gas_floor_wei) await node.setBalance(address, gas_top_up_wei)
}
