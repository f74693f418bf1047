/**
 * Commands to a ledger: imperative, decided by `decide` (decider.ts) against the ledger's state.
 * Time and ids come in the command; the decider has no clock and no randomness. Amounts are bigint
 * minor units (the edges parse decimal strings with domain/money).
 */
import type { AccountFlags, AccountKind, AssetRecord } from "./events.ts"

export interface OpenAccount {
  readonly type: "OpenAccount"
  readonly account_id: string
  readonly asset: AssetRecord
  readonly kind: AccountKind
  readonly flags: AccountFlags
  readonly code: number
  readonly user_data: string | null
  /** Epoch milliseconds of the caller's clock; the ledger clock never goes backwards. */
  readonly now_ms: number
}

export interface TransferSpec {
  readonly transfer_id: string
  readonly debit_account_id: string
  readonly credit_account_id: string
  readonly amount: bigint
  readonly code: number
  readonly user_data: string | null
  /** Present for a two-phase transfer: reserve now, post or void later. */
  readonly pending?: {
    /** Lapses this many milliseconds after the ledger clock at creation; 0 never lapses. */
    readonly timeout_ms: number
  }
}

/**
 * Creates one or more transfers. With more than one they form a linked group: all are recorded or
 * none is (a payment and its fee are one group). `group_id` names the group in the events.
 */
export interface CreateTransfers {
  readonly type: "CreateTransfers"
  readonly group_id: string | null
  readonly transfers: ReadonlyArray<TransferSpec>
  readonly now_ms: number
}

/** Posts a pending transfer in full (amount omitted) or in part; the remainder is released. */
export interface PostPendingTransfer {
  readonly type: "PostPendingTransfer"
  readonly transfer_id: string
  readonly pending_id: string
  readonly amount?: bigint
  readonly now_ms: number
}

export interface VoidPendingTransfer {
  readonly type: "VoidPendingTransfer"
  readonly transfer_id: string
  readonly pending_id: string
  readonly now_ms: number
}

/**
 * Releases every pending transfer whose expiry is at or before the ledger clock; with `max_count`,
 * only that many of them (soonest first), the rest for later commands.
 */
export interface ExpirePendingTransfers {
  readonly type: "ExpirePendingTransfers"
  readonly now_ms: number
  readonly max_count?: number
}

export type LedgerCommand =
  | OpenAccount
  | CreateTransfers
  | PostPendingTransfer
  | VoidPendingTransfer
  | ExpirePendingTransfers
