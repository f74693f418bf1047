/**
 * The Solana chain adapter, on @solana/kit and @solana-program/token: one code path builds, signs
 * and reads transactions; a `SolanaTransport` (LiteSVM in process, or JSON-RPC) carries them.
 *
 * How the port's words map onto Solana:
 * - `tx_hash` is the transaction's first signature (base58); `raw` is the wire transaction in hex.
 * - `block_number` is the slot; `block_hash` is what the transport names the slot's block by (see
 *   `LandedTransaction.block_hash`); `confirmations` is the slot distance to the newest slot plus one.
 * - `log_index` is the position of the token transfer among the transaction's top-level
 *   instructions, or for one a program made (an inner instruction) 256 × (its top-level
 *   instruction + 1) + its place among that one's inner instructions (`tokenTransfersIn`): Solana
 *   has no block-wide log index, and (signature, place) is unique. Incoming transfers are listed
 *   in that order within a transaction, not in the order they ran.
 * - Solana has no account nonce: a transaction is ordered by nothing and lives until its blockhash
 *   expires (about 150 blocks). `SignedTransfer.nonce` is therefore 0 and `SignOptions.nonce` is
 *   ignored; the signature alone identifies the transaction across retries.
 * - A token transfer goes from the sender's associated token account to the recipient's, created in
 *   the same transaction (paid by the sender) when missing; its rent counts in the fee.
 * - A transfer's `reference` becomes a memo after the transfer instruction: it names the transfer on
 *   chain, and keeps two equal transfers signed against one blockhash from being one transaction
 *   (ed25519 signatures are deterministic).
 * - `balance` of a token reads the owner's associated token account only.
 * - `from` of an incoming transfer is the authority that signed it (owner or delegate of the source).
 */

import { bytesToHex, hexToBytes } from "@noble/hashes/utils.js"
import {
  type Address,
  type Blockhash,
  blockhash,
  createNoopSigner,
  type Instruction,
  isAddress,
  isSignature,
  type Signature,
  type TransactionSigner,
} from "@solana/kit"
import {
  findAssociatedTokenPda,
  getCreateAssociatedTokenIdempotentInstruction,
  getMintDecoder,
  getTokenDecoder,
  getTokenSize,
  getTransferCheckedInstruction,
  TOKEN_PROGRAM_ADDRESS,
} from "@solana-program/token"
import { Effect } from "effect"
import { assert } from "../../../domain/assert.ts"
import type { SigningKey } from "../../../domain/custody/derive.ts"
import {
  BroadcastRejected,
  type ChainAdapter,
  type ChainAsset,
  type InclusionProof,
  type IncomingTransfer,
  type IncomingTransfersQuery,
  InsufficientFundsForFee,
  InvalidChainAddress,
  incoming_addresses_max,
  incoming_block_range_max,
  QueryTooWide,
  type SignedTransfer,
  TransactionExpired,
  type TransactionStatus,
  type TransferIntent,
  TransferWouldRevert,
  transfer_reference_length_max,
} from "../../../src/ports/chain.ts"
import {
  buildMessage,
  memoInstruction,
  messageBytes,
  signerFromKey,
  signMessage,
  summarizeWire,
  systemTransferInstruction,
  tokenTransfersIn,
} from "./transaction.ts"
import type { LandedTransaction, SolanaTransport } from "./transport.ts"

export interface SolanaChainConfig {
  /** Confirmations (1 = in the newest slot) from which a transaction counts as finalized. */
  readonly finality_confirmations: number
}

/** The most transactions one watched address may have in one `incomingTransfers` range. */
const incoming_transactions_per_address_max = 1_000
/** Signatures broadcast by this process, remembered to tell `seen` from `dropped`. */
const broadcast_memory_count_max = 10_000

/** A transfer's instructions and the rent it spends on creating the recipient's token account. */
interface TransferPlan {
  readonly instructions: ReadonlyArray<Instruction>
  readonly rent: bigint
}

/**
 * Makes the adapter for one Solana cluster over `transport`.
 * @example const adapter = makeSolanaAdapter(makeLiteSvmTransport(new LiteSVM()), { finality_confirmations: 32 })
 */
/** The SPL Token and Token-2022 programs: an account they own is a token account or a mint. */
const token_programs: ReadonlySet<string> = new Set([
  TOKEN_PROGRAM_ADDRESS,
  "TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb",
])

/**
 * The loaders that own deployed programs (and an upgradeable program's data account). A program
 * signs nothing, so tokens sent to one (into its associated token account) stay there for good.
 */
const program_loaders: ReadonlySet<string> = new Set([
  "BPFLoader1111111111111111111111111111111111",
  "BPFLoader2111111111111111111111111111111111",
  "BPFLoaderUpgradeab1e11111111111111111111111",
  "LoaderV411111111111111111111111111111111111",
])

export function makeSolanaAdapter(transport: SolanaTransport, config: SolanaChainConfig): ChainAdapter {
  assert(config.finality_confirmations >= 1, "finality needs at least one confirmation")
  const call = <A>(run: () => Promise<A>) => Effect.promise(run)
  // Signature -> lifetime blockhash of what this process broadcast; lost on restart (see status).
  const broadcasted = new Map<Signature, Blockhash>()

  const parseAddress = (text: string) =>
    isAddress(text) ? Effect.succeed(text) : Effect.fail(new InvalidChainAddress({ address: text }))

  /** The transfer's instructions, then its memo when the caller names it (see `reference`). */
  const planTransfer = (signer: TransactionSigner, intent: TransferIntent) =>
    Effect.map(planInstructions(signer, intent), (plan): TransferPlan => {
      if (intent.reference === undefined) return plan
      assert(intent.reference.length <= transfer_reference_length_max, "a transfer reference is short")
      return { ...plan, instructions: [...plan.instructions, memoInstruction(intent.reference)] }
    })

  const planInstructions = (signer: TransactionSigner, intent: TransferIntent) =>
    Effect.gen(function* () {
      assert(intent.amount > 0n, "a transfer amount is positive")
      const to = yield* parseAddress(intent.to)
      if (intent.asset.kind === "native") {
        return {
          instructions: [systemTransferInstruction(signer, to, intent.amount)],
          rent: 0n,
        } as TransferPlan
      }
      const mint = yield* parseAddress(intent.asset.contract)
      // A token account (or a mint) given as the recipient: its own associated token account
      // would take the tokens, and no one signs for that owner. Refused before anything is signed.
      const recipient = yield* call(() => transport.account(to))
      if (recipient !== null && token_programs.has(recipient.owner)) {
        return yield* Effect.fail(
          new TransferWouldRevert({
            reason: `the destination ${to} is a token account, not a wallet: send to the wallet that owns it`,
          }),
        )
      }
      if (recipient !== null && program_loaders.has(recipient.owner)) {
        return yield* Effect.fail(
          new TransferWouldRevert({
            reason: `the destination ${to} is a program, not a wallet: tokens sent to it could never be moved again`,
          }),
        )
      }
      const decimals = yield* mintDecimals(mint)
      const source = yield* call(() => associatedTokenAccount(signer.address, mint))
      const destination = yield* call(() => associatedTokenAccount(to, mint))
      const transfer = getTransferCheckedInstruction({
        source,
        mint,
        destination,
        authority: signer,
        amount: intent.amount,
        decimals,
      })
      if ((yield* call(() => transport.account(destination))) !== null) {
        return { instructions: [transfer], rent: 0n } as TransferPlan
      }
      const create = getCreateAssociatedTokenIdempotentInstruction({
        payer: signer,
        ata: destination,
        owner: to,
        mint,
      })
      const rent = yield* call(() => transport.rentExemptMinimum(getTokenSize()))
      return { instructions: [create, transfer], rent } as TransferPlan
    })

  const mintDecimals = (mint: Address) =>
    Effect.gen(function* () {
      const account = yield* call(() => transport.account(mint))
      if (account === null)
        return yield* Effect.fail(new TransferWouldRevert({ reason: `no mint at ${mint}` }))
      if (account.owner !== TOKEN_PROGRAM_ADDRESS) {
        return yield* Effect.fail(new TransferWouldRevert({ reason: `${mint} is not an SPL Token mint` }))
      }
      return getMintDecoder().decode(account.data).decimals
    })

  const priced = (signer: TransactionSigner, plan: TransferPlan) =>
    Effect.gen(function* () {
      const lifetime = yield* call(() => transport.latestBlockhash())
      const message = buildMessage(signer, plan.instructions, lifetime)
      const fee = yield* call(() => transport.feeForMessage(messageBytes(message)))
      return { message, fee_max: fee + plan.rent }
    })

  const estimateTransferFee = (from: string, intent: TransferIntent) =>
    Effect.gen(function* () {
      const signer = createNoopSigner(yield* parseAddress(from))
      const { fee_max } = yield* priced(signer, yield* planTransfer(signer, intent))
      return fee_max
    })

  const signTransfer = (key: SigningKey, intent: TransferIntent) =>
    Effect.gen(function* () {
      const signer = yield* call(() => signerFromKey(key))
      const { message, fee_max } = yield* priced(signer, yield* planTransfer(signer, intent))
      const required = fee_max + (intent.asset.kind === "native" ? intent.amount : 0n)
      const available = yield* call(() => transport.lamports(signer.address))
      if (available < required) {
        return yield* Effect.fail(
          new InsufficientFundsForFee({ address: signer.address, required, available }),
        )
      }
      const { wire, signature } = yield* call(() => signMessage(message))
      const simulation = yield* call(() => transport.simulate(wire))
      if (simulation.kind === "failed")
        return yield* Effect.fail(new TransferWouldRevert({ reason: simulation.reason }))
      const signed: SignedTransfer = {
        raw: `0x${bytesToHex(wire)}`,
        tx_hash: signature,
        from: signer.address,
        nonce: 0,
        fee_max,
      }
      return signed
    })

  const broadcast = (raw: string) =>
    Effect.gen(function* () {
      const wire = decodeHex(raw)
      const summary = wire === null ? null : summarizeWire(wire)
      if (wire === null || summary === null) {
        return yield* Effect.fail(
          new BroadcastRejected({ tx_hash: "", reason: "not a Solana wire transaction" }),
        )
      }
      const tx_hash = summary.signature
      if ((yield* call(() => transport.landed(tx_hash))) !== null) return { tx_hash }
      const lifetime = blockhash(summary.lifetime_token)
      if (!(yield* call(() => transport.isBlockhashValid(lifetime)))) {
        // Read again: it may have landed between the first read and the blockhash's expiry.
        if ((yield* call(() => transport.landed(tx_hash))) !== null) return { tx_hash }
        return yield* Effect.fail(new TransactionExpired({ tx_hash }))
      }
      const outcome = yield* call(() => transport.send(wire))
      switch (outcome.kind) {
        case "accepted":
        case "already_processed":
          remember(broadcasted, tx_hash, lifetime)
          return { tx_hash }
        case "insufficient_funds_for_fee": {
          // Read again, as for any refusal: these very bytes may have landed since the first read
          // (their fee paid), and then this is a rebroadcast that moves nothing.
          if ((yield* call(() => transport.landed(tx_hash))) !== null) return { tx_hash }
          const required = yield* call(() => transport.feeForMessage(summary.message_bytes))
          const available = yield* call(() => transport.lamports(summary.fee_payer))
          return yield* Effect.fail(
            new InsufficientFundsForFee({ address: summary.fee_payer, required, available }),
          )
        }
        case "rejected":
          if ((yield* call(() => transport.landed(tx_hash))) !== null) return { tx_hash }
          return yield* Effect.fail(new BroadcastRejected({ tx_hash, reason: outcome.reason }))
      }
    })

  const proofOf = (
    landed: LandedTransaction,
    newest_slot: bigint,
    log_index: number | null,
  ): InclusionProof => ({
    tx_hash: landed.signature,
    block_number: landed.slot,
    block_hash: landed.block_hash,
    log_index,
    confirmations: Number(newest_slot - landed.slot + 1n),
  })

  /**
   * A signature the cluster does not know is `seen` while this process broadcast it and its
   * blockhash can still land, else `dropped`. After a restart the memory is gone: a transaction
   * broadcast before it and not yet processed reads `dropped` although it may still land within its
   * blockhash's lifetime (about a minute). That is safe for the port's caller, which rebroadcasts
   * the persisted bytes on `dropped`: the cluster takes one signature once, and `broadcast` answers
   * `TransactionExpired` only once the blockhash is over and the signature has not landed.
   */
  const transactionStatus = (tx_hash: string): Effect.Effect<TransactionStatus> =>
    Effect.gen(function* () {
      if (!isSignature(tx_hash)) return { status: "dropped", tx_hash }
      const landed = yield* call(() => transport.landed(tx_hash))
      if (landed === null) {
        const lifetime = broadcasted.get(tx_hash)
        const alive = lifetime !== undefined && (yield* call(() => transport.isBlockhashValid(lifetime)))
        return { status: alive ? "seen" : "dropped", tx_hash }
      }
      const newest_slot = yield* call(() => transport.slot())
      const log_index = landed.failed
        ? null
        : (tokenTransfersIn(landed.wire, landed.loaded_addresses)[0]?.instruction_index ?? null)
      const proof = proofOf(landed, newest_slot, log_index)
      const final = landed.finalized || proof.confirmations >= config.finality_confirmations
      // A failure is final only with its block: a fork can still replace that block with one where
      // the transaction succeeds, so until then it reads confirmed (in a block, not yet decided).
      if (!final) return { status: "confirmed", proof }
      return { status: landed.failed ? "reverted" : "finalized", proof }
    })

  const balance = (address: string, asset: ChainAsset) =>
    Effect.gen(function* () {
      const owner = yield* parseAddress(address)
      if (asset.kind === "native") return yield* call(() => transport.lamports(owner))
      const mint = yield* parseAddress(asset.contract)
      const account = yield* call(async () => transport.account(await associatedTokenAccount(owner, mint)))
      return account === null ? 0n : getTokenDecoder().decode(account.data).amount
    })

  const incomingTransfers = (query: IncomingTransfersQuery) =>
    Effect.gen(function* () {
      if (query.to_block < query.from_block || query.to_block - query.from_block > incoming_block_range_max) {
        return yield* Effect.fail(
          new QueryTooWide({ reason: "slot range is empty or wider than the maximum" }),
        )
      }
      if (query.addresses.length > incoming_addresses_max) {
        return yield* Effect.fail(new QueryTooWide({ reason: "too many addresses" }))
      }
      const mint = yield* parseAddress(query.contract)
      const owners = yield* Effect.forEach(query.addresses, parseAddress)
      const newest_slot = yield* call(() => transport.slot())
      const found = new Map<string, IncomingTransfer>()
      for (const owner of owners) {
        const account = yield* call(() => associatedTokenAccount(owner, mint))
        const limit = incoming_transactions_per_address_max + 1
        const landed = yield* call(() =>
          transport.transactionsOf(account, query.from_block, query.to_block, limit),
        )
        if (landed.length > incoming_transactions_per_address_max) {
          return yield* Effect.fail(
            new QueryTooWide({ reason: `too many transactions for ${owner}; narrow the range` }),
          )
        }
        for (const transaction of landed) {
          if (transaction.failed) continue
          const transfers = tokenTransfersIn(
            transaction.wire,
            transaction.loaded_addresses,
            transaction.inner_instructions,
          )
          for (const transfer of transfers) {
            if (transfer.destination !== account || (transfer.mint !== null && transfer.mint !== mint))
              continue
            found.set(`${transaction.signature}:${String(transfer.instruction_index)}`, {
              contract: mint,
              from: transfer.authority,
              to: owner,
              amount: transfer.amount,
              proof: proofOf(transaction, newest_slot, transfer.instruction_index),
            })
          }
        }
      }
      return [...found.values()].sort(inChainOrder)
    })

  /** `owner`'s associated token account for `mint`: where its tokens of that mint are kept. */
  const tokenAccountOf = (owner: string, mint: string) =>
    Effect.gen(function* () {
      const owner_address = yield* parseAddress(owner)
      const mint_address = yield* parseAddress(mint)
      return yield* call(() => associatedTokenAccount(owner_address, mint_address))
    })

  return {
    estimateTransferFee,
    signTransfer,
    broadcast,
    transactionStatus,
    balance,
    tokenAccountOf,
    blockNumber: () => call(() => transport.slot()),
    incomingTransfers,
  }
}

/**
 * The associated token account of `owner` for `mint` under the SPL Token program.
 * @example await associatedTokenAccount(wallet, usdc_mint)
 */
export async function associatedTokenAccount(owner: Address, mint: Address): Promise<Address> {
  const [account] = await findAssociatedTokenPda({ owner, mint, tokenProgram: TOKEN_PROGRAM_ADDRESS })
  return account
}

/** By slot; within a slot, by the instruction's position (transactions of one slot keep the order found). */
function inChainOrder(a: IncomingTransfer, b: IncomingTransfer): number {
  if (a.proof.block_number !== b.proof.block_number)
    return a.proof.block_number < b.proof.block_number ? -1 : 1
  return a.proof.tx_hash === b.proof.tx_hash ? (a.proof.log_index ?? 0) - (b.proof.log_index ?? 0) : 0
}

function remember(memory: Map<Signature, Blockhash>, signature: Signature, lifetime: Blockhash): void {
  if (memory.size >= broadcast_memory_count_max) {
    const oldest = memory.keys().next()
    if (oldest.done !== true) memory.delete(oldest.value)
  }
  memory.set(signature, lifetime)
}

function decodeHex(raw: string): Uint8Array | null {
  if (!/^0x([0-9a-fA-F]{2})+$/.test(raw)) return null
  return hexToBytes(raw.slice(2))
}
