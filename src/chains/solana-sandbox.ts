/**
 * The sandbox's local Solana chain: one LiteSVM inside the platform process, with an SPL mint per
 * token symbol the registry carries on Solana (with that token's decimals), and an issuer key that
 * lives only in this process's memory, like the chain itself: both vanish on shutdown.
 *
 * LiteSVM has no clock of its own. A timer produces one empty block per second (the slot and the
 * blockhash move on), so the chain ages like a cluster with a 1 s block time: confirmations grow
 * while the platform waits, and a blockhash stays valid for `blockhash_validity_slots` slots, after
 * which a transaction signed with it can never land. The issuer is the mint and freeze authority: it
 * mints for the faucet and freezes a token account to block it.
 */
import { type Address, generateKeyPairSigner, type Instruction, type KeyPairSigner } from "@solana/kit"
import {
  getCreateAssociatedTokenIdempotentInstruction,
  getFreezeAccountInstruction,
  getInitializeMint2Instruction,
  getMintSize,
  getMintToInstruction,
  TOKEN_PROGRAM_ADDRESS,
} from "@solana-program/token"
import { LiteSVM } from "litesvm"
import { associatedTokenAccount, makeSolanaAdapter } from "../../adapters/chains/solana/adapter.ts"
import {
  airdrop,
  type LiteSvmTransport,
  makeLiteSvmTransport,
} from "../../adapters/chains/solana/litesvm-transport.ts"
import {
  buildMessage,
  signMessage,
  systemCreateAccountInstruction,
} from "../../adapters/chains/solana/transaction.ts"
import { assert } from "../../domain/assert.ts"
import { chainDefinition, type TokenSymbol } from "../../domain/chains/registry.ts"
import type { ChainAdapter } from "../ports/chain.ts"
import { oneAtATime } from "./one-at-a-time.ts"

/** Milliseconds between two blocks of the local chain. */
export const solana_sandbox_block_time_ms = 1_000
/**
 * Confirmations (1 = in the newest slot) after which the sandbox posts a transfer. LiteSVM never
 * forks, so this only makes the sandbox wait like a chain does, a couple of seconds; production uses
 * the registry's 32 slots.
 */
export const solana_sandbox_finality_confirmations = 2
/** Slots a blockhash stays valid, as on a cluster (150 blocks). */
export const solana_sandbox_blockhash_validity_slots = 150n
const sol = 1_000_000_000n
/** A funded wallet below this many lamports gets topped up to `fee_top_up_lamports`. */
const fee_floor_lamports = sol / 10n
const fee_top_up_lamports = sol
const issuer_lamports = 1_000n * sol

export interface SolanaSandboxOptions {
  /** Between two produced blocks; default `solana_sandbox_block_time_ms`. Tests pass 0: no clock. */
  readonly block_time_ms?: number
}

export interface SolanaSandboxChain {
  readonly adapter: ChainAdapter
  /** The LiteSVM transport, for tests that age the chain (`advanceSlots`, `advanceBlock`). */
  readonly transport: LiteSvmTransport
  readonly issuer_address: Address
  /** Mint addresses by token symbol. */
  readonly contracts: ReadonlyMap<TokenSymbol, Address>
  /** Mints the token to `address`'s associated token account (created if missing) and tops up its SOL. */
  readonly fund: (address: string, token: TokenSymbol, amount: bigint) => Promise<void>
  /** Freezes `address`'s token account (created if missing): transfers into or out of it fail. */
  readonly block: (address: string, token: TokenSymbol) => Promise<void>
  readonly stop: () => Promise<void>
}

const compute_budget_program = "ComputeBudget111111111111111111111111111111" as Address

/** The compute budget program's SetComputeUnitPrice (instruction 3, a little-endian u64). */
const uniqueComputeUnitPrice = (micro_lamports: bigint): Instruction => {
  const data = new Uint8Array(9)
  data[0] = 3
  new DataView(data.buffer).setBigUint64(1, micro_lamports, true)
  return { programAddress: compute_budget_program, accounts: [], data }
}

/**
 * Starts the local chain, creates its mints and starts its block clock.
 * @example const local = await startSolanaSandbox(); local.contracts.get("USDC") // a base58 mint address
 */
export async function startSolanaSandbox(options: SolanaSandboxOptions = {}): Promise<SolanaSandboxChain> {
  const block_time_ms = options.block_time_ms ?? solana_sandbox_block_time_ms
  assert(Number.isInteger(block_time_ms) && block_time_ms >= 0, "a block time is a whole number of ms")
  const svm = new LiteSVM().withBlockhashCheck(false)
  const transport = makeLiteSvmTransport(svm, {
    blockhash_validity_slots: solana_sandbox_blockhash_validity_slots,
  })
  const issuer = await generateKeyPairSigner()
  airdrop(svm, issuer.address, issuer_lamports)

  // Two identical issuer transactions against one blockhash (the same mint twice within a slot)
  // would have one signature, and the second would be refused as a duplicate: each carries a
  // compute-unit price of its own (micro-lamports, a counter), so no two are alike.
  let sent_count = 0n
  const send = async (instructions: ReadonlyArray<Instruction>) => {
    sent_count += 1n
    const { wire, signature } = await signMessage(
      buildMessage(
        issuer,
        [uniqueComputeUnitPrice(sent_count), ...instructions],
        await transport.latestBlockhash(),
      ),
    )
    const outcome = await transport.send(wire)
    const landed = await transport.landed(signature)
    assert(outcome.kind === "accepted" && landed?.failed === false, "a sandbox issuer transaction succeeds")
  }

  const contracts = new Map<TokenSymbol, Address>()
  for (const token of chainDefinition("solana").tokens) {
    contracts.set(token.symbol, await createMint(issuer, token.decimals, send, transport))
  }
  const mintOf = (token: TokenSymbol): Address => {
    const mint = contracts.get(token)
    assert(mint !== undefined, `${token} has a sandbox mint on solana`)
    return mint
  }

  // One issuer transaction at a time: each reads the latest blockhash and lands before the next.
  const serialised = oneAtATime()

  const fund = (address: string, token: TokenSymbol, amount: bigint) =>
    serialised(async () => {
      const owner = address as Address
      const mint = mintOf(token)
      const account = await associatedTokenAccount(owner, mint)
      await send([
        getCreateAssociatedTokenIdempotentInstruction({ payer: issuer, ata: account, owner, mint }),
        getMintToInstruction({ mint, token: account, mintAuthority: issuer, amount }),
      ])
      if ((await transport.lamports(owner)) < fee_floor_lamports) airdrop(svm, owner, fee_top_up_lamports)
    })

  const block = (address: string, token: TokenSymbol) =>
    serialised(async () => {
      const owner = address as Address
      const mint = mintOf(token)
      const account = await associatedTokenAccount(owner, mint)
      await send([
        getCreateAssociatedTokenIdempotentInstruction({ payer: issuer, ata: account, owner, mint }),
        getFreezeAccountInstruction({ account, mint, owner: issuer }),
      ])
    })

  const clock = block_time_ms === 0 ? undefined : setInterval(transport.advanceBlock, block_time_ms)
  // The clock alone must not keep the process alive: shutdown stops it anyway.
  clock?.unref()
  return {
    adapter: makeSolanaAdapter(transport, { finality_confirmations: solana_sandbox_finality_confirmations }),
    transport,
    issuer_address: issuer.address,
    contracts,
    fund,
    block,
    stop: async () => clearInterval(clock),
  }
}

/** Creates a mint whose mint and freeze authority is the issuer. */
async function createMint(
  issuer: KeyPairSigner,
  decimals: number,
  send: (instructions: ReadonlyArray<Instruction>) => Promise<void>,
  transport: LiteSvmTransport,
): Promise<Address> {
  const mint = await generateKeyPairSigner()
  const rent = await transport.rentExemptMinimum(getMintSize())
  await send([
    systemCreateAccountInstruction(issuer, mint, rent, getMintSize(), TOKEN_PROGRAM_ADDRESS),
    getInitializeMint2Instruction({
      mint: mint.address,
      decimals,
      mintAuthority: issuer.address,
      freezeAuthority: issuer.address,
    }),
  ])
  return mint.address
}
