/**
 * Test events for the sandbox: a realistic sample `data` for each event type, enqueued like a real
 * event (so it is signed, delivered, retried and logged the same way). Samples carry
 * `simulated: true` so a receiver can tell them apart.
 */
import { assertNever } from "../../domain/assert.ts"
import type { JsonObject, WebhookEventType } from "../../domain/webhooks/events.ts"
import { uuidv7 } from "../ids.ts"
import { type Db, enqueueEvents, getWebhook, type TenantScope } from "./store.ts"

const sampleId = (prefix: string): string => `${prefix}_${uuidv7().replaceAll("-", "")}`

const pending_sample_expiry_ms = 7 * 24 * 3_600_000

/** A sample transaction, shaped exactly like the `data` of a real payment event (the Transaction view). */
const samplePayment = (status: "completed" | "failed" | "pending", created_at: Date): JsonObject => {
  const at = created_at.toISOString()
  return {
    transaction_id: sampleId("txn"),
    type: "social_payment",
    status,
    amount: "25.00",
    fee: "0.075",
    token: "USDC",
    chain: "ethereum",
    recipient: "ana@example.com",
    from_wallet: sampleId("wal"),
    to_wallet: status === "pending" ? null : sampleId("wal"),
    note: null,
    metadata: { order_id: "order_1042" },
    failure:
      status === "failed"
        ? {
            code: "insufficient_funds",
            message: "The paying wallet's available balance does not cover the amount and its fee.",
          }
        : null,
    created_at: at,
    expires_at:
      status === "pending" ? new Date(created_at.getTime() + pending_sample_expiry_ms).toISOString() : null,
    completed_at: status === "completed" ? at : null,
    failed_at: status === "failed" ? at : null,
    simulated: true,
  }
}

/**
 * A sample `data` for `event_type`, with the fields of the real event's `data` (the Transaction,
 * Wallet, Identity or Deposit view) plus `simulated: true`.
 * @example sampleEventData("payment.completed", new Date()).metadata // { order_id: "order_1042" }
 */
export function sampleEventData(event_type: WebhookEventType, created_at: Date): JsonObject {
  switch (event_type) {
    case "payment.completed":
      return samplePayment("completed", created_at)
    case "payment.failed":
      return samplePayment("failed", created_at)
    case "payment.pending":
      return samplePayment("pending", created_at)
    case "wallet.created":
      return {
        wallet_id: sampleId("wal"),
        address: "0x52908400098527886E0F7030069857D2E4169EE7",
        chain: "ethereum",
        external_id: "user_1042",
        label: "Sample wallet",
        is_default: false,
        created_at: created_at.toISOString(),
        simulated: true,
      }
    case "identity.linked":
      return {
        identity_id: sampleId("idn"),
        wallet_id: sampleId("wal"),
        kind: "phone",
        value: "+14155550100",
        status: "linked",
        linked_at: created_at.toISOString(),
        unlinked_at: null,
        simulated: true,
      }
    case "deposit.confirmed":
      return {
        deposit_id: sampleId("dep"),
        wallet_id: sampleId("wal"),
        chain: "ethereum",
        token: "USDC",
        amount: "250.00",
        from_address: "0x28C6c06298d514Db089934071355E5743bf21d60",
        to_address: "0x52908400098527886E0F7030069857D2E4169EE7",
        tx_hash: "0x5c504ed432cb51138bcf09aa5e8a410dd4a1e204ef84bfed1be16dfba1b22060",
        log_index: 41,
        block_number: "21480375",
        block_hash: "0x9b83c12c69edb74f6c8dd5d052765c1adf940e320bd1291696e6fa07829eee71",
        confirmations: 64,
        credited_at: created_at.toISOString(),
        simulated: true,
      }
    default:
      return assertNever(event_type)
  }
}

/**
 * Enqueues a sample event of `event_type` for the tenant: to every endpoint subscribed to it, or,
 * with `webhook_id`, to that one endpoint only (whatever its subscriptions and even while
 * disabled: the tenant asked for it). Returns the event id; undefined when `webhook_id` names no
 * endpoint of the tenant.
 * @example const sent = await simulateEvent(pool, scope, { event_type: "payment.completed", webhook_id })
 */
export async function simulateEvent(
  db: Db,
  scope: TenantScope,
  request: { readonly event_type: WebhookEventType; readonly webhook_id?: string },
  now: Date = new Date(),
): Promise<{ readonly event_id: string } | undefined> {
  if (request.webhook_id !== undefined && (await getWebhook(db, scope, request.webhook_id)) === undefined) {
    return undefined
  }
  const [event_id] = await enqueueEvents(db, [
    {
      ...scope,
      event_type: request.event_type,
      data: sampleEventData(request.event_type, now),
      created_at: now,
      ...(request.webhook_id === undefined ? {} : { target_webhook_id: request.webhook_id }),
    },
  ])
  return event_id === undefined ? undefined : { event_id }
}
