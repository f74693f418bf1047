/**
 * The TON transport: the few reads and writes the TON adapter needs, and nothing it could compute
 * itself. External messages are built and signed once, in the adapter (`wallet.ts`); a transport
 * only carries their bag-of-cells bytes and answers questions. Two implementations: @ton/sandbox in
 * process (tests, sandbox) and a TonClient over an HTTP API (production), chosen by configuration.
 *
 * A transport rejects its promise only for infrastructure faults (endpoint unreachable, malformed
 * answer); the adapter turns those into defects. Every expected outcome is a value.
 *
 * Positions on chain are logical times (`lt`): TON orders every transaction by lt, an account's
 * transactions form a chain of increasing lt, and (account, lt, transaction hash) locates one
 * transaction, which is how TON's APIs address it. Shard block numbers are not comparable across
 * shards and the sandbox has no blocks at all, so lt is the one position both transports share.
 */
import type { Address, Cell, TupleItem, TupleReader } from "@ton/core"

/** An account's lifecycle state, as TON names it: `uninit` accounts hold coins but no code. */
export type AccountStatus = "active" | "uninit" | "frozen" | "nonexist"

export interface TonAccount {
  readonly status: AccountStatus
  /** In nanotons. */
  readonly balance: bigint
}

/** What the chain did with an external message. */
export type SendOutcome =
  /** The destination contract accepted it (it now pays for its processing). */
  | { readonly kind: "accepted" }
  /** The contract refused it before accepting (bad signature or seqno, expired): no fee, no effect. */
  | { readonly kind: "rejected"; readonly reason: string }

/** The fee an external message would cost its wallet, from the chain's own emulation. */
export type EmulationOutcome =
  | { readonly kind: "ok"; readonly fee: bigint }
  | { readonly kind: "rejected"; readonly reason: string }

/** A coin movement out of a transaction: one internal message it sent. */
export interface OutgoingValue {
  /** The destination in raw form (`0:ab...`). */
  readonly to: string
  readonly value: bigint
  /** The hash of the message's cell, hex: the `in_message_hash` of the transaction it causes. */
  readonly message_hash: string
}

/** A transaction in an account's chain, as the chain recorded it. */
export interface LandedTransaction {
  /** The transaction's hash, hex. */
  readonly hash: string
  readonly lt: bigint
  /** The account in raw form (`0:ab...`). */
  readonly account: string
  /** The hash of the inbound message's cell, hex; null for a transaction without one (tick-tock). */
  readonly in_message_hash: string | null
  /** The inbound message's source in raw form; null for an external message. */
  readonly in_message_from: string | null
  /**
   * The lt at which the inbound internal message was created: the sending transaction's lt plus one
   * plus the message's index among its outgoing messages; 0 for an external message.
   */
  readonly in_message_created_lt: bigint
  /** The coins the inbound (internal) message carried; 0 for an external message. */
  readonly in_message_value: bigint
  /** The inbound internal message's body; null for an external message or none. */
  readonly in_message_body: Cell | null
  /** Whether the inbound message is itself a bounce (TON's `bounced` flag). */
  readonly in_message_bounced: boolean
  /** Whether this transaction bounced the inbound message's coins back (bounce phase ran). */
  readonly in_message_returned: boolean
  /**
   * True when the compute or action phase failed, or the transaction was aborted. An inbound
   * transfer to an account without code (`uninit`) skips the compute phase and counts as failed,
   * although its coins are credited unless `in_message_returned`.
   */
  readonly failed: boolean
  /** What the account paid for it, in nanotons: total fees plus the forward fees of its messages. */
  readonly fee: bigint
  readonly outgoing: ReadonlyArray<OutgoingValue>
}

export interface TonTransport {
  /** Unix seconds by the chain's clock, against which a message's `valid_until` is checked. */
  readonly now: () => Promise<number>
  /**
   * How long after its block a landed message may still be unseen here (its shard block not yet
   * committed by a masterchain block, the API's indexing, the two clocks' skew): a message is taken
   * for expired only this long after its `valid_until`. 0 when the chain is read as it runs (the
   * sandbox); default 0.
   */
  readonly landing_lag_seconds?: number
  /** The newest logical time the chain has reached. */
  readonly newestLt: () => Promise<bigint>
  readonly account: (address: Address) => Promise<TonAccount>
  /** A wallet's seqno (its `seqno` get method); null when the account is not active. */
  readonly getSeqno: (address: Address) => Promise<number | null>
  /** An active wallet's ed25519 public key (its `get_public_key` get method). */
  readonly publicKey: (address: Address) => Promise<Uint8Array>
  /**
   * Runs a get method of an active contract; null when the account is not active or the method
   * exits with an error (a jetton wallet not deployed yet has no `get_wallet_data`).
   */
  readonly runGetMethod: (
    address: Address,
    method: string,
    args: ReadonlyArray<TupleItem>,
  ) => Promise<TupleReader | null>
  /** Emulates an external message with its signature check skipped; changes nothing. */
  readonly emulate: (address: Address, message: Cell) => Promise<EmulationOutcome>
  readonly send: (message: Cell) => Promise<SendOutcome>
  /**
   * The transaction of `address` whose inbound message has `message_hash`; null when none (yet).
   * `since_unix`, when the caller knows it, is the earliest the message could have landed (a wallet
   * message cannot land before it was signed): a transport that pages through history searches
   * back to it, however busy the wallet, and fails rather than answer null when it cannot reach
   * it. Without it, a transport may look only at the newest transactions.
   */
  readonly landed: (
    address: Address,
    message_hash: string,
    since_unix?: number,
  ) => Promise<LandedTransaction | null>
  /**
   * The transaction, on any account, whose inbound message has `message_hash`: how a message whose
   * wallet is not known (an outside sender's, or one signed before a restart) is found. Null when
   * none landed, or when the transport cannot search by message hash alone (API v2).
   */
  readonly landedMessage: (message_hash: string) => Promise<LandedTransaction | null>
  /**
   * Transactions of `address` with lt in `from_lt..to_lt` (inclusive), in chain order, the oldest
   * first; at most `limit` of them (of a range holding more, any `limit`: the caller learns it is
   * too busy). A transport that pages an account's history fails, rather than answer short, when
   * it cannot reach the range now.
   */
  readonly transactionsOf: (
    address: Address,
    from_lt: bigint,
    to_lt: bigint,
    limit: number,
  ) => Promise<ReadonlyArray<LandedTransaction>>
}
