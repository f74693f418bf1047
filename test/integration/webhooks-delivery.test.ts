// Proves the webhook engine end to end on real PostgreSQL, pg-boss and a local HTTP receiver: an
// event committed with its change is delivered once, signed so that the receiver's
// `verifySignature` accepts it, and a rolled-back one never; rejected and timed-out attempts are
// retried on schedule and every attempt is logged; a rotated secret signs beside the new one; an
// engine stopped mid-retry and started again finishes the delivery exactly once; two engines at
// once still dispatch every event once; redelivery and test events reach only what they should;
// a production endpoint whose host is (or resolves to) a non-public address is never connected to.
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import * as net from "node:net"
import { PgBoss } from "pg-boss"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import type { WebhookEventType } from "../../domain/webhooks/events.ts"
import { verifySignature } from "../../domain/webhooks/signature.ts"
import { runMigrations } from "../../src/db/migrate.ts"
import { jobLifetimeSeconds } from "../../src/webhooks/delivery.ts"
import { dispatchBatch } from "../../src/webhooks/dispatcher.ts"
import {
  startWebhookEngine,
  type WebhookEngine,
  type WebhookEngineOptions,
} from "../../src/webhooks/engine.ts"
import { generateWebhookSecret } from "../../src/webhooks/ids.ts"
import { delivery_queue, pgBossDb } from "../../src/webhooks/queue.ts"
import type { RetrySchedule } from "../../src/webhooks/retry.ts"
import { webhookMigrations } from "../../src/webhooks/schema.ts"
import { makeWebhookSecretBox, WebhookSecretUnreadable } from "../../src/webhooks/secrets.ts"
import { simulateEvent } from "../../src/webhooks/simulate.ts"
import {
  createWebhook,
  deleteWebhook,
  enqueueEvents,
  getDelivery,
  listDeliveries,
  redeliver,
  type TenantScope,
  updateWebhook,
  type WebhookDelivery,
} from "../../src/webhooks/store.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"

interface Received {
  readonly path: string
  readonly headers: http.IncomingHttpHeaders
  readonly body: string
}
/** "reset": the connection is closed after the request was read, without an answer. */
type Answer =
  | { readonly status: number; readonly body?: string; readonly delay_ms?: number }
  | "hang"
  | "reset"

interface Receiver {
  readonly url: string
  readonly received: Received[]
  readonly close: () => Promise<void>
}

const receivers: Receiver[] = []
const engines: WebhookEngine[] = []

/** A local endpoint that records each request and answers as `respond` says. */
const startReceiver = async (respond: (request: Received, index: number) => Answer): Promise<Receiver> => {
  const received: Received[] = []
  const server = http.createServer((request, response) => {
    const chunks: Buffer[] = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => {
      const entry = {
        path: request.url ?? "",
        headers: request.headers,
        body: Buffer.concat(chunks).toString("utf8"),
      }
      received.push(entry)
      const answer = respond(entry, received.length - 1)
      if (answer === "hang") return
      if (answer === "reset") {
        request.socket.destroy()
        return
      }
      const send = () =>
        response.writeHead(answer.status, { "content-type": "text/plain" }).end(answer.body ?? "")
      if (answer.delay_ms === undefined) send()
      else setTimeout(send, answer.delay_ms)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  const receiver: Receiver = {
    url: `http://127.0.0.1:${port}/hooks`,
    received,
    close: async () => {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
  receivers.push(receiver)
  return receiver
}

const now_s = () => Math.floor(Date.now() / 1000)

/** The receiver's check, as a tenant would write it. */
const verifies = (request: Received, secret: string, body: string = request.body) =>
  verifySignature({ header: request.headers["x-service-signature"], body, secret, now_s: now_s() }).ok

const fast: RetrySchedule = { attempt_count_max: 5, delay_base_ms: 10, delay_max_ms: 40, jitter: "none" }

/** Seals the endpoints' secrets, as the platform's box does from its KEK. */
const box = makeWebhookSecretBox(new Uint8Array(32).fill(7))

let db: TestDatabase
let tenant_count = 0
/** A tenant of its own per test, so deliveries of one test never reach another's receiver. */
const newTenant = (): TenantScope => ({ tenant_id: `ten_${++tenant_count}`, environment: "sandbox" })

/** Whatever the engines report: none is expected. */
const errors: unknown[] = []

const start = async (options: WebhookEngineOptions = {}, secrets = box): Promise<WebhookEngine> => {
  const engine = await startWebhookEngine({
    pool: db.pool,
    secrets,
    options: {
      poll_interval_ms: 20,
      worker_poll_interval_ms: 500,
      retry_schedule: fast,
      onError: (error) => errors.push(error),
      ...options,
    },
  })
  engines.push(engine)
  return engine
}

const stop = async (engine: WebhookEngine): Promise<void> => {
  engines.splice(engines.indexOf(engine), 1)
  await engine.stop()
}

const waitFor = async <T>(
  what: string,
  probe: () => Promise<T | undefined>,
  timeout_ms = 15_000,
): Promise<T> => {
  const deadline = Date.now() + timeout_ms
  while (Date.now() < deadline) {
    const value = await probe()
    if (value !== undefined) return value
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
  throw new Error(`timed out waiting for ${what}`)
}

/** Waits until the endpoint has exactly one delivery and it is settled (succeeded or failed). */
const settledDelivery = async (
  scope: TenantScope,
  webhook_id: string,
  timeout_ms?: number,
): Promise<WebhookDelivery> =>
  await waitFor(
    "a settled delivery",
    async () => {
      const page = await listDeliveries(db.pool, scope, webhook_id)
      const delivery = page?.data[0]
      return delivery !== undefined && delivery.status !== "pending" ? delivery : undefined
    },
    timeout_ms,
  )

const enqueue = async (scope: TenantScope, event_type: WebhookEventType, data = {}): Promise<string> => {
  const [id] = await enqueueEvents(db.pool, [{ ...scope, event_type, data, created_at: new Date() }])
  if (id === undefined) throw new Error("no event id")
  return id
}

const settle = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

beforeAll(async () => {
  db = await freshDatabase({ migrate: false })
  await runMigrations(db.pool, webhookMigrations)
})
afterEach(async () => {
  for (const engine of engines.splice(0)) await engine.stop()
  for (const receiver of receivers.splice(0)) await receiver.close()
  expect(errors.splice(0)).toEqual([])
})
afterAll(async () => {
  await db.drop()
})

describe("delivery", () => {
  it("delivers an event committed with its change once, signed; a rolled-back one never", async () => {
    const scope = newTenant()
    const receiver = await startReceiver(() => ({ status: 200, body: "ok" }))
    const webhook = await createWebhook(
      db.pool,
      scope,
      { url: receiver.url, events: ["payment.completed"] },
      box,
    )
    await start()
    const client = await db.pool.connect()
    let event_id: string | undefined
    try {
      await client.query("begin")
      await enqueueEvents(client, [
        { ...scope, event_type: "payment.completed", data: { order: "rolled back" }, created_at: new Date() },
      ])
      await client.query("rollback")
      await client.query("begin")
      ;[event_id] = await enqueueEvents(client, [
        {
          ...scope,
          event_type: "payment.completed",
          data: { metadata: { order_id: "o_1" } },
          created_at: new Date(),
        },
        { ...scope, event_type: "wallet.created", data: { note: "not subscribed" }, created_at: new Date() },
      ])
      await client.query("commit")
    } finally {
      client.release()
    }
    const delivery = await settledDelivery(scope, webhook.webhook_id)
    await settle(700)

    expect(receiver.received).toHaveLength(1)
    const [request] = receiver.received
    if (request === undefined) throw new Error("no request")
    expect(verifies(request, webhook.secret)).toBe(true)
    expect(request.headers["content-type"]).toBe("application/json")
    expect(request.headers["x-service-event-id"]).toBe(event_id)
    expect(request.headers["x-service-delivery-attempt"]).toBe("1")
    expect(request.headers["user-agent"]).toMatch(/Webhooks/)
    const body = JSON.parse(request.body)
    expect(Object.keys(body)).toEqual(["id", "event_type", "created_at", "data"])
    expect(body).toMatchObject({
      id: event_id,
      event_type: "payment.completed",
      data: { metadata: { order_id: "o_1" } },
    })
    expect(delivery).toMatchObject({ event_id, status: "succeeded", attempt_count: 1, last_status_code: 200 })
    expect(delivery.next_attempt_at).toBeNull()
    expect(delivery.attempts).toHaveLength(1)
    expect(delivery.attempts[0]).toMatchObject({
      attempt: 1,
      response_status: 200,
      response_excerpt: "ok",
      error: null,
    })
  })

  it("retries a receiver that rejects the signature, logs every attempt, and stops at success", async () => {
    const scope = newTenant()
    let secret = ""
    // The first two requests are checked against a body the receiver altered: they fail with 401.
    const receiver = await startReceiver((request, index) => {
      const body = index < 2 ? request.body.replace("o_2", "o_X") : request.body
      return verifies(request, secret, body)
        ? { status: 200, body: "thanks" }
        : { status: 401, body: "bad signature" }
    })
    const webhook = await createWebhook(
      db.pool,
      scope,
      { url: receiver.url, events: ["payment.failed"] },
      box,
    )
    secret = webhook.secret
    await start()
    await enqueue(scope, "payment.failed", { metadata: { order_id: "o_2" } })
    const delivery = await settledDelivery(scope, webhook.webhook_id)
    await settle(700)

    expect(receiver.received.map((r) => r.headers["x-service-delivery-attempt"])).toEqual(["1", "2", "3"])
    expect(delivery).toMatchObject({ status: "succeeded", attempt_count: 3, last_status_code: 200 })
    expect(delivery.attempts.map((a) => [a.attempt, a.response_status, a.response_excerpt])).toEqual([
      [1, 401, "bad signature"],
      [2, 401, "bad signature"],
      [3, 200, "thanks"],
    ])
    // Each attempt is signed afresh; all carry the same event id.
    expect(new Set(receiver.received.map((r) => r.headers["x-service-event-id"])).size).toBe(1)
  })

  it("fails a delivery after the last attempt, keeping a 1 KiB excerpt of each answer", async () => {
    const scope = newTenant()
    const receiver = await startReceiver(() => ({ status: 500, body: "é".repeat(2_000) }))
    const webhook = await createWebhook(
      db.pool,
      scope,
      { url: receiver.url, events: ["wallet.created"] },
      box,
    )
    await start({ retry_schedule: { ...fast, attempt_count_max: 3 } })
    await enqueue(scope, "wallet.created")
    const delivery = await settledDelivery(scope, webhook.webhook_id)
    await settle(700)

    expect(receiver.received).toHaveLength(3)
    expect(delivery).toMatchObject({
      status: "failed",
      attempt_count: 3,
      last_status_code: 500,
      next_attempt_at: null,
    })
    for (const attempt of delivery.attempts) {
      expect(attempt.response_status).toBe(500)
      expect(attempt.response_excerpt).toBe("é".repeat(512))
    }
  })

  it("counts a receiver that never answers as a failed attempt, at the timeout", async () => {
    const scope = newTenant()
    const receiver = await startReceiver(() => "hang")
    const webhook = await createWebhook(
      db.pool,
      scope,
      { url: receiver.url, events: ["payment.pending"] },
      box,
    )
    await start({ delivery_timeout_ms: 300, retry_schedule: { ...fast, attempt_count_max: 1 } })
    await enqueue(scope, "payment.pending")
    const delivery = await settledDelivery(scope, webhook.webhook_id)

    expect(delivery).toMatchObject({ status: "failed", attempt_count: 1, last_status_code: null })
    const [attempt] = delivery.attempts
    expect(attempt).toMatchObject({
      response_status: null,
      response_excerpt: null,
      error: "no response within 300 ms",
    })
    expect(attempt?.latency_ms).toBeGreaterThanOrEqual(290)
  })

  it("keeps one tenant's receiver that never answers, and its backlog, from holding every worker: another tenant's delivery goes out at once", async () => {
    const stuck = newTenant()
    const other = newTenant()
    const hanging = await startReceiver(() => "hang")
    const healthy = await startReceiver(() => ({ status: 200 }))
    await createWebhook(db.pool, stuck, { url: hanging.url, events: ["payment.pending"] }, box)
    const webhook = await createWebhook(
      db.pool,
      other,
      { url: healthy.url, events: ["payment.pending"] },
      box,
    )
    // 300 of the stuck tenant's deliveries are due before the other tenant's one.
    await enqueueEvents(
      db.pool,
      Array.from({ length: 300 }, () => ({
        ...stuck,
        event_type: "payment.pending" as const,
        data: {},
        created_at: new Date(),
      })),
    )
    // Six workers: a tenant and environment has a third of them by default, two.
    await start({
      worker_count: 6,
      delivery_timeout_ms: 4_000,
      retry_schedule: { ...fast, attempt_count_max: 1 },
    })
    await waitFor("the stuck tenant's first attempts", async () =>
      hanging.received.length >= 2 ? true : undefined,
    )
    const sent = Date.now()
    await enqueue(other, "payment.pending")
    const delivery = await settledDelivery(other, webhook.webhook_id)
    expect(delivery.status).toBe("succeeded")
    // Well inside the stuck receiver's timeout: no worker had to give up on it first, and the
    // stuck tenant's due jobs ahead of it were passed over.
    expect(Date.now() - sent).toBeLessThan(2_000)
    // The stuck tenant had its share of the workers (a third: two) at once, no more.
    expect(hanging.received.length).toBe(2)
    // Its backlog is not for the tests after this one.
    await db.pool.query(
      "delete from pgboss.job where name = $1 and state < 'active' and data->>'group' = $2",
      [delivery_queue, `${stuck.tenant_id}|${stuck.environment}`],
    )
  })

  it("counts a refused connection as a failed attempt", async () => {
    const scope = newTenant()
    const closed = await startReceiver(() => ({ status: 200 }))
    await closed.close()
    receivers.splice(receivers.indexOf(closed), 1)
    const webhook = await createWebhook(db.pool, scope, { url: closed.url, events: ["payment.pending"] }, box)
    await start({ retry_schedule: { ...fast, attempt_count_max: 1 } })
    await enqueue(scope, "payment.pending")
    const delivery = await settledDelivery(scope, webhook.webhook_id)
    expect(delivery.status).toBe("failed")
    expect(delivery.attempts[0]?.error).toMatch(/ECONNREFUSED/)
  })

  it("logs a request whose kept-alive connection closed before any answer as an attempt, and sends the next one at once", async () => {
    const scope = newTenant()
    // The second request (on the connection the first left open) is read, then the connection closed.
    const receiver = await startReceiver((_, index) => (index === 1 ? "reset" : { status: 200 }))
    const webhook = await createWebhook(
      db.pool,
      scope,
      { url: receiver.url, events: ["payment.completed"] },
      box,
    )
    // A minute between scheduled attempts: only the at-once attempt can come within the wait below.
    await start({
      retry_schedule: { attempt_count_max: 5, delay_base_ms: 60_000, delay_max_ms: 60_000, jitter: "none" },
    })
    await enqueue(scope, "payment.completed")
    await settledDelivery(scope, webhook.webhook_id)
    const second = await enqueue(scope, "payment.completed")
    const delivery = await waitFor("the second delivery, settled", async () => {
      const found = (await listDeliveries(db.pool, scope, webhook.webhook_id))?.data.find(
        (d) => d.event_id === second,
      )
      return found?.status === "succeeded" ? found : undefined
    })
    expect(delivery.attempts.map((a) => [a.attempt, a.response_status])).toEqual([
      [1, null],
      [2, 200],
    ])
    expect(delivery.attempts[0]?.error).toMatch(/closed before any answer/)
    // Each attempt reached the receiver once, under its own number.
    const attempts = receiver.received
      .filter((r) => r.headers["x-service-event-id"] === second)
      .map((r) => r.headers["x-service-delivery-attempt"])
    expect(attempts).toEqual(["1", "2"])
  })

  it("sends nothing unsigned when the KEK changed, and signs again once the secret is set anew", async () => {
    const scope = newTenant()
    const receiver = await startReceiver(() => ({ status: 204 }))
    const webhook = await createWebhook(
      db.pool,
      scope,
      { url: receiver.url, events: ["wallet.created"] },
      box,
    )
    const other = makeWebhookSecretBox(new Uint8Array(32).fill(9))
    // Held attempts look again every 200 ms here (every minute by default).
    const engine = await start({ unreadable_secret_hold_ms: 200 }, other)
    await enqueue(scope, "wallet.created")
    const error = await waitFor("the engine's report", async () => errors[0])
    expect(error).toBeInstanceOf(WebhookSecretUnreadable)
    expect(String(error)).toMatch(/CUSTODY_KEK changed/)
    // Held, not spent: looked at again and again, never sent, never counted as an attempt (before,
    // the job failed into pg-boss's retries, which end after 20, leaving it pending for good).
    await waitFor("several looks", async () => (errors.length >= 4 ? true : undefined))
    const held = await listDeliveries(db.pool, scope, webhook.webhook_id)
    expect(held?.data).toEqual([
      expect.objectContaining({ status: "pending", attempt_count: 0, attempts: [] }),
    ])
    expect(receiver.received).toEqual([])

    // Set anew under the new key: the held delivery goes out at its next look, signed with the new
    // secret alone (the old, unreadable one is left out).
    const secret = generateWebhookSecret()
    await updateWebhook(db.pool, scope, webhook.webhook_id, { secret }, other)
    const request = await waitFor("the held delivery", async () => receiver.received[0])
    expect(verifies(request, secret)).toBe(true)
    expect(request.headers["x-service-delivery-attempt"]).toBe("1")
    await stop(engine)
    errors.splice(0)
    await start({}, other)
    await enqueue(scope, "wallet.created")
    await waitFor("a new event's delivery", async () => receiver.received[1])
    expect(receiver.received.every((received) => verifies(received, secret))).toBe(true)
  })

  it("signs with both secrets while a rotation overlaps, each verifying with its own", async () => {
    const scope = newTenant()
    const receiver = await startReceiver(() => ({ status: 204 }))
    const webhook = await createWebhook(
      db.pool,
      scope,
      { url: receiver.url, events: ["identity.linked"] },
      box,
    )
    const secret = generateWebhookSecret()
    await updateWebhook(db.pool, scope, webhook.webhook_id, { secret }, box)
    await start()
    await enqueue(scope, "identity.linked")
    await settledDelivery(scope, webhook.webhook_id)

    const [request] = receiver.received
    if (request === undefined) throw new Error("no request")
    const header = String(request.headers["x-service-signature"])
    const [t, current, previous, ...rest] = header.split(",")
    expect(rest).toEqual([])
    const alone = (v1: string | undefined) => ({
      ...request,
      headers: { "x-service-signature": `${t},${v1}` },
    })
    expect(verifies(alone(current), secret)).toBe(true)
    expect(verifies(alone(current), webhook.secret)).toBe(false)
    expect(verifies(alone(previous), webhook.secret)).toBe(true)
    expect(verifies(alone(previous), secret)).toBe(false)
    expect(verifies(request, secret) && verifies(request, webhook.secret)).toBe(true)

    // Once the overlap is over, only the new secret signs.
    await db.pool.query(
      "update platform.webhooks set previous_secret_expires_at = now() - interval '1 second' where webhook_id = $1",
      [webhook.webhook_id],
    )
    await enqueue(scope, "identity.linked")
    await waitFor("a second request", async () => receiver.received[1])
    const later = String(receiver.received[1]?.headers["x-service-signature"])
    expect(later.split(",")).toHaveLength(2)
    const second = {
      path: "",
      headers: { "x-service-signature": later },
      body: receiver.received[1]?.body ?? "",
    }
    expect(verifies(second, secret)).toBe(true)
  })

  it("finishes a delivery exactly once when the engine restarts between two attempts", async () => {
    const scope = newTenant()
    const receiver = await startReceiver((_request, index) =>
      index === 0 ? { status: 503 } : { status: 200 },
    )
    const webhook = await createWebhook(
      db.pool,
      scope,
      { url: receiver.url, events: ["payment.completed"] },
      box,
    )
    // The retry is due 5 s after the first attempt: the first engine is gone by then, even on a
    // slow host.
    const schedule: RetrySchedule = {
      attempt_count_max: 3,
      delay_base_ms: 5_000,
      delay_max_ms: 5_000,
      jitter: "none",
    }
    const first = await start({ retry_schedule: schedule })
    await enqueue(scope, "payment.completed")
    const pending = await waitFor("the first attempt", async () => {
      const delivery = (await listDeliveries(db.pool, scope, webhook.webhook_id))?.data[0]
      return delivery?.attempt_count === 1 ? delivery : undefined
    })
    await stop(first)
    expect(pending).toMatchObject({ status: "pending", last_status_code: 503 })
    expect(receiver.received).toHaveLength(1)

    await start({ retry_schedule: schedule })
    const delivery = await settledDelivery(scope, webhook.webhook_id, 30_000)
    await settle(2_500)
    expect(receiver.received.map((r) => r.headers["x-service-delivery-attempt"])).toEqual(["1", "2"])
    expect(delivery).toMatchObject({ status: "succeeded", attempt_count: 2 })
    expect(delivery.attempts.map((a) => a.response_status)).toEqual([503, 200])
  })

  it("rolls a dispatch that fails midway back whole, and dispatches the event later", async () => {
    const scope = newTenant()
    const receiver = await startReceiver(() => ({ status: 200 }))
    const webhook = await createWebhook(
      db.pool,
      scope,
      { url: receiver.url, events: ["payment.completed"] },
      box,
    )
    const event_id = await enqueue(scope, "payment.completed")
    // A pg-boss pointed at a schema that does not exist fails the job insert, after the deliveries
    // were written.
    const broken = new PgBoss({ db: pgBossDb(db.pool), schema: "pgboss_absent" })
    const client = await db.pool.connect()
    try {
      await expect(dispatchBatch(client, broken, 500)).rejects.toThrow(/pgboss_absent.* does not exist/)
    } finally {
      client.release()
    }
    const state = await db.pool.query(
      `select e.dispatched_at, (select count(*)::int from platform.webhook_deliveries d where d.event_id = e.event_id) as n
       from platform.webhook_events e where e.event_id = $1`,
      [event_id],
    )
    expect(state.rows).toEqual([{ dispatched_at: null, n: 0 }])
    await start()
    expect(await settledDelivery(scope, webhook.webhook_id)).toMatchObject({ event_id, status: "succeeded" })
    expect(receiver.received).toHaveLength(1)
  })

  it("dispatches every event once with two engines running", async () => {
    const scope = newTenant()
    const receiver = await startReceiver(() => ({ status: 200 }))
    const webhooks = [
      await createWebhook(db.pool, scope, { url: `${receiver.url}/a`, events: ["payment.completed"] }, box),
      await createWebhook(
        db.pool,
        scope,
        {
          url: `${receiver.url}/b`,
          events: ["payment.completed", "wallet.created"],
        },
        box,
      ),
    ]
    const engineA = await start({ dispatch_batch_size: 7 })
    await start({ dispatch_batch_size: 7, standby_retry_ms: 10 })
    const event_count = 60
    for (let i = 0; i < event_count; i += 10) {
      await enqueueEvents(
        db.pool,
        Array.from({ length: 10 }, (_, j) => ({
          ...scope,
          event_type: "payment.completed" as const,
          data: { n: i + j },
          created_at: new Date(),
        })),
      )
      // Hand leadership over midway: the standby takes up where the leader stopped.
      if (i === 30) await stop(engineA)
    }
    await waitFor("every request", async () =>
      receiver.received.length >= 2 * event_count ? true : undefined,
    )
    await settle(700)
    expect(receiver.received).toHaveLength(2 * event_count)
    const pairs = new Set(receiver.received.map((r) => `${r.headers["x-service-event-id"]} ${r.path}`))
    expect(new Set(receiver.received.map((r) => r.headers["x-service-event-id"])).size).toBe(event_count)
    expect(pairs.size).toBe(2 * event_count)
    for (const webhook of webhooks) {
      const page = await listDeliveries(db.pool, scope, webhook.webhook_id, { limit: 100 })
      expect(page?.data.filter((d) => d.status === "succeeded")).toHaveLength(event_count)
    }
  })
})

describe("redelivery and test events", () => {
  /** A running engine, an endpoint answering as `respond` says, and one payment.completed for it. */
  const enqueuedOnce = async (respond: (request: Received, index: number) => Answer) => {
    const scope = newTenant()
    const receiver = await startReceiver(respond)
    const webhook = await createWebhook(
      db.pool,
      scope,
      { url: receiver.url, events: ["payment.completed"] },
      box,
    )
    const engine = await start()
    await enqueue(scope, "payment.completed")
    return { scope, receiver, engine, webhook }
  }

  /** That event delivered to a 200 receiver: what a redelivery repeats. */
  const deliveredOnce = async () => {
    const { scope, receiver, engine, webhook } = await enqueuedOnce(() => ({ status: 200 }))
    return { scope, receiver, engine, delivered: await settledDelivery(scope, webhook.webhook_id) }
  }

  it("redelivers with a fresh attempt, only for the delivery's own tenant", async () => {
    const { scope, receiver, engine, delivered } = await deliveredOnce()

    expect(await redeliver(db.pool, engine.boss, newTenant(), delivered.delivery_id)).toBeUndefined()
    expect(await getDelivery(db.pool, newTenant(), delivered.delivery_id)).toBeUndefined()
    const queued = await redeliver(db.pool, engine.boss, scope, delivered.delivery_id)
    expect(queued).toMatchObject({ delivery_id: delivered.delivery_id, status: "pending", attempt_count: 1 })
    const again = await waitFor("the redelivery", async () => {
      const delivery = await getDelivery(db.pool, scope, delivered.delivery_id)
      return delivery?.attempt_count === 2 ? delivery : undefined
    })
    expect(again.status).toBe("succeeded")
    expect(receiver.received.map((r) => r.headers["x-service-delivery-attempt"])).toEqual(["1", "2"])
    expect(receiver.received[1]?.headers["x-service-event-id"]).toBe(delivered.event_id)
  })

  it("sends one request for redeliveries asked for at once, the one attempt it records", async () => {
    const { scope, receiver, engine, delivered } = await deliveredOnce()

    await Promise.all(
      Array.from({ length: 5 }, () => redeliver(db.pool, engine.boss, scope, delivered.delivery_id)),
    )
    await waitFor("the redelivery", async () => {
      const delivery = await getDelivery(db.pool, scope, delivered.delivery_id)
      return delivery?.attempt_count === 2 && delivery.status === "succeeded" ? delivery : undefined
    })
    // The other four jobs of attempt 2 have run (or will): none may send.
    await settle(1_500)
    expect(receiver.received.map((r) => r.headers["x-service-delivery-attempt"])).toEqual(["1", "2"])
    expect((await getDelivery(db.pool, scope, delivered.delivery_id))?.attempts).toHaveLength(2)
  })

  it("lets a redelivery take an attempt whose claiming job died for good, once its claim is stale", async () => {
    const { scope, receiver, engine, delivered } = await deliveredOnce()
    // Attempt 2 was claimed by a job that never came back: a fresh claim would hold it, a stale one not.
    const claim = async (age: string) =>
      await db.pool.query(
        `update platform.webhook_deliveries set claim_attempt = 2, claim_job_id = 'a-dead-job',
           claimed_at = now() - $2::interval where delivery_id = $1`,
        [delivered.delivery_id, age],
      )
    await claim("0 seconds")
    await redeliver(db.pool, engine.boss, scope, delivered.delivery_id)
    await settle(1_500)
    expect(receiver.received).toHaveLength(1)
    await claim("2 hours")
    await redeliver(db.pool, engine.boss, scope, delivered.delivery_id)
    const again = await waitFor("the redelivery", async () => {
      const delivery = await getDelivery(db.pool, scope, delivered.delivery_id)
      return delivery?.attempt_count === 2 ? delivery : undefined
    })
    expect(again.status).toBe("succeeded")
    expect(receiver.received.map((r) => r.headers["x-service-delivery-attempt"])).toEqual(["1", "2"])
  })

  it("does not drop a redelivery asked for while a dead job's claim still holds the attempt: it goes out when the claim lapses", async () => {
    const { scope, receiver, engine, delivered } = await deliveredOnce()
    // Attempt 2 claimed by a job that died 2 s before its claim lapses (jobs live 70 s here).
    const lifetime_s = jobLifetimeSeconds(10_000)
    await db.pool.query(
      `update platform.webhook_deliveries set claim_attempt = 2, claim_job_id = 'a-dead-job',
         claimed_at = now() - make_interval(secs => $2) where delivery_id = $1`,
      [delivered.delivery_id, lifetime_s - 2],
    )
    await redeliver(db.pool, engine.boss, scope, delivered.delivery_id)
    const again = await waitFor("the redelivery, after the claim lapsed", async () => {
      const delivery = await getDelivery(db.pool, scope, delivered.delivery_id)
      return delivery?.attempt_count === 2 ? delivery : undefined
    })
    expect(again.status).toBe("succeeded")
    expect(receiver.received.map((r) => r.headers["x-service-delivery-attempt"])).toEqual(["1", "2"])
  })

  it("follows an attempt being sent when a redelivery is asked for with a fresh attempt, at once", async () => {
    // The first attempt takes 1.5 s to answer: the redelivery is asked for while it is being sent.
    const { scope, receiver, engine, webhook } = await enqueuedOnce((_, index) =>
      index === 0 ? { status: 200, delay_ms: 1_500 } : { status: 200 },
    )
    await waitFor("the first attempt, arrived", async () =>
      receiver.received.length === 1 ? true : undefined,
    )
    const delivery_id = (await listDeliveries(db.pool, scope, webhook.webhook_id))?.data[0]?.delivery_id ?? ""
    expect(await redeliver(db.pool, engine.boss, scope, delivery_id)).toMatchObject({ status: "pending" })
    const again = await waitFor("the fresh attempt", async () => {
      const delivery = await getDelivery(db.pool, scope, delivery_id)
      return delivery?.attempt_count === 2 && delivery.status === "succeeded" ? delivery : undefined
    })
    expect(again.attempts.map((a) => [a.attempt, a.response_status])).toEqual([
      [1, 200],
      [2, 200],
    ])
    // No third: the redelivery's own job found the attempt it carried taken, and a later attempt
    // (claimed after the request) counts as the fresh one.
    await settle(1_500)
    expect(receiver.received.map((r) => r.headers["x-service-delivery-attempt"])).toEqual(["1", "2"])
    expect((await getDelivery(db.pool, scope, delivery_id))?.attempts).toHaveLength(2)
  })

  it("records an attempt being sent when a redelivery is asked for and the endpoint disabled meanwhile, then sends no more", async () => {
    const { scope, receiver, engine, webhook } = await enqueuedOnce((_, index) =>
      index === 0 ? { status: 200, delay_ms: 1_500 } : { status: 200 },
    )
    await waitFor("the first attempt, arrived", async () =>
      receiver.received.length === 1 ? true : undefined,
    )
    const delivery_id = (await listDeliveries(db.pool, scope, webhook.webhook_id))?.data[0]?.delivery_id ?? ""
    // The redelivery's job finds the endpoint disabled while attempt 1 is still being sent: it must
    // not end the delivery under that attempt, which then could not record itself.
    await redeliver(db.pool, engine.boss, scope, delivery_id)
    await updateWebhook(db.pool, scope, webhook.webhook_id, { enabled: false }, box)
    const ended = await settledDelivery(scope, webhook.webhook_id)
    expect(ended.status).toBe("failed")
    expect(ended.attempts.map((a) => [a.attempt, a.response_status])).toEqual([[1, 200]])
    await settle(1_500)
    expect(receiver.received.map((r) => r.headers["x-service-delivery-attempt"])).toEqual(["1"])
  })

  it("sends a test event to the one endpoint named, with sample data", async () => {
    const scope = newTenant()
    const named = await startReceiver(() => ({ status: 200 }))
    const other = await startReceiver(() => ({ status: 200 }))
    const webhook = await createWebhook(db.pool, scope, { url: named.url, events: ["wallet.created"] }, box)
    await createWebhook(db.pool, scope, { url: other.url, events: ["payment.completed"] }, box)
    await start()
    expect(
      await simulateEvent(db.pool, newTenant(), {
        event_type: "payment.completed",
        webhook_id: webhook.webhook_id,
      }),
    ).toBeUndefined()
    const sent = await simulateEvent(db.pool, scope, {
      event_type: "payment.completed",
      webhook_id: webhook.webhook_id,
    })
    await settledDelivery(scope, webhook.webhook_id)
    await settle(700)

    expect(other.received).toHaveLength(0)
    expect(named.received).toHaveLength(1)
    const body = JSON.parse(named.received[0]?.body ?? "{}")
    expect(body).toMatchObject({
      id: sent?.event_id,
      event_type: "payment.completed",
      data: { status: "completed", metadata: { order_id: "order_1042" }, simulated: true },
    })
  })

  it.each([
    ["deleted", (scope: TenantScope, webhook_id: string) => deleteWebhook(db.pool, scope, webhook_id)],
    [
      "disabled",
      (scope: TenantScope, webhook_id: string) =>
        updateWebhook(db.pool, scope, webhook_id, { enabled: false }, box),
    ],
  ] as const)(
    "ends a pending delivery as failed at once, without a request, when its endpoint is %s",
    async (_, endIt) => {
      const scope = newTenant()
      const receiver = await startReceiver(() => ({ status: 500 }))
      const webhook = await createWebhook(
        db.pool,
        scope,
        {
          url: receiver.url,
          events: ["payment.completed"],
        },
        box,
      )
      // The next attempt is due in a minute: the delivery must not stay pending until then.
      await start({ retry_schedule: { ...fast, delay_base_ms: 60_000, delay_max_ms: 60_000 } })
      await enqueue(scope, "payment.completed")
      const first = await waitFor("the first attempt", async () => {
        const delivery = (await listDeliveries(db.pool, scope, webhook.webhook_id))?.data[0]
        return delivery?.attempt_count === 1 ? delivery : undefined
      })
      expect(first.status).toBe("pending")
      await endIt(scope, webhook.webhook_id)
      const failed = await getDelivery(db.pool, scope, first.delivery_id)
      expect(failed).toMatchObject({ status: "failed", attempt_count: 1, next_attempt_at: null })
      expect(receiver.received).toHaveLength(1)
    },
  )
})

describe("production endpoints", () => {
  /** A TCP listener that counts connections: none may arrive. */
  const startListener = async () => {
    let connection_count = 0
    const server = net.createServer((socket) => {
      connection_count += 1
      socket.destroy()
    })
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    return {
      port: (server.address() as AddressInfo).port,
      connectionCount: () => connection_count,
      close: () => new Promise((resolve) => server.close(resolve)),
    }
  }

  it.each([
    [
      "localhost, loopback by name (RFC 6761)",
      "localhost",
      /^refused: localhost resolves to 127\.0\.0\.1 \(loopback\)/,
    ],
    ["a loopback literal", "127.0.0.1", /^refused: 127\.0\.0\.1 is not a public address \(loopback\)$/],
    [
      "an IPv4-mapped loopback literal",
      "[::ffff:7f00:1]",
      /^refused: ::ffff:7f00:1 is not a public address \(loopback\)$/,
    ],
  ])("refuses to connect to %s and logs each attempt as failed", async (_name, host, refusal) => {
    const listener = await startListener()
    try {
      const scope: TenantScope = { ...newTenant(), environment: "production" }
      const webhook = await createWebhook(
        db.pool,
        scope,
        {
          url: "https://example.com/hooks",
          events: ["payment.completed"],
        },
        box,
      )
      // The API refuses such a URL in production; a row stored before that check existed is what
      // the delivery-time check is for (as is a public name whose DNS answer changed since).
      await db.pool.query("update platform.webhooks set url = $2 where webhook_id = $1", [
        webhook.webhook_id,
        `https://${host}:${listener.port}/hooks`,
      ])
      await start({ retry_schedule: { ...fast, attempt_count_max: 2 } })
      await enqueue(scope, "payment.completed")
      const delivery = await settledDelivery(scope, webhook.webhook_id)

      expect(delivery).toMatchObject({ status: "failed", attempt_count: 2, last_status_code: null })
      expect(delivery.attempts).toHaveLength(2)
      for (const attempt of delivery.attempts) {
        expect(attempt).toMatchObject({ response_status: null, response_excerpt: null })
        expect(attempt.error).toMatch(refusal)
      }
      expect(listener.connectionCount()).toBe(0)
    } finally {
      await listener.close()
    }
  })

  it("leaves the sandbox free to deliver to the same loopback name", async () => {
    const scope = newTenant()
    const receiver = await startReceiver(() => ({ status: 200 }))
    const url = receiver.url.replace("127.0.0.1", "localhost")
    const webhook = await createWebhook(db.pool, scope, { url, events: ["payment.completed"] }, box)
    await start()
    await enqueue(scope, "payment.completed")
    expect(await settledDelivery(scope, webhook.webhook_id)).toMatchObject({ status: "succeeded" })
    expect(receiver.received).toHaveLength(1)
  })
})
