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

const samplePayment = (status: "completed" | "failed" | "pending", created_at: Date): JsonObject => ({
  payment_id: sampleId("pay"),
  status,
  amount: "25.00",
  fee: "0.075",
  asset: "USDC@ethereum",
  from_wallet_id: sampleId("wal"),
  recipient: { type: "email", value: "ana@example.com" },
  metadata: { order_id: "order_1042" },
  ...(status === "failed" ? { failure_code: "insufficient_funds" } : {}),
  ...(status === "completed" ? { completed_at: created_at.toISOString() } : {}),
  simulated: true,
})

/**
 * A sample `data` for `event_type`.
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
        chain: "ethereum",
        address: "0x52908400098527886E0F7030069857D2E4169EE7",
        simulated: true,
      }
    case "identity.linked":
      return {
        identity: { type: "phone", value: "+14155550100" },
        wallet_id: sampleId("wal"),
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
