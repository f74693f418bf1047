/**
 * The ledger writer's transaction hook for on-chain transfers: what must commit with the ledger
 * events of a transfer, or not at all.
 *
 * - A request: the transfer row and the pg-boss job that signs and broadcasts it, with the pending
 *   transfers that reserve its funds, and its stored API response when it carried an
 *   Idempotency-Key (which takes the key for every endpoint). A transfer is never reserved without
 *   its job, nor sent without its reservation.
 * - A settlement's first step of two (the fee's): its outcome is recorded on the row (`settling`),
 *   and every later attempt of the settlement finishes with that outcome.
 * - A settlement: the row becomes `completed` (with the proof) or `failed` (with the reason) and its
 *   `payment.completed` / `payment.failed` webhook event is written, with the post or void that
 *   moved its money. The update only takes a `pending` row, so a settlement recorded twice (two jobs
 *   of one transfer) changes the row and emits its event once.
 */
import type pg from "pg"
import type { PgBoss } from "pg-boss"
import type { AppendedCommand, TransactionHook } from "../ledger/writer.ts"
import { type StoredResponse, storeResponses } from "../platform/idempotency.ts"
import type { EnqueueEvents, OutboxEvent } from "../platform/outbox.ts"
import { sentNothing } from "../ports/event-store.ts"
import { pgBossDb } from "../webhooks/queue.ts"
import { type FailureCode, fromDb, type StoredProof, type TransferRow, toPublicTransfer } from "./model.ts"

/** The pg-boss queue of transfer steps; a job's data names the transfer. */
export const transfer_queue = "chain-transfer"

export interface TransferJob {
  readonly transfer_id: string
  /**
   * Failed steps in a row of the jobs before this one, when a job was handed back to the queue (its
   * chain runs in another process): they count towards `sign_attempts_max` with this job's own.
   */
  readonly prior_attempts?: number
}

/** What a transfer's ledger command carries for the hook (`CommandContext.attachment`). */
export type TransferAttachment =
  | {
      readonly kind: "chain_transfer_requested"
      readonly row: TransferRow
      /** The API response stored under the request's Idempotency-Key, when it had one. */
      readonly stored: StoredResponse | undefined
    }
  | {
      readonly kind: "chain_transfer_settled"
      readonly transfer_id: string
      readonly outcome: SettlementOutcome
    }
  | {
      /**
       * A settlement's first ledger step of several (the fee's post or void): the outcome is
       * recorded on the row (`settling`) with it, so every later attempt finishes the same way.
       */
      readonly kind: "chain_transfer_settling"
      readonly transfer_id: string
      readonly outcome: SettlementOutcome
    }

export type SettlementOutcome =
  | { readonly status: "completed"; readonly proof: StoredProof }
  | { readonly status: "failed"; readonly code: FailureCode; readonly message: string }

const attachmentsOf = (appended: ReadonlyArray<AppendedCommand>) => {
  const requested: Array<TransferRow> = []
  const stored: Array<StoredResponse> = []
  const settled: Array<Extract<TransferAttachment, { kind: "chain_transfer_settled" }>> = []
  const settling: Array<Extract<TransferAttachment, { kind: "chain_transfer_settling" }>> = []
  for (const item of appended) {
    // Other hooks' attachments have other kinds; only ours match below.
    const attachment = item.context.attachment as TransferAttachment | undefined
    if (attachment?.kind === "chain_transfer_requested") {
      requested.push(attachment.row)
      if (attachment.stored !== undefined) stored.push(attachment.stored)
    } else if (attachment?.kind === "chain_transfer_settled") settled.push(attachment)
    else if (attachment?.kind === "chain_transfer_settling") settling.push(attachment)
  }
  return { requested, stored, settled, settling }
}

const insertRows = async (client: pg.PoolClient, rows: ReadonlyArray<TransferRow>) => {
  if (rows.length === 0) return
  await client.query(
    `insert into platform.chain_transfers
       (transfer_id, tenant_id, environment, wallet_id, chain, token, token_decimals, token_contract,
        from_address, key_tenant_index, key_wallet_index, to_address, amount, fee, status,
        idempotency_key, metadata, created_at)
     select r.transfer_id, r.tenant_id, r.environment, r.wallet_id, r.chain, r.token, r.token_decimals,
            r.token_contract, r.from_address, r.key_tenant_index, r.key_wallet_index, r.to_address,
            r.amount::numeric, r.fee::numeric, 'pending', r.idempotency_key, r.metadata, r.created_at
       from jsonb_to_recordset($1::jsonb) as r(transfer_id text, tenant_id text, environment text,
            wallet_id text, chain text, token text, token_decimals integer, token_contract text,
            from_address text, key_tenant_index integer, key_wallet_index integer, to_address text,
            amount text, fee text, idempotency_key text, metadata jsonb, created_at timestamptz)`,
    [JSON.stringify(rows, (_key, value: unknown) => (typeof value === "bigint" ? value.toString() : value))],
  )
}

const settleRows = async (
  client: pg.PoolClient,
  settled: ReadonlyArray<Extract<TransferAttachment, { kind: "chain_transfer_settled" }>>,
): Promise<Array<TransferRow>> => {
  const changed: Array<TransferRow> = []
  for (const { transfer_id, outcome } of settled) {
    const updated =
      outcome.status === "completed"
        ? // A failure claimed on the row before (a restart's) gives way to the outcome recorded first.
          await client.query(
            `update platform.chain_transfers set status = 'completed', proof = $2::jsonb, completed_at = now(),
                    failure_code = null, failure_message = null
              where transfer_id = $1 and status = 'pending' returning *`,
            [transfer_id, JSON.stringify(outcome.proof)],
          )
        : await client.query(
            `update platform.chain_transfers
                set status = 'failed', failure_code = $2, failure_message = $3, failed_at = now()
              where transfer_id = $1 and status = 'pending' returning *`,
            [transfer_id, outcome.code, outcome.message],
          )
    changed.push(...updated.rows.map(fromDb))
  }
  return changed
}

const settledEvent = (row: TransferRow): OutboxEvent => ({
  tenant_id: row.tenant_id,
  environment: row.environment,
  event_type: row.status === "completed" ? "payment.completed" : "payment.failed",
  data: toPublicTransfer(row),
  created_at: row.completed_at ?? row.failed_at ?? row.created_at,
})

/**
 * The hook for transfer attachments. `boss` writes the jobs through the append's connection, so a
 * job exists exactly when its transfer does.
 * @example makeLedgerWriter(store, { transaction: { appendStreams, hook: composeHooks(ledgerHook(enqueue), transferHook({ boss, enqueue })) } })
 */
export const transferHook =
  (deps: { readonly boss: PgBoss; readonly enqueue: EnqueueEvents }): TransactionHook =>
  (client, appended) => {
    const { requested, stored, settled, settling } = attachmentsOf(appended)
    if (requested.length === 0 && stored.length === 0 && settled.length === 0 && settling.length === 0)
      return sentNothing
    return writeTransfers(deps, client, requested, stored, settled, settling)
  }

const writeTransfers = async (
  deps: { readonly boss: PgBoss; readonly enqueue: EnqueueEvents },
  client: pg.PoolClient,
  requested: ReadonlyArray<TransferRow>,
  stored: ReadonlyArray<StoredResponse>,
  settled: ReadonlyArray<Extract<TransferAttachment, { kind: "chain_transfer_settled" }>>,
  settling: ReadonlyArray<Extract<TransferAttachment, { kind: "chain_transfer_settling" }>>,
) => {
  await insertRows(client, requested)
  for (const { transfer_id, outcome } of settling) {
    await client.query(
      `update platform.chain_transfers set settling = $2::jsonb
        where transfer_id = $1 and status = 'pending' and settling is null`,
      [transfer_id, JSON.stringify(outcome)],
    )
  }
  await storeResponses(client, stored)
  if (requested.length > 0) {
    await deps.boss.insert(
      transfer_queue,
      requested.map((row) => ({ data: { transfer_id: row.transfer_id } satisfies TransferJob })),
      { db: pgBossDb(client) },
    )
  }
  const changed = await settleRows(client, settled)
  if (changed.length > 0) await deps.enqueue(client, changed.map(settledEvent))
}
