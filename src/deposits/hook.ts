/**
 * The ledger writer's transaction hook for deposits: a deposit's row becomes `credited` and its
 * `deposit.confirmed` webhook event is written in the transaction that appends its ledger credit, so
 * the three commit together or not at all. The update takes only a `seen` row still at the block the
 * watcher judged final; anything else means the watcher and the rows disagree, and the hook throws
 * so that the credit is not written either.
 */
import type pg from "pg"
import { assert } from "../../domain/assert.ts"
import type { AppendedCommand, TransactionHook } from "../ledger/writer.ts"
import type { EnqueueEvents, OutboxEvent } from "../platform/outbox.ts"
import { sentNothing } from "../ports/event-store.ts"
import { type DepositRow, fromDb, toDepositEvent } from "./model.ts"

/** What a deposit's ledger command carries for the hook (`CommandContext.attachment`). */
export interface DepositAttachment {
  readonly kind: "chain_deposit_credited"
  readonly deposit_id: string
  /** The block the transaction is final in; the row must still record it. */
  readonly block_hash: string
  readonly confirmations: number
}

const attachmentsOf = (appended: ReadonlyArray<AppendedCommand>): Array<DepositAttachment> => {
  const credited: Array<DepositAttachment> = []
  for (const item of appended) {
    // Other hooks' attachments have other kinds; only ours match below.
    const attachment = item.context.attachment as DepositAttachment | undefined
    if (attachment?.kind === "chain_deposit_credited") credited.push(attachment)
  }
  return credited
}

const creditRow = async (client: pg.PoolClient, credited: DepositAttachment): Promise<DepositRow> => {
  const updated = await client.query(
    `update platform.chain_deposits set status = 'credited', credited_at = now(), confirmations = $3
      where deposit_id = $1 and status = 'seen' and block_hash = $2 returning *`,
    [credited.deposit_id, credited.block_hash, credited.confirmations],
  )
  const row = updated.rows[0]
  assert(row !== undefined, `deposit ${credited.deposit_id} is seen at the block it is credited for`)
  return fromDb(row)
}

export const depositEvent = (row: DepositRow): OutboxEvent => ({
  tenant_id: row.tenant_id,
  environment: row.environment,
  event_type: "deposit.confirmed",
  data: toDepositEvent(row),
  created_at: row.credited_at ?? row.seen_at,
})

/**
 * The hook for deposit attachments.
 * @example composeHooks(ledgerHook(enqueue), transferHook({ boss, enqueue }), depositHook({ enqueue }))
 */
export const depositHook =
  (deps: { readonly enqueue: EnqueueEvents }): TransactionHook =>
  (client, appended) => {
    const credited = attachmentsOf(appended)
    if (credited.length === 0) return sentNothing
    return (async () => {
      const rows: Array<DepositRow> = []
      for (const attachment of credited) rows.push(await creditRow(client, attachment))
      await deps.enqueue(client, rows.map(depositEvent))
    })()
  }
