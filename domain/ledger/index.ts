/** The ledger domain: events, commands, the decider, its errors, state queries and invariants. */
export type {
  CreateTransfers,
  ExpirePendingTransfers,
  LedgerCommand,
  OpenAccount,
  PostPendingTransfer,
  TransferSpec,
  VoidPendingTransfer,
} from "./commands.ts"
export type { CompactedKind, CompactedTransfer } from "./compacted-transfers.ts"
export {
  compactTransfers,
  compactTransfersWhenDue,
  findTransfer,
  hasTransfer,
  rebaseOnCompacted,
} from "./compaction.ts"
export { type Decided, decide, decideAndEvolve, type LedgerDecision, ledgerDecider } from "./decider.ts"
export {
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
  ledgerErrorTags,
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
export {
  type AccountFlags,
  type AccountKind,
  type AccountOpened,
  type AssetRecord,
  type LedgerEvent,
  type LedgerEventType,
  type LedgerId,
  ledgerEventSchemaVersion,
  ledgerEventTypes,
  ledgerStreamId,
  type PendingTransferCreated,
  type PendingTransferExpired,
  type PendingTransferPosted,
  type PendingTransferVoided,
  type TransferCreated,
} from "./events.ts"
export { evolve, evolveAll } from "./evolve.ts"
export { countDue } from "./expiry-index.ts"
export {
  divideRoundHalfEven,
  type PaymentTransfersInput,
  paymentCharge,
  paymentFee,
  paymentFeeRateDenominator,
  paymentFeeRateNumerator,
  paymentTransfers,
} from "./fee.ts"
export {
  type AccountBalances,
  type AssetTotals,
  available,
  checkDoubleEntry,
  type DoubleEntryCheck,
  withinLimits,
} from "./invariants.ts"
export {
  codeMax,
  expiriesPerCommandMax,
  finalRecordCountMax,
  idLengthMax,
  ledgerTimeMsMax,
  pendingTimeoutMsMax,
  transferBatchCountMax,
  userDataLengthMax,
} from "./limits.ts"
export { PersistentMap } from "./persistent-map.ts"
export {
  type AccountState,
  type FinalIds,
  initialState,
  type LedgerState,
  nextExpiryMs,
  type PendingStatus,
  type PendingTransfer,
  type PostTransfer,
  type SinglePhaseTransfer,
  type TransferRecord,
  type VoidTransfer,
} from "./state.ts"
export { isoFromMs, msFromIso } from "./time.ts"
