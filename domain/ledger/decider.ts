/**
 * `decide`: the ledger's rules. Pure: time and ids come in the command, the answer is the events to
 * append or the reason for refusing. Every rule a command must pass lives here, in the order it is
 * checked; `evolve` re-asserts the ones it relies on.
 */
import { Result } from "effect"
import { assert, assertNever } from "../assert.ts"
import { U128_MAX } from "../money/amount.ts"
import { checkAsset } from "../money/asset.ts"
import type {
  CreateTransfers,
  LedgerCommand,
  OpenAccount,
  PostPendingTransfer,
  TransferSpec,
  VoidPendingTransfer,
} from "./commands.ts"
import {
  type CompactedTransfer,
  postRetryDigest,
  sameDigest,
  transferRetryDigest,
  voidRetryDigest,
} from "./compacted-transfers.ts"
import { compactedReservationStatus, findTransfer } from "./compaction.ts"
import {
  AccountAlreadyExists,
  AccountFlagsConflict,
  AccountNotFound,
  AccountsMustBeDifferent,
  AmountAboveMaximum,
  AmountMustBePositive,
  AssetMismatch,
  BalanceOverflow,
  ExceedsDebits,
  InsufficientFunds,
  InvalidCode,
  InvalidId,
  InvalidTimeout,
  type LedgerError,
  LinkedTransferFailed,
  PendingTransferAlreadyExpired,
  PendingTransferAlreadyPosted,
  PendingTransferAlreadyVoided,
  PendingTransferNotFound,
  PostAmountExceedsPending,
  TransferCountOutOfRange,
  TransferIdAlreadyUsed,
  type TransferRejection,
  UserDataTooLong,
} from "./errors.ts"
import type {
  LedgerEvent,
  PendingTransferCreated,
  PendingTransferExpired,
  TransferCreated,
} from "./events.ts"
import { evolve } from "./evolve.ts"
import { firstExpiry } from "./expiry-index.ts"
import { available } from "./invariants.ts"
import {
  codeMax,
  idLengthMax,
  ledgerTimeMsMax,
  pendingTimeoutMsMax,
  transferBatchCountMax,
  userDataLengthMax,
} from "./limits.ts"
import {
  type AccountState,
  initialState,
  type LedgerState,
  type PendingStatus,
  type PendingTransfer,
  type TransferRecord,
} from "./state.ts"
import { assertLedgerTime, isoFromMs } from "./time.ts"

/** The events to append (possibly none: an exact retry), or why the command was refused. */
export type LedgerDecision = Result.Result<ReadonlyArray<LedgerEvent>, LedgerError>

/** A decision together with the state after its events. */
export interface Decided {
  readonly events: ReadonlyArray<LedgerEvent>
  readonly state: LedgerState
}

/**
 * Decides `command` against `state`. First the ledger clock moves to max(clock, now_ms) and every
 * reservation due by then lapses: the events start with those expiries (soonest first, then by id)
 * and the command is decided against the state after them, so a lapsed transfer cannot be posted
 * and its released funds can be spent. Deciding the same command on the same state always gives
 * the same answer. On refusal only the error is returned; the expiries wait for the next command.
 * @example decide({ type: "ExpirePendingTransfers", now_ms: Date.UTC(2030, 0, 1) }, state)
 */
export function decide(command: LedgerCommand, state: LedgerState): LedgerDecision {
  return Result.map(decideAndEvolve(command, state), (decided) => decided.events)
}

/**
 * `decide`, also returning the state after the events: equal to folding them with `evolve`, but
 * free, since deciding a linked group or an expiry already evolves a scratch state. The writer
 * uses it to avoid evolving every event twice.
 */
export function decideAndEvolve(
  command: LedgerCommand,
  state: LedgerState,
): Result.Result<Decided, LedgerError> {
  assertLedgerTime(command.now_ms)
  const now_ms = Math.max(state.clock_ms, command.now_ms)
  const bounded = command.type === "ExpirePendingTransfers" ? command.max_count : undefined
  assert(
    bounded === undefined || (Number.isSafeInteger(bounded) && bounded > 0),
    "max_count is a positive integer",
  )
  const lapsed = expireDue(state, now_ms, bounded ?? Number.POSITIVE_INFINITY)
  const decided = decideCommand(command, lapsed.state, now_ms)
  if (Result.isFailure(decided) || lapsed.events.length === 0) return decided
  return Result.succeed({
    events: [...lapsed.events, ...decided.success.events],
    state: decided.success.state,
  })
}

/** The ledger as an Emmett decider. */
export const ledgerDecider = {
  decide,
  evolve,
  initialState: (): LedgerState => initialState,
}

type Decision = Result.Result<Decided, LedgerError>

/** Records `event`: the decision to append it, with the state after it. */
function recorded(state: LedgerState, event: LedgerEvent): Decision {
  return Result.succeed({ events: [event], state: evolve(state, event) })
}

/** Records nothing: the command was an exact retry. */
function unchanged(state: LedgerState): Decision {
  return Result.succeed({ events: [], state })
}

function decideCommand(command: LedgerCommand, state: LedgerState, now_ms: number): Decision {
  switch (command.type) {
    case "OpenAccount":
      return openAccount(command, state, now_ms)
    case "CreateTransfers":
      return createTransfers(command, state, now_ms)
    case "PostPendingTransfer":
      return postPendingTransfer(command, state, now_ms)
    case "VoidPendingTransfer":
      return voidPendingTransfer(command, state, now_ms)
    case "ExpirePendingTransfers":
      // Every command expires what is due before anything else; this one does nothing more.
      return unchanged(state)
    default:
      return assertNever(command)
  }
}

/**
 * Lapses the reservations due at `now_ms`, soonest first, at most `max_count`. The loop is bounded
 * by the pending transfers that have an expiry, and each step removes one from the index.
 */
function expireDue(state: LedgerState, now_ms: number, max_count: number): Decided {
  const events: Array<PendingTransferExpired> = []
  const expired_at = isoFromMs(now_ms)
  let current = state
  for (
    let due = firstExpiry(current.expiries);
    due !== null && due.expires_at_ms <= now_ms && events.length < max_count;
  ) {
    const event: PendingTransferExpired = {
      type: "PendingTransferExpired",
      data: { pending_id: due.transfer_id, expired_at },
    }
    events.push(event)
    current = evolve(current, event)
    due = firstExpiry(current.expiries)
  }
  return { events, state: current }
}

function checkId(field: InvalidId["field"], value: string): InvalidId | undefined {
  if (value.length > 0 && value.length <= idLengthMax) return undefined
  return new InvalidId({ field, value: value.slice(0, idLengthMax), max_length: idLengthMax })
}

function checkCode(code: number): InvalidCode | undefined {
  return Number.isInteger(code) && code >= 0 && code <= codeMax
    ? undefined
    : new InvalidCode({ code, max: codeMax })
}

function checkUserData(user_data: string | null): UserDataTooLong | undefined {
  if (user_data === null || user_data.length <= userDataLengthMax) return undefined
  return new UserDataTooLong({ length: user_data.length, max_length: userDataLengthMax })
}

function openAccount(command: OpenAccount, state: LedgerState, now_ms: number): Decision {
  const { account_id, flags } = command
  const bothFlags = flags.debits_must_not_exceed_credits && flags.credits_must_not_exceed_debits
  const invalid =
    checkId("account_id", account_id) ??
    checkCode(command.code) ??
    checkUserData(command.user_data) ??
    (bothFlags ? new AccountFlagsConflict({ account_id }) : undefined)
  if (invalid !== undefined) return Result.fail(invalid)
  const asset = checkAsset(command.asset)
  if (Result.isFailure(asset)) return Result.fail(asset.failure)
  const existing = state.accounts.get(account_id)
  if (existing !== undefined) {
    return sameAccount(existing, command)
      ? unchanged(state)
      : Result.fail(new AccountAlreadyExists({ account_id }))
  }
  const opened: LedgerEvent = {
    type: "AccountOpened",
    data: {
      account_id,
      asset: asset.success,
      kind: command.kind,
      flags: {
        debits_must_not_exceed_credits: flags.debits_must_not_exceed_credits,
        credits_must_not_exceed_debits: flags.credits_must_not_exceed_debits,
      },
      code: command.code,
      user_data: command.user_data,
      opened_at: isoFromMs(now_ms),
    },
  }
  return recorded(state, opened)
}

/** Re-opening with the very same spec is a retry, not a conflict. */
function sameAccount(account: AccountState, command: OpenAccount): boolean {
  return (
    account.asset.code === command.asset.code &&
    account.asset.decimals === command.asset.decimals &&
    account.kind === command.kind &&
    account.flags.debits_must_not_exceed_credits === command.flags.debits_must_not_exceed_credits &&
    account.flags.credits_must_not_exceed_debits === command.flags.credits_must_not_exceed_debits &&
    account.code === command.code &&
    account.user_data === command.user_data
  )
}

/**
 * Decides the transfers in order, each against the state left by the ones before it (so a payment
 * and its fee must fit together). One refusal refuses them all.
 */
function createTransfers(command: CreateTransfers, state: LedgerState, now_ms: number): Decision {
  const count = command.transfers.length
  if (count < 1 || count > transferBatchCountMax) {
    return Result.fail(new TransferCountOutOfRange({ count, min: 1, max: transferBatchCountMax }))
  }
  const invalidGroup = command.group_id === null ? undefined : checkId("group_id", command.group_id)
  if (invalidGroup !== undefined) return Result.fail(invalidGroup)
  const events: Array<LedgerEvent> = []
  let current = state
  for (const [index, spec] of command.transfers.entries()) {
    const decided = decideTransfer(spec, current, command.group_id, now_ms)
    if (Result.isFailure(decided)) {
      const reason = decided.failure
      return Result.fail(
        count === 1 ? reason : new LinkedTransferFailed({ index, transfer_id: spec.transfer_id, reason }),
      )
    }
    if (decided.success !== null) {
      events.push(decided.success)
      current = evolve(current, decided.success)
    }
  }
  return Result.succeed({ events, state: current })
}

/** The event for one transfer; null when the identical transfer is already recorded (a retry). */
function decideTransfer(
  spec: TransferSpec,
  state: LedgerState,
  group_id: string | null,
  now_ms: number,
): Result.Result<TransferCreated | PendingTransferCreated | null, TransferRejection> {
  const invalid = checkTransferSpec(spec, now_ms)
  if (invalid !== undefined) return Result.fail(invalid)
  const existing = findTransfer(state, spec.transfer_id)
  if (existing !== undefined) {
    if (sameTransfer(existing, spec, group_id)) return Result.succeed(null)
    return Result.fail(new TransferIdAlreadyUsed({ transfer_id: spec.transfer_id }))
  }
  const debit = state.accounts.get(spec.debit_account_id)
  if (debit === undefined) return Result.fail(new AccountNotFound({ account_id: spec.debit_account_id }))
  const credit = state.accounts.get(spec.credit_account_id)
  if (credit === undefined) return Result.fail(new AccountNotFound({ account_id: spec.credit_account_id }))
  const refused =
    checkAssets(spec, debit, credit) ?? checkDebit(debit, spec.amount) ?? checkCredit(credit, spec.amount)
  if (refused !== undefined) return Result.fail(refused)
  return Result.succeed(transferEvent(spec, debit.asset.code, group_id, now_ms))
}

/** The checks that need no state. */
function checkTransferSpec(spec: TransferSpec, now_ms: number): TransferRejection | undefined {
  const { transfer_id, amount } = spec
  return (
    checkId("transfer_id", transfer_id) ??
    checkId("debit_account_id", spec.debit_account_id) ??
    checkId("credit_account_id", spec.credit_account_id) ??
    checkCode(spec.code) ??
    checkUserData(spec.user_data) ??
    (amount <= 0n ? new AmountMustBePositive({ transfer_id, amount }) : undefined) ??
    (amount > U128_MAX ? new AmountAboveMaximum({ transfer_id, amount, max: U128_MAX }) : undefined) ??
    checkTimeout(spec, now_ms) ??
    (spec.debit_account_id === spec.credit_account_id
      ? new AccountsMustBeDifferent({ transfer_id, account_id: spec.debit_account_id })
      : undefined)
  )
}

/** A whole number of ms, within the bound, lapsing no later than the last time the ledger can write. */
function checkTimeout(spec: TransferSpec, now_ms: number): InvalidTimeout | undefined {
  if (spec.pending === undefined) return undefined
  const { timeout_ms } = spec.pending
  const max = Math.min(pendingTimeoutMsMax, ledgerTimeMsMax - now_ms)
  if (Number.isSafeInteger(timeout_ms) && timeout_ms >= 0 && timeout_ms <= max) return undefined
  return new InvalidTimeout({ transfer_id: spec.transfer_id, timeout_ms, max })
}

/** A retry repeats every field: same kind and timeout, accounts, amount, code, user data and group. */
function sameTransfer(
  existing: TransferRecord | CompactedTransfer,
  spec: TransferSpec,
  group_id: string | null,
): boolean {
  if (existing.kind === "compacted") {
    const retry = transferRetryDigest({
      pending_timeout_ms: spec.pending === undefined ? null : spec.pending.timeout_ms,
      debit_account_id: spec.debit_account_id,
      credit_account_id: spec.credit_account_id,
      amount: spec.amount,
      code: spec.code,
      user_data: spec.user_data,
      linked_group_id: group_id,
    })
    return sameDigest(existing.retry_digest, retry)
  }
  if (existing.kind === "post" || existing.kind === "void") return false
  const sameKind =
    spec.pending === undefined
      ? existing.kind === "single_phase"
      : existing.kind === "pending" && existing.timeout_ms === spec.pending.timeout_ms
  return (
    sameKind &&
    existing.debit_account_id === spec.debit_account_id &&
    existing.credit_account_id === spec.credit_account_id &&
    existing.amount === spec.amount &&
    existing.code === spec.code &&
    existing.user_data === spec.user_data &&
    existing.linked_group_id === group_id
  )
}

function checkAssets(
  spec: TransferSpec,
  debit: AccountState,
  credit: AccountState,
): AssetMismatch | undefined {
  if (debit.asset.code === credit.asset.code) return undefined
  return new AssetMismatch({
    transfer_id: spec.transfer_id,
    debit_account_id: debit.account_id,
    debit_asset_code: debit.asset.code,
    credit_account_id: credit.account_id,
    credit_asset_code: credit.asset.code,
  })
}

/** Debits count pending ones too: a reservation is a promise the account must be able to keep. */
function checkDebit(account: AccountState, amount: bigint): BalanceOverflow | InsufficientFunds | undefined {
  const debits = account.debits_pending + account.debits_posted + amount
  if (debits > U128_MAX) return new BalanceOverflow({ account_id: account.account_id, side: "debits" })
  if (!account.flags.debits_must_not_exceed_credits || debits <= account.credits_posted) return undefined
  return new InsufficientFunds({
    account_id: account.account_id,
    available: available(account),
    requested: amount,
  })
}

function checkCredit(account: AccountState, amount: bigint): BalanceOverflow | ExceedsDebits | undefined {
  const credits = account.credits_pending + account.credits_posted + amount
  if (credits > U128_MAX) return new BalanceOverflow({ account_id: account.account_id, side: "credits" })
  if (!account.flags.credits_must_not_exceed_debits || credits <= account.debits_posted) return undefined
  const room = account.debits_posted - account.credits_posted - account.credits_pending
  return new ExceedsDebits({ account_id: account.account_id, available: room, requested: amount })
}

function transferEvent(
  spec: TransferSpec,
  asset_code: string,
  group_id: string | null,
  now_ms: number,
): TransferCreated | PendingTransferCreated {
  // Keys in sorted order (spreads keep it): the event store then writes their canonical JSON
  // natively. A pending transfer's `expires_at` sorts between the two halves.
  const before = {
    amount: spec.amount.toString(),
    asset_code,
    code: spec.code,
    created_at: isoFromMs(now_ms),
    credit_account_id: spec.credit_account_id,
    debit_account_id: spec.debit_account_id,
  }
  const after = { linked_group_id: group_id, transfer_id: spec.transfer_id, user_data: spec.user_data }
  if (spec.pending === undefined) return { type: "TransferCreated", data: { ...before, ...after } }
  const { timeout_ms } = spec.pending
  const expires_at = timeout_ms === 0 ? null : isoFromMs(now_ms + timeout_ms)
  return { type: "PendingTransferCreated", data: { ...before, expires_at, ...after } }
}

/**
 * The reservation a post or void settles, after the checks both share; null when this very
 * settlement is already recorded (a retry).
 */
function reservationToSettle(
  command: PostPendingTransfer | VoidPendingTransfer,
  state: LedgerState,
): Result.Result<PendingTransfer | null, LedgerError> {
  const { transfer_id, pending_id } = command
  const invalid = checkId("transfer_id", transfer_id) ?? checkId("pending_id", pending_id)
  if (invalid !== undefined) return Result.fail(invalid)
  const pending = reservationOf(findTransfer(state, pending_id))
  const existing = findTransfer(state, transfer_id)
  if (existing !== undefined) {
    if (sameSettlement(existing, command, pending)) return Result.succeed(null)
    return Result.fail(new TransferIdAlreadyUsed({ transfer_id }))
  }
  if (pending === undefined) return Result.fail(new PendingTransferNotFound({ pending_id }))
  switch (pending.status) {
    case "pending":
      // Only final records are compacted: a reservation still pending is held in full.
      assert(pending.record !== undefined, "a pending reservation is held in full")
      return Result.succeed(pending.record)
    case "posted":
      return Result.fail(new PendingTransferAlreadyPosted({ pending_id }))
    case "voided":
      return Result.fail(new PendingTransferAlreadyVoided({ pending_id }))
    case "expired":
      return Result.fail(new PendingTransferAlreadyExpired({ pending_id }))
    default:
      return assertNever(pending.status)
  }
}

/** A reservation as a post or void sees it, in full or compacted. */
interface Reservation {
  readonly status: PendingStatus
  readonly amount: bigint
  /** Undefined when compacted. */
  readonly record: PendingTransfer | undefined
}

function reservationOf(found: TransferRecord | CompactedTransfer | undefined): Reservation | undefined {
  if (found === undefined) return undefined
  if (found.kind === "pending") return { status: found.status, amount: found.amount, record: found }
  if (found.kind !== "compacted") return undefined
  const status = compactedReservationStatus(found.record_kind)
  return status === undefined ? undefined : { status, amount: found.amount, record: undefined }
}

/** A retried post names the same reservation and amount (omitted = in full); a void, the same reservation. */
function sameSettlement(
  existing: TransferRecord | CompactedTransfer,
  command: PostPendingTransfer | VoidPendingTransfer,
  pending: Reservation | undefined,
): boolean {
  if (existing.kind === "compacted") {
    if (command.type === "VoidPendingTransfer")
      return sameDigest(existing.retry_digest, voidRetryDigest(command.pending_id))
    const requested = command.amount ?? pending?.amount
    return (
      requested !== undefined &&
      sameDigest(existing.retry_digest, postRetryDigest(command.pending_id, requested))
    )
  }
  if (command.type === "VoidPendingTransfer")
    return existing.kind === "void" && existing.pending_id === command.pending_id
  if (existing.kind !== "post" || existing.pending_id !== command.pending_id) return false
  const requested = command.amount ?? pending?.amount
  return existing.amount === requested
}

function postPendingTransfer(command: PostPendingTransfer, state: LedgerState, now_ms: number): Decision {
  const found = reservationToSettle(command, state)
  if (Result.isFailure(found)) return Result.fail(found.failure)
  const pending = found.success
  if (pending === null) return unchanged(state)
  const amount = command.amount ?? pending.amount
  const { transfer_id, pending_id } = command
  if (amount <= 0n) return Result.fail(new AmountMustBePositive({ transfer_id, amount }))
  if (amount > pending.amount) {
    return Result.fail(new PostAmountExceedsPending({ pending_id, amount, pending_amount: pending.amount }))
  }
  const posted: LedgerEvent = {
    type: "PendingTransferPosted",
    data: {
      transfer_id,
      pending_id,
      amount: amount.toString(),
      linked_group_id: null,
      posted_at: isoFromMs(now_ms),
    },
  }
  return recorded(state, posted)
}

function voidPendingTransfer(command: VoidPendingTransfer, state: LedgerState, now_ms: number): Decision {
  const found = reservationToSettle(command, state)
  if (Result.isFailure(found)) return Result.fail(found.failure)
  if (found.success === null) return unchanged(state)
  const { transfer_id, pending_id } = command
  const voided: LedgerEvent = {
    type: "PendingTransferVoided",
    data: { transfer_id, pending_id, linked_group_id: null, voided_at: isoFromMs(now_ms) },
  }
  return recorded(state, voided)
}
