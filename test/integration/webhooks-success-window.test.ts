// Mutation-review test: "A 2xx within 10 s is success; anything else (401 included, 3xx, timeouts,
// ...) is retried" (README, Webhooks). A 3xx is a failed attempt, retried; the engine's default
// timeout is 10 s: an answer at 9 s counts, one at 11 s is a failed attempt.
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { runMigrations } from "../../src/db/migrate.ts"
import {
  startWebhookEngine,
  type WebhookEngine,
  type WebhookEngineOptions,
} from "../../src/webhooks/engine.ts"
import type { RetrySchedule } from "../../src/webhooks/retry.ts"
import { webhookMigrations } from "../../src/webhooks/schema.ts"
import { makeWebhookSecretBox } from "../../src/webhooks/secrets.ts"
import {
  createWebhook,
  enqueueEvents,
  listDeliveries,
  type TenantScope,
  type WebhookDelivery,
} from "../../src/webhooks/store.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"

const box = makeWebhookSecretBox(new Uint8Array(32).fill(7))
const fast: RetrySchedule = { attempt_count_max: 5, delay_base_ms: 10, delay_max_ms: 40, jitter: "none" }
let db: TestDatabase
let tenant_count = 0
const newTenant = (): TenantScope => ({ tenant_id: `ten_sw_${++tenant_count}`, environment: "sandbox" })
const engines: WebhookEngine[] = []
const servers: http.Server[] = []
const errors: unknown[] = []

const start = async (options: WebhookEngineOptions): Promise<void> => {
  engines.push(
    await startWebhookEngine({
      pool: db.pool,
      secrets: box,
      options: {
        poll_interval_ms: 20,
        worker_poll_interval_ms: 500,
        onError: (e) => errors.push(e),
        ...options,
      },
    }),
  )
}

/** A receiver answering the n-th request (0-based) with `answer(n)`: a status after a delay. */
const receiver = async (answer: (n: number) => { status: number; delay_ms?: number }) => {
  let n = 0
  const server = http.createServer((request, response) => {
    request.resume()
    request.on("end", () => {
      const { status, delay_ms = 0 } = answer(n++)
      setTimeout(() => {
        if (!response.destroyed)
          response.writeHead(status, status === 302 ? { location: "/elsewhere" } : {}).end()
      }, delay_ms)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  servers.push(server)
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`
}

const settled = async (
  scope: TenantScope,
  webhook_id: string,
  timeout_ms = 30_000,
): Promise<WebhookDelivery> => {
  const deadline = Date.now() + timeout_ms
  while (Date.now() < deadline) {
    const delivery = (await listDeliveries(db.pool, scope, webhook_id))?.data[0]
    if (delivery !== undefined && delivery.status !== "pending") return delivery
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  throw new Error("no settled delivery")
}

const endpointFor = async (url: string) => {
  const scope = newTenant()
  const webhook = await createWebhook(db.pool, scope, { url, events: ["wallet.created"] }, box)
  await enqueueEvents(db.pool, [{ ...scope, event_type: "wallet.created", data: {}, created_at: new Date() }])
  return { scope, webhook_id: webhook.webhook_id }
}

beforeAll(async () => {
  db = await freshDatabase({ migrate: false })
  await runMigrations(db.pool, webhookMigrations)
})
afterEach(async () => {
  for (const engine of engines.splice(0)) await engine.stop()
  for (const server of servers.splice(0)) {
    server.closeAllConnections()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  }
  expect(errors.splice(0)).toEqual([])
})
afterAll(async () => {
  await db.drop()
})

describe("the success window", () => {
  it("counts a 3xx as a failed attempt and retries it", async () => {
    const redirected = await endpointFor(await receiver((n) => ({ status: n === 0 ? 302 : 200 })))
    const unmodified = await endpointFor(await receiver((n) => ({ status: n === 0 ? 399 : 204 })))
    await start({ retry_schedule: fast })
    for (const { scope, webhook_id } of [redirected, unmodified]) {
      const delivery = await settled(scope, webhook_id)
      expect(delivery.status).toBe("succeeded")
      expect(delivery.attempt_count).toBe(2)
      expect(delivery.attempts.map((a) => a.attempt)).toEqual([1, 2])
    }
  })

  it("waits 10 s for an answer by default: one at 9 s succeeds, one at 11 s is a failed attempt", async () => {
    const in_time = await endpointFor(await receiver(() => ({ status: 200, delay_ms: 9_000 })))
    const too_late = await endpointFor(await receiver(() => ({ status: 200, delay_ms: 11_000 })))
    await start({ retry_schedule: { ...fast, attempt_count_max: 1 } })
    const ok = await settled(in_time.scope, in_time.webhook_id)
    expect(ok).toMatchObject({ status: "succeeded", attempt_count: 1, last_status_code: 200 })
    const late = await settled(too_late.scope, too_late.webhook_id)
    expect(late).toMatchObject({ status: "failed", attempt_count: 1, last_status_code: null })
    expect(late.attempts[0]?.error).toBe("no response within 10000 ms")
  }, 60_000)
})
