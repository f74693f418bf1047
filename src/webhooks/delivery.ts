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
 *
 * A production endpoint is reached only at public addresses: its host is resolved at each attempt
 * and the request goes to exactly the addresses checked, or is not sent (see `endpoint-guard.ts`).
 */
import * as http from "node:http"
import * as https from "node:https"
import type { LookupFunction, Socket } from "node:net"
import type pg from "pg"
import type { PgBoss } from "pg-boss"
import { assert } from "../../domain/assert.ts"
import type { Environment } from "../../domain/platform/scopes.ts"
import { isWebhookEventType, type JsonObject, serializeEventBody } from "../../domain/webhooks/events.ts"
import { signature_header, signPayload } from "../../domain/webhooks/signature.ts"
import { pinnedLookup, resolvePublicAddresses } from "./endpoint-guard.ts"
import { type DeliveryJob, deliveryGroup, sendDeliveryJobs } from "./queue.ts"
import { type RetrySchedule, retryDelayMs } from "./retry.ts"
import { type WebhookSecretBox, WebhookSecretUnreadable } from "./secrets.ts"
import { inTransaction } from "./store.ts"

export interface DeliverySettings {
  /** Opens the endpoints' sealed signing secrets. */
  readonly secrets: WebhookSecretBox
  readonly schedule: RetrySchedule
  readonly delivery_timeout_ms: number
  /** A number in [0, 1) for the retry jitter. */
  readonly random: () => number
  /** Told of each attempt put off because its endpoint's secret cannot be opened (for the log). */
  readonly onHeld?: (error: WebhookSecretUnreadable) => void
  /** How long such an attempt waits before it looks again; default `unreadable_secret_hold_ms`. */
  readonly hold_ms?: number
}

/** The longest response excerpt and error text kept per attempt. */
export const excerpt_bytes_max = 1_024
export const user_agent = "PaymentsPlatform-Webhooks/1.0"

export type DeliveryResult = "skipped" | "succeeded" | "retrying" | "failed" | "held"

/** How long a delivery whose secret cannot be opened waits before it looks again (default). */
export const unreadable_secret_hold_ms = 60_000

interface DeliveryTarget {
  readonly status: string
  readonly attempt_count: number
  readonly event_id: string
  readonly event_type: string
  readonly data: JsonObject
  readonly created_at: Date
  readonly url: string
  readonly tenant_id: string
  readonly environment: Environment
  readonly webhook_id: string
  /** Sealed. */
  readonly secret: string
  /** Sealed; only while the rotation overlap lasts (by the database's clock). */
  readonly previous_secret: string | null
  readonly webhook_deleted: boolean
  readonly webhook_enabled: boolean
}

const loadTarget = async (pool: pg.Pool, delivery_id: string): Promise<DeliveryTarget | undefined> => {
  const result = await pool.query<DeliveryTarget>(
    `select d.status, d.attempt_count, e.event_id, e.event_type, e.data, e.created_at, w.url,
       w.tenant_id, w.environment, w.webhook_id, w.secret,
       case when w.previous_secret_expires_at > now() then w.previous_secret end as previous_secret,
       w.deleted_at is not null as webhook_deleted, w.enabled as webhook_enabled
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
  /**
   * The request went out on a kept-alive connection that closed before any answer, most likely one
   * the receiver had closed while idle: the next attempt goes at once, on a new connection.
   */
  readonly closed_under_reuse: boolean
}

/** At most `bytes_max` bytes of UTF-8, cut on a character boundary, without NUL (PostgreSQL text has none). */
const truncateUtf8 = (text: string, bytes_max: number): string => {
  const bytes = Buffer.from(text.replaceAll("\u0000", ""), "utf8")
  // `stream: true` leaves out a character cut in half at the end instead of replacing it.
  return new TextDecoder().decode(bytes.subarray(0, bytes_max), { stream: true })
}

/** The first bytes of a response body; reading stops there and the rest is discarded. */
const readExcerpt = async (response: http.IncomingMessage): Promise<string | null> => {
  const chunks: Buffer[] = []
  let size = 0
  try {
    // Leaving the loop early destroys the response: the rest of the body is never read.
    for await (const chunk of response) {
      chunks.push(chunk)
      size += chunk.byteLength
      if (size >= excerpt_bytes_max) break
    }
  } catch {
    // A body cut short (timeout, reset) still gives the bytes read so far.
  }
  const text = truncateUtf8(new TextDecoder().decode(Buffer.concat(chunks)), excerpt_bytes_max)
  return text === "" ? null : text
}

/**
 * What an attempt's log says of a request that failed. A connection tried at several addresses (a
 * host with both IPv4 and IPv6 ones) fails with an AggregateError whose own message is empty: each
 * address's error is said instead.
 */
export const describeError = (error: unknown): string => {
  if (!(error instanceof Error)) return String(error)
  if (error instanceof AggregateError && error.errors.length > 0) {
    const each = error.errors.map(describeError).join("; ")
    return error.message === "" ? each : `${error.message}: ${each}`
  }
  const own =
    error.message !== "" ? error.message : ((error as { code?: unknown }).code?.toString() ?? error.name)
  return error.cause instanceof Error ? `${own}: ${describeError(error.cause)}` : own
}

/** How long a kept-alive connection to a receiver may stay idle before it is closed. */
export const idle_connection_ms = 4_000

/**
 * Keep-alive connections, kept apart per environment: every connection in the production pool was
 * opened to addresses checked for it, and a production request must never reuse one that a sandbox
 * request opened to an address nobody checked.
 */
const keepAlive = {
  keepAlive: true,
  // An idle connection is closed after this long: below the 5 s after which Node's own servers
  // (a common receiver) close theirs, so that a request rarely meets a connection being closed.
  timeout: idle_connection_ms,
} as const
const agents = {
  sandbox: { http: new http.Agent(keepAlive), https: new https.Agent(keepAlive) },
  production: { http: new http.Agent(keepAlive), https: new https.Agent(keepAlive) },
} as const

interface PostRequest {
  readonly url: string
  readonly body: string
  readonly headers: Readonly<Record<string, string>>
  readonly timeout_ms: number
  readonly signal: AbortSignal
  /** Production endpoints are reached only at public addresses, checked after resolution. */
  readonly environment: Environment
}

type Sent =
  | { readonly ok: true; readonly answer: { readonly status: number; readonly excerpt: string | null } }
  | { readonly ok: false; readonly error: unknown; readonly closed_under_reuse: boolean }

/**
 * Closes the pool's idle connections to the address `socket` was connected to: when the receiver
 * closed one while idle, the others it kept are as likely closed, and the next attempt must not
 * take one.
 */
const closeIdleSiblings = (agent: http.Agent, socket: Socket | null) => {
  const address = socket?.remoteAddress
  const port = socket?.remotePort
  if (address === undefined || port === undefined) return
  for (const idle of Object.values(agent.freeSockets)) {
    for (const sibling of idle ?? []) {
      if (sibling.remoteAddress === address && sibling.remotePort === port) sibling.destroy()
    }
  }
}

/**
 * Sends the POST once and reads the answer's status and first bytes. A request that fails on a
 * kept-alive connection before any answer says so (`closed_under_reuse`): it may not have reached
 * the receiver's application, or it may have, and only the receiver knows. It is never sent again
 * within the attempt; the next attempt follows at once instead, so that both are in the log.
 */
const send = (
  url: URL,
  request: PostRequest,
  signal: AbortSignal,
  lookup: LookupFunction | undefined,
): Promise<Sent> =>
  new Promise((resolve) => {
    const secure = url.protocol === "https:"
    const agent = agents[request.environment][secure ? "https" : "http"]
    const options: https.RequestOptions = {
      method: "POST",
      headers: { ...request.headers, "content-length": String(Buffer.byteLength(request.body)) },
      agent,
      signal,
      ...(lookup === undefined ? {} : { lookup }),
    }
    let answered = false
    const onAnswer = (response: http.IncomingMessage) => {
      answered = true
      const status = response.statusCode
      assert(status !== undefined, "a response to a request has a status")
      readExcerpt(response).then(
        (excerpt) => resolve({ ok: true, answer: { status, excerpt } }),
        (error: unknown) => resolve({ ok: false, error, closed_under_reuse: false }),
      )
    }
    const outgoing = secure ? https.request(url, options, onAnswer) : http.request(url, options, onAnswer)
    outgoing.on("error", (error: NodeJS.ErrnoException) => {
      const closed_under_reuse =
        outgoing.reusedSocket && !answered && (error.code === "ECONNRESET" || error.code === "EPIPE")
      if (closed_under_reuse) closeIdleSiblings(agent, outgoing.socket)
      resolve({ ok: false, error, closed_under_reuse })
    })
    outgoing.end(request.body)
  })

/**
 * POSTs `body` and reports what happened; never throws for the receiver's behaviour. Redirects are
 * not followed (a 3xx is a failed attempt): the endpoint is the URL the tenant registered. In
 * production the host is resolved first and the request is not sent (a failed attempt, its error
 * saying why) when any address is not public; otherwise it connects to exactly those addresses.
 * Throws only when `signal` (the worker shutting down) aborts, so the attempt is not recorded.
 * @example const outcome = await postWebhook({ url, body, headers, timeout_ms: 10_000, signal, environment })
 */
export async function postWebhook(request: PostRequest): Promise<AttemptOutcome> {
  const started_at = new Date()
  const started_ms = performance.now()
  const outcome = (
    answer: Omit<AttemptOutcome, "started_at" | "latency_ms" | "closed_under_reuse">,
    closed_under_reuse = false,
  ): AttemptOutcome => ({
    started_at,
    latency_ms: Math.max(0, Math.round(performance.now() - started_ms)),
    ...answer,
    closed_under_reuse,
  })
  const timeout = AbortSignal.timeout(request.timeout_ms)
  const signal = AbortSignal.any([request.signal, timeout])
  try {
    const url = new URL(request.url)
    let lookup: LookupFunction | undefined
    if (request.environment === "production") {
      const resolution = await resolvePublicAddresses(url.hostname, signal)
      if (!resolution.ok) {
        return outcome({ response_status: null, response_excerpt: null, error: resolution.refusal })
      }
      lookup = pinnedLookup(resolution.addresses)
    }
    const sent = await send(url, request, signal, lookup)
    if (sent.ok) {
      return outcome({
        response_status: sent.answer.status,
        response_excerpt: sent.answer.excerpt,
        error: null,
      })
    }
    if (!sent.closed_under_reuse || signal.aborted) throw sent.error
    const why = `${describeError(sent.error)}: the kept-alive connection closed before any answer (the receiver may have closed it while idle); the next attempt follows at once on a new connection`
    return outcome(
      { response_status: null, response_excerpt: null, error: truncateUtf8(why, excerpt_bytes_max) },
      true,
    )
  } catch (error) {
    if (request.signal.aborted)
      throw new Error("delivery interrupted: the worker is stopping", { cause: error })
    const message = timeout.aborted ? `no response within ${request.timeout_ms} ms` : describeError(error)
    return outcome({
      response_status: null,
      response_excerpt: null,
      error: truncateUtf8(message, excerpt_bytes_max),
    })
  }
}

const succeeded = (outcome: AttemptOutcome): boolean =>
  outcome.response_status !== null && outcome.response_status >= 200 && outcome.response_status <= 299

/**
 * Records the attempt and settles the delivery or queues its next attempt, in one transaction;
 * "skipped" when another run of the same attempt recorded it first. The next attempt goes at once,
 * whatever the schedule says, after a connection closed under reuse, and after any attempt that was
 * claimed before a redelivery was asked for (it was being sent then, so the redelivery is owed).
 */
const recordAttempt = async (
  pool: pg.Pool,
  boss: PgBoss,
  settings: DeliverySettings,
  job: DeliveryJob,
  outcome: AttemptOutcome & { readonly signature_timestamp: number },
): Promise<DeliveryResult> => {
  const scheduled_ms = succeeded(outcome)
    ? undefined
    : retryDelayMs(settings.schedule, job.attempt, settings.random())
  const at_once = outcome.closed_under_reuse && scheduled_ms !== undefined
  const delay_ms = at_once ? 0 : scheduled_ms
  const status = succeeded(outcome) ? "succeeded" : delay_ms === undefined ? "failed" : "pending"
  return await inTransaction(pool, async (client) => {
    const updated = await client.query<{ redelivery_owed: boolean }>(
      `with attempt as (
         select delivery_id, coalesce(redelivery_asked_at > claimed_at, false) as redelivery_owed
         from platform.webhook_deliveries
         where delivery_id = $1 and status = 'pending' and attempt_count = $2 - 1
         for update
       )
       update platform.webhook_deliveries d
       set status = case when a.redelivery_owed then 'pending' else $3 end,
         attempt_count = $2, last_status_code = $4, updated_at = now(), redelivery_asked_at = null,
         next_attempt_at = now() + (case when a.redelivery_owed then 0 else $5::float8 end) * interval '1 millisecond'
       from attempt a
       where d.delivery_id = a.delivery_id
       returning a.redelivery_owed`,
      [job.delivery_id, job.attempt, status, outcome.response_status, delay_ms ?? null],
    )
    const recorded = updated.rows[0]
    if (recorded === undefined) return "skipped"
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
    if (recorded.redelivery_owed) {
      await sendDeliveryJobs(boss, client, [{ ...job, attempt: job.attempt + 1, delay_ms: 0 }])
      return "retrying"
    }
    if (delay_ms === undefined) return status === "succeeded" ? "succeeded" : "failed"
    await sendDeliveryJobs(boss, client, [{ ...job, attempt: job.attempt + 1, delay_ms }])
    return "retrying"
  })
}

/**
 * Whether this job may send the attempt: no other job claimed it, or the claim is older than a job
 * may run (pg-boss gives a job the delivery timeout and a minute: `claim_lifetime_s`), so a claim
 * whose job died for good does not hold the delivery forever.
 */
const claimAttempt = async (
  pool: pg.Pool,
  job: DeliveryJob,
  job_id: string,
  claim_lifetime_s: number,
): Promise<boolean> => {
  const claimed = await pool.query(
    `update platform.webhook_deliveries set claim_attempt = $2, claim_job_id = $3, claimed_at = now()
     where delivery_id = $1 and status = 'pending' and attempt_count = $2 - 1
       and (claim_attempt is distinct from $2 or claim_job_id = $3
            or claimed_at < now() - make_interval(secs => $4))`,
    [job.delivery_id, job.attempt, job_id, claim_lifetime_s],
  )
  return claimed.rowCount === 1
}

/**
 * Another job holds the attempt's claim. If that job records the attempt, this one has nothing to
 * do; if it died (its worker killed), the claim lapses after `claim_lifetime_s`: this job queues the
 * same attempt again for just after that, so a redelivery asked for meanwhile is never dropped.
 */
const awaitClaim = async (
  pool: pg.Pool,
  boss: PgBoss,
  job: DeliveryJob,
  claim_lifetime_s: number,
): Promise<DeliveryResult> =>
  await inTransaction(pool, async (client): Promise<DeliveryResult> => {
    const found = await client.query<{ lapses_in_ms: number }>(
      `select greatest(0, extract(epoch from claimed_at + make_interval(secs => $3) - now()) * 1000)::float8
         as lapses_in_ms
       from platform.webhook_deliveries
       where delivery_id = $1 and status = 'pending' and attempt_count = $2 - 1 and claim_attempt = $2`,
      [job.delivery_id, job.attempt, claim_lifetime_s],
    )
    const row = found.rows[0]
    if (row === undefined) return "skipped"
    await sendDeliveryJobs(boss, client, [{ ...job, delay_ms: row.lapses_in_ms + 1_000 }])
    return "skipped"
  })

/** How long a job runs at most before pg-boss takes it for dead (the queue's `expireInSeconds`). */
export const jobLifetimeSeconds = (delivery_timeout_ms: number): number =>
  Math.ceil(delivery_timeout_ms / 1000) + 60

/**
 * Puts the attempt off by `hold_ms`, unsent and uncounted: releases this job's claim and queues the
 * same attempt again, in one transaction.
 */
const holdAttempt = async (
  pool: pg.Pool,
  boss: PgBoss,
  job: DeliveryJob,
  job_id: string,
  hold_ms: number,
): Promise<DeliveryResult> =>
  await inTransaction(pool, async (client) => {
    const held = await client.query(
      `update platform.webhook_deliveries
       set claim_attempt = null, claim_job_id = null, claimed_at = null, updated_at = now(),
         next_attempt_at = now() + $3::float8 * interval '1 millisecond'
       where delivery_id = $1 and status = 'pending' and attempt_count = $2 - 1 and claim_job_id = $4`,
      [job.delivery_id, job.attempt, hold_ms, job_id],
    )
    if (held.rowCount !== 1) return "skipped"
    await sendDeliveryJobs(boss, client, [{ ...job, delay_ms: hold_ms }])
    return "held"
  })

/**
 * A pending delivery whose endpoint was deleted or disabled ends as failed, without a request. An
 * attempt another job is sending now (a redelivery racing it) is left to record itself first:
 * this job waits for that claim as `awaitClaim` does, and its next attempt then fails here.
 */
const failOrphan = async (
  pool: pg.Pool,
  boss: PgBoss,
  job: DeliveryJob,
  job_id: string,
  claim_lifetime_s: number,
): Promise<DeliveryResult> => {
  const result = await pool.query(
    `update platform.webhook_deliveries set status = 'failed', next_attempt_at = null, updated_at = now()
     where delivery_id = $1 and status = 'pending' and attempt_count = $2 - 1
       and not (claim_attempt is not distinct from $2 and claim_job_id is distinct from $3
                and claimed_at >= now() - make_interval(secs => $4))`,
    [job.delivery_id, job.attempt, job_id, claim_lifetime_s],
  )
  if (result.rowCount === 1) return "failed"
  return await awaitClaim(pool, boss, job, claim_lifetime_s)
}

/**
 * Makes the attempt a job carries. Reads the endpoint's secrets now, so a rotation applies to the
 * next attempt; while the previous secret is within its overlap, both signatures are sent.
 *
 * Two jobs may carry the same attempt (redeliveries asked for at once, or one racing a scheduled
 * retry): the first to claim the attempt sends it, the others skip; a retry of the claiming job
 * itself (pg-boss runs a job again after its worker died) may send it again, and is recorded once.
 * @example const result = await deliverAttempt(pool, boss, settings, { delivery_id, attempt: 1 }, job_id, signal)
 */
export async function deliverAttempt(
  pool: pg.Pool,
  boss: PgBoss,
  settings: DeliverySettings,
  job_run: DeliveryJob,
  job_id: string,
  signal: AbortSignal,
): Promise<DeliveryResult> {
  assert(
    typeof job_run.delivery_id === "string" && Number.isInteger(job_run.attempt) && job_run.attempt >= 1,
    "a delivery job",
  )
  const target = await loadTarget(pool, job_run.delivery_id)
  if (target === undefined || target.status !== "pending" || target.attempt_count !== job_run.attempt - 1) {
    return "skipped"
  }
  // The jobs it queues (a retry, a hold) carry the tenant's group, a job written before groups too.
  const job: DeliveryJob = { ...job_run, group: deliveryGroup(target.tenant_id, target.environment) }
  // A deleted or disabled endpoint is not called again, retries included; a delivery to a disabled
  // one can be sent again by hand (redeliver) once it is enabled.
  const claim_lifetime_s = jobLifetimeSeconds(settings.delivery_timeout_ms)
  if (target.webhook_deleted || !target.webhook_enabled) {
    return await failOrphan(pool, boss, job, job_id, claim_lifetime_s)
  }
  if (!(await claimAttempt(pool, job, job_id, claim_lifetime_s))) {
    return await awaitClaim(pool, boss, job, claim_lifetime_s)
  }
  assert(isWebhookEventType(target.event_type), "an outbox event has a known type")
  assert(
    target.environment === "sandbox" || target.environment === "production",
    "a stored environment is known",
  )
  const body = serializeEventBody({
    id: target.event_id,
    event_type: target.event_type,
    created_at: target.created_at.toISOString(),
    data: target.data,
  })
  const signature_timestamp = Math.floor(Date.now() / 1000)
  // An unreadable current secret (CUSTODY_KEK changed): nothing is sent unsigned, and the attempt
  // waits, looking again every minute, until the secret is set again (it never runs out of tries).
  // The previous secret only adds a second signature: unreadable, it is left out.
  let current: string
  try {
    current = settings.secrets.open(target.webhook_id, target.secret)
  } catch (error) {
    if (!(error instanceof WebhookSecretUnreadable)) throw error
    settings.onHeld?.(error)
    return await holdAttempt(pool, boss, job, job_id, settings.hold_ms ?? unreadable_secret_hold_ms)
  }
  const secrets = [current]
  if (target.previous_secret !== null) {
    try {
      secrets.push(settings.secrets.open(target.webhook_id, target.previous_secret))
    } catch (error) {
      if (!(error instanceof WebhookSecretUnreadable)) throw error
    }
  }
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
    environment: target.environment,
  })
  return await recordAttempt(pool, boss, settings, job, { ...outcome, signature_timestamp })
}
