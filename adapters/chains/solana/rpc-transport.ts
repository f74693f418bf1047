/**
 * The Solana transport over JSON-RPC (@solana/kit's `createSolanaRpc`), for real clusters: configured
 * by URL. Not exercised by the tests (no Solana validator runs here); the LiteSVM transport is.
 *
 * `getSignaturesForAddress` pages an address's history from its newest signature back, or from
 * just below a signature it is named, never from a slot: `transactionsOf` starts at the lowest
 * finalized signature above its range that an earlier read passed (`history-anchors.ts`), so only
 * a first read of an old range pages through the history newer than it, a bounded number of pages
 * per read, each read going on from where the one before stopped.
 *
 * Reads use the `confirmed` commitment: `processed` slots may still be skipped. A transaction is sent
 * with preflight, so one that would fail is refused before it lands (`rejected`, no fee paid) rather
 * than landing as failed, as it does on LiteSVM.
 */
import {
  type Address,
  type Base64EncodedWireTransaction,
  type Blockhash,
  createSolanaRpc,
  getBase58Encoder,
  getBase64Decoder,
  getBase64Encoder,
  isSolanaError,
  type Signature,
  SOLANA_ERROR__JSON_RPC__SERVER_ERROR_SEND_TRANSACTION_PREFLIGHT_FAILURE,
  SOLANA_ERROR__TRANSACTION_ERROR__ACCOUNT_NOT_FOUND,
  SOLANA_ERROR__TRANSACTION_ERROR__ALREADY_PROCESSED,
  SOLANA_ERROR__TRANSACTION_ERROR__INSUFFICIENT_FUNDS_FOR_FEE,
  type TransactionMessageBytesBase64,
} from "@solana/kit"
import { historyAnchors } from "../history-anchors.ts"
import type { LandedTransaction, SendOutcome, SolanaTransport } from "./transport.ts"

const commitment = "confirmed" as const
/** `getSignaturesForAddress` answers at most this many signatures per page. */
const signatures_page_size = 1_000
/**
 * Pages of signatures newer than its range one `transactionsOf` reads at most (20,000 signatures),
 * before it fails; the pages it read are remembered, so the next read goes on.
 */
const newer_page_count_max = 20

/**
 * A transport for the cluster at `rpc_url`.
 * @example const transport = makeRpcTransport("https://api.mainnet-beta.solana.com")
 */
export function makeRpcTransport(
  rpc_url: string,
  /** The RPC client; tests give one that answers like a cluster. */
  rpc: ReturnType<typeof createSolanaRpc> = createSolanaRpc(rpc_url),
): SolanaTransport {
  const base64 = getBase64Decoder()
  const toBase64 = (bytes: Uint8Array) => base64.decode(bytes)
  const fromBase64 = (text: string) => Uint8Array.from(getBase64Encoder().encode(text))
  const base58 = getBase58Encoder()

  const blockHashOf = async (slot: bigint) => {
    const block = await rpc
      .getBlock(slot, {
        commitment,
        transactionDetails: "none",
        rewards: false,
        maxSupportedTransactionVersion: 0,
      })
      .send()
    if (block === null) throw new Error(`the node has no block at slot ${String(slot)}`)
    return block.blockhash
  }

  const landed = async (signature: Signature): Promise<LandedTransaction | null> => {
    const { value } = await rpc.getSignatureStatuses([signature], { searchTransactionHistory: true }).send()
    const status = value[0]
    if (status === null || status === undefined || status.confirmationStatus === "processed") return null
    const transaction = await rpc
      .getTransaction(signature, { commitment, encoding: "base64", maxSupportedTransactionVersion: 0 })
      .send()
    if (transaction === null) return null
    const loaded = transaction.meta?.loadedAddresses
    return {
      signature,
      slot: transaction.slot,
      block_hash: await blockHashOf(transaction.slot),
      failed: transaction.meta?.err !== null,
      finalized: status.confirmationStatus === "finalized",
      wire: fromBase64(transaction.transaction[0]),
      loaded_addresses: loaded === undefined ? [] : [...loaded.writable, ...loaded.readonly],
      inner_instructions: (transaction.meta?.innerInstructions ?? []).map((inner) => ({
        index: inner.index,
        instructions: inner.instructions.map((instruction) => ({
          program_index: instruction.programIdIndex,
          accounts: [...instruction.accounts],
          data: Uint8Array.from(base58.encode(instruction.data)),
        })),
      })),
    }
  }

  const send = async (wire: Uint8Array): Promise<SendOutcome> => {
    try {
      await rpc
        .sendTransaction(toBase64(wire) as Base64EncodedWireTransaction, {
          encoding: "base64",
          preflightCommitment: commitment,
        })
        .send()
      return { kind: "accepted" }
    } catch (error) {
      if (!isSolanaError(error, SOLANA_ERROR__JSON_RPC__SERVER_ERROR_SEND_TRANSACTION_PREFLIGHT_FAILURE))
        throw error
      const cause = error.cause
      if (isSolanaError(cause, SOLANA_ERROR__TRANSACTION_ERROR__ALREADY_PROCESSED))
        return { kind: "already_processed" }
      if (
        isSolanaError(cause, SOLANA_ERROR__TRANSACTION_ERROR__INSUFFICIENT_FUNDS_FOR_FEE) ||
        isSolanaError(cause, SOLANA_ERROR__TRANSACTION_ERROR__ACCOUNT_NOT_FOUND)
      ) {
        return { kind: "insufficient_funds_for_fee" }
      }
      return { kind: "rejected", reason: cause instanceof Error ? cause.message : error.message }
    }
  }

  /** Finalized signatures reads passed, one a page: where a later read of an older range starts. */
  const anchors = historyAnchors<Signature>()

  /**
   * Pages backwards from just above `to_slot` (the lowest finalized signature above it that a read
   * passed, else the newest) to `from_slot`, stopping once it has more than `limit`, then reads each
   * transaction. At most `newer_page_count_max` pages newer than the range: past them it fails, and
   * the next read goes on from where this one stopped.
   */
  const transactionsOf = async (address: Address, from_slot: bigint, to_slot: bigint, limit: number) => {
    const signatures: Array<Signature> = []
    let before = anchors.above(address, to_slot)
    for (let newer_pages = 0; ; ) {
      const config =
        before === undefined
          ? { commitment, limit: signatures_page_size }
          : { commitment, limit: signatures_page_size, before }
      const found = await rpc.getSignaturesForAddress(address, config).send()
      for (const entry of found) {
        if (entry.slot >= from_slot && entry.slot <= to_slot && entry.err === null)
          signatures.push(entry.signature)
      }
      const last = found.at(-1)
      if (last === undefined) break
      // A signature a fork dropped would make the node answer an empty history below it.
      if (last.confirmationStatus === "finalized") anchors.remember(address, last.slot, last.signature)
      if (last.slot < from_slot || found.length < signatures_page_size || signatures.length > limit) break
      before = last.signature
      if (last.slot > to_slot && ++newer_pages === newer_page_count_max) {
        throw new Error(
          `more than ${newer_page_count_max * signatures_page_size} signatures of ${address} newer than slot ${to_slot}: the next read goes on from there`,
        )
      }
    }
    const oldest_first = signatures.reverse().slice(0, limit)
    const transactions = await Promise.all(oldest_first.map(landed))
    return transactions.filter((transaction) => transaction !== null)
  }

  return {
    latestBlockhash: async () => {
      const { value } = await rpc.getLatestBlockhash({ commitment }).send()
      return { blockhash: value.blockhash, last_valid_block_height: value.lastValidBlockHeight }
    },
    isBlockhashValid: async (blockhash: Blockhash) =>
      (await rpc.isBlockhashValid(blockhash, { commitment }).send()).value,
    slot: () => rpc.getSlot({ commitment }).send(),
    lamports: async (address) => (await rpc.getBalance(address, { commitment }).send()).value,
    account: async (address) => {
      const { value } = await rpc.getAccountInfo(address, { commitment, encoding: "base64" }).send()
      return value === null ? null : { owner: value.owner, data: fromBase64(value.data[0]) }
    },
    rentExemptMinimum: (data_size_bytes) =>
      rpc.getMinimumBalanceForRentExemption(BigInt(data_size_bytes)).send(),
    feeForMessage: async (message_bytes) => {
      const message = toBase64(message_bytes) as TransactionMessageBytesBase64
      const { value } = await rpc.getFeeForMessage(message, { commitment }).send()
      if (value === null) throw new Error("the node no longer knows the message's blockhash")
      return value
    },
    simulate: async (wire) => {
      const transaction = toBase64(wire) as Base64EncodedWireTransaction
      const { value } = await rpc
        .simulateTransaction(transaction, { commitment, encoding: "base64", sigVerify: true })
        .send()
      if (value.err === null) return { kind: "ok" }
      return {
        kind: "failed",
        reason: `${JSON.stringify(value.err, bigintText)}: ${(value.logs ?? []).slice(-3).join(" | ")}`,
      }
    },
    send,
    landed,
    transactionsOf,
  }
}

function bigintText(_key: string, value: unknown): unknown {
  return typeof value === "bigint" ? value.toString() : value
}
