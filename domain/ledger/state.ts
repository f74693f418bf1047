/**
 * The state of one ledger, as folded from its events by `evolve`. Immutable and persistent: every
 * change makes a new state sharing almost all of the old one, so the writer can keep the state from
 * before a failed append and carry on from it. The stream version is not here; the writer tracks it.
 */
import { CompactedTransfers } from "./compacted-transfers.ts"
import type { AccountFlags, AccountKind, AssetRecord } from "./events.ts"
import { type ExpiryIndex, emptyExpiryIndex, firstExpiry } from "./expiry-index.ts"
import { PersistentMap } from "./persistent-map.ts"

/** An account with TigerBeetle's four balances, in minor units of its asset. */
export interface AccountState {
  readonly account_id: string
  readonly asset: AssetRecord
  readonly kind: AccountKind
  readonly flags: AccountFlags
  readonly code: number
  readonly user_data: string | null
  readonly debits_pending: bigint
  readonly debits_posted: bigint
  readonly credits_pending: bigint
  readonly credits_posted: bigint
}

/** What single-phase and two-phase transfers share. */
interface MovementFields {
  readonly transfer_id: string
  readonly debit_account_id: string
  readonly credit_account_id: string
  readonly asset_code: string
  readonly amount: bigint
  readonly code: number
  readonly user_data: string | null
  readonly linked_group_id: string | null
  readonly created_at_ms: number
}

/** Posted at once. */
export interface SinglePhaseTransfer extends MovementFields {
  readonly kind: "single_phase"
}

/** Where a reservation stands: still held, or settled one of three ways. */
export type PendingStatus = "pending" | "posted" | "voided" | "expired"

/** The first phase of a two-phase transfer, with its current status. */
export interface PendingTransfer extends MovementFields {
  readonly kind: "pending"
  readonly status: PendingStatus
  /** What the post moved to posted balances; 0 until posted, and when voided or expired. */
  readonly posted_amount: bigint
  /** Null never lapses. */
  readonly expires_at_ms: number | null
  /** As requested (expires_at_ms - created_at_ms, or 0): a retry is compared on it. */
  readonly timeout_ms: number
}

/** The second phase that posted a pending transfer; its id is a transfer id too. */
export interface PostTransfer {
  readonly kind: "post"
  readonly transfer_id: string
  readonly pending_id: string
  readonly amount: bigint
  readonly created_at_ms: number
}

/** The second phase that voided a pending transfer. */
export interface VoidTransfer {
  readonly kind: "void"
  readonly transfer_id: string
  readonly pending_id: string
  readonly created_at_ms: number
}

/** Anything holding a transfer id; ids are unique across all four kinds. */
export type TransferRecord = SinglePhaseTransfer | PendingTransfer | PostTransfer | VoidTransfer

/** Ids of the transfer records that became final since the last compaction, newest first. */
export interface FinalIds {
  readonly transfer_id: string
  readonly next: FinalIds | null
}

export interface LedgerState {
  /** The ledger clock: the latest event time seen, epoch ms. Never goes backwards. */
  readonly clock_ms: number
  readonly accounts: PersistentMap<AccountState>
  /**
   * Transfer records in full: every reservation still pending, and the final records not compacted
   * yet. Together with the compacted ones, every transfer ever recorded, for exactly-once retries
   * and for posting and voiding (`findTransfer` looks in both).
   */
  readonly transfers: PersistentMap<TransferRecord>
  /** Pending transfers that can lapse, soonest first. */
  readonly expiries: ExpiryIndex
  /** Where final records go when compacted (`compactTransfers`); shared between states. */
  readonly compacted: CompactedTransfers
  /** How many of `compacted`'s entries belong to this state's history. */
  readonly compacted_count: number
  /** The records in `transfers` that are final (nothing can change them) and may be compacted. */
  readonly final_ids: FinalIds | null
  readonly final_count: number
}

/** The state of a ledger with no events. */
export const initialState: LedgerState = {
  clock_ms: 0,
  accounts: PersistentMap.empty(),
  transfers: PersistentMap.empty(),
  expiries: emptyExpiryIndex,
  compacted: CompactedTransfers.none,
  compacted_count: 0,
  final_ids: null,
  final_count: 0,
}

/** When the next reservation lapses (epoch ms), or null; lets a scheduler sleep until then. */
export function nextExpiryMs(state: LedgerState): number | null {
  return firstExpiry(state.expiries)?.expires_at_ms ?? null
}
