/**
 * Social payments on the ledger.
 *
 * - Recipient linked: one linked group, payer -> recipient `amount` and payer -> fee account `fee`,
 *   posted at once: `completed`.
 * - Recipient not linked yet: payer -> escrow `amount + fee` as a pending (two-phase) transfer that
 *   lapses after the expiry: `pending`. When the identifier is linked, the reservation is posted and
 *   one linked group moves escrow -> recipient `amount` and escrow -> fees `fee`: `completed`. If
 *   it lapses first, the ledger releases it and the payment is `failed` (code `expired`); if the
 *   identifier is linked to the paying wallet itself, the reservation is voided and the payment is
 *   `failed` (code `same_wallet`), without a fee.
 *
 * The payment row, its webhook events and the idempotent response are written by `ledgerHook`
 * inside the ledger append's transaction: they commit with the money or not at all.
 */
import type pg from "pg"
import { ledgerStreamId } from "../../domain/ledger/events.ts"
import type { Environment } from "../../domain/platform/scopes.ts"
import { inTransaction } from "../db/transaction.ts"
import { type AppendedCommand, allInOrder, sentAll, type TransactionHook } from "../ledger/writer.ts"
import { ledgerOf } from "./accounts.ts"
import { type StoredResponse, storeResponses } from "./idempotency.ts"
import type { EnqueueEvents, OutboxEvent } from "./outbox.ts"
import { fromDb, insertPayments, type PaymentRow, toTransaction } from "./transactions.ts"

/** What a ledger command carries for the hook (`CommandContext.attachment`). */
export type LedgerAttachment =
  | {
      readonly kind: "payment"
      readonly payment: PaymentRow
      /**
       * The payer is the tenant's default wallet (the request named none): checked to be the
       * default still when the payment commits, as its payee's link is (`requireParties`).
       */
      readonly payer_is_default: boolean
      /** The response stored for the request's Idempotency-Key, for the payment as recorded. */
      readonly stored: ((payment: PaymentRow) => StoredResponse) | undefined
    }
  | {
      readonly kind: "settlement"
      readonly tenant_id: string
      readonly environment: string
      readonly transaction_id: string
      readonly to_wallet_id: string
      readonly completed_at: string
    }
  | {
      /**
       * A settlement's first step (its reservation posted to escrow): the payee is recorded on the
       * still pending payment, so whatever happens to the identifier's link before the release, the
       * sweeper finishes the settlement into that wallet.
       */
      readonly kind: "settlement_posted"
      readonly tenant_id: string
      readonly environment: string
      readonly transaction_id: string
      readonly to_wallet_id: string
    }
  | {
      /** A reservation voided on purpose: the payment fails with this code, not `expired`. */
      readonly kind: "refusal"
      readonly tenant_id: string
      readonly environment: string
      readonly transaction_id: string
      readonly failure_code: string
      readonly failure_message: string
    }
  | { readonly kind: "response"; readonly stored: StoredResponse }

export const paymentEventType = {
  completed: "payment.completed",
  pending: "payment.pending",
  failed: "payment.failed",
} as const

export const paymentEvent = (row: PaymentRow): OutboxEvent => ({
  tenant_id: row.tenant_id,
  environment: row.environment,
  event_type: paymentEventType[row.status],
  data: toTransaction(row),
  created_at: new Date(row.completed_at ?? row.failed_at ?? row.created_at),
})

/** What a new payment read when it arrived, checked again when it commits. */
interface Parties {
  readonly tenant_id: string
  readonly environment: string
  readonly transaction_id: string
  readonly recipient: string
  readonly to_wallet_id: string | null
  readonly default_payer: string | null
}

interface Collected {
  readonly payments: Array<PaymentRow>
  readonly parties: Array<Parties>
  readonly stored: Array<StoredResponse>
  readonly settlements: Array<Extract<LedgerAttachment, { kind: "settlement" }>>
  readonly posted: Array<Extract<LedgerAttachment, { kind: "settlement_posted" }>>
  readonly refusals: Array<Extract<LedgerAttachment, { kind: "refusal" }>>
  /** Released reservations by ledger: `tenant|environment` -> pending transfer ids. */
  readonly released: Map<string, Array<string>>
}

/**
 * A pending payment with the expiry its reservation got in the ledger: the ledger counts the
 * timeout from its own clock, which concurrent commands can have moved past the request's, so the
 * reservation may lapse a little after the request planned. The payment says when it really lapses.
 */
export const withLedgerExpiry = (
  payment: PaymentRow,
  events: ReadonlyArray<{ readonly event_type: string; readonly data: Readonly<Record<string, unknown>> }>,
): PaymentRow => {
  if (payment.status !== "pending") return payment
  const reserved = events.find(
    (event) =>
      event.event_type === "PendingTransferCreated" && event.data.transfer_id === payment.transaction_id,
  )
  const expires_at = reserved?.data.expires_at
  if (typeof expires_at !== "string" || expires_at === payment.expires_at) return payment
  return { ...payment, expires_at }
}

const collect = (appended: ReadonlyArray<AppendedCommand>): Collected => {
  const collected: Collected = {
    payments: [],
    parties: [],
    stored: [],
    settlements: [],
    posted: [],
    refusals: [],
    released: new Map(),
  }
  for (const item of appended) {
    const attachment = item.context.attachment as LedgerAttachment | undefined
    if (attachment?.kind === "payment") {
      const payment = withLedgerExpiry(attachment.payment, item.events)
      collected.payments.push(payment)
      if (payment.to_wallet_id !== null || attachment.payer_is_default)
        collected.parties.push({
          tenant_id: payment.tenant_id,
          environment: payment.environment,
          transaction_id: payment.transaction_id,
          recipient: payment.recipient,
          to_wallet_id: payment.to_wallet_id,
          default_payer: attachment.payer_is_default ? payment.from_wallet_id : null,
        })
      if (attachment.stored !== undefined) collected.stored.push(attachment.stored(payment))
    } else if (attachment?.kind === "settlement") {
      collected.settlements.push(attachment)
    } else if (attachment?.kind === "settlement_posted") {
      collected.posted.push(attachment)
    } else if (attachment?.kind === "response") {
      collected.stored.push(attachment.stored)
    } else if (attachment?.kind === "refusal") {
      collected.refusals.push(attachment)
    }
    for (const event of item.events) {
      if (event.event_type !== "PendingTransferExpired" && event.event_type !== "PendingTransferVoided")
        continue
      // A refusal's own void is the refusal's (its payment fails with the refusal's code), not a
      // lapse; reservations that lapsed by the same command's time are lapses all the same.
      if (
        attachment?.kind === "refusal" &&
        event.event_type === "PendingTransferVoided" &&
        String(event.data.pending_id) === attachment.transaction_id
      )
        continue
      const key = `${item.ledger.tenant}|${item.ledger.environment}`
      const ids = collected.released.get(key) ?? []
      ids.push(String(event.data.pending_id))
      collected.released.set(key, ids)
    }
  }
  return collected
}

/**
 * Moves the pending payments that `rows` name (tenant, environment, transaction id) with `set`,
 * whose other fields it reads from each row as `columns` declares; answers the rows as they are now.
 * A payment no longer pending is left as it is.
 */
const updatePending = async (
  client: pg.PoolClient,
  rows: ReadonlyArray<object>,
  set: string,
  columns: string,
): Promise<Array<PaymentRow>> => {
  if (rows.length === 0) return []
  const updated = await client.query(
    `update platform.payments p set ${set}
       from jsonb_to_recordset($1::jsonb) as r(tenant_id text, environment text, transaction_id text, ${columns})
      where p.transaction_id = r.transaction_id and p.tenant_id = r.tenant_id
        and p.environment = r.environment and p.status = 'pending'
      returning p.*`,
    [JSON.stringify(rows)],
  )
  return updated.rows.map(fromDb)
}

const completeSettled = (client: pg.PoolClient, settlements: Collected["settlements"]) =>
  updatePending(
    client,
    settlements,
    "status = 'completed', to_wallet_id = r.to_wallet_id, completed_at = r.completed_at",
    "to_wallet_id text, completed_at timestamptz",
  )

/**
 * A settlement's payee is no longer linked to the payment's identifier: the link was removed (an
 * unlink, perhaps a relink to another wallet) after the settlement read it. Thrown by the ledger
 * hook, it rolls the post back, so the payment stays pending, for the wallet linked next.
 */
export class PayeeUnlinked extends Error {
  readonly transaction_ids: ReadonlyArray<string>
  constructor(transaction_ids: ReadonlyArray<string>) {
    super(
      `the recipient's identifier is no longer linked to the settlement's payee (${transaction_ids.join(", ")})`,
    )
    this.name = "PayeeUnlinked"
    this.transaction_ids = transaction_ids
  }
}

/**
 * Throws `PayeeUnlinked` naming the payments among `candidates` whose identifier is no longer
 * linked to the wallet the settlement chose for them. `candidates` is a query over `r`, the
 * attachments' rows (tenant_id, environment, transaction_id, to_wallet_id), answering
 * (tenant_id, environment, transaction_id, recipient, wallet_id). The links that hold are locked
 * (`for share`) until the caller's transaction commits, so an unlink either waits for it or
 * committed before and is seen here.
 */
const refuseUnlinked = async (client: pg.PoolClient, rows: ReadonlyArray<object>, candidates: string) => {
  const unlinked = await client.query<{ transaction_id: string }>(
    `with r as (
       select * from jsonb_to_recordset($1::jsonb)
         as r(tenant_id text, environment text, transaction_id text, to_wallet_id text)
     ), c as (${candidates}
     ), linked as (
       select i.tenant_id, i.environment, i.value, i.wallet_id
         from platform.identities i
         join c on i.tenant_id = c.tenant_id and i.environment = c.environment
          and i.value = c.recipient and i.wallet_id = c.wallet_id
        where i.unlinked_at is null
          for share of i
     )
     select c.transaction_id from c
      where not exists (
        select 1 from linked l
         where l.tenant_id = c.tenant_id and l.environment = c.environment and l.value = c.recipient
           and l.wallet_id = c.wallet_id)`,
    [JSON.stringify(rows)],
  )
  if (unlinked.rows.length > 0) throw new PayeeUnlinked(unlinked.rows.map((row) => row.transaction_id))
}

/**
 * A new payment's parties changed between its reading them and its commit: the recipient's
 * identifier was unlinked from the wallet it was to pay, or the tenant's default wallet, which was
 * to pay, is another now. Thrown by the ledger hook, it rolls the payment back; the request reads
 * its parties again and plans anew.
 */
export class PaymentPartiesChanged extends Error {
  readonly transaction_ids: ReadonlyArray<string>
  constructor(transaction_ids: ReadonlyArray<string>) {
    super(`the payment's payee or default payer changed before it committed (${transaction_ids.join(", ")})`)
    this.name = "PaymentPartiesChanged"
    this.transaction_ids = transaction_ids
  }
}

/** The SQLSTATE `platform.payments_require_parties` raises (migration 308). */
const parties_changed_code = "PP001"

/**
 * Fails the transaction (`PaymentPartiesChanged`) unless each new payment's payee is still linked
 * to its identifier and each payer taken as the default is the default still. An unlink and a
 * change of the default take the ledger's stream lock (`lockLedgerForPartyChange`), which this
 * transaction holds from its append: one answered before is seen here, one after waits for the
 * commit. A statement that raises, so the COMMIT sent with it in the same round trip rolls back.
 */
const requireParties = (client: pg.PoolClient, parties: Collected["parties"]): Promise<unknown> =>
  client
    .query({
      name: "payments_require_parties",
      text: "select platform.payments_require_parties($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])",
      values: [
        parties.map((p) => p.tenant_id),
        parties.map((p) => p.environment),
        parties.map((p) => p.transaction_id),
        parties.map((p) => p.recipient),
        parties.map((p) => p.to_wallet_id),
        parties.map((p) => p.default_payer),
      ],
    })
    .catch((error: unknown) => {
      if (error instanceof Error && "code" in error && error.code === parties_changed_code)
        throw new PaymentPartiesChanged(parties.map((p) => p.transaction_id))
      throw error
    })

/**
 * Takes, until the caller's transaction ends, the ledger's stream lock of `tenant_id` in
 * `environment` (shared: changes do not wait for each other), before an unlink or a change of the
 * default wallet: a payment that read the old parties and has not committed yet then either
 * committed first or sees the change when it does (`requireParties`).
 */
export const lockLedgerForPartyChange = async (
  client: pg.PoolClient,
  tenant_id: string,
  environment: Environment,
): Promise<void> => {
  // Locked as the event store's append locks the stream.
  await client.query("select pg_advisory_xact_lock_shared(hashtextextended($1, 0))", [
    ledgerStreamId(ledgerOf(tenant_id, environment)),
  ])
}

/**
 * Records the payee of payments whose reservation a settlement posted; they stay pending. A payee
 * not recorded before must still be the wallet the identifier is linked to: its link row is locked
 * (`for share`) until the post commits, so an unlink either waits for the post (which then came
 * first) or commits before, and the post is refused (`PayeeUnlinked`) and rolled back.
 */
const recordPayees = async (client: pg.PoolClient, posted: Collected["posted"]) => {
  if (posted.length === 0) return []
  await refuseUnlinked(
    client,
    posted,
    `select r.tenant_id, r.environment, r.transaction_id, p.recipient, r.to_wallet_id as wallet_id
       from r join platform.payments p
         on p.tenant_id = r.tenant_id and p.environment = r.environment and p.transaction_id = r.transaction_id
      where p.status = 'pending' and p.to_wallet_id is null`,
  )
  return await updatePending(client, posted, "to_wallet_id = r.to_wallet_id", "to_wallet_id text")
}

const expired_message =
  "The recipient did not link the identifier before the payment expired; the funds were released."

const failReleased = async (client: pg.PoolClient, released: Collected["released"]) => {
  const failed: Array<PaymentRow> = []
  for (const [key, ids] of released) {
    const [tenant_id, environment] = key.split("|")
    const updated = await client.query(
      `update platform.payments
          set status = 'failed', failure_code = 'expired', failed_at = now(), failure_message = $4
        where tenant_id = $1 and environment = $2 and transaction_id = any($3::text[]) and status = 'pending'
        returning *`,
      [tenant_id, environment, ids, expired_message],
    )
    failed.push(...updated.rows.map(fromDb))
  }
  return failed
}

/** Stranded payments failed per call at most; the rest wait for the next sweep. */
const stranded_batch_count_max = 100

/**
 * Fails as `expired`, with their `payment.failed` events, the payments still pending after their
 * expiry whose reservation the ledger has already released (its transfer voided or expired in the
 * read model), and returns them. `ledgerHook` fails such payments in the release's own transaction,
 * so none should exist; this repairs the ones an earlier version left behind (before ed20f29, a
 * reservation that lapsed in the same command as a `same_wallet` refusal was released but its
 * payment stayed pending) and any gap like it. The read model shows a release only after the
 * transaction that made it committed, and a payment no longer pending is left as it is, so sweeps in
 * several processes fail each payment once.
 */
export const failStrandedPayments = (pool: pg.Pool, enqueue: EnqueueEvents): Promise<Array<PaymentRow>> =>
  inTransaction(pool, async (client) => {
    // The ledger's stream id is ledgerStreamId's `ledger-<tenant>-<environment>`.
    const updated = await client.query(
      `update platform.payments p
          set status = 'failed', failure_code = 'expired', failed_at = now(), failure_message = $2
        where p.status = 'pending' and (p.tenant_id, p.environment, p.transaction_id) in (
          select w.tenant_id, w.environment, w.transaction_id
            from platform.payments w
           where w.status = 'pending' and w.expires_at <= now()
             and exists (
               select 1 from read_model.ledger_transfers t
                where t.stream_id = 'ledger-' || w.tenant_id || '-' || w.environment
                  and t.transfer_id = w.transaction_id and t.status in ('voided', 'expired'))
           limit $1)
        returning p.*`,
      [stranded_batch_count_max, expired_message],
    )
    const failed = updated.rows.map(fromDb)
    if (failed.length > 0) await enqueue(client, failed.map(paymentEvent))
    return failed
  })

/**
 * Fails refused payments. A `same_wallet` refusal (a settlement found the identifier linked to the
 * paying wallet) stands only while that link does: its row is locked (`for share`) until the void
 * commits, as a post's is, so an unlink that committed first (a link to another wallet may follow)
 * makes it `PayeeUnlinked`, rolled back, and the payment waits for the wallet linked next.
 */
const failRefused = async (client: pg.PoolClient, refusals: Collected["refusals"]) => {
  const same_wallet = refusals.filter((refusal) => refusal.failure_code === "same_wallet")
  if (same_wallet.length > 0)
    await refuseUnlinked(
      client,
      same_wallet,
      `select p.tenant_id, p.environment, p.transaction_id, p.recipient, p.from_wallet_id as wallet_id
         from r join platform.payments p
           on p.tenant_id = r.tenant_id and p.environment = r.environment and p.transaction_id = r.transaction_id
        where p.status = 'pending'`,
    )
  return await updatePending(
    client,
    refusals,
    "status = 'failed', failure_code = r.failure_code, failure_message = r.failure_message, failed_at = now()",
    "failure_code text, failure_message text",
  )
}

/**
 * The writer's transaction hook: payment rows, completed settlements, lapsed reservations, their
 * webhook events and stored responses, all in the append's transaction.
 */
export const ledgerHook =
  (enqueue: EnqueueEvents): TransactionHook =>
  (client, appended) => {
    const collected = collect(appended)
    if (
      collected.settlements.length === 0 &&
      collected.posted.length === 0 &&
      collected.released.size === 0 &&
      collected.refusals.length === 0
    ) {
      // New payments and stored responses only: nothing to read first, so all leave at once.
      // The parties' check first: its failure is the cause the callers get.
      return sentAll([
        ...(collected.parties.length > 0 ? [requireParties(client, collected.parties)] : []),
        insertPayments(client, collected.payments),
        storeResponses(client, collected.stored),
        enqueue(client, collected.payments.map(paymentEvent)),
      ])
    }
    return settleAndRecord(enqueue, client, collected)
  }

/** Records new payments and moves pending ones; the events of the moved ones need their rows first. */
const settleAndRecord = async (enqueue: EnqueueEvents, client: pg.PoolClient, collected: Collected) => {
  // Sent together (the append's connection pipelines); PostgreSQL runs them in this order.
  const checked = collected.parties.length > 0 ? [requireParties(client, collected.parties)] : []
  const answers = [
    insertPayments(client, collected.payments),
    storeResponses(client, collected.stored),
    recordPayees(client, collected.posted),
    completeSettled(client, collected.settlements),
    failReleased(client, collected.released),
    failRefused(client, collected.refusals),
    enqueue(client, collected.payments.map(paymentEvent)),
  ] as const
  await allInOrder([...checked, ...answers])
  const [completed, failed, refused] = await Promise.all([answers[3], answers[4], answers[5]])
  const changed = [...completed, ...failed, ...refused].map(paymentEvent)
  if (changed.length > 0) await enqueue(client, changed)
}
