/**
 * The Solana transport: the few cluster reads and writes the Solana adapter needs, and nothing it
 * could compute itself. Transactions are built and signed once, in the adapter; a transport only
 * carries wire bytes and answers questions. Two implementations: LiteSVM in process (tests, sandbox)
 * and JSON-RPC (production), chosen by configuration.
 *
 * A transport rejects its promise only for infrastructure faults (node unreachable, malformed
 * answer); the adapter turns those into defects. Every expected outcome is a value.
 */
import type { Address, Blockhash, Signature } from "@solana/kit"

export interface LatestBlockhash {
  readonly blockhash: Blockhash
  /** The last block height at which a transaction carrying `blockhash` can still land. */
  readonly last_valid_block_height: bigint
}

/** What the cluster did with wire bytes sent to it. */
export type SendOutcome =
  /** Accepted for processing; it may land as a success or as a failure that still paid its fee. */
  | { readonly kind: "accepted" }
  /** The cluster already holds a transaction with this signature. */
  | { readonly kind: "already_processed" }
  /** The fee payer cannot pay the fee (or does not exist); nothing was charged. */
  | { readonly kind: "insufficient_funds_for_fee" }
  /** Refused before execution (expired blockhash, bad signature, failed preflight...). */
  | { readonly kind: "rejected"; readonly reason: string }

export type SimulationOutcome = { readonly kind: "ok" } | { readonly kind: "failed"; readonly reason: string }

/** A transaction in a slot, as the cluster recorded it. */
export interface LandedTransaction {
  readonly signature: Signature
  readonly slot: bigint
  /**
   * The hash identifying the slot's block. RPC: the block's `blockhash`. LiteSVM has no blocks:
   * the blockhash LiteSVM reported as latest when it processed the transaction.
   */
  readonly block_hash: string
  /** True when the transaction landed but an instruction failed (its fee was still paid). */
  readonly failed: boolean
  /** True once the cluster itself reports the slot finalized (rooted); LiteSVM never does. */
  readonly finalized: boolean
  /** The transaction's wire bytes, to read its instructions from. */
  readonly wire: Uint8Array
  /** Addresses loaded from lookup tables, writable first then read-only, in the order of the meta. */
  readonly loaded_addresses: ReadonlyArray<Address>
  /**
   * The instructions programs invoked while running each top-level instruction (cross-program
   * invocations), in the order they ran: a token transfer a program (a multisig, a smart wallet,
   * a payout program) made into an address is only here. Empty for a failed transaction.
   */
  readonly inner_instructions: ReadonlyArray<InnerInstructions>
}

/** The inner instructions run under one top-level instruction. */
export interface InnerInstructions {
  /** The top-level instruction's position. */
  readonly index: number
  readonly instructions: ReadonlyArray<CompiledInnerInstruction>
}

/** An inner instruction as the chain reports it: indices into the transaction's account keys. */
export interface CompiledInnerInstruction {
  readonly program_index: number
  readonly accounts: ReadonlyArray<number>
  readonly data: Uint8Array
}

export interface SolanaTransport {
  readonly latestBlockhash: () => Promise<LatestBlockhash>
  /** Whether a transaction carrying `blockhash` can still land. */
  readonly isBlockhashValid: (blockhash: Blockhash) => Promise<boolean>
  /** The newest slot. */
  readonly slot: () => Promise<bigint>
  /** An account's lamports; 0 when the account does not exist. */
  readonly lamports: (address: Address) => Promise<bigint>
  /** An account's owner program and data; null when the account does not exist. */
  readonly account: (
    address: Address,
  ) => Promise<{ readonly owner: Address; readonly data: Uint8Array } | null>
  readonly rentExemptMinimum: (data_size_bytes: number) => Promise<bigint>
  /** The fee the cluster charges for a compiled message (signatures and priority fee), in lamports. */
  readonly feeForMessage: (message_bytes: Uint8Array) => Promise<bigint>
  readonly simulate: (wire: Uint8Array) => Promise<SimulationOutcome>
  readonly send: (wire: Uint8Array) => Promise<SendOutcome>
  /** Where a signature landed; null when the cluster knows it nowhere (yet, or ever). */
  readonly landed: (signature: Signature) => Promise<LandedTransaction | null>
  /**
   * Transactions that reference `address`, with slots in `from_slot..to_slot` (inclusive), in
   * chain order; at most `limit` of them, the oldest first (of a range holding more, any `limit`:
   * the caller learns it is too busy). A transport that pages an address's history fails, rather
   * than answer short, when it cannot reach the range now.
   */
  readonly transactionsOf: (
    address: Address,
    from_slot: bigint,
    to_slot: bigint,
    limit: number,
  ) => Promise<ReadonlyArray<LandedTransaction>>
}
