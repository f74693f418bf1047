/**
 * Compaction of final transfer records: `compactTransfers` moves the records that can no longer
 * change from the state's persistent map into its compacted store (compacted-transfers.ts), so a
 * ledger's heap holds its open reservations and its recent records, not every transfer it ever
 * made. Deciding a command gives the same answer on a compacted state as on the state before:
 * `findTransfer` finds a record in either place, and the decider compares a retry with a compacted
 * record through its retry digest.
 */
import { assert, assertNever } from "../assert.ts"
import {
  type CompactedEntry,
  type CompactedKind,
  type CompactedTransfer,
  CompactedTransfers,
  postRetryDigest,
  transferRetryDigest,
  voidRetryDigest,
} from "./compacted-transfers.ts"
import { finalRecordCountMax } from "./limits.ts"
import type { FinalIds, LedgerState, PendingStatus, TransferRecord } from "./state.ts"

/** The record of `transfer_id` in full, or compacted, or undefined when the id was never used. */
export function findTransfer(
  state: LedgerState,
  transfer_id: string,
): TransferRecord | CompactedTransfer | undefined {
  const record = state.transfers.get(transfer_id)
  if (record !== undefined || state.compacted_count === 0) return record
  const entry = state.compacted.find(transfer_id, state.compacted_count)
  return entry < 0 ? undefined : state.compacted.at(entry)
}

/** True when `transfer_id` names a recorded transfer (of any kind). */
export function hasTransfer(state: LedgerState, transfer_id: string): boolean {
  return findTransfer(state, transfer_id) !== undefined
}

function finalStatusKind(status: PendingStatus): CompactedKind {
  assert(status !== "pending", "a pending reservation is not final")
  return `pending_${status}`
}

/** How a compacted reservation ended; undefined when the record is not a reservation. */
export function compactedReservationStatus(
  kind: CompactedKind,
): Exclude<PendingStatus, "pending"> | undefined {
  switch (kind) {
    case "pending_posted":
      return "posted"
    case "pending_voided":
      return "voided"
    case "pending_expired":
      return "expired"
    default:
      return undefined
  }
}

/** What a final record keeps once compacted. */
function entryOf(record: TransferRecord): CompactedEntry {
  const { transfer_id } = record
  switch (record.kind) {
    case "single_phase":
    case "pending": {
      const record_kind = record.kind === "single_phase" ? "single_phase" : finalStatusKind(record.status)
      const retry_digest = transferRetryDigest({
        pending_timeout_ms: record.kind === "pending" ? record.timeout_ms : null,
        debit_account_id: record.debit_account_id,
        credit_account_id: record.credit_account_id,
        amount: record.amount,
        code: record.code,
        user_data: record.user_data,
        linked_group_id: record.linked_group_id,
      })
      return { transfer_id, record_kind, amount: record.amount, retry_digest }
    }
    case "post":
      return {
        transfer_id,
        record_kind: "post",
        amount: record.amount,
        retry_digest: postRetryDigest(record.pending_id, record.amount),
      }
    case "void":
      return {
        transfer_id,
        record_kind: "void",
        amount: 0n,
        retry_digest: voidRetryDigest(record.pending_id),
      }
    default:
      return assertNever(record)
  }
}

/**
 * The store `state` compacts into: its own, appended in place, unless entries were appended to it
 * since by a state on another branch of the history, which `state` must not see: then a copy of
 * `state`'s own entries. (The writer never branches: it compacts committed states and rebases the
 * states in flight on them, `rebaseOnCompacted`.)
 */
function storeFor(state: LedgerState): CompactedTransfers {
  const { compacted: store, compacted_count: count } = state
  if (!store.appendable) return CompactedTransfers.create()
  return store.count === count ? store : store.copyOf(count)
}

/**
 * `state` with its final records compacted: the same ledger, deciding every command the same way,
 * holding in full only its pending reservations and nothing final.
 * @example const smaller = compactTransfers(state) // smaller.final_count === 0
 */
export function compactTransfers(state: LedgerState): LedgerState {
  if (state.final_ids === null) return state
  const ids: Array<string> = []
  const entries: Array<CompactedEntry> = []
  for (let final: FinalIds | null = state.final_ids; final !== null; final = final.next) {
    const record = state.transfers.get(final.transfer_id)
    assert(record !== undefined, "a final record is in full until compacted")
    ids.push(final.transfer_id)
    entries.push(entryOf(record))
  }
  // Oldest first, so entries are numbered in the order their records were made.
  ids.reverse()
  entries.reverse()
  const store = storeFor(state)
  for (const entry of entries) store.append(entry)
  return {
    ...state,
    transfers: state.transfers.withoutAll(ids),
    compacted: store,
    compacted_count: store.count,
    final_ids: null,
    final_count: 0,
  }
}

/** `compactTransfers(state)` once `state` holds `finalRecordCountMax` final records in full, else `state`. */
export function compactTransfersWhenDue(state: LedgerState): LedgerState {
  return state.final_count >= finalRecordCountMax ? compactTransfers(state) : state
}

/**
 * `descendant`, a state made from `before` by later events, as if made from `after`, which is
 * `before` compacted: the records `after` compacted are dropped from it in full, and it sees their
 * entries. Undefined when `descendant` does not hold every one of those records, the very objects
 * `before` holds (so they are in its history), or does not share `before`'s compacted entries.
 */
export function rebaseOnCompacted(
  descendant: LedgerState,
  before: LedgerState,
  after: LedgerState,
): LedgerState | undefined {
  if (descendant === before) return after
  if (descendant.compacted !== before.compacted || descendant.compacted_count !== before.compacted_count)
    return undefined
  // `descendant`'s final ids are its own, newest first, then `before`'s, in the same order (the same
  // list, or a copy of it when `descendant` was rebased before).
  const own_count = descendant.final_count - before.final_count
  if (own_count < 0) return undefined
  const own: Array<string> = []
  let final = descendant.final_ids
  for (; own.length < own_count; final = final.next) {
    if (final === null) return undefined
    own.push(final.transfer_id)
  }
  const compacted: Array<string> = []
  for (let theirs = before.final_ids; theirs !== null; theirs = theirs.next, final = final.next) {
    if (final === null || final.transfer_id !== theirs.transfer_id) return undefined
    const record = before.transfers.get(theirs.transfer_id)
    if (record === undefined || descendant.transfers.get(theirs.transfer_id) !== record) return undefined
    compacted.push(theirs.transfer_id)
  }
  if (final !== null) return undefined
  let final_ids: FinalIds | null = null
  for (let index = own.length - 1; index >= 0; index -= 1)
    final_ids = { transfer_id: own[index] as string, next: final_ids }
  return {
    ...descendant,
    transfers: descendant.transfers.withoutAll(compacted),
    compacted: after.compacted,
    compacted_count: after.compacted_count,
    final_ids,
    final_count: own.length,
  }
}
