/**
 * The webhook tables as a tenant sees them: endpoints, the outbox, deliveries and their attempts.
 *
 * Every function is scoped to one tenant and environment: both are in every WHERE clause, so another
 * tenant's id is simply not found (`undefined`), never an error that would confirm it exists. Lists
 * are newest first and paged by id (`starting_after` = the last id of the previous page).
 *
 * Signing secrets are stored sealed (secrets.ts): records here carry only their last four
 * characters; the delivery worker opens them to sign. A secret the platform generates is returned
 * once, by `createWebhook`.
 */
import type pg from "pg"
import type { PgBoss } from "pg-boss"
import { assert } from "../../domain/assert.ts"
import type { Environment } from "../../domain/platform/scopes.ts"
import { isWebhookEventType, type JsonObject, type WebhookEventType } from "../../domain/webhooks/events.ts"
import { type Page, toPage } from "../db/page.ts"
import { inTransaction } from "../db/transaction.ts"
import { checkWebhookUrl } from "./endpoint-url.ts"
import { eventId, generateWebhookSecret, webhookId } from "./ids.ts"
import { deliveryGroup, sendDeliveryJobs } from "./queue.ts"
import { secretLast4, type WebhookSecretBox } from "./secrets.ts"

export type Db = pg.Pool | pg.PoolClient
export type { Page }

export { inTransaction }

export interface TenantScope {
  readonly tenant_id: string
  readonly environment: Environment
}

export interface Webhook {
  readonly webhook_id: string
  readonly tenant_id: string
  readonly environment: Environment
  readonly url: string
  readonly events: ReadonlyArray<WebhookEventType>
  /** The signing secret's last four characters (the secret itself is stored sealed). */
  readonly secret_last4: string
  /** While the secret before the last rotation still signs, beside the current one: until then. */
  readonly previous_secret_expires_at: Date | null
  readonly description: string | null
  readonly enabled: boolean
  readonly created_at: Date
  readonly updated_at: Date
}

export interface Pagination {
  /** 1..100; default 10. */
  readonly limit?: number
  readonly starting_after?: string
}

/** How long a replaced secret keeps signing deliveries, so receivers can switch without a gap. */
export const previous_secret_lifetime_s = 24 * 60 * 60
export const page_limit_max = 100
const page_limit_default = 10

const webhook_columns = `webhook_id, tenant_id, environment, url, events, secret_last4,
  previous_secret_expires_at, description, enabled, created_at, updated_at`

interface WebhookRow extends Omit<Webhook, "events" | "environment"> {
  readonly events: string[]
  readonly environment: string
}

const toWebhook = (row: WebhookRow): Webhook => {
  const { events, environment } = row
  assert(events.every(isWebhookEventType), "a stored webhook subscribes to known event types")
  assert(environment === "sandbox" || environment === "production", "a stored environment is known")
  return { ...row, events, environment }
}

const pageLimit = (pagination: Pagination): number => {
  const limit = pagination.limit ?? page_limit_default
  assert(Number.isInteger(limit) && limit >= 1 && limit <= page_limit_max, "a page limit is 1..100")
  return limit
}

/** The store keeps only URLs `checkWebhookUrl` accepted, as it wrote them. */
const assertCheckedUrl = (url: string, environment: Environment): void => {
  const check = checkWebhookUrl(url, environment)
  assert(check.ok && check.url === url, "a webhook URL is checked and normalised with checkWebhookUrl first")
}

const assertEvents = (events: ReadonlyArray<WebhookEventType>): string[] => {
  assert(events.length >= 1 && events.every(isWebhookEventType), "a webhook subscribes to known event types")
  return [...new Set(events)]
}

export interface CreateWebhookInput {
  /** As `checkWebhookUrl` gave it for the scope's environment. */
  readonly url: string
  readonly events: ReadonlyArray<WebhookEventType>
  readonly description?: string | null
  /** Default true. */
  readonly enabled?: boolean
  /** Default: a new random `whsec_...` secret. */
  readonly secret?: string
}

/** Endpoints a tenant may have in one environment (deleted ones not counted). */
export const webhook_endpoints_max = 16

/** The tenant already has `webhook_endpoints_max` endpoints in the environment. */
export class WebhookEndpointsLimit extends Error {
  readonly endpoints_max: number
  constructor(endpoints_max: number) {
    super(`a tenant has at most ${endpoints_max} webhook endpoints in an environment`)
    this.name = "WebhookEndpointsLimit"
    this.endpoints_max = endpoints_max
  }
}

/**
 * Creates an endpoint, its secret sealed with `box`; returns it with its secret (which matters when
 * the platform generated it: nothing shows it again). Throws `WebhookEndpointsLimit` when the tenant
 * has `webhook_endpoints_max` endpoints in the environment already (counted under a lock, so
 * creations at once never pass it); every event is then delivered to a bounded number of endpoints.
 * @example
 * const webhook = await createWebhook(pool, { tenant_id: "ten_1", environment: "sandbox" }, {
 *   url: "https://example.com/hooks", events: ["payment.completed"],
 * }, box)
 */
export async function createWebhook(
  db: Db,
  scope: TenantScope,
  input: CreateWebhookInput,
  box: WebhookSecretBox,
): Promise<Webhook & { readonly secret: string }> {
  assertCheckedUrl(input.url, scope.environment)
  assert(input.secret === undefined || input.secret !== "", "a signing secret is not empty")
  const webhook_id = webhookId()
  const secret = input.secret ?? generateWebhookSecret()
  return await inTransaction(db, async (client) => {
    await client.query("select pg_advisory_xact_lock(hashtextextended($1, 0))", [
      `platform.webhooks:${scope.tenant_id}:${scope.environment}`,
    ])
    const counted = await client.query<{ endpoints: number }>(
      `select count(*)::int as endpoints from platform.webhooks
        where tenant_id = $1 and environment = $2 and deleted_at is null`,
      [scope.tenant_id, scope.environment],
    )
    if ((counted.rows[0]?.endpoints ?? 0) >= webhook_endpoints_max) {
      throw new WebhookEndpointsLimit(webhook_endpoints_max)
    }
    return await insertWebhook(client, scope, input, webhook_id, secret, box)
  })
}

const insertWebhook = async (
  db: Db,
  scope: TenantScope,
  input: CreateWebhookInput,
  webhook_id: string,
  secret: string,
  box: WebhookSecretBox,
): Promise<Webhook & { readonly secret: string }> => {
  const result = await db.query<WebhookRow>(
    `insert into platform.webhooks (webhook_id, tenant_id, environment, url, events, secret,
       secret_fingerprint, secret_last4, description, enabled, created_at, updated_at)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, now(), now())
     returning ${webhook_columns}`,
    [
      webhook_id,
      scope.tenant_id,
      scope.environment,
      input.url,
      assertEvents(input.events),
      box.seal(webhook_id, secret),
      box.fingerprint(secret),
      secretLast4(secret),
      input.description ?? null,
      input.enabled ?? true,
    ],
  )
  const row = result.rows[0]
  assert(row !== undefined, "an insert returns its row")
  return { ...toWebhook(row), secret }
}

/**
 * One endpoint of the tenant, or undefined (also for a deleted one or another tenant's).
 * @example const webhook = await getWebhook(pool, scope, "whk_0193...")
 */
export async function getWebhook(
  db: Db,
  scope: TenantScope,
  webhook_id: string,
): Promise<Webhook | undefined> {
  const result = await db.query<WebhookRow>(
    `select ${webhook_columns} from platform.webhooks
     where tenant_id = $1 and environment = $2 and webhook_id = $3 and deleted_at is null`,
    [scope.tenant_id, scope.environment, webhook_id],
  )
  const row = result.rows[0]
  return row === undefined ? undefined : toWebhook(row)
}

/**
 * The tenant's endpoints, newest first.
 * @example
 * const first = await listWebhooks(pool, scope, { limit: 20 })
 * if (first.next_cursor !== null) await listWebhooks(pool, scope, { limit: 20, starting_after: first.next_cursor })
 */
export async function listWebhooks(
  db: Db,
  scope: TenantScope,
  pagination: Pagination = {},
): Promise<Page<Webhook>> {
  const limit = pageLimit(pagination)
  const result = await db.query<WebhookRow>(
    `select ${webhook_columns} from platform.webhooks
     where tenant_id = $1 and environment = $2 and deleted_at is null
       and ($3::text is null or webhook_id < $3::text)
     order by webhook_id desc
     limit $4`,
    [scope.tenant_id, scope.environment, pagination.starting_after ?? null, limit + 1],
  )
  return toPage(
    result.rows.map(toWebhook),
    limit,
    (row) => row,
    (webhook) => webhook.webhook_id,
  )
}

export interface UpdateWebhookInput {
  /** As `checkWebhookUrl` gave it for the scope's environment. */
  readonly url?: string
  readonly events?: ReadonlyArray<WebhookEventType>
  readonly enabled?: boolean
  /** null clears it. */
  readonly description?: string | null
  /**
   * A new signing secret (e.g. from `generateWebhookSecret`). The replaced one keeps signing, beside
   * the new one, for `previous_secret_lifetime_s`; a further rotation in that time drops it.
   */
  readonly secret?: string
}

/**
 * Changes the fields given (a new secret sealed with `box`); returns the endpoint, or undefined when
 * the tenant has no such endpoint. Setting the current secret again changes nothing.
 * @example await updateWebhook(pool, scope, webhook_id, { secret: generateWebhookSecret() }, box)
 */
export async function updateWebhook(
  db: Db,
  scope: TenantScope,
  webhook_id: string,
  input: UpdateWebhookInput,
  box: WebhookSecretBox,
): Promise<Webhook | undefined> {
  if (input.url !== undefined) assertCheckedUrl(input.url, scope.environment)
  assert(input.secret === undefined || input.secret !== "", "a signing secret is not empty")
  // The secret changes when its fingerprint differs ($9 is null when no secret is given). In SET,
  // every column name reads the row as it was, so `previous_secret = secret` keeps the old one.
  const rotates = "($9::text is not null and $9::text is distinct from secret_fingerprint)"
  const result = await db.query<WebhookRow>(
    `with updated as (
     update platform.webhooks set
       url = coalesce($4, url),
       events = coalesce($5::text[], events),
       enabled = coalesce($6, enabled),
       description = case when $7 then $8 else description end,
       previous_secret = case when ${rotates} then secret else previous_secret end,
       previous_secret_expires_at = case when ${rotates}
         then now() + $10 * interval '1 second' else previous_secret_expires_at end,
       secret = case when ${rotates} then $11 else secret end,
       secret_last4 = case when ${rotates} then $12 else secret_last4 end,
       secret_fingerprint = case when ${rotates} then $9 else secret_fingerprint end,
       updated_at = now()
     where tenant_id = $1 and environment = $2 and webhook_id = $3 and deleted_at is null
     returning ${webhook_columns}
     ), ${endPendingDeliveries("updated", "not e.enabled")}
     select * from updated`,
    [
      scope.tenant_id,
      scope.environment,
      webhook_id,
      input.url ?? null,
      input.events === undefined ? null : assertEvents(input.events),
      input.enabled ?? null,
      input.description !== undefined,
      input.description ?? null,
      input.secret === undefined ? null : box.fingerprint(input.secret),
      previous_secret_lifetime_s,
      input.secret === undefined ? null : box.seal(webhook_id, input.secret),
      input.secret === undefined ? null : secretLast4(input.secret),
    ],
  )
  const row = result.rows[0]
  return row === undefined ? undefined : toWebhook(row)
}

/**
 * Deletes an endpoint (kept, marked deleted, for its delivery history): no new deliveries, and
 * pending retries end as failed. False when the tenant has no such endpoint.
 * @example await deleteWebhook(pool, scope, webhook_id) // true
 */
export async function deleteWebhook(db: Db, scope: TenantScope, webhook_id: string): Promise<boolean> {
  const result = await db.query(
    `with deleted as (
       update platform.webhooks set deleted_at = now(), updated_at = now()
        where tenant_id = $1 and environment = $2 and webhook_id = $3 and deleted_at is null
        returning webhook_id
     ), ${endPendingDeliveries("deleted")}
     select webhook_id from deleted`,
    [scope.tenant_id, scope.environment, webhook_id],
  )
  return result.rowCount === 1
}

/**
 * A CTE (`ended`) ending as failed, at once, the pending deliveries of the endpoints in `endpoints`
 * (a CTE with `webhook_id`; those with `enabled` false when it has that column): they are called no
 * more. An attempt being sent now (its job claimed it within the longest a job may run) is left to
 * record itself; its next attempt, if any, then fails without a request.
 */
const endPendingDeliveries = (endpoints: string, where = "true") => `ended as (
       update platform.webhook_deliveries d set status = 'failed', next_attempt_at = null, updated_at = now()
         from ${endpoints} e
        where d.webhook_id = e.webhook_id and (${where}) and d.status = 'pending'
          and not (d.claim_attempt is not distinct from d.attempt_count + 1
                   and d.claimed_at > now() - interval '${job_lifetime_s_max} seconds')
     )`

/** The longest a delivery job may run (the engine's longest delivery timeout, 60 s, and a minute). */
const job_lifetime_s_max = 120

export interface EnqueueEventRow {
  readonly tenant_id: string
  readonly environment: Environment
  readonly event_type: WebhookEventType
  readonly data: JsonObject
  /** When the change happened (the body's `created_at`). */
  readonly created_at: Date
  /** A test event for this one endpoint only (see `simulateEvent`); unset for real events. */
  readonly target_webhook_id?: string
}

/** The outbox rows of `rows` (parameters $1-$7 of `outboxValues`), as `r` with the body `d.data`. */
const outboxInsertSql = `insert into platform.webhook_events
       (event_id, tenant_id, environment, event_type, data, created_at, target_webhook_id)
     select r.event_id, r.tenant_id, r.environment, r.event_type, d.data, r.created_at, r.target_webhook_id
       from unnest($1::text[], $2::text[], $3::text[], $4::text[], $6::timestamptz[], $7::text[])
              with ordinality as r(event_id, tenant_id, environment, event_type, created_at, target_webhook_id, n)
       join jsonb_array_elements($5::jsonb) with ordinality as d(data, n) on d.n = r.n`

const outboxValues = (event_ids: ReadonlyArray<string>, rows: ReadonlyArray<EnqueueEventRow>) => [
  event_ids,
  rows.map((row) => row.tenant_id),
  rows.map((row) => row.environment),
  rows.map((row) => row.event_type),
  // One JSON array rather than an array of jsonb: no array-literal escaping of every body.
  JSON.stringify(rows.map((row) => row.data)),
  rows.map((row) => row.created_at.toISOString()),
  rows.map((row) => row.target_webhook_id ?? null),
]

/**
 * Writes events to the outbox, in the caller's transaction (it never opens one: call it inside the
 * transaction of the change the events announce, so they commit or vanish with it). One statement
 * for any number of rows. Returns the new event ids, in the order of `rows`.
 * @example
 * await client.query("begin")
 * // ... record the payment ...
 * await enqueueEvents(client, [{ tenant_id, environment, event_type: "payment.completed", data, created_at: now }])
 * await client.query("commit")
 */
export async function enqueueEvents(client: Db, rows: ReadonlyArray<EnqueueEventRow>): Promise<string[]> {
  if (rows.length === 0) return []
  const event_ids = rows.map(() => eventId())
  await client.query(outboxInsertSql, outboxValues(event_ids, rows))
  return event_ids
}

/**
 * `enqueueEvents` for the platform's hot paths: only the events some endpoint of the tenant
 * subscribes to at this moment (enabled, not deleted, listing the event type) are written, decided
 * inside the same statement, so the check and the write see the same committed endpoints. An event
 * nobody subscribed to when it happened is never delivered anyway; skipping its row spares every
 * payment of a tenant without webhooks an outbox row and a dispatch.
 */
export async function enqueueSubscribedEvents(
  client: Db,
  rows: ReadonlyArray<EnqueueEventRow>,
): Promise<void> {
  if (rows.length === 0) return
  await client.query({
    name: "webhooks_enqueue_subscribed",
    text: `${outboxInsertSql}
     where exists (
       select 1 from platform.webhooks w
        where w.tenant_id = r.tenant_id and w.environment = r.environment and w.enabled
          and w.deleted_at is null and r.event_type = any(w.events))`,
    values: outboxValues(
      rows.map(() => eventId()),
      rows,
    ),
  })
}

export type DeliveryStatus = "pending" | "succeeded" | "failed"

/** One HTTP request made for a delivery. */
export interface WebhookAttempt {
  /** 1-based; the `x-service-delivery-attempt` header of the request. */
  readonly attempt: number
  readonly started_at: Date
  readonly latency_ms: number
  /** Null when no response came (timeout, connection refused, ...). */
  readonly response_status: number | null
  /** The first bytes of the response body (at most 1 KiB). */
  readonly response_excerpt: string | null
  readonly error: string | null
  /** The `t=` of the signature sent, in Unix seconds. */
  readonly signature_timestamp: number
}

export interface WebhookDelivery {
  readonly delivery_id: string
  readonly event_id: string
  readonly event_type: WebhookEventType
  readonly webhook_id: string
  readonly status: DeliveryStatus
  readonly attempt_count: number
  /** When the next attempt is due; null once the delivery succeeded or failed. */
  readonly next_attempt_at: Date | null
  readonly last_status_code: number | null
  readonly created_at: Date
  readonly updated_at: Date
  /** The latest attempts (at most `attempt_listed_count_max`), oldest first. */
  readonly attempts: ReadonlyArray<WebhookAttempt>
}

/** Attempts listed per delivery: the latest ones; manual redeliveries could add more without bound. */
export const attempt_listed_count_max = 50

const delivery_select = `
  select d.delivery_id, d.event_id, e.event_type, d.webhook_id, d.status, d.attempt_count, d.next_attempt_at,
    d.last_status_code, d.created_at, d.updated_at
  from platform.webhook_deliveries d join platform.webhook_events e on e.event_id = d.event_id`

type DeliveryRow = Omit<WebhookDelivery, "attempts" | "event_type" | "status"> & {
  readonly event_type: string
  readonly status: string
}
type AttemptRow = Omit<WebhookAttempt, "signature_timestamp"> & {
  readonly delivery_id: string
  readonly signature_timestamp: string
}

const isDeliveryStatus = (value: string): value is DeliveryStatus =>
  value === "pending" || value === "succeeded" || value === "failed"

/** Adds each delivery's latest attempts (one query for the whole page). */
const withAttempts = async (db: Db, rows: ReadonlyArray<DeliveryRow>): Promise<WebhookDelivery[]> => {
  if (rows.length === 0) return []
  const attempts = await db.query<AttemptRow>(
    `select delivery_id, attempt, started_at, latency_ms, response_status, response_excerpt, error,
       signature_timestamp::text as signature_timestamp
     from (select *, row_number() over (partition by delivery_id order by attempt desc) as recency
           from platform.webhook_attempts where delivery_id = any ($1::text[])) latest
     where recency <= $2
     order by delivery_id, attempt`,
    [rows.map((row) => row.delivery_id), attempt_listed_count_max],
  )
  const byDelivery = new Map<string, WebhookAttempt[]>()
  for (const { delivery_id, signature_timestamp, ...attempt } of attempts.rows) {
    const list = byDelivery.get(delivery_id) ?? []
    list.push({ ...attempt, signature_timestamp: Number(signature_timestamp) })
    byDelivery.set(delivery_id, list)
  }
  return rows.map(({ event_type, status, ...row }) => {
    assert(isWebhookEventType(event_type) && isDeliveryStatus(status), "a stored delivery is well formed")
    return { ...row, event_type, status, attempts: byDelivery.get(row.delivery_id) ?? [] }
  })
}

/**
 * One delivery of the tenant with its latest attempts, or undefined.
 * @example const delivery = await getDelivery(pool, scope, "dlv_0193...")
 */
export async function getDelivery(
  db: Db,
  scope: TenantScope,
  delivery_id: string,
): Promise<WebhookDelivery | undefined> {
  const result = await db.query<DeliveryRow>(
    `${delivery_select} where d.tenant_id = $1 and d.environment = $2 and d.delivery_id = $3`,
    [scope.tenant_id, scope.environment, delivery_id],
  )
  return (await withAttempts(db, result.rows))[0]
}

/**
 * An endpoint's deliveries, newest first, each with its latest attempts; undefined when the tenant
 * has no such endpoint.
 * @example const page = await listDeliveries(pool, scope, webhook_id, { limit: 50 })
 */
export async function listDeliveries(
  db: Db,
  scope: TenantScope,
  webhook_id: string,
  pagination: Pagination = {},
): Promise<Page<WebhookDelivery> | undefined> {
  const limit = pageLimit(pagination)
  if ((await getWebhook(db, scope, webhook_id)) === undefined) return undefined
  const result = await db.query<DeliveryRow>(
    `${delivery_select}
     where d.tenant_id = $1 and d.environment = $2 and d.webhook_id = $3
       and ($4::text is null or d.delivery_id < $4::text)
     order by d.delivery_id desc
     limit $5`,
    [scope.tenant_id, scope.environment, webhook_id, pagination.starting_after ?? null, limit + 1],
  )
  return toPage(
    await withAttempts(db, result.rows),
    limit,
    (delivery) => delivery,
    (delivery) => delivery.delivery_id,
  )
}

/**
 * Makes a fresh attempt of a delivery now, whatever its status: the delivery is pending again and a
 * job for attempt `attempt_count + 1` is queued in the same transaction. An attempt being sent at
 * that moment goes on: the fresh one follows it at once, as the attempt after it (the time of the
 * request is kept for that: `redelivery_asked_at`). If the fresh attempt fails, the retry schedule
 * continues from it (a delivery that had already failed for good fails again at once). Undefined when the tenant has no such delivery or its endpoint was deleted. Given a
 * client, call it inside your transaction.
 * @example const delivery = await redeliver(pool, engine.boss, scope, "dlv_0193...")
 */
export async function redeliver(
  db: Db,
  boss: PgBoss,
  scope: TenantScope,
  delivery_id: string,
): Promise<WebhookDelivery | undefined> {
  return await inTransaction(db, async (client) => {
    const updated = await client.query<{ attempt_count: number }>(
      `update platform.webhook_deliveries d
       set status = 'pending', next_attempt_at = now(), updated_at = now(), redelivery_asked_at = now()
       from platform.webhooks w
       where d.tenant_id = $1 and d.environment = $2 and d.delivery_id = $3
         and w.webhook_id = d.webhook_id and w.deleted_at is null
       returning d.attempt_count`,
      [scope.tenant_id, scope.environment, delivery_id],
    )
    const row = updated.rows[0]
    if (row === undefined) return undefined
    await sendDeliveryJobs(boss, client, [
      {
        delivery_id,
        attempt: row.attempt_count + 1,
        delay_ms: 0,
        group: deliveryGroup(scope.tenant_id, scope.environment),
      },
    ])
    return await getDelivery(client, scope, delivery_id)
  })
}

/** An endpoint as the API shows it after creation: the secret reduced to its last four characters. */
export interface PublicWebhook {
  readonly webhook_id: string
  readonly environment: Environment
  readonly url: string
  readonly events: ReadonlyArray<WebhookEventType>
  readonly enabled: boolean
  readonly description: string | null
  readonly secret_last4: string
  /** While a rotation's overlap lasts, when the previous secret stops signing; otherwise null. */
  readonly previous_secret_expires_at: string | null
  readonly created_at: string
  readonly updated_at: string
}

/**
 * The public view of an endpoint (JSON-ready; times in ISO 8601).
 * @example toPublicWebhook(webhook).secret_last4 // "9f3a"
 */
export function toPublicWebhook(webhook: Webhook, now: Date = new Date()): PublicWebhook {
  const expires = webhook.previous_secret_expires_at
  return {
    webhook_id: webhook.webhook_id,
    environment: webhook.environment,
    url: webhook.url,
    events: webhook.events,
    enabled: webhook.enabled,
    description: webhook.description,
    secret_last4: webhook.secret_last4,
    previous_secret_expires_at: expires !== null && expires > now ? expires.toISOString() : null,
    created_at: webhook.created_at.toISOString(),
    updated_at: webhook.updated_at.toISOString(),
  }
}
