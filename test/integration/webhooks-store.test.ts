// Proves the webhook store on real PostgreSQL: every function is scoped to one tenant and
// environment (another tenant's endpoint is simply not found), lists page by cursor without gaps or
// repeats, only checked and normalised URLs are stored, a secret rotation keeps the old secret for
// the overlap, deletion is soft, a tenant has at most 16 endpoints per environment, and the outbox insert writes in the caller's transaction, so a
// rollback leaves nothing. Also checks the retry schedule's arithmetic (about three days of attempts).
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { AssertionFailed } from "../../domain/assert.ts"
import { runMigrations } from "../../src/db/migrate.ts"
import { generateWebhookSecret } from "../../src/webhooks/ids.ts"
import { nominalRetryDelayMs, retryDelayMs, retrySchedule, retryWindowMs } from "../../src/webhooks/retry.ts"
import { webhookMigrations } from "../../src/webhooks/schema.ts"
import {
  makeWebhookSecretBox,
  sealStoredSecrets,
  WebhookSecretUnreadable,
} from "../../src/webhooks/secrets.ts"
import {
  createWebhook,
  deleteWebhook,
  enqueueEvents,
  getDelivery,
  getWebhook,
  listDeliveries,
  listWebhooks,
  previous_secret_lifetime_s,
  type TenantScope,
  toPublicWebhook,
  updateWebhook,
  WebhookEndpointsLimit,
  webhook_endpoints_max,
} from "../../src/webhooks/store.ts"
import { freshDatabase, type TestDatabase } from "../support/db.ts"

const kek = new Uint8Array(32).fill(7)
const box = makeWebhookSecretBox(kek)

let db: TestDatabase
beforeAll(async () => {
  db = await freshDatabase({ migrate: false })
  await runMigrations(db.pool, webhookMigrations)
})
afterAll(async () => {
  await db.drop()
})

const acme: TenantScope = { tenant_id: "ten_acme", environment: "sandbox" }
const globex: TenantScope = { tenant_id: "ten_globex", environment: "sandbox" }
const acmeLive: TenantScope = { tenant_id: "ten_acme", environment: "production" }
const url = "https://example.com/hooks"

describe("webhook endpoints", () => {
  it("are found only by their own tenant and environment", async () => {
    const webhook = await createWebhook(db.pool, acme, { url, events: ["payment.completed"] }, box)
    expect(webhook.webhook_id).toMatch(/^whk_[0-9a-f]{32}$/)
    expect(webhook.secret).toMatch(/^whsec_[0-9a-f]{64}$/)
    expect(webhook.enabled).toBe(true)
    const { secret, ...stored } = webhook
    expect(await getWebhook(db.pool, acme, webhook.webhook_id)).toEqual(stored)
    expect(stored.secret_last4).toBe(secret.slice(-4))

    for (const other of [globex, acmeLive]) {
      expect(await getWebhook(db.pool, other, webhook.webhook_id)).toBeUndefined()
      expect(await updateWebhook(db.pool, other, webhook.webhook_id, { enabled: false }, box)).toBeUndefined()
      expect(await deleteWebhook(db.pool, other, webhook.webhook_id)).toBe(false)
      expect(await listDeliveries(db.pool, other, webhook.webhook_id)).toBeUndefined()
      expect((await listWebhooks(db.pool, other)).data.map((w) => w.webhook_id)).not.toContain(
        webhook.webhook_id,
      )
    }
    // Nothing the other tenants tried changed it.
    expect(await getWebhook(db.pool, acme, webhook.webhook_id)).toEqual(stored)
  })

  it("list newest first, page by cursor without gaps or repeats", async () => {
    const tenant: TenantScope = { tenant_id: "ten_pages", environment: "sandbox" }
    const created: string[] = []
    for (let i = 0; i < 16; i++) {
      created.push(
        (await createWebhook(db.pool, tenant, { url: `${url}/${i}`, events: ["wallet.created"] }, box))
          .webhook_id,
      )
    }
    const seen: string[] = []
    let cursor: string | undefined
    const pages: Array<{ count: number; has_more: boolean }> = []
    for (let page = 0; page < 5; page++) {
      const result = await listWebhooks(db.pool, tenant, {
        limit: 6,
        ...(cursor ? { starting_after: cursor } : {}),
      })
      seen.push(...result.data.map((w) => w.webhook_id))
      pages.push({ count: result.data.length, has_more: result.has_more })
      if (result.next_cursor === null) break
      expect(result.next_cursor).toBe(result.data[result.data.length - 1]?.webhook_id)
      cursor = result.next_cursor
    }
    expect(pages).toEqual([
      { count: 6, has_more: true },
      { count: 6, has_more: true },
      { count: 4, has_more: false },
    ])
    // Ids are time-ordered to the millisecond (ties in random order), so the order is the ids' own.
    expect(seen).toEqual([...created].sort().reverse())
    expect((await listWebhooks(db.pool, tenant)).data).toHaveLength(10)
    const exact = await listWebhooks(db.pool, tenant, { limit: 16 })
    expect({ count: exact.data.length, has_more: exact.has_more, next_cursor: exact.next_cursor }).toEqual({
      count: 16,
      has_more: false,
      next_cursor: null,
    })
  })

  it.each([0, 101, 1.5])("refuses a page limit of %s", async (limit) => {
    await expect(listWebhooks(db.pool, acme, { limit })).rejects.toThrow(AssertionFailed)
  })

  it("change the fields given and nothing else", async () => {
    const webhook = await createWebhook(
      db.pool,
      acme,
      {
        url,
        events: ["payment.completed"],
        description: "orders",
      },
      box,
    )
    const updated = await updateWebhook(
      db.pool,
      acme,
      webhook.webhook_id,
      {
        url: "https://example.com/v2",
        events: ["payment.failed", "payment.failed", "wallet.created"],
        enabled: false,
      },
      box,
    )
    expect(updated).toMatchObject({
      url: "https://example.com/v2",
      events: ["payment.failed", "wallet.created"],
      enabled: false,
      description: "orders",
      secret_last4: webhook.secret_last4,
      previous_secret_expires_at: null,
    })
    const cleared = await updateWebhook(db.pool, acme, webhook.webhook_id, { description: null }, box)
    expect(cleared).toMatchObject({ description: null, url: "https://example.com/v2", enabled: false })
    expect(cleared?.updated_at.getTime()).toBeGreaterThanOrEqual(webhook.updated_at.getTime())
  })

  /** The endpoint's secrets as stored, opened with the box. */
  const storedSecrets = async (webhook_id: string) => {
    const { rows } = await db.pool.query<{ secret: string; previous_secret: string | null }>(
      "select secret, previous_secret from platform.webhooks where webhook_id = $1",
      [webhook_id],
    )
    const row = rows[0]
    if (row === undefined) throw new Error(`no webhook ${webhook_id}`)
    return {
      secret: box.open(webhook_id, row.secret),
      previous: row.previous_secret === null ? null : box.open(webhook_id, row.previous_secret),
    }
  }

  it("keep the previous secret for a day when the secret changes", async () => {
    const webhook = await createWebhook(db.pool, acme, { url, events: ["payment.completed"] }, box)
    const same = await updateWebhook(db.pool, acme, webhook.webhook_id, { secret: webhook.secret }, box)
    expect(same?.previous_secret_expires_at).toBeNull()
    expect(await storedSecrets(webhook.webhook_id)).toEqual({ secret: webhook.secret, previous: null })

    const secret = generateWebhookSecret()
    const before_ms = Date.now()
    const rotated = await updateWebhook(db.pool, acme, webhook.webhook_id, { secret }, box)
    expect(rotated?.secret_last4).toBe(secret.slice(-4))
    expect(await storedSecrets(webhook.webhook_id)).toEqual({ secret, previous: webhook.secret })
    const expires_ms = rotated?.previous_secret_expires_at?.getTime() ?? 0
    expect(Math.abs(expires_ms - before_ms - previous_secret_lifetime_s * 1000)).toBeLessThan(60_000)

    // A second rotation within the overlap replaces the previous secret with the one just retired.
    const third = generateWebhookSecret()
    await updateWebhook(db.pool, acme, webhook.webhook_id, { secret: third }, box)
    expect(await storedSecrets(webhook.webhook_id)).toEqual({ secret: third, previous: secret })
  })

  it("store secrets sealed: the table holds neither secret, and only the platform's key opens them", async () => {
    const first = "whsec_first_secret_0123456789"
    const second = "whsec_second_secret_987654321"
    const webhook = await createWebhook(
      db.pool,
      acme,
      { url, events: ["payment.completed"], secret: first },
      box,
    )
    await updateWebhook(db.pool, acme, webhook.webhook_id, { secret: second }, box)
    const { rows } = await db.pool.query("select * from platform.webhooks where webhook_id = $1", [
      webhook.webhook_id,
    ])
    const stored = JSON.stringify(rows)
    for (const secret of [first, second]) expect(stored).not.toContain(secret.slice(0, -4))
    expect(rows[0]).toMatchObject({ secret_last4: "4321" })
    expect(await storedSecrets(webhook.webhook_id)).toEqual({ secret: second, previous: first })
    // Another KEK, or the sealed secret of another endpoint, does not open.
    const other = makeWebhookSecretBox(new Uint8Array(32).fill(8))
    expect(() => other.open(webhook.webhook_id, rows[0].secret)).toThrow(WebhookSecretUnreadable)
    expect(() => other.open(webhook.webhook_id, rows[0].secret)).toThrow(/CUSTODY_KEK changed/)
    expect(() => box.open("whk_other", rows[0].secret)).toThrow(/altered or moved/)
  })

  it("seal at start the secrets stored before sealing, once, keeping a rotation's overlap", async () => {
    const webhook = await createWebhook(db.pool, acme, { url, events: ["payment.completed"] }, box)
    // As migration 323 left a row written before: both secrets in plain text, no fingerprint.
    await db.pool.query(
      `update platform.webhooks set secret = 'whsec_legacy_current_0001', previous_secret = 'whsec_legacy_prev_0002',
         previous_secret_expires_at = now() + interval '1 hour', secret_fingerprint = null, secret_last4 = '0001'
       where webhook_id = $1`,
      [webhook.webhook_id],
    )
    // The unsealed secrets still sign until the platform seals them.
    expect(await storedSecrets(webhook.webhook_id)).toEqual({
      secret: "whsec_legacy_current_0001",
      previous: "whsec_legacy_prev_0002",
    })
    expect(await sealStoredSecrets(db.pool, box)).toBeGreaterThanOrEqual(1)
    expect(await sealStoredSecrets(db.pool, box)).toBe(0)
    const { rows } = await db.pool.query(
      "select secret, previous_secret, secret_fingerprint from platform.webhooks where webhook_id = $1",
      [webhook.webhook_id],
    )
    expect(JSON.stringify(rows)).not.toContain("legacy")
    expect(rows[0].secret_fingerprint).toBe(box.fingerprint("whsec_legacy_current_0001"))
    expect(await storedSecrets(webhook.webhook_id)).toEqual({
      secret: "whsec_legacy_current_0001",
      previous: "whsec_legacy_prev_0002",
    })
    // Its fingerprint now tells the same secret from a new one.
    const same = await updateWebhook(
      db.pool,
      acme,
      webhook.webhook_id,
      { secret: "whsec_legacy_current_0001" },
      box,
    )
    expect(same?.previous_secret_expires_at?.getTime()).toBeGreaterThan(Date.now())
    expect((await storedSecrets(webhook.webhook_id)).previous).toBe("whsec_legacy_prev_0002")
  })

  it("show the secret only masked in the public view", async () => {
    const webhook = await createWebhook(
      db.pool,
      acme,
      {
        url,
        events: ["payment.completed"],
        secret: "whsec_abcd1234",
      },
      box,
    )
    const view = toPublicWebhook(webhook)
    expect(JSON.stringify(view)).not.toContain("whsec_abcd1234")
    expect(view).toMatchObject({
      webhook_id: webhook.webhook_id,
      secret_last4: "1234",
      previous_secret_expires_at: null,
    })
    const rotated = await updateWebhook(db.pool, acme, webhook.webhook_id, { secret: "whsec_efgh5678" }, box)
    if (rotated === undefined) throw new Error("rotated webhook not found")
    const rotatedView = toPublicWebhook(rotated)
    expect(JSON.stringify(rotatedView)).not.toContain("whsec_abcd1234")
    expect(rotatedView.previous_secret_expires_at).toBe(rotated.previous_secret_expires_at?.toISOString())
  })

  it("are deleted softly: gone from the API, kept in the table", async () => {
    const webhook = await createWebhook(db.pool, acme, { url, events: ["payment.completed"] }, box)
    expect(await deleteWebhook(db.pool, acme, webhook.webhook_id)).toBe(true)
    expect(await deleteWebhook(db.pool, acme, webhook.webhook_id)).toBe(false)
    expect(await getWebhook(db.pool, acme, webhook.webhook_id)).toBeUndefined()
    expect(await updateWebhook(db.pool, acme, webhook.webhook_id, { enabled: true }, box)).toBeUndefined()
    const kept = await db.pool.query("select deleted_at from platform.webhooks where webhook_id = $1", [
      webhook.webhook_id,
    ])
    expect(kept.rows[0]?.deleted_at).toBeInstanceOf(Date)
  })

  it("number at most webhook_endpoints_max per tenant and environment, creations at once included; deleted ones free a place", async () => {
    const crowded: TenantScope = { tenant_id: "ten_crowded", environment: "sandbox" }
    const outcomes = await Promise.allSettled(
      Array.from({ length: webhook_endpoints_max + 4 }, () =>
        createWebhook(db.pool, crowded, { url, events: ["payment.completed"] }, box),
      ),
    )
    const created = outcomes.flatMap((outcome) => (outcome.status === "fulfilled" ? [outcome.value] : []))
    expect(created).toHaveLength(webhook_endpoints_max)
    for (const outcome of outcomes) {
      if (outcome.status === "rejected") expect(outcome.reason).toBeInstanceOf(WebhookEndpointsLimit)
    }
    // Another environment and another tenant have their own.
    await createWebhook(
      db.pool,
      { ...crowded, environment: "production" },
      { url, events: ["payment.completed"] },
      box,
    )
    await createWebhook(
      db.pool,
      { ...crowded, tenant_id: "ten_roomy" },
      { url, events: ["payment.completed"] },
      box,
    )
    await deleteWebhook(db.pool, crowded, created[0]?.webhook_id ?? "")
    await createWebhook(db.pool, crowded, { url, events: ["payment.completed"] }, box)
    await expect(
      createWebhook(db.pool, crowded, { url, events: ["payment.completed"] }, box),
    ).rejects.toBeInstanceOf(WebhookEndpointsLimit)
  })

  it("keep only URLs checkWebhookUrl accepted, as it wrote them (its cases: test/unit/webhook-url.test.ts)", async () => {
    for (const [scope, unchecked] of [
      [acme, "HTTP://EXAMPLE.COM/hooks"],
      [acme, " https://example.com/hooks"],
      [acme, "http:example.com/hooks"],
      [acmeLive, "https://127.0.0.1/hooks"],
      [acmeLive, "http://example.com/hooks"],
    ] as const) {
      await expect(
        createWebhook(db.pool, scope, { url: unchecked, events: ["wallet.created"] }, box),
      ).rejects.toThrow(AssertionFailed)
    }
    const webhook = await createWebhook(db.pool, acme, { url, events: ["wallet.created"] }, box)
    await expect(
      updateWebhook(db.pool, acme, webhook.webhook_id, { url: "HTTPS://EXAMPLE.COM/hooks" }, box),
    ).rejects.toThrow(AssertionFailed)
    expect((await getWebhook(db.pool, acme, webhook.webhook_id))?.url).toBe(url)
  })
})

describe("the outbox", () => {
  const row = (event_type: "payment.completed" | "wallet.created", order_id: string) => ({
    ...acme,
    event_type,
    data: { metadata: { order_id } },
    created_at: new Date("2025-01-02T03:04:05.678Z"),
  })

  it("writes many events in the caller's transaction, in order", async () => {
    const client = await db.pool.connect()
    try {
      await client.query("begin")
      const ids = await enqueueEvents(client, [row("payment.completed", "a"), row("wallet.created", "b")])
      // Not visible outside the transaction before it commits.
      const outside = await db.pool.query(
        "select count(*)::int as n from platform.webhook_events where event_id = any ($1)",
        [ids],
      )
      expect(outside.rows[0]?.n).toBe(0)
      await client.query("commit")
      expect(ids).toHaveLength(2)
      for (const id of ids) expect(id).toMatch(/^evt_[0-9a-f]{32}$/)
      const stored = await db.pool.query(
        "select event_id, event_type, data, created_at, dispatched_at from platform.webhook_events where event_id = any ($1) order by position",
        [ids],
      )
      expect(stored.rows).toEqual([
        {
          event_id: ids[0],
          event_type: "payment.completed",
          data: { metadata: { order_id: "a" } },
          created_at: new Date("2025-01-02T03:04:05.678Z"),
          dispatched_at: null,
        },
        {
          event_id: ids[1],
          event_type: "wallet.created",
          data: { metadata: { order_id: "b" } },
          created_at: new Date("2025-01-02T03:04:05.678Z"),
          dispatched_at: null,
        },
      ])
    } finally {
      client.release()
    }
  })

  it("leaves nothing when the caller rolls back, and does nothing for no rows", async () => {
    const client = await db.pool.connect()
    try {
      await client.query("begin")
      const ids = await enqueueEvents(client, [row("payment.completed", "rolled back")])
      await client.query("rollback")
      const stored = await db.pool.query(
        "select count(*)::int as n from platform.webhook_events where event_id = any ($1)",
        [ids],
      )
      expect(stored.rows[0]?.n).toBe(0)
      expect(await enqueueEvents(client, [])).toEqual([])
    } finally {
      client.release()
    }
  })

  it("has no deliveries to show for an unknown delivery id", async () => {
    expect(await getDelivery(db.pool, acme, "dlv_00000000000000000000000000000000")).toBeUndefined()
  })
})

describe("the retry schedule", () => {
  it("doubles from 30 s and stops growing at 6 h", () => {
    const minutes = Array.from({ length: 12 }, (_, i) => nominalRetryDelayMs(retrySchedule, i + 1) / 60_000)
    expect(minutes).toEqual([0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256, 360, 360])
  })

  it("spans about three days: 2 to 4.1 days, 3.1 on average", () => {
    const day_ms = 24 * 60 * 60 * 1000
    const window = retryWindowMs(retrySchedule)
    expect(window.mean_ms / day_ms).toBeCloseTo(3.08, 2)
    expect(window.min_ms / day_ms).toBeCloseTo(2.05, 2)
    expect(window.max_ms / day_ms).toBeCloseTo(4.1, 1)
  })

  it("jitters between half the nominal delay and all of it, and ends at the last attempt", () => {
    expect(retryDelayMs(retrySchedule, 3, 0)).toBe(60_000)
    expect(retryDelayMs(retrySchedule, 3, 0.999_999)).toBe(120_000)
    expect(retryDelayMs(retrySchedule, retrySchedule.attempt_count_max - 1, 0.5)).toBe(16_200_000)
    expect(retryDelayMs(retrySchedule, retrySchedule.attempt_count_max, 0.5)).toBeUndefined()
    expect(retryDelayMs({ ...retrySchedule, jitter: "none" }, 2, 0.3)).toBe(60_000)
  })
})
