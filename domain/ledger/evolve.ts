/**
 * `evolve`: how each event changes a ledger's state. It trusts nothing: every invariant `decide`
 * checked before emitting an event is asserted again here, where it is consumed, so a bug in the
 * decider or a corrupted stream crashes the replay instead of producing a wrong balance.
 */
import { Result } from "effect"
import { assert, assertNever } from "../assert.ts"
import { U128_MAX } from "../money/amount.ts"
import { checkAsset } from "../money/asset.ts"
import { compactedReservationStatus, findTransfer, hasTransfer } from "./compaction.ts"
import type {
  AccountOpened,
  LedgerEvent,
  PendingTransferCreated,
  PendingTransferExpired,
  PendingTransferPosted,
  PendingTransferVoided,
  TransferCreated,
} from "./events.ts"
import { insertExpiry, removeExpiry } from "./expiry-index.ts"
import { withinLimits } from "./invariants.ts"
import {
  type AccountState,
  type FinalIds,
  initialState,
  type LedgerState,
  type PendingStatus,
  type PendingTransfer,
  type TransferRecord,
} from "./state.ts"
import { msFromIso } from "./time.ts"

/**
 * The state after `event`. Total over event types; crashes (AssertionFailed) on an event that the
 * decider could not have produced from `state`.
 */
export function evolve(state: LedgerState, event: LedgerEvent): LedgerState {
  switch (event.type) {
    case "AccountOpened":
      return accountOpened(state, event)
    case "TransferCreated":
    case "PendingTransferCreated":
      return transferCreated(state, event)
    case "PendingTransferPosted":
      return pendingTransferPosted(state, event)
    case "PendingTransferVoided":
      return pendingTransferVoided(state, event)
    case "PendingTransferExpired":
      return pendingTransferExpired(state, event)
    default:
      return assertNever(event)
  }
}

/** Folds `events` over `state` (by default a new ledger): replay. */
export function evolveAll(events: Iterable<LedgerEvent>, state: LedgerState = initialState): LedgerState {
  let current = state
  for (const event of events) current = evolve(current, event)
  return current
}

/** The event's time, asserted not to be before the ledger clock. */
function eventTime(state: LedgerState, iso: string): number {
  const ms = msFromIso(iso)
  assert(ms >= state.clock_ms, "the ledger clock never goes backwards")
  return ms
}

const minorUnitsPattern = /^(0|[1-9][0-9]*)$/

function amountOf(text: string): bigint {
  assert(minorUnitsPattern.test(text), "an event amount is canonical decimal minor units")
  const amount = BigInt(text)
  assert(amount > 0n && amount <= U128_MAX, "an event amount is in 1..U128_MAX")
  return amount
}

function requireAccount(state: LedgerState, account_id: string): AccountState {
  const account = state.accounts.get(account_id)
  assert(account !== undefined, "a transfer's accounts are open")
  return account
}

function checkedAccount(account: AccountState): AccountState {
  assert(withinLimits(account), "an account stays within its balance limits and flags")
  return account
}

function accountOpened(state: LedgerState, event: AccountOpened): LedgerState {
  const { data } = event
  const clock_ms = eventTime(state, data.opened_at)
  assert(!state.accounts.has(data.account_id), "an account is opened once")
  assert(
    !(data.flags.debits_must_not_exceed_credits && data.flags.credits_must_not_exceed_debits),
    "an account has at most one balance flag",
  )
  assert(Result.isSuccess(checkAsset(data.asset)), "an account's asset is valid")
  const account: AccountState = {
    account_id: data.account_id,
    asset: data.asset,
    kind: data.kind,
    flags: data.flags,
    code: data.code,
    user_data: data.user_data,
    debits_pending: 0n,
    debits_posted: 0n,
    credits_pending: 0n,
    credits_posted: 0n,
  }
  return { ...state, clock_ms, accounts: state.accounts.with(data.account_id, account) }
}

function transferCreated(state: LedgerState, event: TransferCreated | PendingTransferCreated): LedgerState {
  const { data } = event
  const clock_ms = eventTime(state, data.created_at)
  const amount = amountOf(data.amount)
  assert(!hasTransfer(state, data.transfer_id), "a transfer id is used once")
  assert(data.debit_account_id !== data.credit_account_id, "a transfer moves between two accounts")
  const debit = requireAccount(state, data.debit_account_id)
  const credit = requireAccount(state, data.credit_account_id)
  assert(
    debit.asset.code === data.asset_code && credit.asset.code === data.asset_code,
    "one asset per transfer",
  )
  const reserves = event.type === "PendingTransferCreated"
  const debited = reserves
    ? { ...debit, debits_pending: debit.debits_pending + amount }
    : { ...debit, debits_posted: debit.debits_posted + amount }
  const credited = reserves
    ? { ...credit, credits_pending: credit.credits_pending + amount }
    : { ...credit, credits_posted: credit.credits_posted + amount }
  // Reuse the accounts' id strings so a million transfers do not hold a million copies of them.
  const fields = {
    transfer_id: data.transfer_id,
    debit_account_id: debit.account_id,
    credit_account_id: credit.account_id,
    asset_code: debit.asset.code,
    amount,
    code: data.code,
    user_data: data.user_data,
    linked_group_id: data.linked_group_id,
    created_at_ms: clock_ms,
  }
  const record: TransferRecord =
    event.type === "PendingTransferCreated"
      ? pendingRecord(fields, event.data.expires_at)
      : { kind: "single_phase", ...fields }
  const expiries =
    record.kind === "pending" && record.expires_at_ms !== null
      ? insertExpiry(state.expiries, { expires_at_ms: record.expires_at_ms, transfer_id: record.transfer_id })
      : state.expiries
  const next: LedgerState = {
    ...state,
    clock_ms,
    accounts: state.accounts
      .with(debit.account_id, checkedAccount(debited))
      .with(credit.account_id, checkedAccount(credited)),
    transfers: state.transfers.with(data.transfer_id, record),
    expiries,
  }
  // A single-phase transfer is final at once; a reservation when it is settled.
  return record.kind === "single_phase" ? withFinal(next, data.transfer_id) : next
}

/** `state` with `transfer_id`'s record (in `transfers`) counted final: it will never change again. */
function withFinal(state: LedgerState, transfer_id: string): LedgerState {
  const final_ids: FinalIds = { transfer_id, next: state.final_ids }
  return { ...state, final_ids, final_count: state.final_count + 1 }
}

function pendingRecord(
  fields: Omit<PendingTransfer, "kind" | "status" | "posted_amount" | "expires_at_ms" | "timeout_ms">,
  expires_at: string | null,
): PendingTransfer {
  const expires_at_ms = expires_at === null ? null : msFromIso(expires_at)
  assert(
    expires_at_ms === null || expires_at_ms > fields.created_at_ms,
    "a reservation lapses after it is made",
  )
  const timeout_ms = expires_at_ms === null ? 0 : expires_at_ms - fields.created_at_ms
  return { kind: "pending", ...fields, status: "pending", posted_amount: 0n, expires_at_ms, timeout_ms }
}

function requirePending(state: LedgerState, pending_id: string): PendingTransfer {
  const pending = state.transfers.get(pending_id)
  if (pending === undefined) {
    // Not held in full: compacted (final) if it exists at all.
    const compacted = findTransfer(state, pending_id)
    const settled =
      compacted?.kind === "compacted" ? compactedReservationStatus(compacted.record_kind) : undefined
    assert(settled === undefined, "a reservation is settled once")
  }
  assert(pending !== undefined && pending.kind === "pending", "a settled transfer is a pending transfer")
  assert(pending.status === "pending", "a reservation is settled once")
  return pending
}

/**
 * Settles a reservation: moves `posted_amount` from pending to posted on both accounts, releases the
 * rest, records the new status and drops the transfer from the expiry index.
 */
function settle(
  state: LedgerState,
  pending: PendingTransfer,
  status: Exclude<PendingStatus, "pending">,
  posted_amount: bigint,
  clock_ms: number,
): LedgerState {
  assert(posted_amount >= 0n && posted_amount <= pending.amount, "a post moves at most the reserved amount")
  const debit = requireAccount(state, pending.debit_account_id)
  const credit = requireAccount(state, pending.credit_account_id)
  const debited: AccountState = {
    ...debit,
    debits_pending: debit.debits_pending - pending.amount,
    debits_posted: debit.debits_posted + posted_amount,
  }
  const credited: AccountState = {
    ...credit,
    credits_pending: credit.credits_pending - pending.amount,
    credits_posted: credit.credits_posted + posted_amount,
  }
  const expiries =
    pending.expires_at_ms === null
      ? state.expiries
      : removeExpiry(state.expiries, {
          expires_at_ms: pending.expires_at_ms,
          transfer_id: pending.transfer_id,
        })
  return withFinal(
    {
      ...state,
      clock_ms,
      accounts: state.accounts
        .with(debit.account_id, checkedAccount(debited))
        .with(credit.account_id, checkedAccount(credited)),
      transfers: state.transfers.with(pending.transfer_id, { ...pending, status, posted_amount }),
      expiries,
    },
    pending.transfer_id,
  )
}

/**
 * A reservation is posted or voided only before it is due: a command at or after its expiry lapses
 * it first (`PendingTransferExpired`), so a log that resolves it later was not written by `decide`.
 */
function requireNotDue<P extends { readonly expires_at_ms: number | null }>(pending: P, clock_ms: number): P {
  assert(
    pending.expires_at_ms === null || pending.expires_at_ms > clock_ms,
    "a reservation is posted or voided only before it is due",
  )
  return pending
}

function pendingTransferPosted(state: LedgerState, event: PendingTransferPosted): LedgerState {
  const { data } = event
  const clock_ms = eventTime(state, data.posted_at)
  assert(!hasTransfer(state, data.transfer_id), "a transfer id is used once")
  const amount = amountOf(data.amount)
  const settled = settle(
    state,
    requireNotDue(requirePending(state, data.pending_id), clock_ms),
    "posted",
    amount,
    clock_ms,
  )
  const post: TransferRecord = {
    kind: "post",
    transfer_id: data.transfer_id,
    pending_id: data.pending_id,
    amount,
    created_at_ms: clock_ms,
  }
  return withFinal(
    { ...settled, transfers: settled.transfers.with(data.transfer_id, post) },
    data.transfer_id,
  )
}

function pendingTransferVoided(state: LedgerState, event: PendingTransferVoided): LedgerState {
  const { data } = event
  const clock_ms = eventTime(state, data.voided_at)
  assert(!hasTransfer(state, data.transfer_id), "a transfer id is used once")
  const settled = settle(
    state,
    requireNotDue(requirePending(state, data.pending_id), clock_ms),
    "voided",
    0n,
    clock_ms,
  )
  const voided: TransferRecord = {
    kind: "void",
    transfer_id: data.transfer_id,
    pending_id: data.pending_id,
    created_at_ms: clock_ms,
  }
  return withFinal(
    { ...settled, transfers: settled.transfers.with(data.transfer_id, voided) },
    data.transfer_id,
  )
}

function pendingTransferExpired(state: LedgerState, event: PendingTransferExpired): LedgerState {
  const { data } = event
  const clock_ms = eventTime(state, data.expired_at)
  const pending = requirePending(state, data.pending_id)
  assert(pending.expires_at_ms !== null && pending.expires_at_ms <= clock_ms, "only a due reservation lapses")
  return settle(state, pending, "expired", 0n, clock_ms)
}
