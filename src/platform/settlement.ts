/**
 * Completes payments that waited for their recipient: once the identifier is linked, the
 * reservation (payer -> escrow, amount + fee) is posted, then one linked group moves escrow ->
 * recipient `amount` and escrow -> fees `fee`. Each step carries an idempotency key derived from
 * the payment, so a step repeated after a crash or by a second process replays instead of moving
 * money twice; the sweeper below finishes whatever a crash interrupted. A payment whose identifier
 * was linked to its own paying wallet is not a payment: its reservation is voided and it fails with
 * `same_wallet`, as a direct payment to that wallet is refused.
 */
import { Effect, Result } from "effect"
import type pg from "pg"
import type { LedgerError } from "../../domain/ledger/errors.ts"
import type { Environment } from "../../domain/platform/scopes.ts"
import { type TokenSymbol, tokenAsset, type WalletChain } from "../../domain/platform/tokens.ts"
import { commandFingerprint, type LedgerWriterService } from "../ledger/writer.ts"
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
} from "./accounts.ts"
import { type LedgerAttachment, PayeeUnlinked } from "./payments.ts"

/** Waiting payments read per query; a link settles them all, page after page. */
const settle_batch_count_max = 100
/** Payments settled at once: their ledger commands share the writer's group commits. */
const settle_concurrency = 16

interface Waiting {
  readonly transaction_id: string
  readonly from_wallet_id: string
  readonly token: TokenSymbol
  readonly chain: WalletChain
  readonly amount: string
  readonly fee: string
  /** The payee a settlement recorded when it posted the reservation; null before. */
  readonly to_wallet_id: string | null
}

/** A reservation that lapsed or was released already: its payment has failed, nothing to settle. */
const alreadyReleased = (error: { readonly _tag: string }) =>
  error._tag === "PendingTransferAlreadyExpired" ||
  error._tag === "PendingTransferAlreadyVoided" ||
  error._tag === "PendingTransferNotFound"

/**
 * A settlement's first step: the reservation posted to escrow, the payee recorded on the payment in
 * the same transaction (see `settlement_posted`). The payee is part of the step's idempotency
 * fingerprint: a retry for the same payee replays, but a settlement that chose its payee on a stale
 * read (the identifier has since moved to another wallet, and another settlement posted to that one)
 * is refused with `IdempotencyKeyReused` instead of replaying the other's post as its own.
 */
/** A settlement's post of the payment's reservation, and the key it is sent under. */
const settlementPost = (txn: string) => ({
  command: {
    type: "PostPendingTransfer" as const,
    transfer_id: `${txn}:post`,
    pending_id: txn,
    now_ms: Date.now(),
  },
  context: { actor: "settlement", correlation_id: txn, idempotency_key: `settle:${txn}:post` },
})

export const postSettlement = (
  writer: LedgerWriterService,
  scope: { readonly tenant_id: string; readonly environment: Environment },
  payment: { readonly transaction_id: string },
  to_wallet_id: string,
) => {
  const txn = payment.transaction_id
  const attachment: LedgerAttachment = {
    kind: "settlement_posted",
    tenant_id: scope.tenant_id,
    environment: scope.environment,
    transaction_id: txn,
    to_wallet_id,
  }
  const { command, context } = settlementPost(txn)
  return writer.execute(ledgerOf(scope.tenant_id, scope.environment), command, {
    ...context,
    fingerprint: `${commandFingerprint(command)}:payee=${to_wallet_id}`,
    attachment,
  })
}

/**
 * True when the payment's post was made by a version that recorded no payee (before 2026-11-28):
 * its plain command, without the payee in its fingerprint, replays.
 */
const isPayeelessPost = (
  writer: LedgerWriterService,
  scope: { readonly tenant_id: string; readonly environment: Environment },
  txn: string,
) => {
  const { command, context } = settlementPost(txn)
  return writer.execute(ledgerOf(scope.tenant_id, scope.environment), command, context).pipe(
    Effect.map((done) => done.replayed),
    Effect.orElseSucceed(() => false),
  )
}

/**
 * Settles one payment: "unlinked" when the payee was not recorded yet and the identifier is no
 * longer linked to it by the time the post commits (nothing moved; the payment waits).
 */
const settleOne = (
  writer: LedgerWriterService,
  scope: { readonly tenant_id: string; readonly environment: Environment },
  payment: Waiting,
  /** The payee: the one a settlement recorded when it posted, else the identifier's link now. */
  to_wallet_id: string,
) =>
  Effect.gen(function* () {
    const ledger = ledgerOf(scope.tenant_id, scope.environment)
    const asset = tokenAsset(payment.chain, payment.token)
    const txn = payment.transaction_id
    const context = { actor: "settlement", correlation_id: txn }
    if (payment.from_wallet_id === to_wallet_id) {
      // The identifier went to the paying wallet: a direct payment would be refused (same_wallet),
      // so this one is too. The reservation is released whole; no fee is taken.
      const refusal: LedgerAttachment = {
        kind: "refusal",
        tenant_id: scope.tenant_id,
        environment: scope.environment,
        transaction_id: txn,
        failure_code: "same_wallet",
        failure_message:
          "The recipient's identifier was linked to the paying wallet, and a wallet cannot pay itself; the reserved funds were released and no fee was taken.",
      }
      const voided = yield* Effect.result(
        writer
          .execute(
            ledger,
            { type: "VoidPendingTransfer", transfer_id: `${txn}:void`, pending_id: txn, now_ms: Date.now() },
            { ...context, idempotency_key: `settle:${txn}:void`, attachment: refusal },
          )
          .pipe(
            Effect.map(() => "voided" as const),
            // The identifier left the paying wallet before the void committed: the payment waits.
            Effect.catchDefect((defect) =>
              defect instanceof PayeeUnlinked ? Effect.succeed("unlinked" as const) : Effect.die(defect),
            ),
          ),
      )
      if (voided._tag === "Failure" && !alreadyReleased(voided.failure))
        return yield* Effect.fail(voided.failure)
      if (voided._tag === "Success" && voided.success === "unlinked") return "unlinked" as const
      return "settled" as const
    }
    yield* ensureAccounts(
      writer,
      ledger,
      [walletAccount(to_wallet_id, asset), feeAccount(asset), escrowAccount(asset)],
      context,
    )
    const posted = yield* Effect.result(
      postSettlement(writer, scope, payment, to_wallet_id).pipe(
        Effect.map(() => "posted" as const),
        Effect.catchDefect((defect) =>
          defect instanceof PayeeUnlinked ? Effect.succeed("unlinked" as const) : Effect.die(defect),
        ),
      ),
    )
    if (posted._tag === "Failure") {
      if (alreadyReleased(posted.failure)) return "settled" as const
      if (posted.failure._tag !== "IdempotencyKeyReused") return yield* Effect.fail(posted.failure)
      // Another settlement posted it to the payee it recorded (this one read an older link): that
      // payee gets the money, by that settlement or by the sweeper; nothing is done here. Unless
      // this is that payee: a post recorded before the payee was part of the fingerprint. Or the
      // post is a version's that recorded no payee (before 2026-11-28): its release goes to the
      // wallet linked now, as that version's would have gone to the one linked then.
      const payeeless = payment.to_wallet_id === null && (yield* isPayeelessPost(writer, scope, txn))
      if (!payeeless && payment.to_wallet_id !== to_wallet_id) return "taken" as const
    } else if (posted.success === "unlinked") {
      // The identifier was unlinked from this payee before the post: nothing moved, the payment waits.
      return "unlinked" as const
    }
    const amount = BigInt(payment.amount)
    const fee = BigInt(payment.fee)
    const attachment: LedgerAttachment = {
      kind: "settlement",
      tenant_id: scope.tenant_id,
      environment: scope.environment,
      transaction_id: txn,
      to_wallet_id,
      completed_at: new Date().toISOString(),
    }
    const release = (transfer_id: string, credit_account_id: string, value: bigint, code: number) => ({
      transfer_id,
      debit_account_id: escrowAccountId(asset),
      credit_account_id,
      amount: value,
      code,
      user_data: txn,
    })
    yield* writer.execute(
      ledger,
      {
        type: "CreateTransfers",
        group_id: `${txn}:release`,
        transfers: [
          release(`${txn}:release`, walletAccountId(to_wallet_id, asset), amount, transferCodes.release),
          ...(fee > 0n ? [release(`${txn}:release-fee`, feeAccountId(asset), fee, transferCodes.fee)] : []),
        ],
        now_ms: Date.now(),
      },
      { ...context, idempotency_key: `settle:${txn}:release`, attachment },
    )
    return "settled" as const
  })

/**
 * Settles every payment waiting for `recipient` (a normalised identifier): into the payee a
 * settlement recorded when it posted, else into `linked_wallet_id`, the wallet the identifier is
 * linked to now (null when it is linked to none: only recorded payees are settled then). In pages
 * of `settle_batch_count_max` by transaction id (a payment that stays pending, say after a failure
 * the sweeper will retry, is not read twice). Returns how many it settled or found released.
 */
export const settleWaitingPayments = (
  pool: pg.Pool,
  writer: LedgerWriterService,
  scope: { readonly tenant_id: string; readonly environment: Environment },
  recipient: string,
  linked_wallet_id: string | null,
): Effect.Effect<number, LedgerError | { readonly _tag: string }> =>
  Effect.gen(function* () {
    let settled = 0
    let after = ""
    let linked = linked_wallet_id
    for (;;) {
      // The link is read again for every page: once it is gone (or moved to another wallet), only
      // payees already recorded are settled. A post still racing the unlink is refused by the
      // ledger hook (`PayeeUnlinked`), which stops the rest too.
      const still = linked
      if (still !== null) linked = yield* Effect.promise(() => linkedWallet(pool, scope, recipient, still))
      const waiting = yield* Effect.promise(() =>
        pool.query<Waiting>(
          `select transaction_id, from_wallet_id, token, chain, amount::text as amount, fee::text as fee,
                  to_wallet_id
             from platform.payments
            where tenant_id = $1 and environment = $2 and recipient = $3 and status = 'pending'
              and transaction_id > $4 and (to_wallet_id is not null or $6::text is not null)
            order by transaction_id limit $5`,
          [scope.tenant_id, scope.environment, recipient, after, settle_batch_count_max, linked],
        ),
      )
      let unlinked = false
      // Each payment on its own: one that fails (left to the sweeper) does not hold up the others.
      const outcomes = yield* Effect.forEach(
        waiting.rows,
        (payment) =>
          Effect.suspend(() => {
            const to_wallet_id = payment.to_wallet_id ?? (unlinked ? null : linked)
            if (to_wallet_id === null) return Effect.succeed(Result.succeed("unlinked" as const))
            return Effect.result(
              settleOne(writer, scope, payment, to_wallet_id).pipe(
                Effect.tap((outcome) =>
                  Effect.sync(() => {
                    if (outcome === "unlinked") unlinked = true
                  }),
                ),
              ),
            )
          }),
        { concurrency: settle_concurrency },
      )
      const failure = outcomes.find(Result.isFailure)
      if (failure !== undefined) return yield* Effect.fail(failure.failure)
      settled += outcomes.filter(
        (outcome) => Result.isSuccess(outcome) && outcome.success === "settled",
      ).length
      if (unlinked) linked = null
      const last = waiting.rows.at(-1)
      if (last === undefined || waiting.rows.length < settle_batch_count_max) return settled
      after = last.transaction_id
    }
  })

/** `wallet_id` when `recipient` is still linked to it, else null. */
const linkedWallet = async (
  pool: pg.Pool,
  scope: { readonly tenant_id: string; readonly environment: Environment },
  recipient: string,
  wallet_id: string,
): Promise<string | null> => {
  const found = await pool.query(
    `select 1 from platform.identities
      where tenant_id = $1 and environment = $2 and value = $3 and wallet_id = $4 and unlinked_at is null`,
    [scope.tenant_id, scope.environment, recipient, wallet_id],
  )
  return found.rowCount === 1 ? wallet_id : null
}

/**
 * Pending payments to settle, left behind by a crash or a race with a link: those whose recipient
 * is linked, and those a settlement posted already (their recorded payee), linked or not.
 */
export const findSettleable = async (pool: pg.Pool) =>
  (
    await pool.query<{
      tenant_id: string
      environment: Environment
      recipient: string
      /** The wallet the recipient is linked to now; null when none (recorded payees only). */
      wallet_id: string | null
    }>(
      // In random order: recipients whose settlement fails every time cannot keep the rest out.
      `select tenant_id, environment, recipient, wallet_id from (
         select distinct p.tenant_id, p.environment, p.recipient, i.wallet_id
           from platform.payments p
           left join platform.identities i
             on i.tenant_id = p.tenant_id and i.environment = p.environment and i.value = p.recipient
            and i.unlinked_at is null
          where p.status = 'pending' and (p.to_wallet_id is not null or i.wallet_id is not null)) settleable
        order by random() limit $1`,
      [settle_batch_count_max],
    )
  ).rows
