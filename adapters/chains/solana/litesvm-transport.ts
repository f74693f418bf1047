/**
 * The Solana transport on LiteSVM, in process: for tests and the sandbox. LiteSVM executes
 * transactions at once and has no blocks, no ledger history and no slot clock of its own, so this
 * transport adds the little the adapter needs:
 * - each transaction sent opens a new slot, as if each had its own block, so that confirmations
 *   grow with the transactions on top; `advanceSlots` lets a test age the chain;
 * - a record of every landed transaction (signature, slot, outcome, wire bytes), because LiteSVM
 *   offers no history query; it lives as long as the transport and holds at most
 *   `landed_record_count_max` transactions (the oldest are forgotten first);
 * - a block hash per slot: LiteSVM has none, so a record carries the blockhash LiteSVM reported as
 *   latest when it processed the transaction (constant unless the test expires it);
 * - optionally, a cluster's blockhash lifetime: LiteSVM accepts only its latest blockhash, so a
 *   chain whose blockhash changes every block (the sandbox's clock, `advanceBlock`) would refuse a
 *   transaction signed one block earlier. With `blockhash_validity_slots`, the transport remembers
 *   when each blockhash became the latest and accepts it for that many slots, like a cluster; LiteSVM's
 *   own check must then be off (`withBlockhashCheck(false)`).
 */
import {
  type Address,
  type Blockhash,
  getCompiledTransactionMessageDecoder,
  getSignatureFromTransaction,
  getTransactionDecoder,
  type Signature,
  lamports as toLamports,
} from "@solana/kit"
import { FailedTransactionMetadata, type LiteSVM } from "litesvm"
import { assert } from "../../../domain/assert.ts"
import type {
  InnerInstructions,
  LandedTransaction,
  SendOutcome,
  SimulationOutcome,
  SolanaTransport,
} from "./transport.ts"

/**
 * LiteSVM's fieldless transaction errors by number (its `TransactionErrorFieldless`, a `const enum`
 * that the package's entry point does not export).
 */
const error_account_not_found = 2
const error_insufficient_funds_for_fee = 4
const error_already_processed = 6
/** LiteSVM's default fee structure charges this per signature and no priority fee. */
const lamports_per_signature = 5_000n
const landed_record_count_max = 100_000
/** LiteSVM accepts only its latest blockhash; a validity window of 150 blocks mirrors the cluster's. */
const blockhash_validity_blocks = 150n

/** The most blockhashes a transport with a lifetime window remembers; the oldest go first. */
const issued_blockhash_count_max = 10_000

export interface LiteSvmTransportOptions {
  /**
   * Slots during which a blockhash stays valid after it became the latest. Unset: only LiteSVM's
   * latest blockhash is valid, as LiteSVM checks by itself. Set: the LiteSVM must be built with
   * `withBlockhashCheck(false)`, and the transport checks the lifetime instead.
   */
  readonly blockhash_validity_slots?: bigint
}

export interface LiteSvmTransport extends SolanaTransport {
  /**
   * Moves the slot forward by `count`, as blocks produced without transactions would. With a
   * lifetime window, a new blockhash becomes the latest too (so older ones age out); without, the
   * blockhash stays, as LiteSVM keeps it.
   */
  readonly advanceSlots: (count: bigint) => void
  /** Produces one empty block: the slot moves forward by one and a new blockhash becomes the latest. */
  readonly advanceBlock: () => void
}

/**
 * Wraps a LiteSVM instance (with the SPL programs loaded, as `new LiteSVM()` does).
 * @example const transport = makeLiteSvmTransport(new LiteSVM())
 * @example const sandbox = makeLiteSvmTransport(new LiteSVM().withBlockhashCheck(false), { blockhash_validity_slots: 150n })
 */
export function makeLiteSvmTransport(svm: LiteSVM, options: LiteSvmTransportOptions = {}): LiteSvmTransport {
  const records = new Map<Signature, LandedTransaction & { readonly accounts: ReadonlySet<string> }>()
  const transactionDecoder = getTransactionDecoder()
  const messageDecoder = getCompiledTransactionMessageDecoder()
  const validity_slots = options.blockhash_validity_slots
  assert(validity_slots === undefined || validity_slots >= 1n, "a blockhash lives at least one slot")
  // Blockhash -> the slot at which this transport first saw it as the latest, oldest first.
  const issued = new Map<Blockhash, bigint>()

  const warp = (count: bigint) => {
    assert(count >= 0n, "slots only move forward")
    svm.warpToSlot(svm.getClock().slot + count)
  }

  /** Records LiteSVM's latest blockhash with the slot it was first seen at; answers that slot. */
  const observeLatest = (): { readonly blockhash: Blockhash; readonly slot: bigint } => {
    const latest = svm.latestBlockhash()
    const seen_at = issued.get(latest)
    if (seen_at !== undefined) return { blockhash: latest, slot: seen_at }
    const slot = svm.getClock().slot
    if (issued.size >= issued_blockhash_count_max) {
      const oldest = issued.keys().next()
      if (oldest.done !== true) issued.delete(oldest.value)
    }
    issued.set(latest, slot)
    return { blockhash: latest, slot }
  }

  const isBlockhashValid = (blockhash: Blockhash): boolean => {
    const latest = observeLatest()
    if (validity_slots === undefined) return blockhash === latest.blockhash
    const seen_at = issued.get(blockhash)
    return seen_at !== undefined && svm.getClock().slot < seen_at + validity_slots
  }

  /** The slot moves on by `count` and a new blockhash becomes the latest, as after `count` blocks. */
  const advanceBlocks = (count: bigint) => {
    observeLatest()
    warp(count)
    svm.expireBlockhash()
    observeLatest()
  }

  /** With a lifetime window, blocks pass (the blockhash moves on); without, only the slot moves. */
  const advanceSlots = (count: bigint) => (validity_slots === undefined ? warp(count) : advanceBlocks(count))

  const record = (
    signature: Signature,
    wire: Uint8Array,
    failed: boolean,
    inner_instructions: ReadonlyArray<InnerInstructions> = [],
  ) => {
    const message = messageDecoder.decode(transactionDecoder.decode(wire).messageBytes)
    if (records.size >= landed_record_count_max) {
      const oldest = records.keys().next()
      if (oldest.done !== true) records.delete(oldest.value)
    }
    records.set(signature, {
      signature,
      slot: svm.getClock().slot,
      block_hash: svm.latestBlockhash(),
      failed,
      finalized: false,
      wire: wire.slice(),
      loaded_addresses: [],
      inner_instructions,
      accounts: new Set(message.staticAccounts),
    })
  }

  const send = async (wire: Uint8Array): Promise<SendOutcome> => {
    const transaction = transactionDecoder.decode(wire)
    const signature = getSignatureFromTransaction(transaction)
    if (records.has(signature)) return { kind: "already_processed" }
    const lifetime = messageDecoder.decode(transaction.messageBytes)
    if (validity_slots !== undefined && "lifetimeToken" in lifetime) {
      if (!isBlockhashValid(lifetime.lifetimeToken as Blockhash))
        return { kind: "rejected", reason: "BlockhashNotFound: the transaction's blockhash expired" }
    }
    warp(1n)
    const result = svm.sendTransaction(transaction)
    if (!(result instanceof FailedTransactionMetadata)) {
      const inner = result.innerInstructions().flatMap((instructions, index) =>
        instructions.length === 0
          ? []
          : [
              {
                index,
                instructions: instructions.map((entry) => {
                  const compiled = entry.instruction()
                  return {
                    program_index: compiled.programIdIndex(),
                    accounts: [...compiled.accounts()],
                    data: Uint8Array.from(compiled.data()),
                  }
                }),
              },
            ],
      )
      record(signature, wire, false, inner)
      return { kind: "accepted" }
    }
    const error = result.err()
    if (landsDespite(error)) {
      record(signature, wire, true)
      return { kind: "accepted" }
    }
    switch (error) {
      case error_already_processed:
        return { kind: "already_processed" }
      case error_insufficient_funds_for_fee:
      case error_account_not_found:
        return { kind: "insufficient_funds_for_fee" }
      default:
        return { kind: "rejected", reason: describeError(error) }
    }
  }

  const simulate = async (wire: Uint8Array): Promise<SimulationOutcome> => {
    const result = svm.simulateTransaction(transactionDecoder.decode(wire))
    if (!(result instanceof FailedTransactionMetadata)) return { kind: "ok" }
    const logs = result.meta().logs()
    return { kind: "failed", reason: `${describeError(result.err())}: ${logs.slice(-3).join(" | ")}` }
  }

  const landed = async (signature: Signature): Promise<LandedTransaction | null> => {
    const found = records.get(signature)
    if (found === undefined) return null
    const { accounts: _accounts, ...landed } = found
    return landed
  }

  const transactionsOf = async (address: Address, from_slot: bigint, to_slot: bigint, limit: number) => {
    const found: Array<LandedTransaction> = []
    for (const entry of records.values()) {
      if (found.length >= limit) break
      if (entry.slot < from_slot || entry.slot > to_slot || !entry.accounts.has(address)) continue
      const { accounts: _accounts, ...landed } = entry
      found.push(landed)
    }
    return found
  }

  return {
    advanceSlots,
    advanceBlock: () => advanceBlocks(1n),
    latestBlockhash: async () => {
      const latest = observeLatest()
      return {
        blockhash: latest.blockhash,
        last_valid_block_height:
          (validity_slots === undefined ? svm.getClock().slot : latest.slot) +
          (validity_slots ?? blockhash_validity_blocks),
      }
    },
    isBlockhashValid: async (blockhash: Blockhash) => isBlockhashValid(blockhash),
    slot: async () => svm.getClock().slot,
    lamports: async (address) => svm.getBalance(address) ?? 0n,
    account: async (address) => {
      const account = svm.getAccount(address)
      return account.exists ? { owner: account.programAddress, data: Uint8Array.from(account.data) } : null
    },
    rentExemptMinimum: async (data_size_bytes) => svm.minimumBalanceForRentExemption(BigInt(data_size_bytes)),
    feeForMessage: async (message_bytes) =>
      BigInt(messageDecoder.decode(message_bytes).header.numSignerAccounts) * lamports_per_signature,
    simulate,
    send,
    landed,
    transactionsOf,
  }
}

/** Airdrops lamports from LiteSVM's faucet; for tests and the sandbox only. */
export function airdrop(svm: LiteSVM, address: Address, amount: bigint): void {
  const result = svm.airdrop(address, toLamports(amount))
  assert(result !== null && !(result instanceof FailedTransactionMetadata), "the LiteSVM airdrop succeeds")
}

/**
 * An instruction error, or a rent shortfall found while executing, lands on the cluster: the fee is
 * paid and the signature is taken. The error classes are not exported by LiteSVM's entry point, so
 * they are told apart by shape (an instruction error carries `err()`) and by class name.
 */
function landsDespite(error: unknown): boolean {
  if (typeof error !== "object" || error === null) return false
  return "err" in error || error.constructor.name === "TransactionErrorInsufficientFundsForRent"
}

function describeError(error: unknown): string {
  return typeof error === "number" ? `TransactionError #${String(error)}` : String(error)
}
