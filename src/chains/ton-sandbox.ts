/**
 * The sandbox's TON chain: a @ton/sandbox blockchain in this process (the real TVM, no network),
 * the platform's jetton (contracts/ton/) deployed once per token the registry carries on TON (USDT,
 * 6 decimals), administered by an issuer that exists only in this in-process chain (a sandbox
 * treasury under a random name), like the chain itself: both vanish with the process.
 *
 * `fund` mints jettons to the owner and tops up its TON for fees, as the EVM sandbox's `fund` mints
 * and tops up gas. The gas probe is a v4R2 wallet of a random key, funded and deployed at start, so
 * that fee estimates from it are emulated exactly rather than bounded.
 *
 * The emulator executes a message the moment it is sent; a real chain takes it into a block, and
 * our other sandbox chains (anvil, LiteSVM) make blocks every second. So the chain holds the
 * external messages it is sent and a timer produces a block every `block_time_ms` (1 s by default),
 * which executes them (see sandbox-transport.ts): a transfer is `seen` first and lands a moment
 * later, and a message whose `valid_until` passes before its block never lands. `block_time_ms: 0`
 * executes every message at once (tests of the adapter itself). Administration (`fund`, `freeze`)
 * acts at once either way: it is the faucet, not a transfer. `stop` stops the clock.
 */
import { randomBytes } from "node:crypto"
import { Address, beginCell, contractAddress, toNano } from "@ton/core"
import { Blockchain } from "@ton/sandbox"
import { Effect } from "effect"
import { makeTonAdapter } from "../../adapters/chains/ton/adapter.ts"
import {
  jettonFreezeBody,
  jettonMintBody,
  jettonMinterInit,
  jettonWalletAddress,
} from "../../adapters/chains/ton/jetton.ts"
import {
  makeSandboxTransport,
  type SandboxTonTransport,
} from "../../adapters/chains/ton/sandbox-transport.ts"
import { assert } from "../../domain/assert.ts"
import { chainDefinition, type TokenSymbol } from "../../domain/chains/registry.ts"
import { deriveAddress, deriveSigningKey } from "../../domain/custody/derive.ts"
import type { ChainAdapter } from "../ports/chain.ts"
import { oneAtATime } from "./one-at-a-time.ts"

/** Milliseconds between two blocks of the sandbox's TON chain. */
export const ton_sandbox_block_time_ms = 1_000
/** A funded owner below this TON balance gets topped up by `ton_top_up_nanotons`. */
const ton_floor_nanotons = toNano("1")
const ton_top_up_nanotons = toNano("5")
/** What the issuer attaches to an administrative message; the unspent rest is refunded to it. */
const admin_message_nanotons = toNano("0.1")
/** What the minter is deployed with, for its storage. */
const minter_deploy_nanotons = toNano("1")

export interface TonSandboxOptions {
  /** Between two blocks; default `ton_sandbox_block_time_ms`; 0: every message executes when sent. */
  readonly block_time_ms?: number
}

export interface TonSandboxChain {
  readonly blockchain: Blockchain
  readonly transport: SandboxTonTransport
  readonly adapter: ChainAdapter
  /** The issuer: every minter's admin. */
  readonly issuer_address: string
  /** Each token's jetton minter, in the user-friendly bounceable form (`EQ...`). */
  readonly contracts: ReadonlyMap<TokenSymbol, string>
  /** A deployed, funded v4R2 wallet whose native transfer fee is the chain's gas estimate. */
  readonly gas_probe_address: string
  /** Mints `amount` of `token` to `address` and tops up its TON; throws if the mint bounced (frozen). */
  readonly fund: (address: string, token: TokenSymbol, amount: bigint) => Promise<void>
  /** Freezes (or unfreezes) `address`'s jetton wallet of `token`: compliance. */
  readonly freeze: (address: string, token: TokenSymbol, frozen: boolean) => Promise<void>
  /**
   * Stops the block clock, after the block in progress; messages still held never run. Rejects with
   * the fault of a block that failed (an emulator fault, not a refused message), if one did.
   */
  readonly stop: () => Promise<void>
}

/**
 * Starts the chain and deploys its jettons.
 * @example const ton = await startTonSandboxChain(); await ton.fund(address, "USDT", 5_000_000n)
 */
export async function startTonSandboxChain(options: TonSandboxOptions = {}): Promise<TonSandboxChain> {
  const block_time_ms = options.block_time_ms ?? ton_sandbox_block_time_ms
  assert(Number.isInteger(block_time_ms) && block_time_ms >= 0, "a block time is a whole number of ms")
  const blockchain = await Blockchain.create()
  const transport = makeSandboxTransport(blockchain, { hold_messages: block_time_ms > 0 })
  const adapter = makeTonAdapter(transport)
  const issuer = await blockchain.treasury(`issuer-${randomBytes(16).toString("hex")}`)
  const minters = new Map<TokenSymbol, Address>()
  for (const token of chainDefinition("ton").tokens) {
    const content = beginCell().storeUint(1, 8).storeStringTail(`sandbox:${token.symbol}`).endCell()
    const init = jettonMinterInit(issuer.address, content)
    const minter = contractAddress(0, init)
    await transport.apply(() => issuer.send({ to: minter, value: minter_deploy_nanotons, init }))
    minters.set(token.symbol, minter)
  }
  const minterOf = (token: TokenSymbol) => {
    const minter = minters.get(token)
    assert(minter !== undefined, `${token} is deployed on TON`)
    return minter
  }

  const topUp = async (owner: Address) => {
    if ((await transport.account(owner)).balance >= ton_floor_nanotons) return
    await transport.apply(() => issuer.send({ to: owner, value: ton_top_up_nanotons, bounce: false }))
  }

  // One mint at a time: `fund` judges a mint by the balance before and after it, which a second
  // mint to the same wallet landing in between would upset (a landed mint reported refused).
  const minting = oneAtATime()
  const fund = (address: string, token: TokenSymbol, amount: bigint) =>
    minting(() => mint(address, token, amount))

  const mint = async (address: string, token: TokenSymbol, amount: bigint) => {
    const owner = Address.parse(address)
    const asset = { kind: "token", contract: minterOf(token).toString() } as const
    const before = await Effect.runPromise(adapter.balance(address, asset))
    const body = jettonMintBody({
      query_id: 0n,
      owner,
      amount,
      forward_ton_amount: 0n,
      response_destination: issuer.address,
    })
    await transport.apply(() => issuer.send({ to: minterOf(token), value: admin_message_nanotons, body }))
    const after = await Effect.runPromise(adapter.balance(address, asset))
    if (after !== before + amount) throw new Error(`minting ${token} to ${address} was refused (frozen?)`)
    await topUp(owner)
  }

  const freeze = async (address: string, token: TokenSymbol, frozen: boolean) => {
    const owner = Address.parse(address)
    const body = jettonFreezeBody({ query_id: 0n, owner, frozen })
    await transport.apply(() => issuer.send({ to: minterOf(token), value: admin_message_nanotons, body }))
    const wallet = jettonWalletAddress(owner, minterOf(token))
    const state = await transport.runGetMethod(wallet, "is_frozen", [])
    assert(state !== null && state.readBoolean() === frozen, "the minter set the wallet's frozen state")
  }

  const gas_probe_address = await deployGasProbe(adapter, async (address) => {
    await transport.apply(() => issuer.send({ to: address, value: ton_top_up_nanotons, bounce: false }))
  })
  // The probe's deploying transfer may be held: its block comes now rather than after a tick.
  await transport.produceBlock(0)
  const contracts = new Map([...minters].map(([token, minter]) => [token, minter.toString()] as const))
  const clock = startBlockClock(transport, block_time_ms)
  return {
    blockchain,
    transport,
    adapter,
    issuer_address: issuer.address.toString(),
    contracts,
    gas_probe_address,
    fund,
    freeze,
    stop: clock.stop,
  }
}

/**
 * Produces a block every `block_time_ms` (none for 0). A pinned clock moves by the block time rounded
 * up to whole seconds, TON's unit of time. A block that fails (a fault of the emulator, which a
 * refused message is not) is kept for `stop` to report, and the clock goes on.
 */
function startBlockClock(transport: SandboxTonTransport, block_time_ms: number) {
  let fault: unknown = null
  let current: Promise<void> = Promise.resolve()
  const elapsed_seconds = Math.ceil(block_time_ms / 1_000)
  const timer =
    block_time_ms === 0
      ? undefined
      : setInterval(() => {
          current = transport.produceBlock(elapsed_seconds).catch((error: unknown) => {
            fault ??= error
          })
        }, block_time_ms)
  // The clock alone must not keep the process alive: shutdown stops it anyway.
  timer?.unref()
  return {
    stop: async () => {
      clearInterval(timer)
      await current
      if (fault !== null) throw fault
    },
  }
}

/** A v4R2 wallet of a random key, funded and deployed by one transfer to itself; the key is dropped. */
async function deployGasProbe(
  adapter: ChainAdapter,
  send: (address: Address) => Promise<void>,
): Promise<string> {
  const seed = randomBytes(64)
  const ref = { chain: "ton", tenant_index: 0, wallet_index: 0 } as const
  const key = deriveSigningKey(seed, ref)
  const address = deriveAddress(seed, ref)
  seed.fill(0)
  await send(Address.parse(address))
  const intent = { asset: { kind: "native" }, to: address, amount: 1n } as const
  const signed = await Effect.runPromise(adapter.signTransfer(key, intent))
  await Effect.runPromise(adapter.broadcast(signed.raw))
  return address
}
