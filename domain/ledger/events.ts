/**
 * The ledger's events: the only facts the ledger records. Published events are never edited; a
 * change is a new schema version with an upcaster. Amounts are decimal strings of minor units
 * (JSON has no bigint); times are ISO 8601 strings in UTC with milliseconds.
 */

/** What an account is for. More kinds may be added; consumers must not assume the list is closed. */
export type AccountKind = "wallet" | "fee_revenue" | "chain_custody" | "clearing" | "world"

export interface AccountFlags {
  /** The account may never have more debits than credits (a wallet cannot be overdrawn). */
  readonly debits_must_not_exceed_credits: boolean
  /** The account may never have more credits than debits. */
  readonly credits_must_not_exceed_debits: boolean
}

/** An asset as recorded in events: symbol on a chain with its number of decimals. */
export interface AssetRecord {
  /** Stable identifier, `<SYMBOL>@<chain>`, e.g. `USDC@ethereum`. */
  readonly code: string
  readonly symbol: string
  readonly chain: string
  readonly decimals: number
}

export interface AccountOpened {
  readonly type: "AccountOpened"
  readonly data: {
    readonly account_id: string
    readonly asset: AssetRecord
    readonly kind: AccountKind
    readonly flags: AccountFlags
    readonly code: number
    readonly user_data: string | null
    readonly opened_at: string
  }
}

/** A single-phase transfer: posted at once. */
export interface TransferCreated {
  readonly type: "TransferCreated"
  readonly data: {
    readonly transfer_id: string
    readonly debit_account_id: string
    readonly credit_account_id: string
    readonly asset_code: string
    readonly amount: string
    readonly code: number
    readonly user_data: string | null
    /** Transfers created by one command with the same group id succeed or fail together. */
    readonly linked_group_id: string | null
    readonly created_at: string
  }
}

/** The first phase of a two-phase transfer: the amount is reserved (pending balances). */
export interface PendingTransferCreated {
  readonly type: "PendingTransferCreated"
  readonly data: {
    readonly transfer_id: string
    readonly debit_account_id: string
    readonly credit_account_id: string
    readonly asset_code: string
    readonly amount: string
    readonly code: number
    readonly user_data: string | null
    readonly linked_group_id: string | null
    readonly created_at: string
    /** The ledger clock time from which the reservation lapses; null never lapses. */
    readonly expires_at: string | null
  }
}

/** Second phase: `amount` (<= the pending amount) is posted, the rest is released. */
export interface PendingTransferPosted {
  readonly type: "PendingTransferPosted"
  readonly data: {
    readonly transfer_id: string
    readonly pending_id: string
    readonly amount: string
    readonly linked_group_id: string | null
    readonly posted_at: string
  }
}

/** Second phase: the whole reservation is released. */
export interface PendingTransferVoided {
  readonly type: "PendingTransferVoided"
  readonly data: {
    readonly transfer_id: string
    readonly pending_id: string
    readonly linked_group_id: string | null
    readonly voided_at: string
  }
}

/** The reservation lapsed by the ledger's clock and was released. */
export interface PendingTransferExpired {
  readonly type: "PendingTransferExpired"
  readonly data: {
    readonly pending_id: string
    readonly expired_at: string
  }
}

export type LedgerEvent =
  | AccountOpened
  | TransferCreated
  | PendingTransferCreated
  | PendingTransferPosted
  | PendingTransferVoided
  | PendingTransferExpired

export type LedgerEventType = LedgerEvent["type"]

/** Every event type is at schema version 1 so far. */
export const ledgerEventSchemaVersion = 1

export const ledgerEventTypes: ReadonlyArray<LedgerEventType> = [
  "AccountOpened",
  "TransferCreated",
  "PendingTransferCreated",
  "PendingTransferPosted",
  "PendingTransferVoided",
  "PendingTransferExpired",
]

/** The stream that holds one ledger (tenant + environment). */
export const ledgerStreamId = (ledger: LedgerId): string => `ledger-${ledger.tenant}-${ledger.environment}`

export interface LedgerId {
  readonly tenant: string
  readonly environment: string
}
