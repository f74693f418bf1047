/**
 * Every way the ledger can refuse a command, one class each, so that callers branch on `_tag` and
 * the HTTP layer maps each to a status and code in one table. Fields carry what a caller needs to
 * explain or correct the request; amounts are bigint minor units.
 */
import { Data } from "effect"
import type { InvalidAsset } from "../money/errors.ts"

/** An id (account, transfer, pending, group) that is empty or longer than `idLengthMax`. */
export class InvalidId extends Data.TaggedError("InvalidId")<{
  readonly field:
    | "account_id"
    | "transfer_id"
    | "debit_account_id"
    | "credit_account_id"
    | "pending_id"
    | "group_id"
  readonly value: string
  readonly max_length: number
}> {}

/** A `code` that is not an integer in 0..`codeMax` (TigerBeetle's u16). */
export class InvalidCode extends Data.TaggedError("InvalidCode")<{
  readonly code: number
  readonly max: number
}> {}

/** `user_data` longer than `userDataLengthMax` characters. */
export class UserDataTooLong extends Data.TaggedError("UserDataTooLong")<{
  readonly length: number
  readonly max_length: number
}> {}

/** An account may not forbid both overdrawing and over-crediting: it could then never move. */
export class AccountFlagsConflict extends Data.TaggedError("AccountFlagsConflict")<{
  readonly account_id: string
}> {}

/** The id is taken by an account opened with a different asset, kind, flags, code or user data. */
export class AccountAlreadyExists extends Data.TaggedError("AccountAlreadyExists")<{
  readonly account_id: string
}> {}

/** A transfer names an account that was never opened. */
export class AccountNotFound extends Data.TaggedError("AccountNotFound")<{
  readonly account_id: string
}> {}

/** A transfer's debit and credit accounts are the same account. */
export class AccountsMustBeDifferent extends Data.TaggedError("AccountsMustBeDifferent")<{
  readonly transfer_id: string
  readonly account_id: string
}> {}

/** A transfer moves one asset; the two accounts hold different ones. */
export class AssetMismatch extends Data.TaggedError("AssetMismatch")<{
  readonly transfer_id: string
  readonly debit_account_id: string
  readonly debit_asset_code: string
  readonly credit_account_id: string
  readonly credit_asset_code: string
}> {}

/** A transfer or post amount of zero or less. */
export class AmountMustBePositive extends Data.TaggedError("AmountMustBePositive")<{
  readonly transfer_id: string
  readonly amount: bigint
}> {}

/** A transfer amount above `U128_MAX`. */
export class AmountAboveMaximum extends Data.TaggedError("AmountAboveMaximum")<{
  readonly transfer_id: string
  readonly amount: bigint
  readonly max: bigint
}> {}

/** A pending timeout that is not an integer in 0..`pendingTimeoutMsMax`, or lapses past year 9999. */
export class InvalidTimeout extends Data.TaggedError("InvalidTimeout")<{
  readonly transfer_id: string
  readonly timeout_ms: number
  readonly max: number
}> {}

/** The account's debits or credits (pending + posted) would pass `U128_MAX`. */
export class BalanceOverflow extends Data.TaggedError("BalanceOverflow")<{
  readonly account_id: string
  readonly side: "debits" | "credits"
}> {}

/** A debit beyond what a `debits_must_not_exceed_credits` account has available. */
export class InsufficientFunds extends Data.TaggedError("InsufficientFunds")<{
  readonly account_id: string
  /** credits_posted - debits_posted - debits_pending */
  readonly available: bigint
  readonly requested: bigint
}> {}

/** A credit beyond what a `credits_must_not_exceed_debits` account can take. */
export class ExceedsDebits extends Data.TaggedError("ExceedsDebits")<{
  readonly account_id: string
  /** debits_posted - credits_posted - credits_pending */
  readonly available: bigint
  readonly requested: bigint
}> {}

/** The transfer id is taken by a transfer with different fields (a retry must repeat them exactly). */
export class TransferIdAlreadyUsed extends Data.TaggedError("TransferIdAlreadyUsed")<{
  readonly transfer_id: string
}> {}

/** A CreateTransfers command with no transfers or more than `transferBatchCountMax`. */
export class TransferCountOutOfRange extends Data.TaggedError("TransferCountOutOfRange")<{
  readonly count: number
  readonly min: number
  readonly max: number
}> {}

/** Transfer `index` of a linked group was refused, so none of the group was recorded. */
export class LinkedTransferFailed extends Data.TaggedError("LinkedTransferFailed")<{
  readonly index: number
  readonly transfer_id: string
  readonly reason: TransferRejection
}> {}

/** No two-phase transfer has this id (absent, or a single-phase, post or void transfer). */
export class PendingTransferNotFound extends Data.TaggedError("PendingTransferNotFound")<{
  readonly pending_id: string
}> {}

/** The reservation was already posted (by a post with another transfer id). */
export class PendingTransferAlreadyPosted extends Data.TaggedError("PendingTransferAlreadyPosted")<{
  readonly pending_id: string
}> {}

/** The reservation was already voided. */
export class PendingTransferAlreadyVoided extends Data.TaggedError("PendingTransferAlreadyVoided")<{
  readonly pending_id: string
}> {}

/** The reservation lapsed (by the ledger clock, possibly within this very command). */
export class PendingTransferAlreadyExpired extends Data.TaggedError("PendingTransferAlreadyExpired")<{
  readonly pending_id: string
}> {}

/** A post of more than was reserved. */
export class PostAmountExceedsPending extends Data.TaggedError("PostAmountExceedsPending")<{
  readonly pending_id: string
  readonly amount: bigint
  readonly pending_amount: bigint
}> {}

/** Why one transfer of a CreateTransfers command was refused. */
export type TransferRejection =
  | InvalidId
  | InvalidCode
  | UserDataTooLong
  | AmountMustBePositive
  | AmountAboveMaximum
  | InvalidTimeout
  | AccountsMustBeDifferent
  | AccountNotFound
  | AssetMismatch
  | BalanceOverflow
  | InsufficientFunds
  | ExceedsDebits
  | TransferIdAlreadyUsed

/** Every way `decide` can refuse a command. */
export type LedgerError =
  | TransferRejection
  | InvalidAsset
  | AccountFlagsConflict
  | AccountAlreadyExists
  | TransferCountOutOfRange
  | LinkedTransferFailed
  | PendingTransferNotFound
  | PendingTransferAlreadyPosted
  | PendingTransferAlreadyVoided
  | PendingTransferAlreadyExpired
  | PostAmountExceedsPending

const ledgerErrorTagSet: Record<LedgerError["_tag"], true> = {
  InvalidId: true,
  InvalidCode: true,
  UserDataTooLong: true,
  AmountMustBePositive: true,
  AmountAboveMaximum: true,
  InvalidTimeout: true,
  AccountsMustBeDifferent: true,
  AccountNotFound: true,
  AssetMismatch: true,
  BalanceOverflow: true,
  InsufficientFunds: true,
  ExceedsDebits: true,
  TransferIdAlreadyUsed: true,
  InvalidAsset: true,
  AccountFlagsConflict: true,
  AccountAlreadyExists: true,
  TransferCountOutOfRange: true,
  LinkedTransferFailed: true,
  PendingTransferNotFound: true,
  PendingTransferAlreadyPosted: true,
  PendingTransferAlreadyVoided: true,
  PendingTransferAlreadyExpired: true,
  PostAmountExceedsPending: true,
}

/**
 * Every ledger error tag. Built from a record keyed by the union, so the compiler rejects a list
 * that misses or invents one; the HTTP error table can test that it maps them all.
 */
export const ledgerErrorTags = Object.keys(ledgerErrorTagSet) as ReadonlyArray<LedgerError["_tag"]>
