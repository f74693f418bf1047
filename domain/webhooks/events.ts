/**
 * The events the platform announces to tenants by webhook, and the JSON body every delivery carries.
 * Event types are past tense facts (`payment.completed`), named `<resource>.<what happened>`. A
 * published type and its `data` shape are never edited; a change is a new event type.
 */

export const webhookEventTypes = [
  "payment.completed",
  "payment.failed",
  "payment.pending",
  "wallet.created",
  "identity.linked",
  "deposit.confirmed",
] as const
export type WebhookEventType = (typeof webhookEventTypes)[number]

/**
 * Narrows a string to an event type, e.g. when decoding a subscription list.
 * @example isWebhookEventType("payment.completed") // true
 * @example isWebhookEventType("payment.done") // false
 */
export function isWebhookEventType(value: string): value is WebhookEventType {
  return (webhookEventTypes as ReadonlyArray<string>).includes(value)
}

/** A JSON value, as stored in the outbox (`jsonb`) and sent in a body. */
export type JsonValue = string | number | boolean | null | ReadonlyArray<JsonValue> | JsonObject
export interface JsonObject {
  readonly [key: string]: JsonValue
}

/**
 * The body of every webhook request. The receiver verifies the signature over the exact bytes of
 * the body, then parses it; `id` is the event's id (`evt_...`), the same on every delivery and
 * attempt of one event, so a receiver deduplicates by it.
 */
export interface WebhookEventBody {
  readonly id: string
  readonly event_type: WebhookEventType
  /** When the change happened: ISO 8601 in UTC with milliseconds. */
  readonly created_at: string
  readonly data: JsonObject
}

/**
 * Serialises a body with its fields in a fixed order. The signature covers these exact bytes, so
 * the sender serialises once per attempt and signs and sends the same string.
 * @example
 * serializeEventBody({ id: "evt_1", event_type: "wallet.created", created_at: "2025-01-01T00:00:00.000Z", data: {} })
 * // '{"id":"evt_1","event_type":"wallet.created","created_at":"2025-01-01T00:00:00.000Z","data":{}}'
 */
export function serializeEventBody(body: WebhookEventBody): string {
  return JSON.stringify({
    id: body.id,
    event_type: body.event_type,
    created_at: body.created_at,
    data: body.data,
  })
}
