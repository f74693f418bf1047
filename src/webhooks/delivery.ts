/**
 * One delivery attempt: load the delivery, its event and its endpoint's current secrets; POST the
 * signed body; record the attempt and, in the same transaction, either settle the delivery or queue
 * the next attempt at the retry schedule's delay. Nothing is held open across the HTTP request.
 *
 * A job carries the attempt it makes. It runs only while the delivery is pending and its attempt
 * count is one less, and the recording is guarded the same way, so a job that runs twice (pg-boss
 * retried it after a crash, or a redelivery raced a scheduled retry) records its attempt once and a
 * stale one does nothing. The receiver may still see a request twice after a crash: webhooks are
 * delivered at least once, and the event id in the body lets receivers deduplicate.
 */
import type pg from "pg"
import type { PgBoss } from "pg-boss"
import { assert } from "../../domain/assert.ts"
import { isWebhookEventType, type JsonObject, serializeEventBody } from "../../domain/webhooks/events.ts"
import { signature_header, signPayload } from "../../domain/webhooks/signature.ts"
import { type DeliveryJob, sendDeliveryJobs } from "./queue.ts"
import { type RetrySchedule, retryDelayMs } from "./retry.ts"
import { inTransaction } from "./store.ts"

export interface DeliverySettings {
  readonly schedule: RetrySchedule
  readonly delivery_timeout_ms: number
  /** A number in [0, 1) for the retry jitter. */
  readonly random: () => number
}

/** The longest response excerpt and error text kept per attempt. */
export const excerpt_bytes_max = 1_024
export const user_agent = "PaymentsPlatform-Webhooks/1.0"

export type DeliveryResult = "skipped" | "succeeded" | "retrying" | "failed"

interface DeliveryTarget {
  readonly status: string
  readonly attempt_count: number
  readonly event_id: string
  readonly event_type: string
  readonly data: JsonObject
  readonly created_at: Date
  readonly url: string
  readonly secret: string
  /** Only while the rotation overlap lasts (by the database's clock). */
  readonly previous_secret: string | null
  readonly webhook_deleted: boolean
}

const loadTarget = async (pool: pg.Pool, delivery_id: string): Promise<DeliveryTarget | undefined> => {
  const result = await pool.query<DeliveryTarget>(
    `select d.status, d.attempt_count, e.event_id, e.event_type, e.data, e.created_at, w.url, w.secret,
       case when w.previous_secret_expires_at > now() then w.previous_secret end as previous_secret,
       w.deleted_at is not null as webhook_deleted
     from platform.webhook_deliveries d
     join platform.webhook_events e on e.event_id = d.event_id
     join platform.webhooks w on w.webhook_id = d.webhook_id
     where d.delivery_id = $1`,
    [delivery_id],
  )
  return result.rows[0]
}

export interface AttemptOutcome {
  readonly started_at: Date
  readonly latency_ms: number
  readonly response_status: number | null
  readonly response_excerpt: string | null
  readonly error: string | null
}

/** At most `bytes_max` bytes of UTF-8, cut on a character boundary, without NUL (PostgreSQL text has none). */
const truncateUtf8 = (text: string, bytes_max: number): string => {
  const bytes = Buffer.from(text.replaceAll("\u0000", ""), "utf8")
  // `stream: true` leaves out a character cut in half at the end instead of replacing it.
  return new TextDecoder().decode(bytes.subarray(0, bytes_max), { stream: true })
}

/** The first bytes of a response body; reading stops there and the rest is discarded. */
const readExcerpt = async (response: Response): Promise<string | null> => {
  if (response.body === null) return null
  const reader = response.body.getReader()
  const chunks: Uint8Array[] = []
  let size = 0
  try {
    while (size < excerpt_bytes_max) {
      const chunk = await reader.read()
      if (chunk.done) break
      chunks.push(chunk.value)
      size += chunk.value.byteLength
    }
  } catch {
    // A body cut short (timeout, reset) still gives the bytes read so far.
  } finally {
    reader.cancel().catch(() => {})
  }
  const text = truncateUtf8(new TextDecoder().decode(Buffer.concat(chunks)), excerpt_bytes_max)
  return text === "" ? null : text
}

const describeError = (error: unknown, timeout_ms: number): string => {
  if (!(error instanceof Error)) return String(error)
  if (error.name === "TimeoutError") return `no response within ${timeout_ms} ms`
  return error.cause instanceof Error ? `${error.message}: ${error.cause.message}` : error.message
}

/**
 * POSTs `body` and reports what happened; never throws for the receiver's behaviour. Redirects are
 * not followed (a 3xx is a failed attempt): the endpoint is the URL the tenant registered.
 * Throws only when `signal` (the worker shutting down) aborts, so the attempt is not recorded.
 * @example const outcome = await postWebhook({ url, body, headers, timeout_ms: 10_000, signal })
 */
export async function postWebhook(request: {
  readonly url: string
  readonly body: string
  readonly headers: Readonly<Record<string, string>>
  readonly timeout_ms: number
  readonly signal: AbortSignal
}): Promise<AttemptOutcome> {
  const started_at = new Date()
  const started_ms = performance.now()
  const latency = () => Math.max(0, Math.round(performance.now() - started_ms))
  const signal = AbortSignal.any([request.signal, AbortSignal.timeout(request.timeout_ms)])
  try {
    const response = await fetch(request.url, {
      method: "POST",
      headers: request.headers,
      body: request.body,
      redirect: "manual",
      signal,
    })
    const response_excerpt = await readExcerpt(response)
    return {
      started_at,
      latency_ms: latency(),
      response_status: response.status,
      response_excerpt,
      error: null,
    }
  } catch (error) {
    if (request.signal.aborted)
      throw new Error("delivery interrupted: the worker is stopping", { cause: error })
    const message = truncateUtf8(describeError(error, request.timeout_ms), excerpt_bytes_max)
    return {
      started_at,
      latency_ms: latency(),
      response_status: null,
      response_excerpt: null,
      error: message,
    }
  }
}

const succeeded = (outcome: AttemptOutcome): boolean =>
  outcome.response_status !== null && outcome.response_status >= 200 && outcome.response_status <= 299

/**
 * Records the attempt and settles the delivery or queues its next attempt, in one transaction;
 * "skipped" when another run of the same attempt recorded it first.
 */
const recordAttempt = async (
  pool: pg.Pool,
  boss: PgBoss,
  settings: DeliverySettings,
  job: DeliveryJob,
  outcome: AttemptOutcome & { readonly signature_timestamp: number },
): Promise<DeliveryResult> => {
  const delay_ms = succeeded(outcome)
    ? undefined
    : retryDelayMs(settings.schedule, job.attempt, settings.random())
  const status = succeeded(outcome) ? "succeeded" : delay_ms === undefined ? "failed" : "pending"
  return await inTransaction(pool, async (client) => {
    const updated = await client.query(
      `update platform.webhook_deliveries
       set status = $3, attempt_count = $2, last_status_code = $4, updated_at = now(),
         next_attempt_at = now() + $5::float8 * interval '1 millisecond'
       where delivery_id = $1 and status = 'pending' and attempt_count = $2 - 1`,
      [job.delivery_id, job.attempt, status, outcome.response_status, delay_ms ?? null],
    )
    if (updated.rowCount !== 1) return "skipped"
    await client.query(
      `insert into platform.webhook_attempts (delivery_id, attempt, started_at, latency_ms, response_status,
         response_excerpt, error, signature_timestamp)
       values ($1, $2, $3, $4, $5, $6, $7, $8)`,
      [
        job.delivery_id,
        job.attempt,
        outcome.started_at,
        outcome.latency_ms,
        outcome.response_status,
        outcome.response_excerpt,
        outcome.error,
        outcome.signature_timestamp,
      ],
    )
    if (delay_ms === undefined) return status === "succeeded" ? "succeeded" : "failed"
    await sendDeliveryJobs(boss, client, [
      { delivery_id: job.delivery_id, attempt: job.attempt + 1, delay_ms },
    ])
    return "retrying"
  })
}

/** A pending delivery whose endpoint was deleted ends as failed, without a request. */
const failOrphan = async (pool: pg.Pool, job: DeliveryJob): Promise<DeliveryResult> => {
  const result = await pool.query(
    `update platform.webhook_deliveries set status = 'failed', next_attempt_at = null, updated_at = now()
     where delivery_id = $1 and status = 'pending' and attempt_count = $2 - 1`,
    [job.delivery_id, job.attempt],
  )
  return result.rowCount === 1 ? "failed" : "skipped"
}

/**
 * Makes the attempt a job carries. Reads the endpoint's secrets now, so a rotation applies to the
 * next attempt; while the previous secret is within its overlap, both signatures are sent.
 * @example const result = await deliverAttempt(pool, boss, settings, { delivery_id, attempt: 1 }, signal)
 */
export async function deliverAttempt(
  pool: pg.Pool,
  boss: PgBoss,
  settings: DeliverySettings,
  job: DeliveryJob,
  signal: AbortSignal,
): Promise<DeliveryResult> {
  assert(
    typeof job.delivery_id === "string" && Number.isInteger(job.attempt) && job.attempt >= 1,
    "a delivery job",
  )
  const target = await loadTarget(pool, job.delivery_id)
  if (target === undefined || target.status !== "pending" || target.attempt_count !== job.attempt - 1) {
    return "skipped"
  }
  if (target.webhook_deleted) return await failOrphan(pool, job)
  assert(isWebhookEventType(target.event_type), "an outbox event has a known type")
  const body = serializeEventBody({
    id: target.event_id,
    event_type: target.event_type,
    created_at: target.created_at.toISOString(),
    data: target.data,
  })
  const signature_timestamp = Math.floor(Date.now() / 1000)
  const secrets = target.previous_secret === null ? [target.secret] : [target.secret, target.previous_secret]
  const headers = {
    "content-type": "application/json",
    [signature_header]: signPayload({ secrets, body, timestamp_s: signature_timestamp }),
    "x-service-event-id": target.event_id,
    "x-service-delivery-attempt": String(job.attempt),
    "user-agent": user_agent,
  }
  const outcome = await postWebhook({
    url: target.url,
    body,
    headers,
    timeout_ms: settings.delivery_timeout_ms,
    signal,
  })
  return await recordAttempt(pool, boss, settings, job, { ...outcome, signature_timestamp })
}
