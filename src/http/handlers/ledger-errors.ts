/**
 * The one table from ledger and writer errors to API errors. The API validates input before it
 * reaches the ledger, so a ledger refusal other than these is a bug: it becomes a defect (500).
 */
import { Effect } from "effect"
import type { LedgerError } from "../../../domain/ledger/errors.ts"
import type { WriterError } from "../../ledger/writer.ts"
import { ApiError } from "../errors.ts"

const innermost = (error: LedgerError): LedgerError =>
  error._tag === "LinkedTransferFailed" ? error.reason : error

/** The API error for `error`, or undefined when it means a bug. */
export const ledgerApiError = (error: WriterError): ApiError | undefined => {
  if (error._tag === "IdempotencyKeyReused") {
    return new ApiError({
      status: 409,
      type: "idempotency_error",
      code: "idempotency_key_reused",
      message: "This Idempotency-Key was used with a different request.",
      param: "Idempotency-Key",
    })
  }
  if (error._tag === "LedgerOverloaded" || error._tag === "ConcurrencyRetriesExhausted") {
    return new ApiError({
      status: 503,
      code: "ledger_busy",
      message: "The ledger is busy; retry with the same Idempotency-Key.",
      headers: { "retry-after": "1" },
    })
  }
  const cause = innermost(error)
  switch (cause._tag) {
    case "InsufficientFunds":
      return new ApiError({
        status: 422,
        code: "insufficient_funds",
        message: "The paying wallet's available balance does not cover the amount and its fee.",
        param: "amount",
      })
    case "AccountsMustBeDifferent":
      return new ApiError({
        status: 422,
        code: "same_wallet",
        message: "The payer and the recipient are the same wallet.",
        param: "recipient",
      })
    case "BalanceOverflow":
      return new ApiError({
        status: 422,
        code: "balance_overflow",
        message: "The receiving balance would exceed the largest amount the ledger holds.",
        param: "amount",
      })
    default:
      return undefined
  }
}

/** Maps writer failures through `ledgerApiError`; anything unmapped dies. */
export const mapLedgerErrors = <A, R>(
  effect: Effect.Effect<A, WriterError, R>,
): Effect.Effect<A, ApiError, R> =>
  Effect.catch(effect, (error) => {
    const mapped = ledgerApiError(error)
    return mapped === undefined ? Effect.die(error) : Effect.fail(mapped)
  })
