/**
 * Social payments and transactions. See src/platform/payments.ts for how a payment maps onto the
 * ledger; this file validates the request, picks the path (linked recipient or waiting) and turns
 * ledger outcomes into responses. Nothing is written before the request is known to be valid.
 */
import { Effect, Result } from "effect"
import { HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import type { CreateTransfers } from "../../../domain/ledger/commands.ts"
import { paymentFee, paymentTransfers } from "../../../domain/ledger/fee.ts"
import type { Asset } from "../../../domain/money/asset.ts"
import {
  type Identifier,
  type InvalidIdentifier,
  parseRecipient,
} from "../../../domain/platform/identifiers.ts"
import { parseTimestamp } from "../../../domain/platform/timestamp.ts"
import { isWalletChain, type WalletChain, walletChains } from "../../../domain/platform/tokens.ts"
import {
  ensureAccounts,
  escrowAccount,
  escrowAccountId,
  feeAccount,
  feeAccountId,
  ledgerOf,
  transferCodes,
  walletAccount,
  walletAccountId,
} from "../../platform/accounts.ts"
import type { Caller } from "../../platform/credentials.ts"
import { inTransaction, storeResponse } from "../../platform/idempotency.ts"
import { idPrefixes, newId } from "../../platform/ids.ts"
import {
  type LedgerAttachment,
  PaymentPartiesChanged,
  paymentEvent,
  withLedgerExpiry,
} from "../../platform/payments.ts"
import { Platform } from "../../platform/service.ts"
import { settleWaitingPayments } from "../../platform/settlement.ts"
import {
  getPayment,
  insertPayments,
  listPayments,
  type PaymentRow,
  type PaymentStatus,
  toTransaction,
} from "../../platform/transactions.ts"
import type { WalletRow } from "../../platform/wallets.ts"
import { CurrentCaller, PlatformApi } from "../api.ts"
import {
  ApiError,
  badRequest,
  CurrentRequestId,
  conflict,
  errorBody,
  notFound,
  unprocessable,
} from "../errors.ts"
import { type IdempotencyTicket, idempotent, storedResponse } from "../idempotency.ts"
import { amount_whole_units_max, textLengths } from "../limits.ts"
import {
  checkMetadata,
  db,
  listCursor,
  longerThan,
  parseLimit,
  parseMoney,
  respond,
  tokenOn,
} from "./common.ts"
import { ledgerApiError, mapLedgerErrors } from "./ledger-errors.ts"
import { callerWallet } from "./wallets.ts"

interface PayPayload {
  readonly recipient: string
  readonly amount: number | string
  readonly token: string
  readonly note?: string | undefined
  readonly from_wallet?: string | undefined
  readonly metadata?: Readonly<Record<string, string>> | undefined
  /** The chain of the token paid with; the paying wallet's own chain when absent. */
  readonly chain?: string | undefined
}

/** The payer wallet and the recipient's linked wallet (if any), in one (shared) query. */
const resolveParties = (caller: Caller, from_wallet: string | undefined, recipient: Identifier) =>
  Effect.gen(function* () {
    const { parties } = yield* Platform
    const row = yield* db(() =>
      parties({ tenant_id: caller.tenant_id, environment: caller.environment, recipient: recipient.value }),
    )
    const payer_id = from_wallet ?? row.default_wallet_id
    if (payer_id === null) {
      return yield* unprocessable(
        "no_default_wallet",
        "The tenant has no wallet to pay from; create one or pass from_wallet.",
        "from_wallet",
      )
    }
    const payer = yield* callerWallet(caller, payer_id, "from_wallet")
    return { payer, to_wallet_id: row.to_wallet_id }
  })

interface Plan {
  readonly row: PaymentRow
  readonly command: CreateTransfers
}

const planPayment = (
  caller: Caller,
  payer: WalletRow,
  to_wallet_id: string | null,
  asset: Asset,
  amount: bigint,
  recipient: Identifier,
  payload: PayPayload,
  expiry_ms: number,
): Plan => {
  const now_ms = Date.now()
  const transaction_id = newId(idPrefixes.transaction, now_ms)
  const fee = paymentFee(amount)
  const payer_account_id = walletAccountId(payer.wallet_id, asset)
  const row: PaymentRow = {
    transaction_id,
    tenant_id: caller.tenant_id,
    environment: caller.environment,
    type: "social_payment",
    status: to_wallet_id === null ? "pending" : "completed",
    from_wallet_id: payer.wallet_id,
    to_wallet_id,
    recipient: recipient.value,
    recipient_kind: recipient.kind,
    token: asset.symbol,
    chain: asset.chain,
    decimals: asset.decimals,
    amount: amount.toString(),
    fee: fee.toString(),
    note: payload.note ?? null,
    metadata: payload.metadata ?? {},
    failure_code: null,
    failure_message: null,
    created_at: new Date(now_ms).toISOString(),
    expires_at: to_wallet_id === null ? new Date(now_ms + expiry_ms).toISOString() : null,
    completed_at: to_wallet_id === null ? null : new Date(now_ms).toISOString(),
    failed_at: null,
  }
  const command: CreateTransfers =
    to_wallet_id === null
      ? {
          type: "CreateTransfers",
          group_id: null,
          transfers: [
            {
              transfer_id: transaction_id,
              debit_account_id: payer_account_id,
              credit_account_id: escrowAccountId(asset),
              amount: amount + fee,
              code: transferCodes.payment,
              user_data: transaction_id,
              pending: { timeout_ms: expiry_ms },
            },
          ],
          now_ms,
        }
      : paymentTransfers({
          group_id: transaction_id,
          payment_transfer_id: transaction_id,
          fee_transfer_id: `${transaction_id}:fee`,
          payer_account_id,
          payee_account_id: walletAccountId(to_wallet_id, asset),
          fee_account_id: feeAccountId(asset),
          amount,
          code: transferCodes.payment,
          fee_code: transferCodes.fee,
          user_data: transaction_id,
          now_ms,
        })
  return { row, command }
}

/** Records a refused payment as failed, with its payment.failed event and stored response. */
const recordFailed = (row: PaymentRow, error: ApiError, ticket: IdempotencyTicket | undefined) =>
  Effect.gen(function* () {
    const platform = yield* Platform
    const request_id = yield* CurrentRequestId
    const failed: PaymentRow = {
      ...row,
      status: "failed",
      to_wallet_id: row.to_wallet_id,
      expires_at: null,
      completed_at: null,
      failure_code: error.code,
      failure_message: error.message,
      failed_at: new Date().toISOString(),
    }
    yield* db(() =>
      inTransaction(platform.pool, async (client) => {
        await insertPayments(client, [failed])
        await platform.enqueue(client, [paymentEvent(failed)])
        if (ticket !== undefined) {
          await storeResponse(client, storedResponse(ticket, error.status, errorBody(error, request_id)))
        }
      }),
    )
  })

const execute = (caller: Caller, plan: Plan, from_default: boolean, ticket: IdempotencyTicket | undefined) =>
  Effect.gen(function* () {
    const platform = yield* Platform
    const request_id = yield* CurrentRequestId
    const attachment: LedgerAttachment = {
      kind: "payment",
      payment: plan.row,
      payer_is_default: from_default,
      stored:
        ticket === undefined ? undefined : (payment) => storedResponse(ticket, 200, toTransaction(payment)),
    }
    const outcome = yield* Effect.result(
      platform.writer.execute(ledgerOf(caller.tenant_id, caller.environment), plan.command, {
        actor: caller.key_id,
        correlation_id: request_id,
        attachment,
        ...(ticket === undefined
          ? {}
          : { idempotency_key: `api:${ticket.idempotency_key}`, fingerprint: ticket.fingerprint }),
      }),
    )
    if (Result.isFailure(outcome)) {
      const error = ledgerApiError(outcome.failure)
      if (error === undefined) return yield* Effect.die(outcome.failure)
      if (error.code !== "insufficient_funds") return yield* Effect.fail(error)
      // Recorded as a failed payment: the answer names it, as its payment.failed event does.
      const named = new ApiError({
        ...error,
        message: `${error.message} The refused payment is recorded as ${plan.row.transaction_id} (failed).`,
      })
      yield* recordFailed(plan.row, named, ticket)
      return yield* Effect.fail(named)
    }
    // The payment as recorded: a pending one with its reservation's expiry in the ledger.
    if (!outcome.success.replayed)
      return { view: toTransaction(withLedgerExpiry(plan.row, outcome.success.events)), replayed: false }
    // A retry of a payment this process did not see start (another process made it under the same
    // Idempotency-Key, its response not stored yet when this one looked): the recorded payment.
    const original = String(
      outcome.success.events.find((e) => e.event_type.endsWith("Created"))?.data.transfer_id,
    )
    const row = yield* db(() => getPayment(platform.pool, caller.tenant_id, caller.environment, original))
    if (row === undefined) return yield* Effect.die(new Error(`replayed payment ${original} has no record`))
    return { view: toTransaction(row), replayed: true }
  })

/** Recipients recently read (their normal form costs Unicode work): at most this many, then cleared. */
const recipient_memo_max = 4_096
const recipient_memo = new Map<string, Identifier>()

/** `parseRecipient`, remembering what it read; refusals are not remembered. */
const readRecipient = (input: string): Result.Result<Identifier, InvalidIdentifier> => {
  const known = recipient_memo.get(input)
  if (known !== undefined) return Result.succeed(known)
  const parsed = parseRecipient(input)
  if (Result.isSuccess(parsed)) {
    if (recipient_memo.size >= recipient_memo_max) recipient_memo.clear()
    recipient_memo.set(input, parsed.success)
  }
  return parsed
}

const pay = (payload: PayPayload) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const recipient = readRecipient(payload.recipient)
    if (Result.isFailure(recipient)) {
      return yield* badRequest("invalid_recipient", recipient.failure.message, "recipient")
    }
    if (payload.note !== undefined && longerThan(payload.note, textLengths.note.max)) {
      return yield* badRequest("invalid_note", `note is at most ${textLengths.note.max} characters.`, "note")
    }
    yield* checkMetadata(payload.metadata ?? {})
    const chain = payload.chain?.trim().toLowerCase()
    if (chain !== undefined && !isWalletChain(chain)) {
      return yield* badRequest(
        "unsupported_chain",
        `chain must be one of ${walletChains.join(", ")}.`,
        "chain",
      )
    }
    // Everything that depends on the tenant's state (the default wallet, the recipient's link, the
    // payer's chain and so its token and decimals) is read inside `idempotent`: a retry of a payment
    // that took effect is its stored answer, whatever changed since. Accounts open there too: a
    // refused or reused Idempotency-Key must not open them.
    return yield* idempotent(caller, "payments.pay", payload, (ticket) =>
      Effect.gen(function* () {
        for (let attempt = 1; ; attempt++) {
          const answer = yield* payOnce(caller, recipient.success, chain, payload, ticket).pipe(
            // Its payee was unlinked, or the default wallet that was to pay changed, after this
            // attempt read them: nothing was written, and the next attempt reads them again.
            Effect.catchDefect((defect) =>
              defect instanceof PaymentPartiesChanged ? Effect.succeed(undefined) : Effect.die(defect),
            ),
          )
          if (answer !== undefined) return answer
          if (attempt >= parties_changed_attempts_max)
            return yield* conflict(
              "parties_changed",
              `The recipient's link or the default wallet changed ${attempt} times while this payment was being made; nothing was paid. Try again.`,
            )
        }
      }),
    )
  })

/** Attempts at a payment whose parties change before it commits, before it is refused (409). */
const parties_changed_attempts_max = 5

/**
 * One attempt at a payment: reads its parties, plans it and commits it. Dies with
 * `PaymentPartiesChanged` (nothing written) when what it read changed before its commit.
 */
const payOnce = (
  caller: Caller,
  recipient: Identifier,
  chain: WalletChain | undefined,
  payload: PayPayload,
  ticket: IdempotencyTicket | undefined,
) =>
  Effect.gen(function* () {
    const platform = yield* Platform
    const request_id = yield* CurrentRequestId
    const { payer, to_wallet_id } = yield* resolveParties(caller, payload.from_wallet, recipient)
    const asset = yield* tokenOn(chain ?? payer.chain, payload.token)
    const amount = yield* parseMoney(payload.amount, asset, amount_whole_units_max.payment)
    if (to_wallet_id === payer.wallet_id) {
      return yield* unprocessable("same_wallet", "The recipient is linked to the paying wallet.", "recipient")
    }
    const ledger = ledgerOf(caller.tenant_id, caller.environment)
    const plan = planPayment(
      caller,
      payer,
      to_wallet_id,
      asset,
      amount,
      recipient,
      payload,
      platform.settings.pending_payment_expiry_ms,
    )
    // A token of another chain is held only once one arrived by social payment: a wallet
    // without it has nothing to pay with, and no account is opened for it by asking.
    if (asset.chain !== payer.chain) {
      // Caught up first: another process may have paid the wallet this token since this one
      // last read the ledger, and a refusal is recorded.
      yield* mapLedgerErrors(platform.writer.sync(ledger))
      const { state } = yield* platform.writer.snapshot(ledger)
      if (!state.accounts.has(walletAccountId(payer.wallet_id, asset))) {
        const refused = new ApiError({
          status: 422,
          code: "insufficient_funds",
          message: `Wallet ${payer.wallet_id} holds no ${asset.symbol} of ${asset.chain} (a wallet on ${payer.chain} holds another chain's token only once one was paid to it). The refused payment is recorded as ${plan.row.transaction_id} (failed).`,
          param: "chain",
        })
        yield* recordFailed(plan.row, refused, ticket)
        return yield* Effect.fail(refused)
      }
    }
    const accounts =
      to_wallet_id === null
        ? [walletAccount(payer.wallet_id, asset), escrowAccount(asset)]
        : [walletAccount(payer.wallet_id, asset), walletAccount(to_wallet_id, asset), feeAccount(asset)]
    yield* mapLedgerErrors(
      ensureAccounts(platform.writer, ledger, accounts, {
        actor: caller.key_id,
        correlation_id: request_id,
      }),
    )
    const { view, replayed } = yield* execute(caller, plan, payload.from_wallet === undefined, ticket)
    if (view.status === "pending") yield* settleIfLinkedMeanwhile(caller, view.recipient)
    // Answered as a replay, like one of a stored response.
    return replayed
      ? HttpServerResponse.jsonUnsafe(view, { headers: { "idempotent-replayed": "true" } })
      : view
  })

/**
 * A pending payment whose recipient got linked while it was being made (after it found no link,
 * before it committed) was missed by the link's settlement, which had looked before it committed:
 * it waited for the sweeper (5 s). Looked at again after the commit, it is settled at once, in the
 * background: the payment is answered as committed whatever this finds (a second settlement of the
 * same payment is a replay in the ledger; a failure is the sweeper's to retry).
 */
const settleIfLinkedMeanwhile = (caller: Caller, recipient: string) =>
  Effect.gen(function* () {
    const platform = yield* Platform
    const settle = Effect.gen(function* () {
      const { to_wallet_id } = yield* Effect.promise(() =>
        platform.parties({ tenant_id: caller.tenant_id, environment: caller.environment, recipient }),
      )
      if (to_wallet_id === null) return
      yield* settleWaitingPayments(platform.pool, platform.writer, caller, recipient, to_wallet_id)
    }).pipe(
      Effect.catchCause((cause) =>
        Effect.logWarning("settlement after a pending payment failed; the sweeper retries", cause),
      ),
    )
    yield* platform.background(settle)
  })

const statuses: ReadonlyArray<PaymentStatus> = ["pending", "completed", "failed"]

const checkTime = (value: string | undefined, param: string): Effect.Effect<string | undefined, ApiError> => {
  if (value === undefined) return Effect.succeed(undefined)
  const time = parseTimestamp(value)
  return time === undefined
    ? Effect.fail(
        badRequest(
          "invalid_time",
          `${param} must be an RFC 3339 time with its offset (2026-11-24T06:07:03.5Z, 2026-11-24T07:07:03+01:00; at most 6 decimals) or a date (2026-11-24, midnight UTC), of a real day, in years 0001-9999.`,
          param,
        ),
      )
    : Effect.succeed(time)
}

const list = (query: {
  readonly limit?: string | undefined
  readonly starting_after?: string | undefined
  readonly wallet_id?: string | undefined
  readonly status?: string | undefined
  readonly created_gte?: string | undefined
  readonly created_lt?: string | undefined
}) =>
  Effect.gen(function* () {
    const caller = yield* CurrentCaller
    const { pool } = yield* Platform
    const limit = yield* parseLimit(query.limit)
    if (query.status !== undefined && !(statuses as ReadonlyArray<string>).includes(query.status)) {
      return yield* badRequest("invalid_status", `status must be one of ${statuses.join(", ")}.`, "status")
    }
    if (query.wallet_id !== undefined) yield* callerWallet(caller, query.wallet_id)
    const created_gte = yield* checkTime(query.created_gte, "created_gte")
    const created_lt = yield* checkTime(query.created_lt, "created_lt")
    const starting_after = yield* listCursor(pool, "transactions", caller, query.starting_after)
    return yield* db(() =>
      listPayments(pool, caller.tenant_id, caller.environment, {
        wallet_id: query.wallet_id,
        status: query.status as PaymentStatus | undefined,
        created_gte,
        created_lt,
        starting_after,
        limit,
      }),
    )
  })

export const PaymentsHandlers = HttpApiBuilder.group(PlatformApi, "payments", (handlers) =>
  Effect.succeed(
    handlers
      .handle("pay", ({ payload }) => respond(pay(payload)))
      .handle("get", ({ params }) =>
        respond(
          Effect.gen(function* () {
            const caller = yield* CurrentCaller
            const { pool } = yield* Platform
            const row = yield* db(() =>
              getPayment(pool, caller.tenant_id, caller.environment, params.transaction_id),
            )
            if (row !== undefined) return toTransaction(row)
            // An on-chain transfer's id is a transaction id too (its webhooks carry it): say where it is.
            const transfer = yield* db(() =>
              pool.query(
                "select 1 from platform.chain_transfers where transfer_id = $1 and tenant_id = $2 and environment = $3",
                [params.transaction_id, caller.tenant_id, caller.environment],
              ),
            )
            const missing = notFound("transaction", params.transaction_id, "transaction_id")
            if (transfer.rows.length === 0) return yield* missing
            return yield* new ApiError({
              ...missing,
              message: `${params.transaction_id} is an on-chain transfer, not a social payment: GET /api/v2/transfers/${params.transaction_id} shows it.`,
            })
          }),
        ),
      )
      .handle("list", ({ query }) => respond(list(query))),
  ),
)
