/**
 * The webhook outbox as the platform's writers see it: rows appended in the caller's transaction.
 * The webhook engine (src/webhooks) owns the table and delivers what is committed.
 */
import type pg from "pg"
import type { Environment } from "../../domain/platform/scopes.ts"
import type { WebhookEventType } from "../../domain/webhooks/events.ts"

export interface OutboxEvent {
  readonly tenant_id: string
  readonly environment: Environment
  readonly event_type: WebhookEventType
  /** A JSON object (a resource's public view). */
  readonly data: object
  readonly created_at: Date
}

/** Appends `rows` in the transaction of `client` (one statement for all of them). */
export type EnqueueEvents = (client: pg.PoolClient, rows: ReadonlyArray<OutboxEvent>) => Promise<unknown>
