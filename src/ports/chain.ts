/**
 * The chain adapter port: one interface for every chain family (EVM now; Solana, TON and Tron
 * next). An adapter serves one configured chain. It derives nothing: custody derives the signing key
 * (domain/custody/derive.ts) and hands it to `signTransfer` for that one call.
 *
 * Sending without ever double-sending: `signTransfer` only signs and returns the raw bytes with
 * their hash; nothing reaches the network. The caller persists both (with the ledger's pending
 * transfer) and only then calls `broadcast` with the raw bytes. After a crash or a retry it
 * broadcasts the persisted bytes again and never signs anew, so one nonce carries exactly one
 * transaction, and `broadcast` of bytes the chain already knows is a success that changes nothing.
 * Nonces are read from the chain's pending state: the caller signs for one sender address at a time
 * (one job per address), or passes `nonce` from its own persisted counter. Families without a
 * counter (Solana, Tron) bound a transaction's life instead: once it is over, `broadcast` answers
 * `TransactionExpired` and the bytes are dead for good.
 *
 * Words: a transaction is `seen` (known to the node, not in a block), `confirmed` (in a block that
 * may still be reorganised away), `finalized` (deep enough for the chain's confirmation policy),
 * `reverted` (in a block, but failed: no value moved, the fee was paid), or `dropped` (the node
 * knows it nowhere). These are chain terms; the ledger's pending/posted/voided never appear here.
 */
import { Data, type Effect } from "effect"
import type { SigningKey } from "../../domain/custody/derive.ts"

/** What a transfer moves: the chain's gas coin, or a token contract's unit. */
export type ChainAsset = { readonly kind: "native" } | { readonly kind: "token"; readonly contract: string }

/** A transfer to sign. `amount` is in the asset's smallest unit (wei, token base units). */
export interface TransferIntent {
  readonly asset: ChainAsset
  readonly to: string
  readonly amount: bigint
  /**
   * The caller's name for the transfer (the platform's transfer id), at most
   * `transfer_reference_length_max` characters. Solana writes it as a memo: its signatures are
   * deterministic and it has no nonce, so without it two equal transfers signed against one blockhash
   * would be one transaction. EVM, TON and Tron ignore it: a nonce, a seqno or a strictly increasing
   * timestamp already keeps equal transfers apart there.
   */
  readonly reference?: string
}

/** The longest `TransferIntent.reference`, in characters. */
export const transfer_reference_length_max = 64

export interface SignOptions {
  /** The sender's nonce; defaults to the chain's pending nonce for the sender. */
  readonly nonce?: number
}

/** A signed transaction, ready to persist and broadcast; holds no key material. */
export interface SignedTransfer {
  /** The exact bytes to broadcast, 0x-prefixed hex (EVM: the EIP-2718 envelope). */
  readonly raw: string
  /** The transaction's hash, known before broadcast. */
  readonly tx_hash: string
  readonly from: string
  readonly nonce: number
  /** The most the sender can pay in fees for it, in the native unit. */
  readonly fee_max: bigint
}

/** Where a transaction sits on chain; for a token transfer, also which log carried it. */
export interface InclusionProof {
  readonly tx_hash: string
  readonly block_number: bigint
  readonly block_hash: string
  /** The token transfer's log index in the block; null for a native transfer or a revert. */
  readonly log_index: number | null
  /** 1 when the transaction is in the newest block, growing with each block on top. */
  readonly confirmations: number
}

/**
 * `confirmed`: in a block, not yet at the chain's finality depth, whether it succeeded or failed
 * there (a reorganisation can still change either). `finalized` and `reverted`: succeeded or failed
 * in a block at finality depth (TON's blocks are final at once). `seen`: waiting in a pool.
 * `dropped`: known nowhere.
 */
export type TransactionStatus =
  | { readonly status: "seen"; readonly tx_hash: string }
  | { readonly status: "confirmed"; readonly proof: InclusionProof }
  | { readonly status: "finalized"; readonly proof: InclusionProof }
  | { readonly status: "reverted"; readonly proof: InclusionProof }
  | { readonly status: "dropped"; readonly tx_hash: string }

/** One token transfer into a watched address, as a deposit watcher sees it. */
export interface IncomingTransfer {
  readonly contract: string
  readonly from: string
  readonly to: string
  readonly amount: bigint
  readonly proof: InclusionProof
}

export interface IncomingTransfersQuery {
  readonly contract: string
  readonly addresses: ReadonlyArray<string>
  /** Inclusive. */
  readonly from_block: bigint
  /** Inclusive; at most `incoming_block_range_max` blocks after `from_block`. */
  readonly to_block: bigint
}

/** The widest block range one `incomingTransfers` call reads; watchers page through longer ones. */
export const incoming_block_range_max = 10_000n
/** The most addresses one `incomingTransfers` call filters on; watchers split larger sets. */
export const incoming_addresses_max = 1_000

/** An address is not in this chain's format. */
export class InvalidChainAddress extends Data.TaggedError("InvalidChainAddress")<{
  readonly address: string
}> {}

/** The sender cannot pay the fee (plus the native amount sent); nothing was broadcast. */
export class InsufficientFundsForFee extends Data.TaggedError("InsufficientFundsForFee")<{
  readonly address: string
  readonly required: bigint
  readonly available: bigint
}> {}

/**
 * The transfer would fail: its simulation did (the token contract refused it), or the destination
 * cannot hold what it sends (a Solana token account given instead of its owner). Nothing was signed.
 */
export class TransferWouldRevert extends Data.TaggedError("TransferWouldRevert")<{
  readonly reason: string
}> {}

/**
 * The nonce was already used by another transaction of the sender: these bytes can never be
 * included. The caller's transfer is then decided by the other transaction's fate.
 */
export class NonceTooLow extends Data.TaggedError("NonceTooLow")<{
  readonly tx_hash: string
  readonly nonce: number
}> {}

/**
 * The transaction's lifetime ended before it landed (Solana: its blockhash expired; Tron: its
 * expiration passed): these bytes can never be included, and no copy of them is in flight.
 */
export class TransactionExpired extends Data.TaggedError("TransactionExpired")<{
  readonly tx_hash: string
}> {}

/** The node refused the transaction for a reason other than the ones above. */
export class BroadcastRejected extends Data.TaggedError("BroadcastRejected")<{
  readonly tx_hash: string
  readonly reason: string
}> {}

/** A request outside the adapter's bounds (block range or address count). */
export class QueryTooWide extends Data.TaggedError("QueryTooWide")<{
  readonly reason: string
}> {}

/**
 * One chain's adapter. Expected failures are typed; an unreachable node or a malformed answer is a
 * defect (the job running the call retries it).
 */
export interface ChainAdapter {
  /**
   * The most one transfer like `intent` from `from` would pay in fees at current prices, in the
   * native unit: the same bound `signTransfer` signs for, so a reservation of it covers the fee.
   */
  readonly estimateTransferFee: (
    from: string,
    intent: TransferIntent,
  ) => Effect.Effect<bigint, InvalidChainAddress | TransferWouldRevert>
  /** Builds and signs a transfer; broadcasts nothing. See the module comment on persistence. */
  readonly signTransfer: (
    key: SigningKey,
    intent: TransferIntent,
    options?: SignOptions,
  ) => Effect.Effect<SignedTransfer, InvalidChainAddress | InsufficientFundsForFee | TransferWouldRevert>
  /**
   * Signs, for the sender of `raw`, a transaction at `raw`'s nonce that moves nothing (a zero-value
   * transfer to itself), priced to displace `raw` from a node's pool (its fees above `raw`'s by the
   * pools' minimum bump, and at least at current prices). Once it is final, `raw` can never land.
   * Only where a signed transaction can wait in a pool without end (EVM); absent where its life is
   * bounded (Solana's blockhash, Tron's expiration, TON's `valid_until`).
   */
  readonly signReplacement?: (
    key: SigningKey,
    raw: string,
  ) => Effect.Effect<SignedTransfer, InsufficientFundsForFee>
  /** Sends signed bytes to the chain; idempotent: bytes the chain already holds succeed again. */
  readonly broadcast: (
    raw: string,
  ) => Effect.Effect<
    { readonly tx_hash: string },
    InsufficientFundsForFee | NonceTooLow | TransactionExpired | BroadcastRejected
  >
  /**
   * Where the transaction is now, with its proof once it is in a block. `log_index`, as
   * `incomingTransfers` reported it, picks which of the transaction's token transfers the proof
   * locates where they land in different blocks (a TON wallet message with several jetton
   * transfers); adapters whose transaction sits in one block ignore it for the proof. Default: the
   * first. Without it, the transaction is one the platform signed: EVM and Tron then count a token
   * transfer as finalized only with the token's Transfer log from the sender to the recipient (a
   * token that answers false moves nothing); with it (a deposit, which a sender's contract may
   * have made by a call of its own), success is the receipt's.
   */
  readonly transactionStatus: (tx_hash: string, log_index?: number) => Effect.Effect<TransactionStatus>
  /** The on-chain balance of `address` in `asset`, in its smallest unit, at the newest block. */
  readonly balance: (address: string, asset: ChainAsset) => Effect.Effect<bigint, InvalidChainAddress>
  /**
   * The address of the account that holds `owner`'s tokens of `contract`, where the chain keeps
   * them apart from the owner's own address: Solana's associated token account, TON's jetton
   * wallet. It exists whether or not that account was ever created. Absent where tokens are held at
   * the owner's address (EVM, Tron).
   */
  readonly tokenAccountOf?: (owner: string, contract: string) => Effect.Effect<string, InvalidChainAddress>
  /** The newest block's number. */
  readonly blockNumber: () => Effect.Effect<bigint>
  /** Token transfers into any of `addresses` between two blocks, in chain order. */
  readonly incomingTransfers: (
    query: IncomingTransfersQuery,
  ) => Effect.Effect<ReadonlyArray<IncomingTransfer>, InvalidChainAddress | QueryTooWide>
}
